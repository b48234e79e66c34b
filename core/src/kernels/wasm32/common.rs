//! The simd128 twins of reference.rs shared by both wasm backends (optimized, bit-identical).
//! The build enables simd128 for the whole module, so the intrinsics are safe calls; only the
//! 16-byte loads and stores are `unsafe`, each behind a slice or array that holds the bytes, and
//! the reads of attention's uninitialized block buffers, each after the write of its row.
//! simd128.rs and relaxed.rs differ only in how they take the integer dot of a block ([`IntDot`]).
//! A rule-2 accumulator of 8 lanes is a pair of f32x4 (lanes 0..4, 4..8).

use core::arch::wasm32::*;
use std::mem::MaybeUninit;

use crate::kernels::math::{self, EXP_OVERFLOW, EXP_POLY, EXP_UNDERFLOW, LN2_HI, LN2_LO, LOG2_E};
use crate::kernels::reference::{self, ATTENTION_BLOCK};
use crate::kernels::{with_k, Input, KMatrix, KvHead, KvSlice, Matrix, MatrixData};
use crate::quant::iq4::{TileIQ4NL, TileIQ4XS, LEVELS};
use crate::quant::kquants::{TileQ2K, TileQ3K, TileQ4K, TileQ5K, TileQ6K, QK_K};
use crate::quant::repack::{
    check_matmul_q, group_lanes, tile_rows, Spans, Tile, TileQ4_0, TileQ4_1, TileQ5_0, TileQ5_1,
    TileQ8_0, TILE_ROWS,
};
use crate::quant::{bf16_to_f32, f16_to_f32, BlockQ8Act, QK};

// ---------------------------------------------------------------------------------------------
// Loads and stores: the only unsafe code of the wasm backends.

/// `s[i..i + 4]` as f32x4.
#[inline(always)]
fn load_f32x4(s: &[f32], i: usize) -> v128 {
    let s = &s[i..i + 4];
    // SAFETY: s holds 4 f32, 16 readable bytes; v128.load takes any alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// `s[i..i + 8]` as u16x8.
#[inline(always)]
fn load_u16x8(s: &[u16], i: usize) -> v128 {
    let s = &s[i..i + 8];
    // SAFETY: s holds 8 u16, 16 readable bytes; v128.load takes any alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// 32 signed bytes as two i8x16.
#[inline(always)]
pub fn load_i8x32(s: &[i8; QK]) -> [v128; 2] {
    // SAFETY: s holds 32 readable bytes; v128.load takes any alignment.
    unsafe {
        [
            v128_load(s.as_ptr().cast()),
            v128_load(s.as_ptr().add(16).cast()),
        ]
    }
}

/// Stores f32x4 `v` at `s[i..i + 4]`.
#[inline(always)]
fn store_f32x4(s: &mut [f32], i: usize, v: v128) {
    let s = &mut s[i..i + 4];
    // SAFETY: s holds 4 writable f32, 16 bytes; v128.store takes any alignment.
    unsafe { v128_store(s.as_mut_ptr().cast(), v) }
}

// ---------------------------------------------------------------------------------------------
// Element types of rule-2 dots

/// f16 bits (in the low half of each u32 lane) -> f32, exactly: the magnitude's bits shifted
/// into place and scaled by 2^112 (exact for normals and subnormals: wasm never flushes
/// subnormals), inf/NaN rebuilt with their payload, then the sign. Otherwise identical to
/// quant::f16_to_f32.
#[inline(always)]
pub fn f16x4_to_f32x4(h: v128) -> v128 {
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let magnitude = v128_and(h, u32x4_splat(0x7fff));
    let shifted = i32x4_shl(magnitude, 13);
    let finite = f32x4_mul(shifted, f32x4_splat(f32::from_bits((127 + 112) << 23)));
    let inf_nan = v128_or(shifted, u32x4_splat(0x7f80_0000));
    let is_inf_nan = i32x4_ge(magnitude, i32x4_splat(0x7c00));
    v128_or(v128_bitselect(inf_nan, finite, is_inf_nan), sign)
}

/// f16 bits, sign-extended into each i32 lane -> f32, for finite values: shifted left by 13, the
/// exponent and mantissa land in place and copies of the sign in bits 28..31, of which the mask
/// keeps bit 31; then scaled by 2^112, exact for normals, subnormals and zeros (a power-of-two
/// factor keeps the sign). Four operations instead of [`f16x4_to_f32x4`]'s ten; wrong for
/// inf/NaN, so callers use it only where [`inf_nan_lanes`] found none.
#[inline(always)]
fn finite_f16x4_to_f32x4(h: v128) -> v128 {
    let bits = v128_and(i32x4_shl(h, 13), u32x4_splat(0x8fff_ffff));
    f32x4_mul(bits, f32x4_splat(f32::from_bits((127 + 112) << 23)))
}

/// All-ones in each u16 lane of `h` (f16 bits) whose exponent is all ones (inf or NaN).
#[inline(always)]
fn inf_nan_lanes(h: v128) -> v128 {
    let exponent = u16x8_splat(0x7c00);
    i16x8_eq(v128_and(h, exponent), exponent)
}

/// Element types a rule-2 dot can read 8 at a time as two f32x4, exactly.
pub trait Lanes {
    type Elem: Copy;
    /// Elements `s[i..i + 8]`.
    fn load8(s: &[Self::Elem], i: usize) -> [v128; 2];
    fn load1(e: Self::Elem) -> f32;
    /// [`Lanes::load8`] by a shorter conversion that is exact unless an element is inf or NaN;
    /// a lane of `special` becomes nonzero if one is (then the caller must use `load8`).
    #[inline(always)]
    fn load8_finite(s: &[Self::Elem], i: usize, special: &mut v128) -> [v128; 2] {
        let _ = special;
        Self::load8(s, i)
    }
}

pub struct F32Lanes;
pub struct F16Lanes;
pub struct BF16Lanes;

impl Lanes for F32Lanes {
    type Elem = f32;
    #[inline(always)]
    fn load8(s: &[f32], i: usize) -> [v128; 2] {
        let s = &s[i..i + 8];
        [load_f32x4(s, 0), load_f32x4(s, 4)]
    }
    #[inline(always)]
    fn load1(e: f32) -> f32 {
        e
    }
}

impl Lanes for F16Lanes {
    type Elem = u16;
    #[inline(always)]
    fn load8(s: &[u16], i: usize) -> [v128; 2] {
        let h = load_u16x8(s, i);
        [
            f16x4_to_f32x4(u32x4_extend_low_u16x8(h)),
            f16x4_to_f32x4(u32x4_extend_high_u16x8(h)),
        ]
    }
    #[inline(always)]
    fn load1(e: u16) -> f32 {
        f16_to_f32(e)
    }
    #[inline(always)]
    fn load8_finite(s: &[u16], i: usize, special: &mut v128) -> [v128; 2] {
        let h = load_u16x8(s, i);
        *special = v128_or(*special, inf_nan_lanes(h));
        [
            finite_f16x4_to_f32x4(i32x4_extend_low_i16x8(h)),
            finite_f16x4_to_f32x4(i32x4_extend_high_i16x8(h)),
        ]
    }
}

impl Lanes for BF16Lanes {
    type Elem = u16;
    #[inline(always)]
    fn load8(s: &[u16], i: usize) -> [v128; 2] {
        let h = load_u16x8(s, i);
        [
            i32x4_shl(u32x4_extend_low_u16x8(h), 16),
            i32x4_shl(u32x4_extend_high_u16x8(h), 16),
        ]
    }
    #[inline(always)]
    fn load1(e: u16) -> f32 {
        bf16_to_f32(e)
    }
}

// ---------------------------------------------------------------------------------------------
// Rule 2

/// `acc + a * b` on an 8-lane accumulator (two roundings, never fused).
#[inline(always)]
fn mul_add8(acc: [v128; 2], a: [v128; 2], b: [v128; 2]) -> [v128; 2] {
    [
        f32x4_add(acc[0], f32x4_mul(a[0], b[0])),
        f32x4_add(acc[1], f32x4_mul(a[1], b[1])),
    ]
}

/// Rule 2's fixed tree over four 8-lane accumulators. Otherwise identical to
/// reference::fold_accumulators.
#[inline(always)]
pub fn fold(acc: [[v128; 2]; 4]) -> f32 {
    // s = (acc0 + acc1) + (acc2 + acc3), lanes 0..4 and 4..8.
    let s_lo = f32x4_add(
        f32x4_add(acc[0][0], acc[1][0]),
        f32x4_add(acc[2][0], acc[3][0]),
    );
    let s_hi = f32x4_add(
        f32x4_add(acc[0][1], acc[1][1]),
        f32x4_add(acc[2][1], acc[3][1]),
    );
    // t = [s0+s4, s1+s5, s2+s6, s3+s7]; u0 = t0+t2, u1 = t1+t3; result u0 + u1.
    let t = f32x4_add(s_lo, s_hi);
    let u = f32x4_add(t, i32x4_shuffle::<2, 3, 2, 3>(t, t));
    f32x4_extract_lane::<0>(u) + f32x4_extract_lane::<1>(u)
}

/// Rule 2: the dot of `a` and `b` (same length). A partial last group is padded with zeros:
/// adding +0.0 leaves every accumulator unchanged (they start at +0.0 and a sum is -0.0 only
/// when both terms are), so the padding is exact. Otherwise identical to reference::dot_by.
#[inline(always)]
pub fn dot_rule2<L: Lanes>(a: &[L::Elem], b: &[f32]) -> f32 {
    let n = a.len();
    let b = &b[..n];
    let zero = f32x4_splat(0.0);
    let mut acc = [[zero; 2]; 4];
    let whole = n / 32 * 32;
    for i in (0..whole).step_by(32) {
        for (k, acc_k) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *acc_k = mul_add8(*acc_k, L::load8(a, j), F32Lanes::load8(b, j));
        }
    }
    let groups = n / 8;
    for g in whole / 8..groups {
        acc[g % 4] = mul_add8(acc[g % 4], L::load8(a, 8 * g), F32Lanes::load8(b, 8 * g));
    }
    let rest = n - groups * 8;
    if rest > 0 {
        let (mut ta, mut tb) = ([0.0f32; 8], [0.0f32; 8]);
        for j in 0..rest {
            ta[j] = L::load1(a[groups * 8 + j]);
            tb[j] = b[groups * 8 + j];
        }
        acc[groups % 4] = mul_add8(
            acc[groups % 4],
            F32Lanes::load8(&ta, 0),
            F32Lanes::load8(&tb, 0),
        );
    }
    fold(acc)
}

/// Otherwise identical to reference::dot_f32.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32 operands differ in length");
    dot_rule2::<F32Lanes>(a, b)
}

