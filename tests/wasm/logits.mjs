// One wasm variant (npm/pkg/<variant>/) on the real model gives the native reference's logits
// bit for bit and the same greedy tokens. Run by tests/tests/wasm_browser.rs, which writes the
// native results:
//   node tests/wasm/logits.mjs <pkg dir> <model.gguf> <cases.json> [max prompt tokens]
//   node tests/wasm/logits.mjs --chromium <threads> <pkg dir> <model.gguf> <cases.json> [max]
// cases.json: [{ name, prompt_ids, logits_f32 (path to the native last-position logits),
//                greedy (native greedy ids) }]. Exit code 0 only if every case matches.
// --chromium runs the same checks in a Web Worker of a cross-origin-isolated page in headless
// Chromium, with `threads` threads: the threads build needs Web Workers, which Node lacks.
import { readFileSync } from 'node:fs';
import { resolve, relative } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const chromiumThreads = args[0] === '--chromium' ? Number(args.splice(0, 2)[1]) : 0;
const [pkgDir, modelPath, casesPath, maxPromptArg] = args;
// The scalar build is slow: it may be limited to the short prompts.
const maxPrompt = Number(maxPromptArg || Infinity);
if (!casesPath) {
  console.error('usage: node logits.mjs [--chromium THREADS] <pkg dir> <model.gguf> <cases.json> [max tokens]');
  process.exit(2);
}

// The checks, self-contained (its source also runs inside the browser's worker). `cases` carry
// the native logits as Float32Array in `want`. Returns the number of failed cases.
async function checkCases(engine, cases, maxPrompt, log) {
  // Greedy continuations re-run the prompt: only after short ones (they cover the same code).
  const GREEDY_MAX_PROMPT = 64;
  let failures = 0;
  for (const c of cases) {
    if (c.prompt_ids.length > maxPrompt) {
      log(`skip ${c.name}: ${c.prompt_ids.length} tokens > ${maxPrompt} for this build`);
      continue;
    }
    const t0 = performance.now();
    const got = engine.forward_logits(Uint32Array.from(c.prompt_ids));
    const gotBits = new Uint32Array(got.buffer, got.byteOffset, got.length);
    const wantBits = new Uint32Array(c.want.buffer, c.want.byteOffset, c.want.length);
    if (gotBits.length !== wantBits.length) {
      log(`FAIL ${c.name}: ${gotBits.length} logits, native has ${wantBits.length}`);
      failures++;
      continue;
    }
    let differing = 0, first = -1;
    for (let i = 0; i < wantBits.length; i++) {
      if (gotBits[i] !== wantBits[i]) {
        differing++;
        if (first < 0) first = i;
      }
    }
    const wantGreedy = c.prompt_ids.length <= GREEDY_MAX_PROMPT ? c.greedy : [];
    const greedy = wantGreedy.length ? Array.from(engine.greedy(Uint32Array.from(c.prompt_ids), wantGreedy.length)) : [];
    const greedyOk = JSON.stringify(greedy) === JSON.stringify(wantGreedy);
    const ms = (performance.now() - t0).toFixed(0);
    if (differing || !greedyOk) {
      failures++;
      if (differing) {
        log(`FAIL ${c.name}: ${differing} of ${wantBits.length} logits differ; first at ${first}: ` +
          `wasm ${got[first]} vs native ${c.want[first]}`);
      }
      if (!greedyOk) log(`FAIL ${c.name}: greedy ${greedy} vs native ${c.greedy}`);
    } else {
      log(`ok ${c.name}: ${c.prompt_ids.length} tokens, ${wantBits.length} logits bitwise equal, ` +
        `greedy ${greedy.length} tokens equal (${ms} ms)`);
    }
  }
  return failures;
}

const cases = JSON.parse(readFileSync(casesPath, 'utf8')).map((c) => {
  const bytes = readFileSync(c.logits_f32);
  return { ...c, want: new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4) };
});
let failures;
if (!chromiumThreads) {
  const pkg = await import(pathToFileURL(resolve(pkgDir, 'inferno_wasm.js')).href);
  await pkg.default({ module_or_path: readFileSync(resolve(pkgDir, 'inferno_wasm_bg.wasm')) });
  const t0 = performance.now();
  const engine = new pkg.WasmEngine(readFileSync(modelPath));
  console.log(`${pkgDir}: kernels ${engine.kernels()}, loaded in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
  failures = await checkCases(engine, cases, maxPrompt, console.log);
  engine.free();
} else {
  const { launchChromium } = await import('./chromium.mjs');
  const { startServer, ISOLATED } = await import('../../scripts/serve.mjs');
  const server = await startServer({ port: 0, model: modelPath, headers: ISOLATED });
  const browser = await launchChromium();
  try {
    // Any document of the isolated server will do: it only hosts the worker.
    await browser.page.goto(`${server.url}style.css`);
    // The server mounts the npm package (npm/, with the builds in npm/pkg/) at /inferno/.
    const pkgUrl = `${server.url}inferno/${relative(resolve('npm'), resolve(pkgDir))}/inferno_wasm.js`;
    const sent = cases.map(({ want, ...c }) => ({ ...c, want: Buffer.from(want.buffer, want.byteOffset, want.byteLength).toString('base64') }));
    const result = await browser.page.evaluate(async ({ source, pkgUrl, threads, sent, maxPrompt }) => {
      // The checks run in a module worker (the pool's threads wait there, never on the page).
      const code = `const checkCases = ${source};
        self.onmessage = async ({ data: { pkgUrl, threads, sent, maxPrompt } }) => {
          const lines = [];
          try {
            const pkg = await import(pkgUrl);
            await pkg.default();
            await pkg.initThreadPool(threads - 1);
            const used = pkg.use_threads(threads);
            const bytes = new Uint8Array(await (await fetch(new URL('/model.gguf', pkgUrl))).arrayBuffer());
            const engine = new pkg.WasmEngine(bytes);
            lines.push(pkgUrl + ': kernels ' + engine.kernels() + ', ' + used + ' threads (crossOriginIsolated ' + self.crossOriginIsolated + ')');
            const cases = sent.map((c) => {
              const b = Uint8Array.from(atob(c.want), (ch) => ch.charCodeAt(0));
              return { ...c, want: new Float32Array(b.buffer) };
            });
            const failures = await checkCases(engine, cases, maxPrompt, (l) => lines.push(l));
            self.postMessage({ lines, failures });
          } catch (e) {
            lines.push('FAIL ' + (e.stack || e));
            self.postMessage({ lines, failures: 1 });
          }
        };`;
      const worker = new Worker(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })), { type: 'module' });
      return new Promise((done) => {
        worker.onmessage = ({ data }) => done(data);
        worker.onerror = (e) => done({ lines: [`FAIL worker: ${e.message}`], failures: 1 });
        worker.postMessage({ pkgUrl, threads, sent, maxPrompt });
      });
    }, { source: checkCases.toString(), pkgUrl, threads: chromiumThreads, sent, maxPrompt });
    for (const line of result.lines) console.log(line);
    failures = result.failures;
  } finally {
    await browser.close();
    await server.close();
  }
}
process.exit(failures ? 1 : 0);
