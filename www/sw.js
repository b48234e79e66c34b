// The service worker: keeps the page itself (HTML, JS, CSS and the wasm builds) in the Cache API
// so a reload works with no network at all; the model's bytes are cached by the package in their
// own cache. Network first: online, every reload gets the current files (and refreshes the
// copies); offline, the last copies answer. The model file is never intercepted: the package
// streams it with progress and keeps it itself.
const SHELL_CACHE = 'inferno-shell-v3';
const SHELL = ['./', 'index.html', 'main.js', 'style.css',
  ...['index.js', 'host.js', 'worker.js', 'server.js'].map((f) => `inferno/src/${f}`)];
const BUILDS = ['threads', 'relaxed', 'simd128', 'reference'].flatMap((v) =>
  [`inferno/pkg/${v}/inferno_wasm.js`, `inferno/pkg/${v}/inferno_wasm_bg.wasm`]);

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(SHELL_CACHE);
    await cache.addAll(SHELL.map((path) => new Request(path, { cache: 'reload' })));
    // Builds that were not made (make wasm builds all four; the threads build's worker helper is kept when first fetched) are simply left out.
    await Promise.all(BUILDS.map((path) => cache.add(new Request(path, { cache: 'reload' })).catch(() => {})));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith('inferno-shell-') && name !== SHELL_CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin) return;
  if (url.pathname.endsWith('.gguf') || url.pathname.includes('/vendor/') || url.pathname.startsWith('/v1/')) return;
  event.respondWith((async () => {
    const cache = await caches.open(SHELL_CACHE);
    try {
      const response = await fetch(event.request);
      if (response.ok) await cache.put(event.request, response.clone());
      return response;
    } catch (offline) {
      const cached = await cache.match(event.request, { ignoreSearch: true });
      if (cached) return cached;
      throw offline;
    }
  })());
});