// ---------------------------------------------------------------------------------------------
// Rule 5: exp, RMSNorm, SiLU, RoPE

/// e^x for 4 lanes: the same constants and the same operation sequence as math::exp
/// (`f32x4.nearest` is round-ties-even, Cody-Waite reduction, Horner without fused
/// multiply-add, 2^n in two exact steps, then the special cases). Otherwise identical to
/// math::exp.
#[inline(always)]
pub fn exp4(x: v128) -> v128 {
    let n = f32x4_nearest(f32x4_mul(x, f32x4_splat(LOG2_E)));
    let r = f32x4_sub(
        f32x4_sub(x, f32x4_mul(n, f32x4_splat(LN2_HI))),
        f32x4_mul(n, f32x4_splat(LN2_LO)),
    );
    let mut p = f32x4_splat(EXP_POLY[5]);
    for c in [
        EXP_POLY[4],
        EXP_POLY[3],
        EXP_POLY[2],
        EXP_POLY[1],
        EXP_POLY[0],
        1.0,
        1.0,
    ] {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
    }
    // n / 2 rounded toward zero, as Rust's i32 division: add the sign bit, shift. Lanes out
    // of range (or NaN) give garbage here and are replaced below.
    let ni = i32x4_trunc_sat_f32x4(n);
    let n1 = i32x4_shr(i32x4_add(ni, u32x4_shr(ni, 31)), 1);
    let n2 = i32x4_sub(ni, n1);
    let bias = i32x4_splat(127);
    let pow2_n1 = i32x4_shl(i32x4_add(n1, bias), 23);
    let pow2_n2 = i32x4_shl(i32x4_add(n2, bias), 23);
    let y = f32x4_mul(f32x4_mul(p, pow2_n1), pow2_n2);
    let under = f32x4_lt(x, f32x4_splat(EXP_UNDERFLOW));
    let over = f32x4_gt(x, f32x4_splat(EXP_OVERFLOW));
    let nan = f32x4_ne(x, x);
    let y = v128_andnot(y, under);
    let y = v128_bitselect(f32x4_splat(f32::INFINITY), y, over);
    v128_bitselect(x, y, nan)
}

/// Otherwise identical to reference::rmsnorm.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == weight.len() && x.len() == out.len(),
        "rmsnorm: lengths differ"
    );
    let r = 1.0 / (dot_f32(x, x) / x.len() as f32 + eps).sqrt();
    let n4 = x.len() / 4 * 4;
    let rv = f32x4_splat(r);
    for i in (0..n4).step_by(4) {
        let y = f32x4_mul(f32x4_mul(load_f32x4(x, i), rv), load_f32x4(weight, i));
        store_f32x4(out, i, y);
    }
    for i in n4..x.len() {
        out[i] = (x[i] * r) * weight[i];
    }
}

/// `g = (g / (1 + exp(-z))) * u` 4 lanes at a time, with `z = logit(g)`; the tail as `tail`
/// (the reference) does it.
#[inline(always)]
fn logistic_gate_mul(
    gate: &mut [f32],
    up: &[f32],
    logit: impl Fn(v128) -> v128,
    tail: fn(&mut [f32], &[f32]),
) {
    let n4 = gate.len() / 4 * 4;
    let one = f32x4_splat(1.0);
    for i in (0..n4).step_by(4) {
        let g = load_f32x4(gate, i);
        let e = exp4(f32x4_neg(logit(g)));
        let y = f32x4_mul(f32x4_div(g, f32x4_add(one, e)), load_f32x4(up, i));
        store_f32x4(gate, i, y);
    }
    tail(&mut gate[n4..], &up[n4..]);
}

/// Otherwise identical to reference::silu_mul.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "silu_mul: lengths differ");
    logistic_gate_mul(gate, up, |g| g, reference::silu_mul);
}

/// Otherwise identical to reference::gelu_tanh_mul: `z = (C g) (1 + (A g) g)`, no fused
/// multiply-add.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    use reference::{GELU_TANH_2_SQRT_2_OVER_PI as C, GELU_TANH_CUBIC as A};
    assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: lengths differ");
    let (c, a, one) = (f32x4_splat(C), f32x4_splat(A), f32x4_splat(1.0));
    let logit = |g| {
        f32x4_mul(
            f32x4_mul(c, g),
            f32x4_add(one, f32x4_mul(f32x4_mul(a, g), g)),
        )
    };
    logistic_gate_mul(gate, up, logit, reference::gelu_tanh_mul);
}

