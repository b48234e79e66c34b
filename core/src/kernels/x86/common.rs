//! The 256-bit twins of reference.rs shared by every x86 backend (optimized, bit-identical).
//! Each function is `#[inline(always)]` and has no target features of its own: it is compiled
//! into the `#[target_feature]` entry points of avx2.rs, avxvnni.rs and avx512.rs, which differ
//! only in how they take the integer dot of a block ([`IntDot`]).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use crate::kernels::math::{self, EXP_OVERFLOW, EXP_POLY, EXP_UNDERFLOW, LN2_HI, LN2_LO, LOG2_E};
use crate::kernels::reference::{self, ATTENTION_BLOCK};
use crate::memory::Buf;
use crate::quant::iq4::{TileIQ4NL, TileIQ4XS, LEVELS};
use crate::quant::kquants::{TileQ2K, TileQ3K, TileQ4K, TileQ5K, TileQ6K};
use crate::quant::repack::{
    check_matmul_q, group_lanes, tile_rows, Spans, Tile, TileQ4_0, TileQ4_1, TileQ5_0, TileQ5_1,
    TileQ8_0, TILE_ROWS,
};
use crate::quant::{bf16_to_f32, f16_to_f32, BlockQ8Act, QK};

/// How a backend accumulates exact integer dots of unsigned bytes with signed bytes: lane i of
/// the result is `acc[i] + Σ_{j<4} u[4i+j] * s[4i+j]`. Callers keep `u * s` pair sums inside
/// i16 (rule 4's operand ranges), so `maddubs` cannot saturate.
pub trait IntDot: Sized {
    /// Whether pair sums saturate at i16 (`maddubs`): then Q8_0 takes the sign trick instead of
    /// its unsigned form (w + 128 would overflow a pair).
    const SATURATES: bool;
    /// Tokens per pass over a weight tile (bounded by the registers the backend has).
    const TOKENS: usize;

    /// # Safety
    /// The backend's target features must be enabled in the caller.
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;

    /// `scale * Σ_k dot(u[k], s[k])`, each lane 4 unsigned by 4 signed bytes per column;
    /// `max_u` bounds the unsigned bytes, `scale` is one small integer (|scale| < 2^15) per
    /// lane. The same exact integers as N chained `dot_acc`s times the scale; a backend whose
    /// pair sums are i16 may add several columns' pairs and widen them by the scale at once.
    ///
    /// # Safety
    /// The backend's target features must be enabled in the caller.
    #[inline(always)]
    unsafe fn dot_cols_scaled<const N: usize>(
        u: &[__m256i; N],
        s: &[__m256i; N],
        max_u: i32,
        scale: __m256i,
    ) -> __m256i {
        let _ = max_u;
        // SAFETY: forwarded to the caller.
        unsafe {
            let mut acc = _mm256_setzero_si256();
            for k in 0..N {
                acc = Self::dot_acc(acc, u[k], s[k]);
            }
            _mm256_mullo_epi32(scale, acc)
        }
    }

    /// `Σ_k dot(u[k], s[k])`: the same exact integers as N chained `dot_acc`s; `max_u` bounds
    /// the unsigned bytes. By default two chains (even and odd k), so consecutive dots do not
    /// wait on each other's latency; a backend whose pair sums are i16 may add several columns'
    /// pairs before widening them.
    ///
    /// # Safety
    /// The backend's target features must be enabled in the caller.
    #[inline(always)]
    unsafe fn dot_cols<const N: usize>(u: &[__m256i; N], s: &[__m256i; N], max_u: i32) -> __m256i {
        let _ = max_u;
        // SAFETY: forwarded to the caller.
        unsafe { dot_cols_chained::<Self, N>(u, s) }
    }

    /// For T tokens at once, token t's `Σ_k dot(u[k], s[k])` of one unpacked tile `w`: `(u[k],
    /// s[k])` are `w[k]` and column k (4 quants) of token t's block broadcast (`xq[t]` points at
    /// its 32 quants), through [`WeightTile::operands`] where pair sums saturate; `max_u` bounds
    /// the unsigned bytes. By default [`IntDot::dot_cols`] token by token
    /// ([`dot_tokens_each`]); the same exact integers in any order.
    ///
    /// # Safety
    /// 32 readable bytes behind each `xq[t]`; the backend's target features enabled in the caller.
    #[inline(always)]
    unsafe fn dot_tokens<W: WeightTile, const T: usize>(
        w: &[__m256i; 8],
        xq: &[*const i32; T],
        max_u: i32,
    ) -> [__m256i; T] {
        // SAFETY: forwarded to the caller.
        unsafe { dot_tokens_each::<Self, W, T>(w, xq, max_u) }
    }

    /// Whether [`IntDot::tile_pair`] runs two row groups (16 rows) per pass.
    const PAIRS: bool = false;
    /// Whether [`IntDot::tile_k_pair`] does, for the K-quants.
    const K_PAIRS: bool = Self::PAIRS;

    /// Rule 6 for head_dim = 8 * N: [`attention`], unless the backend has a twin on wider
    /// registers.
    ///
    /// # Safety
    /// As [`attention`]; the backend's target features must be enabled in the caller.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn attention<L: Lanes, const N: usize>(
        q: &[&[f32]],
        keys: &[L::Elem],
        values: &[L::Elem],
        n_pos: usize,
        stride: usize,
        offset: usize,
        scale: f32,
        out: &mut [&mut [f32]],
    ) {
        // SAFETY: forwarded to the caller.
        unsafe { attention::<L, N>(q, keys, values, n_pos, stride, offset, scale, out) }
    }

    /// One pass over two consecutive row groups' runs in a span (`tiles` and `tiles + nb`):
    /// lanes[t][r] is row r of the pair for token t, each lane the reference's sequence,
    /// continuing the sums `lanes` holds (zero at the first span). `prefetch`: how far ahead
    /// to fetch, in bytes (0: not at all; [`prefetch_bytes`]).
    ///
    /// # Safety
    /// `2 * nb` readable tiles from `tiles`, nb blocks behind each token pointer; the backend's
    /// target features enabled in the caller. Only called when PAIRS is true.
    #[inline(always)]
    unsafe fn tile_pair<W: WeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nb: usize,
        lanes: &mut [[f32; 2 * ROWS]; 8],
        prefetch: usize,
    ) {
        let _ = (tiles, x, nb, lanes, prefetch);
        unreachable!("tile_pair without PAIRS");
    }

    /// [`IntDot::tile_pair`] for the K-quants: one pass of [`tile_k`] over two consecutive row
    /// groups' runs of `nbk` super-blocks, continuing the sums in `lanes`.
    ///
    /// # Safety
    /// As [`IntDot::tile_pair`] (`2 * nbk` tiles, 8 * nbk blocks per token); only called when
    /// PAIRS is true and the quants are unsigned.
    #[inline(always)]
    unsafe fn tile_k_pair<W: KWeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nbk: usize,
        lanes: &mut [[f32; 2 * ROWS]; 8],
        prefetch: usize,
    ) {
        let _ = (tiles, x, nbk, lanes, prefetch);
        unreachable!("tile_k_pair without PAIRS");
    }
}

/// [`IntDot::dot_cols`] as two chains of `dot_acc` (even and odd k): i32 addition is exact, so
/// their sum is the same integer as one chain's.
///
/// # Safety
/// The backend's target features must be enabled in the caller.
#[inline(always)]
pub unsafe fn dot_cols_chained<D: IntDot, const N: usize>(
    u: &[__m256i; N],
    s: &[__m256i; N],
) -> __m256i {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut isums = [_mm256_setzero_si256(); 2];
        for k in 0..N {
            isums[k % 2] = D::dot_acc(isums[k % 2], u[k], s[k]);
        }
        _mm256_add_epi32(isums[0], isums[1])
    }
}

/// [`IntDot::dot_tokens`] one token at a time: its 8 operand pairs, then [`IntDot::dot_cols`].
///
/// # Safety
/// As [`IntDot::dot_tokens`].
#[inline(always)]
pub unsafe fn dot_tokens_each<D: IntDot, W: WeightTile, const T: usize>(
    w: &[__m256i; 8],
    xq: &[*const i32; T],
    max_u: i32,
) -> [__m256i; T] {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut isums = [_mm256_setzero_si256(); T];
        for (isum, &xq) in isums.iter_mut().zip(xq) {
            let (mut u, mut s) = (*w, [_mm256_setzero_si256(); 8]);
            for k in 0..8 {
                let xk = _mm256_set1_epi32(xq.add(k).read_unaligned());
                (u[k], s[k]) = if D::SATURATES {
                    W::operands(w[k], xk)
                } else {
                    (w[k], xk)
                };
            }
            *isum = D::dot_cols(&u, &s, max_u);
        }
        isums
    }
}

/// Element types a rule-2 dot can read 8 at a time as f32, exactly.
pub trait Lanes {
    type Elem: Copy;
    /// # Safety
    /// `p` must point at 8 readable elements; avx2 and f16c must be enabled in the caller.
    unsafe fn load8(p: *const Self::Elem) -> __m256;
    fn load1(e: Self::Elem) -> f32;
}

pub struct F32Lanes;
pub struct F16Lanes;
pub struct BF16Lanes;

impl Lanes for F32Lanes {
    type Elem = f32;
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees 8 readable elements.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    fn load1(e: f32) -> f32 {
        e
    }
}

impl Lanes for F16Lanes {
    type Elem = u16;
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable elements and f16c; vcvtph2ps is exact.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    fn load1(e: u16) -> f32 {
        f16_to_f32(e)
    }
}

impl Lanes for BF16Lanes {
    type Elem = u16;
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable elements and avx2.
        unsafe {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
    }
    #[inline(always)]
    fn load1(e: u16) -> f32 {
        bf16_to_f32(e)
    }
}

/// Rule 2's fixed tree over four 8-lane accumulators; otherwise identical to
/// reference::fold_accumulators.
#[inline(always)]
pub unsafe fn fold(acc: [__m256; 4]) -> f32 {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        // t = [s0+s4, s1+s5, s2+s6, s3+s7]; u0 = t0+t2, u1 = t1+t3; result u0 + u1.
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps::<1>(u, u)))
    }
}

/// [`fold`] for 8 positions at once: `s[p]` holds `(acc0 + acc1) + (acc2 + acc3)` of position
/// p; lane p of the result is position p's fold, through the same pairs: t_l = s_l + s_(l+4),
/// u_0 = t_0 + t_2, u_1 = t_1 + t_3, u_0 + u_1 (each sum of two values, so which is left does
/// not change the bits).
#[inline(always)]
unsafe fn fold8(s: [__m256; 8]) -> __m256 {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        // t[k]: t_0..t_3 of position 2k (low half) and 2k + 1 (high half).
        let mut t = [_mm256_setzero_ps(); 4];
        for (k, tk) in t.iter_mut().enumerate() {
            let (x, y) = (s[2 * k], s[2 * k + 1]);
            *tk = _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(x, y),
                _mm256_permute2f128_ps::<0x31>(x, y),
            );
        }
        // u[k]: u_0, u_1 of positions 4k, 4k + 2 (low half), then 4k + 1, 4k + 3 (high half).
        let mut u = [_mm256_setzero_ps(); 2];
        for (k, uk) in u.iter_mut().enumerate() {
            let (a, b) = (t[2 * k], t[2 * k + 1]);
            *uk = _mm256_add_ps(
                _mm256_shuffle_ps::<0x44>(a, b),
                _mm256_shuffle_ps::<0xEE>(a, b),
            );
        }
        // Element e of the low half: positions 0, 2, 4, 6; of the high half: 1, 3, 5, 7.
        let r = _mm256_add_ps(
            _mm256_shuffle_ps::<0x88>(u[0], u[1]),
            _mm256_shuffle_ps::<0xDD>(u[0], u[1]),
        );
        _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// The largest of `scores[..len]` (the reference's `if s > max { s } else { max }` per lane,
/// which never keeps a NaN, then a tree across lanes: rule 6 lets the order go, as only which
/// zero survives a tie of +0 and -0 can differ). Reads `scores` up to len rounded up to 8.
#[inline(always)]
unsafe fn block_max8(scores: &[f32; ATTENTION_BLOCK], len: usize) -> f32 {
    // SAFETY: len <= ATTENTION_BLOCK, a multiple of 8; avx2 is enabled in the caller.
    unsafe {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut most = _mm256_set1_ps(f32::NEG_INFINITY);
        for g in 0..len.div_ceil(8) {
            let s = _mm256_loadu_ps(scores.as_ptr().add(8 * g));
            let live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                _mm256_set1_epi32((len - 8 * g) as i32),
                lane,
            ));
            // vmaxps keeps its second operand unless the first is greater: never a NaN.
            most = _mm256_blendv_ps(most, _mm256_max_ps(s, most), live);
        }
        let m = _mm_max_ps(
            _mm256_castps256_ps128(most),
            _mm256_extractf128_ps::<1>(most),
        );
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)))
    }
}

