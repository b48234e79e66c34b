//! The AVX-VNNI backend: the AVX2 backend with the integer block dot done by the 256-bit
//! VEX-encoded `vpdpbusd` (unsigned x signed bytes summed straight to i32, no saturation).
//! Optimized twins of reference.rs, bit-identical.

use std::arch::x86_64::*;

/// `vpdpbusd` (VEX): 8 i32 lanes whose total is Σ u_i * s_i.
pub struct DpbusdVex;

impl common::IntDot for DpbusdVex {
    const SATURATES: bool = false;
    type Packed = [__m256i; common::ROWS];
    #[inline(always)]
    unsafe fn pack(w: [__m256i; common::ROWS]) -> Self::Packed {
        w
    }
    #[inline(always)]
    unsafe fn dot8<B: common::WeightBlock>(w: &Self::Packed, x: __m256i) -> __m256i {
        // SAFETY: forwarded to the caller.
        unsafe { common::dot8_by_rows::<Self, B>(w, x) }
    }
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avxvnni is enabled in the caller.
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s) }
    }
}

super::backend!(
    "avxvnni",
    features: "avx2,f16c,avxvnni",
    detect: ["avx2", "f16c", "avxvnni"],
    int_dot: DpbusdVex
);