/// Otherwise identical to reference::rope.
pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    assert!(
        x.len().is_multiple_of(head_dim) && cos.len() == half && sin.len() == half,
        "rope: bad shapes"
    );
    let h4 = half / 4 * 4;
    for head in x.chunks_exact_mut(head_dim) {
        for i in (0..h4).step_by(4) {
            let (x0, x1) = (load_f32x4(head, i), load_f32x4(head, i + half));
            let (c, s) = (load_f32x4(cos, i), load_f32x4(sin, i));
            store_f32x4(head, i, f32x4_sub(f32x4_mul(x0, c), f32x4_mul(x1, s)));
            store_f32x4(
                head,
                i + half,
                f32x4_add(f32x4_mul(x0, s), f32x4_mul(x1, c)),
            );
        }
        for i in h4..half {
            let (x0, x1) = (head[i], head[i + half]);
            head[i] = x0 * cos[i] - x1 * sin[i];
            head[i + half] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rule 3

/// Rule 3, 32 elements per block. Otherwise identical to reference::quantize_q8.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8Act]) {
    assert_eq!(
        x.len(),
        out.len() * QK,
        "quantize_q8: x must fill the blocks exactly"
    );
    for (xb, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let v: [v128; 8] = std::array::from_fn(|k| load_f32x4(xb, 4 * k));
        // The reference's `if |v| > m` never takes a NaN: NaN lanes become +0.0, then every
        // lane is a non-negative float, whose bits order as integers the way the floats do,
        // and any order gives the same maximum. An integer max, not f32x4.pmax: with
        // relaxed-simd enabled LLVM turns pmax into f32x4.relaxed_max, whose NaN result is
        // implementation-defined.
        let mut m = i32x4_splat(0);
        for vk in v {
            m = i32x4_max(m, v128_and(f32x4_abs(vk), f32x4_eq(vk, vk)));
        }
        let m = i32x4_max(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
        let m = i32x4_max(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
        let amax = f32::from_bits(i32x4_extract_lane::<0>(m) as u32);
        let id = f32x4_splat(if amax == 0.0 { 0.0 } else { 127.0 / amax });
        // `as i32` sends NaN to 0 and saturates (trunc_sat does both), then the clamp.
        let q: [v128; 8] = std::array::from_fn(|k| {
            let r = i32x4_trunc_sat_f32x4(f32x4_nearest(f32x4_mul(v[k], id)));
            i32x4_min(i32x4_max(r, i32x4_splat(-127)), i32x4_splat(127))
        });
        // q[0..4] hold the first 16 quants; every half sum is within ±16 * 127.
        let halves = [
            i32x4_add(i32x4_add(q[0], q[1]), i32x4_add(q[2], q[3])),
            i32x4_add(i32x4_add(q[4], q[5]), i32x4_add(q[6], q[7])),
        ];
        let lo = i8x16_narrow_i16x8(
            i16x8_narrow_i32x4(q[0], q[1]),
            i16x8_narrow_i32x4(q[2], q[3]),
        );
        let hi = i8x16_narrow_i16x8(
            i16x8_narrow_i32x4(q[4], q[5]),
            i16x8_narrow_i32x4(q[6], q[7]),
        );
        let (qs_lo, qs_hi) = block.qs.split_at_mut(16);
        // SAFETY: each half of qs holds 16 writable bytes; v128.store takes any alignment.
        unsafe {
            v128_store(qs_lo.as_mut_ptr().cast(), lo);
            v128_store(qs_hi.as_mut_ptr().cast(), hi);
        }
        block.d = amax / 127.0;
        block.sums = halves.map(|h| hsum_i32x4(h) as i16);
    }
}

#[inline(always)]
fn hsum_i32x4(v: v128) -> i32 {
    let s = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let s = i32x4_add(s, i32x4_shuffle::<1, 0, 3, 2>(s, s));
    i32x4_extract_lane::<0>(s)
}

// ---------------------------------------------------------------------------------------------
// Rule 6

/// (query, head) pairs per pass of [`attention_n`]: their running maxima and sums sit on the stack.
const PAIRS_PER_PASS: usize = 512;

/// Rule 6 for head_dim = 8 * N, for queries that are consecutive tokens (query i sees
/// `n_pos + i` positions) and the query heads of one KV head. Per 64-position block the K and V
/// rows are converted to f32 once, into buffers every (query, head) pair then reads; each pair's
/// operations are exactly the one-head sequence of reference::attention (its running output
/// rests in its `out` row between blocks: storing an f32 is exact). Otherwise identical to
/// reference::attention (the caller has checked the same shapes).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attention_n<L: Lanes, const N: usize>(
    q: &[&[f32]],
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) {
    let hd = 8 * N;
    let heads = q.first().map_or(0, |q0| q0.len() / hd);
    if heads == 0 {
        return;
    }
    // Left uninitialized: zeroing would add 2 x 16 KiB of stores to every call, and decode
    // makes one per (layer, item); rows 0..end - start are written before they are read.
    // Position-major, as the x86 twin's buffers (one position's N pairs contiguous).
    let mut kbuf = [[MaybeUninit::<[v128; 2]>::uninit(); N]; ATTENTION_BLOCK];
    let mut vbuf = kbuf;
    let mut scores = [0.0f32; ATTENTION_BLOCK];
    let mut p = [0.0f32; ATTENTION_BLOCK];
    let per_pass = (PAIRS_PER_PASS / heads).max(1);
    for (pass, (q, out)) in q.chunks(per_pass).zip(out.chunks_mut(per_pass)).enumerate() {
        let first = n_pos + pass * per_pass; // positions the pass's first query sees
        let most = first + q.len() - 1; // positions its last query sees
        let pairs = q.len() * heads;
        let mut m = [f32::NEG_INFINITY; PAIRS_PER_PASS];
        let mut l = [0.0f32; PAIRS_PER_PASS];
        for o in out.iter_mut() {
            o.fill(0.0);
        }
        let mut start = 0;
        while start < most {
            let end = (start + ATTENTION_BLOCK).min(most);
            // The block's K and V rows into the buffers: by the short conversion, redone
            // exactly if the block holds an inf or NaN (only an overflowing K or V makes one).
            macro_rules! convert {
                ($load:expr) => {
                    for t in start..end {
                        let k = &keys[t * stride + offset..t * stride + offset + hd];
                        let v = &values[t * stride + offset..t * stride + offset + hd];
                        for j in 0..N {
                            kbuf[t - start][j].write($load(k, 8 * j));
                            vbuf[t - start][j].write($load(v, 8 * j));
                        }
                    }
                };
            }
            let mut special = u8x16_splat(0);
            convert!(|s, i| L::load8_finite(s, i, &mut special));
            if v128_any_true(special) {
                convert!(L::load8);
            }
            // Query i sees positions start..end_i of this block; those already past their
            // last position (earlier queries, in the last block) sit it out.
            for (i, (qi, oi)) in q.iter().zip(out.iter_mut()).enumerate() {
                let end_i = end.min(first + i);
                if end_i <= start {
                    continue;
                }
                let len = end_i - start;
                for h in 0..heads {
                    let pair = i * heads + h;
                    let qv: [[v128; 2]; N] =
                        std::array::from_fn(|j| F32Lanes::load8(qi, h * hd + 8 * j));
                    let mut block_max = f32::NEG_INFINITY;
                    for (t, st) in scores.iter_mut().enumerate().take(len) {
                        let zero = f32x4_splat(0.0);
                        let mut acc = [[zero; 2]; 4];
                        // Whole fours of registers first, so every accumulator's index is a
                        // constant (as the x86 twin's score_sums).
                        for j4 in 0..N / 4 {
                            for (r, a) in acc.iter_mut().enumerate() {
                                let j = 4 * j4 + r;
                                // SAFETY: rows 0..len of this block were written above.
                                let kt = unsafe { kbuf[t][j].assume_init() };
                                *a = mul_add8(*a, qv[j], kt);
                            }
                        }
                        for j in N / 4 * 4..N {
                            // SAFETY: rows 0..len of this block were written above.
                            let kt = unsafe { kbuf[t][j].assume_init() };
                            acc[j % 4] = mul_add8(acc[j % 4], qv[j], kt);
                        }
                        let s = fold(acc) * scale;
                        *st = s;
                        block_max = if s > block_max { s } else { block_max };
                    }
                    let m_new = if block_max > m[pair] {
                        block_max
                    } else {
                        m[pair]
                    };
                    let c = math::exp(m[pair] - m_new);
                    l[pair] *= c;
                    let cv = f32x4_splat(c);
                    let o_h = &mut oi[h * hd..(h + 1) * hd];
                    let mut o: [[v128; 2]; N] = std::array::from_fn(|j| {
                        let oj = F32Lanes::load8(o_h, 8 * j);
                        [f32x4_mul(oj[0], cv), f32x4_mul(oj[1], cv)]
                    });
                    let mv = f32x4_splat(m_new);
                    for j in (0..len).step_by(4) {
                        store_f32x4(&mut p, j, exp4(f32x4_sub(load_f32x4(&scores, j), mv)));
                    }
                    for (t, &pt) in p.iter().enumerate().take(len) {
                        l[pair] += pt;
                        let pv = [f32x4_splat(pt); 2];
                        for (j, oj) in o.iter_mut().enumerate() {
                            // SAFETY: rows 0..len of this block were written above.
                            let vt = unsafe { vbuf[t][j].assume_init() };
                            *oj = mul_add8(*oj, pv, vt);
                        }
                    }
                    for (j, oj) in o.iter().enumerate() {
                        store_f32x4(o_h, 8 * j, oj[0]);
                        store_f32x4(o_h, 8 * j + 4, oj[1]);
                    }
                    m[pair] = m_new;
                }
            }
            start = end;
        }
        for (pair, &lp) in l.iter().enumerate().take(pairs) {
            let lv = f32x4_splat(lp);
            let o_h = &mut out[pair / heads][pair % heads * hd..(pair % heads + 1) * hd];
            for i in (0..hd).step_by(4) {
                store_f32x4(o_h, i, f32x4_div(load_f32x4(o_h, i), lv));
            }
        }
    }
}

/// Runs the twin for this head_dim if there is one (a multiple of 8 up to 256); returns false
/// if it did not run.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attention_any<L: Lanes>(
    q: &[&[f32]],
    head_dim: usize,
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) -> bool {
    macro_rules! by_width {
        ($($n:literal),*) => {
            match head_dim {
                $(h if h == 8 * $n => attention_n::<L, $n>(q, keys, values, n_pos, stride, offset, scale, out),)*
                _ => return false,
            }
        };
    }
    by_width!(1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32);
    true
}

/// Otherwise identical to reference::attention (which it calls for a head_dim that is not a
/// multiple of 8).
pub fn attention(q: &[&[f32]], kv: &KvHead<'_>, out: &mut [&mut [f32]]) {
    reference::check_attention(q, kv, out);
    let KvHead {
        keys,
        values,
        positions: n_pos,
        kv_dim: stride,
        offset,
        head_dim,
        scale,
    } = *kv;
    let ran = match (keys, values) {
        (KvSlice::F16(k), KvSlice::F16(v)) => {
            attention_any::<F16Lanes>(q, head_dim, k, v, n_pos, stride, offset, scale, out)
        }
        (KvSlice::F32(k), KvSlice::F32(v)) => {
            attention_any::<F32Lanes>(q, head_dim, k, v, n_pos, stride, offset, scale, out)
        }
        _ => unreachable!("check_attention compared the types"),
    };
    if !ran {
        reference::attention(q, kv, out);
    }
}

// ---------------------------------------------------------------------------------------------
// Rule 4: quantized matmul over row-interleaved tiles (quant::repack): one tile is block b of 8
// rows, one i32 / f32 lane per row (rows 0..4 in one v128, 4..8 in the other), and column c of
// its quants is the 8 rows' bytes 4c..4c+4. Up to 4 tokens per unpacked tile. Each (row, token)
// lane sees exactly the reference's per-block sequence.

/// Rows per tile: one f32 lane each.
pub const ROWS: usize = TILE_ROWS;
/// Tokens per unpacked tile.
const TOKENS: usize = 4;

/// A weight tile type of rule 4, as the kernels read it.
pub trait WeightTile: Tile {
    /// Q4_1's `+ sum_x * (mw * dx)` term.
    const HAS_MIN: bool;
    /// The 8 rows' scales d (and Q4_1's minimums m, else zero), lanes 0..4 and 4..8.
    fn scales(&self) -> ([v128; 2], [v128; 2]);
}

/// Whether no lane of `h` (f16 bits, or the OR of two such vectors) has an all-ones exponent.
/// OR-ing two vectors can only add false alarms (the exact path), never miss an inf/NaN.
#[inline(always)]
fn no_inf_nan(h: v128) -> bool {
    !v128_any_true(inf_nan_lanes(h))
}

/// 8 f16s as two f32x4, exactly: the short finite conversion when `finite` (the caller checked
/// [`no_inf_nan`]), else [`f16x4_to_f32x4`]. The scales of real weights are always finite; the
/// check costs less than the special cases it skips (decode matmul ~30% faster).
#[inline(always)]
fn f16x8_to_f32(h: v128, finite: bool) -> [v128; 2] {
    if finite {
        [
            finite_f16x4_to_f32x4(i32x4_extend_low_i16x8(h)),
            finite_f16x4_to_f32x4(i32x4_extend_high_i16x8(h)),
        ]
    } else {
        [
            f16x4_to_f32x4(u32x4_extend_low_u16x8(h)),
            f16x4_to_f32x4(u32x4_extend_high_u16x8(h)),
        ]
    }
}

impl WeightTile for TileQ4_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let d = load_u16x8(&self.d, 0);
        (f16x8_to_f32(d, no_inf_nan(d)), [f32x4_splat(0.0); 2])
    }
}