/// Rule 2: `dot(a, b)` of length n with products `a_i * b_i`. A partial last group is padded
/// with zeros: adding +0.0 leaves every accumulator unchanged (they start at +0.0 and a sum is
/// -0.0 only when both terms are), so the padding is exact. Otherwise identical to
/// reference::dot_by.
#[inline(always)]
pub unsafe fn dot_rule2<L: Lanes>(a: *const L::Elem, b: *const f32, n: usize) -> f32 {
    // SAFETY: the caller guarantees n readable elements behind a and b, and avx2 + f16c.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let groups = n / 8;
        let mut g = 0;
        while g + 4 <= groups {
            for (k, acc_k) in acc.iter_mut().enumerate() {
                let i = (g + k) * 8;
                *acc_k = _mm256_add_ps(
                    *acc_k,
                    _mm256_mul_ps(L::load8(a.add(i)), _mm256_loadu_ps(b.add(i))),
                );
            }
            g += 4;
        }
        while g < groups {
            let i = g * 8;
            acc[g % 4] = _mm256_add_ps(
                acc[g % 4],
                _mm256_mul_ps(L::load8(a.add(i)), _mm256_loadu_ps(b.add(i))),
            );
            g += 1;
        }
        let rest = n - groups * 8;
        if rest > 0 {
            let (mut ta, mut tb) = ([0.0f32; 8], [0.0f32; 8]);
            for j in 0..rest {
                ta[j] = L::load1(*a.add(groups * 8 + j));
                tb[j] = *b.add(groups * 8 + j);
            }
            acc[groups % 4] = _mm256_add_ps(
                acc[groups % 4],
                _mm256_mul_ps(_mm256_loadu_ps(ta.as_ptr()), _mm256_loadu_ps(tb.as_ptr())),
            );
        }
        fold(acc)
    }
}

/// Otherwise identical to reference::dot_f32.
#[inline(always)]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: the lengths were checked equal by the caller.
    unsafe { dot_rule2::<F32Lanes>(a.as_ptr(), b.as_ptr(), a.len()) }
}

/// e^x for 8 lanes: the same constants and the same operation sequence as math::exp (round to
/// nearest even, Cody-Waite reduction, Horner without FMA, 2^n in two exact steps, then the
/// special cases). Otherwise identical to math::exp.
#[inline(always)]
pub unsafe fn exp8(x: __m256) -> __m256 {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)),
        );
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(LN2_HI))),
            _mm256_mul_ps(n, _mm256_set1_ps(LN2_LO)),
        );
        let mut p = _mm256_set1_ps(EXP_POLY[5]);
        for c in [
            EXP_POLY[4],
            EXP_POLY[3],
            EXP_POLY[2],
            EXP_POLY[1],
            EXP_POLY[0],
            1.0,
            1.0,
        ] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
        }
        // n / 2 rounded toward zero, as Rust's i32 division: add the sign bit, shift.
        let ni = _mm256_cvtps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(_mm256_add_epi32(ni, _mm256_srli_epi32::<31>(ni)));
        let n2 = _mm256_sub_epi32(ni, n1);
        let bias = _mm256_set1_epi32(127);
        let pow2_n1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let pow2_n2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        let y = _mm256_mul_ps(_mm256_mul_ps(p, pow2_n1), pow2_n2);
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_UNDERFLOW));
        let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_OVERFLOW));
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
        let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), over);
        _mm256_blendv_ps(y, x, nan)
    }
}

/// Rule 3, 32 elements per block. Otherwise identical to reference::quantize_q8.
#[inline(always)]
pub unsafe fn quantize_q8(x: &[f32], out: &mut [BlockQ8Act]) {
    // SAFETY: the caller checked x.len() == out.len() * QK; avx2 is enabled in the caller.
    unsafe {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (xb, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let mut v = [_mm256_setzero_ps(); 4];
            for (k, vk) in v.iter_mut().enumerate() {
                *vk = _mm256_loadu_ps(xb.as_ptr().add(8 * k));
            }
            // `max(|v|, m)` keeps m when |v| is NaN, as the reference's `if |v| > m` does.
            let mut m = _mm256_setzero_ps();
            for vk in v {
                m = _mm256_max_ps(_mm256_and_ps(vk, abs_mask), m);
            }
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), m);
            // No NaN is left and every lane is >= +0.0: any order gives the same maximum.
            let amax = lanes.iter().fold(0.0f32, |a, &b| if b > a { b } else { a });
            let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
            let mut q = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(v[k], _mm256_set1_ps(id)),
                );
                // `as i32` sends NaN to 0 and saturates; then the clamp.
                let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
                let r = _mm256_min_ps(
                    _mm256_max_ps(r, _mm256_set1_ps(-127.0)),
                    _mm256_set1_ps(127.0),
                );
                q[k] = _mm256_cvtps_epi32(r);
            }
            // q[0], q[1] hold the first 16 quants; every half sum is within ±16 * 127.
            let halves = [_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])];
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            _mm256_storeu_si256(
                block.qs.as_mut_ptr().cast(),
                _mm256_permutevar8x32_epi32(bytes, order),
            );
            block.d = amax / 127.0;
            block.sums = halves.map(|h| hsum_epi32(h) as i16);
        }
    }
}

#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// Otherwise identical to reference::rmsnorm.
#[inline(always)]
pub unsafe fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    // SAFETY: the caller checked the three lengths equal; avx2 is enabled in the caller.
    unsafe {
        let r = 1.0 / (dot_f32(x, x) / x.len() as f32 + eps).sqrt();
        let n8 = x.len() / 8 * 8;
        let rv = _mm256_set1_ps(r);
        for i in (0..n8).step_by(8) {
            let y = _mm256_mul_ps(
                _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), rv),
                _mm256_loadu_ps(weight.as_ptr().add(i)),
            );
            _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
        }
        for i in n8..x.len() {
            out[i] = (x[i] * r) * weight[i];
        }
    }
}

/// `g = (g / (1 + exp(-z))) * u` 8 lanes at a time, with `z = logit(g)`; the tail as
/// `tail` (the reference) does it.
#[inline(always)]
unsafe fn logistic_gate_mul(
    gate: &mut [f32],
    up: &[f32],
    logit: impl Fn(__m256) -> __m256,
    tail: fn(&mut [f32], &[f32]),
) {
    // SAFETY: the caller checked the lengths equal; avx2 is enabled in the caller.
    unsafe {
        let n8 = gate.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let sign = _mm256_set1_ps(-0.0);
        for i in (0..n8).step_by(8) {
            let g = _mm256_loadu_ps(gate.as_ptr().add(i));
            let e = exp8(_mm256_xor_ps(logit(g), sign));
            let y = _mm256_mul_ps(
                _mm256_div_ps(g, _mm256_add_ps(one, e)),
                _mm256_loadu_ps(up.as_ptr().add(i)),
            );
            _mm256_storeu_ps(gate.as_mut_ptr().add(i), y);
        }
        tail(&mut gate[n8..], &up[n8..]);
    }
}

/// Otherwise identical to reference::silu_mul.
#[inline(always)]
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: forwarded to the caller.
    unsafe { logistic_gate_mul(gate, up, |g| g, reference::silu_mul) }
}

/// Otherwise identical to reference::gelu_tanh_mul: `z = (C g) (1 + (A g) g)`, no FMA.
#[inline(always)]
pub unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    use reference::{GELU_TANH_2_SQRT_2_OVER_PI as C, GELU_TANH_CUBIC as A};
    // SAFETY: forwarded to the caller; avx2 is enabled there.
    unsafe {
        let (c, a, one) = (_mm256_set1_ps(C), _mm256_set1_ps(A), _mm256_set1_ps(1.0));
        let logit = |g| {
            let cubic = _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(a, g), g));
            _mm256_mul_ps(_mm256_mul_ps(c, g), cubic)
        };
        logistic_gate_mul(gate, up, logit, reference::gelu_tanh_mul)
    }
}

/// Otherwise identical to reference::rope.
#[inline(always)]
pub unsafe fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    // SAFETY: the caller checked the shapes; avx2 is enabled in the caller.
    unsafe {
        let half = head_dim / 2;
        let h8 = half / 8 * 8;
        for head in x.chunks_exact_mut(head_dim) {
            let p = head.as_mut_ptr();
            for i in (0..h8).step_by(8) {
                let (x0, x1) = (_mm256_loadu_ps(p.add(i)), _mm256_loadu_ps(p.add(i + half)));
                let (c, s) = (
                    _mm256_loadu_ps(cos.as_ptr().add(i)),
                    _mm256_loadu_ps(sin.as_ptr().add(i)),
                );
                _mm256_storeu_ps(
                    p.add(i),
                    _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)),
                );
                _mm256_storeu_ps(
                    p.add(i + half),
                    _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)),
                );
            }
            for i in h8..half {
                let (x0, x1) = (head[i], head[i + half]);
                head[i] = x0 * cos[i] - x1 * sin[i];
                head[i + half] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}

/// How many positions ahead of the one they convert the attention kernels prefetch the cache:
/// one block. Each block's K and V rows are read in a burst, then computed on for much longer,
/// and the CPU's own prefetchers do not run ahead of such bursts, so a long context's cache,
/// which streams from DRAM, was waited for at every block. One decode step's attention in the
/// TinyLlama shape (22 layers by 4 KV heads of 8 query heads of 64), 1 thread on Zen 5 (EPYC
/// family 26 model 2), medians of 30 steps in alternated rounds: after 1500 positions (34
/// MB of cache) 5.1-6.0 ms without, 3.7-4.0 with it (3.8-4.2 two blocks ahead); after 500 (11
/// MB, inside the 32 MiB L3) 1.1-1.2 ms either way. The avx2 kernels there: 5.9-7.3 -> 5.2.
pub const ATTENTION_AHEAD: usize = ATTENTION_BLOCK;

/// Prefetches position `t + ATTENTION_AHEAD`'s K and V rows (`stride` elements each) when
/// it is one of the `most` positions the call reads; a prefetch never faults.
#[inline(always)]
pub fn prefetch_ahead<E>(keys: &[E], values: &[E], t: usize, most: usize, stride: usize) {
    let ahead = t + ATTENTION_AHEAD;
    if ahead < most {
        let bytes = stride * std::mem::size_of::<E>();
        let (k, v) = (keys.as_ptr().cast::<u8>(), values.as_ptr().cast::<u8>());
        for line in (0..bytes).step_by(64) {
            super::prefetch(k.wrapping_add(ahead * bytes + line));
            super::prefetch(v.wrapping_add(ahead * bytes + line));
        }
    }
}

/// (query, head) pairs per pass of [`attention`]: their running maxima and sums sit on the stack.
pub const PAIRS_PER_PASS: usize = 512;

/// Query heads whose block steps [`attention`] takes together (a grouped-query KV head has up to 8
/// in most models); their probabilities wait on the stack, 2 KiB.
const HEAD_GROUP: usize = 8;

