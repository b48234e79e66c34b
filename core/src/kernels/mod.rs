//! Kernels: THE reduction contract and the per-backend function tables.
//!
//! Every floating-point result of the forward pass is defined by [`reference`](mod@reference); every backend
//! (reference, AVX2, AVX-VNNI, AVX-512, wasm simd128, relaxed-simd) must return the same bits for
//! any batch size, thread count and tile configuration. The rules, normative (ARCHITECTURE.md section 4, where they are written in full):
//!
//! 1. No fused multiply-add: every `a * b + c` rounds the product, then the sum.
//! 2. f32 dot of length n: element i goes to accumulator `acc[(i / 8) % 4][i % 8]`, added in
//!    increasing i; then `s[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])` and the result
//!    is `((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7))` ([`reference::dot_by`]).
//! 3. Activations of quantized matmuls: per 32-block, `d = amax / 127`,
//!    `q = round_ties_even(x * (127 / amax))` in [-127, 127], `sum = Σ q` ([`reference::quantize_q8`]).
//! 4. Quantized row dot: exact i32 sum per block, then in block order `acc + isum * (dw * dx)`
//!    (Q4_1 and Q5_1 add `+ sum_x * (mw * dx)` inside the bracket).
//! 5. One `exp` ([`math::exp`]); SiLU `g / (1 + exp(-g)) * u`; RMSNorm
//!    `(x * (1 / sqrt(dot(x,x)/n + eps))) * w`; RoPE tables from libm, pairs (i, i + head_dim/2).
//! 6. Attention: online softmax over 64-position blocks in order, f16 K/V read back exactly.
//! 7. Threads and tiles split only independent outputs; a batch computes each token with the
//!    single-token sequence of operations.

// Test code, compiled only for tests and the `conformance` feature (the test crates and the wasm
// self test turn it on): seeded data, and the one suite every backend is checked with.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod math;
pub mod reference;
#[cfg(any(test, feature = "conformance"))]
pub mod testdata;
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)] // SIMD loads and stores
pub mod wasm32;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // #[target_feature] functions and SIMD loads and stores
pub mod x86;

#[allow(unsafe_code)] // disjoint output slices handed to threads
pub mod tiles;

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::formats::Release;
use crate::memory::{Arena, Buf};

/// How many bytes ahead of the tile being read a one-token matmul prefetches weights that lie in
/// 2 MiB pages (0: not at all; only the x86 backends prefetch). A property of the machine, not
/// of a model or a backend: AMD Zen 4's own prefetchers stream huge pages well and the extra
/// instructions only cost there, while a Zen 3 core's do not run far enough ahead (TinyLlama-shape
/// Q4_K_M decode on 1 thread, four alternated runs each: 18.7-20.7 tok/s without, 22.8-24.3 at
/// 8 KiB). The load-time tuner times it (`Tuning::timed_streaming`) and sets it for the
/// process. It never changes a result.
static STREAM_PREFETCH: AtomicUsize = AtomicUsize::new(0);

/// Sets [`stream_prefetch`] for every matmul of this process from now on.
pub fn set_stream_prefetch(bytes: usize) {
    STREAM_PREFETCH.store(bytes, Ordering::Relaxed);
}

/// Bytes ahead that one-token matmuls prefetch weights in 2 MiB pages ([`set_stream_prefetch`]).
pub fn stream_prefetch() -> usize {
    STREAM_PREFETCH.load(Ordering::Relaxed)
}

/// The wrapping sum of `data`, read in order with eight independent sums (bound by the loads,
/// not by one chain of adds), each 64 bytes' line fetched `ahead` bytes before it is read as
/// the one-token matmuls fetch weights (0, or a target without prefetches: the CPU's own
/// prefetchers alone). `inferno bench`'s bandwidth probe reads memory both ways, so the roof it
/// reports is not below a way the matmuls read.
pub fn sum_ahead(data: &[u64], ahead: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if ahead != 0 {
        let at = data.as_ptr().cast::<u8>();
        return sum_lines(data, |i| x86::prefetch(at.wrapping_add(64 * i + ahead)));
    }
    let _ = ahead;
    // A loop of its own: no test per line keeps it the plain loop the compiler vectorizes.
    sum_lines(data, |_| {})
}

