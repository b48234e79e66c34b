//! Row-interleaved weight tiles (ARCHITECTURE.md section 5): the one in-memory layout of a quantized
//! matrix, built once at load. Reference code (plain Rust); the kernels read the tiles directly.
//!
//! Rows are taken in groups of [`TILE_ROWS`]; tile (group g, block b) holds block b of rows
//! `8g .. 8g + 8`: first the 8 scales (and the 8 mins of Q4_1 / Q5_1, and the 8 high-bit words
//! of Q5_0 / Q5_1), contiguous, then the 8 rows' quants
//! interleaved in 4-byte columns: `qs[32 * c + 4 * lane + j]` is byte `4 * c + j` of row
//! `8g + lane`'s block (`c` = 0..4 for the 4-bit types, whose 16 bytes hold elements
//! `4c + j` in the low nibble and `16 + 4c + j` in the high one; 0..8 for Q8_0). So one 256-bit
//! load of column c gives every row's 4 bytes, and one `vpdpbusd` against 4 activation bytes
//! broadcast accumulates all 8 rows' dots, one row per i32 lane, with no horizontal sum.
//! A last partial group is padded with zero blocks (d = 0), whose outputs nobody reads.

use super::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::memory::Buf;

/// Rows per tile: one i32 / f32 lane of a 256-bit register each.
pub const TILE_ROWS: usize = 8;

/// Block b of 8 rows of Q4_0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ4_0 {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// `qs[32 * c + 4 * lane + j]` = byte `4c + j` of lane's block, c in 0..4.
    pub qs: [u8; TILE_ROWS * QK / 2],
}
const _: () = assert!(std::mem::size_of::<TileQ4_0>() == 144);

/// Block b of 8 rows of Q4_1.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ4_1 {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// Minimums of lanes 0..8, f16 bits.
    pub m: [u16; TILE_ROWS],
    /// As [`TileQ4_0::qs`].
    pub qs: [u8; TILE_ROWS * QK / 2],
}
const _: () = assert!(std::mem::size_of::<TileQ4_1>() == 160);

/// Block b of 8 rows of Q5_0: as [`TileQ4_0`] for the low 4 bits of each quant, plus each
/// row's `qh` as one u32 (bit e = bit 4 of element e), so the 8 rows' high bits are one
/// 256-bit load.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ5_0 {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// High bits of lanes 0..8.
    pub qh: [u32; TILE_ROWS],
    /// As [`TileQ4_0::qs`].
    pub qs: [u8; TILE_ROWS * QK / 2],
}
const _: () = assert!(std::mem::size_of::<TileQ5_0>() == 176);

/// Block b of 8 rows of Q5_1: [`TileQ5_0`] with the rows' minimums.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ5_1 {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// Minimums of lanes 0..8, f16 bits.
    pub m: [u16; TILE_ROWS],
    /// High bits of lanes 0..8.
    pub qh: [u32; TILE_ROWS],
    /// As [`TileQ4_0::qs`].
    pub qs: [u8; TILE_ROWS * QK / 2],
}
const _: () = assert!(std::mem::size_of::<TileQ5_1>() == 192);

/// Block b of 8 rows of Q8_0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ8_0 {
    /// Scales of lanes 0..8, f16 bits.
    pub d: [u16; TILE_ROWS],
    /// `qs[32 * c + 4 * lane + j]` = quant `4c + j` of lane's block, c in 0..8.
    pub qs: [i8; TILE_ROWS * QK],
}
const _: () = assert!(std::mem::size_of::<TileQ8_0>() == 272);

/// Index into a tile's interleaved quants of byte `i` of lane's block.
#[inline(always)]
pub const fn interleaved(lane: usize, i: usize) -> usize {
    32 * (i / 4) + 4 * lane + i % 4
}

/// A tile type and the GGUF block it interleaves.
pub trait Tile: Copy + Send + Sync + 'static {
    type Block: Copy + Default + Send + Sync;
    /// A tile of zero blocks (the padding).
    const ZERO: Self;
    /// The block of one lane (row), exactly as it was stored.
    fn block(&self, lane: usize) -> Self::Block;
    fn set_block(&mut self, lane: usize, block: &Self::Block);
}