/// Rule 6 for head_dim = 8 * N, for queries that are consecutive tokens (query i sees
/// `n_pos + i` positions) and the query heads of one KV head. Per 64-position block the K and V
/// rows are converted to f32 once, into buffers (16 KiB each at head_dim 64, in L1; 64 KiB at
/// 256, in L2), and every (query, head) pair takes its block step from there: the cache is read
/// once per call instead of once per pair; while a block is converted, the rows a block ahead are
/// prefetched ([`prefetch_ahead`]). A call of at most 8 pairs at head_dim >= 128 (decode) takes
/// a twin of this function that converts 16 positions at a time, so its buffers stay in L1.
/// Each pair's operations are the one-head sequence of reference::attention (its running output
/// rests in its `out` row between blocks: storing an f32 is exact), but for rule 6's
/// exceptions: a score's accumulator lanes start from their first products, and the block
/// maximum is a tree. Scores are folded 8 positions at a time (`fold8`, where one `fold` per
/// score took its shuffles and adds one by one): one thread on Zen 4 with these avx2 kernels,
/// a KV head of 8 query heads of 64 over 500 positions held in L2, 6.4-9.3 ns per (head,
/// position) before, 5.8 after (four alternated runs each). Otherwise identical to
/// reference::attention (the caller has checked the same shapes).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn attention<L: Lanes, const N: usize>(
    q: &[&[f32]],
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) {
    // SAFETY: the caller checked that every q[i] and out[i] holds the same multiple of 8N
    // values, offset + 8N <= stride and (n_pos + q.len() - 1) * stride <= keys.len(),
    // values.len(); avx2 + f16c are enabled in the caller. Buffer rows 0..end - start are
    // written before they are read (left uninitialized: zeroing would add 2 x 16 KiB of stores
    // to every call, and decode makes one per (layer, item)).
    unsafe {
        let hd = 8 * N;
        let heads = q.first().map_or(0, |q0| q0.len() / hd);
        if heads == 0 {
            return;
        }
        if N >= 16 && q.len() * heads <= HEAD_GROUP {
            return attention_few::<L, N>(q, keys, values, n_pos, stride, offset, scale, out);
        }
        // Position-major: a position's N registers are contiguous. (Register-major put the N
        // registers of one position 2 KiB apart, in 2 of L1's 64 sets: at head_dim 256 the
        // 32 lines thrashed them and Gemma 3's decode attention ran at a quarter speed.)
        let mut kbuf = [[MaybeUninit::<__m256>::uninit(); N]; ATTENTION_BLOCK];
        let mut vbuf = kbuf;
        // A head group's scores, then probabilities, and rescale factors, between its K and V
        // steps.
        let mut p = [[0.0f32; ATTENTION_BLOCK]; HEAD_GROUP];
        let mut rescale = [0.0f32; HEAD_GROUP];
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
                for t in start..end {
                    let k = keys.as_ptr().add(t * stride + offset);
                    let v = values.as_ptr().add(t * stride + offset);
                    for j in 0..N {
                        kbuf[t - start][j].write(L::load8(k.add(8 * j)));
                        vbuf[t - start][j].write(L::load8(v.add(8 * j)));
                    }
                    prefetch_ahead(keys, values, t, most, stride);
                }
                // Scores go 8 positions at a time: zero keys fill the last group.
                for row in &mut kbuf[end - start..(end - start).next_multiple_of(8)] {
                    row.fill(MaybeUninit::new(_mm256_setzero_ps()));
                }
                // Query i sees positions start..end_i of this block; those already past
                // their last position (earlier queries, in the last block) sit it out.
                for (i, (qi, oi)) in q.iter().zip(out.iter_mut()).enumerate() {
                    let end_i = end.min(first + i);
                    if end_i <= start {
                        continue;
                    }
                    let len = end_i - start;
                    // Up to HEAD_GROUP heads at a time: first their scores from the K buffer,
                    // then their value steps from the V buffer, so each buffer is read from L1
                    // by every head in turn (one head's K then V step at a time took both
                    // buffers, 32 KiB at head_dim 64, through L1 for every head).
                    for h0 in (0..heads).step_by(HEAD_GROUP) {
                        let group = h0..heads.min(h0 + HEAD_GROUP);
                        for h in group.clone() {
                            let pair = i * heads + h;
                            let ph = &mut p[h - h0];
                            let qh = qi.as_ptr().add(h * hd);
                            if N >= 24 {
                                head_scores::<N, 4>(qh, &kbuf, len, scale, ph);
                            } else {
                                head_scores::<N, 1>(qh, &kbuf, len, scale, ph);
                            }
                            rescale[h - h0] =
                                block_probabilities(ph, len, &mut m[pair], &mut l[pair]);
                        }
                        for h in group {
                            let pair = i * heads + h;
                            let o_h = oi.as_mut_ptr().add(h * hd);
                            let cv = _mm256_set1_ps(rescale[h - h0]);
                            let mut o = [_mm256_setzero_ps(); N];
                            for (j, oj) in o.iter_mut().enumerate() {
                                *oj = _mm256_mul_ps(_mm256_loadu_ps(o_h.add(8 * j)), cv);
                            }
                            for (t, &pt) in p[h - h0].iter().enumerate().take(len) {
                                l[pair] += pt;
                                let pv = _mm256_set1_ps(pt);
                                for (j, oj) in o.iter_mut().enumerate() {
                                    let vt = vbuf[t][j].assume_init();
                                    *oj = _mm256_add_ps(*oj, _mm256_mul_ps(pv, vt));
                                }
                            }
                            for (j, oj) in o.iter().enumerate() {
                                _mm256_storeu_ps(o_h.add(8 * j), *oj);
                            }
                        }
                    }
                }
                start = end;
            }
            divide_by_sums::<N>(out, &l[..pairs], heads);
        }
    }
}

/// Positions per sub-block of [`attention_few`]: 16 rows of K or V as f32, 8 KiB each at
/// head_dim 128 and 16 KiB at 256, so both buffers stay in L1.
const SUB_BLOCK: usize = 16;

/// [`attention`] for wide heads (head_dim >= 128) and at most [`HEAD_GROUP`] (query, head) pairs,
/// as in decode: the block's K rows, then its V rows, are converted [`SUB_BLOCK`] positions at
/// a time, and every pair takes its scores (then its value step) over the sub-block before the
/// next is converted. The whole block's f32 buffers (64 KiB each at head_dim 256) were read from
/// L2 by every pair. Each pair keeps its block's scores, then its probabilities, until the
/// block's value step, and its running output keeps the order of [`attention`]: one add per
/// position, the positions in order, a rescale before the block's first. One Zen 3 core (EPYC
/// family 25 model 1), f16 cache of 500 positions, ns per (query head, position), minimum of 25
/// alternated rounds: head_dim 256 with 4 heads 37.3-38.0 -> 27.4-27.6 (2 heads: 48.3 -> 36.4),
/// head_dim 128 with 4 heads of 1000 positions 18.8-20.0 -> 15.7-16.1; at head_dim 64 the whole
/// block's buffers fit L1 and sub-blocks were 5% slower. Otherwise identical to
/// reference::attention.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn attention_few<L: Lanes, const N: usize>(
    q: &[&[f32]],
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) {
    // SAFETY: as [`attention`], whose caller checked the shapes, and q.len() * heads <=
    // HEAD_GROUP. Buffer rows are written before they are read.
    unsafe {
        let hd = 8 * N;
        let heads = q.first().map_or(0, |q0| q0.len() / hd);
        let pairs = q.len() * heads;
        let mut kbuf = [[MaybeUninit::<__m256>::uninit(); N]; SUB_BLOCK];
        let mut vbuf = kbuf;
        // Per pair: the block's scores, then its probabilities in their place.
        let mut p = [[0.0f32; ATTENTION_BLOCK]; HEAD_GROUP];
        let mut m = [f32::NEG_INFINITY; HEAD_GROUP];
        let mut l = [0.0f32; HEAD_GROUP];
        let mut rescale = [0.0f32; HEAD_GROUP];
        let most = n_pos + q.len() - 1; // positions the last query sees
        for o in out.iter_mut() {
            o.fill(0.0);
        }
        // Query i sees positions ..n_pos + i: of the sub-block from s0 to s1, how many.
        let seen = |i: usize, s0: usize, s1: usize| s1.min(n_pos + i).saturating_sub(s0);
        let mut start = 0;
        while start < most {
            let end = (start + ATTENTION_BLOCK).min(most);
            // Scores, a sub-block at a time.
            for s0 in (start..end).step_by(SUB_BLOCK) {
                let s1 = (s0 + SUB_BLOCK).min(end);
                for t in s0..s1 {
                    let k = keys.as_ptr().add(t * stride + offset);
                    for (j, row) in kbuf[t - s0].iter_mut().enumerate() {
                        row.write(L::load8(k.add(8 * j)));
                    }
                    prefetch_ahead(keys, values, t, most, stride);
                }
                // Scores go 8 positions at a time: zero keys fill the last group.
                for row in &mut kbuf[s1 - s0..(s1 - s0).next_multiple_of(8)] {
                    row.fill(MaybeUninit::new(_mm256_setzero_ps()));
                }
                for (i, qi) in q.iter().enumerate() {
                    let len = seen(i, s0, s1);
                    if len == 0 {
                        continue;
                    }
                    for h in 0..heads {
                        let qh = qi.as_ptr().add(h * hd);
                        let scores = &mut p[i * heads + h][s0 - start..];
                        if N >= 24 {
                            head_scores::<N, 2>(qh, &kbuf, len, scale, scores);
                        } else {
                            head_scores::<N, 1>(qh, &kbuf, len, scale, scores);
                        }
                    }
                }
            }
            // Each pair's block maximum, rescale and probabilities.
            for pair in 0..pairs {
                let len = seen(pair / heads, start, end);
                if len > 0 {
                    rescale[pair] =
                        block_probabilities(&mut p[pair], len, &mut m[pair], &mut l[pair]);
                }
            }
            // Value steps, a sub-block at a time; a run of 8 output registers at a time stays
            // in registers over the sub-block's positions.
            for s0 in (start..end).step_by(SUB_BLOCK) {
                let s1 = (s0 + SUB_BLOCK).min(end);
                for t in s0..s1 {
                    let v = values.as_ptr().add(t * stride + offset);
                    for (j, row) in vbuf[t - s0].iter_mut().enumerate() {
                        row.write(L::load8(v.add(8 * j)));
                    }
                }
                for (i, oi) in out.iter_mut().enumerate() {
                    let len = seen(i, s0, s1);
                    if len == 0 {
                        continue;
                    }
                    for h in 0..heads {
                        let pair = i * heads + h;
                        let o_h = oi.as_mut_ptr().add(h * hd);
                        let ph = &p[pair][s0 - start..s0 - start + len];
                        for &pt in ph {
                            l[pair] += pt;
                        }
                        let cv = _mm256_set1_ps(rescale[pair]);
                        for j0 in (0..N).step_by(8) {
                            let mut o = [_mm256_setzero_ps(); 8];
                            let run = 8.min(N - j0);
                            for (j, oj) in o.iter_mut().enumerate().take(run) {
                                *oj = _mm256_loadu_ps(o_h.add(8 * (j0 + j)));
                                if s0 == start {
                                    *oj = _mm256_mul_ps(*oj, cv);
                                }
                            }
                            for (t, &pt) in ph.iter().enumerate() {
                                let pv = _mm256_set1_ps(pt);
                                for (j, oj) in o.iter_mut().enumerate().take(run) {
                                    let vt = vbuf[t][j0 + j].assume_init();
                                    *oj = _mm256_add_ps(*oj, _mm256_mul_ps(pv, vt));
                                }
                            }
                            for (j, oj) in o.iter().enumerate().take(run) {
                                _mm256_storeu_ps(o_h.add(8 * (j0 + j)), *oj);
                            }
                        }
                    }
                }
            }
            start = end;
        }
        divide_by_sums::<N>(out, &l[..pairs], heads);
    }
}

/// One query head's scores (`q`: 8N values) against the first `len` buffered keys, scaled, into
/// `dst`, eight positions at a time (the last group's missing keys are zero rows in `keys`, and
/// its scores land in `dst` too): the eight positions' folds go together ([`fold8`]), and a
/// lane's first product starts its sum (rule 6's exception to rule 2).
///
/// # Safety
/// `q` points at 8N readable values; `keys` holds `len.next_multiple_of(8)` initialized rows and
/// `dst` as many values; avx2 is enabled in the caller.
#[inline(always)]
unsafe fn head_scores<const N: usize, const P: usize>(
    q: *const f32,
    keys: &[[MaybeUninit<__m256>; N]],
    len: usize,
    scale: f32,
    dst: &mut [f32],
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut qv = [_mm256_setzero_ps(); N];
        for (j, qj) in qv.iter_mut().enumerate() {
            *qj = _mm256_loadu_ps(q.add(8 * j));
        }
        let groups = len.div_ceil(8);
        for (g, keys) in keys.as_chunks::<8>().0[..groups].iter().enumerate() {
            let s8 = score_sums::<N, P>(&qv, keys);
            let r = _mm256_mul_ps(fold8(s8), _mm256_set1_ps(scale));
            _mm256_storeu_ps(dst[8 * g..8 * g + 8].as_mut_ptr(), r);
        }
    }
}

/// One pair's block step after its scores (the first `len` of `p`, replaced by their
/// probabilities): the block's maximum, the running maximum `m` moved to it if greater, the
/// running sum `l` rescaled. Returns the rescale factor of the pair's running output.
///
/// # Safety
/// 0 < len <= ATTENTION_BLOCK; avx2 is enabled in the caller.
#[inline(always)]
unsafe fn block_probabilities(
    p: &mut [f32; ATTENTION_BLOCK],
    len: usize,
    m: &mut f32,
    l: &mut f32,
) -> f32 {
    // SAFETY: forwarded to the caller; the exps write whole groups of 8 inside the block.
    unsafe {
        let block_max = block_max8(p, len);
        let m_new = if block_max > *m { block_max } else { *m };
        let c = math::exp(*m - m_new);
        *l *= c;
        let mv = _mm256_set1_ps(m_new);
        for j in (0..len).step_by(8) {
            let s = _mm256_loadu_ps(p.as_ptr().add(j));
            _mm256_storeu_ps(p.as_mut_ptr().add(j), exp8(_mm256_sub_ps(s, mv)));
        }
        *m = m_new;
        c
    }
}

