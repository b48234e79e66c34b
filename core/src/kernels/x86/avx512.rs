//! The AVX-512 backend (F, BW, VL, VNNI): the integer block dot is the EVEX `vpdpbusd`, and
//! every 256-bit loop may use all 32 vector registers. Optimized twins of reference.rs,
//! bit-identical.

use std::arch::x86_64::*;

/// `vpdpbusd` (EVEX, 256-bit): 8 i32 lanes whose total is Σ u_i * s_i.
pub struct DpbusdEvex;

impl common::IntDot for DpbusdEvex {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx512vnni and avx512vl are enabled in the caller.
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s) }
    }
}

super::backend!(
    "avx512",
    features: "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    detect: ["avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"],
    int_dot: DpbusdEvex
);