impl Tile for TileQ4_0 {
    type Block = BlockQ4_0;
    const ZERO: Self = TileQ4_0 {
        d: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK / 2],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockQ4_0 {
        BlockQ4_0 {
            d: self.d[lane],
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockQ4_0) {
        self.d[lane] = block.d;
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

impl Tile for TileQ4_1 {
    type Block = BlockQ4_1;
    const ZERO: Self = TileQ4_1 {
        d: [0; TILE_ROWS],
        m: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK / 2],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockQ4_1 {
        BlockQ4_1 {
            d: self.d[lane],
            m: self.m[lane],
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockQ4_1) {
        self.d[lane] = block.d;
        self.m[lane] = block.m;
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

impl Tile for TileQ5_0 {
    type Block = BlockQ5_0;
    const ZERO: Self = TileQ5_0 {
        d: [0; TILE_ROWS],
        qh: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK / 2],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockQ5_0 {
        BlockQ5_0 {
            d: self.d[lane],
            qh: self.qh[lane].to_le_bytes(),
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockQ5_0) {
        self.d[lane] = block.d;
        self.qh[lane] = u32::from_le_bytes(block.qh);
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

impl Tile for TileQ5_1 {
    type Block = BlockQ5_1;
    const ZERO: Self = TileQ5_1 {
        d: [0; TILE_ROWS],
        m: [0; TILE_ROWS],
        qh: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK / 2],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockQ5_1 {
        BlockQ5_1 {
            d: self.d[lane],
            m: self.m[lane],
            qh: self.qh[lane].to_le_bytes(),
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockQ5_1) {
        self.d[lane] = block.d;
        self.m[lane] = block.m;
        self.qh[lane] = u32::from_le_bytes(block.qh);
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

impl Tile for TileQ8_0 {
    type Block = BlockQ8_0;
    const ZERO: Self = TileQ8_0 {
        d: [0; TILE_ROWS],
        qs: [0; TILE_ROWS * QK],
    };
    #[inline(always)]
    fn block(&self, lane: usize) -> BlockQ8_0 {
        BlockQ8_0 {
            d: self.d[lane],
            qs: std::array::from_fn(|i| self.qs[interleaved(lane, i)]),
        }
    }
    fn set_block(&mut self, lane: usize, block: &BlockQ8_0) {
        self.d[lane] = block.d;
        for (i, &q) in block.qs.iter().enumerate() {
            self.qs[interleaved(lane, i)] = q;
        }
    }
}

/// Tiles of `rows` rows of `blocks_per_row` blocks, from row-major blocks (`row(r)` gives row
/// r's blocks, borrowed or decoded on the spot: a matrix read from file bytes row by row never
/// holds a second whole copy besides its tiles). Tile (g, b) is at `g * blocks_per_row + b`.
pub fn tile_rows<T: Tile, R: AsRef<[T::Block]>>(
    rows: usize,
    blocks_per_row: usize,
    row: impl Fn(usize) -> R,
) -> Buf<T> {
    let groups = rows.div_ceil(TILE_ROWS);
    // Written in place: a weight matrix is never in memory twice while it is repacked.
    let mut tiles = Buf::filled(T::ZERO, groups * blocks_per_row);
    for r in 0..rows {
        let blocks = row(r);
        let blocks = blocks.as_ref();
        assert_eq!(blocks.len(), blocks_per_row, "tile_rows: bad row length");
        let (g, lane) = (r / TILE_ROWS, r % TILE_ROWS);
        for (b, block) in blocks.iter().enumerate() {
            tiles[g * blocks_per_row + b].set_block(lane, block);
        }
    }
    tiles
}

/// Row r's blocks, in order, read back from tiles.
pub fn untile_row<T: Tile>(tiles: &[T], blocks_per_row: usize, r: usize) -> Vec<T::Block> {
    let (g, lane) = (r / TILE_ROWS, r % TILE_ROWS);
    tiles[g * blocks_per_row..(g + 1) * blocks_per_row]
        .iter()
        .map(|t| t.block(lane))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_round_trip_every_row_and_pad_with_zeros() {
        let (rows, nb) = (11, 3);
        let blocks: Vec<BlockQ4_1> = (0..rows * nb)
            .map(|i| BlockQ4_1 {
                d: i as u16,
                m: 1000 + i as u16,
                qs: std::array::from_fn(|j| (i * 16 + j) as u8),
            })
            .collect();
        let tiles: Buf<TileQ4_1> = tile_rows(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        assert_eq!(tiles.len(), 2 * nb);
        for r in 0..rows {
            assert_eq!(untile_row(&tiles, nb, r), &blocks[r * nb..(r + 1) * nb]);
        }
        assert_eq!(tiles[nb].block(7), BlockQ4_1::default());
        // Column 1 of lane 2 is bytes 4..8 of row 2's block.
        assert_eq!(tiles[0].qs[32 + 8..32 + 12], blocks[2 * nb].qs[4..8]);
    }
}

/// The shapes every SIMD backend's quantized matmul asserts for a call over `tiles` (a tiled
/// matrix of `rows` rows and `nb` blocks per row), output rows `first_row..` and `x_blocks`
/// activation blocks: returns (tokens, output rows per token).
pub fn check_matmul_q(
    tiles: usize,
    rows: usize,
    nb: usize,
    first_row: usize,
    x_blocks: usize,
    out: &[&mut [f32]],
) -> (usize, usize) {
    let n_tokens = out.len();
    let n_rows = out.first().map_or(0, |o| o.len());
    assert!(
        out.iter().all(|o| o.len() == n_rows),
        "matmul: token outputs differ in length"
    );
    assert!(
        first_row + n_rows <= rows
            && rows.div_ceil(TILE_ROWS) * nb <= tiles
            && n_tokens * nb <= x_blocks,
        "matmul: rows or tokens out of range"
    );
    (n_tokens, n_rows)
}

/// For `groups` consecutive row groups from group `g`, of a call asking for rows
/// `first_row..end_row`: the lanes it keeps (`lo..hi` of their `TILE_ROWS * groups` lanes) and
/// where the first kept lane goes in each token's output (`at`).
pub fn group_lanes(
    g: usize,
    groups: usize,
    first_row: usize,
    end_row: usize,
) -> (usize, usize, usize) {
    let lo = first_row.max(g * TILE_ROWS) - g * TILE_ROWS;
    let hi = end_row.min((g + groups) * TILE_ROWS) - g * TILE_ROWS;
    (lo, hi, g * TILE_ROWS + lo - first_row)
}