/// [`sum_ahead`]'s loop, calling `before(i)` before reading line i.
#[inline(always)]
fn sum_lines(data: &[u64], before: impl Fn(usize)) -> u64 {
    let mut acc = [0u64; 8];
    let lines = data.chunks_exact(8);
    let tail = lines.remainder();
    for (i, line) in lines.enumerate() {
        before(i);
        for (a, &x) in acc.iter_mut().zip(line) {
            *a = a.wrapping_add(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(tail) {
        *a = a.wrapping_add(x);
    }
    acc.iter().fold(0u64, |s, &a| s.wrapping_add(a))
}
use crate::quant::iq4::{BlockIQ4NL, TileIQ4NL, TileIQ4XS};
use crate::quant::kquants::{
    blocks_from_bytes, KBlock, TileQ2K, TileQ3K, TileQ4K, TileQ5K, TileQ6K, QK_K,
};
use crate::quant::repack::{
    tile_rows, untile_row, Tile, TileQ4_0, TileQ4_1, TileQ5_0, TileQ5_1, TileQ8_0, TILE_ROWS,
};
use crate::quant::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8Act, BlockQ8_0, GgmlType, QK,
};
use crate::{Error, Result};

/// A weight matrix of `rows` x `cols`, as the kernels read it.
///
/// Float matrices are row-major (`cols` contiguous). Quantized matrices are stored ONCE, as
/// row-interleaved tiles ([`crate::quant::repack`]): rows in groups of [`TILE_ROWS`] = 8, and
/// tile (group g, block b) holds block b of rows 8g .. 8g + 8 (8 scales, 8 Q4_1 mins, then the
/// quants interleaved in 4-byte columns), at the index [`crate::quant::repack::Spans::index`]
/// gives: spans of 2048 columns one after the other, each group after group. One tile per
/// (group, block); the rows of a last partial group past `rows` are zero padding. Lane r of a
/// tile's block is `tile.block(r)` ([`Tile::block`]).
#[derive(Debug, Clone)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: MatrixData,
}

#[derive(Debug, Clone)]
#[allow(non_camel_case_types)]
pub enum MatrixData {
    F32(Buf<f32>),
    /// f16 bits.
    F16(Buf<u16>),
    /// bf16 bits.
    BF16(Buf<u16>),
    /// Row-interleaved tiles, see [`Matrix`].
    Q4_0(Buf<TileQ4_0>),
    Q4_1(Buf<TileQ4_1>),
    Q5_0(Buf<TileQ5_0>),
    Q5_1(Buf<TileQ5_1>),
    Q8_0(Buf<TileQ8_0>),
    IQ4_NL(Buf<TileIQ4NL>),
    /// A K-quant (super-blocks of 256), in tiles of 8 rows.
    K(KMatrix),
}

/// The tiles of a K-quant matrix, one variant per type.
#[derive(Debug, Clone)]
#[allow(non_camel_case_types)]
pub enum KMatrix {
    Q2_K(Buf<TileQ2K>),
    Q3_K(Buf<TileQ3K>),
    Q4_K(Buf<TileQ4K>),
    Q5_K(Buf<TileQ5K>),
    Q6_K(Buf<TileQ6K>),
    /// IQ4_XS: super-blocks of 256 with sub-block scales, as the K-quants.
    IQ4_XS(Buf<TileIQ4XS>),
}

/// `$body` once for whichever K type `$k` holds, with `$t` bound to its tiles.
macro_rules! with_k {
    ($k:expr, $t:ident => $body:expr) => {
        match $k {
            KMatrix::Q2_K($t) => $body,
            KMatrix::Q3_K($t) => $body,
            KMatrix::Q4_K($t) => $body,
            KMatrix::Q5_K($t) => $body,
            KMatrix::Q6_K($t) => $body,
            KMatrix::IQ4_XS($t) => $body,
        }
    };
}
pub(crate) use with_k;

impl KMatrix {
    pub fn ty(&self) -> GgmlType {
        match self {
            KMatrix::Q2_K(_) => GgmlType::Q2_K,
            KMatrix::Q3_K(_) => GgmlType::Q3_K,
            KMatrix::Q4_K(_) => GgmlType::Q4_K,
            KMatrix::Q5_K(_) => GgmlType::Q5_K,
            KMatrix::Q6_K(_) => GgmlType::Q6_K,
            KMatrix::IQ4_XS(_) => GgmlType::IQ4_XS,
        }
    }

    /// Tiles of `rows` rows of `cols / 256` super-blocks from stored bytes, telling `release`
    /// of the rows consumed as it goes ([`ReleasingRows`]).
    fn from_bytes(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
        release: Release<'_>,
    ) -> KMatrix {
        fn tiles<T: Tile>(rows: usize, cols: usize, bytes: &[u8], release: Release<'_>) -> Buf<T>
        where
            T::Block: KBlock,
        {
            let source = ReleasingRows::new(rows, bytes, release);
            tile_rows::<T, _>(rows, cols / QK_K, |r| {
                blocks_from_bytes::<T::Block>(source.row(r))
            })
        }
        match ty {
            GgmlType::Q2_K => KMatrix::Q2_K(tiles(rows, cols, bytes, release)),
            GgmlType::Q3_K => KMatrix::Q3_K(tiles(rows, cols, bytes, release)),
            GgmlType::Q4_K => KMatrix::Q4_K(tiles(rows, cols, bytes, release)),
            GgmlType::Q5_K => KMatrix::Q5_K(tiles(rows, cols, bytes, release)),
            GgmlType::Q6_K => KMatrix::Q6_K(tiles(rows, cols, bytes, release)),
            GgmlType::IQ4_XS => KMatrix::IQ4_XS(tiles(rows, cols, bytes, release)),
            _ => unreachable!("KMatrix::from_bytes is called for K-quant types only"),
        }
    }
}

/// Little-endian u16 values (f16 / bf16 bits) of `bytes`, written in place.
fn u16_le(bytes: &[u8]) -> Buf<u16> {
    let mut d = Buf::filled(0u16, bytes.len() / 2);
    for (o, c) in d.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = u16::from_le_bytes([c[0], c[1]]);
    }
    d
}

impl Matrix {
    pub fn ty(&self) -> GgmlType {
        match self.data {
            MatrixData::F32(_) => GgmlType::F32,
            MatrixData::F16(_) => GgmlType::F16,
            MatrixData::BF16(_) => GgmlType::BF16,
            MatrixData::Q4_0(_) => GgmlType::Q4_0,
            MatrixData::Q4_1(_) => GgmlType::Q4_1,
            MatrixData::Q5_0(_) => GgmlType::Q5_0,
            MatrixData::Q5_1(_) => GgmlType::Q5_1,
            MatrixData::Q8_0(_) => GgmlType::Q8_0,
            MatrixData::IQ4_NL(_) => GgmlType::IQ4_NL,
            MatrixData::K(ref k) => k.ty(),
        }
    }

    /// Quantized matrices multiply Q8 activations; float ones multiply f32 activations.
    pub fn wants_q8(&self) -> bool {
        matches!(
            self.data,
            MatrixData::Q4_0(_)
                | MatrixData::Q4_1(_)
                | MatrixData::Q5_0(_)
                | MatrixData::Q5_1(_)
                | MatrixData::Q8_0(_)
                | MatrixData::IQ4_NL(_)
                | MatrixData::K(_)
        )
    }

    /// Quant blocks per row (`cols / 32`).
    pub fn blocks_per_row(&self) -> usize {
        self.cols / QK
    }

    /// Row groups of a quantized matrix (`rows` / 8 rounded up).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(TILE_ROWS)
    }

    /// A Q4_0 matrix from row-major blocks (`rows * cols / 32` of them), repacked into tiles.
    pub fn from_q4_0(rows: usize, cols: usize, blocks: &[BlockQ4_0]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_q4_0: block count");
        let tiles = tile_rows::<TileQ4_0, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::Q4_0(tiles),
        }
    }

    /// A Q4_1 matrix from row-major blocks, repacked into tiles.
    pub fn from_q4_1(rows: usize, cols: usize, blocks: &[BlockQ4_1]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_q4_1: block count");
        let tiles = tile_rows::<TileQ4_1, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::Q4_1(tiles),
        }
    }

    /// A Q5_0 matrix from row-major blocks, repacked into tiles.
    pub fn from_q5_0(rows: usize, cols: usize, blocks: &[BlockQ5_0]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_q5_0: block count");
        let tiles = tile_rows::<TileQ5_0, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::Q5_0(tiles),
        }
    }

    /// A Q5_1 matrix from row-major blocks, repacked into tiles.
    pub fn from_q5_1(rows: usize, cols: usize, blocks: &[BlockQ5_1]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_q5_1: block count");
        let tiles = tile_rows::<TileQ5_1, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::Q5_1(tiles),
        }
    }

    /// A Q8_0 matrix from row-major blocks, repacked into tiles.
    pub fn from_q8_0(rows: usize, cols: usize, blocks: &[BlockQ8_0]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_q8_0: block count");
        let tiles = tile_rows::<TileQ8_0, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::Q8_0(tiles),
        }
    }

    /// An IQ4_NL matrix from row-major blocks, repacked into tiles.
    pub fn from_iq4_nl(rows: usize, cols: usize, blocks: &[BlockIQ4NL]) -> Matrix {
        let nb = cols / QK;
        assert_eq!(blocks.len(), rows * nb, "from_iq4_nl: block count");
        let tiles = tile_rows::<TileIQ4NL, _>(rows, nb, |r| &blocks[r * nb..(r + 1) * nb]);
        Matrix {
            rows,
            cols,
            data: MatrixData::IQ4_NL(tiles),
        }
    }

    /// Builds a matrix from raw little-endian tensor bytes, checking the size.
    pub fn from_bytes(
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Matrix> {
        Self::from_bytes_releasing(name, ty, rows, cols, bytes, Release::default())
    }

    /// [`Matrix::from_bytes`], telling `release` of the bytes already copied as the rows are
    /// tiled (every few MiB, and the whole tensor at the end), so a caller reading a memory map
    /// can drop those pages while the tensor is still being built.
    pub fn from_bytes_releasing(
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
        release: Release<'_>,
    ) -> Result<Matrix> {
        use crate::quant::iq4::iq4_nl_from_bytes;
        use crate::quant::*;
        let n = (rows as u64).checked_mul(cols as u64);
        let expected = n.and_then(|n| ty.bytes_for(n));
        if ty.block_len() > 1 && !cols.is_multiple_of(ty.block_len()) {
            return Err(Error::ShapeMismatch {
                name: name.to_string(),
                expected: vec![rows, cols.next_multiple_of(ty.block_len())],
                got: vec![rows, cols],
            });
        }
        if expected != Some(bytes.len() as u64) {
            return Err(Error::TensorBytes {
                name: name.to_string(),
                ty: ty.name(),
                rows,
                cols,
                expected_bytes: expected.unwrap_or(u64::MAX),
                got_bytes: bytes.len() as u64,
            });
        }
        // Decoded a row at a time into the tiles: the largest tensor (Gemma 3's 178 MB token
        // embedding) never sits in memory twice while it is repacked.
        let source = ReleasingRows::new(rows, bytes, release);
        macro_rules! by_rows {
            ($decode:ident) => {
                tile_rows(rows, cols / QK, |r| $decode(source.row(r)))
            };
        }
        let data = match ty {
            // Written in place, as the tiles are: a big tensor is never in memory twice.
            GgmlType::F32 => {
                let mut d = Buf::filled(0.0f32, bytes.len() / 4);
                for (o, c) in d.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
                MatrixData::F32(d)
            }
            GgmlType::F16 => MatrixData::F16(u16_le(bytes)),
            GgmlType::BF16 => MatrixData::BF16(u16_le(bytes)),
            GgmlType::Q4_0 => MatrixData::Q4_0(by_rows!(q4_0_from_bytes)),
            GgmlType::Q4_1 => MatrixData::Q4_1(by_rows!(q4_1_from_bytes)),
            GgmlType::Q5_0 => MatrixData::Q5_0(by_rows!(q5_0_from_bytes)),
            GgmlType::Q5_1 => MatrixData::Q5_1(by_rows!(q5_1_from_bytes)),
            GgmlType::Q8_0 => MatrixData::Q8_0(by_rows!(q8_0_from_bytes)),
            GgmlType::IQ4_NL => MatrixData::IQ4_NL(by_rows!(iq4_nl_from_bytes)),
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ4_XS => {
                MatrixData::K(KMatrix::from_bytes(ty, rows, cols, bytes, release))
            }
        };
        release.tell(bytes);
        Ok(Matrix { rows, cols, data })
    }

    /// Row `r` as f32 (exact dequantization), e.g. for an embedding lookup.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        use crate::quant::*;
        let c = self.cols;
        assert!(
            r < self.rows && out.len() == c,
            "row_f32: bad row or length"
        );
        let nb = c / QK;
        match &self.data {
            MatrixData::F32(d) => out.copy_from_slice(&d[r * c..(r + 1) * c]),
            MatrixData::F16(d) => out
                .iter_mut()
                .zip(&d[r * c..(r + 1) * c])
                .for_each(|(o, &h)| *o = f16_to_f32(h)),
            MatrixData::BF16(d) => out
                .iter_mut()
                .zip(&d[r * c..(r + 1) * c])
                .for_each(|(o, &h)| *o = bf16_to_f32(h)),
            MatrixData::Q4_0(t) => dequantize_q4_0(&untile_row(t, nb, r), out),
            MatrixData::Q4_1(t) => dequantize_q4_1(&untile_row(t, nb, r), out),
            MatrixData::Q5_0(t) => dequantize_q5_0(&untile_row(t, nb, r), out),
            MatrixData::Q5_1(t) => dequantize_q5_1(&untile_row(t, nb, r), out),
            MatrixData::Q8_0(t) => dequantize_q8_0(&untile_row(t, nb, r), out),
            MatrixData::IQ4_NL(t) => {
                crate::quant::iq4::dequantize_iq4_nl(&untile_row(t, nb, r), out)
            }
            MatrixData::K(k) => with_k!(k, t => {
                let row = untile_row(t, c / QK_K, r);
                for (b, o) in row.iter().zip(out.chunks_exact_mut(QK_K)) {
                    b.dequantize(o.try_into().expect("a super-block of output"));
                }
            }),
        }
    }

    /// The same matrix with f32 elements (the `--dtype f32` verification path).
    pub fn to_f32(&self) -> Matrix {
        let mut data = Buf::filled(0.0f32, self.rows * self.cols);
        for (r, row) in data
            .chunks_exact_mut(self.cols.max(1))
            .enumerate()
            .take(self.rows)
        {
            self.row_f32(r, row);
        }
        Matrix {
            rows: self.rows,
            cols: self.cols,
            data: MatrixData::F32(data),
        }
    }

    /// Rows taken from other matrices: row `i` of the result is row `r` of `parts[p]` for the
    /// i-th `(p, r)` of `source`. Quantized rows move whole, nothing is requantized. `None` if
    /// the parts differ in type or columns.
    pub fn gather_rows(parts: &[&Matrix], source: &[(usize, usize)]) -> Option<Matrix> {
        let first = parts.first()?;
        let cols = first.cols;
        if parts.iter().any(|m| m.cols != cols || m.ty() != first.ty()) {
            return None;
        }
        fn plain<T: Copy>(d: &[T], per_row: usize, r: usize) -> &[T] {
            &d[r * per_row..(r + 1) * per_row]
        }
        fn tiled<T: Tile>(parts: &[&[T]], nb: usize, source: &[(usize, usize)]) -> Buf<T> {
            let rows: Vec<Vec<T::Block>> = source
                .iter()
                .map(|&(p, r)| untile_row(parts[p], nb, r))
                .collect();
            tile_rows::<T, _>(rows.len(), nb, |i| &rows[i])
        }
        let (c, nb) = (cols, cols / QK);
        macro_rules! each {
            ($variant:ident, $gather:expr) => {{
                let ds: Vec<_> = parts
                    .iter()
                    .map(|m| match &m.data {
                        MatrixData::$variant(d) => &d[..],
                        _ => unreachable!("types checked equal"),
                    })
                    .collect();
                MatrixData::$variant($gather(&ds).into())
            }};
        }
        let flat = |ds: &[&[f32]]| -> Vec<f32> {
            source
                .iter()
                .flat_map(|&(p, r)| plain(ds[p], c, r).iter().copied())
                .collect()
        };
        let flat16 = |ds: &[&[u16]]| -> Vec<u16> {
            source
                .iter()
                .flat_map(|&(p, r)| plain(ds[p], c, r).iter().copied())
                .collect()
        };
        let data = match first.data {
            MatrixData::F32(_) => each!(F32, flat),
            MatrixData::F16(_) => each!(F16, flat16),
            MatrixData::BF16(_) => each!(BF16, flat16),
            MatrixData::Q4_0(_) => each!(Q4_0, |ds: &[&[TileQ4_0]]| tiled(ds, nb, source)),
            MatrixData::Q4_1(_) => each!(Q4_1, |ds: &[&[TileQ4_1]]| tiled(ds, nb, source)),
            MatrixData::Q5_0(_) => each!(Q5_0, |ds: &[&[TileQ5_0]]| tiled(ds, nb, source)),
            MatrixData::Q5_1(_) => each!(Q5_1, |ds: &[&[TileQ5_1]]| tiled(ds, nb, source)),
            MatrixData::Q8_0(_) => each!(Q8_0, |ds: &[&[TileQ8_0]]| tiled(ds, nb, source)),
            MatrixData::IQ4_NL(_) => {
                each!(IQ4_NL, |ds: &[&[TileIQ4NL]]| tiled(ds, nb, source))
            }
            MatrixData::K(ref k) => {
                let nbk = cols / QK_K;
                macro_rules! each_k {
                    ($variant:ident) => {{
                        let ds: Vec<_> = parts
                            .iter()
                            .map(|m| match &m.data {
                                MatrixData::K(KMatrix::$variant(d)) => &d[..],
                                _ => unreachable!("types checked equal"),
                            })
                            .collect();
                        MatrixData::K(KMatrix::$variant(tiled(&ds, nbk, source)))
                    }};
                }
                match k {
                    KMatrix::Q2_K(_) => each_k!(Q2_K),
                    KMatrix::Q3_K(_) => each_k!(Q3_K),
                    KMatrix::Q4_K(_) => each_k!(Q4_K),
                    KMatrix::Q5_K(_) => each_k!(Q5_K),
                    KMatrix::Q6_K(_) => each_k!(Q6_K),
                    KMatrix::IQ4_XS(_) => each_k!(IQ4_XS),
                }
            }
        };
        Some(Matrix {
            rows: source.len(),
            cols,
            data,
        })
    }

    /// Reorders rows: row `i` of the result is row `source[i]` of `self`. Quantized rows move
    /// whole, nothing is requantized.
    pub fn permute_rows(&self, source: &[usize]) -> Matrix {
        assert_eq!(source.len(), self.rows);
        let source: Vec<(usize, usize)> = source.iter().map(|&r| (0, r)).collect();
        Matrix::gather_rows(&[self], &source).expect("one part always matches itself")
    }

    /// The rows of `parts` one after another (e.g. Q, K and V as one matrix), or `None` if they
    /// differ in type or columns.
    pub fn concat_rows(parts: &[&Matrix]) -> Option<Matrix> {
        let source: Vec<(usize, usize)> = parts
            .iter()
            .enumerate()
            .flat_map(|(p, m)| (0..m.rows).map(move |r| (p, r)))
            .collect();
        Matrix::gather_rows(parts, &source)
    }

    /// Moves the matrix into `arena` (a copy there; the old buffer is freed), or leaves it
    /// where it is when the arena has no room.
    pub fn move_into(&mut self, arena: &mut Arena) {
        fn place<T: Copy>(d: &mut Buf<T>, arena: &mut Arena) {
            let data = std::mem::replace(d, Buf::from(Vec::new()));
            *d = arena.take(data);
        }
        match &mut self.data {
            MatrixData::F32(d) => place(d, arena),
            MatrixData::F16(d) | MatrixData::BF16(d) => place(d, arena),
            MatrixData::Q4_0(d) => place(d, arena),
            MatrixData::Q4_1(d) => place(d, arena),
            MatrixData::Q5_0(d) => place(d, arena),
            MatrixData::Q5_1(d) => place(d, arena),
            MatrixData::Q8_0(d) => place(d, arena),
            MatrixData::IQ4_NL(d) => place(d, arena),
            MatrixData::K(k) => with_k!(k, d => place(d, arena)),
        }
    }

    /// Bytes the kernels read for one pass over the matrix.
    pub fn byte_size(&self) -> usize {
        match &self.data {
            MatrixData::F32(d) => d.len() * 4,
            MatrixData::F16(d) | MatrixData::BF16(d) => d.len() * 2,
            MatrixData::Q4_0(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q4_1(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q5_0(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q5_1(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q8_0(d) => std::mem::size_of_val(&d[..]),
            MatrixData::IQ4_NL(d) => std::mem::size_of_val(&d[..]),
            MatrixData::K(k) => with_k!(k, t => std::mem::size_of_val(&t[..])),
        }
    }
}

/// Bytes between two release calls while a matrix is tiled: large enough that the calls cost
/// nothing next to the copying, small enough that a big tensor (a 262144-row embedding) never
/// has its whole source resident beside its tiles.
const RELEASE_BYTES: usize = 4 << 20;

/// How far each release range reaches back into the previous one. A hook that drops whole
/// memory pages inside the range it is told about (native/src/load.rs) would otherwise keep the
/// page that straddles two ranges; 64 KiB covers every page size in use.
const RELEASE_OVERLAP: usize = 64 << 10;

/// The rows of a tensor's stored bytes, handed out in order while the rows before are told to
/// a [`Release`] every [`RELEASE_BYTES`].
struct ReleasingRows<'b, 'r> {
    bytes: &'b [u8],
    row_bytes: usize,
    release: Release<'r>,
    /// Bytes already told (the rows before this offset).
    released: std::cell::Cell<usize>,
}

impl<'b, 'r> ReleasingRows<'b, 'r> {
    fn new(rows: usize, bytes: &'b [u8], release: Release<'r>) -> Self {
        ReleasingRows {
            bytes,
            row_bytes: bytes.len().checked_div(rows).unwrap_or(0),
            release,
            released: std::cell::Cell::new(0),
        }
    }

    /// Row r's bytes; rows are asked for in increasing order (as [`tile_rows`] does), so every
    /// row before r has been copied.
    fn row(&self, r: usize) -> &'b [u8] {
        let start = r * self.row_bytes;
        let told = self.released.get();
        if start - told >= RELEASE_BYTES {
            self.release
                .tell(&self.bytes[told.saturating_sub(RELEASE_OVERLAP)..start]);
            self.released.set(start);
        }
        &self.bytes[start..start + self.row_bytes]
    }
}

/// The activations a matmul reads: f32 for float weights, Q8 blocks for quantized weights.
/// Either is `n_tokens` rows laid end to end.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    F32(&'a [f32]),
    Q8(&'a [BlockQ8Act]),
}

impl<'a> Input<'a> {
    /// The same activations from token `t` on (`cols` values per token).
    pub fn from_token(&self, t: usize, cols: usize) -> Input<'a> {
        match *self {
            Input::F32(x) => Input::F32(&x[t * cols..]),
            Input::Q8(x) => Input::Q8(&x[t * (cols / QK)..]),
        }
    }
}

/// A layer's K or V cache as the attention kernel reads it.
#[derive(Debug, Clone, Copy)]
pub enum KvSlice<'a> {
    /// f16 bits: the contract's cache (rule 6).
    F16(&'a [u16]),
    /// f32: the `--dtype f32` verification path, which keeps every activation in f32.
    F32(&'a [f32]),
}

impl<'a> KvSlice<'a> {
    /// The cache from position `first` on (rows of `kv_dim`): attention over a sliding window.
    pub fn from_position(self, first: usize, kv_dim: usize) -> KvSlice<'a> {
        match self {
            KvSlice::F16(s) => KvSlice::F16(&s[first * kv_dim..]),
            KvSlice::F32(s) => KvSlice::F32(&s[first * kv_dim..]),
        }
    }
}

/// One KV head of a layer's cache, as the attention kernel reads it: position p's key is
/// `keys[p * kv_dim + offset ..][.. head_dim]`, its value the same range of `values`.
#[derive(Debug, Clone, Copy)]
pub struct KvHead<'a> {
    pub keys: KvSlice<'a>,
    pub values: KvSlice<'a>,
    /// Cached positions the first query sees; query i sees `positions + i`.
    pub positions: usize,
    /// Elements from one cached position's row to the next: head_dim for the model's cache,
    /// which keeps each KV head's rows contiguous (model::cache); kv_dim for a cache of rows
    /// holding every KV head, as the conformance tests build.
    pub kv_dim: usize,
    /// Where this head's vectors start in a row.
    pub offset: usize,
    pub head_dim: usize,
    /// The score scale, `1 / sqrt(head_dim)`.
    pub scale: f32,
}

