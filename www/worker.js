// The worker that owns the wasm engine: picks the fastest build this browser validates, loads
// the model (from the network through the Cache API, or a local file), and runs chat turns one
// token at a time, yielding between tokens so Stop and new drafts are seen. Protocol: protocol.js.
import { ToWorker, FromWorker, MAX_MODEL_BYTES } from './protocol.js';

const MODEL_CACHE = 'inferno-models';

// Feature probes: a function returning v128 (simd128), and one using i8x16.relaxed_swizzle.
const PROBES = {
  simd128: [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0,
    65, 0, 253, 15, 253, 98, 11],
  relaxed: [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0,
    65, 1, 253, 15, 65, 2, 253, 15, 253, 128, 2, 11],
};

// The builds this browser can run, fastest first (?variant= forces one). The threads build
// needs shared memory, which browsers give only to cross-origin-isolated pages (COOP + COEP).
function candidateVariants() {
  const forced = new URL(self.location.href).searchParams.get('variant');
  if (forced) return [forced];
  const ok = (name) => WebAssembly.validate(new Uint8Array(PROBES[name]));
  const threads = self.crossOriginIsolated && ok('relaxed') && (navigator.hardwareConcurrency || 1) > 1;
  return [threads && 'threads', ok('relaxed') && 'relaxed', ok('simd128') && 'simd128', 'reference']
    .filter(Boolean);
}

// Threads of the threads build, the engine's own worker included: one per core (?threads=
// sets it, at least 2).
function poolSize() {
  const asked = Number(new URL(self.location.href).searchParams.get('threads'));
  return Math.max(2, asked > 0 ? asked : Math.min(navigator.hardwareConcurrency || 1, 16));
}

const post = (type, fields = {}) => self.postMessage({ type, ...fields });

let wasm = null;       // the wasm-bindgen module
let variant = null;
let threads = 1;       // threads the engine splits its work over
let engine = null;     // WasmEngine
let chat = null;       // WasmChat
let generating = false;
let stopRequested = false;
let pendingDraft = null;
let draftScheduled = false;
let settingsKey = '';

const wasmReady = (async () => {
  let failure;
  for (const candidate of candidateVariants()) {
    try {
      const module = await import(`./pkg/${candidate}/inferno_wasm.js`);
      await module.default();
      if (module.initThreadPool) {
        await module.initThreadPool(poolSize() - 1);
        threads = module.use_threads(poolSize());
      }
      [wasm, variant] = [module, candidate];
      return post(FromWorker.WASM, { variant, threads, defaults: JSON.parse(module.generate_defaults()) });
    } catch (e) {
      // Not built, or not runnable here: try the next one.
      failure = e;
      console.warn(`wasm build ${candidate} unavailable:`, e);
    }
  }
  throw failure;
})().catch((e) => post(FromWorker.ERROR, { message: `cannot start the wasm engine: ${e}`, during: 'wasm' }));

async function engineReady() {
  await wasmReady;
  if (!wasm) throw new Error('the wasm engine did not start (see the error above)');
}

// A macrotask boundary: lets queued messages (Stop, drafts) run between tokens.
const channel = new MessageChannel();
const waiting = [];
channel.port1.onmessage = () => waiting.shift()?.();
const yieldToEvents = () => new Promise((resolve) => { waiting.push(resolve); channel.port2.postMessage(0); });

function tooLarge(bytes, maxBytes) {
  const limit = maxBytes || MAX_MODEL_BYTES;
  if (bytes > limit) {
    const mb = (n) => `${(n / 1048576).toFixed(0)} MB`;
    throw new Error(`the model is too large for the browser: ${mb(bytes)}, at most ${mb(limit)} fits in wasm memory`);
  }
}

// The model's bytes from the Cache API, or streamed from the network (with progress) and cached.
async function fetchModel(url, maxBytes) {
  const cache = self.caches ? await caches.open(MODEL_CACHE).catch(() => null) : null;
  const cached = cache && (await cache.match(url));
  const response = cached || (await fetch(url));
  if (!response.ok) throw new Error(`cannot download ${url}: HTTP ${response.status}`);
  const total = Number(response.headers.get('content-length')) || 0;
  tooLarge(total, maxBytes);
  const bytes = new Uint8Array(total);
  let loaded = 0;
  const chunks = [];
  const reader = response.body.getReader();
  let lastPost = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (loaded + value.length <= total) bytes.set(value, loaded);
    else chunks.push(value);
    loaded += value.length;
    tooLarge(loaded, maxBytes);
    if (performance.now() - lastPost > 50) {
      post(FromWorker.DOWNLOAD, { loaded, total, cached: !!cached });
      lastPost = performance.now();
    }
  }
  post(FromWorker.DOWNLOAD, { loaded, total: loaded, cached: !!cached });
  if (loaded !== total) throw new Error(`the download of ${url} is truncated: ${loaded} of ${total} bytes`);
  if (!cached && cache) {
    await cache.put(url, new Response(bytes, { headers: { 'content-length': String(loaded) } }))
      .catch((e) => console.warn('model not cached:', e));
  }
  return bytes;
}