impl WeightTile for TileQ4_1 {
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let (d, m) = (load_u16x8(&self.d, 0), load_u16x8(&self.m, 0));
        let finite = no_inf_nan(v128_or(d, m));
        (f16x8_to_f32(d, finite), f16x8_to_f32(m, finite))
    }
}

impl WeightTile for TileQ5_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let d = load_u16x8(&self.d, 0);
        (f16x8_to_f32(d, no_inf_nan(d)), [f32x4_splat(0.0); 2])
    }
}

impl WeightTile for TileQ5_1 {
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let (d, m) = (load_u16x8(&self.d, 0), load_u16x8(&self.m, 0));
        let finite = no_inf_nan(v128_or(d, m));
        (f16x8_to_f32(d, finite), f16x8_to_f32(m, finite))
    }
}

impl WeightTile for TileQ8_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let d = load_u16x8(&self.d, 0);
        (f16x8_to_f32(d, no_inf_nan(d)), [f32x4_splat(0.0); 2])
    }
}

/// 16 bytes of a tile's quants from byte `at`: column `at / 32`, rows 0..4 (`at % 32 == 0`) or
/// 4..8 (`at % 32 == 16`), 4 bytes per row.
#[inline(always)]
fn load_quants<const N: usize>(qs: &[u8; N], at: usize) -> v128 {
    let s = &qs[at..at + 16];
    // SAFETY: s holds 16 readable bytes; v128.load takes any alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// A 4-bit tile's quants as unsigned bytes 0..=15, `[half][column]` for rows 0..4 / 4..8:
/// `.0` the low nibbles (elements 4c..4c+4), `.1` the high ones (elements 16+4c..16+4c+4).
#[inline(always)]
pub fn unpack_nibble_columns(qs: &[u8; ROWS * QK / 2]) -> ([[v128; 4]; 2], [[v128; 4]; 2]) {
    let mask = u8x16_splat(15);
    let mut lo = [[u8x16_splat(0); 4]; 2];
    let mut hi = lo;
    for half in 0..2 {
        for c in 0..4 {
            let q = load_quants(qs, 32 * c + 16 * half);
            lo[half][c] = v128_and(q, mask);
            hi[half][c] = v128_and(u16x8_shr(q, 4), mask);
        }
    }
    (lo, hi)
}

/// A 5-bit tile's quants as unsigned bytes 0..=31, in [`unpack_nibble_columns`]' layout: its
/// nibbles with bit 4 of element e of row r set from bit e of `qh[r]`.
#[inline(always)]
pub fn unpack_q5_columns(
    qs: &[u8; ROWS * QK / 2],
    qh: &[u32; ROWS],
) -> ([[v128; 4]; 2], [[v128; 4]; 2]) {
    let (mut lo, mut hi) = unpack_nibble_columns(qs);
    let ten = u8x16_splat(0x10);
    for half in 0..2 {
        // Rows 4h .. 4h + 4's high-bit words, one per i32 lane.
        // SAFETY: qh[4 * half..][..4] is 16 readable bytes; v128.load takes any alignment.
        let h = unsafe { v128_load(qh[4 * half..].as_ptr().cast()) };
        for k in 0..8 {
            // Every byte of lane r takes byte k / 2 of r's word; byte j tests bit
            // 4 * (k % 2) + j of it.
            let b = (k / 2) as u8;
            let picked = u8x16_swizzle(
                h,
                u8x16(
                    b,
                    b,
                    b,
                    b,
                    4 + b,
                    4 + b,
                    4 + b,
                    4 + b,
                    8 + b,
                    8 + b,
                    8 + b,
                    8 + b,
                    12 + b,
                    12 + b,
                    12 + b,
                    12 + b,
                ),
            );
            let s = 4 * (k % 2) as u32;
            let bits = u32x4_splat(u32::from_le_bytes([1 << s, 2 << s, 4 << s, 8 << s]));
            let high = v128_and(i8x16_eq(v128_and(picked, bits), bits), ten);
            if k < 4 {
                lo[half][k] = v128_or(lo[half][k], high);
            } else {
                hi[half][k - 4] = v128_or(hi[half][k - 4], high);
            }
        }
    }
    (lo, hi)
}

/// How a backend takes the exact integer dots of a tile's 8 rows with an activation block:
/// weights are prepared once per tile, activations once per (token, block).
pub trait IntDot<W: WeightTile> {
    type Weights: Copy;
    type Activations: Copy;
    /// The dots are `dot() - OFFSET * sum_x`.
    const OFFSET: i32;
    fn weights(tile: &W) -> Self::Weights;
    fn activations(block: &BlockQ8Act) -> Self::Activations;
    /// i32x4 pair: lane r of half h is row 4h + r's integer dot (before the offset term).
    fn dot(w: &Self::Weights, x: &Self::Activations) -> [v128; 2];
}

/// simd128's integer dot: both operands widened to i16, then `i32x4.dot_i16x8_s`, whose lanes
/// hold (row, pair of bytes): lanes (2r, 2r+1) of a pair of rows are summed at the end.
pub struct Widen;

/// The 4 activation bytes of column k as i16, twice: [x0..x4, x0..x4].
#[inline(always)]
fn broadcast_columns_i16(x: &BlockQ8Act) -> [v128; 8] {
    let [a, b] = load_i8x32(&x.qs);
    let wide = [
        i16x8_extend_low_i8x16(a),
        i16x8_extend_high_i8x16(a),
        i16x8_extend_low_i8x16(b),
        i16x8_extend_high_i8x16(b),
    ];
    std::array::from_fn(|k| {
        let w = wide[k / 2];
        if k % 2 == 0 {
            i16x8_shuffle::<0, 1, 2, 3, 0, 1, 2, 3>(w, w)
        } else {
            i16x8_shuffle::<4, 5, 6, 7, 4, 5, 6, 7>(w, w)
        }
    })
}

/// Σ over columns of (rows 0..4 or 4..8 as i8x16) · (column's activations as i16x8 pairs):
/// returns the 4 rows' dots. `w[c]` are the rows' 4 bytes of column c, `x[c]` its activations.
#[inline(always)]
pub fn dot_widened<const C: usize>(w: &[v128; C], x: &[v128; C]) -> v128 {
    let mut rows01 = i32x4_splat(0);
    let mut rows23 = i32x4_splat(0);
    for c in 0..C {
        rows01 = i32x4_add(rows01, i32x4_dot_i16x8(i16x8_extend_low_i8x16(w[c]), x[c]));
        rows23 = i32x4_add(rows23, i32x4_dot_i16x8(i16x8_extend_high_i8x16(w[c]), x[c]));
    }
    // Lanes (2r, 2r+1) hold row r's two halves.
    i32x4_add(
        i32x4_shuffle::<0, 2, 4, 6>(rows01, rows23),
        i32x4_shuffle::<1, 3, 5, 7>(rows01, rows23),
    )
}

/// 4-bit weights for [`Widen`]: per half, the 4 low-nibble columns then the 4 high-nibble ones
/// (elements 0..16 then 16..32, matching [`broadcast_columns_i16`]'s 8 columns).
#[inline(always)]
fn nibble_weights(qs: &[u8; ROWS * QK / 2]) -> [[v128; 8]; 2] {
    let (lo, hi) = unpack_nibble_columns(qs);
    std::array::from_fn(|h| std::array::from_fn(|k| if k < 4 { lo[h][k] } else { hi[h][k - 4] }))
}

macro_rules! widen_nibbles {
    ($tile:ty, $offset:literal) => {
        impl IntDot<$tile> for Widen {
            type Weights = [[v128; 8]; 2];
            type Activations = [v128; 8];
            const OFFSET: i32 = $offset;
            #[inline(always)]
            fn weights(tile: &$tile) -> [[v128; 8]; 2] {
                nibble_weights(&tile.qs)
            }
            #[inline(always)]
            fn activations(block: &BlockQ8Act) -> [v128; 8] {
                broadcast_columns_i16(block)
            }
            #[inline(always)]
            fn dot(w: &[[v128; 8]; 2], x: &[v128; 8]) -> [v128; 2] {
                [dot_widened(&w[0], x), dot_widened(&w[1], x)]
            }
        }
    };
}

// Q4_0: Σ (q - 8) x = Σ q x - 8 Σ x, with Σ x the activation block's `sum` (rule 3).
widen_nibbles!(TileQ4_0, 8);
widen_nibbles!(TileQ4_1, 0);

/// 5-bit weights for [`Widen`], laid out as [`nibble_weights`].
#[inline(always)]
fn q5_weights(qs: &[u8; ROWS * QK / 2], qh: &[u32; ROWS]) -> [[v128; 8]; 2] {
    let (lo, hi) = unpack_q5_columns(qs, qh);
    std::array::from_fn(|h| std::array::from_fn(|k| if k < 4 { lo[h][k] } else { hi[h][k - 4] }))
}

macro_rules! widen_q5 {
    ($tile:ty, $offset:literal) => {
        impl IntDot<$tile> for Widen {
            type Weights = [[v128; 8]; 2];
            type Activations = [v128; 8];
            const OFFSET: i32 = $offset;
            #[inline(always)]
            fn weights(tile: &$tile) -> [[v128; 8]; 2] {
                q5_weights(&tile.qs, &tile.qh)
            }
            #[inline(always)]
            fn activations(block: &BlockQ8Act) -> [v128; 8] {
                broadcast_columns_i16(block)
            }
            #[inline(always)]
            fn dot(w: &[[v128; 8]; 2], x: &[v128; 8]) -> [v128; 2] {
                [dot_widened(&w[0], x), dot_widened(&w[1], x)]
            }
        }
    };
}

// Q5_0: Σ (q - 16) x = Σ q x - 16 Σ x.
widen_q5!(TileQ5_0, 16);
widen_q5!(TileQ5_1, 0);

impl IntDot<TileQ8_0> for Widen {
    type Weights = [[v128; 8]; 2];
    type Activations = [v128; 8];
    const OFFSET: i32 = 0;
    #[inline(always)]
    fn weights(tile: &TileQ8_0) -> [[v128; 8]; 2] {
        let qs: &[u8; ROWS * QK] = tile_bytes(&tile.qs);
        std::array::from_fn(|h| std::array::from_fn(|c| load_quants(qs, 32 * c + 16 * h)))
    }
    #[inline(always)]
    fn activations(block: &BlockQ8Act) -> [v128; 8] {
        broadcast_columns_i16(block)
    }
    #[inline(always)]
    fn dot(w: &[[v128; 8]; 2], x: &[v128; 8]) -> [v128; 2] {
        [dot_widened(&w[0], x), dot_widened(&w[1], x)]
    }
}

/// Index columns (bytes 0..=15) -> the signed levels they pick.
#[inline(always)]
fn lookup_levels<const N: usize>(cols: [[v128; N]; 2]) -> [[v128; N]; 2] {
    let table = i8x16(
        LEVELS[0], LEVELS[1], LEVELS[2], LEVELS[3], LEVELS[4], LEVELS[5], LEVELS[6], LEVELS[7],
        LEVELS[8], LEVELS[9], LEVELS[10], LEVELS[11], LEVELS[12], LEVELS[13], LEVELS[14],
        LEVELS[15],
    );
    cols.map(|h| h.map(|c| i8x16_swizzle(table, c)))
}

impl WeightTile for TileIQ4NL {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scales(&self) -> ([v128; 2], [v128; 2]) {
        let d = load_u16x8(&self.d, 0);
        (f16x8_to_f32(d, no_inf_nan(d)), [f32x4_splat(0.0); 2])
    }
}

/// IQ4_NL: Q8_0's signed weights, looked up from the index nibbles.
impl IntDot<TileIQ4NL> for Widen {
    type Weights = [[v128; 8]; 2];
    type Activations = [v128; 8];
    const OFFSET: i32 = 0;
    #[inline(always)]
    fn weights(tile: &TileIQ4NL) -> [[v128; 8]; 2] {
        lookup_levels(nibble_weights(&tile.qs))
    }
    #[inline(always)]
    fn activations(block: &BlockQ8Act) -> [v128; 8] {
        broadcast_columns_i16(block)
    }
    #[inline(always)]
    fn dot(w: &[[v128; 8]; 2], x: &[v128; 8]) -> [v128; 2] {
        [dot_widened(&w[0], x), dot_widened(&w[1], x)]
    }
}

/// Q8_0's signed quants as bytes (the loads only move them into a v128).
#[inline(always)]
fn tile_bytes(qs: &[i8; ROWS * QK]) -> &[u8; ROWS * QK] {
    // SAFETY: i8 and u8 have the same size, alignment and validity.
    unsafe { &*(qs as *const [i8; ROWS * QK]).cast::<[u8; ROWS * QK]>() }
}

/// Rule 4's step for one tile and one token, lanes = the 8 rows: the offset term, then
/// `acc + isum * (d * dx)` (Q4_1: `acc + (isum * (d * dx) + sum_x * (m * dx))`).
#[inline(always)]
fn accumulate<D: IntDot<W>, W: WeightTile>(
    acc: [v128; 2],
    mut isum: [v128; 2],
    (d, m): ([v128; 2], [v128; 2]),
    xb: &BlockQ8Act,
) -> [v128; 2] {
    if D::OFFSET != 0 {
        let offset = i32x4_splat(D::OFFSET * xb.sum());
        isum = isum.map(|s| i32x4_sub(s, offset));
    }
    let dx = f32x4_splat(xb.d);
    let sum_x = f32x4_splat(xb.sum() as f32);
    std::array::from_fn(|h| {
        let mut term = f32x4_mul(f32x4_convert_i32x4(isum[h]), f32x4_mul(d[h], dx));
        if W::HAS_MIN {
            term = f32x4_add(term, f32x4_mul(sum_x, f32x4_mul(m[h], dx)));
        }
        f32x4_add(acc[h], term)
    })
}

/// One pass: the 8 rows of `tiles` (a row group's nb tiles in a span) by T tokens (`x[t]` is
/// token t's blocks of the span), continuing the sums `acc` (zero at the first span). Lane r of
/// half h of result t is reference's rule-4 dot of row 4h + r with token t over the blocks so
/// far.
#[inline(always)]
fn tile<D: IntDot<W>, W: WeightTile, const T: usize>(
    tiles: &[W],
    x: &[&[BlockQ8Act]; T],
    mut acc: [[v128; 2]; T],
) -> [[v128; 2]; T] {
    if T == 1 {
        // One token (decode): the weights go straight into the dot, never through memory.
        for (tile, xb) in tiles.iter().zip(x[0]) {
            let isum = D::dot(&D::weights(tile), &D::activations(xb));
            acc[0] = accumulate::<D, W>(acc[0], isum, tile.scales(), xb);
        }
        return acc;
    }
    for (b, tile) in tiles.iter().enumerate() {
        let scales = tile.scales();
        let w = D::weights(tile);
        for t in 0..T {
            let xb = &x[t][b];
            let isum = D::dot(&w, &D::activations(xb));
            acc[t] = accumulate::<D, W>(acc[t], isum, scales, xb);
        }
    }
    acc
}

// ---------------------------------------------------------------------------------------------
// K-quants (rule 4's super-block sequence), on the tiles the x86 twins read (quant::kquants):
// per 32-element sub-block the 8 rows' unsigned quants `q + OFFSET` in 8 columns of 4 bytes
// (rows 0..4 / 4..8 in one v128 each), exact integer dots per 16-element half, then per lane the
// reference's `iscaled = s0 * isum_0 + s1 * isum_1`, `imin = m0 * sum_x0 + m1 * sum_x1` and
// `acc + (iscaled * (d * dx) + imin * (-dmin * dx))` (no minimum term for Q3_K and Q6_K).

/// A K-quant tile as the wasm twins read it.
pub trait KWeightTile: Tile {
    const HAS_MIN: bool;
    /// The quants are stored as `q + OFFSET` (unsigned); the dots subtract `OFFSET * sum_x`.
    const OFFSET: i32;
    /// The largest stored quant (bounds the relaxed dot's i16 pair sums).
    const MAX_Q: i32;
    /// The quants are signed (IQ4_XS's levels): the dots take [`KIntDot::dot_half_signed`].
    const SIGNED: bool = false;
    /// Sub-block j's 8 columns, `[rows 0..4 / 4..8][k]`: lane r holds row r's unsigned quants of
    /// elements 4k .. 4k + 4 of the sub-block.
    fn unpack(&self, j: usize) -> [[v128; 8]; 2];
    /// Integer scales of sub-block j's two halves, `[half][rows 0..4 / 4..8]`, one i32 per row.
    fn scales(&self, j: usize) -> [[v128; 2]; 2];
    /// Integer minimums of sub-block j's halves (read only when HAS_MIN).
    fn mins(&self, j: usize) -> [[v128; 2]; 2] {
        let _ = j;
        [[i32x4_splat(0); 2]; 2]
    }
    /// (d, -dmin) of the 8 rows as f32 (-dmin zero without minimums).
    fn factors(&self) -> ([v128; 2], [v128; 2]);
}

/// 8 bytes (one per row) as two i32x4, zero-extended.
#[inline(always)]
fn u8x8_to_i32(b: &[u8; 8]) -> [v128; 2] {
    let w = |r: usize| {
        i32x4(
            b[r] as i32,
            b[r + 1] as i32,
            b[r + 2] as i32,
            b[r + 3] as i32,
        )
    };
    [w(0), w(4)]
}

/// One sub-block scale (or minimum) for both halves: Q4_K's and Q5_K's 32-element sub-blocks.
#[inline(always)]
fn both_halves(b: &[u8; 8]) -> [[v128; 2]; 2] {
    let v = u8x8_to_i32(b);
    [v, v]
}

/// 8 signed bytes (one per row) as two i32x4.
#[inline(always)]
fn i8x8_to_i32(b: &[i8; 8]) -> [v128; 2] {
    let w = |r: usize| {
        i32x4(
            b[r] as i32,
            b[r + 1] as i32,
            b[r + 2] as i32,
            b[r + 3] as i32,
        )
    };
    [w(0), w(4)]
}

/// (d, -dmin) of 8 rows; f32x4.neg flips the sign bit, exactly as the reference's `-dmin`.
#[inline(always)]
fn d_and_neg_dmin(d: &[u16; 8], dmin: &[u16; 8]) -> ([v128; 2], [v128; 2]) {
    let (d, m) = (load_u16x8(d, 0), load_u16x8(dmin, 0));
    let finite = no_inf_nan(v128_or(d, m));
    (
        f16x8_to_f32(d, finite),
        f16x8_to_f32(m, finite).map(|v| f32x4_neg(v)),
    )
}

/// d of 8 rows, and a zero -dmin.
#[inline(always)]
fn d_only(d: &[u16; 8]) -> ([v128; 2], [v128; 2]) {
    let d = load_u16x8(d, 0);
    (f16x8_to_f32(d, no_inf_nan(d)), [f32x4_splat(0.0); 2])
}

/// Every 16-byte piece of a chunk's 8 columns (`chunk` is its first byte), mapped by `f`.
#[inline(always)]
fn chunk_columns<const N: usize>(
    bytes: &[u8; N],
    chunk: usize,
    f: impl Fn(v128) -> v128,
) -> [[v128; 8]; 2] {
    std::array::from_fn(|h| std::array::from_fn(|k| f(load_quants(bytes, chunk + 32 * k + 16 * h))))
}

/// Sub-block j's 4-bit quants in Q4_K's layout (chunk j / 2, low nibbles for even j).
#[inline(always)]
fn k4_nibble_columns(qs: &[u8; 8 * 128], j: usize) -> [[v128; 8]; 2] {
    let low = u8x16_splat(15);
    let shift = 4 * (j % 2) as u32;
    chunk_columns(qs, 256 * (j / 2), |v| v128_and(u8x16_shr(v, shift), low))
}

/// `cols | (((bits >> shift) & mask) << up)` per byte, `bits` read as `chunk_columns` does.
#[inline(always)]
fn or_high_bits<const N: usize>(
    cols: [[v128; 8]; 2],
    bits: &[u8; N],
    chunk: usize,
    shift: u32,
    mask: u8,
    up: u32,
) -> [[v128; 8]; 2] {
    let high = chunk_columns(bits, chunk, |v| {
        u8x16_shl(v128_and(u8x16_shr(v, shift), u8x16_splat(mask)), up)
    });
    std::array::from_fn(|h| std::array::from_fn(|k| v128_or(cols[h][k], high[h][k])))
}

impl KWeightTile for TileQ4K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 15;
    #[inline(always)]
    fn unpack(&self, j: usize) -> [[v128; 8]; 2] {
        k4_nibble_columns(&self.qs, j)
    }
    #[inline(always)]
    fn scales(&self, j: usize) -> [[v128; 2]; 2] {
        both_halves(&self.sc[j])
    }
    #[inline(always)]
    fn mins(&self, j: usize) -> [[v128; 2]; 2] {
        both_halves(&self.m[j])
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_and_neg_dmin(&self.d, &self.dmin)
    }
}