/// One backend's function table. Every entry returns the bits of its `reference::` namesake.
pub struct Kernels {
    pub name: &'static str,
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    pub quantize_q8: fn(&[f32], &mut [BlockQ8Act]),
    pub dot_q4_0_q8: fn(&[BlockQ4_0], &[BlockQ8Act]) -> f32,
    pub dot_q4_1_q8: fn(&[BlockQ4_1], &[BlockQ8Act]) -> f32,
    pub dot_q5_0_q8: fn(&[BlockQ5_0], &[BlockQ8Act]) -> f32,
    pub dot_q5_1_q8: fn(&[BlockQ5_1], &[BlockQ8Act]) -> f32,
    pub dot_q8_0_q8: fn(&[BlockQ8_0], &[BlockQ8Act]) -> f32,
    pub dot_iq4_nl_q8: fn(&[BlockIQ4NL], &[BlockQ8Act]) -> f32,
    /// `out[t][i] = dot(w[first_row + i], x[t])` for every token t.
    pub matmul: fn(&Matrix, usize, &Input, &mut [&mut [f32]]),
    pub rmsnorm: fn(&[f32], &[f32], f32, &mut [f32]),
    pub silu_mul: fn(&mut [f32], &[f32]),
    /// Every backend runs the reference: the FFN's gate is a small part of a forward.
    pub gelu_tanh_mul: fn(&mut [f32], &[f32]),
    pub rope: fn(&mut [f32], usize, &[f32], &[f32]),
    /// `(q, kv, out)` for consecutive query tokens and the query heads of one KV head, see
    /// [`reference::attention`].
    #[allow(clippy::type_complexity)]
    pub attention: fn(&[&[f32]], &KvHead<'_>, &mut [&mut [f32]]),
}

/// Backends are told apart by name (one table per backend).
impl PartialEq for Kernels {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Kernels {}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({})", self.name)
    }
}

