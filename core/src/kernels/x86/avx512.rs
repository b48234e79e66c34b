//! The AVX-512 backend (F, BW, VL, VNNI): optimized twins of reference.rs, bit-identical.
//! Quantized matmuls run the shared row-interleaved tile with the EVEX `vpdpbusd` on 256-bit
//! registers (one lane per row, so every lane's f32 sequence is the reference's) and use the 32
//! vector registers to take 8 tokens per unpacked tile.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use crate::kernels::math::{self, EXP_OVERFLOW, EXP_POLY, EXP_UNDERFLOW, LN2_HI, LN2_LO, LOG2_E};
use crate::kernels::reference::ATTENTION_BLOCK;

/// `vpdpbusd` (EVEX) on 256-bit registers; the 32 registers of AVX-512 hold 8 tokens per tile.
pub struct DpbusdEvex;

impl common::IntDot for DpbusdEvex {
    const SATURATES: bool = false;
    const TOKENS: usize = 8;
    const PAIRS: bool = true;

    /// [`attention_wide`] for an even N, common::attention for N = 1.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn attention<L: common::Lanes, const N: usize>(
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
        unsafe {
            if N.is_multiple_of(2) {
                attention_wide::<L, N>(q, keys, values, n_pos, stride, offset, scale, out)
            } else {
                common::attention::<L, N>(q, keys, values, n_pos, stride, offset, scale, out)
            }
        }
    }

    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx512vnni and avx512vl are enabled in the caller.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }

    /// Otherwise identical to common::tile: the two groups' tiles of a block side by side in
    /// 512-bit registers (lanes 0..8 the first group's rows, 8..16 the second's), so one
    /// `vpdpbusd` and one f32 step serve 16 rows; every lane's sequence is unchanged. Starts
    /// from the sums in `lanes` and leaves the new ones there.
    #[inline(always)]
    unsafe fn tile_pair<W: common::WeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nb: usize,
        lanes: &mut [[f32; 2 * common::ROWS]; 8],
        prefetch: usize,
    ) {
        // SAFETY: the caller guarantees 2 * nb readable tiles and nb blocks per token; avx512f,
        // bw, vl, vnni and f16c are enabled in the caller; prefetches never fault.
        unsafe {
            // The sums so far (zero at a matrix's first span).
            let mut acc = [_mm512_setzero_ps(); T];
            for (a, lane) in acc.iter_mut().zip(lanes.iter()) {
                *a = _mm512_loadu_ps(lane.as_ptr());
            }
            let (offsets, ones) = (
                _mm512_set1_epi16(W::UNSIGNED_OFFSET as i16),
                _mm512_set1_epi16(1),
            );
            for b in 0..nb {
                for g in [tiles.add(b), tiles.add(nb + b)] {
                    common::prefetch_tile(g, prefetch);
                }
                let (t0, t1) = (&*tiles.add(b), &*tiles.add(nb + b));
                let ((d0, m0), (d1, m1)) = (t0.scales(), t1.scales());
                let d = join_ps(d0, d1);
                let m = join_ps(m0, m1);
                let (w0, w1) = (t0.unpack_unsigned(), t1.unpack_unsigned());
                // (A loop, not `from_fn`: a closure would not inherit the target features.)
                let mut w = [_mm512_setzero_si512(); 8];
                for k in 0..8 {
                    w[k] = join_si(w0[k], w1[k]);
                }
                // Every token's step spelled out, as in k_pair_sub_block: a loop over the tokens
                // kept the sums on the stack, a load, add and store per (block, token).
                const { assert!(T <= 8, "the pass spells out at most 8 tokens") };
                let factors = (d, m, offsets, ones);
                macro_rules! tokens {
                    ($($i:literal)+) => {$(
                        if $i < T {
                            pair_token::<W>(&w, factors, &*x[$i].add(b), &mut acc[$i]);
                        }
                    )+};
                }
                tokens!(0 1 2 3 4 5 6 7);
            }
            for (lane, a) in lanes.iter_mut().zip(acc) {
                _mm512_storeu_ps(lane.as_mut_ptr(), a);
            }
        }
    }

    /// Otherwise identical to common::tile_k: the two groups' super-blocks side by side in
    /// 512-bit registers (lanes 0..8 the first group's rows, 8..16 the second's), so each
    /// activation column broadcast, `vpdpbusd` and f32 step serves 16 rows; every lane's
    /// sequence is unchanged. Starts from the sums in `lanes` and leaves the new ones there.
    #[inline(always)]
    unsafe fn tile_k_pair<W: common::KWeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nbk: usize,
        lanes: &mut [[f32; 2 * common::ROWS]; 8],
        prefetch: usize,
    ) {
        debug_assert!(!W::SIGNED);
        // SAFETY: the caller guarantees 2 * nbk readable tiles and 8 * nbk blocks per token;
        // avx512f, bw, vl, vnni and f16c are enabled in the caller; prefetches never fault.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); T];
            for (a, lane) in acc.iter_mut().zip(lanes.iter()) {
                *a = _mm512_loadu_ps(lane.as_ptr());
            }
            for b in 0..nbk {
                for g in [tiles.add(b), tiles.add(nbk + b)] {
                    common::prefetch_tile(g, prefetch);
                }
                let pair = (&*tiles.add(b), &*tiles.add(nbk + b));
                let ((d0, n0), (d1, n1)) = (pair.0.factors(), pair.1.factors());
                let factors = (join_ps(d0, d1), join_ps(n0, n1));
                let xs: [*const BlockQ8Act; T] = std::array::from_fn(|i| x[i].add(8 * b));
                // Literal indices, as in common::tile_k: each sub-block's unpacking resolved
                // at compile time.
                k_pair_sub_block::<W, T, 0>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 1>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 2>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 3>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 4>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 5>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 6>(pair, &xs, factors, &mut acc);
                k_pair_sub_block::<W, T, 7>(pair, &xs, factors, &mut acc);
            }
            for (lane, a) in lanes.iter_mut().zip(acc) {
                _mm512_storeu_ps(lane.as_mut_ptr(), a);
            }
        }
    }
}