impl KWeightTile for TileQ5K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 31;
    /// [`TileQ4K`]'s nibbles with bit j of the `qh` column above them.
    #[inline(always)]
    fn unpack(&self, j: usize) -> [[v128; 8]; 2] {
        or_high_bits(k4_nibble_columns(&self.qs, j), &self.qh, 0, j as u32, 1, 4)
    }
    #[inline(always)]
    fn scales(&self, j: usize) -> [[v128; 2]; 2] {
        both_halves(&self.sc[j])
    }
    #[inline(always)]
    fn mins(&self, j: usize) -> [[v128; 2]; 2] {
        both_halves(&self.m[j])
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_and_neg_dmin(&self.d, &self.dmin)
    }
}

/// `qs` chunk `b / 4`'s columns shifted right by `2 * (b % 4)` and masked to 2 bits (Q2_K and
/// Q3_K's low bits of sub-block b).
#[inline(always)]
fn two_bit_columns(qs: &[u8; 8 * 64], b: usize) -> [[v128; 8]; 2] {
    let three = u8x16_splat(3);
    let shift = 2 * (b % 4) as u32;
    chunk_columns(qs, 256 * (b / 4), |v| v128_and(u8x16_shr(v, shift), three))
}

impl KWeightTile for TileQ2K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 3;
    #[inline(always)]
    fn unpack(&self, b: usize) -> [[v128; 8]; 2] {
        two_bit_columns(&self.qs, b)
    }
    #[inline(always)]
    fn scales(&self, b: usize) -> [[v128; 2]; 2] {
        [
            u8x8_to_i32(&self.sc[2 * b]),
            u8x8_to_i32(&self.sc[2 * b + 1]),
        ]
    }
    #[inline(always)]
    fn mins(&self, b: usize) -> [[v128; 2]; 2] {
        [u8x8_to_i32(&self.m[2 * b]), u8x8_to_i32(&self.m[2 * b + 1])]
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_and_neg_dmin(&self.d, &self.dmin)
    }
}

