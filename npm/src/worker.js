// The package's Web Worker: hosts the engine (host.js) off the page's main thread. The page side
// (index.js) sends { id, method, args } and gets back { id, event } any number of times, then
// { id, result } or { id, error: { message, fatal } }; { abort: id } stops a reply between tokens.
import { Host } from './host.js';

const host = new Host();
const aborted = new Set();

const methods = {
  init: (args) => host.init({ ...args, pkgBase: new URL('../pkg/', import.meta.url).href }),
  load: (args, emit) => host.load(args, emit),
  generate: (args, emit, id) => host.generate(args, emit, () => aborted.has(id)),
  compose: (args) => host.compose(args),
  tokenize: (args) => host.tokenize(args),
  detokenize: (args) => host.detokenize(args),
  stats: () => host.stats(),
  unload: () => host.unload(),
};

self.onmessage = async ({ data }) => {
  if (data.abort !== undefined) {
    aborted.add(data.abort);
    return;
  }
  const { id, method, args } = data;
  const emit = (event) => self.postMessage({ id, event });
  try {
    const run = methods[method];
    if (!run) throw new Error(`unknown method ${method}`);
    self.postMessage({ id, result: await run(args, emit, id) });
  } catch (e) {
    // A trap (a panic aborts) leaves the wasm instance unusable: the engine must be recreated.
    const fatal = e instanceof WebAssembly.RuntimeError;
    self.postMessage({ id, error: { message: String(e?.message || e), fatal } });
  } finally {
    aborted.delete(id);
  }
};
