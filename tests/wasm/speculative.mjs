// The wasm build's chat gives the same replies with speculative decoding on and off, equal to
// native core's. Run by tests/tests/wasm_browser.rs, which writes the native replies:
//   node tests/wasm/speculative.mjs <pkg dir> <model.gguf> <cases.json>
// cases.json: [{ user, options (core's GenerateOptions JSON, speculative left out), expected }].
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, modelPath, casesPath] = process.argv.slice(2);
if (!casesPath) {
  console.error('usage: node speculative.mjs <pkg dir> <model.gguf> <cases.json>');
  process.exit(2);
}
const pkg = await import(pathToFileURL(resolve(pkgDir, 'inferno_wasm.js')).href);
await pkg.default({ module_or_path: readFileSync(resolve(pkgDir, 'inferno_wasm_bg.wasm')) });
const engine = new pkg.WasmEngine(readFileSync(modelPath));
const cases = JSON.parse(readFileSync(casesPath, 'utf8'));

function reply(user, options, enabled) {
  const chat = new pkg.WasmChat(engine);
  chat.set_options(JSON.stringify({ ...options, speculative: { enabled } }));
  chat.begin_turn(user);
  let streamed = '';
  for (let piece; (piece = chat.next_token()) !== undefined;) streamed += piece;
  const stats = JSON.parse(chat.turn_stats());
  const text = chat.end_turn();
  chat.free();
  return { text, streamed, stats };
}

let failures = 0, accepted = 0;
for (const c of cases) {
  const off = reply(c.user, c.options, false);
  const on = reply(c.user, c.options, true);
  accepted += on.stats.accepted;
  const ok = off.text === c.expected && on.text === c.expected && on.streamed === on.text;
  if (!ok) failures++;
  console.log(`${ok ? 'ok' : 'FAIL'} ${JSON.stringify(c.user.slice(0, 40))} ${JSON.stringify(c.options)}: ` +
    `speculative ${on.stats.accepted}/${on.stats.drafted} accepted, ${on.stats.tokens} tokens in ` +
    `${on.stats.forwards} forwards` +
    (ok ? '' : `\n  native: ${JSON.stringify(c.expected)}\n  off:    ${JSON.stringify(off.text)}\n  on:     ${JSON.stringify(on.text)}`));
}
if (!accepted) {
  console.log('FAIL: no speculative draft was accepted, so nothing was compared');
  failures++;
}
engine.free();
process.exit(failures ? 1 : 0);