impl KWeightTile for TileQ3K {
    const HAS_MIN: bool = false;
    /// Stored as q + 4 = low bits + 4 * (hmask bit): 0..=7.
    const OFFSET: i32 = 4;
    const MAX_Q: i32 = 7;
    #[inline(always)]
    fn unpack(&self, b: usize) -> [[v128; 8]; 2] {
        or_high_bits(two_bit_columns(&self.qs, b), &self.hmask, 0, b as u32, 1, 2)
    }
    #[inline(always)]
    fn scales(&self, b: usize) -> [[v128; 2]; 2] {
        [
            i8x8_to_i32(&self.sc[2 * b]),
            i8x8_to_i32(&self.sc[2 * b + 1]),
        ]
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_only(&self.d)
    }
}

impl KWeightTile for TileQ6K {
    const HAS_MIN: bool = false;
    const OFFSET: i32 = 32;
    const MAX_Q: i32 = 63;
    /// Sub-block b = 4n + k': low nibbles (k' < 2) or high ones of `ql` chunk 2n + k' % 2, and
    /// bits 2k'.. of `qh` chunk n above them.
    #[inline(always)]
    fn unpack(&self, b: usize) -> [[v128; 8]; 2] {
        let (n, kk) = (b / 4, b % 4);
        let low = u8x16_splat(15);
        let shift = 4 * (kk / 2) as u32;
        let l = chunk_columns(&self.q, TileQ6K::QL_AT[2 * n + kk % 2], |v| {
            v128_and(u8x16_shr(v, shift), low)
        });
        or_high_bits(l, &self.q, TileQ6K::QH_AT[n], 2 * kk as u32, 3, 4)
    }
    #[inline(always)]
    fn scales(&self, b: usize) -> [[v128; 2]; 2] {
        [
            i8x8_to_i32(&self.sc[2 * b]),
            i8x8_to_i32(&self.sc[2 * b + 1]),
        ]
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_only(&self.d)
    }
}

