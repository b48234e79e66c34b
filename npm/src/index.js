// inferno's JavaScript API: a GGUF language model running in WebAssembly, in a Web Worker in
// the browser or on the calling thread in Node.js, behind the shape of the OpenAI client
// (`engine.chat.completions.create`). No network at run time except the model URL given.
// Types and documentation: index.d.ts.
import { MODEL_CACHE, candidateVariants } from './host.js';

export { createServerEngine } from './server.js';

const isNode = typeof process !== 'undefined' && !!process.versions?.node && typeof window === 'undefined';
let counter = 0;
const newId = (prefix) => `${prefix}-${Date.now().toString(36)}${(counter++).toString(36)}`;

// Where the calls go: a Web Worker (browser) or a Host on this thread (Node.js, or worker: false).
function workerBackend() {
  const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const pending = new Map();
  let nextId = 0;
  let dead = null;
  const fail = (message) => {
    dead = new Error(message);
    for (const p of pending.values()) p.reject(dead);
    pending.clear();
  };
  worker.onmessage = ({ data }) => {
    const p = pending.get(data.id);
    if (!p) return;
    if (data.event) return p.onEvent?.(data.event);
    pending.delete(data.id);
    if (data.error) {
      if (data.error.fatal) {
        fail(`the engine crashed (${data.error.message}); create a new engine`);
        worker.terminate();
      }
      p.reject(new Error(data.error.message));
    } else p.resolve(data.result);
  };
  worker.onerror = (e) => fail(`the engine's worker failed: ${e.message || 'could not start (is the package served with its worker.js and pkg/?)'}`);
  return {
    call(method, args = {}, onEvent, signal) {
      if (dead) return Promise.reject(dead);
      const id = nextId++;
      if (signal) signal.addEventListener('abort', () => worker.postMessage({ abort: id }), { once: true });
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject, onEvent });
        worker.postMessage({ id, method, args });
      });
    },
    terminate() {
      worker.terminate();
      fail('the engine was unloaded');
    },
  };
}

async function localBackend() {
  const { Host } = await import('./host.js');
  const host = new Host();
  const pkgBase = new URL('../pkg/', import.meta.url).href;
  return {
    async call(method, args = {}, onEvent = () => {}, signal) {
      if (method === 'init') return host.init({ ...args, pkgBase });
      if (method === 'generate') return host.generate(args, onEvent, () => !!signal?.aborted);
      return host[method](args, onEvent);
    },
    terminate() {},
  };
}

function abortError(signal) {
  const reason = signal?.reason;
  if (reason instanceof Error) return reason;
  const e = new Error('the request was aborted');
  e.name = 'AbortError';
  return e;
}

// OpenAI's request fields as core's GenerateOptions (missing fields keep core's defaults, the
// CLI's). `speculative`: true/false or { enabled, draft_max, ngram_min, ngram_max }.
function coreOptions(req) {
  const options = {};
  for (const name of ['temperature', 'top_p', 'top_k', 'min_p', 'seed', 'max_tokens', 'repeat_penalty', 'repeat_last_n']) {
    if (req[name] !== undefined && req[name] !== null) options[name] = req[name];
  }
  if (req.max_completion_tokens != null && options.max_tokens === undefined) options.max_tokens = req.max_completion_tokens;
  if (req.stop != null) options.stop = Array.isArray(req.stop) ? req.stop : [req.stop];
  if (typeof req.speculative === 'boolean') options.speculative = { enabled: req.speculative };
  else if (req.speculative) options.speculative = req.speculative;
  if (req.n != null && req.n !== 1) throw new Error('n: only one choice per request is supported');
  return options;
}

function messageText(m, i) {
  if (!m || typeof m.role !== 'string') throw new Error(`messages[${i}] needs a role`);
  if (typeof m.content === 'string') return { role: m.role, content: m.content };
  if (Array.isArray(m.content)) {
    const parts = m.content.map((p) => {
      if (p?.type !== 'text') throw new Error(`messages[${i}]: only text content parts are supported (got ${p?.type})`);
      return p.text;
    });
    return { role: m.role, content: parts.join('') };
  }
  throw new Error(`messages[${i}].content must be a string or text parts`);
}

