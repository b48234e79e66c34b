// The messages between the page (main.js) and the worker (worker.js) that owns the engine:
// the one table both sides use. Every message is { type, ...fields }.

// Page -> worker.
export const ToWorker = {
  LOAD_URL: 'load-url',   // { url, maxBytes }: fetch (or take from the Cache API) and load
  LOAD_FILE: 'load-file', // { file: File, maxBytes }: a local GGUF from the file picker
  SETTINGS: 'settings',   // { options, system }: options as core's GenerateOptions (field names of
                          //   FromWorker.WASM's defaults: temperature, top_k, top_p, min_p,
                          //   repeat_penalty, repeat_last_n, seed, max_tokens, stop)
  DRAFT: 'draft',         // { text }: the message being typed (compose-while-typing)
  SEND: 'send',           // { text }: a user message; the reply streams back
  STOP: 'stop',           // {}: end the reply after the current token
  RESET: 'reset',         // {}: forget the conversation
};

// Worker -> page.
export const FromWorker = {
  WASM: 'wasm',             // { variant, threads, defaults }: the build picked (reference, simd128,
                            //   relaxed, threads) and core's generation defaults (the CLI's too)
  DOWNLOAD: 'download',     // { loaded, total, cached }: bytes of the model fetched so far
  LOAD: 'load',             // { done, total }: weights repacked so far
  LOADED: 'loaded',         // { kernels, variant, threads, config, ms, bytes, name }
  DRAFTED: 'drafted',       // { reused, prefilled, ms }
  TURN_START: 'turn-start', // { promptTokens, reused, prefilled, droppedTurns, ms }: droppedTurns > 0
                            //   when the oldest turns no longer fitted the context
  TOKEN: 'token',           // { text }
  TURN_END: 'turn-end',     // { text, stop, prefilled, prefillMs, decoded, decodeMs,
                            //   speculative: { attempts, drafted, accepted, forwards, tokens } | null }
  ERROR: 'error',           // { message, during: 'load' | 'turn' | 'draft' | 'settings' | 'wasm',
                            //   fatal: the wasm instance trapped, so the page restarts the worker }
};

// Models above this size do not fit in 32-bit wasm memory beside their own copy during load.
export const MAX_MODEL_BYTES = 1536 * 1024 * 1024;