/// How a backend takes the exact integer dots of a K tile's sub-block halves.
pub trait KIntDot {
    type Activations: Copy;
    fn activations(block: &BlockQ8Act) -> Self::Activations;
    /// Lane r: Σ over the 16 elements of half `half` of u · x for the 4 rows of `w` (w's 4
    /// columns of that half, unsigned quants 0..=max_q), exact.
    fn dot_half(w: &[v128; 4], x: &Self::Activations, half: usize, max_q: i32) -> v128;
    /// As [`KIntDot::dot_half`] for signed quants (-128..=127).
    fn dot_half_signed(w: &[v128; 4], x: &Self::Activations, half: usize) -> v128;
}

impl KIntDot for Widen {
    type Activations = [v128; 8];
    #[inline(always)]
    fn activations(block: &BlockQ8Act) -> [v128; 8] {
        broadcast_columns_i16(block)
    }
    #[inline(always)]
    fn dot_half(w: &[v128; 4], x: &[v128; 8], half: usize, _max_q: i32) -> v128 {
        let x: [v128; 4] = std::array::from_fn(|c| x[4 * half + c]);
        dot_widened(w, &x)
    }
    /// The widening dot sign-extends the weights: signed quants need nothing else.
    #[inline(always)]
    fn dot_half_signed(w: &[v128; 4], x: &[v128; 8], half: usize) -> v128 {
        Self::dot_half(w, x, half, 127)
    }
}

impl KWeightTile for TileIQ4XS {
    const HAS_MIN: bool = false;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 127;
    const SIGNED: bool = true;
    /// Sub-block j's indices unpack as an IQ4_NL tile's, then the levels are looked up.
    #[inline(always)]
    fn unpack(&self, j: usize) -> [[v128; 8]; 2] {
        lookup_levels(nibble_weights(&self.qs[j]))
    }
    #[inline(always)]
    fn scales(&self, j: usize) -> [[v128; 2]; 2] {
        let v = i8x8_to_i32(&self.sc[j]);
        [v, v]
    }
    #[inline(always)]
    fn factors(&self) -> ([v128; 2], [v128; 2]) {
        d_only(&self.d)
    }
}

/// Sub-block j of tile `t` against T tokens (`x[i]` is token i's activation block j of this
/// super-block): the exact integers of rule 4, `[token][rows 0..4 / 4..8]` (iscaled, imin).
#[inline(always)]
fn sub_block_ints<D: KIntDot, W: KWeightTile, const T: usize>(
    t: &W,
    j: usize,
    x: [&BlockQ8Act; T],
) -> [[(v128, v128); 2]; T] {
    let w = t.unpack(j);
    let halves: [[[v128; 4]; 2]; 2] =
        std::array::from_fn(|h| std::array::from_fn(|e| std::array::from_fn(|c| w[h][4 * e + c])));
    let s = t.scales(j);
    let m = if W::HAS_MIN { t.mins(j) } else { s };
    x.map(|xb| {
        let xa = D::activations(xb);
        let [sx0, sx1] = xb.sums.map(i32::from);
        std::array::from_fn(|h| {
            let (mut isum0, mut isum1) = if W::SIGNED {
                (
                    D::dot_half_signed(&halves[h][0], &xa, 0),
                    D::dot_half_signed(&halves[h][1], &xa, 1),
                )
            } else {
                (
                    D::dot_half(&halves[h][0], &xa, 0, W::MAX_Q),
                    D::dot_half(&halves[h][1], &xa, 1, W::MAX_Q),
                )
            };
            if W::OFFSET != 0 {
                isum0 = i32x4_sub(isum0, i32x4_splat(W::OFFSET * sx0));
                isum1 = i32x4_sub(isum1, i32x4_splat(W::OFFSET * sx1));
            }
            let iscaled = i32x4_add(i32x4_mul(s[0][h], isum0), i32x4_mul(s[1][h], isum1));
            let imin = if W::HAS_MIN {
                i32x4_add(
                    i32x4_mul(m[0][h], i32x4_splat(sx0)),
                    i32x4_mul(m[1][h], i32x4_splat(sx1)),
                )
            } else {
                i32x4_splat(0)
            };
            (iscaled, imin)
        })
    })
}

/// One pass: the 8 rows of `tiles` (a row group's nbk super-blocks in a span) by T tokens (`x[t]`
/// is token t's blocks of the span), continuing the sums `acc` (zero at the first span). Lane r
/// of half h of result t is reference::dot_k_q8(row 4h + r, token t) over the blocks so far.
#[inline(always)]
fn tile_k<D: KIntDot, W: KWeightTile, const T: usize>(
    tiles: &[W],
    x: &[&[BlockQ8Act]; T],
    mut acc: [[v128; 2]; T],
) -> [[v128; 2]; T] {
    for (b, t) in tiles.iter().enumerate() {
        let (d, neg_dmin) = t.factors();
        // For one token, four sub-blocks at a time: their integer dots first, then their f32
        // steps in order (rule 4), as the x86 twin does; literal indices resolve each
        // sub-block's unpacking. `make bench-wasm-kernels` in Chromium (Zen 4), one token,
        // before / after: Q4_K 640 x 2048 relaxed 22 / 27-42 GOPS, simd128 10-12 / 13-15; Q6_K
        // relaxed 11.5 / 12-18, simd128 7.7 / 10-10.5; 16 tokens unchanged.
        macro_rules! sub_blocks {
            ($($j:expr),+) => {{
                let ints = [$(sub_block_ints::<D, W, T>(t, $j, x.map(|xt| &xt[8 * b + $j]))),+];
                for (j, int) in [$($j),+].into_iter().zip(&ints) {
                    for ((a, xt), ih) in acc.iter_mut().zip(x).zip(int) {
                        let dx = f32x4_splat(xt[8 * b + j].d);
                        for h in 0..2 {
                            let (iscaled, imin) = ih[h];
                            let mut term =
                                f32x4_mul(f32x4_convert_i32x4(iscaled), f32x4_mul(d[h], dx));
                            if W::HAS_MIN {
                                let dmin_dx = f32x4_mul(neg_dmin[h], dx);
                                term = f32x4_add(term, f32x4_mul(f32x4_convert_i32x4(imin), dmin_dx));
                            }
                            a[h] = f32x4_add(a[h], term);
                        }
                    }
                }
            }};
        }
        if T == 1 {
            sub_blocks!(0, 1, 2, 3);
            sub_blocks!(4, 5, 6, 7);
        } else {
            // Several tokens' integers at once would not fit the 16 registers of x86-64 (what
            // V8 compiles to): a batch takes one sub-block at a time.
            for j in 0..8 {
                sub_blocks!(j);
            }
        }
    }
    acc
}

/// One pass of a row group's tiles in a span by T tokens, continuing `acc`, for
/// [`matmul_tiles`].
trait Pass<W> {
    fn run<const T: usize>(
        group: &[W],
        x: &[&[BlockQ8Act]; T],
        acc: [[v128; 2]; T],
    ) -> [[v128; 2]; T];
}

/// Rule 4's per-block pass ([`tile`]).
struct BlockPass<D>(std::marker::PhantomData<D>);

impl<D: IntDot<W>, W: WeightTile> Pass<W> for BlockPass<D> {
    #[inline(always)]
    fn run<const T: usize>(
        group: &[W],
        x: &[&[BlockQ8Act]; T],
        acc: [[v128; 2]; T],
    ) -> [[v128; 2]; T] {
        tile::<D, W, T>(group, x, acc)
    }
}

/// Rule 4's per-super-block pass ([`tile_k`]).
struct SuperBlockPass<D>(std::marker::PhantomData<D>);

impl<D: KIntDot, W: KWeightTile> Pass<W> for SuperBlockPass<D> {
    #[inline(always)]
    fn run<const T: usize>(
        group: &[W],
        x: &[&[BlockQ8Act]; T],
        acc: [[v128; 2]; T],
    ) -> [[v128; 2]; T] {
        tile_k::<D, W, T>(group, x, acc)
    }
}

