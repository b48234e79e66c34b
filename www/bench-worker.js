// The bench's inferno side, in a worker (the threads build's pool waits here, never on the
// page): one wasm build on the model bytes it is sent, per prompt length one warm-up and the
// median of the trials; prefill = one forward over the prompt, decode = greedy steps after it.
// Message in: { variant, threads, bytes, lengths, trials, decode }; out: { log } lines, then
// { rows } or { error }. Also answers { prompts: [[trial, n], ...] } with the prompt texts
// (its tokens decoded back), so wllama gets the same tokens.
import { prose } from './bench-prose.js';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
let engine = null;

self.onmessage = async ({ data }) => {
  try {
    if (data.prompts) {
      const texts = data.prompts.map(([trial, n]) => engine.detokenize(engine.tokenize(prose(trial)).slice(0, n)));
      return self.postMessage({ texts });
    }
    const { variant, threads, bytes, lengths, trials, decode } = data;
    const wasm = await import(`./inferno/pkg/${variant}/inferno_wasm.js`);
    await wasm.default();
    let used = 1;
    if (threads > 1) {
      await wasm.initThreadPool(threads - 1);
      used = wasm.use_threads(threads);
    }
    const t0 = performance.now();
    engine = new wasm.WasmEngine(bytes);
    self.postMessage({ log: `inferno: wasm ${variant}, ${used} thread(s), kernels ${engine.kernels()}, loaded in ${((performance.now() - t0) / 1e3).toFixed(1)} s` });
    const rows = [];
    for (const n of lengths) {
      const pre = [], dec = [];
      for (let trial = 0; trial <= trials; trial++) {
        const ids = engine.tokenize(prose(trial)).slice(0, n);
        let t = performance.now();
        engine.forward_logits(ids);
        const prefillMs = performance.now() - t;
        t = performance.now();
        engine.greedy(ids, decode);
        const decodeMs = performance.now() - t - prefillMs;
        if (trial > 0) { pre.push(prefillMs); dec.push(decodeMs); }
      }
      const row = { engine: `inferno wasm ${variant}`, threads: used, prompt_tokens: n, prefill_tok_s: n / median(pre) * 1e3, decode_tok_s: decode / median(dec) * 1e3 };
      self.postMessage({ log: JSON.stringify(row) });
      rows.push(row);
    }
    self.postMessage({ rows });
  } catch (e) {
    self.postMessage({ error: String(e.stack || e) });
  }
};
