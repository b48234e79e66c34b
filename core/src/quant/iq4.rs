//! The 4-bit non-linear quants (GGUF spec, llama.cpp's `block_iq4_nl` and `block_iq4_xs`): a
//! 4-bit index picks one of 16 fixed levels ([`LEVELS`], closer together near zero, where
//! weights cluster), times a scale.
//!
//! - IQ4_NL: blocks of 32 with one f16 scale, the indices laid out as Q4_0's nibbles. Rule 4 as
//!   Q8_0: `acc + isum * (dw * dx)`, isum the exact dot of the levels with the activations.
//! - IQ4_XS: super-blocks of 256 with an f16 scale `d` and a 6-bit scale `ls` per 32-element
//!   sub-block (`ls - 32` in -32..=31). To the kernels it is a K-quant ([`KBlock`]): rule 4's
//!   super-block sequence with both halves of a sub-block sharing the scale `ls - 32`.
//!
//! One home for both types: blocks, bytes, dequantization (llama.cpp's `dequantize_row_iq4_*`,
//! checked against the `gguf` Python package), llama-quantize's quantizer and the tiles the
//! kernels read. The levels are signed (-127..=113), so the SIMD twins take the integer dot as
//! Q8_0's signed weights do.

use super::kquants::{largest_magnitude, nearest_int, KBlock, SubBlock, QK_K};
use super::repack::{interleaved, Tile, TILE_ROWS};
use super::{f16_to_f32, f32_to_f16, QK};

/// llama.cpp's `kvalues_iq4nl`: the value of each 4-bit index, before the scale.
pub const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The 32 levels of 16 bytes of indices: element j is the low nibble of `qs[j]`, element
/// j + 16 its high nibble.
#[inline(always)]
pub fn levels_of(qs: &[u8; QK / 2]) -> [i8; QK] {
    std::array::from_fn(|e| {
        let byte = qs[e % (QK / 2)];
        LEVELS[usize::from(if e < QK / 2 { byte & 15 } else { byte >> 4 })]
    })
}

// ---------------------------------------------------------------------------------------------
// IQ4_NL

/// IQ4_NL block (GGUF spec): value j = d * LEVELS[index j], indices laid out as Q4_0's.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockIQ4NL {
    /// Scale, f16 bits.
    pub d: u16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

pub fn iq4_nl_from_bytes(bytes: &[u8]) -> Vec<BlockIQ4NL> {
    bytes
        .chunks_exact(18)
        .map(|c| BlockIQ4NL {
            d: u16::from_le_bytes([c[0], c[1]]),
            qs: c[2..18].try_into().unwrap(),
        })
        .collect()
}

pub fn iq4_nl_to_bytes(blocks: &[BlockIQ4NL]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 18);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

/// llama.cpp's `dequantize_row_iq4_nl`: `d * level`, exact (an f16 times a 7-bit integer).
pub fn dequantize_iq4_nl(blocks: &[BlockIQ4NL], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (v, q) in o.iter_mut().zip(levels_of(&b.qs)) {
            *v = d * q as f32;
        }
    }
}

