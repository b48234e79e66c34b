//! The AVX-512 backend (F, BW, VL, VNNI): optimized twins of reference.rs, bit-identical.
//! Quantized matmuls hold two rows' weight blocks per 512-bit register against the activation
//! block broadcast to both halves, so 8 rows take 4 `vpdpbusd` and a short reduction; the f32
//! steps stay 8 lanes wide (one lane per row), which keeps every lane's sequence the reference's.

use std::arch::x86_64::*;

/// `vpdpbusd` (EVEX) on pairs of rows.
pub struct DpbusdZmm;

impl common::IntDot for DpbusdZmm {
    const SATURATES: bool = false;
    /// Rows 2k and 2k+1 in the low and high halves of register k.
    type Packed = [__m512i; common::ROWS / 2];

    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx512vnni and avx512vl are enabled in the caller.
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s) }
    }

    #[inline(always)]
    unsafe fn pack(w: [__m256i; common::ROWS]) -> Self::Packed {
        // SAFETY: avx512f is enabled in the caller.
        unsafe {
            let mut packed = [_mm512_setzero_si512(); common::ROWS / 2];
            for (k, pk) in packed.iter_mut().enumerate() {
                *pk = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w[2 * k]), w[2 * k + 1]);
            }
            packed
        }
    }

    #[inline(always)]
    unsafe fn dot8<B: common::WeightBlock>(w: &Self::Packed, x: __m256i) -> __m256i {
        // SAFETY: avx512f/bw/vnni are enabled in the caller. Integer sums are exact in any order.
        unsafe {
            let xx = _mm512_broadcast_i64x4(x);
            let mut v = [_mm512_setzero_si512(); 4];
            for (vk, wk) in v.iter_mut().zip(w) {
                *vk = _mm512_dpbusd_epi32(_mm512_setzero_si512(), *wk, xx);
            }
            // 128-bit chunks: [row 2k: c0 c1 | row 2k+1: c2 c3] -> pairs summed, four rows each.
            let rows_0123 = _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0b10_00_10_00>(v[0], v[1]),
                _mm512_shuffle_i32x4::<0b11_01_11_01>(v[0], v[1]),
            );
            let rows_4567 = _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0b10_00_10_00>(v[2], v[3]),
                _mm512_shuffle_i32x4::<0b11_01_11_01>(v[2], v[3]),
            );
            // Chunk c holds 4 lanes of row c and of row c + 4: interleave and fold them.
            let z = _mm512_add_epi32(
                _mm512_unpacklo_epi32(rows_0123, rows_4567),
                _mm512_unpackhi_epi32(rows_0123, rows_4567),
            );
            let y = _mm512_add_epi32(z, _mm512_shuffle_epi32::<0b01_00_11_10>(z));
            // Row c's total is lane 4c, row c + 4's is lane 4c + 1.
            let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
            _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, y))
        }
    }
}

super::backend!(
    "avx512",
    features: "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    detect: ["avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"],
    int_dot: DpbusdZmm
);
