// The same `chat.completions.create` shape as createEngine's, answered by an OpenAI-compatible
// HTTP server (`inferno serve`: POST /v1/chat/completions, streamed as server-sent events
// `data: {chunk}` ending in `data: [DONE]`; GET /v1/models; POST /v1/compose). fetch + a small
// SSE reader.

async function failure(response) {
  let detail = '';
  try {
    const body = await response.text();
    try {
      detail = JSON.parse(body).error?.message || body;
    } catch {
      detail = body;
    }
  } catch {
    // The body is gone: the status says enough.
  }
  return new Error(`the server answered HTTP ${response.status}${detail ? `: ${detail.trim().slice(0, 500)}` : ''}`);
}

/// The `data:` payloads of a server-sent event stream, as they arrive.
async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
        const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
        if (data) yield data;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/// A client of an OpenAI-compatible server. `baseURL`: the server's origin (the page's own by
/// default); `model`: the model name sent with each request (the server's first by default).
export function createServerEngine({ baseURL, model, apiKey, fetch: fetchImpl = globalThis.fetch } = {}) {
  const base = new URL(baseURL ?? globalThis.location?.origin ?? 'http://127.0.0.1:8080', globalThis.location?.href).href.replace(/\/$/, '');
  const headers = { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };
  let last = null;

  async function post(path, req) {
    const { signal, ...body } = req;
    const response = await fetchImpl(`${base}${path}`, {
      method: 'POST', headers, signal, body: JSON.stringify({ model: model ?? 'default', ...body }),
    }).catch((e) => {
      if (e?.name === 'AbortError') throw e;
      throw new Error(`cannot reach the server at ${base}: ${e?.message || e}`);
    });
    if (!response.ok) throw await failure(response);
    return response;
  }

  async function create(path, req) {
    if (!req?.stream) {
      const result = await (await post(path, req)).json();
      last = { usage: result.usage ?? null };
      return result;
    }
    const response = await post(path, req);
    return (async function* chunks() {
      for await (const data of events(response.body)) {
        if (data === '[DONE]') return;
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch {
          throw new Error(`the server sent an event that is not JSON: ${data.slice(0, 200)}`);
        }
        if (chunk.error) throw new Error(`the server failed: ${chunk.error.message || JSON.stringify(chunk.error)}`);
        if (chunk.usage) last = { usage: chunk.usage };
        yield chunk;
      }
    })();
  }

  return {
    chat: { completions: { create: (req) => create('/v1/chat/completions', req) } },
    completions: { create: (req) => create('/v1/completions', req) },
    models: {
      async list() {
        const response = await fetchImpl(`${base}/v1/models`, { headers });
        if (!response.ok) throw await failure(response);
        return response.json();
      },
    },
    /// Prefill-while-typing on the server (POST /v1/compose): the conversation with `draft` as
    /// the next user message goes into the server's prefix cache, so sending it prefills only
    /// what changed. Only a warm-up: a lost compose costs time, never a different reply.
    async compose(draft, messages = []) {
      const started = performance.now();
      const response = await post('/v1/compose', {
        messages: messages.map((m) => ({ role: m.role, content: String(m.content ?? '') })),
        draft: String(draft),
      });
      const { reused = 0, prefilled = 0 } = await response.json();
      return { reused, prefilled, ms: performance.now() - started };
    },
    async stats() {
      return { server: base, last };
    },
    async unload() {},
  };
}
