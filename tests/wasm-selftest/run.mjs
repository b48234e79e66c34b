// Runs the wasm kernels' self test (and optionally the matmul and attention benchmarks) in a
// plain wasm32-unknown-unknown module built from this crate, with no wasm-bindgen.
//
//   node run.mjs <file.wasm> [--expect reference,simd128] [--seed N] [--bench] [--chromium]
//   node --experimental-wasm-relaxed-simd --no-liftoff run.mjs <relaxed.wasm> ...
//
// Prints one line per result; exits 0 when every backend equals the reference bitwise (and
// the build has exactly the backends --expect names), 1 otherwise.
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a));
const option = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
if (!file) {
  console.error('usage: node run.mjs <file.wasm> [--expect a,b] [--seed N] [--bench]');
  process.exit(2);
}

const bytes = readFileSync(file);
if (!WebAssembly.validate(bytes)) {
  console.error(`${file}: this engine cannot validate the module (relaxed-simd needs ` +
    `node --experimental-wasm-relaxed-simd --no-liftoff)`);
  process.exit(1);
}
// inferno-core's wasm dependencies (getrandom's wasm_js backend) leave wasm-bindgen's
// placeholder imports in the module; nothing here calls them, so stubs that throw satisfy them.
const module = await WebAssembly.compile(bytes);
const imports = {};
for (const { module: from, name, kind } of WebAssembly.Module.imports(module)) {
  if (kind !== 'function') throw new Error(`${file}: unexpected ${kind} import ${from}.${name}`);
  imports[from] ??= {};
  imports[from][name] = () => {
    throw new Error(`${from}.${name} called: the self test must not reach JavaScript`);
  };
}
const instance = await WebAssembly.instantiate(module, imports);
const wasm = instance.exports;
const message = () => new TextDecoder().decode(
  new Uint8Array(wasm.memory.buffer, wasm.inferno_message_ptr(), wasm.inferno_message_len()));

wasm.inferno_backends();
const backends = message().split(',');
const expect = option('--expect');
if (expect !== undefined && expect !== backends.join(',')) {
  console.error(`${file}: backends ${backends.join(',')}, expected ${expect}`);
  process.exit(1);
}

const seed = BigInt(option('--seed') ?? '12345');
const started = performance.now();
const failed = wasm.inferno_self_test(seed);
const seconds = ((performance.now() - started) / 1000).toFixed(1);
if (failed) {
  console.error(`${file}: MISMATCH (seed ${seed}): ${message()}`);
  process.exit(1);
}
const simd = backends.filter((name) => name !== 'reference');
console.log(simd.length === 0
  ? `${file}: ok, reference only (no SIMD backend in this build)`
  : `${file}: ok, ${simd.join(', ')} equal the reference bitwise (seed ${seed}, ${seconds} s)`);

// The matmul and attention benchmarks, self-contained so they can also run inside a Chromium
// page (its source is sent there): `exports` are the instance's exports, `names` the backends.
// Returns lines.
function benchKernels(exports, names) {
  const lines = [];
  // Seconds per call of `run(iterations)`: the median of 7 timed trials after a warm-up.
  const perCall = (run, iterations) => {
    run(iterations);
    const times = [];
    for (let trial = 0; trial < 7; trial++) {
      const t0 = performance.now();
      run(iterations);
      times.push((performance.now() - t0) / 1000);
    }
    times.sort((a, b) => a - b);
    return times[3] / iterations;
  };
  // [type, kind, rows, tokens]: SmolLM2's FFN matrix (576 columns, L2-sized) for decode and
  // prefill, its tied output head (30 MB, streamed from memory) for decode, and Gemma 3 270M's
  // FFN down projection (640 x 2048) as Q4_K and Q6_K.
  const cases = [['Q4_1', 0, 1536, 1], ['Q4_1', 0, 1536, 16], ['Q8_0', 1, 49152, 1],
    ['Q4_K', 2, 640, 1], ['Q4_K', 2, 640, 16], ['Q6_K', 3, 640, 1], ['Q6_K', 3, 640, 16]];
  for (const [type, kind, rows, tokens] of cases) {
    const cols = exports.inferno_bench_setup(kind, rows, tokens);
    names.forEach((name, index) => {
      const iterations = Math.max(1, Math.round(300000 * 576 / (rows * cols * tokens)));
      const call = perCall((n) => exports.inferno_bench_run(index, n), iterations);
      const gops = (2 * rows * cols * tokens) / call / 1e9;
      lines.push(`bench matmul ${type} ${rows}x${cols} tokens ${tokens} [${name}]: ` +
        `${(call * 1e6).toFixed(0)} us/call, ${gops.toFixed(1)} GOPS`);
    });
  }
  // One decode step's attention for one KV head (f16 cache) of TinyLlama's shape (8 query heads
  // of 64) after 500 and 1500 positions, and of Gemma 3's (4 query heads of 256) after 500.
  for (const [headDim, heads, positions] of [[64, 8, 500], [64, 8, 1500], [256, 4, 500]]) {
    exports.inferno_bench_attention_setup(positions, headDim, heads);
    names.forEach((name, index) => {
      const iterations = Math.max(1, Math.round(2e6 / positions));
      const call = perCall((n) => exports.inferno_bench_attention_run(index, n), iterations);
      lines.push(`bench attention head_dim ${headDim}, ${heads} heads, ${positions} positions ` +
        `[${name}]: ${(call * 1e6).toFixed(0)} us/call, ` +
        `${(call * 1e9 / (heads * positions)).toFixed(2)} ns per (head, position)`);
    });
  }
  return lines;
}

if (args.includes('--bench')) {
  for (const line of benchKernels(wasm, backends)) console.log(line);
}

// The same benchmark in headless Chromium (the engine the page runs on, newer than Node's).
if (args.includes('--chromium')) {
  const { launchChromium } = await import('../wasm/chromium.mjs');
  const { page, close } = await launchChromium();
  try {
    const lines = await page.evaluate(async ({ base64, names, source }) => {
      const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
      const module = await WebAssembly.compile(bytes);
      const imports = {};
      for (const { module: from, name } of WebAssembly.Module.imports(module)) {
        imports[from] ??= {};
        imports[from][name] = () => { throw new Error(`${from}.${name} called`); };
      }
      const instance = await WebAssembly.instantiate(module, imports);
      return (0, eval)(`(${source})`)(instance.exports, names);
    }, { base64: bytes.toString('base64'), names: backends, source: benchKernels.toString() });
    for (const line of lines) console.log(`chromium: ${line}`);
  } finally {
    await close();
  }
}
