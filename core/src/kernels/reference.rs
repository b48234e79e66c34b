//! The reference backend: plain scalar Rust that DEFINES every floating-point result of the
//! forward pass (the reduction contract, ARCHITECTURE.md section 4). Every SIMD backend is a twin of a function here and must
//! return the same bits. Written for clarity, not speed; the order of every sum is normative.

use super::math::exp;
use super::{with_k, Input, KMatrix, Kernels, KvHead, KvSlice, Matrix, MatrixData};
use crate::quant::iq4::{levels_of, BlockIQ4NL};
use crate::quant::kquants::{KBlock, QK_K};
use crate::quant::repack::{Spans, Tile, TILE_ROWS};
use crate::quant::{
    bf16_to_f32, f16_to_f32, q5_quants, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8Act,
    BlockQ8_0, QK,
};

pub static KERNELS: Kernels = Kernels {
    name: "reference",
    dot_f32,
    quantize_q8,
    dot_q4_0_q8,
    dot_q4_1_q8,
    dot_q5_0_q8,
    dot_q5_1_q8,
    dot_q8_0_q8,
    dot_iq4_nl_q8,
    matmul,
    rmsnorm,
    silu_mul,
    gelu_tanh_mul,
    rope,
    attention,
};

/// Rule 2: the f32 dot of length n, for any element type, given the i-th product.
/// Element i goes to accumulator `acc[(i / 8) % 4][i % 8]`; the 32 partial sums are folded in
/// the fixed tree below. SIMD twins keep 4 accumulators of 8 lanes and fold the same way.
#[inline(always)]
pub fn dot_by(n: usize, product: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [[0.0f32; 8]; 4];
    // Whole groups of 32 first, written so the compiler can keep a row of 8 in a register; the
    // order each accumulator sees is still increasing i.
    let groups = n / 32;
    for g in 0..groups {
        for (a, row) in acc.iter_mut().enumerate() {
            for (l, v) in row.iter_mut().enumerate() {
                *v = *v + product(g * 32 + a * 8 + l);
            }
        }
    }
    for i in groups * 32..n {
        let a = &mut acc[(i / 8) % 4][i % 8];
        *a = *a + product(i);
    }
    fold_accumulators(&acc)
}

/// The exact integer dot of two 32-element blocks (any order: integer sums are exact).
#[inline(always)]
fn dot_i8_block(w: &[i8; QK], x: &[i8; QK]) -> i32 {
    w.iter()
        .zip(x)
        .map(|(&a, &b)| a as i16 as i32 * b as i16 as i32)
        .sum()
}

/// The 32 values of a block of 4-bit quants: low nibbles are elements 0..16, high 16..32.
#[inline(always)]
fn unpack_nibbles(qs: &[u8; QK / 2], offset: i8) -> [i8; QK] {
    let mut out = [0i8; QK];
    for j in 0..QK / 2 {
        out[j] = (qs[j] & 15) as i8 - offset;
        out[j + QK / 2] = (qs[j] >> 4) as i8 - offset;
    }
    out
}

/// The fixed tree that ends every rule-2 dot.
#[inline(always)]
pub fn fold_accumulators(acc: &[[f32; 8]; 4]) -> f32 {
    let s: [f32; 8] = std::array::from_fn(|l| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
    ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32 operands differ in length");
    dot_by(a.len(), |i| a[i] * b[i])
}

/// Rule 3: activations quantized per 32-block, `d = amax / 127`, `q = round_ties_even(x * 127/amax)`.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8Act]) {
    assert_eq!(
        x.len(),
        out.len() * QK,
        "quantize_q8: x must fill the blocks exactly"
    );
    for (xb, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb
            .iter()
            .fold(0.0f32, |m, v| if v.abs() > m { v.abs() } else { m });
        let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
        let mut sums = [0i16; 2];
        for (i, (q, &v)) in block.qs.iter_mut().zip(xb).enumerate() {
            // |v * id| <= 127 up to one rounding, and `as` saturates: q stays in [-127, 127].
            *q = ((v * id).round_ties_even() as i32).clamp(-127, 127) as i8;
            sums[i / 16] += i16::from(*q);
        }
        block.d = amax / 127.0;
        block.sums = sums;
    }
}