/// What llama-quantize writes for IQ4_NL without an importance matrix (`quantize_iq4_nl`).
pub fn quantize_iq4_nl(x: &[f32]) -> Vec<BlockIQ4NL> {
    assert!(
        x.len().is_multiple_of(QK),
        "IQ4_NL rows hold whole 32-element blocks"
    );
    x.chunks_exact(QK)
        .map(|xb| {
            let xb: &[f32; QK] = xb.try_into().unwrap();
            let d = group_scale(xb);
            // One group: its scale is stored as it is and the indices are chosen against it.
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let l: [u8; QK] = std::array::from_fn(|j| nearest_level(id * xb[j]));
            BlockIQ4NL {
                d: f32_to_f16(d),
                qs: pack_indices(&l),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// IQ4_XS

/// IQ4_XS super-block (GGUF spec): sub-block ib's 6-bit scale `ls` is nibble ib of `scales_l`
/// (low nibble for even ib) with bits 2ib, 2ib + 1 of `scales_h` above it; its 16 bytes of
/// indices are `qs[16 ib ..]`, laid out as IQ4_NL's. value = d * (ls - 32) * level.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIQ4XS {
    pub d: u16,
    pub scales_h: u16,
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

impl BlockIQ4XS {
    /// Sub-block ib's scale `ls - 32`, in -32..=31.
    pub fn sub_scale(&self, ib: usize) -> i8 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 15;
        let high = ((self.scales_h >> (2 * ib)) & 3) as u8;
        (low | (high << 4)) as i8 - 32
    }

    /// Sets the 8 sub-block scales (each `ls - 32` in -32..=31).
    fn set_sub_scales(&mut self, scales: &[i8; 8]) {
        self.scales_h = 0;
        self.scales_l = [0; 4];
        for (ib, &s) in scales.iter().enumerate() {
            let ls = (s + 32) as u8;
            self.scales_l[ib / 2] |= (ls & 15) << (4 * (ib % 2));
            self.scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
    }

    fn sub_indices(&self, ib: usize) -> &[u8; 16] {
        self.qs[16 * ib..16 * ib + 16].try_into().unwrap()
    }
}

impl Default for BlockIQ4XS {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockIQ4XS {
    const BYTES: usize = 136;
    const HAS_MIN: bool = false;
    const ZERO: Self = BlockIQ4XS {
        d: 0,
        scales_h: 0,
        scales_l: [0; 4],
        qs: [0; 128],
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockIQ4XS {
            d: u16::from_le_bytes([b[0], b[1]]),
            scales_h: u16::from_le_bytes([b[2], b[3]]),
            scales_l: b[4..8].try_into().unwrap(),
            qs: b[8..136].try_into().unwrap(),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend_from_slice(&self.scales_h.to_le_bytes());
        out.extend_from_slice(&self.scales_l);
        out.extend_from_slice(&self.qs);
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), 0.0)
    }
    fn set_scales(&mut self, d: u16, _dmin: u16) {
        self.d = d;
    }
    /// Sub-block ib: the levels of its 16 bytes, both halves scaled by `ls - 32`.
    fn sub_blocks(&self) -> [SubBlock; 8] {
        std::array::from_fn(|ib| {
            let s = i32::from(self.sub_scale(ib));
            SubBlock {
                q: levels_of(self.sub_indices(ib)),
                scale: [s, s],
                min: [0, 0],
            }
        })
    }
    /// llama.cpp's `dequantize_row_iq4_xs`: `dl = d * (ls - 32)`, then `dl * level`, both exact.
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        for (ib, o) in out.chunks_exact_mut(QK).enumerate() {
            let dl = d * f32::from(self.sub_scale(ib));
            for (v, q) in o.iter_mut().zip(levels_of(self.sub_indices(ib))) {
                *v = dl * q as f32;
            }
        }
    }
}

/// What llama-quantize writes for IQ4_XS without an importance matrix (`quantize_iq4_xs`).
pub fn quantize_iq4_xs(x: &[f32]) -> Vec<BlockIQ4XS> {
    assert!(
        x.len().is_multiple_of(QK_K),
        "IQ4_XS rows hold whole 256-element super-blocks"
    );
    x.chunks_exact(QK_K)
        .map(|xs| {
            let groups: Vec<&[f32; QK]> =
                xs.chunks_exact(QK).map(|g| g.try_into().unwrap()).collect();
            let scales: [f32; 8] = std::array::from_fn(|ib| group_scale(groups[ib]));
            // The group scale of largest magnitude (the first of equals) maps to -32.
            let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
            for &s in &scales {
                if s.abs() > amax_scale {
                    amax_scale = s.abs();
                    max_scale = s;
                }
            }
            let d = -max_scale / 32.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut block = BlockIQ4XS {
                d: f32_to_f16(d),
                ..BlockIQ4XS::ZERO
            };
            let mut sub = [0i8; 8];
            for (ib, xb) in groups.iter().enumerate() {
                let l = nearest_int(id * scales[ib]).clamp(-32, 31);
                sub[ib] = l as i8;
                // The indices are chosen against the f32 sub-block scale, not its f16 rounding.
                let dl = d * l as f32;
                let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
                let li: [u8; QK] = std::array::from_fn(|j| nearest_level(idl * xb[j]));
                block.qs[16 * ib..16 * ib + 16].copy_from_slice(&pack_indices(&li));
            }
            block.set_sub_scales(&sub);
            block
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's `quantize_row_iq4_nl_impl` with no importance matrix and `ntry = 7`, what
// `quantize_iq4_nl` and `quantize_iq4_xs` run for llama-quantize. Every float operation is in
// the C source's order (ggml-quants.c has no fused multiply-add to contract into; see
// kquants.rs), so the bytes equal llama-quantize's.

/// `best_index_int8`: the index of the level nearest `x` (the upper one of a tie).
fn nearest_level(x: f32) -> u8 {
    let level = |i: usize| f32::from(LEVELS[i]);
    if x <= level(0) {
        return 0;
    }
    if x >= level(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < level(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - level(mu - 1) < level(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The scale of one 32-element group: the least-squares scale (weights x^2) of the indices
/// chosen for 16 candidate scales, the best by `sumqx^2 / sumq2`. 0 for a group of zeros.
fn group_scale(xb: &[f32; QK]) -> f32 {
    const NTRY: i32 = 7;
    let Some(max) = largest_magnitude(xb) else {
        return 0.0;
    };
    let level0 = f32::from(LEVELS[0]);
    // (sumqx, sumq2) for the indices nearest `id * x`.
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &x in xb {
            let q = f32::from(LEVELS[usize::from(nearest_level(id * x))]);
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = sums(1.0 / (-max / level0));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let (sumqx, sumq2) = sums((itry as f32 + level0) / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// 32 indices -> 16 bytes, element j low and j + 16 high.
fn pack_indices(l: &[u8; QK]) -> [u8; QK / 2] {
    std::array::from_fn(|j| l[j] | (l[j + QK / 2] << 4))
}

// ---------------------------------------------------------------------------------------------
// Tiles (quant::repack's layout, ARCHITECTURE.md section 5).

/// Block b of 8 rows of IQ4_NL: Q4_0's tile with the index nibbles in place of the quants.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileIQ4NL {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// `qs[32 * c + 4 * lane + j]` = byte `4c + j` of lane's block, c in 0..4.
    pub qs: [u8; TILE_ROWS * QK / 2],
}
const _: () = assert!(std::mem::size_of::<TileIQ4NL>() == 144);

impl Tile for TileIQ4NL {
    type Block = BlockIQ4NL;
    const ZERO: Self = TileIQ4NL {
        d: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK / 2],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockIQ4NL {
        BlockIQ4NL {
            d: self.d[lane],
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockIQ4NL) {
        self.d[lane] = block.d;
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

/// Super-block b of 8 rows of IQ4_XS: the f16 scales, the sub-block scales decoded
/// (`sc[ib][lane]` = ls - 32), and each sub-block's 16 bytes of indices interleaved as an
/// IQ4_NL tile's (`qs[ib]`), so a sub-block unpacks as one IQ4_NL block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileIQ4XS {
    pub d: [u16; TILE_ROWS],
    pub sc: [[i8; TILE_ROWS]; 8],
    pub qs: [[u8; TILE_ROWS * QK / 2]; 8],
}
const _: () = assert!(std::mem::size_of::<TileIQ4XS>() == 1104);

impl Tile for TileIQ4XS {
    type Block = BlockIQ4XS;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileIQ4XS {
        d: [0; TILE_ROWS],
        sc: [[0; TILE_ROWS]; 8],
        qs: [[0; TILE_ROWS * QK / 2]; 8],
    };
    fn block(&self, lane: usize) -> BlockIQ4XS {
        let mut b = BlockIQ4XS {
            d: self.d[lane],
            ..BlockIQ4XS::ZERO
        };
        b.set_sub_scales(&std::array::from_fn(|ib| self.sc[ib][lane]));
        for (i, q) in b.qs.iter_mut().enumerate() {
            *q = self.qs[i / 16][interleaved(lane, i % 16)];
        }
        b
    }
    fn set_block(&mut self, lane: usize, b: &BlockIQ4XS) {
        self.d[lane] = b.d;
        for ib in 0..8 {
            self.sc[ib][lane] = b.sub_scale(ib);
        }
        for (i, &q) in b.qs.iter().enumerate() {
            self.qs[i / 16][interleaved(lane, i % 16)] = q;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::repack::{tile_rows, untile_row};

    #[test]
    fn nearest_level_picks_the_closer_level_and_the_upper_one_of_a_tie() {
        assert_eq!(nearest_level(-1000.0), 0);
        assert_eq!(nearest_level(1000.0), 15);
        assert_eq!(nearest_level(0.0), 8); // 1 is nearer than -10
        assert_eq!(nearest_level(-4.5), 8); // tie between -10 and 1: the upper
        assert_eq!(nearest_level(-4.6), 7);
        for (i, &l) in LEVELS.iter().enumerate() {
            assert_eq!(nearest_level(f32::from(l)), i as u8);
        }
    }

    #[test]
    fn iq4_nl_block_of_ramp_round_trips_within_a_level_step_and_bytes_round_trip() {
        let x: [f32; QK] = std::array::from_fn(|i| (i as f32 - 15.5) * 0.25);
        let b = quantize_iq4_nl(&x)[0];
        let mut y = [0.0f32; QK];
        dequantize_iq4_nl(&[b], &mut y);
        let d = f16_to_f32(b.d).abs();
        // The widest gap between levels is 26 (-127 .. -104 is 23, 89 .. 113 is 24).
        for (a, v) in x.iter().zip(&y) {
            assert!((a - v).abs() <= 13.0 * d, "{a} vs {v} (d {d})");
        }
        let bytes = iq4_nl_to_bytes(&[b]);
        assert_eq!(bytes.len(), 18);
        assert_eq!(iq4_nl_from_bytes(&bytes), [b]);
        // A block of zeros: scale 0, every index the level nearest 0.
        let z = quantize_iq4_nl(&[0.0; QK])[0];
        assert_eq!((z.d, z.qs), (0, [0x88; 16]));
    }

    #[test]
    fn iq4_xs_sub_scales_round_trip_every_value_minus_32_to_31() {
        let mut b = BlockIQ4XS::ZERO;
        for base in [-32i8, -24, -16, -8, 0, 8, 16, 24] {
            let s: [i8; 8] = std::array::from_fn(|i| base + i as i8);
            b.set_sub_scales(&s);
            assert_eq!(std::array::from_fn::<i8, 8, _>(|ib| b.sub_scale(ib)), s);
        }
        let mut bytes = Vec::new();
        b.to_bytes(&mut bytes);
        assert_eq!(BlockIQ4XS::from_bytes(&bytes), b);
    }

    /// llama.cpp's test-quantize-fns: data `0.1 + 2 cos(i)`, 4096 values, error
    /// `sqrt(sum (x - y)^2) / n` below 0.002.
    #[test]
    fn iq4_nl_iq4_xs_round_trip_within_test_quantize_fns_bound_on_4096_values() {
        use crate::quant::{dequantize_bytes, quantize_bytes, GgmlType};
        let x: Vec<f32> = (0..4096).map(|i| 0.1 + 2.0 * (i as f32).cos()).collect();
        for ty in [GgmlType::IQ4_NL, GgmlType::IQ4_XS] {
            let y = dequantize_bytes(ty, &quantize_bytes(ty, &x).unwrap());
            let sum: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum();
            let error = sum.sqrt() as f32 / x.len() as f32;
            assert!(error < 0.002, "{}: {error}", ty.name());
        }
    }

    /// Zeros: IQ4_NL's scale is 0 with every index at the level nearest 0 (index 8); IQ4_XS's
    /// is -0.0 (llama.cpp's `-max_scale / 32` of a zero max_scale) with every sub-block scale
    /// at 0 (ls = 32). Both dequantize to zeros; one huge value stays within a step.
    #[test]
    fn iq4_zeros_and_one_huge_value_quantize_as_llama_cpp_does() {
        let xs = quantize_iq4_xs(&[0.0; QK_K])[0];
        assert_eq!((xs.d, xs.scales_h, xs.scales_l), (0x8000, 0xaaaa, [0; 4]));
        assert!(xs.qs.iter().all(|&q| q == 0x88));
        let mut y = [1.0f32; QK_K];
        xs.dequantize(&mut y);
        assert!(y.iter().all(|&v| v == 0.0));
        let mut x = vec![0.0f32; QK_K];
        x[37] = 1e4;
        let mut y = [0.0f32; QK_K];
        quantize_iq4_xs(&x)[0].dequantize(&mut y);
        assert!((y[37] - 1e4).abs() <= 1e4 / 8.0, "{}", y[37]);
        let mut y = vec![0.0f32; QK_K];
        dequantize_iq4_nl(&quantize_iq4_nl(&x), &mut y);
        assert!((y[37] - 1e4).abs() <= 1e4 / 8.0, "{}", y[37]);
        assert!(y.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn iq4_tiles_round_trip_11_rows_of_3_blocks() {
        let (rows, nb) = (11, 3);
        let nl: Vec<BlockIQ4NL> = (0..rows * nb)
            .map(|i| BlockIQ4NL {
                d: i as u16,
                qs: std::array::from_fn(|j| (i * 16 + j) as u8),
            })
            .collect();
        let tiles: crate::memory::Buf<TileIQ4NL> =
            tile_rows(rows, nb, |r| &nl[r * nb..(r + 1) * nb]);
        let xs: Vec<BlockIQ4XS> = (0..rows * nb)
            .map(|i| {
                let mut b = BlockIQ4XS {
                    d: i as u16,
                    qs: std::array::from_fn(|j| (i * 7 + j) as u8),
                    ..BlockIQ4XS::ZERO
                };
                b.set_sub_scales(&std::array::from_fn(|ib| ((i + ib * 5) % 64) as i8 - 32));
                b
            })
            .collect();
        let xtiles: crate::memory::Buf<TileIQ4XS> =
            tile_rows(rows, nb, |r| &xs[r * nb..(r + 1) * nb]);
        for r in 0..rows {
            assert_eq!(untile_row(&tiles, nb, r), &nl[r * nb..(r + 1) * nb]);
            assert_eq!(untile_row(&xtiles, nb, r), &xs[r * nb..(r + 1) * nb]);
        }
    }
}