/// Streams pieces of one request as an async iterable of chunks made by `chunk(piece)`, with the
/// reply's result handed to `last(result)` for the final chunk.
function stream(backend, args, signal, chunk, last) {
  const controller = new AbortController();
  const onAbort = () => controller.abort();
  signal?.addEventListener('abort', onAbort, { once: true });
  const queue = [];
  let wake = null;
  let settled = null; // { result } | { error }
  const push = () => { wake?.(); wake = null; };
  backend.call('generate', args, (event) => { if (event.type === 'token') { queue.push(event.text); push(); } }, controller.signal)
    .then((result) => { settled = { result }; push(); }, (error) => { settled = { error }; push(); });
  const iterator = {
    controller,
    async next() {
      for (;;) {
        if (queue.length) return { value: chunk(queue.shift()), done: false };
        if (settled) {
          signal?.removeEventListener('abort', onAbort);
          if (settled.error) throw settled.error;
          if (signal?.aborted) throw abortError(signal);
          if (settled.done) return { value: undefined, done: true };
          settled.done = true;
          return { value: last(settled.result), done: false };
        }
        await new Promise((resolve) => { wake = resolve; });
      }
    },
    // `break` in a for-await loop: stop generating.
    async return() {
      controller.abort();
      signal?.removeEventListener('abort', onAbort);
      return { value: undefined, done: true };
    },
    [Symbol.asyncIterator]() { return this; },
  };
  return iterator;
}

class Engine {
  constructor(backend, info) {
    this.backend = backend;
    this.info = info;
    this.history = [];
    const engine = this;
    this.chat = { completions: { create: (req) => engine.createChat(req) } };
    this.completions = { create: (req) => engine.createCompletion(req) };
  }

  /// Core's generation defaults (what a request gets for the fields it leaves out).
  get defaults() {
    return this.info.defaults;
  }