/// Each (query, head) pair's output (`out[pair / heads]`, head `pair % heads`) divided by its
/// sum of probabilities `l[pair]`.
///
/// # Safety
/// Every `out` row holds `heads * 8N` values; avx2 is enabled in the caller.
#[inline(always)]
unsafe fn divide_by_sums<const N: usize>(out: &mut [&mut [f32]], l: &[f32], heads: usize) {
    // SAFETY: forwarded to the caller.
    unsafe {
        for (pair, &lp) in l.iter().enumerate() {
            let lv = _mm256_set1_ps(lp);
            let o_h = out[pair / heads].as_mut_ptr().add(pair % heads * 8 * N);
            for j in 0..N {
                let o = _mm256_loadu_ps(o_h.add(8 * j));
                _mm256_storeu_ps(o_h.add(8 * j), _mm256_div_ps(o, lv));
            }
        }
    }
}

/// The unscaled scores of one query head (`q`, 8N values) against 8 buffered keys, before
/// [`fold8`]: position p's `(acc0 + acc1) + (acc2 + acc3)`, lane r of acc k summing the products
/// of registers j = k mod 4 in order, its first product starting the sum (rule 6's exception
/// to rule 2). `P` positions go side by side: at head_dim >= 192 [`attention`] takes 4 and
/// [`attention_few`] 2, so q's row (N registers, spilled: AVX2 has 16) is read once for several
/// keys and several chains of adds run at once. Gemma 3 (4 heads of 256, f16 cache of 500
/// positions) on one Zen 3 core: 46-48 -> 37-39 ns per (head, position) with 4 (before the
/// accumulators' indices were constants); at head_dim 64 and 128, 4 gained nothing (64: 7%
/// slower), so they take 1. In [`attention_few`], whose keys sit in L1, 2 took 27.4-27.6 ns at
/// head_dim 256, 4 took 29.5-29.9 and 1 took 29.4 (minimum of 25 alternated rounds).
///
/// # Safety
/// The keys' rows are initialized; avx2 is enabled in the caller.
#[inline(always)]
unsafe fn score_sums<const N: usize, const P: usize>(
    q: &[__m256; N],
    keys: &[[MaybeUninit<__m256>; N]; 8],
) -> [__m256; 8] {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut s8 = [_mm256_setzero_ps(); 8];
        let (sums, _) = s8.as_chunks_mut::<P>();
        for (sums, keys) in sums.iter_mut().zip(keys.as_chunks::<P>().0) {
            let mut acc = [[_mm256_setzero_ps(); 4]; P];
            // Whole fours of registers first, so every accumulator's index is a constant: a
            // loop over j with `j % 4` kept them on the stack at head_dim 256 (a load and a
            // store per product, and a chain through memory).
            for j4 in 0..N / 4 {
                for r in 0..4 {
                    let j = 4 * j4 + r;
                    for (a, k) in acc.iter_mut().zip(keys) {
                        let product = _mm256_mul_ps(q[j], k[j].assume_init());
                        a[r] = if j4 == 0 {
                            product
                        } else {
                            _mm256_add_ps(a[r], product)
                        };
                    }
                }
            }
            for j in N / 4 * 4..N {
                for (a, k) in acc.iter_mut().zip(keys) {
                    let product = _mm256_mul_ps(q[j], k[j].assume_init());
                    a[j % 4] = if j < 4 {
                        product
                    } else {
                        _mm256_add_ps(a[j % 4], product)
                    };
                }
            }
            for (s, a) in sums.iter_mut().zip(&acc) {
                *s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
            }
        }
        s8
    }
}

/// Runs the twin for this head_dim if there is one (a multiple of 8 up to 256). Returns false
/// if it did not run, so the caller can fall back to the reference.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn attention_any<D: IntDot, L: Lanes>(
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
    // SAFETY: shapes are checked by the caller; features are enabled in the caller.
    unsafe {
        macro_rules! by_width {
            ($($n:literal),*) => {
                match head_dim {
                    $(h if h == 8 * $n => D::attention::<L, $n>(q, keys, values, n_pos, stride, offset, scale, out),)*
                    _ => return false,
                }
            };
        }
        by_width!(1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32);
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Quantized matmul on row-interleaved tiles (quant::repack): one tile = block b of 8 rows, one
// i32 / f32 lane per row, up to D::TOKENS tokens per unpacked tile. Per 4-byte column the 8 rows'
// bytes sit in one register and the activation's 4 bytes are broadcast, so each integer dot
// lands in its row's lane with no horizontal sum. Each (row, token) lane sees exactly the
// reference's per-block sequence.

/// Rows per tile: one f32 lane each.
pub const ROWS: usize = TILE_ROWS;

/// A tile type of rule 4, as the kernel reads it.
pub trait WeightTile: Tile {
    /// Q4_1's `+ sum_x * (mw * dx)` term.
    const HAS_MIN: bool;
    /// With the signed operands of [`WeightTile::operands`], the dot is `dot - SUM_OFFSET * sum_x`.
    const SUM_OFFSET: i32;
    /// With [`WeightTile::unpack_unsigned`]'s bytes, the dot is `dot - UNSIGNED_OFFSET * sum_x`.
    const UNSIGNED_OFFSET: i32 = Self::SUM_OFFSET;
    /// The largest unsigned operand [`WeightTile::operands`] gives (128 after the sign trick):
    /// how many columns' i16 pair sums [`IntDot::dot_cols`] may add before widening.
    const MAX_U: i32 = 128;
    /// 8 registers; register k holds, in lane r, row r's quants of elements 4k .. 4k + 4.
    unsafe fn unpack(&self) -> [__m256i; 8];
    /// As [`WeightTile::unpack`], as unsigned bytes for dots that do not saturate.
    #[inline(always)]
    unsafe fn unpack_unsigned(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { self.unpack() }
    }
    /// Signed weights: [`WeightTile::operands`] takes the sign trick.
    const SIGN_TRICK: bool = false;
    /// (unsigned, signed) operands of [`IntDot::dot_acc`] for unpacked weights and x's quants:
    /// [`sign_trick`] for signed weights, else `(w, x)`. Derived from SIGN_TRICK alone, so a
    /// kernel that skips this call for unsigned weights (avx2's `dot_tokens`) cannot disagree.
    #[inline(always)]
    unsafe fn operands(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
        if Self::SIGN_TRICK {
            // SAFETY: forwarded to the caller.
            unsafe { sign_trick(w, x) }
        } else {
            (w, x)
        }
    }
    /// The 8 rows' scales and (if HAS_MIN, else zero) minimums as f32: one load each.
    unsafe fn scales(&self) -> (__m256, __m256);
    /// 4-bit tiles (quants 0..=15 as [`unpack_nibble_columns`] reads them) return their 4 packed
    /// columns, so a dot that does not saturate can take the high nibbles in place
    /// ([`nibble_dot`]); others return None.
    #[inline(always)]
    fn nibbles(&self) -> Option<&[u8; ROWS * QK / 2]> {
        None
    }
}

/// 4-bit quants: column c's low nibbles are elements 4c.., the high ones 16 + 4c...
#[inline(always)]
unsafe fn unpack_nibble_columns(qs: &[u8; ROWS * QK / 2]) -> [__m256i; 8] {
    // SAFETY: 128 readable bytes; avx2 is enabled in the caller.
    unsafe {
        let mut out = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            [out[c], out[4 + c]] = nibble_chunk(qs, c);
        }
        out
    }
}

/// Chunk c (32 bytes) of [`unpack_nibble_columns`]' layout as its two columns: the low nibbles
/// (column c) and the high ones (column 4 + c).
#[inline(always)]
pub unsafe fn nibble_chunk(qs: &[u8; ROWS * QK / 2], c: usize) -> [__m256i; 2] {
    // SAFETY: c < 4 keeps the 32 bytes inside qs; avx2 is enabled in the caller.
    unsafe {
        let low = _mm256_set1_epi8(15);
        let v = _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast());
        [
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
        ]
    }
}

#[inline(always)]
unsafe fn load_f16x8(p: &[u16; ROWS]) -> __m256 {
    // SAFETY: 8 readable f16s; f16c is enabled in the caller; vcvtph2ps is exact.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.as_ptr().cast())) }
}

// Q4_0: Σ (q - 8) x = Σ q x - 8 Σ x, with Σ x the activation block's `sum` (rule 3).
impl WeightTile for TileQ4_0 {
    const HAS_MIN: bool = false;
    const SUM_OFFSET: i32 = 8;
    const MAX_U: i32 = 15;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { unpack_nibble_columns(&self.qs) }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
    #[inline(always)]
    fn nibbles(&self) -> Option<&[u8; ROWS * QK / 2]> {
        Some(&self.qs)
    }
}

impl WeightTile for TileQ4_1 {
    const HAS_MIN: bool = true;
    const SUM_OFFSET: i32 = 0;
    const MAX_U: i32 = 15;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { unpack_nibble_columns(&self.qs) }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), load_f16x8(&self.m)) }
    }
    #[inline(always)]
    fn nibbles(&self) -> Option<&[u8; ROWS * QK / 2]> {
        Some(&self.qs)
    }
}

/// Bit 4 of the 5-bit quants, as 0x10 or 0 per byte, in [`unpack_nibble_columns`]' order:
/// register k, lane r, byte j is bit 4k + j of row r's `qh`.
#[inline(always)]
unsafe fn q5_high_bits(qh: &[u32; ROWS]) -> [__m256i; 8] {
    // SAFETY: 32 readable bytes; avx2 is enabled in the caller.
    unsafe {
        let h = _mm256_loadu_si256(qh.as_ptr().cast());
        // Byte i of dword l picks byte `b` of dword l (shuffles stay inside 128-bit halves).
        let dword_base = _mm256_setr_epi32(
            0,
            0x0404_0404,
            0x0808_0808,
            0x0c0c_0c0c,
            0,
            0x0404_0404,
            0x0808_0808,
            0x0c0c_0c0c,
        );
        let ten = _mm256_set1_epi8(0x10);
        let mut out = [_mm256_setzero_si256(); 8];
        for (k, o) in out.iter_mut().enumerate() {
            let picked = _mm256_shuffle_epi8(
                h,
                _mm256_add_epi8(dword_base, _mm256_set1_epi8((k / 2) as i8)),
            );
            // Byte j tests bit 4 * (k % 2) + j of the picked byte.
            let s = 4 * (k % 2);
            let bits = _mm256_set1_epi32(i32::from_le_bytes([1 << s, 2 << s, 4 << s, 8 << s]));
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(picked, bits), bits);
            *o = _mm256_and_si256(set, ten);
        }
        out
    }
}

/// 5-bit quants (0..=31): the low nibbles as for 4 bits, bit 4 from the rows' `qh`.
#[inline(always)]
unsafe fn unpack_q5_columns(qs: &[u8; ROWS * QK / 2], qh: &[u32; ROWS]) -> [__m256i; 8] {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut low = unpack_nibble_columns(qs);
        let high = q5_high_bits(qh);
        for (l, h) in low.iter_mut().zip(high) {
            *l = _mm256_or_si256(*l, h);
        }
        low
    }
}

impl WeightTile for TileQ5_0 {
    const HAS_MIN: bool = false;
    const SUM_OFFSET: i32 = 16;
    const MAX_U: i32 = 31;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { unpack_q5_columns(&self.qs, &self.qh) }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

impl WeightTile for TileQ5_1 {
    const HAS_MIN: bool = true;
    const SUM_OFFSET: i32 = 0;
    const MAX_U: i32 = 31;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { unpack_q5_columns(&self.qs, &self.qh) }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), load_f16x8(&self.m)) }
    }
}

