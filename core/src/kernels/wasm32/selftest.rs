//! The wasm backends against the reference, entry by entry, bitwise (`to_bits` equality, never
//! a tolerance), run inside the wasm module itself (`cargo test` cannot run wasm): the Node.js
//! runner of tests/wasm-selftest calls [`self_test`]. Random data from a seeded portable PRNG,
//! the contract's awkward shapes (0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 576, 1536, row and token
//! tails) and edge values (+-0, subnormals, huge, inf, NaN, int8 extremes, zero blocks).

use crate::kernels::testdata::{
    bits_eq, q4_0_blocks, q4_1_blocks, q8_0_blocks, random_activations, random_matrix, Rng,
};
use crate::kernels::{reference, Input, Kernels, KvHead, KvSlice};
use crate::quant::{f32_to_f16, BlockQ8Act, GgmlType, QK};

/// Every entry of every wasm backend of this build against the reference; the first mismatch
/// is returned with its parameters (a case name that replays it with the same seed).
pub fn self_test(seed: u64) -> Result<(), String> {
    let backends = super::available();
    #[cfg(target_feature = "simd128")]
    {
        exp_twin()?;
        f16_twin()?;
    }
    if backends.is_empty() {
        return Ok(());
    }
    dot_f32(backends, seed)?;
    quantize_q8(backends, seed)?;
    rmsnorm(backends, seed)?;
    silu_mul(backends, seed)?;
    rope(backends, seed)?;
    attention(backends, seed)?;
    dot_q(backends, seed)?;
    matmul(backends, seed)?;
    Ok(())
}

/// exp4 against math::exp on [`crate::kernels::testdata::exp_inputs`].
#[cfg(target_feature = "simd128")]
fn exp_twin() -> Result<(), String> {
    use super::common::exp4;
    use crate::kernels::math::exp;
    use core::arch::wasm32::*;
    let xs = crate::kernels::testdata::exp_inputs();
    for c in xs.chunks(4) {
        let mut v = [0.0f32; 4];
        v[..c.len()].copy_from_slice(c);
        let y = exp4(f32x4(v[0], v[1], v[2], v[3]));
        let got = [
            f32x4_extract_lane::<0>(y),
            f32x4_extract_lane::<1>(y),
            f32x4_extract_lane::<2>(y),
            f32x4_extract_lane::<3>(y),
        ];
        let want = v.map(exp);
        bits_eq(&format!("exp4({v:?})"), "simd128", &got, &want)?;
    }
    Ok(())
}

/// Every f16 bit pattern through the vector conversion.
#[cfg(target_feature = "simd128")]
fn f16_twin() -> Result<(), String> {
    use super::common::f16x4_to_f32x4;
    use crate::quant::f16_to_f32;
    use core::arch::wasm32::*;
    for h in (0..=u16::MAX).step_by(4) {
        let y = f16x4_to_f32x4(u32x4(h as u32, h as u32 + 1, h as u32 + 2, h as u32 + 3));
        let got = [
            f32x4_extract_lane::<0>(y).to_bits(),
            f32x4_extract_lane::<1>(y).to_bits(),
            f32x4_extract_lane::<2>(y).to_bits(),
            f32x4_extract_lane::<3>(y).to_bits(),
        ];
        let want = [0, 1, 2, 3].map(|i| f16_to_f32(h + i).to_bits());
        if got != want {
            return Err(format!(
                "f16x4_to_f32x4({h:#06x}..): got {got:x?}, want {want:x?}"
            ));
        }
    }
    Ok(())
}

const LENGTHS: [usize; 16] = [
    0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 576, 1536, 2048, 5632, 5633,
];

fn dot_f32(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for (i, n) in LENGTHS.into_iter().enumerate() {
        for specials in [false, true] {
            let mut rng = Rng::new(seed, 100 + i as u64);
            let (a, b) = (rng.edgy_values(n, specials), rng.edgy_values(n, specials));
            let want = [reference::dot_f32(&a, &b)];
            for k in backends {
                let what = format!("dot_f32(n={n},specials={specials},seed={seed})");
                bits_eq(&what, k.name, &[(k.dot_f32)(&a, &b)], &want)?;
            }
        }
    }
    Ok(())
}