  async createChat(req) {
    if (!req || !Array.isArray(req.messages) || !req.messages.length) throw new Error('chat.completions.create needs messages: a non-empty array');
    const messages = req.messages.map(messageText);
    const options = coreOptions(req);
    const id = newId('chatcmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = this.info.model?.name ?? 'inferno';
    const args = { kind: 'chat', messages, options };
    this.history = messages;
    const remember = (text) => { this.history = [...messages, { role: 'assistant', content: text }]; };
    if (req.stream) {
      let text = '';
      let first = true;
      const base = { id, object: 'chat.completion.chunk', created, model };
      return stream(this.backend, args, req.signal, (piece) => {
        text += piece;
        const delta = first ? { role: 'assistant', content: piece } : { content: piece };
        first = false;
        return { ...base, choices: [{ index: 0, delta, finish_reason: null, logprobs: null }] };
      }, (result) => {
        remember(result.text);
        return { ...base, choices: [{ index: 0, delta: {}, finish_reason: result.finish_reason, logprobs: null }], usage: result.usage };
      });
    }
    const result = await this.run(args, req.signal);
    remember(result.text);
    return {
      id, object: 'chat.completion', created, model,
      choices: [{ index: 0, message: { role: 'assistant', content: result.text }, finish_reason: result.finish_reason, logprobs: null }],
      usage: result.usage,
    };
  }

  async createCompletion(req) {
    if (!req || typeof req.prompt !== 'string') throw new Error('completions.create needs prompt: a string');
    const args = { kind: 'prompt', prompt: req.prompt, options: coreOptions(req) };
    const id = newId('cmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = this.info.model?.name ?? 'inferno';
    const base = { id, object: 'text_completion', created, model };
    if (req.stream) {
      return stream(this.backend, args, req.signal,
        (piece) => ({ ...base, choices: [{ index: 0, text: piece, finish_reason: null, logprobs: null }] }),
        (result) => ({ ...base, choices: [{ index: 0, text: '', finish_reason: result.finish_reason, logprobs: null }], usage: result.usage }));
    }
    const result = await this.run(args, req.signal);
    return { ...base, choices: [{ index: 0, text: result.text, finish_reason: result.finish_reason, logprobs: null }], usage: result.usage };
  }

  async run(args, signal) {
    if (signal?.aborted) throw abortError(signal);
    const result = await this.backend.call('generate', args, undefined, signal);
    if (signal?.aborted) throw abortError(signal);
    return result;
  }

  /// Token ids of `text` (special tokens parsed, no BOS added).
  tokenize(text) {
    return this.backend.call('tokenize', { text: String(text) });
  }

  detokenize(ids) {
    return this.backend.call('detokenize', { ids: Array.from(ids) });
  }

  /// Prefills the conversation with `draft` as the next user message while it is being typed.
  compose(draft, messages = this.history) {
    return this.backend.call('compose', { messages: messages.map(messageText), draft: String(draft) });
  }

  stats() {
    return this.backend.call('stats');
  }

  async unload() {
    await this.backend.call('unload');
    this.backend.terminate();
  }
}

/// How long the engine's worker may take to start its build (instantiate it, and for the threads
/// build start its pool of Web Workers) before createEngine gives up on that worker.
const START_MS = 30_000;

/// Starts the engine and loads a model. See index.d.ts for the options.
export async function createEngine(options = {}) {
  const { onProgress, threads, cache = true, variant, maxBytes } = options;
  let { model } = options;
  // The worker resolves URLs against its own script: make a relative model URL the page's.
  if (typeof model === 'string' && globalThis.location && !isNode) model = new URL(model, location.href).href;
  if (model === undefined || model === null) throw new Error('createEngine needs a model: a URL, File, Blob, ArrayBuffer or (Node.js) a path');
  const useWorker = options.worker ?? (!isNode && typeof Worker !== 'undefined');
  let backend = useWorker ? workerBackend() : await localBackend();
  const init = backend.call('init', { threads, variant });
  // Firefox can leave the threads build's pool unstarted for good, the worker blocked, its
  // own timers too (here in 3 of 5 runs of the npm test's page, two starts each, with 15
  // workers on 2 cores; its hardwareConcurrency counts every online CPU, so a container's 2
  // cores can ask for 16 threads). Only that build starts a pool, and only a worker can be
  // timed from outside: past START_MS it is ended and a one-thread build starts in a new one.
  // (The page sees the worker's candidates: a dedicated worker shares its isolation.)
  const timed = useWorker && candidateVariants({ variant, threads })[0] === 'threads';
  let started;
  if (timed) {
    init.catch(() => {});
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, START_MS); });
    started = await Promise.race([init, late]).finally(() => clearTimeout(timer));
  } else {
    started = await init;
  }
  if (!started) {
    backend.terminate();
    const error = `did not start within ${START_MS / 1000} s`;
    if (variant) throw new Error(`cannot start the wasm engine: the ${variant} build ${error}`);
    backend = workerBackend();
    started = await backend.call('init', { threads: 1, skipped: [{ variant: 'threads', error: `its worker ${error}` }] });
  }
  const progress = (event) => {
    if (!onProgress) return;
    try {
      onProgress(event.type === 'download'
        ? { phase: 'download', loaded: event.loaded, total: event.total, cached: event.cached }
        : { phase: 'load', loaded: event.done, total: event.total, cached: false });
    } catch (e) {
      console.warn('onProgress threw:', e);
    }
  };
  let loaded;
  try {
    loaded = await backend.call('load', { model, cache, maxBytes }, progress);
  } catch (e) {
    backend.terminate();
    throw new Error(`cannot load the model: ${e.message}`);
  }
  return new Engine(backend, { ...loaded, defaults: started.defaults });
}

/// Models kept by the Cache API (`cache: true`): [{ url, bytes }].
export async function listCachedModels() {
  if (!globalThis.caches) return [];
  const store = await caches.open(MODEL_CACHE);
  const out = [];
  for (const request of await store.keys()) {
    const response = await store.match(request);
    out.push({ url: request.url, bytes: Number(response?.headers.get('content-length')) || 0 });
  }
  return out;
}

/// Deletes one cached model (its URL), or every one when called without a URL. Returns whether
/// anything was deleted.
export async function deleteCachedModel(url) {
  if (!globalThis.caches) return false;
  if (url === undefined) return caches.delete(MODEL_CACHE);
  const store = await caches.open(MODEL_CACHE);
  return store.delete(new URL(url, globalThis.location?.href).href);
}
