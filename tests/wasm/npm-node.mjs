// The npm package in Node.js, as installed from its tarball (run inside the fresh project by
// tests/wasm/npm.mjs): the one-thread simd128 build, the model from a path, a streamed greedy
// reply equal to the native CLI's, the non-streamed shape, raw completions, tokenize/detokenize,
// compose (the draft's prefill is reused), an abort, and clear errors.
//   node npm-node.mjs spec.json   (spec: { model, message, max_tokens, expected })
import { readFileSync } from 'node:fs';
import { createEngine } from 'inferno-llm';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} node: ${what}`);
  if (!ok) failures++;
};

try {
  const phases = new Set();
  const engine = await createEngine({ model: spec.model, onProgress: (p) => phases.add(p.phase) });
  const stats = await engine.stats();
  check(stats.variant === 'simd128' && stats.threads === 1, `one-thread simd128 build (${stats.variant}, ${stats.threads}, kernels ${stats.kernels})`);
  check(phases.has('download') && phases.has('load'), `progress phases ${[...phases]}`);

  const messages = [{ role: 'user', content: spec.message }];
  const stream = await engine.chat.completions.create({ messages, stream: true, temperature: 0, max_tokens: spec.max_tokens });
  let text = '';
  let chunks = 0;
  let last;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0].delta.content ?? '';
    last = chunk;
  }
  check(text === spec.expected, `streamed greedy reply equals the native CLI's\n  node:   ${JSON.stringify(text)}\n  native: ${JSON.stringify(spec.expected)}`);
  check(chunks > 2 && last.object === 'chat.completion.chunk' && last.choices[0].finish_reason && last.usage?.completion_tokens > 0,
    `chunks (${chunks}), the last with finish_reason ${last?.choices[0].finish_reason} and usage ${JSON.stringify(last?.usage)}`);

  const whole = await engine.chat.completions.create({ messages, temperature: 0, max_tokens: spec.max_tokens });
  check(whole.object === 'chat.completion' && whole.choices[0].message.content === spec.expected, 'non-streamed: the same reply as a chat.completion');
  check((await engine.stats()).last.reused > 0, 'the same conversation again reuses the KV cache');

  const ids = await engine.tokenize('The capital of France is');
  check(ids.length > 3 && (await engine.detokenize(ids)) === 'The capital of France is', `tokenize / detokenize round trip (${ids.length} ids)`);
  const completion = await engine.completions.create({ prompt: 'The capital of France is', temperature: 0, max_tokens: 4 });
  check(completion.object === 'text_completion' && completion.choices[0].text.length > 0, `raw completion ${JSON.stringify(completion.choices[0].text)}`);

  const history = [...messages, { role: 'assistant', content: spec.expected }];
  const composed = await engine.compose('And of Italy?', history);
  check(composed.prefilled > 0, `compose prefilled the draft (${composed.prefilled} tokens)`);
  await engine.chat.completions.create({ messages: [...history, { role: 'user', content: 'And of Italy?' }], temperature: 0, max_tokens: 2 });
  const after = (await engine.stats()).last;
  check(after.prefilled <= 6, `sending the composed message prefilled only ${after.prefilled} of ${after.prompt_tokens} tokens`);

  const controller = new AbortController();
  let aborted = null;
  let got = 0;
  try {
    const s = await engine.chat.completions.create({ messages, stream: true, max_tokens: 200, signal: controller.signal });
    for await (const chunk of s) {
      if (chunk.choices[0].delta.content && ++got === 2) controller.abort();
    }
  } catch (e) {
    aborted = e;
  }
  check(aborted?.name === 'AbortError', `abort: the stream throws AbortError (${aborted?.name}: ${aborted?.message})`);
  const stop = (await engine.stats()).last;
  check(stop.stop === 'Cancelled' && stop.completion_tokens < 20, `abort: generation stopped (${stop.completion_tokens} tokens, ${stop.stop})`);

  const bad = await engine.chat.completions.create({ messages, temperature: -1 }).catch((e) => e);
  check(bad instanceof Error && /temperature/.test(bad.message), `a bad option is an Error: ${bad.message}`);
  await engine.unload();

  const missing = await createEngine({ model: '/nonexistent/model.gguf' }).catch((e) => e);
  check(missing instanceof Error && /cannot load the model/.test(missing.message), `a missing file: ${missing.message}`);
  const notGguf = await createEngine({ model: new TextEncoder().encode('not a gguf file at all') }).catch((e) => e);
  check(notGguf instanceof Error && /cannot load the model/.test(notGguf.message), `bytes that are not GGUF: ${notGguf.message}`);
} catch (e) {
  failures++;
  console.log(`FAIL node: ${e.stack || e}`);
}
process.exit(failures ? 1 : 0);
