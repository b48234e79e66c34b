// Bench mode (www/bench.html): inferno's wasm builds and wllama on the same model in the same
// tab. Like `inferno bench`: per prompt length, one warm-up and the median of a few trials;
// prefill = one forward over the prompt, decode = 64 greedy steps. inferno runs in a worker
// (bench-worker.js): the one-thread relaxed (or best) build, and, when the page is
// cross-origin isolated, the threads build on every core. wllama runs on 1 thread, and on 2
// when isolated (its multi-thread build needs the same headers).
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
const cores = navigator.hardwareConcurrency || 1;
const isolated = self.crossOriginIsolated && cores > 1 && params.get('threads') !== '0';

// One inferno build in a fresh worker; resolves with its rows and the worker (for prompts).
function benchInferno(bytes, build, threads) {
  const worker = new Worker('bench-worker.js', { type: 'module' });
  return new Promise((resolve, reject) => {
    worker.onmessage = ({ data }) => {
      if (data.log) log(data.log);
      if (data.rows) resolve({ rows: data.rows, worker });
      if (data.error) reject(new Error(data.error));
    };
    worker.onerror = (e) => reject(new Error(e.message));
    worker.postMessage({ variant: build, threads, bytes: bytes.slice(), lengths, trials: TRIALS, decode: DECODE });
  });
}

// The prompt texts of inferno's tokens, from a worker that has an engine.
function promptTexts(worker, prompts) {
  return new Promise((resolve) => {
    worker.onmessage = ({ data }) => data.texts && resolve(data.texts);
    worker.postMessage({ prompts });
  });
}

async function benchWllama(worker, threads) {
  const { Wllama } = await import('./vendor/wllama/index.js');
  const wasmPaths = {
    default: new URL('vendor/wllama/wasm/wllama.wasm', location.href).href,
  };
  const wllama = new Wllama(wasmPaths);
  wllama.setCompat(null);
  await wllama.loadModelFromUrl(new URL('model.gguf', location.href).href, { n_threads: threads, n_ctx: 2048, n_gpu_layers: 0, useCache: false });
  const rows = [];
  for (const n of lengths) {
    const pre = [], dec = [];
    const texts = await promptTexts(worker, [...Array(TRIALS + 1).keys()].map((trial) => [trial + 100, n]));
    for (let trial = 0; trial <= TRIALS; trial++) {
      const out = await wllama.createCompletion({ prompt: texts[trial], max_tokens: DECODE, temperature: 0 });
      const t = out.timings;
      if (trial > 0) { pre.push(t.prompt_n / t.prompt_ms * 1e3); dec.push(t.predicted_n / t.predicted_ms * 1e3); }
    }
    const row = { engine: 'wllama 3.13', threads, prompt_tokens: n, prefill_tok_s: median(pre), decode_tok_s: median(dec) };
    log(JSON.stringify(row));
    rows.push(row);
  }
  await wllama.exit();
  return rows;
}

try {
  const bytes = new Uint8Array(await (await fetch('model.gguf')).arrayBuffer());
  const rows = [];
  const single = await benchInferno(bytes, variant, 1);
  rows.push(...single.rows);
  if (isolated) {
    const multi = await benchInferno(bytes, 'threads', cores);
    rows.push(...multi.rows);
    multi.worker.terminate();
  }
  if (params.get('wllama') !== '0') {
    for (const threads of isolated ? [1, 2] : [1]) {
      try {
        rows.push(...await benchWllama(single.worker, threads));
      } catch (e) {
        log(`wllama (${threads} threads) failed: ${e.stack || e}`);
      }
    }
  }
  single.worker.terminate();
  window.benchResult = { rows };
} catch (e) {
  log(`bench failed: ${e.stack || e}`);
  window.benchResult = { error: String(e.stack || e) };
}