impl WeightTile for TileQ8_0 {
    const HAS_MIN: bool = false;
    const SUM_OFFSET: i32 = 0;
    /// w + 128 as an unsigned byte is w with its top bit flipped.
    const UNSIGNED_OFFSET: i32 = 128;
    const SIGN_TRICK: bool = true;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: 256 readable bytes; avx2 is enabled in the caller.
        // (Loops, not `from_fn` / `map`: closures lack the target features, so intrinsics in
        // them would be called out of line.)
        unsafe {
            let mut out = [_mm256_setzero_si256(); 8];
            for (c, o) in out.iter_mut().enumerate() {
                *o = _mm256_loadu_si256(self.qs.as_ptr().add(32 * c).cast());
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn unpack_unsigned(&self) -> [__m256i; 8] {
        // SAFETY: as unpack.
        unsafe {
            let mut out = self.unpack();
            for o in out.iter_mut() {
                *o = _mm256_xor_si256(*o, _mm256_set1_epi8(-128));
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

/// [`LEVELS`] plus `offset` (wrapping: +128 gives them as unsigned bytes) in both 128-bit
/// halves: the table `shuffle_epi8` looks the 4-bit indices up in.
#[inline(always)]
unsafe fn level_table(offset: i8) -> __m256i {
    // SAFETY: 16 readable bytes; avx2 is enabled in the caller.
    unsafe {
        let levels = LEVELS.map(|l| l.wrapping_add(offset));
        _mm256_broadcastsi128_si256(_mm_loadu_si128(levels.as_ptr().cast()))
    }
}

/// Index columns (bytes 0..=15) -> the levels they pick from `table`.
#[inline(always)]
unsafe fn lookup_levels(mut cols: [__m256i; 8], table: __m256i) -> [__m256i; 8] {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        for c in cols.iter_mut() {
            *c = _mm256_shuffle_epi8(table, *c);
        }
        cols
    }
}

/// The sign trick for signed weights on `maddubs`: |w| * (x with w's sign) are the products
/// w * x, with |w| <= 128 and |x| <= 127 keeping a pair's sum in i16.
#[inline(always)]
unsafe fn sign_trick(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: avx2 is enabled in the caller.
    unsafe { (_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)) }
}

// IQ4_NL: Q8_0's signed weights, looked up from the index nibbles.
impl WeightTile for TileIQ4NL {
    const HAS_MIN: bool = false;
    const SUM_OFFSET: i32 = 0;
    /// The levels + 128 as unsigned bytes.
    const UNSIGNED_OFFSET: i32 = 128;
    const SIGN_TRICK: bool = true;
    #[inline(always)]
    unsafe fn unpack(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { lookup_levels(unpack_nibble_columns(&self.qs), level_table(0)) }
    }
    #[inline(always)]
    unsafe fn unpack_unsigned(&self) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { lookup_levels(unpack_nibble_columns(&self.qs), level_table(-128)) }
    }
    #[inline(always)]
    unsafe fn scales(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

/// The exact integer dot of 4-bit quants `qs` (as [`unpack_nibble_columns`] lays them out)
/// with one token's quants `xq`, plus `start`, for a dot that does not saturate: the high
/// nibbles are taken in place, masked but not shifted, as 16 * q (u8 up to 240, products with
/// |x| <= 127 summing to at most 16 * 240 * 127 in a lane, far inside i32), and that exact
/// multiple of 16 is divided by 16 with one arithmetic shift at the end. Three instructions per
/// column become two, and the two nibble halves are two independent chains.
#[inline(always)]
unsafe fn nibble_dot<D: IntDot>(
    qs: &[u8; ROWS * QK / 2],
    xq: *const i32,
    start: __m256i,
) -> __m256i {
    // SAFETY: 128 readable bytes behind qs and 32 behind xq; features are enabled in the caller.
    unsafe {
        let (low_mask, high_mask) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0xf0u8 as i8));
        let (mut low, mut high) = (start, _mm256_setzero_si256());
        for c in 0..4 {
            let v = _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast());
            let x_low = _mm256_set1_epi32(xq.add(c).read_unaligned());
            let x_high = _mm256_set1_epi32(xq.add(4 + c).read_unaligned());
            low = D::dot_acc(low, _mm256_and_si256(v, low_mask), x_low);
            high = D::dot_acc(high, _mm256_and_si256(v, high_mask), x_high);
        }
        _mm256_add_epi32(low, _mm256_srai_epi32::<4>(high))
    }
}

/// `factor * Σx` of one activation block `xb` in every lane, for `factor` an i16 in both
/// halves of each lane (an offset, a K-quant minimum, 1): the block's half sums broadcast as
/// the i16 pair they are stored as (one load) and one `madd`, `factor * s0 + factor * s1`, the
/// same integer as `factor * sum` (|factor| <= 128 by 32 quants of |x| <= 127: far inside i32).
/// Taking the whole sum instead (two loads, an add, a move from a general register and a
/// broadcast from there) cost the avx2 Q4_0 batch loop ~4 of its ~44 instructions per (tile,
/// token): 64 tokens by a 5632 x 2048 matrix, 1 thread on Zen 3 (EPYC family 25 model 1),
/// three alternated rounds, ns per (tile, token) before / after: Q4_0 3.43-3.51 / 3.13-3.23,
/// Q4_K 3.60-3.62 / 3.50.
#[inline(always)]
pub unsafe fn times_sum(factor: __m256i, xb: &BlockQ8Act) -> __m256i {
    // SAFETY: avx2 is enabled in the caller.
    unsafe { _mm256_madd_epi16(factor, _mm256_set1_epi32(xb.sums_pair())) }
}

/// `f` in both i16 halves of every lane, for [`times_sum`].
#[inline(always)]
pub unsafe fn i16_pairs(f: i32) -> __m256i {
    debug_assert!(i16::try_from(f).is_ok());
    // SAFETY: avx2 is enabled in the caller.
    unsafe { _mm256_set1_epi16(f as i16) }
}

/// How far ahead of the tile being read the matmul prefetches (prefetches never fault): the
/// next 4 KiB page, which the CPU's own stream prefetchers do not enter. Only for tiles in
/// 4 KiB pages: in 2 MiB pages (core::memory) Zen 4's prefetchers stream on by themselves and the
/// extra instructions cost (TinyLlama-shape one-thread decode on Zen 4, alternated: Q4_0
/// 34.3-37.9 tok/s with them, 37.8-41.8 without; Q4_K_M 21.0-23.5 against 26.8-30.0), where in
/// 4 KiB pages on a Zen 3 they took a Q4_K_M token from 70 to 54 ms. Over huge pages the distance
/// is the machine's, timed at load ([`crate::kernels::stream_prefetch`]): a Zen 3 core gains
/// from it there too.
pub const PREFETCH_BYTES: usize = 4096;

/// Whether a pass over the tiles before `end` prefetches: when what it fetches ahead reaches the
/// tiles in small pages, from `small_from` on (memory::Buf::small_pages_from; 0 for a `Vec`),
/// of `len` tiles. A buffer wholly in huge pages (an arena's) never does: what lies past its
/// end is the next matrix, in huge pages too.
#[inline(always)]
fn prefetches<W>(end: usize, small_from: usize, len: usize) -> bool {
    let size = std::mem::size_of::<W>();
    small_from < len && end * size + PREFETCH_BYTES > small_from * size
}

/// How far ahead, in bytes (0: not at all), a pass over the `groups` row groups from g in `span`
/// prefetches. A batch's first pass over a group (`batch_first`) of a matrix of several spans
/// fetches the next groups' run in the same span: a group's runs in the spans are as many
/// separate streams, which the CPU's own prefetchers follow badly (64 tokens by two 2048 x 5632
/// Q4_0 matrices, 1 thread on Zen 4: 78-81 GB/s-times-tokens without, 86-88 with; 80-84 in the
/// one-stream layout before spans). Otherwise tiles in small pages a page ahead
/// ([`prefetches`]), and tiles in huge pages `stream` bytes ahead (the machine's
/// [`crate::kernels::stream_prefetch`] for a few tokens, 0 for a batch).
#[inline(always)]
fn prefetch_bytes<W>(
    spans: &Spans,
    (batch_first, stream): (bool, usize),
    (g, groups): (usize, usize),
    span: (usize, usize),
    (small_from, len): (usize, usize),
) -> usize {
    if batch_first && spans.count() > 1 {
        groups * span.1 * std::mem::size_of::<W>()
    } else if prefetches::<W>(spans.run(g + groups, span), small_from, len) {
        PREFETCH_BYTES
    } else {
        stream
    }
}

/// Asks for every 64-byte line of the `W` that lies `bytes` past `tile` (0: nothing).
#[inline(always)]
pub fn prefetch_tile<W>(tile: *const W, bytes: usize) {
    prefetch_lines(tile, bytes, 0..lines_of::<W>());
}

/// Half `half` (0 or 1) of [`prefetch_tile`]'s lines: a K-quant tile is 18-27 lines, and asked
/// for at once they arrive in bursts the one-token matmul then waits on ([`tile_k`]).
#[inline(always)]
pub fn prefetch_tile_half<W>(tile: *const W, bytes: usize, half: usize) {
    let lines = lines_of::<W>();
    prefetch_lines(tile, bytes, half * lines / 2..(half + 1) * lines / 2);
}

/// 64-byte lines from the start of a `W` to its end (the last one partly past it).
const fn lines_of<W>() -> usize {
    std::mem::size_of::<W>().div_ceil(64)
}

/// Lines `lines` of the `W` that lies `bytes` past `tile` (0: nothing). A prefetch never faults:
/// past the end of the tiles the address need not point into anything.
#[inline(always)]
fn prefetch_lines<W>(tile: *const W, bytes: usize, lines: std::ops::Range<usize>) {
    if bytes != 0 {
        let ahead = tile.cast::<u8>().wrapping_add(bytes);
        for line in lines {
            super::prefetch(ahead.wrapping_add(64 * line));
        }
    }
}

/// One pass: the 8 rows of `tiles` (nb tiles, one row group's run in a span) by T tokens
/// (`x[t]` points at token t's first block of the span), continuing the sums `acc` (zero at the
/// first span). Lane r of result t is reference::dot_*_q8(row r, token t) over the blocks so far.
#[inline(always)]
pub unsafe fn tile<D: IntDot, W: WeightTile, const T: usize>(
    tiles: *const W,
    x: &[*const BlockQ8Act; T],
    nb: usize,
    prefetch: usize,
    mut acc: [__m256; T],
) -> [__m256; T] {
    // SAFETY: the caller guarantees nb readable tiles and nb blocks per token; features are
    // enabled in the caller.
    unsafe {
        let offset = if D::SATURATES {
            W::SUM_OFFSET
        } else {
            W::UNSIGNED_OFFSET
        };
        for b in 0..nb {
            // `prefetch` bytes ahead ([`prefetch_bytes`]): a page for tiles in small pages, the
            // machine's stream distance for a few tokens over huge pages, the next group's run
            // for a batch's first pass over a matrix of several spans.
            prefetch_tile(tiles.add(b), prefetch);
            let t = &*tiles.add(b);
            let (d, m) = t.scales();
            // For one token a non-saturating dot reads 4-bit quants in place (nibble_dot: 8
            // masks where unpacking takes 12 operations); from two tokens on, unpacking once
            // for all of them costs less.
            let in_place = if D::SATURATES || T > 1 {
                None
            } else {
                t.nibbles()
            };
            let w = match (in_place, D::SATURATES) {
                (Some(_), _) => [_mm256_setzero_si256(); 8],
                (None, true) => t.unpack(),
                (None, false) => t.unpack_unsigned(),
            };
            let xb: [&BlockQ8Act; T] = std::array::from_fn(|j| &*x[j].add(b));
            let xq = xb.map(|xb| xb.qs.as_ptr().cast::<i32>());
            let isums = if in_place.is_some() {
                [_mm256_setzero_si256(); T]
            } else {
                let max_u = if D::SATURATES { W::MAX_U } else { 255 };
                D::dot_tokens::<W, T>(&w, &xq, max_u)
            };
            for (j, (xb, isum)) in xb.into_iter().zip(isums).enumerate() {
                let isum = if let Some(qs) = in_place {
                    // The chain starts at -offset * sum_x instead of subtracting it at the end:
                    // i32 addition is exact, so the integer is the same.
                    nibble_dot::<D>(qs, xq[j], times_sum(i16_pairs(-offset), xb))
                } else if offset != 0 {
                    _mm256_sub_epi32(isum, times_sum(i16_pairs(offset), xb))
                } else {
                    isum
                };
                acc[j] = block_step::<W>(acc[j], isum, (d, m), xb);
            }
        }
        acc
    }
}

/// Rule 4's f32 step of one block for 8 rows and one token `xb`: `acc + (isum * (d * dx) +
/// sum_x * (m * dx))`, the minimum term only where the type has one; `isum` is the block's
/// exact integer dot with its offset taken, `(d, m)` the tile's [`WeightTile::scales`]. Shared
/// by [`tile`] and the avx2 paired pass.
#[inline(always)]
pub unsafe fn block_step<W: WeightTile>(
    acc: __m256,
    isum: __m256i,
    (d, m): (__m256, __m256),
    xb: &BlockQ8Act,
) -> __m256 {
    // SAFETY: avx2 is enabled in the caller.
    unsafe {
        let dx = _mm256_set1_ps(xb.d);
        let mut term = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, dx));
        if W::HAS_MIN {
            // Σx as f32, exact (|Σx| <= 32 * 127).
            let sum_x = _mm256_cvtepi32_ps(times_sum(i16_pairs(1), xb));
            let min_term = _mm256_mul_ps(sum_x, _mm256_mul_ps(m, dx));
            term = _mm256_add_ps(term, min_term);
        }
        _mm256_add_ps(acc, term)
    }
}

