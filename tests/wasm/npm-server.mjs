// createServerEngine against a tiny mock of an OpenAI-compatible server (127.0.0.1, the shapes
// `inferno serve` sends: SSE `data: {chunk}` lines ending in `data: [DONE]`, GET /v1/models):
// streamed and whole replies, an abort, and an HTTP error as an Error. Run inside the fresh
// project by tests/wasm/npm.mjs:   node npm-server.mjs
import { createServer } from 'node:http';
import { createServerEngine } from 'inferno-llm';

const pieces = ['Paris', ' is', ' the', ' capital', '.'];
const server = createServer(async (req, res) => {
  let body = '';
  for await (const c of req) body += c;
  if (req.method === 'GET' && req.url === '/v1/models') {
    return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data: [{ id: 'smollm2', object: 'model' }] }));
  }
  const request = body ? JSON.parse(body) : {};
  if (req.url !== '/v1/chat/completions' || !Array.isArray(request.messages)) {
    return res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'messages is required' } }));
  }
  const base = { id: 'chatcmpl-1', created: 1, model: 'smollm2' };
  if (!request.stream) {
    return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ...base, object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: pieces.join('') }, finish_reason: 'stop' }] }));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const [i, p] of pieces.entries()) {
    // Split one event across two writes: the client must reassemble it.
    const event = `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: p }, finish_reason: null }] })}\n\n`;
    res.write(event.slice(0, 10));
    await new Promise((r) => setTimeout(r, 5));
    res.write(event.slice(10));
    if (i === 1) await new Promise((r) => setTimeout(r, 20));
  }
  res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
  res.end('data: [DONE]\n\n');
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const engine = createServerEngine({ baseURL: `http://127.0.0.1:${server.address().port}` });
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} server client: ${what}`);
  if (!ok) failures++;
};
try {
  const models = await engine.models.list();
  check(models.data[0].id === 'smollm2', 'models.list');
  const messages = [{ role: 'user', content: 'Capital of France?' }];
  let text = '';
  let finish = null;
  for await (const chunk of await engine.chat.completions.create({ messages, stream: true })) {
    text += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  check(text === pieces.join('') && finish === 'stop', `streamed ${JSON.stringify(text)}, finish ${finish}`);
  const whole = await engine.chat.completions.create({ messages });
  check(whole.choices[0].message.content === pieces.join(''), 'a whole reply');
  const controller = new AbortController();
  let error = null;
  try {
    for await (const chunk of await engine.chat.completions.create({ messages, stream: true, signal: controller.signal })) {
      if (chunk.choices[0].delta.content) controller.abort();
    }
  } catch (e) {
    error = e;
  }
  check(error?.name === 'AbortError', `abort: ${error?.name}`);
  const bad = await engine.chat.completions.create({}).catch((e) => e);
  check(bad instanceof Error && /HTTP 400: messages is required/.test(bad.message), `HTTP error: ${bad.message}`);
} catch (e) {
  failures++;
  console.log(`FAIL server client: ${e.stack || e}`);
}
server.close();
process.exit(failures ? 1 : 0);
