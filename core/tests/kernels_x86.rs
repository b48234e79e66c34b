//! Every backend in `Kernels::available()` against the reference, entry by entry, bitwise: the
//! conformance suite (core/src/kernels/conformance.rs, the cases the wasm self test runs too),
//! one test per kernel entry over every backend, plus matmul through the thread tiles at several
//! thread counts. `replay` runs the one case named by INFERNO_CONFORMANCE_CASE (with
//! INFERNO_CONFORMANCE_SEED, default [`conformance::SEED`]), e.g. one that failed in wasm.

use std::sync::Arc;

use inferno_core::kernels::conformance::{self, SEED};
use inferno_core::kernels::testdata::{bits_eq, random_activations, random_matrix, Rng};
use inferno_core::kernels::tiles::{for_each_rows, for_each_tile};
use inferno_core::kernels::{reference, Input, Kernels};
use inferno_core::parallel::{Parallel, Serial};
use inferno_core::pool::ThreadPool;
use inferno_core::quant::{BlockQ8Act, GgmlType, QK};

fn backends() -> Vec<&'static Kernels> {
    let all: Vec<_> = Kernels::available()
        .into_iter()
        .filter(|k| k.name != "reference")
        .collect();
    if all.is_empty() {
        println!("skipped: this host has no SIMD backend besides the reference");
    }
    all
}

