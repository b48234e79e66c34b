//! The AVX-512 backend (F, BW, VL, VNNI): optimized twins of reference.rs, bit-identical.
//! Quantized matmuls run the shared row-interleaved tile with the EVEX `vpdpbusd` on 256-bit
//! registers (one lane per row, so every lane's f32 sequence is the reference's) and use the 32
//! vector registers to take 8 tokens per unpacked tile.

use std::arch::x86_64::*;

/// `vpdpbusd` (EVEX) on 256-bit registers; the 32 registers of AVX-512 hold 8 tokens per tile.
pub struct DpbusdEvex;

impl common::IntDot for DpbusdEvex {
    const SATURATES: bool = false;
    const TOKENS: usize = 8;
    const PAIRS: bool = true;

    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx512vnni and avx512vl are enabled in the caller.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }

    /// Otherwise identical to common::tile: the two groups' tiles of a block side by side in
    /// 512-bit registers (lanes 0..8 the first group's rows, 8..16 the second's), so one
    /// `vpdpbusd` and one f32 step serve 16 rows; every lane's sequence is unchanged.
    #[inline(always)]
    unsafe fn tile_pair<W: common::WeightTile, const T: usize>(
        tiles: *const W,
        x: &[*const BlockQ8Act; T],
        nb: usize,
        lanes: &mut [[f32; 2 * common::ROWS]; 8],
        prefetch: bool,
    ) {
        // SAFETY: the caller guarantees 2 * nb readable tiles and nb blocks per token; avx512f,
        // bw, vl, vnni and f16c are enabled in the caller; prefetches never fault.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); T];
            let offset = W::UNSIGNED_OFFSET;
            for b in 0..nb {
                if prefetch {
                    for g in [tiles.add(b), tiles.add(nb + b)] {
                        let ahead = g.cast::<u8>().wrapping_add(common::PREFETCH_BYTES);
                        for line in (0..std::mem::size_of::<W>()).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
                        }
                    }
                }
                let (t0, t1) = (&*tiles.add(b), &*tiles.add(nb + b));
                let ((d0, m0), (d1, m1)) = (t0.scales(), t1.scales());
                let d = join_ps(d0, d1);
                let m = join_ps(m0, m1);
                let (w0, w1) = (t0.unpack_unsigned(), t1.unpack_unsigned());
                let mut w = [_mm512_setzero_si512(); 8];
                for k in 0..8 {
                    w[k] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0[k]), w1[k]);
                }
                for j in 0..T {
                    let xb = &*x[j].add(b);
                    let xq = xb.qs.as_ptr().cast::<i32>();
                    let mut isum = _mm512_setzero_si512();
                    for (k, wk) in w.iter().enumerate() {
                        let xk = _mm512_set1_epi32(xq.add(k).read_unaligned());
                        isum = _mm512_dpbusd_epi32(isum, *wk, xk);
                    }
                    if offset != 0 {
                        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(offset * xb.sum));
                    }
                    let dx = _mm512_set1_ps(xb.d);
                    let mut term = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx));
                    if W::HAS_MIN {
                        let min_term =
                            _mm512_mul_ps(_mm512_set1_ps(xb.sum as f32), _mm512_mul_ps(m, dx));
                        term = _mm512_add_ps(term, min_term);
                    }
                    acc[j] = _mm512_add_ps(acc[j], term);
                }
            }
            for (lane, a) in lanes.iter_mut().zip(acc) {
                _mm512_storeu_ps(lane.as_mut_ptr(), a);
            }
        }
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
