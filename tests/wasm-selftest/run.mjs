// Runs the wasm kernels' self test (and optionally the matmul benchmark) in a plain
// wasm32-unknown-unknown module built from this crate, with no wasm-bindgen.
//
//   node run.mjs <file.wasm> [--expect reference,simd128] [--seed N] [--bench]
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

if (args.includes('--bench')) {
  const rows = 1536;
  const cols = 576;
  for (const tokens of [1, 16]) {
    wasm.inferno_bench_setup(tokens);
    backends.forEach((name, index) => {
      wasm.inferno_bench_run(index, 3);
      const times = [];
      let iterations = 0;
      for (let trial = 0; trial < 5; trial++) {
        iterations = Math.max(1, Math.round(200 / tokens));
        const t0 = performance.now();
        wasm.inferno_bench_run(index, iterations);
        times.push((performance.now() - t0) / 1000);
      }
      times.sort((a, b) => a - b);
      const perCall = times[2] / iterations;
      const gops = (2 * rows * cols * tokens) / perCall / 1e9;
      const rowsPerSecond = (rows * tokens) / perCall;
      console.log(`bench matmul Q4_1 ${rows}x${cols} tokens ${tokens} [${name}]: ` +
        `${(perCall * 1e6).toFixed(0)} us/call, ${(rowsPerSecond / 1e6).toFixed(2)} M rows/s, ` +
        `${gops.toFixed(1)} GOPS`);
    });
  }
}
