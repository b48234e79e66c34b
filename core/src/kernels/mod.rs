//! Kernels: THE reduction contract and the per-backend function tables.
//!
//! Every floating-point result of the forward pass is defined by [`reference`]; every backend
//! (reference, AVX2, AVX-VNNI, AVX-512, wasm simd128, relaxed-simd) must return the same bits for
//! any batch size, thread count and tile configuration. The rules, normative (DESIGN.md §3):
//!
//! 1. No fused multiply-add: every `a * b + c` rounds the product, then the sum.
//! 2. f32 dot of length n: element i goes to accumulator `acc[(i / 8) % 4][i % 8]`, added in
//!    increasing i; then `s[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])` and the result
//!    is `((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7))` ([`reference::dot_by`]).
//! 3. Activations of quantized matmuls: per 32-block, `d = amax / 127`,
//!    `q = round_ties_even(x * (127 / amax))` in [-127, 127], `sum = Σ q` ([`reference::quantize_q8`]).
//! 4. Quantized row dot: exact i32 sum per block, then in block order `acc + isum * (dw * dx)`
//!    (Q4_1 adds `+ sum_x * (mw * dx)` inside the bracket).
//! 5. One `exp` ([`math::exp`]); SiLU `g / (1 + exp(-g)) * u`; RMSNorm
//!    `(x * (1 / sqrt(dot(x,x)/n + eps))) * w`; RoPE tables from libm, pairs (i, i + head_dim/2).
//! 6. Attention: online softmax over 64-position blocks in order, f16 K/V read back exactly.
//! 7. Threads and tiles split only independent outputs; a batch computes each token with the
//!    single-token sequence of operations.

pub mod math;
pub mod reference;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8Act, BlockQ8_0, GgmlType, QK};
use crate::{Error, Result};

/// A weight matrix of `rows` x `cols` (row-major, `cols` contiguous), as the kernels read it.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: MatrixData,
}

#[derive(Debug, Clone)]
pub enum MatrixData {
    F32(Vec<f32>),
    /// f16 bits.
    F16(Vec<u16>),
    /// bf16 bits.
    BF16(Vec<u16>),
    Q4_0(Vec<BlockQ4_0>),
    Q4_1(Vec<BlockQ4_1>),
    Q8_0(Vec<BlockQ8_0>),
}

impl Matrix {
    pub fn ty(&self) -> GgmlType {
        match self.data {
            MatrixData::F32(_) => GgmlType::F32,
            MatrixData::F16(_) => GgmlType::F16,
            MatrixData::BF16(_) => GgmlType::BF16,
            MatrixData::Q4_0(_) => GgmlType::Q4_0,
            MatrixData::Q4_1(_) => GgmlType::Q4_1,
            MatrixData::Q8_0(_) => GgmlType::Q8_0,
        }
    }

    /// Quantized matrices multiply Q8 activations; float ones multiply f32 activations.
    pub fn wants_q8(&self) -> bool {
        matches!(
            self.data,
            MatrixData::Q4_0(_) | MatrixData::Q4_1(_) | MatrixData::Q8_0(_)
        )
    }

    /// Builds a matrix from raw little-endian tensor bytes, checking the size.
    pub fn from_bytes(
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Matrix> {
        use crate::quant::*;
        let n = (rows as u64).checked_mul(cols as u64);
        let expected = n.and_then(|n| ty.bytes_for(n));
        if ty.block_len() > 1 && cols % ty.block_len() != 0 || expected != Some(bytes.len() as u64)
        {
            return Err(Error::ShapeMismatch {
                name: name.to_string(),
                expected: vec![rows, cols],
                got: vec![bytes.len(), ty.block_bytes()],
            });
        }
        let data = match ty {
            GgmlType::F32 => MatrixData::F32(dequantize_bytes(ty, bytes)),
            GgmlType::F16 => MatrixData::F16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            GgmlType::BF16 => MatrixData::BF16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            GgmlType::Q4_0 => MatrixData::Q4_0(q4_0_from_bytes(bytes)),
            GgmlType::Q4_1 => MatrixData::Q4_1(q4_1_from_bytes(bytes)),
            GgmlType::Q8_0 => MatrixData::Q8_0(q8_0_from_bytes(bytes)),
        };
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
            MatrixData::Q4_0(d) => dequantize_q4_0(&d[r * nb..(r + 1) * nb], out),
            MatrixData::Q4_1(d) => dequantize_q4_1(&d[r * nb..(r + 1) * nb], out),
            MatrixData::Q8_0(d) => dequantize_q8_0(&d[r * nb..(r + 1) * nb], out),
        }
    }

