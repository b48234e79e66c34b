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
    /// Elements (columns) per block: [`QK`], or 256 for the super-block types.
    const COLUMNS: usize = QK;
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

/// Columns per span: a matrix's tiles are stored span by span ([`Spans`]).
pub const SPAN_COLUMNS: usize = 2048;

/// Where each tile of a matrix lies. The columns are cut into spans of [`SPAN_COLUMNS`] (the
/// last one may be shorter) and the tiles are stored span after span, each span group after
/// group, with [`span_gap`] zero tiles between spans: tile (g, b) of span s = b / per_span is
/// at `first * groups + s * gap + g * len + (b - first)`, where `first = s * per_span` is the
/// span's first block and `len` its blocks. A matrix of one span (at most 2048 columns) is
/// simply group after group.
///
/// Why: a one-token matmul walks the tiles in memory order, span after span, group after group,
/// so the activations it reads on every group are one span's (2.3 KB of Q8 blocks), which stay
/// in L1 beside the streaming tiles. Walking whole rows of 5632 columns (the TinyLlama-shape
/// down projection) read 6.3 KB of activations per group next to 25 KB of tiles, more than L1
/// holds. Measured on an AMD EPYC Zen 4, 1 thread, eight 2048 x 5632 matrices from DRAM, one
/// token, GB/s whole rows / spans (three alternated runs): Q4_0 26-29 / 32-34 (the same bytes as
/// 2048-column matrices: 32-35), Q4_K 26-30 / 31-33, Q6_K 19-20 / 26-27. In the TinyLlama-shape
/// Q4_K_M model (`inferno bench --profile`, 1 thread, after 50 tokens) the down projections
/// took 7.7 / 7.8 ms per token before, 6.8 / 7.3 after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spans {
    /// Row groups.
    pub groups: usize,
    /// Blocks per row.
    pub blocks: usize,
    /// Blocks per whole span.
    pub per_span: usize,
    /// Zero tiles between one span and the next (see [`span_gap`]).
    pub gap: usize,
}

/// Tiles of `tile_bytes` that keep consecutive spans at least 1 KiB (16 cache lines) apart
/// beyond their length. A span's length is a multiple of 4 KiB for the usual shapes (256 groups
/// of 64 Q4_0 tiles: 2.25 MiB), so without a gap a group's runs in every span would start at the
/// same L1 set, and a batch, which rereads a group's tiles from L1 once per few tokens, would
/// pile them into the same 16 of its 64 sets (9 lines in 8 ways). Measured on Zen 4, 1 thread,
/// 64 tokens by two 2048 x 5632 Q4_0 matrices (four alternated runs): 81-83 GB/s-times-tokens
/// without a gap, 86-87 with; Q4_K and Q6_K within noise.
pub fn span_gap(tile_bytes: usize) -> usize {
    1024usize.div_ceil(tile_bytes.max(1))
}

impl Spans {
    /// The layout of `rows` rows of `blocks` tiles of type T.
    pub fn new<T: Tile>(rows: usize, blocks: usize) -> Spans {
        Spans {
            groups: rows.div_ceil(TILE_ROWS),
            blocks,
            per_span: (SPAN_COLUMNS / T::COLUMNS).max(1),
            gap: span_gap(std::mem::size_of::<T>()),
        }
    }

    /// The layout of `tiles`, a whole matrix of `blocks` blocks per row.
    pub fn of<T: Tile>(tiles: &[T], blocks: usize) -> Spans {
        let mut spans = Spans::new::<T>(0, blocks);
        let gaps = spans.gap * spans.count().saturating_sub(1);
        spans.groups = tiles.len().saturating_sub(gaps) / blocks.max(1);
        spans
    }

    /// Tokens up to which a matmul walks the spans one at a time ([`Spans::walks`]).
    pub const FEW_TOKENS: usize = 4;

    /// How a matmul of `n_tokens` walks the spans: each item the spans (indices for
    /// [`Spans::span`]) that one walk over the row groups takes in each group's pass. A few
    /// tokens (decode, a speculative verify) take one span per walk, the tiles in memory order,
    /// so one span's activations stay in L1; each pass continues the sums the outputs hold. A
    /// batch takes every span in one walk, its sums in registers throughout: it rereads a
    /// group's tiles from cache once per few tokens, and a group's tiles of every span in cache
    /// are what it needs (64 tokens by two 2048 x 5632 matrices, 1 thread on Zen 4,
    /// GB/s-times-tokens, a span per walk / every span per walk: Q4_0 80-82 / 80-81 before the
    /// batch's prefetch of the next group, Q4_K 54-55 / 54-57). A matrix without columns still
    /// has one (empty) walk, so its outputs are written.
    pub fn walks(&self, n_tokens: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
        let (walks, per_walk) = if n_tokens <= Self::FEW_TOKENS {
            (self.count().max(1), 1)
        } else {
            (1, self.count())
        };
        (0..walks).map(move |w| w * per_walk..(w + 1) * per_walk)
    }

    /// Tiles in all, gaps included.
    pub fn tiles(&self) -> usize {
        self.groups * self.blocks + self.gap * self.count().saturating_sub(1)
    }