/// `out[t][i] = dot(w row first_row + i, x token t)` for quantized weights (rule 4): `tiles`
/// are a tiled matrix of `rows` rows of `nt` tiles, each over `per_tile` activation blocks.
/// Otherwise identical to reference::matmul. Row groups only partly inside the range compute
/// all 8 lanes and keep the ones asked for. The spans walked as [`Spans::walks`] says: a few
/// tokens span after span in memory order, each pass continuing the sums the outputs hold (f32
/// values stored and loaded exactly); a batch every span in each group's pass.
#[inline(always)]
fn matmul_tiles<P: Pass<W>, W: Tile>(
    tiles: &[W],
    rows: usize,
    nt: usize,
    per_tile: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    let (n_tokens, n_rows) =
        check_matmul_q(tiles.len(), rows, nt, first_row, x.len() / per_tile, out);
    if n_rows == 0 {
        return;
    }
    let nb = nt * per_tile;
    let end_row = first_row + n_rows;
    let spans = Spans::new::<W>(rows, nt);
    for walk in spans.walks(n_tokens) {
        let later_span = walk.start > 0;
        for g in first_row / ROWS..end_row.div_ceil(ROWS) {
            let (lane_lo, lane_hi, at) = group_lanes(g, 1, first_row, end_row);
            let mut t0 = 0;
            while t0 < n_tokens {
                let tt = (n_tokens - t0).min(TOKENS);
                let mut lanes = [[0.0f32; ROWS]; TOKENS];
                if later_span {
                    // The sums so far of the lanes asked for (the others are never read).
                    for (j, lane) in lanes.iter_mut().take(tt).enumerate() {
                        lane[lane_lo..lane_hi]
                            .copy_from_slice(&out[t0 + j][at..at + lane_hi - lane_lo]);
                    }
                }
                macro_rules! run {
                    ($t:literal) => {{
                        let mut acc = [[f32x4_splat(0.0); 2]; $t];
                        if later_span {
                            for (a, lane) in acc.iter_mut().zip(&lanes) {
                                *a = [load_f32x4(lane, 0), load_f32x4(lane, 4)];
                            }
                        }
                        for i in walk.clone() {
                            let span = spans.span(i);
                            let (from, len) = span;
                            let run = spans.run(g, span);
                            let xs: [&[BlockQ8Act]; $t] = std::array::from_fn(|j| {
                                let at = (t0 + j) * nb + from * per_tile;
                                &x[at..at + len * per_tile]
                            });
                            acc = P::run::<$t>(&tiles[run..run + len], &xs, acc);
                        }
                        for (lane, a) in lanes.iter_mut().zip(acc) {
                            store_f32x4(lane, 0, a[0]);
                            store_f32x4(lane, 4, a[1]);
                        }
                    }};
                }
                match tt {
                    4 => run!(4),
                    3 => run!(3),
                    2 => run!(2),
                    _ => run!(1),
                }
                for (j, lane) in lanes.iter().take(tt).enumerate() {
                    out[t0 + j][at..at + lane_hi - lane_lo]
                        .copy_from_slice(&lane[lane_lo..lane_hi]);
                }
                t0 += tt;
            }
        }
    }
}

/// Rule 4 for the per-block types: `tiles` are `rows` rows of `nb` blocks.
#[inline(always)]
pub fn matmul_q<D: IntDot<W>, W: WeightTile>(
    tiles: &[W],
    rows: usize,
    nb: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    matmul_tiles::<BlockPass<D>, W>(tiles, rows, nb, 1, first_row, x, out)
}

/// Rule 4 for the K-quants: `tiles` are `rows` rows of `nbk` super-blocks (8 blocks each).
#[inline(always)]
pub fn matmul_k<D: KIntDot, W: KWeightTile>(
    tiles: &[W],
    rows: usize,
    nbk: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    matmul_tiles::<SuperBlockPass<D>, W>(tiles, rows, nbk, QK_K / QK, first_row, x, out)
}

/// The quantized dot of one row (the table's dot_*_q8 entries): the row is tiled (lanes 1..8
/// padding) and run through the matmul tile. Not on the forward path. Otherwise identical to
/// reference::dot_*_q8.
pub fn dot_q<D: IntDot<W>, W: WeightTile>(w: &[W::Block], x: &[BlockQ8Act]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q*_q8: block counts differ");
    let tiles = tile_rows::<W, _>(1, w.len(), |_| w);
    let mut o = [0.0f32];
    matmul_q::<D, W>(&tiles, 1, w.len(), 0, x, &mut [&mut o[..]]);
    o[0]
}

/// `out[t][i] = dot(w row first_row + i, x token t)` for float weights (rule 2). Otherwise
/// identical to reference::matmul.
#[inline(always)]
fn matmul_f<L: Lanes>(
    w: &[L::Elem],
    cols: usize,
    first_row: usize,
    x: &[f32],
    out: &mut [&mut [f32]],
) {
    for (t, out_t) in out.iter_mut().enumerate() {
        let xt = &x[t * cols..(t + 1) * cols];
        for (i, o) in out_t.iter_mut().enumerate() {
            let r = first_row + i;
            *o = dot_rule2::<L>(&w[r * cols..(r + 1) * cols], xt);
        }
    }
}

/// Otherwise identical to reference::matmul; D takes the integer dots of the quantized tiles.
#[inline(always)]
pub fn matmul<D>(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]])
where
    D: IntDot<TileQ4_0>
        + IntDot<TileQ4_1>
        + IntDot<TileQ5_0>
        + IntDot<TileQ5_1>
        + IntDot<TileQ8_0>
        + IntDot<TileIQ4NL>
        + KIntDot,
{
    let (rows, cols, nb) = (w.rows, w.cols, w.cols / QK);
    match (&w.data, x) {
        (MatrixData::Q4_0(d), Input::Q8(x)) => {
            matmul_q::<D, TileQ4_0>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::Q4_1(d), Input::Q8(x)) => {
            matmul_q::<D, TileQ4_1>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::Q5_0(d), Input::Q8(x)) => {
            matmul_q::<D, TileQ5_0>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::Q5_1(d), Input::Q8(x)) => {
            matmul_q::<D, TileQ5_1>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::Q8_0(d), Input::Q8(x)) => {
            matmul_q::<D, TileQ8_0>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::IQ4_NL(d), Input::Q8(x)) => {
            matmul_q::<D, TileIQ4NL>(d, rows, nb, first_row, x, out)
        }
        (MatrixData::F32(d), Input::F32(x)) => matmul_f::<F32Lanes>(d, cols, first_row, x, out),
        (MatrixData::F16(d), Input::F32(x)) => matmul_f::<F16Lanes>(d, cols, first_row, x, out),
        (MatrixData::BF16(d), Input::F32(x)) => matmul_f::<BF16Lanes>(d, cols, first_row, x, out),
        (MatrixData::K(k), Input::Q8(x)) => {
            let nbk = cols / QK_K;
            with_k!(k, d => matmul_k::<D, _>(d, rows, nbk, first_row, x, out))
        }
        _ => panic!("matmul: weight type and activation type do not match"),
    }
}

/// Defines a backend's `KERNELS` table: the shared twins above, with the quantized entries
/// taking their integer dots from `$dot` (an [`IntDot`] for every tile type).
macro_rules! backend {
    ($name:literal, int_dot: $dot:ty) => {
        use crate::kernels::wasm32::common;
        use crate::kernels::{Input, Kernels, Matrix};
        use crate::quant::iq4::{BlockIQ4NL, TileIQ4NL};
        use crate::quant::repack::{TileQ4_0, TileQ4_1, TileQ5_0, TileQ5_1, TileQ8_0};
        use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

        pub static KERNELS: Kernels = Kernels {
            name: $name,
            dot_f32: common::dot_f32,
            quantize_q8: common::quantize_q8,
            dot_q4_0_q8,
            dot_q4_1_q8,
            dot_q5_0_q8,
            dot_q5_1_q8,
            dot_q8_0_q8,
            dot_iq4_nl_q8,
            matmul,
            rmsnorm: common::rmsnorm,
            silu_mul: common::silu_mul,
            gelu_tanh_mul: common::gelu_tanh_mul,
            rope: common::rope,
            attention: common::attention,
        };

        /// Otherwise identical to reference::dot_q4_0_q8.
        pub fn dot_q4_0_q8(w: &[BlockQ4_0], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileQ4_0>(w, x)
        }

        /// Otherwise identical to reference::dot_q4_1_q8.
        pub fn dot_q4_1_q8(w: &[BlockQ4_1], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileQ4_1>(w, x)
        }

        /// Otherwise identical to reference::dot_q5_0_q8.
        pub fn dot_q5_0_q8(w: &[BlockQ5_0], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileQ5_0>(w, x)
        }

        /// Otherwise identical to reference::dot_q5_1_q8.
        pub fn dot_q5_1_q8(w: &[BlockQ5_1], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileQ5_1>(w, x)
        }

        /// Otherwise identical to reference::dot_q8_0_q8.
        pub fn dot_q8_0_q8(w: &[BlockQ8_0], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileQ8_0>(w, x)
        }

        /// Otherwise identical to reference::dot_iq4_nl_q8.
        pub fn dot_iq4_nl_q8(w: &[BlockIQ4NL], x: &[crate::quant::BlockQ8Act]) -> f32 {
            common::dot_q::<$dot, TileIQ4NL>(w, x)
        }

        /// Otherwise identical to reference::matmul.
        pub fn matmul(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]]) {
            common::matmul::<$dot>(w, first_row, x, out)
        }
    };
}

pub(super) use backend;