    /// The same matrix with f32 elements (the `--dtype f32` verification path).
    pub fn to_f32(&self) -> Matrix {
        let mut data = vec![0.0f32; self.rows * self.cols];
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

    /// Reorders rows: row `i` of the result is row `source[i]` of `self`. Quantized rows move
    /// whole, nothing is requantized.
    pub fn permute_rows(&self, source: &[usize]) -> Matrix {
        assert_eq!(source.len(), self.rows);
        fn gather<T: Copy>(d: &[T], per_row: usize, source: &[usize]) -> Vec<T> {
            source
                .iter()
                .flat_map(|&s| d[s * per_row..(s + 1) * per_row].iter().copied())
                .collect()
        }
        let (c, nb) = (self.cols, self.cols / QK);
        let data = match &self.data {
            MatrixData::F32(d) => MatrixData::F32(gather(d, c, source)),
            MatrixData::F16(d) => MatrixData::F16(gather(d, c, source)),
            MatrixData::BF16(d) => MatrixData::BF16(gather(d, c, source)),
            MatrixData::Q4_0(d) => MatrixData::Q4_0(gather(d, nb, source)),
            MatrixData::Q4_1(d) => MatrixData::Q4_1(gather(d, nb, source)),
            MatrixData::Q8_0(d) => MatrixData::Q8_0(gather(d, nb, source)),
        };
        Matrix {
            rows: self.rows,
            cols: self.cols,
            data,
        }
    }

    /// Bytes the kernels read for one pass over the matrix.
    pub fn byte_size(&self) -> usize {
        match &self.data {
            MatrixData::F32(d) => d.len() * 4,
            MatrixData::F16(d) | MatrixData::BF16(d) => d.len() * 2,
            MatrixData::Q4_0(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q4_1(d) => std::mem::size_of_val(&d[..]),
            MatrixData::Q8_0(d) => std::mem::size_of_val(&d[..]),
        }
    }
}

/// The activations a matmul reads: f32 for float weights, Q8 blocks for quantized weights.
/// Either is `n_tokens` rows laid end to end.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    F32(&'a [f32]),
    Q8(&'a [BlockQ8Act]),
}

/// A layer's K or V cache as the attention kernel reads it.
#[derive(Debug, Clone, Copy)]
pub enum KvSlice<'a> {
    /// f16 bits: the contract's cache (rule 6).
    F16(&'a [u16]),
    /// f32: the `--dtype f32` verification path, which keeps every activation in f32.
    F32(&'a [f32]),
}

/// One backend's function table. Every entry returns the bits of its `reference::` namesake.
pub struct Kernels {
    pub name: &'static str,
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    pub quantize_q8: fn(&[f32], &mut [BlockQ8Act]),
    pub dot_q4_0_q8: fn(&[BlockQ4_0], &[BlockQ8Act]) -> f32,
    pub dot_q4_1_q8: fn(&[BlockQ4_1], &[BlockQ8Act]) -> f32,
    pub dot_q8_0_q8: fn(&[BlockQ8_0], &[BlockQ8Act]) -> f32,
    /// `out[t][i] = dot(w[first_row + i], x[t])` for every token t.
    pub matmul: fn(&Matrix, usize, &Input, &mut [&mut [f32]]),
    pub rmsnorm: fn(&[f32], &[f32], f32, &mut [f32]),
    pub silu_mul: fn(&mut [f32], &[f32]),
    pub rope: fn(&mut [f32], usize, &[f32], &[f32]),
    /// `(q, keys, values, n_pos, stride, offset, scale, out)`, see [`reference::attention`].
    #[allow(clippy::type_complexity)]
    pub attention: fn(&[f32], KvSlice<'_>, KvSlice<'_>, usize, usize, usize, f32, &mut [f32]),
}

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