    /// How many spans.
    pub fn count(&self) -> usize {
        self.blocks.div_ceil(self.per_span)
    }

    /// Span i as (first block, blocks).
    #[inline(always)]
    pub fn span(&self, i: usize) -> (usize, usize) {
        let first = i * self.per_span;
        (first, self.per_span.min(self.blocks - first))
    }

    /// Each span as (first block, blocks), in order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, usize)> {
        let spans = *self;
        (0..spans.count()).map(move |i| spans.span(i))
    }

    /// The index of group g's first tile in the span (first, len) of [`Spans::iter`]: its `len`
    /// tiles follow it.
    #[inline(always)]
    pub fn run(&self, g: usize, (first, len): (usize, usize)) -> usize {
        first * self.groups + first / self.per_span * self.gap + g * len
    }

    /// The index of tile (g, b).
    pub fn index(&self, g: usize, b: usize) -> usize {
        let first = b / self.per_span * self.per_span;
        self.run(g, (first, self.per_span.min(self.blocks - first))) + b - first
    }

    /// Group g's tiles in block order.
    pub fn row_tiles<'t, T>(&self, tiles: &'t [T], g: usize) -> impl Iterator<Item = &'t T> {
        let spans = *self;
        spans.iter().flat_map(move |span| {
            let at = spans.run(g, span);
            &tiles[at..at + span.1]
        })
    }
}

/// Tiles of `rows` rows of `blocks_per_row` blocks, from row-major blocks (`row(r)` gives row
/// r's blocks, borrowed or decoded on the spot: a matrix read from file bytes row by row never
/// holds a second whole copy besides its tiles), laid out as [`Spans`] says.
pub fn tile_rows<T: Tile, R: AsRef<[T::Block]>>(
    rows: usize,
    blocks_per_row: usize,
    row: impl Fn(usize) -> R,
) -> Buf<T> {
    let spans = Spans::new::<T>(rows, blocks_per_row);
    // Written in place: a weight matrix is never in memory twice while it is repacked.
    let mut tiles = Buf::filled(T::ZERO, spans.tiles());
    for r in 0..rows {
        let blocks = row(r);
        let blocks = blocks.as_ref();
        assert_eq!(blocks.len(), blocks_per_row, "tile_rows: bad row length");
        let (g, lane) = (r / TILE_ROWS, r % TILE_ROWS);
        for (b, block) in blocks.iter().enumerate() {
            tiles[spans.index(g, b)].set_block(lane, block);
        }
    }
    tiles
}

/// Row r's blocks, in order, read back from tiles.
pub fn untile_row<T: Tile>(tiles: &[T], blocks_per_row: usize, r: usize) -> Vec<T::Block> {
    let lane = r % TILE_ROWS;
    Spans::of(tiles, blocks_per_row)
        .row_tiles(tiles, r / TILE_ROWS)
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

    #[test]
    fn tiles_of_rows_11_blocks_133_lie_in_spans_of_64_blocks_and_round_trip() {
        let (rows, nb) = (11, 133);
        let blocks: Vec<BlockQ4_0> = (0..rows * nb)
            .map(|i| BlockQ4_0 {
                d: i as u16,
                qs: [(i % 251) as u8; 16],
            })
            .collect();
        let tiles: Buf<TileQ4_0> = tile_rows(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        let spans = Spans::new::<TileQ4_0>(rows, nb);
        assert_eq!(
            spans.iter().collect::<Vec<_>>(),
            [(0, 64), (64, 64), (128, 5)]
        );
        // 8 zero tiles of 144 bytes (1152) between spans.
        assert_eq!(
            (spans.gap, spans.tiles(), tiles.len()),
            (8, 2 * 133 + 16, 2 * 133 + 16)
        );
        // Span 1 starts after both groups' first 64 tiles and a gap; group 1's run follows
        // group 0's.
        assert_eq!(spans.index(1, 64), 2 * 64 + 8 + 64);
        assert_eq!(spans.index(1, 130), 2 * 128 + 16 + 5 + 2);
        assert_eq!(tiles[2 * 64 + 8 + 64].block(2), blocks[10 * nb + 64]);
        assert_eq!(tiles[2 * 64], TileQ4_0::ZERO);
        assert_eq!(Spans::of(&tiles, nb), spans);
        for r in 0..rows {
            assert_eq!(untile_row(&tiles, nb, r), &blocks[r * nb..(r + 1) * nb]);
        }
    }

    #[test]
    fn walks_of_blocks_133_take_a_span_each_up_to_4_tokens_and_all_3_from_5() {
        // Each walk as (first span, end span).
        let walks = |spans: Spans, n| spans.walks(n).map(|w| (w.start, w.end)).collect::<Vec<_>>();
        let spans = Spans::new::<TileQ4_0>(8, 133);
        assert_eq!(walks(spans, 1), [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(walks(spans, 4), [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(walks(spans, 5), [(0, 3)]);
        // No columns: one empty walk, so a matmul still writes its (zero) outputs.
        let empty = Spans::new::<TileQ4_0>(8, 0);
        assert_eq!(walks(empty, 1), [(0, 1)]);
        assert_eq!(empty.span(0), (0, 0));
        assert_eq!(walks(empty, 64), [(0, 0)]);
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
