//! The AVX2 backend (AVX2 + F16C, no FMA): optimized twins of reference.rs, bit-identical.
//! Integer block dots take `maddubs` (unsigned x signed bytes -> i16 pairs, which the contract's
//! operand ranges keep from saturating) then `madd` to i32, against ones or a K-quant's scales;
//! several columns' pairs add up in i16 first wherever the operand ranges keep them inside it.

use std::arch::x86_64::*;

/// `maddubs` + `madd`: 8 i32 lanes whose total is Σ u_i * s_i.
pub struct Maddubs;

impl common::IntDot for Maddubs {
    const SATURATES: bool = true;
    const TOKENS: usize = 4;
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx2 is enabled in the caller.
        unsafe {
            let pairs = _mm256_maddubs_epi16(u, s);
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }

    /// Column by column where all 8 columns' pair sums fit in i16 (4-bit quants, which take no
    /// sign trick): one i16 sum per token, each column multiplied with every token's broadcast
    /// in turn, then one widening per token, so 4 tokens' sums fit in registers beside the tile
    /// (token by token held all 8 columns and spilled 3 tokens' f32 sums to the stack). 64
    /// tokens by a 5632 x 2048 Q4_0 matrix, 1 thread on Zen 3: 3.8-4.2 -> 3.2-3.5 ns per (tile,
    /// token) with the offset term kept in vector registers ([`common::times_sum`]);
    /// TinyLlama-shape Q4_0 prefill of 64 tokens, 1 thread, alternated: 72.3-72.6 -> 77.6-79.1
    /// tok/s. Otherwise token by token ([`common::dot_tokens_each`]).
    #[inline(always)]
    unsafe fn dot_tokens<W: common::WeightTile, const T: usize>(
        w: &[__m256i; 8],
        xq: &[*const i32; T],
        max_u: i32,
    ) -> [__m256i; T] {
        // SAFETY: 32 readable bytes behind each xq[t]; avx2 is enabled in the caller.
        unsafe {
            if !columns_share_i16::<W>(max_u) {
                return common::dot_tokens_each::<Self, W, T>(w, xq, max_u);
            }
            let mut pairs = [_mm256_setzero_si256(); T];
            for (k, &wk) in w.iter().enumerate() {
                for (p, &xq) in pairs.iter_mut().zip(xq) {
                    let xk = _mm256_set1_epi32(xq.add(k).read_unaligned());
                    *p = _mm256_add_epi16(*p, _mm256_maddubs_epi16(wk, xk));
                }
            }
            for p in &mut pairs {
                *p = _mm256_madd_epi16(*p, _mm256_set1_epi16(1));
            }
            pairs
        }
    }

    const PAIRS: bool = true;
    /// The K-quants' pass keeps single groups: 8 sub-blocks' integer dots of two groups would not
    /// fit AVX2's 16 registers.
    const K_PAIRS: bool = false;