/// One token's step of [`DpbusdEvex::tile_pair`] for block `xb`: common::tile's integer dot
/// and f32 step on 16 lanes into `a` (`factors`: the joined d and m, then `offset` and 1 in both
/// i16 halves of every lane).
#[inline(always)]
unsafe fn pair_token<W: common::WeightTile>(
    w: &[__m512i; 8],
    (d, m, offsets, ones): (__m512, __m512, __m512i, __m512i),
    xb: &BlockQ8Act,
    a: &mut __m512,
) {
    // SAFETY: avx512f, bw and vnni are enabled in the caller; the block is readable.
    unsafe {
        let mut isum = block_dot(w, xb);
        // offset * Σx and Σx from the half sums, as common::times_sum does.
        let sums = _mm512_set1_epi32(xb.sums_pair());
        if W::UNSIGNED_OFFSET != 0 {
            isum = _mm512_sub_epi32(isum, _mm512_madd_epi16(offsets, sums));
        }
        let dx = _mm512_set1_ps(xb.d);
        let mut term = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx));
        if W::HAS_MIN {
            let sum_x = _mm512_cvtepi32_ps(_mm512_madd_epi16(ones, sums));
            term = _mm512_add_ps(term, _mm512_mul_ps(sum_x, _mm512_mul_ps(m, dx)));
        }
        *a = _mm512_add_ps(*a, term);
    }
}

/// Per lane, the exact i32 dot of its row's 32 unsigned weight quants (`w[k]` holds elements
/// 4k .. 4k + 4 of every row) with block `xb`'s 32 signed quants. Two chains (even and odd k)
/// halve the vpdpbusd latency chain; i32 addition wraps, so the split gives the same integer.
#[inline(always)]
unsafe fn block_dot(w: &[__m512i; 8], xb: &BlockQ8Act) -> __m512i {
    // SAFETY: avx512f and vnni are enabled in the caller; the block is readable.
    unsafe {
        let xq = xb.qs.as_ptr().cast::<i32>();
        let mut two = [_mm512_setzero_si512(); 2];
        for (k, wk) in w.iter().enumerate() {
            let xk = _mm512_set1_epi32(xq.add(k).read_unaligned());
            two[k % 2] = _mm512_dpbusd_epi32(two[k % 2], *wk, xk);
        }
        _mm512_add_epi32(two[0], two[1])
    }
}

/// Sub-block J of [`DpbusdEvex::tile_k_pair`]'s two tiles by T tokens (`x[i]` is token i's
/// first activation block of the super-block; `factors` the joined (d, -dmin)): common's
/// sub_block_ints and tile_k's f32 step on 16 lanes.
#[inline(always)]
unsafe fn k_pair_sub_block<W: common::KWeightTile, const T: usize, const J: usize>(
    (t0, t1): (&W, &W),
    x: &[*const BlockQ8Act; T],
    (d, neg_dmin): (__m512, __m512),
    acc: &mut [__m512; T],
) {
    // SAFETY: the caller guarantees readable tiles and blocks; avx512f, bw, vl, vnni and f16c
    // are enabled in the caller.
    unsafe {
        let (w0, w1) = (t0.unpack(J), t1.unpack(J));
        let mut w = [_mm512_setzero_si512(); 8];
        for k in 0..8 {
            w[k] = join_si(w0[k], w1[k]);
        }
        let ((s0a, s1a), (s0b, s1b)) = (t0.scales(J), t1.scales(J));
        let (s0, s1) = (join_si(s0a, s0b), join_si(s1a, s1b));
        // The i16 pairs (s0, s1) and (m0, m1) that the `madd`s take against each token's half
        // sums (sum_x0, sum_x1): a pair (v, v) of shared halves gives
        // v * sum_x0 + v * sum_x1 = v * sum_x. Without minima (Q6_K, Q3_K) the minimum pairs
        // are zero and no token reads them.
        let s01 = i16_pairs(s0, s1);
        let m01 = if W::HAS_MIN {
            let ((m0a, m1a), (m0b, m1b)) = (t0.mins(J), t1.mins(J));
            i16_pairs(join_si(m0a, m0b), join_si(m1a, m1b))
        } else {
            _mm512_setzero_si512()
        };
        // Every token's step spelled out (constant indices keep the sums in registers; a loop
        // over the tokens kept them on the stack).
        const { assert!(T <= 8, "the pass spells out at most 8 tokens") };
        let scales = (s0, s1, s01, m01);
        macro_rules! tokens {
            ($($i:literal)+) => {$(
                if $i < T {
                    k_pair_token::<W>(&w, scales, (d, neg_dmin), &*x[$i].add(J), &mut acc[$i]);
                }
            )+};
        }
        tokens!(0 1 2 3 4 5 6 7);
    }
}

