//! The AVX-VNNI backend: the AVX2 backend with the integer block dot done by the 256-bit
//! VEX-encoded `vpdpbusd` (unsigned x signed bytes summed straight to i32, no saturation).
//! Optimized twins of reference.rs, bit-identical.

use std::arch::x86_64::*;

/// `vpdpbusd` (VEX): 8 i32 lanes whose total is Σ u_i * s_i.
pub struct DpbusdVex;

impl common::IntDot for DpbusdVex {
    const SATURATES: bool = false;
    const TOKENS: usize = 4;
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avxvnni is enabled in the caller.
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
    }
}

super::backend!(
    "avxvnni",
    features: "avx2,f16c,avxvnni",
    detect: ["avx2", "f16c", "avxvnni"],
    int_dot: DpbusdVex
);