    /// Otherwise identical to common::tile for two row groups, for a batch: the 4-bit types
    /// whose 8 columns' pair sums fit in i16 (Q4_0, Q4_1) go a 32-byte chunk of both tiles at a
    /// time (its low and high nibbles are columns c and 4 + c), each token's two activation
    /// columns broadcast once for both groups, into one i16 sum per (group, token); then per
    /// token its offset once for both groups, and each lane's f32 step as tile takes it
    /// (common::block_step). Broadcasts per (tile, token) halve, 8 -> 4: TinyLlama-shape Q4_0
    /// prefill of 64 tokens, 1 thread on Zen 3 (EPYC family 25 model 1), three alternated
    /// rounds, 76.3-79.2 -> 87.6-88.5 tok/s. Other types take common::tile group by group.
    /// Starts from the sums in `lanes` and leaves the new ones there.
    #[inline(always)]
    unsafe fn tile_pair<W: common::WeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nb: usize,
        lanes: &mut [[f32; 2 * common::ROWS]; 8],
        prefetch: usize,
    ) {
        // SAFETY: the caller guarantees 2 * nb readable tiles and nb blocks per token; avx2 and
        // f16c are enabled in the caller; prefetches never fault.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); T]; 2];
            for (h, acc) in acc.iter_mut().enumerate() {
                for (a, lane) in acc.iter_mut().zip(lanes.iter()) {
                    *a = _mm256_loadu_ps(lane.as_ptr().add(h * common::ROWS));
                }
            }
            let shared = columns_share_i16::<W>(W::MAX_U) && nb > 0 && (*tiles).nibbles().is_some();
            if !shared {
                for (h, acc) in acc.iter_mut().enumerate() {
                    *acc = common::tile::<Self, W, T>(tiles.add(h * nb), x, nb, prefetch, *acc);
                }
            } else {
                let offset = W::SUM_OFFSET;
                for b in 0..nb {
                    let groups = [&*tiles.add(b), &*tiles.add(nb + b)];
                    for g in groups {
                        common::prefetch_tile(g, prefetch);
                    }
                    let qs = groups.map(|g| g.nibbles().unwrap_unchecked());
                    let xb: [&BlockQ8Act; T] = std::array::from_fn(|j| &*x[j].add(b));
                    let xq = xb.map(|xb| xb.qs.as_ptr().cast::<i32>());
                    let mut pairs = [[_mm256_setzero_si256(); T]; 2];
                    for c in 0..4 {
                        let mut w = [[_mm256_setzero_si256(); 2]; 2];
                        for (w, qs) in w.iter_mut().zip(qs) {
                            *w = common::nibble_chunk(qs, c);
                        }
                        for (j, &xq) in xq.iter().enumerate() {
                            let low = _mm256_set1_epi32(xq.add(c).read_unaligned());
                            let high = _mm256_set1_epi32(xq.add(4 + c).read_unaligned());
                            for (p, w) in pairs.iter_mut().zip(&w) {
                                let both = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(w[0], low),
                                    _mm256_maddubs_epi16(w[1], high),
                                );
                                p[j] = _mm256_add_epi16(p[j], both);
                            }
                        }
                    }
                    let scales = groups.map(|g| g.scales());
                    for (j, xb) in xb.into_iter().enumerate() {
                        let off = common::times_sum(common::i16_pairs(offset), xb);
                        for ((acc, p), scales) in acc.iter_mut().zip(&pairs).zip(scales) {
                            let mut isum = _mm256_madd_epi16(p[j], _mm256_set1_epi16(1));
                            if offset != 0 {
                                isum = _mm256_sub_epi32(isum, off);
                            }
                            acc[j] = common::block_step::<W>(acc[j], isum, scales, xb);
                        }
                    }
                }
            }
            for (h, acc) in acc.iter().enumerate() {
                for (a, lane) in acc.iter().zip(lanes.iter_mut()) {
                    _mm256_storeu_ps(lane.as_mut_ptr().add(h * common::ROWS), *a);
                }
            }
        }
    }

    /// [`Maddubs::dot_cols_scaled`] with a scale of 1 where columns share a widening (8
    /// columns of 4-bit quants, 4 of 5-bit ones: 9 or 10 multiplies where one widening per
    /// column took 16); two chains of `dot_acc` after the sign trick, where each column widens
    /// alone (one chain there cost Gemma 3's Q8_0-bound decode ~2%).
    #[inline(always)]
    unsafe fn dot_cols<const N: usize>(u: &[__m256i; N], s: &[__m256i; N], max_u: i32) -> __m256i {
        // SAFETY: avx2 is enabled in the caller.
        unsafe {
            if pair_group(max_u) > 1 {
                Self::dot_cols_scaled(u, s, max_u, _mm256_set1_epi32(1))
            } else {
                common::dot_cols_chained::<Self, N>(u, s)
            }
        }
    }

    /// Adds as many columns' i16 pair sums as cannot overflow (each pair is at most
    /// `2 * max_u * 127` in magnitude), then one `madd` against the scale in both i16 halves
    /// widens them and applies the scale at once: 8 columns of Q4_K's 4-bit quants per
    /// widening, 4 of Q5_K's, 2 of Q6_K's.
    #[inline(always)]
    unsafe fn dot_cols_scaled<const N: usize>(
        u: &[__m256i; N],
        s: &[__m256i; N],
        max_u: i32,
        scale: __m256i,
    ) -> __m256i {
        let group = pair_group(max_u);
        // SAFETY: avx2 is enabled in the caller.
        unsafe {
            let low = _mm256_and_si256(scale, _mm256_set1_epi32(0xffff));
            let scale = _mm256_or_si256(low, _mm256_slli_epi32::<16>(scale));
            let mut acc = _mm256_setzero_si256();
            let mut k = 0;
            while k < N {
                let mut pairs = _mm256_maddubs_epi16(u[k], s[k]);
                for c in k + 1..(k + group).min(N) {
                    pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(u[c], s[c]));
                }
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scale));
                k += group;
            }
            acc
        }
    }
}

/// Whether a tile's 8 columns of `maddubs` pair sums add up in one i16 per token, with no sign
/// trick (4-bit quants): the column-outermost batch loops' condition.
#[inline(always)]
fn columns_share_i16<W: common::WeightTile>(max_u: i32) -> bool {
    !W::SIGN_TRICK && pair_group(max_u) >= 8
}

/// Columns whose `maddubs` pair sums (each at most `2 * max_u * 127` in magnitude) add up
/// inside i16.
#[inline(always)]
const fn pair_group(max_u: i32) -> usize {
    let group = i16::MAX as i32 / (2 * max_u * 127);
    if group > 1 {
        group as usize
    } else {
        1
    }
}

super::backend!("avx2", features: "avx2,f16c", detect: ["avx2", "f16c"], int_dot: Maddubs);