/// One token's step of [`k_pair_sub_block`]: the integers of common's sub_block_ints for block
/// `xb` and the f32 step into `a`.
#[inline(always)]
unsafe fn k_pair_token<W: common::KWeightTile>(
    w: &[__m512i; 8],
    (s0, s1, s01, m01): (__m512i, __m512i, __m512i, __m512i),
    (d, neg_dmin): (__m512, __m512),
    xb: &BlockQ8Act,
    a: &mut __m512,
) {
    // SAFETY: avx512f, bw and vnni are enabled in the caller; the block is readable.
    unsafe {
        // The minimum term as one `madd` of the i16 pairs (m0, m1) against (sum_x0, sum_x1).
        let sx01 = _mm512_set1_epi32(xb.sums_pair());
        let imin = if W::HAS_MIN {
            _mm512_madd_epi16(m01, sx01)
        } else {
            _mm512_setzero_si512()
        };
        let iscaled = if W::SHARED_HALVES {
            // s0 == s1: s * isum.
            _mm512_mullo_epi32(s0, block_dot(w, xb))
        } else {
            // Per half: s0 * isum_0 + s1 * isum_1, and the offset term as one `madd` of the
            // i16 pairs (s0, s1) against (sum_x0, sum_x1).
            let xq = xb.qs.as_ptr().cast::<i32>();
            let mut isum = [_mm512_setzero_si512(); 2];
            for (k, wk) in w.iter().enumerate() {
                let xk = _mm512_set1_epi32(xq.add(k).read_unaligned());
                isum[k / 4] = _mm512_dpbusd_epi32(isum[k / 4], *wk, xk);
            }
            let mut iscaled = _mm512_add_epi32(
                _mm512_mullo_epi32(s0, isum[0]),
                _mm512_mullo_epi32(s1, isum[1]),
            );
            if W::OFFSET != 0 {
                let offsets = _mm512_madd_epi16(s01, sx01);
                let offsets = _mm512_mullo_epi32(offsets, _mm512_set1_epi32(W::OFFSET));
                iscaled = _mm512_sub_epi32(iscaled, offsets);
            }
            iscaled
        };
        let dx = _mm512_set1_ps(xb.d);
        let mut term = _mm512_mul_ps(_mm512_cvtepi32_ps(iscaled), _mm512_mul_ps(d, dx));
        if W::HAS_MIN {
            let dmin_dx = _mm512_mul_ps(neg_dmin, dx);
            term = _mm512_add_ps(term, _mm512_mul_ps(_mm512_cvtepi32_ps(imin), dmin_dx));
        }
        *a = _mm512_add_ps(*a, term);
    }
}

/// Per lane the i16 pair (lo, hi) of two small integers (|v| < 2^15).
#[inline(always)]
unsafe fn i16_pairs(lo: __m512i, hi: __m512i) -> __m512i {
    // SAFETY: avx512f is enabled in the caller.
    unsafe {
        let lo = _mm512_and_si512(lo, _mm512_set1_epi32(0xffff));
        _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi))
    }
}

/// [a | b] in one 512-bit register.
#[inline(always)]
unsafe fn join_si(a: __m256i, b: __m256i) -> __m512i {
    // SAFETY: avx512f is enabled in the caller.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b) }
}

