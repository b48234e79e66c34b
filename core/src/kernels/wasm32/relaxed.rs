//! The relaxed-simd backend: the simd128 backend with the integer dot of 4-bit weights taken by
//! `i16x8.relaxed_dot_i8x16_i7x16_s`, the activations as the signed operand and the
//! unpacked nibbles (0..=15) as the 7-bit one. Its result is implementation-defined only when
//! that operand exceeds 127, so here it is the exact dot on every engine. Q4_0's `q - 8` is
//! taken as `dot(q, x) - 8 * sum_x` (rule 3's block sum). Q8_0 weights and the IQ4 levels are
//! signed (-127..=127), so they keep simd128's widening dot. The K-quants' unsigned quants (at
//! most 63, Q6_K's q + 32) are the 7-bit operand too. Optimized twins of reference.rs,
//! bit-identical.

use core::arch::wasm32::*;

use super::common::{
    dot_widened, unpack_nibble_columns, unpack_q5_columns, IntDot, KIntDot, Widen,
};
use crate::quant::BlockQ8Act;

super::common::backend!("relaxed", int_dot: RelaxedDot);

/// The 4 activation bytes `x[4k..4k+4]` in every i32 lane, for the 8 (or 4) columns of a block.
#[inline(always)]
fn broadcast_columns(x: &BlockQ8Act) -> [v128; 8] {
    std::array::from_fn(|k| {
        let b = &x.qs[4 * k..4 * k + 4];
        u32x4_splat(u32::from_le_bytes([
            b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
        ]))
    })
}

/// `relaxed_dot_i8x16_i7x16` with the weights' nibbles (0..=15) as the 7-bit operand.
pub struct RelaxedDot;

/// Lane r of half h: Σ over the block of x_i * u_i for row 4h + r, u in 0..=15, exact. Each
/// `relaxed_dot` takes one column: 4 bytes of each of 4 rows against the same 4 activations,
/// into i16 pair sums; the 8 columns' pair sums are added as i16 (|sum| <= 8 * 2 * 128 * 15 =
/// 30720, no overflow), then each row's two lanes widened and added.
#[inline(always)]
fn dot_nibbles(u: &([[v128; 4]; 2], [[v128; 4]; 2]), x: &[v128; 8]) -> [v128; 2] {
    let (lo, hi) = u;
    std::array::from_fn(|h| {
        let mut pairs = i16x8_relaxed_dot_i8x16_i7x16(x[0], lo[h][0]);
        for c in 1..4 {
            pairs = i16x8_add(pairs, i16x8_relaxed_dot_i8x16_i7x16(x[c], lo[h][c]));
        }
        for c in 0..4 {
            pairs = i16x8_add(pairs, i16x8_relaxed_dot_i8x16_i7x16(x[4 + c], hi[h][c]));
        }
        i32x4_extadd_pairwise_i16x8(pairs)
    })
}

macro_rules! relaxed_nibbles {
    ($tile:ty, $offset:literal) => {
        impl IntDot<$tile> for RelaxedDot {
            type Weights = ([[v128; 4]; 2], [[v128; 4]; 2]);
            type Activations = [v128; 8];
            const OFFSET: i32 = $offset;
            #[inline(always)]
            fn weights(tile: &$tile) -> Self::Weights {
                unpack_nibble_columns(&tile.qs)
            }
            #[inline(always)]
            fn activations(block: &BlockQ8Act) -> [v128; 8] {
                broadcast_columns(block)
            }
            #[inline(always)]
            fn dot(w: &Self::Weights, x: &[v128; 8]) -> [v128; 2] {
                dot_nibbles(w, x)
            }
        }
    };
}

// Q4_0: Σ (q - 8) x = Σ q x - 8 Σ x, with Σ x the activation block's `sum` (rule 3).
relaxed_nibbles!(TileQ4_0, 8);
relaxed_nibbles!(TileQ4_1, 0);

/// As [`dot_nibbles`] for 5-bit weights (0..=31, still a 7-bit operand): 8 columns of pair
/// sums could reach 8 * 2 * 128 * 31 = 63488, past i16, so the low and high columns are each
/// summed in i16 (4 * 2 * 128 * 31 = 31744) and widened before they are added.
#[inline(always)]
fn dot_q5(u: &([[v128; 4]; 2], [[v128; 4]; 2]), x: &[v128; 8]) -> [v128; 2] {
    let (lo, hi) = u;
    std::array::from_fn(|h| {
        let mut low = i16x8_relaxed_dot_i8x16_i7x16(x[0], lo[h][0]);
        let mut high = i16x8_relaxed_dot_i8x16_i7x16(x[4], hi[h][0]);
        for c in 1..4 {
            low = i16x8_add(low, i16x8_relaxed_dot_i8x16_i7x16(x[c], lo[h][c]));
            high = i16x8_add(high, i16x8_relaxed_dot_i8x16_i7x16(x[4 + c], hi[h][c]));
        }
        i32x4_add(
            i32x4_extadd_pairwise_i16x8(low),
            i32x4_extadd_pairwise_i16x8(high),
        )
    })
}

