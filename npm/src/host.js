// The engine's host: owns one wasm build, one model and one KV cache, and runs requests one at a
// time. The same code runs inside the package's Web Worker (worker.js) and, in Node.js, on the
// caller's thread (index.js). Every method takes plain data and returns plain data, so the
// worker only forwards them. Text is generated one step per `next_token` call, with a yield to
// the event loop between steps so an abort (or a compose) is seen between tokens.

export const MODEL_CACHE = 'inferno-models';
// Models above this size do not fit in 32-bit wasm memory beside their own copy during load.
export const MAX_MODEL_BYTES = 1536 * 1024 * 1024;
export const VARIANTS = ['threads', 'relaxed', 'simd128', 'reference'];

const isNode = typeof process !== 'undefined' && !!process.versions?.node && typeof window === 'undefined'
  && typeof WorkerGlobalScope === 'undefined';

// Feature probes: a function returning v128 (simd128), and one using i8x16.relaxed_swizzle.
const PROBES = {
  simd128: [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0,
    65, 0, 253, 15, 253, 98, 11],
  relaxed: [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0,
    65, 1, 253, 15, 65, 2, 253, 15, 253, 128, 2, 11],
};

/// The builds this runtime can run, fastest first. The threads build needs shared memory, which
/// browsers give only to cross-origin-isolated pages (COOP + COEP); Node.js gets the one-thread
/// simd128 build (its relaxed-simd is behind a flag and miscompiled by its baseline compiler).
export function candidateVariants({ variant, threads } = {}) {
  if (variant) return [variant];
  const ok = (name) => WebAssembly.validate(new Uint8Array(PROBES[name]));
  if (isNode) return [ok('simd128') && 'simd128', 'reference'].filter(Boolean);
  const cores = globalThis.navigator?.hardwareConcurrency || 1;
  const wantThreads = threads === undefined ? cores > 1 : threads > 1;
  const isolated = globalThis.crossOriginIsolated && ok('relaxed') && wantThreads;
  return [isolated && 'threads', ok('relaxed') && 'relaxed', ok('simd128') && 'simd128', 'reference']
    .filter(Boolean);
}

// A macrotask boundary: lets queued messages (abort, compose) run between tokens.
const yieldToEvents = isNode
  ? () => new Promise((resolve) => setImmediate(resolve))
  : (() => {
    const channel = new MessageChannel();
    const waiting = [];
    channel.port1.onmessage = () => waiting.shift()?.();
    return () => new Promise((resolve) => { waiting.push(resolve); channel.port2.postMessage(0); });
  })();

const now = () => (globalThis.performance ? performance.now() : Date.now());
const mb = (n) => `${(n / 1048576).toFixed(0)} MB`;

function checkSize(bytes, maxBytes) {
  const limit = maxBytes || MAX_MODEL_BYTES;
  if (bytes > limit) {
    throw new Error(`the model is too large: ${mb(bytes)}, at most ${mb(limit)} fits in wasm memory`);
  }
}

// The stop reasons of core, as OpenAI's finish_reason.
const FINISH = { EndOfGeneration: 'stop', StopString: 'stop', MaxTokens: 'length', ContextFull: 'length', Cancelled: 'abort' };

export class Host {
  constructor() {
    this.wasm = null;
    this.variant = null;
    this.threads = 1;
    this.engine = null;      // WasmEngine
    this.generation = null;  // WasmGeneration
    this.model = null;       // { name, bytes }
    this.last = null;        // the last request's figures
    this.queue = Promise.resolve();
  }

