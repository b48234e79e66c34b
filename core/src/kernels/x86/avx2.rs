//! The AVX2 backend (AVX2 + F16C, no FMA): optimized twins of reference.rs, bit-identical.
//! Integer block dots take `maddubs` (unsigned x signed bytes -> i16 pairs, which the contract's
//! operand ranges keep from saturating) then `madd` with ones to i32.

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
}

super::backend!("avx2", features: "avx2,f16c", detect: ["avx2", "f16c"], int_dot: Maddubs);
