// The chat page in headless Chromium (Debian's /usr/bin/chromium driven by playwright-core):
// waits for the model, types a message (compose-while-typing prefills it), checks the reply
// streams in and that the greedy reply equals the native CLI's, saves a screenshot, then feeds
// bad files (not GGUF, truncated, too large) and checks a visible error with the page still usable,
// that a reload takes the model from the Cache API, and that with the server gone a reload still
// works (service worker). Served cross-origin isolated (as `make serve` does), so the page runs
// the threads build; last, a server without the isolation headers gets the one-thread relaxed
// build with the same reply. Run by tests/tests/wasm_browser.rs:
//   node tests/wasm/browser.mjs spec.json   (spec: { model, message, max_tokens, expected, screenshot })
import { readFileSync } from 'node:fs';
import { countReplyUpdates, launchChromium } from './chromium.mjs';
import { startServer, ISOLATED } from '../../scripts/serve.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const server = await startServer({ port: 0, model: spec.model, headers: ISOLATED });
const browser = await launchChromium({ viewport: { width: 1000, height: 900 } });
const page = browser.page;
const consoleLines = [];
page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
page.on('pageerror', (e) => consoleLines.push(`[pageerror] ${e.message}`));

let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} ${what}`);
  if (!ok) failures++;
};
const errorText = () => page.evaluate(() => (document.getElementById('error').hidden ? '' : document.getElementById('error-text').textContent));
const waitReady = () => page.waitForSelector('body[data-ready="1"]', { timeout: 180_000 });

async function chat(message, maxTokens) {
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', String(maxTokens));
  const n = await page.locator('.msg.assistant').count();
  await page.click('#input');
  await page.keyboard.type(message, { delay: 10 });
  // 200 ms after the last key the worker prefills the draft and reports it.
  await page.waitForFunction(() => /^draft:/.test(document.getElementById('stats').textContent), null, { timeout: 30_000 })
    .catch(() => {});
  const draftStats = await page.textContent('#stats');
  // Count the updates of the reply before it is done: more than one means it streamed.
  await countReplyUpdates(page);
  const t0 = Date.now();
  await page.keyboard.press('Enter');
  const reply = page.locator('.msg.assistant').nth(n);
  await reply.and(page.locator('[data-done]')).waitFor({ timeout: 180_000 });
  return {
    draftStats,
    text: await reply.textContent(),
    prefill: Number(await reply.getAttribute('data-prefill')),
    updates: await page.evaluate(() => window.__updates),
    stats: await page.textContent('#stats'),
    seconds: (Date.now() - t0) / 1000,
  };
}

try {
  await page.goto(`${server.url}index.html`);
  await waitReady();
  const status = await page.textContent('#model-status');
  console.log(`model: ${status}`);
  check(!(await errorText()), `no error after load (${await errorText()})`);
  check(/wasm threads · \d+ threads/.test(status), `a cross-origin-isolated page runs the threads build (${status})`);

  // 1. Compose-while-typing, a streamed reply, the native CLI's greedy reply.
  const r = await chat(spec.message, spec.max_tokens);
  console.log(`draft: ${r.draftStats}\nreply (${r.seconds.toFixed(1)} s): ${JSON.stringify(r.text)}\n${r.stats}`);
  check(/draft: \d+ tokens prefilled/.test(r.draftStats), 'the draft was prefilled while typing');
  check(r.prefill <= 6, `Enter prefilled only what the draft had not (${r.prefill} tokens)`);
  check(r.updates >= 2, `the reply streamed (${r.updates} updates before done)`);
  check(r.text === spec.expected, `greedy reply equals the native CLI's\n  page:   ${JSON.stringify(r.text)}\n  native: ${JSON.stringify(spec.expected)}`);
  check(/decode \d+ tok at [\d.]+ tok\/s/.test(r.stats), 'tokens/s shown');
  check(await page.isChecked('#speculative') && await page.isEnabled('#speculative'), 'the Speculative toggle is there, on by default');
  check(/speculative: \d+\/\d+ accepted \(\d+%\), [\d.]+ tok\/forward/.test(r.stats), `the stats line shows acceptance and tokens per forward (${r.stats})`);
  await page.screenshot({ path: spec.screenshot, fullPage: true });
  console.log(`screenshot: ${spec.screenshot}`);

  // 1b. The same message again (the cache is reused) with the toggle off: the same reply.
  await page.uncheck('#speculative');
  await page.click('#reset');
  const off = await chat(spec.message, spec.max_tokens);
  check(off.text === spec.expected, `speculation off: the same greedy reply (${JSON.stringify(off.text)})`);
  check(!/speculative:/.test(off.stats), `speculation off: no speculative figures (${off.stats})`);
  await page.check('#speculative');

  // 2. Bad files through the picker: a visible error, and the loaded model keeps working.
  await page.setInputFiles('#file', { name: 'notes.gguf', mimeType: 'application/octet-stream', buffer: Buffer.from('these are not the bytes of a GGUF file\n') });
  await page.waitForSelector('#error:not([hidden])', { timeout: 30_000 });
  let err = await errorText();
  check(/Could not load the model/.test(err), `non-GGUF file: "${err}"`);
  const model = readFileSync(spec.model);
  await page.setInputFiles('#file', { name: 'truncated.gguf', mimeType: 'application/octet-stream', buffer: model.subarray(0, 3 << 20) });
  await page.waitForFunction((before) => {
    const e = document.getElementById('error');
    return !e.hidden && document.getElementById('error-text').textContent !== before;
  }, err, { timeout: 60_000 });
  err = await errorText();
  check(/Could not load the model/.test(err) && /trunc|outside|out of bounds|past the end/i.test(err), `truncated file: "${err}"`);
  const again = await chat('Say hi.', 4);
  check(again.text.length > 0, `the page is still usable after bad files (reply ${JSON.stringify(again.text)})`);

  // 3. A reload with the network route to the model blocked: the model comes from the Cache API.
  await page.route('**/model.gguf', (route) => route.abort());
  await page.reload();
  await waitReady();
  const download = await page.textContent('#download-text');
  check(/from the browser cache/.test(download), `reload loads the model from the Cache API ("${download}")`);
  await page.unroute('**/model.gguf');

  // 4. A model over the size limit (lowered by the test): an error, the page still responds.
  await page.goto(`${server.url}index.html?maxModelMB=10`);
  await page.waitForSelector('#error:not([hidden])', { timeout: 60_000 });
  err = await errorText();
  check(/too large/.test(err), `too large: "${err}"`);
  check(await page.isEnabled('#download'), 'the page stays usable (buttons enabled) after a too-large model');

  // 5. Fully offline: the server is gone; the service worker serves the page and the wasm build,
  // the Cache API the model, and the model still answers.
  await page.goto(`${server.url}index.html`);
  await waitReady();
  await page.evaluate(() => navigator.serviceWorker.ready);
  await server.close();
  await page.reload();
  await waitReady();
  const offline = await chat('Say hi.', 4);
  check(offline.text.length > 0, `offline reload (no server): the page, the wasm and the model load and answer (${JSON.stringify(offline.text)})`);

  // 6. No isolation headers (a plain static host): no shared memory, so the one-thread relaxed
  // build, with the same greedy reply.
  const plain = await startServer({ port: 0, model: spec.model });
  try {
    await page.goto(`${plain.url}index.html?sw=0`);
    await waitReady();
    const plainStatus = await page.textContent('#model-status');
    check(/wasm relaxed · kernels/.test(plainStatus), `without COOP/COEP the page runs the relaxed build (${plainStatus})`);
    const single = await chat(spec.message, spec.max_tokens);
    check(single.text === spec.expected, `one-thread greedy reply equals the native CLI's (${JSON.stringify(single.text)})`);
  } finally {
    await plain.close();
  }
} catch (e) {
  failures++;
  console.log(`FAIL ${e.stack || e}`);
  await page.screenshot({ path: spec.screenshot.replace(/\.png$/, '-failure.png'), fullPage: true }).catch(() => {});
} finally {
  if (failures) console.log(`browser console:\n${consoleLines.join('\n')}`);
  await browser.close();
  await server.close().catch(() => {});
}
process.exit(failures ? 1 : 0);
