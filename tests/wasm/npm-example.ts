// The README's example (npm/README.md), type-checked by tests/wasm/npm.mjs with `tsc --noEmit`
// against the installed package's index.d.ts.
import { createEngine, createServerEngine, listCachedModels, type ChatCompletionChunk } from 'inferno-llm';

const engine = await createEngine({
  model: 'https://example.com/SmolLM2-135M-Instruct.Q4_1.gguf',
  onProgress: (p) => console.log(`${p.phase} ${p.loaded}/${p.total}`),
});
const stream = await engine.chat.completions.create({
  messages: [{ role: 'user', content: 'Why is the sky blue?' }],
  stream: true, temperature: 0, max_tokens: 64,
});
for await (const chunk of stream) console.log(chunk.choices[0].delta.content ?? '');

const reply = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], seed: 7 });
const text: string = reply.choices[0].message.content;
const ids: number[] = await engine.tokenize(text);
const { prefilled } = await engine.compose('What about sun', [{ role: 'user', content: 'Hi' }]);
const stats = await engine.stats();
console.log(ids.length, prefilled, stats.variant, stats.last?.speculative?.accepted, (await listCachedModels()).length);
await engine.unload();

const server = createServerEngine({ baseURL: 'http://127.0.0.1:8080' });
const chunks: AsyncIterable<ChatCompletionChunk> = await server.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], stream: true });
for await (const chunk of chunks) console.log(chunk.choices[0]?.delta.content ?? '');
