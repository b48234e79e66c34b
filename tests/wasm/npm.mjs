// The npm package as a user gets it: `npm pack` npm/, install the tarball into a fresh temporary
// project, then (1) `tsc --noEmit` on the README's example against its types, (2) Node.js: the
// same greedy reply as the native CLI (npm-node.mjs), and createServerEngine against a mock
// OpenAI-compatible server (npm-server.mjs), (3) headless Chromium and (4) headless
// Firefox (Debian's firefox-esr over WebDriver BiDi, puppeteer-core) on a page that imports it:
// a streamed greedy reply equal to the native CLI's on the threads build, an aborted stream,
// a reload that takes the model from the Cache API, and deleting it from the cache.
// Run by tests/tests/wasm_browser.rs:
//   node tests/wasm/npm.mjs spec.json   (spec: { model, message, max_tokens, expected })
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from './chromium.mjs';
import { startServer, ISOLATED } from '../../scripts/serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const only = process.env.INFERNO_NPM_TESTS?.split(',') ?? ['types', 'node', 'server', 'chromium', 'firefox'];
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} ${what}`);
  if (!ok) failures++;
};
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

// The tarball, installed into a fresh project (no registry: the package has no dependencies).
const project = mkdtempSync(join(tmpdir(), 'inferno-npm-'));
const tarball = run('npm', ['pack', '--silent', '--pack-destination', project, join(repo, 'npm')], repo).trim().split('\n').pop();
writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'inferno-npm-test', private: true, type: 'module' }));
run('npm', ['install', '--offline', '--no-audit', '--no-fund', join(project, tarball)], project);
const installed = join(project, 'node_modules', 'inferno-llm');
check(existsSync(join(installed, 'pkg', 'simd128', 'inferno_wasm_bg.wasm')) && existsSync(join(installed, 'index.d.ts')),
  `${tarball} installs with its wasm builds and types`);

// The page's steps, in the browser (the function's source is sent; no closure).
// Each phase is noted in window.__trail (milliseconds since the page loaded), so a step that
// stalls can say where.
async function pageSteps({ message, maxTokens, step, threads }) {
  const { createEngine, listCachedModels, deleteCachedModel } = window.inferno;
  const trail = (window.__trail = []);
  const mark = (what) => trail.push(`${Math.round(performance.now())} ms ${what}`);
  const progress = [];
  mark('createEngine');
  const engine = await createEngine({
    model: '/model.gguf',
    threads,
    onProgress: (p) => {
      if (progress.at(-1)?.type !== p.type) mark(`progress ${p.type}`);
      progress.push(p);
    },
  });
  mark('engine ready');
  const stats = await engine.stats();
  const out = {
    variant: stats.variant, threads: stats.threads, kernels: stats.kernels, cached: progress.some((p) => p.cached),
    hardwareConcurrency: navigator.hardwareConcurrency, skipped: stats.skipped,
  };
  const messages = [{ role: 'user', content: message }];
  if (step === 'first') {
    mark('streamed reply');
    const stream = await engine.chat.completions.create({ messages, stream: true, temperature: 0, max_tokens: maxTokens });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      if (++chunks === 1) mark('first chunk');
      text += chunk.choices[0].delta.content ?? '';
    }
    Object.assign(out, { text, chunks });
    mark(`${chunks} chunks; abort`);
    // Abort after two pieces: the stream throws AbortError and the engine still answers.
    const controller = new AbortController();
    let got = 0;
    try {
      const s = await engine.chat.completions.create({ messages, stream: true, max_tokens: 200, signal: controller.signal });
      for await (const chunk of s) if (chunk.choices[0].delta.content && ++got === 2) controller.abort();
      out.abort = 'not aborted';
    } catch (e) {
      out.abort = e.name;
    }
    out.abortedTokens = (await engine.stats()).last.completion_tokens;
    mark('a reply after the abort');
    const after = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 4 });
    out.after = after.choices[0].message.content;
  } else {
    mark('whole reply');
    const reply = await engine.chat.completions.create({ messages, temperature: 0, max_tokens: maxTokens });
    out.text = reply.choices[0].message.content;
    mark('cache list, delete');
    out.listed = (await listCachedModels()).map((m) => m.url);
    out.deleted = await deleteCachedModel('/model.gguf');
    out.listedAfter = (await listCachedModels()).length;
  }
  mark('unload');
  await engine.unload();
  return out;
}

// A browser that stops answering: the step fails after STEP_MS with the page's trail and what
// the page printed, instead of the protocol's bare timeout (whose limit is set above this one).
const STEP_MS = 150_000;
class Stalled extends Error {}
const within = (ms, promise, what) => {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Stalled(what)), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
};

// A threads build that did not start (after 30 s the package starts a one-thread build in a new
// worker) counts as a stall.
function poolStarted(name, out) {
  const lost = out.skipped?.find((s) => s.variant === 'threads' && /did not start within/.test(s.error));
  if (lost) throw new Stalled(`${name}: the threads build did not start (${lost.error}); ${out.variant} ran instead`);
  return out;
}

async function evaluateStep(name, page, args, log) {
  try {
    return await within(STEP_MS, page.evaluate(pageSteps, args), `${name}: step ${args.step} did not end within ${STEP_MS / 1000} s`);
  } catch (e) {
    const trail = await within(5000, page.evaluate(() => window.__trail), 'the page does not answer').catch((err) => err.message);
    e.message += `\n  the page's trail: ${JSON.stringify(trail)}\n  the page printed: ${JSON.stringify(log.slice(-20))}`;
    throw e;
  }
}

