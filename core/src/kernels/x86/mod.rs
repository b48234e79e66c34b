//! x86-64 SIMD backends, optimized twins of reference.rs that return the same bits:
//! [`avx2`] (AVX2 + F16C, `maddubs` dots), [`avxvnni`] (256-bit VEX `vpdpbusd`) and [`avx512`]
//! (AVX-512 F/BW/VL + VNNI). The shared 256-bit code is in `common`; [`available`] detects the
//! CPU once and lists the backends this host can run, reference-to-best order left to the caller.

mod common;

pub mod avx2;
pub mod avx512;
pub mod avxvnni;

use std::sync::OnceLock;

use super::Kernels;

/// The x86 backends this host can run, slowest first (detected once).
pub fn available() -> &'static [&'static Kernels] {
    static LIST: OnceLock<Vec<&'static Kernels>> = OnceLock::new();
    LIST.get_or_init(|| {
        [
            (avx2::supported as fn() -> bool, &avx2::KERNELS),
            (avxvnni::supported, &avxvnni::KERNELS),
            (avx512::supported, &avx512::KERNELS),
        ]
        .into_iter()
        .filter(|(supported, _)| supported())
        .map(|(_, kernels)| kernels)
        .collect()
    })
}

/// Asks for the line at `at` to be fetched into every cache level: a hint that never faults,
/// whatever the address (computed with `wrapping_add`, it need not point into anything).
#[inline(always)]
pub fn prefetch(at: *const u8) {
    // SAFETY: `prefetcht0` reads nothing the program can observe and never faults; sse is part
    // of x86-64's baseline.
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast()) }
}