/// Rule 4, one Q4_0 block: `acc + isum * (dw * dx)`.
#[inline(always)]
fn step_q4_0(acc: f32, wb: &BlockQ4_0, xb: &BlockQ8Act) -> f32 {
    let isum = dot_i8_block(&unpack_nibbles(&wb.qs, 8), &xb.qs);
    acc + isum as f32 * (f16_to_f32(wb.d) * xb.d)
}

/// Rule 4, one Q4_1 block: `acc + (isum * (dw * dx) + sum_x * (mw * dx))`.
#[inline(always)]
fn step_q4_1(acc: f32, wb: &BlockQ4_1, xb: &BlockQ8Act) -> f32 {
    let isum = dot_i8_block(&unpack_nibbles(&wb.qs, 0), &xb.qs);
    let dx = xb.d;
    acc + (isum as f32 * (f16_to_f32(wb.d) * dx) + xb.sum() as f32 * (f16_to_f32(wb.m) * dx))
}

/// The 32 values of a 5-bit block, minus `offset` (16 for Q5_0, 0 for Q5_1: 0..=31 fits i8).
#[inline(always)]
fn unpack_q5(qh: [u8; 4], qs: &[u8; QK / 2], offset: i8) -> [i8; QK] {
    q5_quants(qh, qs).map(|q| q as i8 - offset)
}

/// Rule 4, one Q5_0 block: `acc + isum * (dw * dx)`, isum over the quants minus 16.
#[inline(always)]
fn step_q5_0(acc: f32, wb: &BlockQ5_0, xb: &BlockQ8Act) -> f32 {
    let isum = dot_i8_block(&unpack_q5(wb.qh, &wb.qs, 16), &xb.qs);
    acc + isum as f32 * (f16_to_f32(wb.d) * xb.d)
}

/// Rule 4, one Q5_1 block: `acc + (isum * (dw * dx) + sum_x * (mw * dx))`.
#[inline(always)]
fn step_q5_1(acc: f32, wb: &BlockQ5_1, xb: &BlockQ8Act) -> f32 {
    let isum = dot_i8_block(&unpack_q5(wb.qh, &wb.qs, 0), &xb.qs);
    let dx = xb.d;
    acc + (isum as f32 * (f16_to_f32(wb.d) * dx) + xb.sum() as f32 * (f16_to_f32(wb.m) * dx))
}

/// Rule 4, one Q8_0 block.
#[inline(always)]
fn step_q8_0(acc: f32, wb: &BlockQ8_0, xb: &BlockQ8Act) -> f32 {
    let isum: i32 = wb
        .qs
        .iter()
        .zip(&xb.qs)
        .map(|(&a, &b)| a as i32 * b as i32)
        .sum();
    acc + isum as f32 * (f16_to_f32(wb.d) * xb.d)
}

/// Rule 4, one IQ4_NL block: as Q8_0, the weights the levels of the indices.
#[inline(always)]
fn step_iq4_nl(acc: f32, wb: &BlockIQ4NL, xb: &BlockQ8Act) -> f32 {
    let isum = dot_i8_block(&levels_of(&wb.qs), &xb.qs);
    acc + isum as f32 * (f16_to_f32(wb.d) * xb.d)
}

/// Rule 4 for Q4_0 weights: exact integer sum per block, then `acc + isum * (dw * dx)` in block order.
pub fn dot_q4_0_q8(w: &[BlockQ4_0], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q4_0_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_q4_0(acc, wb, xb))
}

/// Rule 4 for Q4_1 weights: `acc + (isum * (dw * dx) + sum_x * (mw * dx))` in block order.
pub fn dot_q4_1_q8(w: &[BlockQ4_1], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q4_1_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_q4_1(acc, wb, xb))
}

/// Rule 4 for Q5_0 weights (as Q4_0, 5-bit quants with offset 16).
pub fn dot_q5_0_q8(w: &[BlockQ5_0], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q5_0_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_q5_0(acc, wb, xb))
}

