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
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: avx512vnni and avx512vl are enabled in the caller.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
}

super::backend!(
    "avx512",
    features: "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    detect: ["avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"],
    int_dot: DpbusdEvex
);
