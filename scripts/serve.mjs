// A tiny static server for the browser demo: www/ at /, the npm package (npm/: its scripts and
// the wasm builds in npm/pkg/) at /inferno/, the model at /model.gguf, and npm's wllama at
// /vendor/wllama/ (bench page only). 127.0.0.1 only; no inference happens here.
//   node scripts/serve.mjs [--port 8080] [--model path.gguf]
// Also imported by the browser tests and the bench: startServer({ port: 0 }) -> { url, close }.
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { homedir } from 'node:os';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const MIME = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.json': 'application/json', '.wasm': 'application/wasm', '.png': 'image/png',
  '.svg': 'image/svg+xml', '.gguf': 'application/octet-stream', '.ico': 'image/x-icon',
};

// Cross-origin isolation: what lets a page share wasm memory with workers (the threads build).
export const ISOLATED = {
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-embedder-policy': 'require-corp',
};

export function defaultModelPath() {
  const cache = process.env.INFERNO_CACHE || join(homedir(), '.cache', 'inferno');
  return process.env.INFERNO_MODEL || join(cache, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf');
}

// Maps a URL path to a file under one of the roots, never outside it. `root` replaces the
// demo's mounts with one directory (the npm package's test project).
function locate(path, model, root) {
  if (path === '/model.gguf') return model;
  const mounts = root ? [['/', root]] : [
    ['/vendor/wllama/', join(repo, 'node_modules', '@wllama', 'wllama', 'esm')],
    ['/inferno/', join(repo, 'npm')],
    ['/', join(repo, 'www')],
  ];
  for (const [prefix, dir] of mounts) {
    if (!path.startsWith(prefix)) continue;
    let rel = decodeURIComponent(path.slice(prefix.length));
    if (rel === '' || rel.endsWith('/')) rel += 'index.html';
    const file = normalize(join(dir, rel));
    return file.startsWith(dir + sep) ? file : null;
  }
  return null;
}

export function startServer({ port = 8080, host = '127.0.0.1', model = defaultModelPath(), headers = {}, root } = {}) {
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const file = locate(path, model, root && resolve(root));
    let stat;
    try {
      stat = file && statSync(file);
    } catch {
      stat = null;
    }
    if (!stat || !stat.isFile()) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${path}\n`);
      return;
    }
    res.writeHead(200, {
      'content-type': MIME[extname(file)] || 'application/octet-stream',
      'content-length': stat.size,
      'cache-control': 'no-cache',
      ...headers,
    });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
  });
  return new Promise((resolveStart, reject) => {
    server.on('error', reject);
    server.listen(port, host, () => {
      const url = `http://${host}:${server.address().port}/`;
      // close() also drops idle keep-alive connections, so the page really is offline after it.
      const close = () => new Promise((r) => { server.close(r); server.closeAllConnections(); });
      resolveStart({ url, close });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : fallback;
  };
  const { url } = await startServer({ port: Number(arg('--port', 8080)), model: arg('--model', defaultModelPath()), headers: ISOLATED });
  console.log(`serving www/ and the model at ${url} (Ctrl-C to stop)`);
}