/// Otherwise identical to common::attention (so to reference::attention), for an even N, on
/// 512-bit registers. A score takes two positions per register (lanes 0..8 position t's rule-2
/// accumulator lanes, 8..16 position t + 1's), and the fold across lanes runs for 16 positions
/// at once (`fold16`) instead of once per score; the value step takes 16 lanes per operation
/// and up to four heads side by side (`heads_step`), so their one-add-per-position chains
/// overlap. Every output lane sees the reference's sequence, and every score too but for the
/// first add of each accumulator lane (`+0 + product`, skipped: rule 6 allows it, only a zero
/// score's sign can change). On Zen 4, whose 512-bit operations run as two 256-bit halves,
/// only the fewer shuffles and the overlapped chains pay: TinyLlama shape (head_dim 64, 8 query
/// heads per KV head), 1 thread, `--profile` attention per decode step after 500 / 1500 tokens
/// 3.9-4.0 / 10.8-11.0 ms with the 256-bit twin, 3.4-3.5 / 9.8-10.2 ms with this one
/// (alternated); skipping the first adds and a tree for the block maximum then gave 1500
/// tokens 10.0-11.0 ms against 10.1-11.2 (medians of three alternated runs 10.1 / 11.2; a
/// microbench of the 22 layers' calls, 8.1-9.7 / 8.7-10.4 ns per (head, position)). As
/// common::attention, the rows a block ahead are prefetched while a block is converted
/// (common::prefetch_ahead), and the probabilities take 16 positions per `exp16` (half the
/// instructions of two `exp8`). From head_dim 128 on, `attention_sub` takes the call.
///
/// # Safety
/// As common::attention: shapes checked by the caller, avx512f and f16c enabled in it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn attention_wide<L: common::Lanes, const N: usize>(
    q: &[&[f32]],
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) {
    debug_assert!(N.is_multiple_of(2));
    // SAFETY: as common::attention (the caller checked the shapes); avx512f is enabled in the
    // caller. Buffer entries are written before they are read: K for every position up to the
    // block's length rounded up to 16 (zeros past it), V for the block's positions.
    unsafe {
        let hd = 8 * N;
        let heads = q.first().map_or(0, |q0| q0.len() / hd);
        if heads == 0 {
            return;
        }
        if N >= 16 {
            return attention_sub::<L, N>(q, keys, values, n_pos, stride, offset, scale, out);
        }
        // Position pair pp, chunk j: [k(2pp)[8j..8j + 8] | k(2pp + 1)[8j..8j + 8]].
        let mut kbuf = [[MaybeUninit::<__m512>::uninit(); N]; ATTENTION_BLOCK / 2];
        // Position t's 8N values, contiguous.
        let mut vbuf = [[MaybeUninit::<__m256>::uninit(); N]; ATTENTION_BLOCK];
        let per_pass = (common::PAIRS_PER_PASS / heads).max(1);
        for (pass, (q, out)) in q.chunks(per_pass).zip(out.chunks_mut(per_pass)).enumerate() {
            let first = n_pos + pass * per_pass; // positions the pass's first query sees
            let most = first + q.len() - 1; // positions its last query sees
            let pairs = q.len() * heads;
            let mut m = [f32::NEG_INFINITY; common::PAIRS_PER_PASS];
            let mut l = [0.0f32; common::PAIRS_PER_PASS];
            for o in out.iter_mut() {
                o.fill(0.0);
            }
            let mut start = 0;
            while start < most {
                let end = (start + ATTENTION_BLOCK).min(most);
                let n = end - start;
                for t in 0..n.next_multiple_of(16) {
                    let k = kbuf[t / 2].as_mut_ptr().cast::<f32>().add(8 * (t % 2));
                    let at = (start + t) * stride + offset;
                    for j in 0..N {
                        let kt = if t < n {
                            L::load8(keys.as_ptr().add(at + 8 * j))
                        } else {
                            _mm256_setzero_ps()
                        };
                        _mm256_storeu_ps(k.add(16 * j), kt);
                    }
                    if t < n {
                        for (j, vj) in vbuf[t].iter_mut().enumerate() {
                            vj.write(L::load8(values.as_ptr().add(at + 8 * j)));
                        }
                        common::prefetch_ahead(keys, values, start + t, most, stride);
                    }
                }
                // Query i sees positions start..end_i of this block; those already past
                // their last position (earlier queries, in the last block) sit it out.
                for (i, (qi, oi)) in q.iter().zip(out.iter_mut()).enumerate() {
                    let end_i = end.min(first + i);
                    if end_i <= start {
                        continue;
                    }
                    let len = end_i - start;
                    // Several heads at once where their outputs fit in registers: the
                    // output and sum chains of the value step (one add per position, in the
                    // reference's order) then run side by side.
                    let (qh, oh) = (qi.as_ptr(), oi.as_mut_ptr());
                    let (ms, ls) = (&mut m[i * heads..], &mut l[i * heads..]);
                    let mut h = 0;
                    while h < heads {
                        // (Direct calls: through a function pointer the step would be a
                        // function of its own, compiled without the target features.)
                        h += if N <= 8 && heads - h >= 4 {
                            heads_step::<L, N, 4>(qh, oh, h, &kbuf, &vbuf, len, scale, ms, ls)
                        } else if N <= 16 && heads - h >= 2 {
                            heads_step::<L, N, 2>(qh, oh, h, &kbuf, &vbuf, len, scale, ms, ls)
                        } else {
                            heads_step::<L, N, 1>(qh, oh, h, &kbuf, &vbuf, len, scale, ms, ls)
                        };
                    }
                }
                start = end;
            }
            divide_by_sums::<N>(out, &l[..pairs], heads);
        }
    }
}