function loadEngine(bytes, name) {
  const t0 = performance.now();
  let lastPost = 0;
  // A bad file throws here and the model loaded before stays in use.
  const next = new wasm.WasmEngine(bytes, (done, total) => {
    if (performance.now() - lastPost > 50 || done === total) {
      post(FromWorker.LOAD, { done, total });
      lastPost = performance.now();
    }
  });
  chat?.free();
  engine?.free();
  engine = next;
  chat = new wasm.WasmChat(engine);
  settingsKey = '';
  post(FromWorker.LOADED, {
    kernels: engine.kernels(), variant, threads, config: JSON.parse(engine.config()),
    ms: performance.now() - t0, bytes: bytes.length, name,
  });
}

function applySettings(s) {
  const key = JSON.stringify(s);
  if (key === settingsKey) return;
  chat.set_options(JSON.stringify(s.options));
  const systemChanged = JSON.parse(settingsKey || '{}').system !== s.system;
  if (systemChanged) chat.set_system(s.system || undefined);
  settingsKey = key;
}

async function runDrafts() {
  draftScheduled = false;
  if (!chat || generating || pendingDraft === null) return;
  const text = pendingDraft;
  pendingDraft = null;
  const t0 = performance.now();
  const d = chat.sync_draft(text);
  post(FromWorker.DRAFTED, { reused: d.reused, prefilled: d.prefilled, ms: performance.now() - t0 });
}

async function turn(text) {
  if (!chat) throw new Error('no model is loaded yet');
  if (generating) throw new Error('a reply is still being generated');
  generating = true;
  stopRequested = false;
  pendingDraft = null;
  try {
    let t0 = performance.now();
    const start = chat.begin_turn(text);
    const prefillMs = performance.now() - t0;
    post(FromWorker.TURN_START, {
      promptTokens: start.prompt_tokens, reused: start.reused, prefilled: start.prefilled,
      droppedTurns: start.dropped_turns, ms: prefillMs,
    });
    let decodeMs = 0;
    for (;;) {
      t0 = performance.now();
      const piece = chat.next_token();
      decodeMs += performance.now() - t0;
      if (piece === undefined) break;
      if (piece) post(FromWorker.TOKEN, { text: piece });
      await yieldToEvents();
      if (stopRequested) {
        chat.cancel();
        break;
      }
    }
    const stop = stopRequested ? 'Stopped' : (chat.stop_reason() || 'Stopped');
    const decoded = chat.turn_tokens();
    const stats = JSON.parse(chat.turn_stats());
    const speculating = JSON.parse(settingsKey || '{}').options?.speculative?.enabled;
    const speculative = speculating ? stats : null;
    const reply = chat.end_turn();
    post(FromWorker.TURN_END, { text: reply, stop, prefilled: start.prefilled, prefillMs, decoded, decodeMs, speculative });
  } finally {
    generating = false;
  }
}

const handlers = {
  async [ToWorker.LOAD_URL]({ url, maxBytes }) {
    await engineReady();
    const bytes = await fetchModel(url, maxBytes);
    loadEngine(bytes, url.split('/').pop());
  },
  async [ToWorker.LOAD_FILE]({ file, maxBytes }) {
    await engineReady();
    tooLarge(file.size, maxBytes);
    post(FromWorker.DOWNLOAD, { loaded: file.size, total: file.size, cached: false });
    loadEngine(new Uint8Array(await file.arrayBuffer()), file.name);
  },
  [ToWorker.SETTINGS](s) {
    if (chat) applySettings(s);
  },
  [ToWorker.DRAFT]({ text }) {
    pendingDraft = text;
    if (!draftScheduled) {
      draftScheduled = true;
      yieldToEvents().then(runDrafts).catch((e) => post(FromWorker.ERROR, { message: String(e.message || e), during: 'draft' }));
    }
  },
  [ToWorker.SEND]({ text }) {
    return turn(text);
  },
  [ToWorker.STOP]() {
    stopRequested = true;
  },
  [ToWorker.RESET]() {
    if (chat && !generating) chat.reset();
  },
};

const during = { [ToWorker.LOAD_URL]: 'load', [ToWorker.LOAD_FILE]: 'load', [ToWorker.SEND]: 'turn', [ToWorker.SETTINGS]: 'settings' };

self.onmessage = async ({ data }) => {
  const handler = handlers[data.type];
  if (!handler) return post(FromWorker.ERROR, { message: `unknown message ${data.type}`, during: 'protocol' });
  try {
    await handler(data);
  } catch (e) {
    // A trap (a panic aborts) leaves the wasm instance unusable: the page restarts the worker.
    const fatal = e instanceof WebAssembly.RuntimeError;
    post(FromWorker.ERROR, { message: String(e?.message || e), during: during[data.type] || data.type, fatal });
  }
};