/// Rule 4 for Q5_1 weights (as Q4_1, 5-bit quants).
pub fn dot_q5_1_q8(w: &[BlockQ5_1], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q5_1_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_q5_1(acc, wb, xb))
}

/// Rule 4 for Q8_0 weights.
pub fn dot_q8_0_q8(w: &[BlockQ8_0], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q8_0_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_q8_0(acc, wb, xb))
}

/// Rule 4 for IQ4_NL weights.
pub fn dot_iq4_nl_q8(w: &[BlockIQ4NL], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_iq4_nl_q8: block counts differ");
    w.iter()
        .zip(x)
        .fold(0.0, |acc, (wb, xb)| step_iq4_nl(acc, wb, xb))
}

/// Rule 4 for the K-quants, one super-block against its 8 activation blocks: per 32-element
/// sub-block in order, exact integers `iscaled = s0 * isum_0 + s1 * isum_1` and (types with
/// minimums) `imin = m0 * sum_x0 + m1 * sum_x1` over its two 16-element halves, then
/// `acc + ((iscaled as f32) * (d * dx) + (imin as f32) * (-dmin * dx))`, or without minimums
/// `acc + (iscaled as f32) * (d * dx)` (ARCHITECTURE.md section 4, rule 4).
#[inline(always)]
fn step_k<B: KBlock>(mut acc: f32, wb: &B, xs: &[BlockQ8Act]) -> f32 {
    let (d, dmin) = wb.scales();
    let neg_dmin = -dmin;
    for (sb, xb) in wb.sub_blocks().iter().zip(xs) {
        let (mut isum, mut sum_x) = ([0i32; 2], [0i32; 2]);
        for (i, (&q, &x)) in sb.q.iter().zip(&xb.qs).enumerate() {
            isum[i / 16] += q as i32 * x as i32;
            sum_x[i / 16] += x as i32;
        }
        let iscaled = sb.scale[0] * isum[0] + sb.scale[1] * isum[1];
        let dx = xb.d;
        acc = if B::HAS_MIN {
            let imin = sb.min[0] * sum_x[0] + sb.min[1] * sum_x[1];
            acc + (iscaled as f32 * (d * dx) + imin as f32 * (neg_dmin * dx))
        } else {
            acc + iscaled as f32 * (d * dx)
        };
    }
    acc
}

/// Rule 4 for a K-quant row: super-blocks in order, each against 8 activation blocks.
pub fn dot_k_q8<B: KBlock>(w: &[B], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(
        w.len() * QK_K / QK,
        x.len(),
        "dot_k_q8: block counts differ"
    );
    w.iter()
        .zip(x.chunks_exact(QK_K / QK))
        .fold(0.0, |acc, (wb, xs)| step_k(acc, wb, xs))
}

/// Rule 4 over a row of a tiled matrix: row r is lane r % 8 of the tiles of group r / 8, blocks
/// in order (across the spans the tiles are stored in, [`Spans`]), exactly the sequence of the
/// `dot_*_q8` above.
#[inline(always)]
fn dot_tiled<T: Tile>(
    tiles: &[T],
    nb: usize,
    r: usize,
    x: &[BlockQ8Act],
    step: impl Fn(f32, &T::Block, &BlockQ8Act) -> f32,
) -> f32 {
    let (g, lane) = (r / TILE_ROWS, r % TILE_ROWS);
    Spans::of(tiles, nb)
        .row_tiles(tiles, g)
        .zip(x)
        .fold(0.0, |acc, (t, xb)| step(acc, &t.block(lane), xb))
}