async function browserChecks(name, page, url, threads) {
  const args = { message: spec.message, maxTokens: spec.max_tokens, threads };
  const log = [];
  page.on('console', (m) => log.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`pageerror: ${e.message || e}`));
  await page.goto(`${url}index.html`);
  await page.waitForFunction(() => document.body?.dataset.ready === '1');
  const first = poolStarted(name, await evaluateStep(name, page, { ...args, step: 'first' }, log));
  console.log(`${name}: ${JSON.stringify(first)}`);
  check(first.variant === 'threads' && first.threads >= 2 && first.kernels === 'relaxed', `${name}: a cross-origin-isolated page runs the threads build with relaxed kernels (${first.variant}, ${first.threads} threads, ${first.kernels})`);
  check(!first.cached, `${name}: the first load downloads the model`);
  check(first.text === spec.expected && first.chunks > 2, `${name}: streamed greedy reply (${first.chunks} chunks) equals the native CLI's\n  page:   ${JSON.stringify(first.text)}\n  native: ${JSON.stringify(spec.expected)}`);
  check(first.abort === 'AbortError' && first.abortedTokens < 20, `${name}: an aborted stream throws AbortError and stops (${first.abort}, ${first.abortedTokens} tokens)`);
  check(first.after.length > 0, `${name}: the engine answers after an abort (${JSON.stringify(first.after)})`);
  await page.reload();
  await page.waitForFunction(() => document.body?.dataset.ready === '1');
  const second = poolStarted(name, await evaluateStep(name, page, { ...args, step: 'reload' }, log));
  check(second.cached, `${name}: after a reload the model comes from the Cache API`);
  check(second.text === spec.expected, `${name}: the same reply after the reload`);
  check(second.listed.some((u) => u.endsWith('/model.gguf')) && second.deleted && second.listedAfter === 0,
    `${name}: listCachedModels lists it and deleteCachedModel removes it (${JSON.stringify(second.listed)})`);
}