/// Every case of `entry` on every backend; all failures, by case name.
fn check(entry: &str) {
    let mut failures = Vec::new();
    for k in backends() {
        failures.extend(conformance::run(k, &[entry], SEED));
    }
    assert!(
        failures.is_empty(),
        "{} failing cases (replay one with INFERNO_CONFORMANCE_CASE='<name>' cargo test \
         --release -p inferno-core --test kernels_x86 replay -- --nocapture):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One test per suite entry, named by what its cases cover; CHECKED lists their entries.
macro_rules! entry_tests {
    ($($test:ident: $entry:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check($entry);
            }
        )*
        const CHECKED: &[&str] = &[$($entry),*];
    };
}

entry_tests! {
    dot_f32_lengths_0_to_5633_edge_values_all_backends: "dot_f32",
    quantize_q8_blocks_0_1_2_18_48_176_edge_values_all_backends: "quantize_q8",
    rmsnorm_lengths_0_to_5633_edge_values_all_backends: "rmsnorm",
    silu_mul_lengths_0_to_5633_edge_values_all_backends: "silu_mul",
    gelu_tanh_mul_lengths_0_to_5633_edge_values_all_backends: "gelu_tanh_mul",
    rope_head_dim_2_to_128_heads_1_3_9_all_backends: "rope",
    dot_q4_0_q4_1_q5_0_q5_1_q8_0_iq4_nl_blocks_0_1_2_18_48_176_all_backends: "dot_q8",
    matmul_every_type_rows_0_to_70_cols_0_to_5632_tokens_1_to_9_all_backends: "matmul",
    matmul_block_extreme_q4_0_to_q8_0_iq4_nl_fills_scales_inf_nan_signs_all_backends: "matmul_block_extreme",
    matmul_k_extreme_q2_k_to_q6_k_iq4_xs_fills_scales_inf_nan_signs_all_backends: "matmul_k_extreme",
    attention_head_dim_6_to_256_n_pos_1_to_200_queries_heads_f16_f32_specials_zero_ties_all_backends: "attention",
}

#[test]
fn every_conformance_entry_has_a_test_here() {
    for case in conformance::cases() {
        assert!(
            CHECKED.contains(&case.entry()),
            "{}: no test here checks its entry",
            case.name
        );
    }
}

/// The case INFERNO_CONFORMANCE_CASE names, on every backend of this host (the reference too).
#[test]
fn replay() {
    let Ok(name) = std::env::var("INFERNO_CONFORMANCE_CASE") else {
        println!("skipped: set INFERNO_CONFORMANCE_CASE='<case name>' to replay one case");
        return;
    };
    let seed = std::env::var("INFERNO_CONFORMANCE_SEED")
        .ok()
        .map(|s| s.parse::<u64>().expect("INFERNO_CONFORMANCE_SEED: a u64"))
        .unwrap_or(SEED);
    let case = conformance::case(&name).unwrap_or_else(|| panic!("no case named {name}"));
    for k in Kernels::available() {
        match case.run(k, seed) {
            Ok(()) => println!("{} [{}] seed={seed}: ok", case.name, k.name),
            Err(e) => panic!("{e}"),
        }
    }
}

/// A spin pool of `threads` threads (the caller one of them) on std threads.
fn pool(threads: usize) -> Arc<dyn Parallel> {
    let spawned = ThreadPool::with_spawner(threads, &mut |_, work| {
        Ok::<_, std::convert::Infallible>(Some(std::thread::spawn(work)))
    });
    Arc::new(spawned.unwrap_or_else(|never| match never {}))
}

/// Runs of whole rows on 1, 2, 3 or 8 threads: every row is reached exactly once, by the run that
/// starts at the first row the callback is given.
#[test]
fn for_each_rows_rows_0_1_7_40_of_3_runs_of_1_3_8_threads_1_2_3_8_each_row_once() {
    let mut executors: Vec<(usize, Arc<dyn Parallel>)> = vec![(1, Arc::new(Serial))];
    executors.extend([2, 3, 8].map(|t| (t, pool(t))));
    for (threads, parallel) in &executors {
        for rows in [0, 1, 7, 40] {
            for per in [1, 3, 8] {
                let mut buf = vec![0u32; rows * 3];
                for_each_rows(&**parallel, &mut buf, 3, per, &|first, part| {
                    for (r, row) in part.chunks_exact_mut(3).enumerate() {
                        for v in row {
                            *v += (first + r) as u32 + 1;
                        }
                    }
                });
                let want: Vec<u32> = (0..rows as u32).flat_map(|r| [r + 1; 3]).collect();
                assert_eq!(buf, want, "threads {threads}, rows {rows}, {per} per run");
            }
        }
    }
}

/// Rule 7 at the kernel level: a matmul cut into (rows x tokens) tiles and run on 1, 2, 3 or 8
/// threads gives the bits of one reference call, for every backend.
#[test]
fn matmul_tiled_threads_1_2_3_8_row_and_token_chunks_all_backends() {
    let mut executors: Vec<(usize, Arc<dyn Parallel>)> = vec![(1, Arc::new(Serial))];
    executors.extend([2, 3, 8].map(|t| (t, pool(t))));
    for (ty, rows, cols, tokens) in [
        (GgmlType::Q4_1, 70, 576, 9),
        (GgmlType::Q8_0, 65, 64, 40),
        (GgmlType::Q4_0, 33, 96, 3),
        (GgmlType::F16, 17, 65, 5),
    ] {
        let mut rng = Rng::new(SEED, (rows * 1000 + cols + tokens) as u64);
        let w = random_matrix(&mut rng, ty, rows, cols);
        let x = random_activations(&mut rng, tokens, cols);
        let mut q8 = vec![BlockQ8Act::default(); x.len() / QK];
        if w.wants_q8() {
            reference::quantize_q8(&x, &mut q8);
        }
        let input = if w.wants_q8() {
            Input::Q8(&q8)
        } else {
            Input::F32(&x)
        };
        let mut want = vec![0.0f32; tokens * rows];
        let mut outs: Vec<&mut [f32]> = want.chunks_mut(rows).collect();
        (reference::KERNELS.matmul)(&w, 0, &input, &mut outs);
        for k in Kernels::available() {
            for (threads, parallel) in &executors {
                for (row_chunk, token_chunk) in [(8, 1), (16, 4), (24, 64), (128, 2)] {
                    let mut got = vec![f32::NAN; tokens * rows];
                    for_each_tile(
                        &**parallel,
                        &mut got,
                        rows,
                        0,
                        rows,
                        row_chunk,
                        token_chunk,
                        &|first, t0, outs| (k.matmul)(&w, first, &input.from_token(t0, cols), outs),
                    );
                    let what = format!(
                        "matmul_tiled(type={},rows={rows},cols={cols},tokens={tokens},\
                         threads={threads},row_chunk={row_chunk},token_chunk={token_chunk})",
                        ty.name()
                    );
                    if let Err(e) = bits_eq(&what, k.name, &got, &want) {
                        panic!("{e}");
                    }
                }
            }
        }
    }
}