/// `out[t][r - rows.start] = dot(w[r], x[t])` for the rows `first_row .. first_row + out[t].len()`
/// and every token t. Quantized weights read Q8 activations, float weights f32 activations.
pub fn matmul(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]]) {
    let cols = w.cols;
    let nb = cols / QK;
    for (t, out_t) in out.iter_mut().enumerate() {
        assert!(
            first_row + out_t.len() <= w.rows,
            "matmul: rows out of range"
        );
        for (i, o) in out_t.iter_mut().enumerate() {
            let r = first_row + i;
            *o = match (&w.data, x) {
                (MatrixData::F32(d), Input::F32(x)) => {
                    dot_f32(&d[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols])
                }
                (MatrixData::F16(d), Input::F32(x)) => {
                    let (wr, xt) = (&d[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
                    dot_by(cols, |i| f16_to_f32(wr[i]) * xt[i])
                }
                (MatrixData::BF16(d), Input::F32(x)) => {
                    let (wr, xt) = (&d[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
                    dot_by(cols, |i| bf16_to_f32(wr[i]) * xt[i])
                }
                (MatrixData::Q4_0(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_q4_0)
                }
                (MatrixData::Q4_1(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_q4_1)
                }
                (MatrixData::Q5_0(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_q5_0)
                }
                (MatrixData::Q5_1(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_q5_1)
                }
                (MatrixData::Q8_0(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_q8_0)
                }
                (MatrixData::IQ4_NL(d), Input::Q8(x)) => {
                    dot_tiled(d, nb, r, &x[t * nb..(t + 1) * nb], step_iq4_nl)
                }
                (MatrixData::K(k), Input::Q8(x)) => {
                    let xt = &x[t * nb..(t + 1) * nb];
                    let (g, lane) = (r / TILE_ROWS, r % TILE_ROWS);
                    let nbk = cols / QK_K;
                    with_k!(k, d => Spans::of(d, nbk)
                        .row_tiles(d, g)
                        .zip(xt.chunks_exact(QK_K / QK))
                        .fold(0.0, |acc, (tile, xs)| step_k(acc, &tile.block(lane), xs)))
                }
                _ => panic!("matmul: weight type and activation type do not match"),
            };
        }
    }
}

/// Rule 5: `r = 1 / sqrt(dot(x, x) / n + eps)`, `y_i = (x_i * r) * w_i`.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == weight.len() && x.len() == out.len(),
        "rmsnorm: lengths differ"
    );
    let r = 1.0 / (dot_f32(x, x) / x.len() as f32 + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(weight) {
        *o = (xi * r) * wi;
    }
}

/// Rule 5: SwiGLU's gate, in place: `g = (g / (1 + exp(-g))) * u`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "silu_mul: lengths differ");
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = (*g / (1.0 + exp(-*g))) * u;
    }
}

/// 2 sqrt(2 / pi) and the cubic coefficient of GELU's tanh approximation, as f32.
pub const GELU_TANH_2_SQRT_2_OVER_PI: f32 = 1.595_769_2;
pub const GELU_TANH_CUBIC: f32 = 0.044_715;

/// Rule 5: GeGLU, `gate = gelu_tanh(gate) * up`, with GELU's tanh approximation
/// `0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))` written as the equal logistic
/// `g / (1 + exp(-2 sqrt(2/pi) g (1 + 0.044715 g g)))`: one `exp`, exact limits (-0 and g) where
/// it under- or overflows.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: lengths differ");
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let z = (GELU_TANH_2_SQRT_2_OVER_PI * x) * (1.0 + (GELU_TANH_CUBIC * x) * x);
        *g = (x / (1.0 + exp(-z))) * u;
    }
}

/// Rule 5: rotates every head of `x` (n_heads * head_dim) by the angles whose cosines and sines
/// are `cos`, `sin` (head_dim / 2 each); pairs are (i, i + head_dim/2).
pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    assert!(
        x.len() % head_dim == 0 && cos.len() == half && sin.len() == half,
        "rope: bad shapes"
    );
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (x0, x1) = (head[i], head[i + half]);
            head[i] = x0 * cos[i] - x1 * sin[i];
            head[i + half] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

/// Positions per block of the online softmax (rule 6).
pub const ATTENTION_BLOCK: usize = 64;

