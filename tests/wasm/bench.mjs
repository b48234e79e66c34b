// Browser bench (make bench-wasm; not part of make test): inferno's wasm builds (one thread, and
// the threads build on every core) and wllama (1 and 2 threads) in headless Chromium on a
// cross-origin-isolated page, the same GGUF, and native `inferno bench --threads 1,2`, as one
// table of prefill and decode tokens/s for 50- and 500-token prompts, each row against native
// with the same thread count.
//   node tests/wasm/bench.mjs [--model path.gguf] [--variant simd128] [--no-wllama]
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { launchChromium } from './chromium.mjs';
import { defaultModelPath, startServer, ISOLATED } from '../../scripts/serve.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const model = arg('--model', defaultModelPath());
const variant = arg('--variant', '');
const lengths = arg('--lengths', '50,500');
const repo = resolve(new URL('../..', import.meta.url).pathname);

const server = await startServer({ port: 0, model, headers: ISOLATED });
const browser = await launchChromium();
const rows = [];
try {
  const page = browser.page;
  page.on('console', (m) => console.log(`  [page] ${m.text()}`));
  const query = new URLSearchParams({ lengths });
  if (variant) query.set('variant', variant);
  if (process.argv.includes('--no-wllama')) query.set('wllama', '0');
  await page.goto(`${server.url}bench.html?${query}`);
  await page.waitForFunction(() => window.benchResult, null, { timeout: 30 * 60_000, polling: 1000 });
  const result = await page.evaluate(() => window.benchResult);
  if (result.error) throw new Error(result.error);
  rows.push(...result.rows);
} finally {
  await browser.close();
  await server.close();
}

// Native on 1 and 2 threads with its best kernels, and with the AVX2 ones (the 256-bit, no-VNNI
// backend: what 128-bit wasm SIMD is usually measured against).
for (const kernels of ['', 'avx2']) {
  const native = execFileSync(join(repo, 'target/release/inferno'),
    ['bench', '--model', model, '--threads', '1,2', '--prompt-lengths', lengths, '--trials', '3', '--json'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, INFERNO_KERNELS: kernels } });
  for (const line of native.split('\n').filter(Boolean)) {
    const r = JSON.parse(line);
    rows.push({ engine: `native ${r.kernels}`, native: kernels || 'best', threads: r.threads, prompt_tokens: r.prompt_tokens, prefill_tok_s: r.prefill_tok_s, decode_tok_s: r.decode_tok_s });
  }
}

// Ratios against native's best kernels and against its AVX2 kernels, same threads and prompt.
const nativeRow = (r, which) => rows.find((x) => x.native === which && x.threads === r.threads && x.prompt_tokens === r.prompt_tokens);
const pct = (a, b) => (b ? `${(100 * a / b).toFixed(0)}%` : '');
console.log('\n| engine | threads | prompt | prefill tok/s | decode tok/s | prefill vs native best | decode vs native best | prefill vs native avx2 | decode vs native avx2 |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const best = nativeRow(r, 'best');
  const avx2 = nativeRow(r, 'avx2');
  console.log(`| ${r.engine} | ${r.threads} | ${r.prompt_tokens} | ${r.prefill_tok_s.toFixed(1)} | ${r.decode_tok_s.toFixed(1)} | `
    + `${pct(r.prefill_tok_s, best?.prefill_tok_s)} | ${pct(r.decode_tok_s, best?.decode_tok_s)} | `
    + `${pct(r.prefill_tok_s, avx2?.prefill_tok_s)} | ${pct(r.decode_tok_s, avx2?.decode_tok_s)} |`);
}