macro_rules! relaxed_q5 {
    ($tile:ty, $offset:literal) => {
        impl IntDot<$tile> for RelaxedDot {
            type Weights = ([[v128; 4]; 2], [[v128; 4]; 2]);
            type Activations = [v128; 8];
            const OFFSET: i32 = $offset;
            #[inline(always)]
            fn weights(tile: &$tile) -> Self::Weights {
                unpack_q5_columns(&tile.qs, &tile.qh)
            }
            #[inline(always)]
            fn activations(block: &BlockQ8Act) -> [v128; 8] {
                broadcast_columns(block)
            }
            #[inline(always)]
            fn dot(w: &Self::Weights, x: &[v128; 8]) -> [v128; 2] {
                dot_q5(w, x)
            }
        }
    };
}

relaxed_q5!(TileQ5_0, 16);
relaxed_q5!(TileQ5_1, 0);

/// Signed weights outside the 7-bit operand's range take simd128's widening dot.
macro_rules! widened {
    ($tile:ty) => {
        impl IntDot<$tile> for RelaxedDot {
            type Weights = <Widen as IntDot<$tile>>::Weights;
            type Activations = <Widen as IntDot<$tile>>::Activations;
            const OFFSET: i32 = <Widen as IntDot<$tile>>::OFFSET;
            #[inline(always)]
            fn weights(tile: &$tile) -> Self::Weights {
                <Widen as IntDot<$tile>>::weights(tile)
            }
            #[inline(always)]
            fn activations(block: &BlockQ8Act) -> Self::Activations {
                <Widen as IntDot<$tile>>::activations(block)
            }
            #[inline(always)]
            fn dot(w: &Self::Weights, x: &Self::Activations) -> [v128; 2] {
                <Widen as IntDot<$tile>>::dot(w, x)
            }
        }
    };
}

// Q8_0's quants span -127..=127, IQ4_NL's levels -127..=113.
widened!(TileQ8_0);
widened!(TileIQ4NL);

/// The K-quants' sub-block halves: 4 columns of unsigned quants 0..=max_q (Q2_K 3, Q3_K's q + 4
/// 7, Q4_K 15, Q5_K 31, Q6_K's q + 32 63) against the signed activations. One column's i16 pair
/// sums are at most 2 * 128 * max_q in size (Q6_K: 16128); n columns may be added as i16 while
/// n * 2 * 128 * max_q <= 32767: all 4 up to Q5_K (4 * 256 * 31 = 31744), 2 for Q6_K
/// (2 * 256 * 63 = 32256), so Q6_K widens every 2 columns.
impl KIntDot for RelaxedDot {
    type Activations = [v128; 8];
    #[inline(always)]
    fn activations(block: &BlockQ8Act) -> [v128; 8] {
        broadcast_columns(block)
    }
    #[inline(always)]
    fn dot_half(w: &[v128; 4], x: &[v128; 8], half: usize, max_q: i32) -> v128 {
        let x = &x[4 * half..4 * half + 4];
        let pair = |c: usize| i16x8_relaxed_dot_i8x16_i7x16(x[c], w[c]);
        if 4 * 2 * 128 * max_q <= i16::MAX as i32 {
            let sum = i16x8_add(i16x8_add(pair(0), pair(1)), i16x8_add(pair(2), pair(3)));
            i32x4_extadd_pairwise_i16x8(sum)
        } else {
            i32x4_add(
                i32x4_extadd_pairwise_i16x8(i16x8_add(pair(0), pair(1))),
                i32x4_extadd_pairwise_i16x8(i16x8_add(pair(2), pair(3))),
            )
        }
    }
    /// Signed quants (IQ4_XS's levels) are no 7-bit operand: simd128's widening dot, the
    /// broadcast activation bytes sign-extended (their low 8 bytes are the column's 4 twice).
    #[inline(always)]
    fn dot_half_signed(w: &[v128; 4], x: &[v128; 8], half: usize) -> v128 {
        let x: [v128; 4] = std::array::from_fn(|c| i16x8_extend_low_i8x16(x[4 * half + c]));
        dot_widened(w, &x)
    }
}
