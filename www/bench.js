// Bench mode (www/bench.html): inferno's wasm build and wllama (single thread, no COOP/COEP)
// on the same model in the same tab. Like `inferno bench`: per prompt length, one warm-up and
// the median of a few trials; prefill = one forward over the prompt, decode = 64 greedy steps.
// Results go to the page and to window.benchResult (read by tests/wasm/bench.mjs).
const params = new URL(location.href).searchParams;
const lengths = (params.get('lengths') || '50,500').split(',').map(Number);
const TRIALS = Number(params.get('trials') || 3);
const DECODE = 64;
const logEl = document.getElementById('log');
const log = (line) => { logEl.textContent += `${line}\n`; console.log(line); };
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const PROBE_RELAXED = [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0,
  65, 1, 253, 15, 65, 2, 253, 15, 253, 128, 2, 11];
const PROBE_SIMD = [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0,
  65, 0, 253, 15, 253, 98, 11];
const variant = params.get('variant')
  || (WebAssembly.validate(new Uint8Array(PROBE_RELAXED)) ? 'relaxed'
    : WebAssembly.validate(new Uint8Array(PROBE_SIMD)) ? 'simd128' : 'reference');

// Prose whose every trial starts differently, so no cache can be reused between trials.
function prose(trial) {
  const words = ('the river carried light across the valley while old stones remembered every season '
    + 'and travellers wrote letters about bread music weather distant cities quiet harbours').split(' ');
  let s = `Story ${trial * 7919 % 1000}: `;
  let x = trial + 1;
  for (let i = 0; i < 1200; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    s += words[x % words.length] + (i % 13 === 12 ? '. ' : ' ');
  }
  return s;
}

async function benchInferno(bytes) {
  const wasm = await import(`./pkg/${variant}/inferno_wasm.js`);
  await wasm.default();
  const t0 = performance.now();
  const engine = new wasm.WasmEngine(bytes);
  log(`inferno: wasm ${variant}, kernels ${engine.kernels()}, loaded in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
  const rows = [];
  for (const n of lengths) {
    const pre = [], dec = [];
    for (let trial = 0; trial <= TRIALS; trial++) {
      const ids = engine.tokenize(prose(trial)).slice(0, n);
      let t = performance.now();
      engine.forward_logits(ids);
      const prefillMs = performance.now() - t;
      t = performance.now();
      engine.greedy(ids, DECODE);
      const decodeMs = performance.now() - t - prefillMs;
      if (trial > 0) { pre.push(prefillMs); dec.push(decodeMs); }
    }
    const row = { engine: `inferno wasm ${variant}`, prompt_tokens: n, prefill_tok_s: n / median(pre) * 1e3, decode_tok_s: DECODE / median(dec) * 1e3 };
    log(JSON.stringify(row));
    rows.push(row);
  }
  engine.free();
  return rows;
}

async function benchWllama(inferno) {
  const { Wllama } = await import('./vendor/wllama/index.js');
  const wllama = new Wllama({ default: new URL('vendor/wllama/wasm/wllama.wasm', location.href).href });
  wllama.setCompat(null);
  await wllama.loadModelFromUrl(new URL('model.gguf', location.href).href, { n_threads: 1, n_ctx: 2048, n_gpu_layers: 0, useCache: false });
  const rows = [];
  for (const n of lengths) {
    const pre = [], dec = [];
    for (let trial = 0; trial <= TRIALS; trial++) {
      // The same prompt tokens as inferno's (the text decoded back from them).
      const prompt = inferno.detokenize(inferno.tokenize(prose(trial + 100)).slice(0, n));
      const out = await wllama.createCompletion({ prompt, max_tokens: DECODE, temperature: 0 });
      const t = out.timings;
      if (trial > 0) { pre.push(t.prompt_n / t.prompt_ms * 1e3); dec.push(t.predicted_n / t.predicted_ms * 1e3); }
    }
    const row = { engine: 'wllama 3.13 (1 thread)', prompt_tokens: n, prefill_tok_s: median(pre), decode_tok_s: median(dec) };
    log(JSON.stringify(row));
    rows.push(row);
  }
  await wllama.exit();
  return rows;
}

try {
  const bytes = new Uint8Array(await (await fetch('model.gguf')).arrayBuffer());
  const rows = await benchInferno(bytes);
  if (params.get('wllama') !== '0') {
    const wasm = await import(`./pkg/${variant}/inferno_wasm.js`);
    const tokenizerEngine = new wasm.WasmEngine(bytes);
    try {
      rows.push(...await benchWllama(tokenizerEngine));
    } catch (e) {
      log(`wllama failed: ${e.stack || e}`);
    }
    tokenizerEngine.free();
  }
  window.benchResult = { rows };
} catch (e) {
  log(`bench failed: ${e.stack || e}`);
  window.benchResult = { error: String(e.stack || e) };
}