/// Rule 6 for queries that are consecutive tokens, each with the query heads of one KV head:
/// query i sees the first `kv.positions + i` cached positions. `q[i]` and `out[i]` hold the heads one
/// after another, `head_dim` values each; every (query, head) result is exactly that head's
/// one-query attention (taking them together only lets a backend read the cache once).
/// `keys`/`values` are a layer's cache (f16 by the contract; f32 on the verification path), one
/// row of `kv.kv_dim` elements per position; the KV head's vectors start at `kv.offset` in each row.
pub fn attention(q: &[&[f32]], kv: &KvHead<'_>, out: &mut [&mut [f32]]) {
    check_attention(q, kv, out);
    let KvHead {
        keys,
        values,
        positions: n_pos,
        kv_dim: stride,
        offset,
        head_dim,
        scale,
    } = *kv;
    for (i, (qi, oi)) in q.iter().zip(out.iter_mut()).enumerate() {
        for (qh, oh) in qi.chunks_exact(head_dim).zip(oi.chunks_exact_mut(head_dim)) {
            let n = n_pos + i;
            match (keys, values) {
                (KvSlice::F16(k), KvSlice::F16(v)) => {
                    attention_by(qh, k, v, f16_to_f32, n, stride, offset, scale, oh)
                }
                (KvSlice::F32(k), KvSlice::F32(v)) => {
                    attention_by(qh, k, v, |x: f32| x, n, stride, offset, scale, oh)
                }
                _ => unreachable!("check_attention compared the types"),
            }
        }
    }
}