/// The sums so far of token t0 + j's 8 lanes of one row group, the inverse of [`store_lanes`]:
/// zero at the first span, else (`later_span`) from its output at `at` (`direct`) or from
/// `lanes[j]`, which [`load_lanes`] filled.
#[inline(always)]
unsafe fn sums_so_far<const T: usize, const L: usize>(
    later_span: bool,
    direct: bool,
    out: &[&mut [f32]],
    (t0, at): (usize, usize),
    lanes: &[[f32; L]],
) -> [__m256; T] {
    // A loop, not `array::from_fn`: a closure would not inherit the caller's target features.
    // SAFETY: avx is enabled in the caller.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); T];
        if later_span {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = if direct {
                    _mm256_loadu_ps(out[t0 + j][at..at + ROWS].as_ptr())
                } else {
                    _mm256_loadu_ps(lanes[j][..ROWS].as_ptr())
                };
            }
        }
        acc
    }
}

/// Token t0 + j's 8 lanes of one row group: straight into its output at `at` when the whole
/// group is rows asked for (`direct`), else into `lanes[j]`, which [`copy_lanes`] copies out.
#[inline(always)]
unsafe fn store_lanes<const T: usize, const L: usize>(
    acc: [__m256; T],
    direct: bool,
    out: &mut [&mut [f32]],
    (t0, at): (usize, usize),
    lanes: &mut [[f32; L]],
) {
    for (j, a) in acc.into_iter().enumerate() {
        // Bounds-checked slices: check_matmul_q checked every output's length, and a direct
        // group lies wholly inside the rows asked for.
        let dst = if direct {
            &mut out[t0 + j][at..at + ROWS]
        } else {
            &mut lanes[j][..ROWS]
        };
        // SAFETY: dst holds ROWS floats; avx is enabled in the caller.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), a) };
    }
}

/// The lanes lane_lo..lane_hi of the first `tokens` rows of `lanes` into the outputs at `at`
/// (the part of a row group that is rows asked for).
fn copy_lanes<const L: usize>(
    lanes: &[[f32; L]],
    tokens: usize,
    out: &mut [&mut [f32]],
    (t0, at): (usize, usize),
    (lane_lo, lane_hi): (usize, usize),
) {
    for (j, lane) in lanes.iter().take(tokens).enumerate() {
        out[t0 + j][at..at + lane_hi - lane_lo].copy_from_slice(&lane[lane_lo..lane_hi]);
    }
}

/// The inverse of [`copy_lanes`]: the sums so far of the kept lanes back into `lanes`.
fn load_lanes<const L: usize>(
    lanes: &mut [[f32; L]],
    tokens: usize,
    out: &[&mut [f32]],
    (t0, at): (usize, usize),
    (lane_lo, lane_hi): (usize, usize),
) {
    for (j, lane) in lanes.iter_mut().take(tokens).enumerate() {
        lane[lane_lo..lane_hi].copy_from_slice(&out[t0 + j][at..at + lane_hi - lane_lo]);
    }
}

/// One pass over a row group's run in a span by T tokens, for [`matmul_tiles`]: rule 4 per
/// block ([`tile`], two groups at once with [`IntDot::tile_pair`]) or per super-block
/// ([`tile_k`]).
trait Pass<W> {
    /// Activation blocks per tile.
    const BLOCKS: usize;
    /// The most tokens one pass takes (bounded by the registers the backend has).
    const TOKENS: usize;
    /// Whether a batch takes two row groups per pass ([`Pass::pair`]).
    const PAIRS: bool;
    /// The most tokens a pair pass takes (at least TOKENS).
    const PAIR_TOKENS: usize = Self::TOKENS;

    /// The 8 rows of `len` tiles from `tiles` by T tokens, continuing the sums `acc`.
    ///
    /// # Safety
    /// As [`tile`].
    unsafe fn run<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        prefetch: usize,
        acc: [__m256; T],
    ) -> [__m256; T];

    /// Two consecutive groups' runs, continuing the sums in `lanes` ([`IntDot::tile_pair`]).
    ///
    /// # Safety
    /// As [`IntDot::tile_pair`]; only called when PAIRS is true.
    #[inline(always)]
    unsafe fn pair<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        lanes: &mut [[f32; 2 * ROWS]; 8],
        prefetch: usize,
    ) {
        let _ = (tiles, x, len, lanes, prefetch);
        unreachable!("pair without PAIRS");
    }
}

/// Rule 4's per-block pass ([`tile`]).
struct BlockPass<D>(std::marker::PhantomData<D>);

impl<D: IntDot, W: WeightTile> Pass<W> for BlockPass<D> {
    const BLOCKS: usize = 1;
    const TOKENS: usize = D::TOKENS;
    const PAIRS: bool = D::PAIRS;

    #[inline(always)]
    unsafe fn run<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        prefetch: usize,
        acc: [__m256; T],
    ) -> [__m256; T] {
        // SAFETY: forwarded to the caller.
        unsafe { tile::<D, W, T>(tiles, x, len, prefetch, acc) }
    }

    #[inline(always)]
    unsafe fn pair<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        lanes: &mut [[f32; 2 * ROWS]; 8],
        prefetch: usize,
    ) {
        // SAFETY: forwarded to the caller.
        unsafe { D::tile_pair::<W, T>(tiles, x, len, lanes, prefetch) }
    }
}

/// Rule 4's per-super-block pass ([`tile_k`]): 4 tokens at most (the 8 sub-blocks' integer
/// dots of more would not fit the 16 registers); two groups at once with
/// [`IntDot::tile_k_pair`] for unsigned quants, 8 tokens per pass (one sub-block's columns at a
/// time, with the 32 registers of the backends that have pairs: 64 tokens by a 2048 x 2048
/// Q4_K matmul on Zen 4, 1 thread, 2.55 ms with 4-token single groups, 2.42 with 4-token pairs,
/// 2.34-2.37 with 8; Q6_K 3.14-3.18 / 3.28 / 2.76).
struct SuperBlockPass<D>(std::marker::PhantomData<D>);

impl<D: IntDot, W: KWeightTile> Pass<W> for SuperBlockPass<D> {
    const BLOCKS: usize = 8;
    const TOKENS: usize = 4;
    const PAIRS: bool = D::K_PAIRS && !W::SIGNED;
    const PAIR_TOKENS: usize = 8;

    #[inline(always)]
    unsafe fn run<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        prefetch: usize,
        acc: [__m256; T],
    ) -> [__m256; T] {
        // SAFETY: forwarded to the caller.
        unsafe { tile_k::<D, W, T>(tiles, x, len, prefetch, acc) }
    }

    #[inline(always)]
    unsafe fn pair<const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        len: usize,
        lanes: &mut [[f32; 2 * ROWS]; 8],
        prefetch: usize,
    ) {
        // SAFETY: forwarded to the caller.
        unsafe { D::tile_k_pair::<W, T>(tiles, x, len, lanes, prefetch) }
    }
}

/// `out[t][i] = dot(w row first_row + i, x token t)` for quantized weights (rule 4): `tiles`
/// are a tiled matrix of `rows` rows of `nt` tiles, each over `P::BLOCKS` activation blocks.
/// Otherwise identical to reference::matmul. The spans ([`Spans`]) walked as
/// [`Spans::walks`] says: for a few tokens span after span, in the tiles' memory order, each
/// pass continuing the sums the outputs hold from the spans before (f32 values stored and
/// loaded exactly, so every lane adds its blocks in order, as the reference does); for a batch
/// every span in each group's pass. Row groups only partly inside the range compute all 8
/// lanes and keep the ones asked for. Tiles are prefetched as [`prefetch_bytes`] says.
#[inline(always)]
unsafe fn matmul_tiles<P: Pass<W>, W: Tile>(
    tiles: &Buf<W>,
    rows: usize,
    nt: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    let (n_tokens, n_rows) =
        check_matmul_q(tiles.len(), rows, nt, first_row, x.len() / P::BLOCKS, out);
    if n_rows == 0 {
        return;
    }
    let nb = nt * P::BLOCKS;
    let end_row = first_row + n_rows;
    let g_end = end_row.div_ceil(ROWS);
    let small_from = tiles.small_pages_from();
    let spans = Spans::new::<W>(rows, nt);
    let batch = n_tokens > Spans::FEW_TOKENS;
    // A batch's later passes re-read a group's tiles from cache: only a few tokens stream.
    let stream = if batch {
        0
    } else {
        crate::kernels::stream_prefetch()
    };
    // SAFETY: check_matmul_q bounds every tile and n_tokens * nt * P::BLOCKS activation blocks;
    // features are enabled in the caller.
    unsafe {
        for walk in spans.walks(n_tokens) {
            let later_span = walk.start > 0;
            let mut g = first_row / ROWS;
            while g < g_end {
                // 16 rows (two groups) per pass when the backend has pairs (512-bit registers;
                // avx2's per-block 4-bit types) and there is a batch to share the joined tiles
                // or the broadcasts: for a few tokens (decode, a
                // speculative verify) the joining costs more than it saves (SmolLM2 decode on
                // avx512: 108 -> 184 tok/s at 1 thread after 50 tokens, 132 -> 168 at 2 threads
                // after 500, with single groups; a forward of 4 tokens at 1 thread on Zen 4:
                // 1.8x the cost of one token with pairs, 1.16x with single groups; of 8: 2.0x
                // with pairs, 2.3x without). A batch takes every span in one walk, so a pair
                // always starts from zero sums.
                let groups = if P::PAIRS && batch && g + 1 < g_end {
                    2
                } else {
                    1
                };
                let (lane_lo, lane_hi, at) = group_lanes(g, groups, first_row, end_row);
                // A whole single group's lanes go straight to the outputs; partial groups and
                // pairs pass through `lanes`.
                let direct = groups == 1 && lane_hi - lane_lo == ROWS;
                let mut t0 = 0;
                while t0 < n_tokens {
                    let most = if groups == 2 {
                        P::PAIR_TOKENS
                    } else {
                        P::TOKENS
                    };
                    let tt = (n_tokens - t0).min(most);
                    let mut lanes = [[0.0f32; 2 * ROWS]; 8];
                    if later_span && !direct {
                        load_lanes(&mut lanes, tt, out, (t0, at), (lane_lo, lane_hi));
                    }
                    macro_rules! run {
                        ($t:literal) => {{
                            let mut acc = sums_so_far::<$t, { 2 * ROWS }>(
                                later_span,
                                direct,
                                out,
                                (t0, at),
                                &lanes,
                            );
                            for span in walk.clone().map(|i| spans.span(i)) {
                                let (from, len) = span;
                                let run = tiles.as_ptr().add(spans.run(g, span));
                                let prefetch = prefetch_bytes::<W>(
                                    &spans,
                                    (batch && t0 == 0, stream),
                                    (g, groups),
                                    span,
                                    (small_from, tiles.len()),
                                );
                                let xs: [*const BlockQ8Act; $t] = std::array::from_fn(|j| {
                                    x.as_ptr().add((t0 + j) * nb + from * P::BLOCKS)
                                });
                                if groups == 2 {
                                    P::pair::<$t>(run, &xs, len, &mut lanes, prefetch);
                                } else {
                                    acc = P::run::<$t>(run, &xs, len, prefetch, acc);
                                }
                            }
                            if groups == 1 {
                                store_lanes(acc, direct, out, (t0, at), &mut lanes);
                            }
                        }};
                    }
                    // Arms above P::TOKENS are never taken (`tt` is at most P::TOKENS); their
                    // constant guards keep them from being compiled.
                    match tt {
                        8 if P::TOKENS.max(P::PAIR_TOKENS) >= 8 => run!(8),
                        7 if P::TOKENS.max(P::PAIR_TOKENS) >= 7 => run!(7),
                        6 if P::TOKENS.max(P::PAIR_TOKENS) >= 6 => run!(6),
                        5 if P::TOKENS.max(P::PAIR_TOKENS) >= 5 => run!(5),
                        4 => run!(4),
                        3 => run!(3),
                        2 => run!(2),
                        _ => run!(1),
                    }
                    if !direct {
                        copy_lanes(&lanes, tt, out, (t0, at), (lane_lo, lane_hi));
                    }
                    t0 += tt;
                }
                g += groups;
            }
        }
    }
}

/// Rule 4 for the per-block types: `tiles` are `rows` rows of `nb` blocks ([`matmul_tiles`]).
///
/// # Safety
/// The backend's target features must be enabled in the caller.
#[inline(always)]
pub unsafe fn matmul_q<D: IntDot, W: WeightTile>(
    tiles: &Buf<W>,
    rows: usize,
    nb: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    // SAFETY: forwarded to the caller.
    unsafe { matmul_tiles::<BlockPass<D>, W>(tiles, rows, nb, first_row, x, out) }
}

/// Rule 4 for the K-quants: `tiles` are `rows` rows of `nbk` super-blocks (8 blocks each;
/// [`matmul_tiles`]).
///
/// # Safety
/// The backend's target features must be enabled in the caller.
#[inline(always)]
pub unsafe fn matmul_k<D: IntDot, W: KWeightTile>(
    tiles: &Buf<W>,
    rows: usize,
    nbk: usize,
    first_row: usize,
    x: &[BlockQ8Act],
    out: &mut [&mut [f32]],
) {
    // SAFETY: forwarded to the caller.
    unsafe { matmul_tiles::<SuperBlockPass<D>, W>(tiles, rows, nbk, first_row, x, out) }
}

