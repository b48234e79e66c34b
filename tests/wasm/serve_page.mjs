// The chat page as `inferno serve` serves it, in headless Chromium with the "this server"
// engine (/?engine=server): the server's page, npm package and model come with the
// cross-origin-isolation headers; typing a message composes it on the server (POST /v1/compose);
// the greedy reply streams in over SSE and equals the native CLI's (`inferno run --temp 0`), and
// the request continued from the composed prefix. Run by tests/tests/serve.rs:
//   INFERNO_BIN=target/release/inferno INFERNO_MODEL=model.gguf node tests/wasm/serve_page.mjs
import { spawn, spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { countReplyUpdates, launchChromium } from './chromium.mjs';
import { defaultModelPath, ISOLATED } from '../../scripts/serve.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const bin = process.env.INFERNO_BIN || resolve(repo, 'target/release/inferno');
const model = defaultModelPath();
const modelId = basename(model).replace(/\.gguf$/, '');
const message = 'What is the capital of France?';
const maxTokens = 24;

let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} ${what}`);
  if (!ok) failures++;
};

// The native CLI's greedy reply to the same user message; `run` ends it with a newline of its own.
function nativeReply() {
  const out = spawnSync(bin, ['run', '--model', model, '--temp', '0', '--max-tokens', String(maxTokens), message], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`${bin} run failed (${out.status}): ${out.stderr}`);
  return out.stdout.replace(/\n$/, '');
}

// `inferno serve --port 0`: resolves with { url, process } once it prints where it listens.
function startServe() {
  const child = spawn(bin, ['serve', '--model', model, '--port', '0', '--threads', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const log = [];
  child.stderr.on('data', (d) => log.push(String(d)));
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`inferno serve did not start in 120 s:\n${log.join('')}`)), 120_000);
    child.on('exit', (code) => fail(new Error(`inferno serve exited (${code}):\n${log.join('')}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const m = /^inferno serve: listening on (http:\/\/\S+)$/.exec(line);
      if (m) done({ url: m[1], child, log });
      else fail(new Error(`inferno serve printed ${JSON.stringify(line)}`));
    });
  });
}

async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Object.fromEntries(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => {
    const [name, value] = l.split(/\s+/);
    return [name, Number(value)];
  }));
}

const expected = nativeReply();
console.log(`native: ${JSON.stringify(expected)}`);
const server = await startServe();
const browser = await launchChromium({ viewport: { width: 1000, height: 900 } });
const page = browser.page;
const consoleLines = [];
page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
page.on('pageerror', (e) => consoleLines.push(`[pageerror] ${e.message}`));

try {
  // What the server serves besides the API: the page, the npm package and the model, isolated.
  for (const path of ['/', '/main.js', '/inferno/src/index.js', '/model.gguf']) {
    const r = await fetch(`${server.url}${path}`, { method: path === '/model.gguf' ? 'HEAD' : 'GET' });
    const isolated = Object.entries(ISOLATED).every(([k, v]) => r.headers.get(k) === v);
    check(r.status === 200 && isolated, `GET ${path}: ${r.status}, COOP/COEP ${isolated ? 'set' : 'missing'}`);
    if (path === '/model.gguf') {
      const length = Number(r.headers.get('content-length'));
      check(length === statSync(model).size, `/model.gguf is the model (${length} bytes)`);
    }
  }

  await page.goto(`${server.url}/?engine=server`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 60_000 });
  const status = await page.textContent('#model-status');
  check(status.includes(modelId), `the page talks to this server (${status})`);
  check(await page.inputValue('#engine-mode') === 'server', 'the engine selector says "on this server"');

  // Greedy, as browser.mjs sets it for the tab's engine.
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', String(maxTokens));
  await page.click('#input');
  await page.keyboard.type(message, { delay: 10 });
  // 200 ms after the last key the page composes the draft on the server.
  await page.waitForFunction(() => /^draft:/.test(document.getElementById('stats').textContent), null, { timeout: 30_000 })
    .catch(() => {});
  const draftStats = await page.textContent('#stats');
  check(/^draft: \d+ tokens prefilled/.test(draftStats), `the draft was composed on the server (${draftStats})`);
  await countReplyUpdates(page);
  const before = await metrics(server.url);
  const t0 = Date.now();
  await page.keyboard.press('Enter');
  const reply = page.locator('.msg.assistant').first();
  await reply.and(page.locator('[data-done]')).waitFor({ timeout: 120_000 });
  const text = await reply.textContent();
  const updates = await page.evaluate(() => window.__updates);
  const after = await metrics(server.url);
  console.log(`reply (${((Date.now() - t0) / 1000).toFixed(1)} s): ${JSON.stringify(text)}`);
  check(await page.evaluate(() => document.getElementById('error').hidden), `no error shown (${await page.textContent('#error-text')})`);
  check(updates >= 2, `the reply streamed (${updates} updates before done)`);
  check(text === expected, `greedy reply equals the native CLI's\n  page:   ${JSON.stringify(text)}\n  native: ${JSON.stringify(expected)}`);
  check(after.inferno_cache_hits_total > before.inferno_cache_hits_total,
    `the request continued from the composed prefix (cache hits ${before.inferno_cache_hits_total} -> ${after.inferno_cache_hits_total})`);
  check(after.inferno_generated_tokens_total - before.inferno_generated_tokens_total <= maxTokens,
    `the server generated at most max_tokens (${after.inferno_generated_tokens_total - before.inferno_generated_tokens_total})`);
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack || e}`);
} finally {
  if (failures) console.log(`browser console:\n${consoleLines.join('\n')}\nserver log:\n${server.log.join('')}`);
  await browser.close();
  server.child.removeAllListeners('exit');
  server.child.kill('SIGTERM');
}
process.exit(failures ? 1 : 0);
