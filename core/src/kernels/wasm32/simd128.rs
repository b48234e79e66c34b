//! The simd128 backend: optimized twins of reference.rs, bit-identical. Integer block dots
//! widen both operands to i16 (`i16x8.extend_*_i8x16_s`) and take `i32x4.dot_i16x8_s`; rule-2
//! dots keep each 8-lane accumulator in two f32x4. The code is in `common`, shared with the
//! relaxed-simd backend.

use super::common::Widen;

super::common::backend!("simd128", int_dot: Widen);