/// The shapes every backend's attention asserts, so a bad call panics the same way everywhere.
pub fn check_attention(q: &[&[f32]], kv: &KvHead<'_>, out: &[&mut [f32]]) {
    let KvHead {
        keys,
        values,
        positions: n_pos,
        kv_dim: stride,
        offset,
        head_dim,
        ..
    } = *kv;
    let (keys_len, values_len) = match (keys, values) {
        (KvSlice::F16(k), KvSlice::F16(v)) => (k.len(), v.len()),
        (KvSlice::F32(k), KvSlice::F32(v)) => (k.len(), v.len()),
        _ => panic!("attention: keys and values differ in type"),
    };
    let width = q.first().map_or(0, |q0| q0.len());
    assert!(
        head_dim > 0
            && width.is_multiple_of(head_dim)
            && q.len() == out.len()
            && q.iter().all(|qi| qi.len() == width)
            && out.iter().all(|oi| oi.len() == width)
            && offset + head_dim <= stride,
        "attention: bad shapes"
    );
    let most = (n_pos + q.len()).saturating_sub(1);
    assert!(
        keys_len >= most * stride && values_len >= most * stride,
        "attention: cache too short"
    );
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attention_by<T: Copy>(
    q: &[f32],
    keys: &[T],
    values: &[T],
    load: impl Fn(T) -> f32,
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [f32],
) {
    let head_dim = q.len();
    assert!(
        out.len() == head_dim && offset + head_dim <= stride,
        "attention: bad shapes"
    );
    assert!(
        keys.len() >= n_pos * stride && values.len() >= n_pos * stride,
        "attention: cache too short"
    );
    let mut m = f32::NEG_INFINITY;
    let mut l = 0.0f32;
    out.fill(0.0);
    let mut scores = [0.0f32; ATTENTION_BLOCK];
    let mut start = 0;
    while start < n_pos {
        let end = (start + ATTENTION_BLOCK).min(n_pos);
        let mut block_max = f32::NEG_INFINITY;
        for t in start..end {
            let k = &keys[t * stride + offset..t * stride + offset + head_dim];
            let s = dot_by(head_dim, |i| q[i] * load(k[i])) * scale;
            scores[t - start] = s;
            block_max = if s > block_max { s } else { block_max };
        }
        let m_new = if block_max > m { block_max } else { m };
        let c = exp(m - m_new);
        l = l * c;
        for o in out.iter_mut() {
            *o = *o * c;
        }
        for t in start..end {
            let p = exp(scores[t - start] - m_new);
            l = l + p;
            let v = &values[t * stride + offset..t * stride + offset + head_dim];
            for (o, &vi) in out.iter_mut().zip(v) {
                *o = *o + p * load(vi);
            }
        }
        m = m_new;
        start = end;
    }
    for o in out.iter_mut() {
        *o = *o / l;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testdata::{k_blocks, Rng};
    use crate::quant::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};

    /// Rule 4's integer formulation of a K-quant dot agrees with the dot of the dequantized
    /// weights (llama.cpp's values) and the dequantized activations, computed in f64.
    fn k_dot_matches_dequantized<B: KBlock>(seed: u64) {
        let mut rng = Rng::new(seed, 0);
        let n = 6;
        let mut w = k_blocks::<B>(&mut rng, n);
        for b in &mut w {
            // Ordinary scales: the edge values of k_blocks make inf / NaN, not a comparison.
            b.set_scales(0x2c00, 0x2800);
        }
        let x: Vec<f32> = (0..n * QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let mut q8 = vec![BlockQ8Act::default(); n * QK_K / QK];
        quantize_q8(&x, &mut q8);
        let got = dot_k_q8(&w, &q8) as f64;
        let mut want = 0.0f64;
        for (b, blocks) in w.iter().zip(q8.chunks_exact(QK_K / QK)) {
            let mut v = [0.0f32; QK_K];
            b.dequantize(&mut v);
            for (i, &wv) in v.iter().enumerate() {
                let xb = &blocks[i / QK];
                want += wv as f64 * (xb.d as f64 * xb.qs[i % QK] as f64);
            }
        }
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{}: rule 4 {got}, dequantized {want}",
            std::any::type_name::<B>()
        );
    }

    /// The tiled matmul reads each row's blocks in order across the spans the tiles are stored
    /// in: it equals the row-major dot of every row, bitwise (Q4_0 of 2112 columns: spans of 64,
    /// 2 blocks; Q4_K of 2304 columns: spans of 8, 1 super-blocks; rows past a whole group).
    #[test]
    fn matmul_of_rows_11_q4_0_cols_2112_q4_k_cols_2304_equals_the_row_major_dots() {
        let mut rng = Rng::new(7, 0);
        let rows = 11;
        let (cols, nb) = (2112, 2112 / QK);
        let blocks = crate::kernels::testdata::q4_0_blocks(&mut rng, rows * nb);
        let w = Matrix::from_q4_0(rows, cols, &blocks);
        let mut x = vec![BlockQ8Act::default(); nb];
        quantize_q8(&rng.values(cols), &mut x);
        let mut out = vec![0.0f32; rows];
        matmul(&w, 0, &Input::Q8(&x), &mut [&mut out[..]]);
        for (r, &o) in out.iter().enumerate() {
            let want = dot_q4_0_q8(&blocks[r * nb..(r + 1) * nb], &x);
            assert_eq!(o.to_bits(), want.to_bits(), "Q4_0 row {r}");
        }
        let (cols, nbk) = (2304, 2304 / QK_K);
        let kb = k_blocks::<BlockQ4K>(&mut rng, rows * nbk);
        let mut bytes = Vec::new();
        kb.iter().for_each(|b| b.to_bytes(&mut bytes));
        let w = Matrix::from_bytes("w", crate::quant::GgmlType::Q4_K, rows, cols, &bytes)
            .expect("whole super-blocks");
        let mut x = vec![BlockQ8Act::default(); cols / QK];
        quantize_q8(&rng.values(cols), &mut x);
        matmul(&w, 0, &Input::Q8(&x), &mut [&mut out[..]]);
        for (r, &o) in out.iter().enumerate() {
            let want = dot_k_q8(&kb[r * nbk..(r + 1) * nbk], &x);
            assert_eq!(o.to_bits(), want.to_bits(), "Q4_K row {r}");
        }
    }

    #[test]
    fn k_quant_dots_agree_with_the_dequantized_values_q2_k_q3_k_q4_k_q5_k_q6_k() {
        for seed in 1..6 {
            k_dot_matches_dequantized::<BlockQ2K>(seed);
            k_dot_matches_dequantized::<BlockQ3K>(seed);
            k_dot_matches_dequantized::<BlockQ4K>(seed);
            k_dot_matches_dequantized::<BlockQ5K>(seed);
            k_dot_matches_dequantized::<BlockQ6K>(seed);
        }
    }
}