/// Each (query, head) pair's output (`out[pair / heads]`, head `pair % heads`) divided by its
/// sum of probabilities `l[pair]`. Otherwise identical to common::divide_by_sums.
///
/// # Safety
/// Every `out` row holds `heads * 8N` values; avx512f is enabled in the caller.
#[inline(always)]
unsafe fn divide_by_sums<const N: usize>(out: &mut [&mut [f32]], l: &[f32], heads: usize) {
    // SAFETY: forwarded to the caller.
    unsafe {
        for (pair, &lp) in l.iter().enumerate() {
            let lv = _mm512_set1_ps(lp);
            let o_h = out[pair / heads].as_mut_ptr().add(pair % heads * 8 * N);
            for j in 0..N / 2 {
                let o = _mm512_loadu_ps(o_h.add(16 * j));
                _mm512_storeu_ps(o_h.add(16 * j), _mm512_div_ps(o, lv));
            }
        }
    }
}

/// Positions per sub-block of [`attention_sub`]: one [`fold16`] group, 16 rows of K or V as
/// f32, 16 KiB each at head_dim 256, so both buffers stay in L1.
const SUB_BLOCK: usize = 16;

/// [`attention_wide`] for wide heads (head_dim >= 128): the block's K rows, then its V rows,
/// are converted [`SUB_BLOCK`] positions at a time, and every (query, head) pair takes its
/// scores (then its value step) over the sub-block before the next is converted, as
/// common::attention_few does for decode, here for any number of pairs. The whole block's f32
/// buffers (64 KiB each at head_dim 256) were read from L2 by every pair: 2 KiB per (pair,
/// position). Each pair keeps its block's scores, then its probabilities, until the block's
/// value step; its running output rests in its `out` row between sub-blocks (storing an f32 is
/// exact) and takes the order of [`heads_step`]: a rescale before the block's first position,
/// then one add per position, the positions in order. Otherwise identical to [`attention_wide`].
///
/// # Safety
/// As [`attention_wide`]; heads >= 1.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn attention_sub<L: common::Lanes, const N: usize>(
    q: &[&[f32]],
    keys: &[L::Elem],
    values: &[L::Elem],
    n_pos: usize,
    stride: usize,
    offset: usize,
    scale: f32,
    out: &mut [&mut [f32]],
) {
    // SAFETY: as attention_wide (the caller checked the shapes); avx512f and f16c are enabled
    // in the caller. Buffer rows are written before they are read: all 16 K rows of a
    // sub-block (zeros past its end), V rows up to its end.
    unsafe {
        let hd = 8 * N;
        let heads = q[0].len() / hd;
        // Position pair pp of the sub-block, chunk j: [k(2pp)[8j..8j + 8] | k(2pp + 1)[..]].
        let mut kbuf = [[MaybeUninit::<__m512>::uninit(); N]; SUB_BLOCK / 2];
        // Position t's 8N values, contiguous.
        let mut vbuf = [[MaybeUninit::<__m256>::uninit(); N]; SUB_BLOCK];
        // Per pair: the block's scores, then its probabilities in their place.
        let mut p = [[0.0f32; ATTENTION_BLOCK]; common::PAIRS_PER_PASS];
        let mut rescale = [0.0f32; common::PAIRS_PER_PASS];
        let per_pass = (common::PAIRS_PER_PASS / heads).max(1);
        for (pass, (q, out)) in q.chunks(per_pass).zip(out.chunks_mut(per_pass)).enumerate() {
            let first = n_pos + pass * per_pass; // positions the pass's first query sees
            let most = first + q.len() - 1; // positions its last query sees
            let pairs = q.len() * heads;
            let mut m = [f32::NEG_INFINITY; common::PAIRS_PER_PASS];
            let mut l = [0.0f32; common::PAIRS_PER_PASS];
            for o in out.iter_mut() {
                o.fill(0.0);
            }
            // Query i sees positions ..first + i: of the sub-block from s0 to s1, how many.
            let seen = |i: usize, s0: usize, s1: usize| s1.min(first + i).saturating_sub(s0);
            let mut start = 0;
            while start < most {
                let end = (start + ATTENTION_BLOCK).min(most);
                // Scores, a sub-block at a time.
                for s0 in (start..end).step_by(SUB_BLOCK) {
                    let s1 = (s0 + SUB_BLOCK).min(end);
                    for t in 0..SUB_BLOCK {
                        let k = kbuf[t / 2].as_mut_ptr().cast::<f32>().add(8 * (t % 2));
                        let at = (s0 + t) * stride + offset;
                        for j in 0..N {
                            let kt = if s0 + t < s1 {
                                L::load8(keys.as_ptr().add(at + 8 * j))
                            } else {
                                _mm256_setzero_ps()
                            };
                            _mm256_storeu_ps(k.add(16 * j), kt);
                        }
                        if s0 + t < s1 {
                            common::prefetch_ahead(keys, values, s0 + t, most, stride);
                        }
                    }
                    for (i, qi) in q.iter().enumerate() {
                        if seen(i, s0, s1) == 0 {
                            continue;
                        }
                        for h in 0..heads {
                            // The head's chunk j in both halves.
                            let q2: [__m512; N] = std::array::from_fn(|j| {
                                let x = _mm512_castps256_ps512(_mm256_loadu_ps(
                                    qi.as_ptr().add(h * hd + 8 * j),
                                ));
                                _mm512_shuffle_f32x4::<0x44>(x, x)
                            });
                            let s = if N >= PAIRED_SCORES_FROM {
                                pair_sums::<N, 2>(&q2, &kbuf)
                            } else {
                                pair_sums::<N, 1>(&q2, &kbuf)
                            };
                            let r = _mm512_mul_ps(fold16(s), _mm512_set1_ps(scale));
                            let scores = p[i * heads + h].as_mut_ptr().add(s0 - start);
                            _mm512_storeu_ps(scores, r);
                        }
                    }
                }
                // Each pair's block maximum, rescale and probabilities, as heads_step's.
                for (pair, pp) in p.iter_mut().enumerate().take(pairs) {
                    let len = seen(pair / heads, start, end);
                    if len > 0 {
                        rescale[pair] = block_probabilities(pp, len, &mut m[pair], &mut l[pair]);
                    }
                }
                // Value steps, a sub-block at a time; a pair's output stays in registers over
                // the sub-block's positions.
                for s0 in (start..end).step_by(SUB_BLOCK) {
                    let s1 = (s0 + SUB_BLOCK).min(end);
                    for t in s0..s1 {
                        let at = t * stride + offset;
                        for (j, vj) in vbuf[t - s0].iter_mut().enumerate() {
                            vj.write(L::load8(values.as_ptr().add(at + 8 * j)));
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
                            // (N registers declared, N / 2 used: an array's length cannot
                            // be N / 2 for a generic N.)
                            let mut o = [_mm512_setzero_ps(); N];
                            for (j, oj) in o.iter_mut().enumerate().take(N / 2) {
                                *oj = _mm512_loadu_ps(o_h.add(16 * j));
                                if s0 == start {
                                    *oj = _mm512_mul_ps(*oj, _mm512_set1_ps(rescale[pair]));
                                }
                            }
                            for (t, &pt) in p[pair][s0 - start..][..len].iter().enumerate() {
                                l[pair] += pt;
                                let pv = _mm512_set1_ps(pt);
                                let v = vbuf[t].as_ptr().cast::<f32>();
                                for (j, oj) in o.iter_mut().enumerate().take(N / 2) {
                                    let vj = _mm512_loadu_ps(v.add(16 * j));
                                    *oj = _mm512_add_ps(*oj, _mm512_mul_ps(pv, vj));
                                }
                            }
                            for (j, oj) in o.iter().enumerate().take(N / 2) {
                                _mm512_storeu_ps(o_h.add(16 * j), *oj);
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

/// One block step of [`attention_wide`] for query heads h .. h + H of one query (`q`, `out` its
/// rows, `m`, `l` its heads' running maxima and sums): the scores of positions 0..len of the
/// block, the new maximum, and the value step, each head exactly as the reference's one-head
/// sequence. Returns H.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn heads_step<L: common::Lanes, const N: usize, const H: usize>(
    q: *const f32,
    out: *mut f32,
    h: usize,
    kbuf: &[[MaybeUninit<__m512>; N]; ATTENTION_BLOCK / 2],
    vbuf: &[[MaybeUninit<__m256>; N]; ATTENTION_BLOCK],
    len: usize,
    scale: f32,
    m: &mut [f32],
    l: &mut [f32],
) -> usize {
    let hd = 8 * N;
    // SAFETY: the caller's rows hold heads h .. h + H (hd values each), its buffers are written
    // up to len rounded up to 16 (K) and len (V); avx512f is enabled in the caller. No closures:
    // they would not inherit the target features.
    unsafe {
        let mut scores = [[0.0f32; ATTENTION_BLOCK]; H];
        let mut o = [[_mm512_setzero_ps(); N]; H];
        for hh in 0..H {
            let head = h + hh;
            // The head's chunk j in both halves.
            let mut q2 = [_mm512_setzero_ps(); N];
            for (j, q2j) in q2.iter_mut().enumerate() {
                let x = _mm512_castps256_ps512(_mm256_loadu_ps(q.add(head * hd + 8 * j)));
                *q2j = _mm512_shuffle_f32x4::<0x44>(x, x);
            }
            for g in 0..len.div_ceil(16) {
                let keys = &kbuf.as_chunks::<8>().0[g];
                // (Narrow heads only, head_dim < 128: one row at a time.)
                let s = pair_sums::<N, 1>(&q2, keys);
                let r = _mm512_mul_ps(fold16(s), _mm512_set1_ps(scale));
                _mm512_storeu_ps(scores[hh].as_mut_ptr().add(16 * g), r);
            }
            let c = block_probabilities(&mut scores[hh], len, &mut m[head], &mut l[head]);
            let cv = _mm512_set1_ps(c);
            for (j, oj) in o[hh].iter_mut().enumerate().take(N / 2) {
                *oj = _mm512_mul_ps(_mm512_loadu_ps(out.add(head * hd + 16 * j)), cv);
            }
        }
        let p = scores;
        for t in 0..len {
            let v = vbuf[t].as_ptr().cast::<f32>();
            for hh in 0..H {
                let pt = p[hh][t];
                l[h + hh] += pt;
                let pv = _mm512_set1_ps(pt);
                for (j, oj) in o[hh].iter_mut().enumerate().take(N / 2) {
                    *oj = _mm512_add_ps(*oj, _mm512_mul_ps(pv, _mm512_loadu_ps(v.add(16 * j))));
                }
            }
        }
        for (hh, oh) in o.iter().enumerate() {
            for (j, oj) in oh.iter().enumerate().take(N / 2) {
                _mm512_storeu_ps(out.add((h + hh) * hd + 16 * j), *oj);
            }
        }
        H
    }
}

/// One pair's block step between its scores and its value step, in place: the block maximum
/// of `scores[..len]`, the new running maximum `m`, the running sum `l` rescaled, and the
/// probabilities exp(score - m) over the scores (16 per `exp16`, zeros past len's 16 included).
/// Returns the rescale factor exp(old m - new m) for the running output. Otherwise identical
/// to common::block_probabilities.
///
/// # Safety
/// 0 < len <= ATTENTION_BLOCK; avx512f is enabled in the caller.
#[inline(always)]
unsafe fn block_probabilities(
    scores: &mut [f32; ATTENTION_BLOCK],
    len: usize,
    m: &mut f32,
    l: &mut f32,
) -> f32 {
    // SAFETY: forwarded to the caller; ATTENTION_BLOCK is a multiple of 16, so the whole
    // groups of 16 read and written stay inside the block.
    unsafe {
        // The reference's `if s > max { s } else { max }` per lane (vmaxps keeps its second
        // operand unless the first is greater: never a NaN), then across lanes. Only which
        // zero sign survives a tie of +0 and -0 can differ from the reference's order, and no
        // result sees it: exp(+0) = exp(-0) = 1 and x - 0 = x otherwise.
        let mut most16 = _mm512_set1_ps(f32::NEG_INFINITY);
        for g in 0..len.div_ceil(16) {
            let sv = _mm512_loadu_ps(scores.as_ptr().add(16 * g));
            let live = (len - 16 * g).min(16);
            let mask = ((1u32 << live) - 1) as __mmask16;
            most16 = _mm512_mask_max_ps(most16, mask, sv, most16);
        }
        // (A tree of maxima, not the reference's left-to-right scan: the same value, but for
        // which zero survives a tie of +0 and -0, as above.)
        let block_max = _mm512_reduce_max_ps(most16);
        let m_new = if block_max > *m { block_max } else { *m };
        let c = math::exp(*m - m_new);
        *l *= c;
        *m = m_new;
        let mv = _mm512_set1_ps(m_new);
        for j in (0..len).step_by(16) {
            let sv = _mm512_loadu_ps(scores.as_ptr().add(j));
            _mm512_storeu_ps(scores.as_mut_ptr().add(j), exp16(_mm512_sub_ps(sv, mv)));
        }
        c
    }
}

/// The head_dim / 8 from which [`pair_sums`] takes two rows of keys side by side (see there).
const PAIRED_SCORES_FROM: usize = 24;

/// [`fold16`]'s input for 16 positions: `s[pp]` = `(acc0 + acc1) + (acc2 + acc3)` of the key
/// row `keys[pp]` (positions 2pp and 2pp + 1), lane r of acc k summing the products of the
/// chunks j = k mod 4 in order, its first product starting the sum (rule 6's exception to
/// rule 2). Otherwise identical to common::score_sums: the chunks go by whole fours, so every
/// accumulator's index is a constant (a loop over j with `j % 4` kept the four on the stack, a
/// load and a store per product), and `P` rows go side by side, so each chunk of q is loaded
/// once for P keys (at head_dim 256 q's 32 registers are all AVX-512 has).
///
/// # Safety
/// The keys' rows are initialized; avx512f is enabled in the caller.
#[inline(always)]
unsafe fn pair_sums<const N: usize, const P: usize>(
    q2: &[__m512; N],
    keys: &[[MaybeUninit<__m512>; N]; 8],
) -> [__m512; 8] {
    // SAFETY: forwarded to the caller.
    unsafe {
        let mut s8 = [_mm512_setzero_ps(); 8];
        let (sums, _) = s8.as_chunks_mut::<P>();
        for (sums, keys) in sums.iter_mut().zip(keys.as_chunks::<P>().0) {
            let mut acc = [[_mm512_setzero_ps(); 4]; P];
            for j4 in 0..N.div_ceil(4) {
                for r in 0..4 {
                    let j = 4 * j4 + r;
                    if j < N {
                        for (a, k) in acc.iter_mut().zip(keys) {
                            let product = _mm512_mul_ps(q2[j], k[j].assume_init());
                            a[r] = if j4 == 0 {
                                product
                            } else {
                                _mm512_add_ps(a[r], product)
                            };
                        }
                    }
                }
            }
            for (s, a) in sums.iter_mut().zip(&acc) {
                *s = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
            }
        }
        s8
    }
}

/// common::fold for 16 positions at once: `s[pp]` holds `(acc0 + acc1) + (acc2 + acc3)` of
/// positions 2pp (lanes 0..8) and 2pp + 1 (lanes 8..16); lane p of the result is position p's
/// fold, through the same pairs: t_l = s_l + s_(l+4), u_0 = t_0 + t_2, u_1 = t_1 + t_3,
/// u_0 + u_1 (each sum of two values, so which is left does not change the bits).
#[inline(always)]
unsafe fn fold16(s: [__m512; 8]) -> __m512 {
    // SAFETY: avx512f is enabled in the caller.
    unsafe {
        // t[k]'s 128-bit lane c: t_0..t_3 of position 4k + c.
        let mut t = [_mm512_setzero_ps(); 4];
        for (k, tk) in t.iter_mut().enumerate() {
            let (x, y) = (s[2 * k], s[2 * k + 1]);
            *tk = _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(x, y),
                _mm512_shuffle_f32x4::<0xDD>(x, y),
            );
        }
        // u[k]'s lane c: u_0, u_1 of position 8k + c, then of 8k + 4 + c.
        let mut u = [_mm512_setzero_ps(); 2];
        for (k, uk) in u.iter_mut().enumerate() {
            let (a, b) = (t[2 * k], t[2 * k + 1]);
            *uk = _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(a, b),
                _mm512_shuffle_ps::<0xEE>(a, b),
            );
        }
        // Element 4c + e: position c + 4e.
        let r = _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(u[0], u[1]),
            _mm512_shuffle_ps::<0xDD>(u[0], u[1]),
        );
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(order, r)
    }
}

/// e^x for 16 lanes. Otherwise identical to common::exp8 (so to math::exp): the same constants
/// and operation sequence, the special cases by mask instead of blend.
#[inline(always)]
unsafe fn exp16(x: __m512) -> __m512 {
    // SAFETY: avx512f is enabled in the caller.
    unsafe {
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2_E)),
        );
        let r = _mm512_sub_ps(
            _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(LN2_HI))),
            _mm512_mul_ps(n, _mm512_set1_ps(LN2_LO)),
        );
        let mut p = _mm512_set1_ps(EXP_POLY[5]);
        for c in [
            EXP_POLY[4],
            EXP_POLY[3],
            EXP_POLY[2],
            EXP_POLY[1],
            EXP_POLY[0],
            1.0,
            1.0,
        ] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
        }
        // n / 2 rounded toward zero, as Rust's i32 division: add the sign bit, shift.
        let ni = _mm512_cvtps_epi32(n);
        let n1 = _mm512_srai_epi32::<1>(_mm512_add_epi32(ni, _mm512_srli_epi32::<31>(ni)));
        let n2 = _mm512_sub_epi32(ni, n1);
        let bias = _mm512_set1_epi32(127);
        let pow2_n1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n1, bias)));
        let pow2_n2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n2, bias)));
        let y = _mm512_mul_ps(_mm512_mul_ps(p, pow2_n1), pow2_n2);
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_UNDERFLOW));
        let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_OVERFLOW));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
        let y = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(f32::INFINITY));
        _mm512_mask_blend_ps(nan, y, x)
    }
}

