//! WebAssembly SIMD backends, optimized twins of reference.rs that return the same bits:
//! [`simd128`] (i16 widening + `i32x4.dot_i16x8_s` integer dots) and [`relaxed`]
//! (`i32x4.relaxed_dot_i8x16_i7x16_add` with the 4-bit weights as the 7-bit operand). wasm has
//! no runtime feature detection: a backend exists when the build enables its target features
//! (the page picks the build with `WebAssembly.validate`). [`selftest`] checks every entry of
//! every backend of this build against the reference, for the Node.js runner.

#[cfg(target_feature = "simd128")]
mod common;
#[cfg(all(target_feature = "simd128", target_feature = "relaxed-simd"))]
pub mod relaxed;
#[cfg(feature = "conformance")]
pub mod selftest;
#[cfg(target_feature = "simd128")]
pub mod simd128;

use super::Kernels;

#[cfg(all(target_feature = "simd128", target_feature = "relaxed-simd"))]
static LIST: [&Kernels; 2] = [&simd128::KERNELS, &relaxed::KERNELS];
#[cfg(all(target_feature = "simd128", not(target_feature = "relaxed-simd")))]
static LIST: [&Kernels; 1] = [&simd128::KERNELS];
#[cfg(not(target_feature = "simd128"))]
static LIST: [&Kernels; 0] = [];

/// The wasm backends compiled into this build, slowest first.
pub fn available() -> &'static [&'static Kernels] {
    &LIST
}
