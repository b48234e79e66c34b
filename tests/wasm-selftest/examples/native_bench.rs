//! The same matmul benchmark as `run.mjs --bench`, natively, for every backend of this host:
//! `cargo run --release -p inferno-wasm-selftest --example native_bench`.

use std::time::Instant;

use inferno_core::kernels::Kernels;
use inferno_wasm_selftest::{inferno_bench_run, inferno_bench_setup, BENCH_COLS, BENCH_ROWS};

fn main() {
    for tokens in [1u32, 16] {
        inferno_bench_setup(tokens);
        for (index, kernels) in Kernels::available().iter().enumerate() {
            inferno_bench_run(index as u32, 3);
            let iterations = (200 / tokens).max(1);
            let mut times: Vec<f64> = (0..5)
                .map(|_| {
                    let t0 = Instant::now();
                    inferno_bench_run(index as u32, iterations);
                    t0.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let per_call = times[2] / iterations as f64;
            let work = (BENCH_ROWS * BENCH_COLS) as f64 * tokens as f64;
            println!(
                "bench matmul Q4_1 {BENCH_ROWS}x{BENCH_COLS} tokens {tokens} [{}]: {:.0} us/call, \
                 {:.2} M rows/s, {:.1} GOPS",
                kernels.name,
                per_call * 1e6,
                BENCH_ROWS as f64 * tokens as f64 / per_call / 1e6,
                2.0 * work / per_call / 1e9
            );
        }
    }
}