async function launchFirefox(executablePath) {
  const { default: puppeteer } = await import('puppeteer-core');
  const profile = mkdtempSync(join(tmpdir(), 'inferno-firefox-'));
  const browser = await puppeteer.launch({
    browser: 'firefox', executablePath, headless: true, userDataDir: profile, protocolTimeout: STEP_MS + 60_000,
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(180_000);
  const close = async () => {
    await within(30_000, browser.close(), 'close').catch(() => browser.process()?.kill('SIGKILL'));
    rmSync(profile, { recursive: true, force: true });
  };
  return { page, close };
}

// The checks in a fresh browser. A stall (never a wrong answer) is printed with its trail and
// tried once more in another fresh browser: a host's hiccup does not fail the run, a stall
// that comes back does.
async function inFreshBrowsers(name, launch, threads) {
  for (let attempt = 1; ; attempt++) {
    const browser = await launch();
    try {
      await browserChecks(name, browser.page, server.url, threads);
      return;
    } catch (e) {
      if (!(e instanceof Stalled) || attempt === 2) throw e;
      console.log(`STALLED ${e.message}\n  trying once more in a fresh ${name}`);
    } finally {
      await browser.close();
    }
  }
}

console.log(`host: ${availableParallelism()} CPUs this process may use, ${cpus().length} online`);
const server = await startServer({ port: 0, root: project, model: spec.model, headers: ISOLATED });
copyFileSync(join(here, 'npm-page.html'), join(project, 'index.html'));
try {
  if (only.includes('types')) {
    copyFileSync(join(here, 'npm-example.ts'), join(project, 'example.ts'));
    const tsc = join(repo, 'node_modules', 'typescript', 'bin', 'tsc');
    try {
      run(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
        '--lib', 'es2022,dom,dom.asynciterable', '--types', '', 'example.ts'], project);
      check(true, 'tsc --noEmit on the README example against index.d.ts');
      run(process.execPath, [join(repo, 'scripts', 'npm-api.mjs'), '--check'], repo);
      check(true, 'npm/API.md is generated from the current index.d.ts');
    } catch (e) {
      check(false, `tsc --noEmit on the README example:\n${e.stdout}${e.stderr}`);
    }
  }
  if (only.includes('node')) {
    copyFileSync(join(here, 'npm-node.mjs'), join(project, 'node.mjs'));
    const specPath = join(project, 'spec.json');
    writeFileSync(specPath, JSON.stringify(spec));
    try {
      console.log(run(process.execPath, ['node.mjs', specPath], project).trimEnd());
    } catch (e) {
      console.log(`${e.stdout}${e.stderr}`);
      check(false, 'node: npm-node.mjs');
    }
  }
  if (only.includes('server')) {
    copyFileSync(join(here, 'npm-server.mjs'), join(project, 'server.mjs'));
    try {
      console.log(run(process.execPath, ['server.mjs'], project).trimEnd());
    } catch (e) {
      console.log(`${e.stdout}${e.stderr}`);
      check(false, 'server client: npm-server.mjs');
    }
  }
  if (only.includes('chromium')) {
    await inFreshBrowsers('chromium', launchChromium);
  }
  if (only.includes('firefox')) {
    const executablePath = process.env.FIREFOX || '/usr/bin/firefox-esr';
    if (!existsSync(executablePath)) {
      check(false, `firefox: ${executablePath} is missing (scripts/setup-wasm.sh --browser installs firefox-esr)`);
    } else {
      // Firefox's hardwareConcurrency counts every online CPU, not the ones this process may
      // use (Chromium's and Node's do): in a container it can ask for 16 threads on 2 cores.
      // And its threads build's start can stall for good (on 2 cores: some runs at 4, 8 and 16
      // threads, none at 2; the package then falls back after 30 s). The default is Chromium's
      // to test; Firefox runs the threads build on 2 threads.
      await inFreshBrowsers('firefox', () => launchFirefox(executablePath), 2);
    }
  }
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack || e}`);
} finally {
  await server.close();
  rmSync(project, { recursive: true, force: true });
}
process.exit(failures ? 1 : 0);