/// [a | b] in one 512-bit register (AVX-512F only: insertf32x8 would need DQ).
#[inline(always)]
unsafe fn join_ps(a: __m256, b: __m256) -> __m512 {
    // SAFETY: avx512f is enabled in the caller.
    unsafe {
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(a)),
            _mm256_castps_pd(b),
        ))
    }
}

super::backend!(
    "avx512",
    features: "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    detect: ["avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"],
    int_dot: DpbusdEvex
);

#[cfg(test)]
mod tests {
    use super::*;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn exp16_of(x: &[f32; 16]) -> [f32; 16] {
        let mut out = [0.0f32; 16];
        // SAFETY: 16 elements each side; the test checked the features.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), exp16(_mm512_loadu_ps(x.as_ptr()))) };
        out
    }

    #[test]
    fn exp16_equals_math_exp_bitwise_sweep_and_specials() {
        if !supported() {
            println!("skipped: no avx512 f/bw/vl/vnni");
            return;
        }
        let xs = crate::kernels::testdata::exp_inputs();
        for chunk in xs.chunks(16) {
            let mut x = [0.0f32; 16];
            x[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: supported() found the features.
            let got = unsafe { exp16_of(&x) };
            for (g, &xi) in got.iter().zip(&x) {
                let want = math::exp(xi);
                assert!(
                    g.to_bits() == want.to_bits(),
                    "exp16({xi:e} = {:#010x}) = {g:e}, math::exp gives {want:e}",
                    xi.to_bits()
                );
            }
        }
    }
}