  // Runs requests one after another (a reply must end before the next prompt is prefilled).
  serial(fn) {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => {});
    return run;
  }

  /// Instantiates the fastest build that works here. `pkgBase`: URL of the folder of builds.
  async init({ variant, threads, pkgBase, skipped = [] }) {
    let failure;
    this.skipped = [...skipped];
    for (const candidate of candidateVariants({ variant, threads })) {
      try {
        const glue = new URL(`${candidate}/inferno_wasm.js`, pkgBase);
        const module = await import(glue.href);
        if (isNode) {
          const { readFile } = await import('node:fs/promises');
          const { fileURLToPath } = await import('node:url');
          const wasmPath = fileURLToPath(new URL(`${candidate}/inferno_wasm_bg.wasm`, pkgBase));
          await module.default({ module_or_path: await readFile(wasmPath) });
        } else {
          await module.default();
        }
        let used = 1;
        if (module.initThreadPool) {
          const cores = globalThis.navigator?.hardwareConcurrency || 2;
          const n = Math.max(2, threads > 1 ? threads : Math.min(cores, 16));
          await module.initThreadPool(n - 1);
          used = module.use_threads(n);
        }
        [this.wasm, this.variant, this.threads] = [module, candidate, used];
        return { variant: candidate, threads: used, defaults: JSON.parse(module.generate_defaults()) };
      } catch (e) {
        // Not built, or not runnable here: the next one (stats() says why it was skipped).
        failure = e;
        this.skipped.push({ variant: candidate, error: String(e?.message || e) });
      }
    }
    throw new Error(`cannot start the wasm engine: ${failure?.message || failure}`);
  }

  /// The model's bytes: from a URL (the Cache API first when `cache`), a path (Node), a
  /// File/Blob, an ArrayBuffer or a typed array. `emit` gets { type: 'download', loaded, total, cached }.
  async fetchModel({ model, cache = true, maxBytes }, emit) {
    if (model instanceof ArrayBuffer) model = new Uint8Array(model);
    if (ArrayBuffer.isView(model)) {
      checkSize(model.byteLength, maxBytes);
      const bytes = new Uint8Array(model.buffer, model.byteOffset, model.byteLength);
      return { bytes, name: 'model.gguf' };
    }
    if (typeof Blob !== 'undefined' && model instanceof Blob) {
      checkSize(model.size, maxBytes);
      emit({ type: 'download', loaded: model.size, total: model.size, cached: false });
      return { bytes: new Uint8Array(await model.arrayBuffer()), name: model.name || 'model.gguf' };
    }
    if (typeof model !== 'string') {
      throw new Error('model must be a URL, a path (Node.js), a File, a Blob, an ArrayBuffer or a Uint8Array');
    }
    const name = model.split(/[/\\]/).pop().split('?')[0] || 'model.gguf';
    if (isNode && !/^(https?|data|blob):/.test(model)) {
      const { readFile, stat } = await import('node:fs/promises');
      const path = model.startsWith('file:') ? (await import('node:url')).fileURLToPath(model) : model;
      const size = (await stat(path).catch((e) => { throw new Error(`cannot read the model ${path}: ${e.message}`); })).size;
      checkSize(size, maxBytes);
      const bytes = new Uint8Array(await readFile(path));
      emit({ type: 'download', loaded: bytes.length, total: bytes.length, cached: false });
      return { bytes, name };
    }
    const store = cache && globalThis.caches ? await caches.open(MODEL_CACHE).catch(() => null) : null;
    const cached = store && (await store.match(model));
    let response;
    try {
      response = cached || (await fetch(model));
    } catch (e) {
      throw new Error(`cannot download ${model}: ${e.message || e}`);
    }
    if (!response.ok) throw new Error(`cannot download ${model}: HTTP ${response.status}`);
    const total = Number(response.headers.get('content-length')) || 0;
    checkSize(total, maxBytes);
    const chunks = [];
    let loaded = 0;
    let lastEmit = 0;
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      loaded += value.length;
      checkSize(loaded, maxBytes);
      if (now() - lastEmit > 50) {
        emit({ type: 'download', loaded, total, cached: !!cached });
        lastEmit = now();
      }
    }
    emit({ type: 'download', loaded, total: loaded, cached: !!cached });
    if (total && loaded !== total) throw new Error(`the download of ${model} is truncated: ${loaded} of ${total} bytes`);
    const bytes = new Uint8Array(loaded);
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
    if (!cached && store) {
      await store.put(model, new Response(bytes, { headers: { 'content-length': String(loaded) } })).catch(() => {});
    }
    return { bytes, name };
  }

  /// Loads a model (replacing the one loaded, which stays in use if this one fails).
  load(request, emit) {
    return this.serial(async () => {
      if (!this.wasm) throw new Error('the wasm engine is not started');
      const { bytes, name } = await this.fetchModel(request, emit);
      const t0 = now();
      let lastEmit = 0;
      const next = new this.wasm.WasmEngine(bytes, (done, total) => {
        if (now() - lastEmit > 50 || done === total) {
          emit({ type: 'load', done, total });
          lastEmit = now();
        }
      });
      this.unloadNow();
      this.engine = next;
      this.generation = new this.wasm.WasmGeneration(next);
      this.model = { name, bytes: bytes.length };
      return { ...this.info(), ms: now() - t0 };
    });
  }

  info() {
    return {
      variant: this.variant, threads: this.threads, kernels: this.engine?.kernels() ?? null, skipped: this.skipped,
      model: this.model && { ...this.model, config: JSON.parse(this.engine.config()) },
    };
  }

  ready() {
    if (!this.engine) throw new Error('no model is loaded (createEngine loads one; unload() drops it)');
  }

  /// One reply: `kind` 'chat' ({ messages }) or 'prompt' ({ prompt }), options as core's
  /// GenerateOptions JSON. `emit` gets { type: 'token', text } per piece; `aborted()` is
  /// polled between tokens. Returns the reply and its figures.
  generate({ kind, messages, prompt, options }, emit, aborted) {
    return this.serial(async () => {
      this.ready();
      const g = this.generation;
      let t0 = now();
      const start = kind === 'chat'
        ? g.begin_chat(JSON.stringify(messages), JSON.stringify(options))
        : g.begin_prompt(prompt, JSON.stringify(options));
      const prefillMs = now() - t0;
      const figures = { prompt_tokens: start.prompt_tokens, reused: start.reused, prefilled: start.prefilled };
      start.free();
      let decodeMs = 0;
      let cancelled = false;
      let reply;
      try {
        for (;;) {
          t0 = now();
          const piece = g.next_token();
          decodeMs += now() - t0;
          if (piece === undefined) break;
          if (piece) emit({ type: 'token', text: piece });
          await yieldToEvents();
          if (aborted()) {
            g.cancel();
            cancelled = true;
            break;
          }
        }
      } finally {
        // Ends the reply also when a step failed, so the next request can begin.
        reply = JSON.parse(g.finish());
      }
      this.last = {
        ...figures, completion_tokens: reply.completion_tokens, prefill_ms: prefillMs, decode_ms: decodeMs,
        stop: reply.stop, speculative: options.speculative?.enabled === false ? null : reply.speculative,
      };
      return {
        text: reply.text, finish_reason: cancelled ? 'abort' : (FINISH[reply.stop] || 'stop'),
        usage: { prompt_tokens: figures.prompt_tokens, completion_tokens: reply.completion_tokens,
          total_tokens: figures.prompt_tokens + reply.completion_tokens },
        stats: this.last,
      };
    });
  }

  /// Compose-while-typing: prefills `messages` and then `draft` as the next user message.
  compose({ messages, draft }) {
    return this.serial(async () => {
      this.ready();
      const t0 = now();
      const d = this.generation.compose(JSON.stringify(messages || []), draft);
      const out = { reused: d.reused, prefilled: d.prefilled, ms: now() - t0 };
      d.free();
      return out;
    });
  }

  tokenize({ text }) {
    this.ready();
    return Array.from(this.engine.tokenize(text));
  }

  detokenize({ ids }) {
    this.ready();
    return this.engine.detokenize(Uint32Array.from(ids));
  }

  stats() {
    return { ...this.info(), cached_tokens: this.generation?.cached_tokens() ?? 0, last: this.last };
  }

  unloadNow() {
    this.generation?.free();
    this.engine?.free();
    [this.generation, this.engine, this.model, this.last] = [null, null, null, null];
  }

  unload() {
    return this.serial(async () => this.unloadNow());
  }
}