/// `out[t][i] = dot(w row first_row + i, x token t)` for float weights (rule 2). Otherwise
/// identical to reference::matmul.
#[inline(always)]
pub unsafe fn matmul_f<L: Lanes>(
    w: &[L::Elem],
    cols: usize,
    first_row: usize,
    x: &[f32],
    out: &mut [&mut [f32]],
) {
    let n_tokens = out.len();
    assert!(
        out.iter().all(|o| (first_row + o.len()) * cols <= w.len()) && n_tokens * cols <= x.len(),
        "matmul: rows or tokens out of range"
    );
    // SAFETY: the assert above bounds every read; features are enabled in the caller.
    unsafe {
        for (t, out_t) in out.iter_mut().enumerate() {
            for (i, o) in out_t.iter_mut().enumerate() {
                *o = dot_rule2::<L>(
                    w.as_ptr().add((first_row + i) * cols),
                    x.as_ptr().add(t * cols),
                    cols,
                );
            }
        }
    }
}

/// The quantized dots of one row (the table's dot_*_q8 entries): the row is tiled (lanes 1..8
/// padding) and run through the matmul tile. Not on the forward path.
#[inline(always)]
pub unsafe fn dot_q<D: IntDot, W: WeightTile>(w: &[W::Block], x: &[BlockQ8Act]) -> f32 {
    let tiles = tile_rows::<W, _>(1, w.len(), |_| w);
    let mut o = [0.0f32];
    // SAFETY: forwarded to the caller.
    unsafe { matmul_q::<D, W>(&tiles, 1, w.len(), 0, x, &mut [&mut o[..]]) };
    o[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetches_64_byte_tiles_vec_always_arena_never_own_mapping_4_kib_before_its_tail() {
        type W = [u8; 64];
        // A Vec: every tile in small pages.
        assert!(prefetches::<W>(1, 0, 100));
        // An arena's range: no small pages, not even past its end.
        assert!(!prefetches::<W>(99, 100, 100));
        assert!(!prefetches::<W>(100, 100, 100));
        // A mapping of its own whose last partial huge page starts at tile 65536: from the
        // pass whose next 4 KiB (64 tiles) reach it.
        assert!(!prefetches::<W>(65472, 65536, 100_000));
        assert!(prefetches::<W>(65473, 65536, 100_000));
    }

    macro_rules! exp8_with {
        ($name:ident, $features:literal) => {
            #[target_feature(enable = $features)]
            unsafe fn $name(x: &[f32; 8]) -> [f32; 8] {
                let mut out = [0.0f32; 8];
                // SAFETY: 8 elements each side; the test checked the features.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), exp8(_mm256_loadu_ps(x.as_ptr()))) };
                out
            }
        };
    }
    exp8_with!(exp8_avx2, "avx2,f16c");
    exp8_with!(
        exp8_avx512,
        "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
    );

    fn check(name: &str, exp8: unsafe fn(&[f32; 8]) -> [f32; 8]) {
        let xs = crate::kernels::testdata::exp_inputs();
        for chunk in xs.chunks(8) {
            let mut x = [0.0f32; 8];
            x[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: the caller checked the features.
            let got = unsafe { exp8(&x) };
            for (g, &xi) in got.iter().zip(&x) {
                let want = math::exp(xi);
                assert!(
                    g.to_bits() == want.to_bits(),
                    "exp8 [{name}]({xi:e} = {:#010x}) = {g:e}, math::exp gives {want:e}",
                    xi.to_bits()
                );
            }
        }
    }

    #[test]
    fn exp8_equals_math_exp_bitwise_sweep_and_specials_avx2() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            println!("skipped: no avx2 + f16c");
            return;
        }
        check("avx2", exp8_avx2);
    }

    #[test]
    fn exp8_equals_math_exp_bitwise_sweep_and_specials_avx512() {
        if !super::super::avx512::supported() {
            println!("skipped: no avx512 f/bw/vl/vnni");
            return;
        }
        check("avx512", exp8_avx512);
    }
}

// ---------------------------------------------------------------------------------------------
// K-quants (rule 4's super-block sequence): per 32-element sub-block the 8 rows' unsigned
// quants in 8 column registers, integer dots per 16-element half, then per lane the
// reference's `iscaled = s0 * isum_0 + s1 * isum_1`, `imin = m0 * sum_x0 + m1 * sum_x1` and
// `acc + (iscaled * (d * dx) + imin * (-dmin * dx))` (no minimum term for Q6_K).

/// A K-quant tile as the x86 twins read it.
pub trait KWeightTile: Tile {
    const HAS_MIN: bool;
    /// The quants are stored as `q + OFFSET` (unsigned); the dots subtract `OFFSET * sum_x`.
    const OFFSET: i32;
    /// The largest stored (unsigned) quant: bounds `maddubs`' i16 pair sums.
    const MAX_Q: i32;
    /// Both 16-element halves of a sub-block share one scale and one minimum (Q4_K, Q5_K, no
    /// offset): then `s0 * isum_0 + s1 * isum_1 = s * isum` and `m0 * sum_x0 + m1 * sum_x1 =
    /// m * sum_x`, the same integers with no half sums.
    const SHARED_HALVES: bool = false;
    /// The quants are signed (IQ4_XS's levels): the dots take |q| against x with q's sign
    /// ([`sign_trick`], the same products), and MAX_Q bounds |q|.
    const SIGNED: bool = false;
    /// Sub-block j's 8 columns: register k holds, in lane r, row r's unsigned quants of elements
    /// 4k .. 4k + 4 of the sub-block.
    unsafe fn unpack(&self, j: usize) -> [__m256i; 8];
    /// Q4_K: for odd j, sub-block j's quants as [`KWeightTile::unpack`] gives them but times 16
    /// (the high nibbles masked in place, not shifted down), for a one-token dot that does not
    /// saturate; others None. Read only for SHARED_HALVES types (one scale per sub-block).
    #[inline(always)]
    unsafe fn unpack_times_16(&self, j: usize) -> Option<[__m256i; 8]> {
        let _ = j;
        None
    }
    /// Integer scales of sub-block j's two halves, one i32 lane per row.
    unsafe fn scales(&self, j: usize) -> (__m256i, __m256i);
    /// Integer minimums of sub-block j's halves (read only when HAS_MIN).
    #[inline(always)]
    unsafe fn mins(&self, j: usize) -> (__m256i, __m256i) {
        let _ = j;
        // SAFETY: avx2 is enabled in the caller.
        unsafe { (_mm256_setzero_si256(), _mm256_setzero_si256()) }
    }
    /// (d, -dmin) of the 8 rows as f32 (-dmin zero without minimums).
    unsafe fn factors(&self) -> (__m256, __m256);
}

/// 8 bytes as 8 i32 lanes, zero-extended.
#[inline(always)]
unsafe fn u8x8_to_i32(b: &[u8; 8]) -> __m256i {
    // SAFETY: 8 readable bytes; avx2 is enabled in the caller.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.as_ptr().cast())) }
}

/// 8 bytes as 8 i32 lanes, sign-extended.
#[inline(always)]
unsafe fn i8x8_to_i32(b: &[i8; 8]) -> __m256i {
    // SAFETY: 8 readable bytes; avx2 is enabled in the caller.
    unsafe { _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.as_ptr().cast())) }
}

/// One sub-block scale (or minimum) for both halves: Q4_K's and Q5_K's 32-element sub-blocks.
#[inline(always)]
unsafe fn both_halves(b: &[u8; 8]) -> (__m256i, __m256i) {
    // SAFETY: forwarded to the caller.
    let v = unsafe { u8x8_to_i32(b) };
    (v, v)
}

/// (d, -dmin) of 8 rows; negation flips the sign bit, exact as the reference's `-dmin`.
#[inline(always)]
unsafe fn d_and_neg_dmin(d: &[u16; 8], dmin: &[u16; 8]) -> (__m256, __m256) {
    // SAFETY: 16 readable bytes each; avx2 and f16c are enabled in the caller.
    unsafe {
        let neg = _mm256_xor_ps(load_f16x8(dmin), _mm256_set1_ps(-0.0));
        (load_f16x8(d), neg)
    }
}

/// Sub-block j's (odd j) 4-bit quants in Q4_K's layout times 16: chunk j / 2's high nibbles
/// masked in place.
#[inline(always)]
unsafe fn k4_high_nibbles_in_place(qs: &[u8; 8 * 128], j: usize) -> [__m256i; 8] {
    // SAFETY: chunk j / 2 is 256 readable bytes; avx2 is enabled in the caller.
    unsafe {
        let high = _mm256_set1_epi8(0xf0u8 as i8);
        let chunk = qs.as_ptr().add(256 * (j / 2));
        let mut out = [_mm256_setzero_si256(); 8];
        for (k, o) in out.iter_mut().enumerate() {
            *o = _mm256_and_si256(_mm256_loadu_si256(chunk.add(32 * k).cast()), high);
        }
        out
    }
}

/// Sub-block j's 4-bit quants in Q4_K's layout (chunk j / 2, low nibbles for even j).
#[inline(always)]
unsafe fn k4_nibble_columns(qs: &[u8; 8 * 128], j: usize) -> [__m256i; 8] {
    // SAFETY: chunk j / 2 is 256 readable bytes; avx2 is enabled in the caller.
    unsafe {
        let low = _mm256_set1_epi8(15);
        let chunk = qs.as_ptr().add(256 * (j / 2));
        let mut out = [_mm256_setzero_si256(); 8];
        for (k, o) in out.iter_mut().enumerate() {
            let v = _mm256_loadu_si256(chunk.add(32 * k).cast());
            *o = if j % 2 == 0 {
                _mm256_and_si256(v, low)
            } else {
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low)
            };
        }
        out
    }
}

impl KWeightTile for TileQ4K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 15;
    const SHARED_HALVES: bool = true;
    #[inline(always)]
    unsafe fn unpack(&self, j: usize) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { k4_nibble_columns(&self.qs, j) }
    }
    #[inline(always)]
    unsafe fn unpack_times_16(&self, j: usize) -> Option<[__m256i; 8]> {
        // SAFETY: forwarded to the caller.
        (j % 2 == 1).then(|| unsafe { k4_high_nibbles_in_place(&self.qs, j) })
    }
    #[inline(always)]
    unsafe fn scales(&self, j: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe { both_halves(&self.sc[j]) }
    }
    #[inline(always)]
    unsafe fn mins(&self, j: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe { both_halves(&self.m[j]) }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { d_and_neg_dmin(&self.d, &self.dmin) }
    }
}

impl KWeightTile for TileQ5K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 31;
    const SHARED_HALVES: bool = true;
    /// [`TileQ4K`]'s nibbles with bit j of the `qh` column above them.
    #[inline(always)]
    unsafe fn unpack(&self, j: usize) -> [__m256i; 8] {
        // SAFETY: the chunks are readable (256 bytes of qs per chunk, 256 of qh); avx2 is
        // enabled in the caller.
        unsafe {
            let one = _mm256_set1_epi8(1);
            let shift = _mm_cvtsi32_si128(j as i32);
            let mut out = k4_nibble_columns(&self.qs, j);
            for (k, o) in out.iter_mut().enumerate() {
                let h = _mm256_loadu_si256(self.qh.as_ptr().add(32 * k).cast());
                // Bytes <= 1 shifted left by 4 stay inside their byte.
                let h = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(h, shift), one));
                *o = _mm256_or_si256(*o, h);
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn scales(&self, j: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe { both_halves(&self.sc[j]) }
    }
    #[inline(always)]
    unsafe fn mins(&self, j: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe { both_halves(&self.m[j]) }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { d_and_neg_dmin(&self.d, &self.dmin) }
    }
}

/// `qs` chunk `n`'s 8 columns shifted right by `shift` and masked to 2 bits (Q2_K and Q3_K's low
/// bits of sub-block 4n + shift / 2).
#[inline(always)]
unsafe fn two_bit_columns(qs: *const u8, n: usize, shift: i32) -> [__m256i; 8] {
    // SAFETY: the caller guarantees the chunk's 256 readable bytes; avx2 is enabled there.
    unsafe {
        let (three, count) = (_mm256_set1_epi8(3), _mm_cvtsi32_si128(shift));
        let chunk = qs.add(256 * n);
        let mut out = [_mm256_setzero_si256(); 8];
        for (k, o) in out.iter_mut().enumerate() {
            let v = _mm256_loadu_si256(chunk.add(32 * k).cast());
            *o = _mm256_and_si256(_mm256_srl_epi16(v, count), three);
        }
        out
    }
}

