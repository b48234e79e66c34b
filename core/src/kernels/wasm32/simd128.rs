//! The simd128 backend: optimized twins of reference.rs, bit-identical. Integer block dots
//! widen both operands to i16 (`i16x8.extend_*_i8x16_s`) and take `i32x4.dot_i16x8_s`; rule-2
//! dots keep each 8-lane accumulator in two f32x4. The code is in `common`, shared with the
//! relaxed-simd backend.

use super::common::{self, Widen};
use crate::kernels::{Input, Kernels, Matrix};
use crate::quant::repack::{TileQ4_0, TileQ4_1, TileQ8_0};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8Act, BlockQ8_0};

pub static KERNELS: Kernels = Kernels {
    name: "simd128",
    dot_f32: common::dot_f32,
    quantize_q8: common::quantize_q8,
    dot_q4_0_q8,
    dot_q4_1_q8,
    dot_q8_0_q8,
    matmul,
    rmsnorm: common::rmsnorm,
    silu_mul: common::silu_mul,
    rope: common::rope,
    attention: common::attention,
};

/// Otherwise identical to reference::dot_q4_0_q8.
pub fn dot_q4_0_q8(w: &[BlockQ4_0], x: &[BlockQ8Act]) -> f32 {
    common::dot_q::<Widen, TileQ4_0>(w, x)
}

/// Otherwise identical to reference::dot_q4_1_q8.
pub fn dot_q4_1_q8(w: &[BlockQ4_1], x: &[BlockQ8Act]) -> f32 {
    common::dot_q::<Widen, TileQ4_1>(w, x)
}

/// Otherwise identical to reference::dot_q8_0_q8.
pub fn dot_q8_0_q8(w: &[BlockQ8_0], x: &[BlockQ8Act]) -> f32 {
    common::dot_q::<Widen, TileQ8_0>(w, x)
}

/// Otherwise identical to reference::matmul.
pub fn matmul(w: &Matrix, first_row: usize, x: &Input, out: &mut [&mut [f32]]) {
    common::matmul::<Widen>(w, first_row, x, out)
}
