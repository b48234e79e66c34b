// Node: one wasm variant (www/pkg/<variant>/) on the real model gives the native reference's
// logits bit for bit and the same greedy tokens. Run by tests/tests/wasm_browser.rs, which
// writes the native results:
//   node tests/wasm/logits.mjs <pkg dir> <model.gguf> <cases.json> [max prompt tokens]
// cases.json: [{ name, prompt_ids, logits_f32 (path to the native last-position logits),
//                greedy (native greedy ids) }]. Exit code 0 only if every case matches.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, modelPath, casesPath, maxPromptArg] = process.argv.slice(2);
// The scalar build is slow under Node: it may be limited to the short prompts.
const maxPrompt = Number(maxPromptArg || Infinity);
// Greedy continuations re-run the prompt: only after short ones (they cover the same code).
const GREEDY_MAX_PROMPT = 64;
if (!casesPath) {
  console.error('usage: node logits.mjs <pkg dir> <model.gguf> <cases.json>');
  process.exit(2);
}
const pkg = await import(pathToFileURL(resolve(pkgDir, 'inferno_wasm.js')).href);
await pkg.default({ module_or_path: readFileSync(resolve(pkgDir, 'inferno_wasm_bg.wasm')) });

let t0 = performance.now();
const engine = new pkg.WasmEngine(readFileSync(modelPath));
console.log(`${pkgDir}: kernels ${engine.kernels()}, loaded in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);

let failures = 0;
for (const c of JSON.parse(readFileSync(casesPath, 'utf8'))) {
  if (c.prompt_ids.length > maxPrompt) {
    console.log(`skip ${c.name}: ${c.prompt_ids.length} tokens > ${maxPrompt} for this build`);
    continue;
  }
  t0 = performance.now();
  const got = engine.forward_logits(Uint32Array.from(c.prompt_ids));
  const want = new Float32Array(readFileSync(c.logits_f32).buffer.slice(0));
  const gotBits = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const wantBits = new Uint32Array(want.buffer);
  let differing = 0, first = -1;
  if (gotBits.length !== wantBits.length) {
    console.log(`FAIL ${c.name}: ${gotBits.length} logits, native has ${wantBits.length}`);
    failures++;
    continue;
  }
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
      console.log(`FAIL ${c.name}: ${differing} of ${wantBits.length} logits differ; first at ${first}: ` +
        `wasm ${got[first]} vs native ${want[first]}`);
    }
    if (!greedyOk) console.log(`FAIL ${c.name}: greedy ${greedy} vs native ${c.greedy}`);
  } else {
    console.log(`ok ${c.name}: ${c.prompt_ids.length} tokens, ${wantBits.length} logits bitwise equal, ` +
      `greedy ${greedy.length} tokens equal (${ms} ms)`);
  }
}
engine.free();
process.exit(failures ? 1 : 0);
