//! The same matmul benchmark as `run.mjs --bench`, natively, for every backend of this host:
//! `cargo run --release -p inferno-wasm-selftest --example native_bench`.

use std::time::Instant;

use inferno_core::kernels::Kernels;
use inferno_wasm_selftest::{inferno_bench_run, inferno_bench_setup};

fn main() {
    // (type, kind, rows, tokens): the cases of run.mjs.
    for (name, kind, rows, tokens) in [
        ("Q4_1", 0u32, 1536u32, 1u32),
        ("Q4_1", 0, 1536, 16),
        ("Q8_0", 1, 49152, 1),
        ("Q4_K", 2, 640, 1),
        ("Q4_K", 2, 640, 16),
        ("Q6_K", 3, 640, 1),
        ("Q6_K", 3, 640, 16),
    ] {
        let cols = inferno_bench_setup(kind, rows, tokens);
        for (index, kernels) in Kernels::available().iter().enumerate() {
            let iterations = (300_000 * 576 / (rows * cols * tokens)).max(1);
            inferno_bench_run(index as u32, iterations);
            let mut times: Vec<f64> = (0..7)
                .map(|_| {
                    let t0 = Instant::now();
                    inferno_bench_run(index as u32, iterations);
                    t0.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let per_call = times[3] / iterations as f64;
            let work = rows as f64 * cols as f64 * tokens as f64;
            println!(
                "bench matmul {name} {rows}x{cols} tokens {tokens} [{}]: {:.0} us/call, \
                 {:.1} GOPS",
                kernels.name,
                per_call * 1e6,
                2.0 * work / per_call / 1e9
            );
        }
    }
}
