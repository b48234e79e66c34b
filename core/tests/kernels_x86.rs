//! Every backend in `Kernels::available()` against the reference, entry by entry, bitwise
//! (`to_bits` equality, never a tolerance): random data from a fixed-seed portable PRNG, the
//! contract's awkward shapes (0, 1, 7, 8, 31, 32, 33, 63, 64, 65, real model sizes, row and
//! token tails) and edge values (+-0, subnormals, huge, inf, NaN, int8 extremes, zero blocks).

use inferno_core::kernels::testdata::{bits_eq, random_activations, random_matrix, Rng};
use inferno_core::kernels::{reference, Input, Kernels, KvHead, KvSlice, MatrixData};
use inferno_core::quant::repack::untile_row;
use inferno_core::quant::{f32_to_f16, BlockQ8Act, GgmlType, QK};

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

/// [`bits_eq`] as an assertion.
fn assert_bits_eq(what: &str, backend: &str, got: &[f32], want: &[f32]) {
    if let Err(e) = bits_eq(what, backend, got, want) {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// matmul

fn check_matmul(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
    first_row: usize,
    seed: u64,
) {
    let backends = backends();
    let mut rng = Rng(seed);
    let w = random_matrix(&mut rng, ty, first_row + rows + 2, cols);
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
    let run = |k: &Kernels| {
        let mut out = vec![0.0f32; tokens * rows];
        let mut outs: Vec<&mut [f32]> = out.chunks_mut(rows.max(1)).take(tokens).collect();
        if rows == 0 {
            outs = (0..tokens).map(|_| <&mut [f32]>::default()).collect();
        }
        (k.matmul)(&w, first_row, &input, &mut outs);
        out
    };
    let want = run(&reference::KERNELS);
    for k in backends {
        let what =
            format!("matmul {ty:?} rows {rows} cols {cols} tokens {tokens} first_row {first_row}");
        assert_bits_eq(&what, k.name, &run(k), &want);
    }
}

macro_rules! matmul_cases {
    ($($name:ident: $ty:ident, rows $rows:literal, cols $cols:literal, tokens $tokens:literal;)*) => {
        $(
            #[test]
            fn $name() {
                check_matmul(GgmlType::$ty, $rows, $cols, $tokens, 3, $rows * 1000 + $cols + $tokens);
            }
        )*
    };
}

matmul_cases! {
    matmul_q4_1_rows_70_cols_576_tokens_9_all_backends: Q4_1, rows 70, cols 576, tokens 9;
    matmul_q4_1_rows_64_cols_1536_tokens_1_all_backends: Q4_1, rows 64, cols 1536, tokens 1;
    matmul_q4_1_rows_33_cols_2048_tokens_5_all_backends: Q4_1, rows 33, cols 2048, tokens 5;
    matmul_q4_1_rows_9_cols_5632_tokens_4_all_backends: Q4_1, rows 9, cols 5632, tokens 4;
    matmul_q4_1_rows_1_cols_32_tokens_1_all_backends: Q4_1, rows 1, cols 32, tokens 1;
    matmul_q4_1_rows_0_cols_64_tokens_2_all_backends: Q4_1, rows 0, cols 64, tokens 2;
    matmul_q4_1_rows_7_cols_0_tokens_3_all_backends: Q4_1, rows 7, cols 0, tokens 3;
    matmul_q4_0_rows_70_cols_576_tokens_9_all_backends: Q4_0, rows 70, cols 576, tokens 9;
    matmul_q4_0_rows_64_cols_1536_tokens_1_all_backends: Q4_0, rows 64, cols 1536, tokens 1;
    matmul_q4_0_rows_31_cols_2048_tokens_6_all_backends: Q4_0, rows 31, cols 2048, tokens 6;
    matmul_q4_0_rows_8_cols_5632_tokens_7_all_backends: Q4_0, rows 8, cols 5632, tokens 7;
    matmul_q4_0_rows_1_cols_32_tokens_1_all_backends: Q4_0, rows 1, cols 32, tokens 1;
    matmul_q8_0_rows_70_cols_576_tokens_9_all_backends: Q8_0, rows 70, cols 576, tokens 9;
    matmul_q8_0_rows_64_cols_576_tokens_1_all_backends: Q8_0, rows 64, cols 576, tokens 1;
    matmul_q8_0_rows_65_cols_2048_tokens_3_all_backends: Q8_0, rows 65, cols 2048, tokens 3;
    matmul_q8_0_rows_7_cols_5632_tokens_8_all_backends: Q8_0, rows 7, cols 5632, tokens 8;
    matmul_q8_0_rows_1_cols_32_tokens_1_all_backends: Q8_0, rows 1, cols 32, tokens 1;
    matmul_f32_rows_70_cols_576_tokens_9_all_backends: F32, rows 70, cols 576, tokens 9;
    matmul_f32_rows_9_cols_65_tokens_3_all_backends: F32, rows 9, cols 65, tokens 3;
    matmul_f32_rows_1_cols_0_tokens_1_all_backends: F32, rows 1, cols 0, tokens 1;
    matmul_f16_rows_70_cols_576_tokens_9_all_backends: F16, rows 70, cols 576, tokens 9;
    matmul_f16_rows_9_cols_33_tokens_2_all_backends: F16, rows 9, cols 33, tokens 2;
    matmul_bf16_rows_70_cols_576_tokens_9_all_backends: BF16, rows 70, cols 576, tokens 9;
    matmul_bf16_rows_9_cols_63_tokens_2_all_backends: BF16, rows 9, cols 63, tokens 2;
}

#[test]
fn matmul_quantized_rows_1_to_70_cols_64_tokens_1_to_9_first_row_0_to_5_all_backends() {
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        for rows in 1..=70 {
            for tokens in [1, 2, 3, 4, 5, 8, 9] {
                check_matmul(ty, rows, 64, tokens, rows % 6, (rows * 10 + tokens) as u64);
            }
        }
    }
}

#[test]
fn matmul_float_cols_0_1_7_8_31_32_33_63_64_65_rows_1_to_12_tokens_1_to_3_all_backends() {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for cols in [0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 129] {
            for rows in [1, 5, 12] {
                for tokens in 1..=3 {
                    check_matmul(
                        ty,
                        rows,
                        cols,
                        tokens,
                        1,
                        (cols * 100 + rows * 10 + tokens) as u64,
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// single-row quantized dots

#[test]
fn dot_q4_0_q4_1_q8_0_blocks_0_1_2_18_48_176_all_backends() {
    let backends = backends();
    for nb in [0, 1, 2, 18, 48, 176] {
        let mut rng = Rng(nb as u64 + 7);
        let x = random_activations(&mut rng, 1, nb * QK);
        let mut q8 = vec![BlockQ8Act::default(); nb];
        reference::quantize_q8(&x, &mut q8);
        let (w0, w1, w8) = (
            random_matrix(&mut rng, GgmlType::Q4_0, 1, nb * QK),
            random_matrix(&mut rng, GgmlType::Q4_1, 1, nb * QK),
            random_matrix(&mut rng, GgmlType::Q8_0, 1, nb * QK),
        );
        // The row's blocks, read back from the tiles.
        let (MatrixData::Q4_0(w0), MatrixData::Q4_1(w1), MatrixData::Q8_0(w8)) =
            (w0.data, w1.data, w8.data)
        else {
            unreachable!()
        };
        let (w0, w1, w8) = (
            untile_row(&w0, nb, 0),
            untile_row(&w1, nb, 0),
            untile_row(&w8, nb, 0),
        );
        for k in &backends {
            let what = format!("dot_q*_q8 blocks {nb}");
            assert_bits_eq(
                &what,
                k.name,
                &[(k.dot_q4_0_q8)(&w0, &q8)],
                &[reference::dot_q4_0_q8(&w0, &q8)],
            );
            assert_bits_eq(
                &what,
                k.name,
                &[(k.dot_q4_1_q8)(&w1, &q8)],
                &[reference::dot_q4_1_q8(&w1, &q8)],
            );
            assert_bits_eq(
                &what,
                k.name,
                &[(k.dot_q8_0_q8)(&w8, &q8)],
                &[reference::dot_q8_0_q8(&w8, &q8)],
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// elementwise entries

const LENGTHS: [usize; 16] = [
    0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 576, 1536, 2048, 5632, 5633,
];

#[test]
fn dot_f32_lengths_0_to_5633_edge_values_all_backends() {
    let backends = backends();
    for (i, n) in LENGTHS.into_iter().enumerate() {
        for specials in [false, true] {
            let mut rng = Rng(100 + i as u64);
            let (a, b) = (rng.edgy_values(n, specials), rng.edgy_values(n, specials));
            for k in &backends {
                assert_bits_eq(
                    &format!("dot_f32 n {n}"),
                    k.name,
                    &[(k.dot_f32)(&a, &b)],
                    &[reference::dot_f32(&a, &b)],
                );
            }
        }
    }
}

#[test]
fn quantize_q8_blocks_0_1_2_18_48_176_edge_values_all_backends() {
    let backends = backends();
    for nb in [0, 1, 2, 18, 48, 176] {
        for specials in [false, true] {
            let mut rng = Rng(200 + nb as u64);
            let mut x = rng.edgy_values(nb * QK, specials);
            // A block of subnormals only (127 / amax overflows to inf), and an all-zero block.
            if nb >= 2 {
                x[..QK].iter_mut().enumerate().for_each(|(i, v)| {
                    *v = f32::from_bits(i as u32 % 5) * if i % 2 == 0 { 1.0 } else { -1.0 }
                });
                x[QK..2 * QK].fill(0.0);
            }
            let mut want = vec![BlockQ8Act::default(); nb];
            reference::quantize_q8(&x, &mut want);
            for k in &backends {
                let mut got = vec![
                    BlockQ8Act {
                        d: 1.0,
                        sum: 9,
                        qs: [5; QK]
                    };
                    nb
                ];
                (k.quantize_q8)(&x, &mut got);
                for (b, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.d.to_bits() == w.d.to_bits() && g.sum == w.sum && g.qs == w.qs,
                        "quantize_q8 blocks {nb} [{}]: block {b}: got {g:?}, reference {w:?}",
                        k.name
                    );
                }
            }
        }
    }
}

#[test]
fn rmsnorm_lengths_0_to_5633_edge_values_all_backends() {
    let backends = backends();
    for (i, n) in LENGTHS.into_iter().enumerate() {
        for specials in [false, true] {
            let mut rng = Rng(300 + i as u64);
            let (x, w) = (rng.edgy_values(n, specials), rng.values(n));
            let mut want = vec![0.0; n];
            reference::rmsnorm(&x, &w, 1e-5, &mut want);
            for k in &backends {
                let mut got = vec![7.0; n];
                (k.rmsnorm)(&x, &w, 1e-5, &mut got);
                assert_bits_eq(&format!("rmsnorm n {n}"), k.name, &got, &want);
            }
        }
    }
}

#[test]
fn silu_mul_lengths_0_to_5633_edge_values_all_backends() {
    let backends = backends();
    for (i, n) in LENGTHS.into_iter().enumerate() {
        let mut rng = Rng(400 + i as u64);
        // Gates across exp's whole range, including overflow, underflow and specials.
        let mut gate = rng.edgy_values(n, true);
        for (j, g) in gate.iter_mut().enumerate().filter(|(j, _)| j % 3 == 0) {
            *g = (j as f32 * 0.37).sin() * 120.0;
        }
        let up = rng.edgy_values(n, true);
        let mut want = gate.clone();
        reference::silu_mul(&mut want, &up);
        for k in &backends {
            let mut got = gate.clone();
            (k.silu_mul)(&mut got, &up);
            assert_bits_eq(&format!("silu_mul n {n}"), k.name, &got, &want);
        }
    }
}

#[test]
fn rope_head_dim_2_6_16_64_128_heads_1_to_9_all_backends() {
    let backends = backends();
    for head_dim in [2, 6, 16, 24, 64, 128] {
        for heads in [1, 3, 9] {
            let mut rng = Rng((head_dim * 10 + heads) as u64);
            let x = rng.edgy_values(head_dim * heads, true);
            let angles: Vec<f32> = (0..head_dim / 2).map(|i| i as f32 * 0.7 + 0.1).collect();
            let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
            let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
            let mut want = x.clone();
            reference::rope(&mut want, head_dim, &cos, &sin);
            for k in &backends {
                let mut got = x.clone();
                (k.rope)(&mut got, head_dim, &cos, &sin);
                assert_bits_eq(
                    &format!("rope head_dim {head_dim} heads {heads}"),
                    k.name,
                    &got,
                    &want,
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// attention

/// A GQA-like cache: rows of 3 heads, this head at offset head_dim. `spread` scales the
/// queries so scores span exp's underflow range.
/// `queries` consecutive tokens, the last of which sees all `n_pos` positions, each with `heads`
/// query heads of the KV head at offset head_dim of 3-head cache rows.
#[allow(clippy::too_many_arguments)]
fn check_attention(
    queries: usize,
    heads: usize,
    head_dim: usize,
    n_pos: usize,
    f16: bool,
    spread: f32,
    specials: bool,
    seed: u64,
) {
    let backends = backends();
    let mut rng = Rng(seed);
    let stride = 3 * head_dim;
    let q: Vec<f32> = rng
        .values(queries * heads * head_dim)
        .into_iter()
        .map(|v| v * spread)
        .collect();
    let keys = rng.edgy_values(n_pos * stride, specials);
    let values = rng.edgy_values(n_pos * stride, specials);
    // Within f16's range, then exactly representable either way.
    let clamp = |v: &Vec<f32>| -> Vec<f32> {
        v.iter()
            .map(|x| {
                if x.is_finite() {
                    x.clamp(-6e4, 6e4)
                } else {
                    *x
                }
            })
            .collect()
    };
    let (keys, values) = (clamp(&keys), clamp(&values));
    let (k16, v16): (Vec<u16>, Vec<u16>) = (
        keys.iter().map(|&x| f32_to_f16(x)).collect(),
        values.iter().map(|&x| f32_to_f16(x)).collect(),
    );
    let (ks, vs) = if f16 {
        (KvSlice::F16(&k16), KvSlice::F16(&v16))
    } else {
        (KvSlice::F32(&keys), KvSlice::F32(&values))
    };
    let scale = 1.0 / (head_dim as f32).sqrt();
    let width = heads * head_dim;
    let first = n_pos + 1 - queries; // positions query 0 sees
    let qs: Vec<&[f32]> = q.chunks(width).collect();
    let mut want = vec![0.0; queries * width];
    let mut outs: Vec<&mut [f32]> = want.chunks_mut(width).collect();
    reference::attention(
        &qs,
        &KvHead {
            keys: ks,
            values: vs,
            positions: first,
            kv_dim: stride,
            offset: head_dim,
            head_dim,
            scale,
        },
        &mut outs,
    );
    // Every (query, head) is exactly that head's one-query attention.
    for (pair, (qh, wh)) in q.chunks(head_dim).zip(want.chunks(head_dim)).enumerate() {
        let mut alone = vec![0.0; head_dim];
        let n = first + pair / heads;
        reference::attention(
            &[qh],
            &KvHead {
                keys: ks,
                values: vs,
                positions: n,
                kv_dim: stride,
                offset: head_dim,
                head_dim,
                scale,
            },
            &mut [&mut alone[..]],
        );
        assert_bits_eq("attention (query, head) alone", "reference", &alone, wh);
    }
    let what = format!(
        "attention queries {queries} heads {heads} head_dim {head_dim} n_pos {n_pos} f16 {f16} spread {spread} specials {specials}"
    );
    for k in &backends {
        let mut got = vec![3.0; queries * width];
        let mut outs: Vec<&mut [f32]> = got.chunks_mut(width).collect();
        (k.attention)(
            &qs,
            &KvHead {
                keys: ks,
                values: vs,
                positions: first,
                kv_dim: stride,
                offset: head_dim,
                head_dim,
                scale,
            },
            &mut outs,
        );
        assert_bits_eq(&what, k.name, &got, &want);
    }
}

#[test]
fn attention_head_dim_64_128_n_pos_1_63_64_65_130_f16_and_f32_all_backends() {
    for head_dim in [64, 128] {
        for n_pos in [1, 63, 64, 65, 130] {
            for f16 in [true, false] {
                for spread in [1.0, 30.0] {
                    check_attention(
                        1,
                        1,
                        head_dim,
                        n_pos,
                        f16,
                        spread,
                        false,
                        (head_dim * 1000 + n_pos) as u64,
                    );
                }
            }
        }
    }
}

#[test]
fn attention_head_dim_8_16_24_40_n_pos_1_to_140_f16_and_f32_all_backends() {
    for head_dim in [8, 16, 24, 40] {
        for n_pos in [1, 2, 9, 64, 65, 127, 128, 140] {
            for f16 in [true, false] {
                check_attention(
                    1,
                    1,
                    head_dim,
                    n_pos,
                    f16,
                    4.0,
                    false,
                    (head_dim * 1000 + n_pos) as u64,
                );
            }
        }
    }
}

#[test]
fn attention_heads_2_3_8_17_head_dim_64_n_pos_1_65_130_f16_and_f32_all_backends() {
    for heads in [2, 3, 8, 17] {
        for n_pos in [1, 65, 130] {
            for f16 in [true, false] {
                check_attention(
                    1,
                    heads,
                    64,
                    n_pos,
                    f16,
                    4.0,
                    false,
                    (heads * 1000 + n_pos) as u64,
                );
            }
        }
    }
}

#[test]
fn attention_heads_3_head_dim_8_24_128_n_pos_70_all_backends() {
    for head_dim in [8, 24, 128] {
        check_attention(1, 3, head_dim, 70, true, 4.0, false, head_dim as u64);
    }
}

#[test]
fn attention_queries_2_5_16_33_heads_1_3_17_head_dim_64_n_pos_40_65_130_all_backends() {
    for queries in [2, 5, 16, 33] {
        for heads in [1, 3, 17] {
            for n_pos in [40, 65, 130] {
                let seed = (queries * 10000 + heads * 1000 + n_pos) as u64;
                check_attention(queries, heads, 64, n_pos, true, 4.0, false, seed);
            }
        }
    }
}

#[test]
fn attention_queries_8_heads_3_head_dim_8_128_n_pos_8_100_f32_all_backends() {
    for head_dim in [8, 128] {
        for n_pos in [8, 100] {
            check_attention(
                8,
                3,
                head_dim,
                n_pos,
                false,
                4.0,
                false,
                (head_dim + n_pos) as u64,
            );
        }
    }
}

#[test]
fn attention_head_dim_6_10_reference_fallback_all_backends() {
    for head_dim in [6, 10] {
        for f16 in [true, false] {
            check_attention(1, 1, head_dim, 70, f16, 1.0, false, head_dim as u64);
        }
    }
}

#[test]
fn attention_head_dim_64_n_pos_65_inf_and_nan_in_cache_all_backends() {
    for f16 in [true, false] {
        for seed in 0..4 {
            check_attention(1, 1, 64, 65, f16, 1.0, true, 77 + seed);
        }
    }
}