impl Kernels {
    /// Every backend this host can run, reference first.
    pub fn available() -> Vec<&'static Kernels> {
        let mut all = vec![&reference::KERNELS];
        #[cfg(target_arch = "x86_64")]
        all.extend(x86::available());
        #[cfg(target_arch = "wasm32")]
        all.extend(wasm32::available());
        all
    }

    /// The fastest backend this host can run.
    pub fn best() -> &'static Kernels {
        Self::available()
            .last()
            .copied()
            .unwrap_or(&reference::KERNELS)
    }

    /// A backend by name ("reference", "avx2", ...), if this host can run it.
    pub fn by_name(name: &str) -> Result<&'static Kernels> {
        let all = Self::available();
        all.iter().copied().find(|k| k.name == name).ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|k| k.name).collect();
            Error::InvalidArgument(format!(
                "kernels '{name}' are not available on this host (available: {})",
                names.join(", ")
            ))
        })
    }

    /// `INFERNO_KERNELS` if set, else the best backend.
    pub fn select() -> Result<&'static Kernels> {
        match std::env::var("INFERNO_KERNELS") {
            Ok(name) if !name.is_empty() => Self::by_name(&name),
            _ => Ok(Self::best()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4096 x 2048 Q8_0 tensor (8.9 MB): the loader is told of the rows already tiled about
    /// every 4 MiB, in order, each range reaching back over the last, then of the whole tensor.
    #[test]
    fn from_bytes_releasing_q8_0_4096_rows_tells_4_mib_ranges_in_order_then_the_whole() {
        let (rows, cols) = (4096, 2048);
        let bytes = vec![0u8; rows * cols / QK * 34];
        let told = std::cell::RefCell::new(Vec::new());
        let base = bytes.as_ptr() as usize;
        let hook = |b: &[u8]| {
            let at = b.as_ptr() as usize - base;
            told.borrow_mut().push((at, at + b.len()));
        };
        Matrix::from_bytes_releasing(
            "w",
            GgmlType::Q8_0,
            rows,
            cols,
            &bytes,
            Release(Some(&hook)),
        )
        .unwrap();
        let told = told.into_inner();
        assert_eq!(told.last(), Some(&(0, bytes.len())));
        let chunks = &told[..told.len() - 1];
        assert_eq!(chunks.len(), bytes.len() / RELEASE_BYTES);
        assert_eq!(chunks[0].0, 0);
        for pair in chunks.windows(2) {
            assert_eq!(pair[1].0, pair[0].1 - RELEASE_OVERLAP);
            assert!(pair[1].1 - pair[0].1 >= RELEASE_BYTES);
            assert!(pair[1].1 - pair[0].1 < RELEASE_BYTES + 2048 / QK * 34);
        }
    }
}