/// Defines a backend's `KERNELS` table, its `supported()` check (cached) and one safe entry
/// point per table entry: each checks what the reference checks, asserts the host has the
/// features (so calling a table directly on the wrong CPU panics instead of being undefined),
/// and runs the shared code compiled with those features. `$int_dot` says how the backend
/// takes an integer block dot.
macro_rules! backend {
    ($name:literal, features: $features:literal, detect: [$($feature:tt),+], int_dot: $int_dot:ty) => {
        use std::sync::OnceLock;

        use crate::kernels::x86::common::{self, BF16Lanes, F16Lanes, F32Lanes};
        use crate::kernels::{reference, with_k, Input, KMatrix, Kernels, KvHead, KvSlice, Matrix, MatrixData};
        use crate::quant::iq4::{BlockIQ4NL, TileIQ4NL};
        use crate::quant::kquants::QK_K;
        use crate::quant::repack::{TileQ4_0, TileQ4_1, TileQ5_0, TileQ5_1, TileQ8_0};
        use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8Act, BlockQ8_0, QK};

        pub static KERNELS: Kernels = Kernels {
            name: $name,
            dot_f32,
            quantize_q8,
            dot_q4_0_q8,
            dot_q4_1_q8,
            dot_q5_0_q8,
            dot_q5_1_q8,
            dot_q8_0_q8,
            dot_iq4_nl_q8,
            matmul,
            rmsnorm,
            silu_mul,
            gelu_tanh_mul,
            rope,
            attention,
        };

        /// Whether this host has every feature these kernels are compiled for (detected once).
        pub fn supported() -> bool {
            static SUPPORTED: OnceLock<bool> = OnceLock::new();
            *SUPPORTED.get_or_init(|| true $(&& std::arch::is_x86_feature_detected!($feature))+)
        }

        fn check_host() {
            assert!(supported(), concat!("the ", $name, " kernels need ", $features, ", which this CPU lacks"));
        }

        /// Otherwise identical to reference::dot_f32.
        pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
            assert_eq!(a.len(), b.len(), "dot_f32 operands differ in length");
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(a: &[f32], b: &[f32]) -> f32 {
                // SAFETY: lengths checked equal by the wrapper.
                unsafe { common::dot_f32(a, b) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(a, b) }
        }

        /// Otherwise identical to reference::quantize_q8.
        pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8Act]) {
            assert_eq!(x.len(), out.len() * QK, "quantize_q8: x must fill the blocks exactly");
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(x: &[f32], out: &mut [BlockQ8Act]) {
                // SAFETY: x fills out exactly, checked by the wrapper.
                unsafe { common::quantize_q8(x, out) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(x, out) }
        }

        macro_rules! dot_q {
            ($fn_name:ident, $block:ty, $tile:ty) => {
                #[doc = concat!("Otherwise identical to reference::", stringify!($fn_name), ".")]
                pub fn $fn_name(w: &[$block], x: &[BlockQ8Act]) -> f32 {
                    assert_eq!(w.len(), x.len(), concat!(stringify!($fn_name), ": block counts differ"));
                    check_host();
                    #[target_feature(enable = $features)]
                    unsafe fn imp(w: &[$block], x: &[BlockQ8Act]) -> f32 {
                        // SAFETY: dot_q checks its own bounds.
                        unsafe { common::dot_q::<$int_dot, $tile>(w, x) }
                    }
                    // SAFETY: check_host() found the features `imp` is compiled for.
                    unsafe { imp(w, x) }
                }
            };
        }
        dot_q!(dot_q4_0_q8, BlockQ4_0, TileQ4_0);
        dot_q!(dot_q4_1_q8, BlockQ4_1, TileQ4_1);
        dot_q!(dot_q5_0_q8, BlockQ5_0, TileQ5_0);
        dot_q!(dot_q5_1_q8, BlockQ5_1, TileQ5_1);
        dot_q!(dot_q8_0_q8, BlockQ8_0, TileQ8_0);
        dot_q!(dot_iq4_nl_q8, BlockIQ4NL, TileIQ4NL);

        /// Otherwise identical to reference::matmul.
        pub fn matmul(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]]) {
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]]) {
                let (cols, nb) = (w.cols, w.cols / QK);
                // SAFETY: every matmul_* checks its own bounds.
                unsafe {
                    match (&w.data, x) {
                        (MatrixData::Q4_1(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::Q4_0(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::Q5_0(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::Q5_1(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::Q8_0(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::IQ4_NL(d), Input::Q8(x)) => {
                            common::matmul_q::<$int_dot, _>(d, w.rows, nb, first_row, x, out)
                        }
                        (MatrixData::F32(d), Input::F32(x)) => {
                            common::matmul_f::<F32Lanes>(d, cols, first_row, x, out)
                        }
                        (MatrixData::F16(d), Input::F32(x)) => {
                            common::matmul_f::<F16Lanes>(d, cols, first_row, x, out)
                        }
                        (MatrixData::BF16(d), Input::F32(x)) => {
                            common::matmul_f::<BF16Lanes>(d, cols, first_row, x, out)
                        }
                        (MatrixData::K(k), Input::Q8(x)) => with_k!(k, d => {
                            common::matmul_k::<$int_dot, _>(d, w.rows, cols / QK_K, first_row, x, out)
                        }),
                        _ => panic!("matmul: weight type and activation type do not match"),
                    }
                }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(w, first_row, x, out) }
        }

        /// Otherwise identical to reference::rmsnorm.
        pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
            assert!(
                x.len() == weight.len() && x.len() == out.len(),
                "rmsnorm: lengths differ"
            );
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
                // SAFETY: lengths checked equal by the wrapper.
                unsafe { common::rmsnorm(x, weight, eps, out) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(x, weight, eps, out) }
        }

        /// Otherwise identical to reference::silu_mul.
        pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
            assert_eq!(gate.len(), up.len(), "silu_mul: lengths differ");
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(gate: &mut [f32], up: &[f32]) {
                // SAFETY: lengths checked equal by the wrapper.
                unsafe { common::silu_mul(gate, up) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(gate, up) }
        }
        /// Otherwise identical to reference::gelu_tanh_mul.
        pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
            assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: lengths differ");
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(gate: &mut [f32], up: &[f32]) {
                // SAFETY: lengths checked equal by the wrapper.
                unsafe { common::gelu_tanh_mul(gate, up) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(gate, up) }
        }

        /// Otherwise identical to reference::rope.
        pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
            let half = head_dim / 2;
            assert!(
                x.len() % head_dim == 0 && cos.len() == half && sin.len() == half,
                "rope: bad shapes"
            );
            check_host();
            #[target_feature(enable = $features)]
            unsafe fn imp(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
                // SAFETY: shapes checked by the wrapper.
                unsafe { common::rope(x, head_dim, cos, sin) }
            }
            // SAFETY: check_host() found the features `imp` is compiled for.
            unsafe { imp(x, head_dim, cos, sin) }
        }

        /// Otherwise identical to reference::attention (which it calls for a head_dim that is
        /// not a multiple of 8).
        pub fn attention(q: &[&[f32]], kv: &KvHead<'_>, out: &mut [&mut [f32]]) {
            reference::check_attention(q, kv, out);
            check_host();
            #[allow(clippy::too_many_arguments)]
            #[target_feature(enable = $features)]
            unsafe fn imp(
                q: &[&[f32]],
                head_dim: usize,
                keys: KvSlice<'_>,
                values: KvSlice<'_>,
                n_pos: usize,
                stride: usize,
                offset: usize,
                scale: f32,
                out: &mut [&mut [f32]],
            ) -> bool {
                // SAFETY: the wrapper's check_attention asserted the shapes the twin relies on.
                unsafe {
                    match (keys, values) {
                        (KvSlice::F16(k), KvSlice::F16(v)) => common::attention_any::<$int_dot, F16Lanes>(
                            q, head_dim, k, v, n_pos, stride, offset, scale, out,
                        ),
                        (KvSlice::F32(k), KvSlice::F32(v)) => common::attention_any::<$int_dot, F32Lanes>(
                            q, head_dim, k, v, n_pos, stride, offset, scale, out,
                        ),
                        _ => unreachable!("check_attention compared the types"),
                    }
                }
            }
            let KvHead { keys, values, positions, kv_dim, offset, head_dim, scale } = *kv;
            // SAFETY: check_host() found the features `imp` is compiled for.
            if !unsafe { imp(q, head_dim, keys, values, positions, kv_dim, offset, scale, out) } {
                reference::attention(q, kv, out);
            }
        }
    };
}

use backend;