impl KWeightTile for TileQ2K {
    const HAS_MIN: bool = true;
    const OFFSET: i32 = 0;
    const MAX_Q: i32 = 3;
    #[inline(always)]
    unsafe fn unpack(&self, b: usize) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller; chunk b / 4 of qs is in the tile.
        unsafe { two_bit_columns(self.qs.as_ptr(), b / 4, 2 * (b % 4) as i32) }
    }
    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (
                u8x8_to_i32(&self.sc[2 * b]),
                u8x8_to_i32(&self.sc[2 * b + 1]),
            )
        }
    }
    #[inline(always)]
    unsafe fn mins(&self, b: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe { (u8x8_to_i32(&self.m[2 * b]), u8x8_to_i32(&self.m[2 * b + 1])) }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { d_and_neg_dmin(&self.d, &self.dmin) }
    }
}

impl KWeightTile for TileQ3K {
    const HAS_MIN: bool = false;
    /// Stored as q + 4 = low bits + 4 * (hmask bit): 0..=7.
    const OFFSET: i32 = 4;
    const MAX_Q: i32 = 7;
    #[inline(always)]
    unsafe fn unpack(&self, b: usize) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller; the chunks are in the tile.
        unsafe {
            let mut out = two_bit_columns(self.qs.as_ptr(), b / 4, 2 * (b % 4) as i32);
            let (one, count) = (_mm256_set1_epi8(1), _mm_cvtsi32_si128(b as i32));
            for (k, o) in out.iter_mut().enumerate() {
                let h = _mm256_loadu_si256(self.hmask.as_ptr().add(32 * k).cast());
                // Bit b of the hmask byte, times 4 (bytes <= 1 shifted by 2 stay in their byte).
                let h = _mm256_slli_epi16::<2>(_mm256_and_si256(_mm256_srl_epi16(h, count), one));
                *o = _mm256_or_si256(*o, h);
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (
                i8x8_to_i32(&self.sc[2 * b]),
                i8x8_to_i32(&self.sc[2 * b + 1]),
            )
        }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

impl KWeightTile for TileQ6K {
    const HAS_MIN: bool = false;
    const OFFSET: i32 = 32;
    const MAX_Q: i32 = 63;
    /// Sub-block b = 4n + k': low nibbles (k' < 2) or high ones of `ql` chunk 2n + k' % 2, and
    /// bits 2k'.. of `qh` chunk n above them.
    #[inline(always)]
    unsafe fn unpack(&self, b: usize) -> [__m256i; 8] {
        // SAFETY: the chunks are 256 readable bytes each; avx2 is enabled in the caller.
        unsafe {
            let (n, kk) = (b / 4, b % 4);
            let ql = self.q.as_ptr().add(TileQ6K::QL_AT[2 * n + kk % 2]);
            let qh = self.q.as_ptr().add(TileQ6K::QH_AT[n]);
            let (low, three) = (_mm256_set1_epi8(15), _mm256_set1_epi8(3));
            let shift = _mm_cvtsi32_si128(2 * kk as i32);
            let mut out = [_mm256_setzero_si256(); 8];
            for (k, o) in out.iter_mut().enumerate() {
                let l = _mm256_loadu_si256(ql.add(32 * k).cast());
                let l = if kk < 2 {
                    _mm256_and_si256(l, low)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l), low)
                };
                let h = _mm256_loadu_si256(qh.add(32 * k).cast());
                // Bytes <= 3 shifted left by 4 stay inside their byte.
                let h = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(h, shift), three));
                *o = _mm256_or_si256(l, h);
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (
                i8x8_to_i32(&self.sc[2 * b]),
                i8x8_to_i32(&self.sc[2 * b + 1]),
            )
        }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

impl KWeightTile for TileIQ4XS {
    const HAS_MIN: bool = false;
    const OFFSET: i32 = 0;
    /// |level| <= 127.
    const MAX_Q: i32 = 127;
    const SHARED_HALVES: bool = true;
    const SIGNED: bool = true;
    /// Sub-block j's indices unpack as an IQ4_NL tile's, then the levels are looked up.
    #[inline(always)]
    unsafe fn unpack(&self, j: usize) -> [__m256i; 8] {
        // SAFETY: forwarded to the caller.
        unsafe { lookup_levels(unpack_nibble_columns(&self.qs[j]), level_table(0)) }
    }
    #[inline(always)]
    unsafe fn scales(&self, j: usize) -> (__m256i, __m256i) {
        // SAFETY: forwarded to the caller.
        unsafe {
            let v = i8x8_to_i32(&self.sc[j]);
            (v, v)
        }
    }
    #[inline(always)]
    unsafe fn factors(&self) -> (__m256, __m256) {
        // SAFETY: forwarded to the caller.
        unsafe { (load_f16x8(&self.d), _mm256_setzero_ps()) }
    }
}

/// Sub-block j of tile `t` against T tokens (`x[i]` is token i's activation block j of this
/// super-block): the exact integers of rule 4, (iscaled, imin) per token, one i32 lane per row.
#[inline(always)]
unsafe fn sub_block_ints<D: IntDot, W: KWeightTile, const T: usize>(
    t: &W,
    j: usize,
    x: &[*const BlockQ8Act; T],
) -> [(__m256i, __m256i); T] {
    // SAFETY: the caller guarantees a readable block behind each pointer; features are enabled
    // in the caller.
    unsafe {
        // One token on a dot that does not saturate: Q4_K's high nibbles are taken in place as
        // 16 q and the exact scaled sum (|16 q x s| summed over 32 elements stays below 2^26)
        // divided by 16 with one shift, where unpacking them takes a shift per column.
        let times_16 = if D::SATURATES || T > 1 || !W::SHARED_HALVES {
            None
        } else {
            t.unpack_times_16(j)
        };
        let signed = match times_16 {
            Some(w) => w,
            None => t.unpack(j),
        };
        let mut w = signed;
        if W::SIGNED {
            for c in w.iter_mut() {
                *c = _mm256_abs_epi8(*c);
            }
        }
        let (s0, s1) = t.scales(j);
        let (m0, m1) = if W::HAS_MIN { t.mins(j) } else { (s0, s1) };
        // A shared minimum (0..=63 in the low i16 of each lane) in both i16 halves, for
        // [`times_sum`].
        let m_pairs = _mm256_or_si256(m0, _mm256_slli_epi32::<16>(m0));
        let mut ints = [(_mm256_setzero_si256(), _mm256_setzero_si256()); T];
        for (int, &xt) in ints.iter_mut().zip(x) {
            let xb = &*xt;
            let xq = xb.qs.as_ptr().cast::<i32>();
            let mut xs: [__m256i; 8] =
                std::array::from_fn(|k| _mm256_set1_epi32(xq.add(k).read_unaligned()));
            if W::SIGNED {
                for (x, q) in xs.iter_mut().zip(&signed) {
                    *x = _mm256_sign_epi8(*x, *q);
                }
            }
            *int = if W::SHARED_HALVES {
                // s0 == s1 and m0 == m1: one scale times the whole sub-block's dot, and m * sum_x
                // from the half sums ([`times_sum`]).
                let mut iscaled = D::dot_cols_scaled(&w, &xs, W::MAX_Q, s0);
                if times_16.is_some() {
                    iscaled = _mm256_srai_epi32::<4>(iscaled);
                }
                (iscaled, times_sum(m_pairs, xb))
            } else {
                // Per lane the i16 pairs (s0, s1) and (m0, m1): one `madd` against a token's
                // (sum_x0, sum_x1) gives s0 * sum_x0 + s1 * sum_x1 (|sum_x| <= 16 * 127).
                let halves = |lo: __m256i, hi: __m256i| {
                    let lo = _mm256_and_si256(lo, _mm256_set1_epi32(0xffff));
                    _mm256_or_si256(lo, _mm256_slli_epi32::<16>(hi))
                };
                let (w0, w1): (&[__m256i; 4], &[__m256i; 4]) = (
                    w[..4].try_into().unwrap_unchecked(),
                    w[4..].try_into().unwrap_unchecked(),
                );
                let (x0, x1) = (
                    xs[..4].try_into().unwrap_unchecked(),
                    xs[4..].try_into().unwrap_unchecked(),
                );
                let sx01 = _mm256_set1_epi32(xb.sums_pair());
                let mut iscaled = _mm256_add_epi32(
                    D::dot_cols_scaled(w0, x0, W::MAX_Q, s0),
                    D::dot_cols_scaled(w1, x1, W::MAX_Q, s1),
                );
                if W::OFFSET != 0 {
                    // s0 * (isum_0 - OFFSET sum_x0) + s1 * (..): the same integer.
                    let offsets = _mm256_madd_epi16(halves(s0, s1), sx01);
                    let offsets = _mm256_mullo_epi32(offsets, _mm256_set1_epi32(W::OFFSET));
                    iscaled = _mm256_sub_epi32(iscaled, offsets);
                }
                let imin = if W::HAS_MIN {
                    _mm256_madd_epi16(halves(m0, m1), sx01)
                } else {
                    _mm256_setzero_si256()
                };
                (iscaled, imin)
            };
        }
        ints
    }
}

/// One pass: the 8 rows of `tiles` (a row group's nbk super-blocks in a span) by T tokens (`x[t]`
/// is token t's first activation block of the span), continuing the sums `acc` (zero at the
/// first span). Lane r of result t is reference::dot_k_q8(row r, token t) over the blocks so far.
#[inline(always)]
unsafe fn tile_k<D: IntDot, W: KWeightTile, const T: usize>(
    tiles: *const W,
    x: &[*const BlockQ8Act; T],
    nbk: usize,
    prefetch: usize,
    mut acc: [__m256; T],
) -> [__m256; T] {
    // SAFETY: the caller guarantees nbk readable tiles and 8 * nbk blocks per token; features
    // are enabled in the caller.
    unsafe {
        for b in 0..nbk {
            // `prefetch` bytes ahead ([`prefetch_bytes`]): a page for one pass per row group
            // (decode) over tiles in small pages, the machine's stream distance over huge pages
            // (0 where its own prefetchers suffice), the next group's run on a batch's first pass
            // over a matrix of several spans. A batch's later passes re-read the group's tiles
            // from cache, where fetching on every pass only costs. Half the lines before each
            // four sub-blocks: twelve 5632 x 2048 matrices from DRAM, one token, 1 thread on Zen 3
            // (EPYC family 25 model 1), prefetch 8192 B, GB/s all at once / in halves (three
            // alternated rounds): Q6_K 16.4-18.8 / 20.2-21.0, Q4_K 19.7-21.7 / 22.3-22.8.
            prefetch_tile_half(tiles.add(b), prefetch, 0);
            let t = &*tiles.add(b);
            let (d, neg_dmin) = t.factors();
            // Four sub-blocks at a time: their integer dots (independent chains) first, then
            // their f32 steps in order (rule 4), so a step's convert, multiplies and adds do not
            // wait on the next sub-block's dot chain, which the out-of-order window alone did not
            // overlap. Literal indices resolve each sub-block's unpacking at compile time (Q4_K's
            // in-place high nibbles on odd j, Q6_K's nibble half and `qh` shift). A 2048 x 2048
            // matmul in L3, 1 thread on Zen 4, GB/s before / after (medians of three alternated
            // rounds): avx512 one token Q4_K 39.9 / 43.1, Q5_K 26.9 / 35.3, Q6_K 27.2 / 36.8; four
            // tokens 54.0 / 60.9, 53.2 / 62.9, 56.0 / 65.7; avx2 one token 31.6 / 38.9, 22.2 /
            // 30.2, 21.0 / 27.3.
            macro_rules! four_sub_blocks {
                ($($j:literal),+) => {{
                    let ints = [$({
                        let xs: [*const BlockQ8Act; T] = std::array::from_fn(|i| x[i].add(8 * b + $j));
                        sub_block_ints::<D, W, T>(t, $j, &xs)
                    }),+];
                    for (j, int) in [$($j),+].into_iter().zip(&ints) {
                        for ((a, xt), &(iscaled, imin)) in acc.iter_mut().zip(x).zip(int) {
                            let dx = _mm256_set1_ps((*xt.add(8 * b + j)).d);
                            let mut term =
                                _mm256_mul_ps(_mm256_cvtepi32_ps(iscaled), _mm256_mul_ps(d, dx));
                            if W::HAS_MIN {
                                let dmin_dx = _mm256_mul_ps(neg_dmin, dx);
                                term = _mm256_add_ps(
                                    term,
                                    _mm256_mul_ps(_mm256_cvtepi32_ps(imin), dmin_dx),
                                );
                            }
                            *a = _mm256_add_ps(*a, term);
                        }
                    }
                }};
            }
            four_sub_blocks!(0, 1, 2, 3);
            prefetch_tile_half(tiles.add(b), prefetch, 1);
            four_sub_blocks!(4, 5, 6, 7);
        }
        acc
    }
}