fn quantize_q8(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for nb in [0, 1, 2, 18, 48, 176] {
        for specials in [false, true] {
            let mut rng = Rng::new(seed, 200 + nb as u64);
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
            for k in backends {
                let filler = BlockQ8Act {
                    d: 1.0,
                    sum: 9,
                    qs: [5; QK],
                };
                let mut got = vec![filler; nb];
                (k.quantize_q8)(&x, &mut got);
                for (b, (g, w)) in got.iter().zip(&want).enumerate() {
                    if !(g.d.to_bits() == w.d.to_bits() && g.sum == w.sum && g.qs == w.qs) {
                        return Err(format!(
                            "quantize_q8(blocks={nb},specials={specials},seed={seed}) [{}]: \
                             block {b}: got {g:?}, reference {w:?}",
                            k.name
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn rmsnorm(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for (i, n) in LENGTHS.into_iter().enumerate() {
        for specials in [false, true] {
            let mut rng = Rng::new(seed, 300 + i as u64);
            let (x, w) = (rng.edgy_values(n, specials), rng.values(n));
            let mut want = vec![0.0; n];
            reference::rmsnorm(&x, &w, 1e-5, &mut want);
            for k in backends {
                let mut got = vec![7.0; n];
                (k.rmsnorm)(&x, &w, 1e-5, &mut got);
                let what = format!("rmsnorm(n={n},specials={specials},seed={seed})");
                bits_eq(&what, k.name, &got, &want)?;
            }
        }
    }
    Ok(())
}

fn silu_mul(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for (i, n) in LENGTHS.into_iter().enumerate() {
        let mut rng = Rng::new(seed, 400 + i as u64);
        // Gates across exp's whole range, including overflow, underflow and specials.
        let mut gate = rng.edgy_values(n, true);
        for (j, g) in gate.iter_mut().enumerate().filter(|(j, _)| j % 3 == 0) {
            *g = ((j * 37 % 241) as f32 - 120.0) * 1.01;
        }
        let up = rng.edgy_values(n, true);
        let mut want = gate.clone();
        reference::silu_mul(&mut want, &up);
        for k in backends {
            let mut got = gate.clone();
            (k.silu_mul)(&mut got, &up);
            bits_eq(&format!("silu_mul(n={n},seed={seed})"), k.name, &got, &want)?;
        }
    }
    Ok(())
}

fn rope(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for head_dim in [2, 6, 16, 24, 64, 128] {
        for heads in [1, 3, 9] {
            let mut rng = Rng::new(seed, (head_dim * 10 + heads) as u64);
            let x = rng.edgy_values(head_dim * heads, true);
            let angles: Vec<f32> = (0..head_dim / 2).map(|i| i as f32 * 0.7 + 0.1).collect();
            let cos: Vec<f32> = angles.iter().map(|&a| libm::cosf(a)).collect();
            let sin: Vec<f32> = angles.iter().map(|&a| libm::sinf(a)).collect();
            let mut want = x.clone();
            reference::rope(&mut want, head_dim, &cos, &sin);
            for k in backends {
                let mut got = x.clone();
                (k.rope)(&mut got, head_dim, &cos, &sin);
                let what = format!("rope(head_dim={head_dim},heads={heads},seed={seed})");
                bits_eq(&what, k.name, &got, &want)?;
            }
        }
    }
    Ok(())
}

/// A GQA-like cache: rows of 3 heads, this head at offset head_dim. `spread` scales the
/// queries so scores span exp's underflow range.
fn attention_case(
    backends: &[&Kernels],
    queries: usize,
    heads: usize,
    head_dim: usize,
    n_pos: usize,
    f16: bool,
    spread: f32,
    specials: bool,
    seed: u64,
) -> Result<(), String> {
    let mut rng = Rng::new(seed, (head_dim * 1000 + n_pos) as u64);
    let stride = 3 * head_dim;
    let q: Vec<f32> = rng
        .values(queries * heads * head_dim)
        .into_iter()
        .map(|v| v * spread)
        .collect();
    // Within f16's range, then exactly representable either way.
    let clamp = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| if x.is_finite() { x.clamp(-6e4, 6e4) } else { x })
            .collect()
    };
    let mut keys = clamp(rng.edgy_values(n_pos * stride, specials));
    let mut values = clamp(rng.edgy_values(n_pos * stride, specials));
    // With specials and three 64-position blocks: none in the first block, so the kernels'
    // short f16 conversion (that block) and exact one (the others) meet in one call.
    if specials && n_pos > 128 {
        for x in keys[..64 * stride]
            .iter_mut()
            .chain(values[..64 * stride].iter_mut())
        {
            if !x.is_finite() {
                *x = 1.0;
            }
        }
    }
    let k16: Vec<u16> = keys.iter().map(|&x| f32_to_f16(x)).collect();
    let v16: Vec<u16> = values.iter().map(|&x| f32_to_f16(x)).collect();
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
    for k in backends {
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
        let what = format!(
            "attention(queries={queries},heads={heads},head_dim={head_dim},n_pos={n_pos},f16={f16},spread={spread},\
             specials={specials},seed={seed})"
        );
        bits_eq(&what, k.name, &got, &want)?;
    }
    Ok(())
}

fn attention(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for f16 in [true, false] {
        for head_dim in [64, 128] {
            for n_pos in [1, 63, 64, 65, 130] {
                for spread in [1.0, 30.0] {
                    attention_case(backends, 1, 1, head_dim, n_pos, f16, spread, false, seed)?;
                }
            }
        }
        for head_dim in [8, 16, 24, 40] {
            for n_pos in [1, 2, 9, 64, 65, 127, 128, 140] {
                attention_case(backends, 1, 1, head_dim, n_pos, f16, 4.0, false, seed)?;
            }
        }
        // Several query heads of one KV head, past the 16 heads of one pass.
        for heads in [2, 3, 8, 17] {
            for n_pos in [1, 65, 130] {
                attention_case(backends, 1, heads, 64, n_pos, f16, 4.0, false, seed)?;
            }
        }
        // Consecutive query tokens (prefill), past the 512 (query, head) pairs of one pass.
        for (queries, heads) in [(2, 1), (5, 3), (16, 3), (33, 17)] {
            for n_pos in [40, 130] {
                attention_case(backends, queries, heads, 64, n_pos, f16, 4.0, false, seed)?;
            }
        }
        // Not a multiple of 8: the reference fallback.
        for head_dim in [6, 10] {
            attention_case(backends, 1, 1, head_dim, 70, f16, 1.0, false, seed)?;
        }
        for s in 0..4 {
            attention_case(
                backends,
                1,
                1,
                64,
                [65, 130][s as usize % 2],
                f16,
                1.0,
                true,
                seed.wrapping_add(77 + s),
            )?;
        }
    }
    Ok(())
}

fn dot_q(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    for nb in [0, 1, 2, 18, 48, 176] {
        let mut rng = Rng::new(seed, nb as u64 + 7);
        let x = random_activations(&mut rng, 1, nb * QK);
        let mut q8 = vec![BlockQ8Act::default(); nb];
        reference::quantize_q8(&x, &mut q8);
        let (w0, w1, w8) = (
            q4_0_blocks(&mut rng, nb),
            q4_1_blocks(&mut rng, nb),
            q8_0_blocks(&mut rng, nb),
        );
        for k in backends {
            let what = |ty: &str| format!("dot_{ty}_q8(blocks={nb},seed={seed})");
            let (got, want) = ((k.dot_q4_0_q8)(&w0, &q8), reference::dot_q4_0_q8(&w0, &q8));
            bits_eq(&what("q4_0"), k.name, &[got], &[want])?;
            let (got, want) = ((k.dot_q4_1_q8)(&w1, &q8), reference::dot_q4_1_q8(&w1, &q8));
            bits_eq(&what("q4_1"), k.name, &[got], &[want])?;
            let (got, want) = ((k.dot_q8_0_q8)(&w8, &q8), reference::dot_q8_0_q8(&w8, &q8));
            bits_eq(&what("q8_0"), k.name, &[got], &[want])?;
        }
    }
    Ok(())
}

fn matmul_case(
    backends: &[&Kernels],
    ty: GgmlType,
    rows: usize,
    cols: usize,
    tokens: usize,
    first_row: usize,
    seed: u64,
) -> Result<(), String> {
    let mut rng = Rng::new(seed, (rows * 1000 + cols * 10 + tokens) as u64);
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
        let what = format!(
            "matmul(type={ty:?},rows={rows},cols={cols},tokens={tokens},first_row={first_row},\
             seed={seed})"
        );
        bits_eq(&what, k.name, &run(k), &want)?;
    }
    Ok(())
}

fn matmul(backends: &[&Kernels], seed: u64) -> Result<(), String> {
    use GgmlType::*;
    let quantized = [Q4_0, Q4_1, Q8_0];
    for ty in quantized {
        for (rows, cols, tokens) in [
            (70, 576, 9),
            (64, 1536, 1),
            (33, 2048, 5),
            (9, 5632, 4),
            (1, 32, 1),
            (0, 64, 2),
            (7, 0, 3),
            (17, 1536, 4),
        ] {
            matmul_case(backends, ty, rows, cols, tokens, 3, seed)?;
        }
        for rows in 1..=70 {
            for tokens in [1, 2, 3, 4, 5, 8, 9] {
                matmul_case(backends, ty, rows, 64, tokens, rows % 6, seed)?;
            }
        }
    }
    for ty in [F32, F16, BF16] {
        for (rows, cols, tokens) in [(70, 576, 9), (9, 65, 3), (1, 0, 1), (3, 1536, 2)] {
            matmul_case(backends, ty, rows, cols, tokens, 3, seed)?;
        }
        for cols in [0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 129] {
            for rows in [1, 5, 12] {
                for tokens in 1..=3 {
                    matmul_case(backends, ty, rows, cols, tokens, 1, seed)?;
                }
            }
        }
    }
    Ok(())
}
