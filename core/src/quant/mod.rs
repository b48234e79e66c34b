//! Tensor element types and the GGUF block formats, with llama.cpp's reference quantizers
//! (same bytes as llama-quantize writes) and exact dequantizers. Reference code, not optimized.

pub mod repack;

pub use half::{bf16, f16};

/// GGML tensor types that inferno computes with. Other ids are named in errors only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
}

impl GgmlType {
    /// Elements per block.
    pub const fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => QK,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            GgmlType::Q4_1 => std::mem::size_of::<BlockQ4_1>(),
            GgmlType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
        }
    }

    /// The GGUF type id.
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q8_0 => 8,
            GgmlType::BF16 => 30,
        }
    }

    /// The type for a GGUF id, or `None` for a type inferno does not compute with.
    pub const fn from_id(id: u32) -> Option<GgmlType> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    /// GGML's name for any type id (for error messages).
    pub fn name_of_id(id: u32) -> &'static str {
        const NAMES: [&str; 40] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
        ];
        NAMES.get(id as usize).copied().unwrap_or("unknown")
    }

    pub fn name(self) -> &'static str {
        Self::name_of_id(self.id())
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of blocks
    /// (or the size overflows).
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let block = self.block_len() as u64;
        if n % block != 0 {
            return None;
        }
        (n / block).checked_mul(self.block_bytes() as u64)
    }
}

/// Elements per quantization block (all block formats here).
pub const QK: usize = 32;

/// Q4_0 block (GGUF spec): value j = d * ((qs[j] & 15) - 8), value j+16 = d * ((qs[j] >> 4) - 8).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ4_0 {
    /// Scale, f16 bits.
    pub d: u16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Q4_1 block (GGUF spec): value = d * q + m with q in 0..=15, nibbles laid out as in Q4_0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ4_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum, f16 bits.
    pub m: u16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// Q8_0 block (GGUF spec): value = d * qs[j].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits.
    pub d: u16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// An activation block for the quantized matmuls (contract rule 3, ARCHITECTURE.md): not a file
/// format, so the scale stays f32 and the sum of the quants is precomputed for Q4_1.
#[repr(C, align(4))]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BlockQ8Act {
    pub d: f32,
    pub sum: i32,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8Act>() == 40);

/// f16 bits -> f32, exact. Written out rather than `half`'s, which checks the CPU for F16C on
/// every call (this sits in the attention and dot loops).
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits & 0x8000) as u32) << 16;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    match exponent {
        // Zero and subnormals: mantissa * 2^-24, exact in f32.
        0 => f32::from_bits((mantissa as f32 * (1.0 / 16_777_216.0)).to_bits() | sign),
        // Infinity and NaN (payload kept).
        31 => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

/// f32 -> f16 bits, round to nearest even (as the KV cache and GGUF writers need).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 -> bf16 bits, round to nearest even; NaN stays NaN.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

/// llama.cpp's `quantize_row_q4_0_ref`.
pub fn quantize_q4_0(x: &[f32]) -> Vec<BlockQ4_0> {
    assert!(x.len() % QK == 0, "Q4_0 rows hold whole 32-element blocks");
    x.chunks_exact(QK)
        .map(|xb| {
            // The element of largest magnitude, with its sign: d maps it to -8 exactly.
            let mut amax = 0.0f32;
            let mut max = 0.0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut qs = [0u8; QK / 2];
            for j in 0..QK / 2 {
                let x0 = xb[j] * id;
                let x1 = xb[QK / 2 + j] * id;
                let q0 = ((x0 + 8.5) as i8).min(15) as u8;
                let q1 = ((x1 + 8.5) as i8).min(15) as u8;
                qs[j] = q0 | (q1 << 4);
            }
            BlockQ4_0 {
                d: f32_to_f16(d),
                qs,
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q4_1_ref`.
pub fn quantize_q4_1(x: &[f32]) -> Vec<BlockQ4_1> {
    assert!(x.len() % QK == 0, "Q4_1 rows hold whole 32-element blocks");
    x.chunks_exact(QK)
        .map(|xb| {
            let mut min = f32::MAX;
            let mut max = -f32::MAX;
            for &v in xb {
                min = if v < min { v } else { min };
                max = if v > max { v } else { max };
            }
            let d = (max - min) / 15.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut qs = [0u8; QK / 2];
            for j in 0..QK / 2 {
                let x0 = (xb[j] - min) * id;
                let x1 = (xb[QK / 2 + j] - min) * id;
                let q0 = ((x0 + 0.5) as i8).min(15) as u8;
                let q1 = ((x1 + 0.5) as i8).min(15) as u8;
                qs[j] = q0 | (q1 << 4);
            }
            BlockQ4_1 {
                d: f32_to_f16(d),
                m: f32_to_f16(min),
                qs,
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q8_0_ref`.
pub fn quantize_q8_0(x: &[f32]) -> Vec<BlockQ8_0> {
    assert!(x.len() % QK == 0, "Q8_0 rows hold whole 32-element blocks");
    x.chunks_exact(QK)
        .map(|xb| {
            let amax = xb
                .iter()
                .fold(0.0f32, |a, v| if v.abs() > a { v.abs() } else { a });
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut qs = [0i8; QK];
            for (q, &v) in qs.iter_mut().zip(xb) {
                // roundf: half away from zero, as in C.
                *q = (v * id).round() as i8;
            }
            BlockQ8_0 {
                d: f32_to_f16(d),
                qs,
            }
        })
        .collect()
}

pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for j in 0..QK / 2 {
            o[j] = d * (((b.qs[j] & 15) as i32 - 8) as f32);
            o[j + QK / 2] = d * (((b.qs[j] >> 4) as i32 - 8) as f32);
        }
    }
}

pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for j in 0..QK / 2 {
            o[j] = d * ((b.qs[j] & 15) as f32) + m;
            o[j + QK / 2] = d * ((b.qs[j] >> 4) as f32) + m;
        }
    }
}

pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (v, &q) in o.iter_mut().zip(&b.qs) {
            *v = d * q as f32;
        }
    }
}

/// Decodes little-endian block bytes (as stored in GGUF) into blocks. `bytes.len()` must be a
/// multiple of the block size; the caller has checked it against the tensor's shape.
pub fn q4_0_from_bytes(bytes: &[u8]) -> Vec<BlockQ4_0> {
    bytes
        .chunks_exact(18)
        .map(|c| BlockQ4_0 {
            d: u16::from_le_bytes([c[0], c[1]]),
            qs: c[2..18].try_into().unwrap(),
        })
        .collect()
}

pub fn q4_1_from_bytes(bytes: &[u8]) -> Vec<BlockQ4_1> {
    bytes
        .chunks_exact(20)
        .map(|c| BlockQ4_1 {
            d: u16::from_le_bytes([c[0], c[1]]),
            m: u16::from_le_bytes([c[2], c[3]]),
            qs: c[4..20].try_into().unwrap(),
        })
        .collect()
}

pub fn q8_0_from_bytes(bytes: &[u8]) -> Vec<BlockQ8_0> {
    bytes
        .chunks_exact(34)
        .map(|c| BlockQ8_0 {
            d: u16::from_le_bytes([c[0], c[1]]),
            qs: std::array::from_fn(|j| c[2 + j] as i8),
        })
        .collect()
}

pub fn q4_0_to_bytes(blocks: &[BlockQ4_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 18);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

pub fn q4_1_to_bytes(blocks: &[BlockQ4_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 20);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

pub fn q8_0_to_bytes(blocks: &[BlockQ8_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 34);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend(b.qs.iter().map(|&q| q as u8));
    }
    out
}

/// Decodes raw little-endian tensor bytes of any supported type to f32 (exact).
pub fn dequantize_bytes(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        GgmlType::Q4_0 => {
            let blocks = q4_0_from_bytes(bytes);
            let mut out = vec![0.0; blocks.len() * QK];
            dequantize_q4_0(&blocks, &mut out);
            out
        }
        GgmlType::Q4_1 => {
            let blocks = q4_1_from_bytes(bytes);
            let mut out = vec![0.0; blocks.len() * QK];
            dequantize_q4_1(&blocks, &mut out);
            out
        }
        GgmlType::Q8_0 => {
            let blocks = q8_0_from_bytes(bytes);
            let mut out = vec![0.0; blocks.len() * QK];
            dequantize_q8_0(&blocks, &mut out);
            out
        }
    }
}

/// Encodes f32 values as raw little-endian tensor bytes of `ty` (quantizing with llama.cpp's
/// reference quantizers). `x.len()` must be a whole number of blocks.
pub fn quantize_bytes(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| f32_to_f16(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .flat_map(|&v| f32_to_bf16(v).to_le_bytes())
            .collect(),
        GgmlType::Q4_0 => q4_0_to_bytes(&quantize_q4_0(x)),
        GgmlType::Q4_1 => q4_1_to_bytes(&quantize_q4_1(x)),
        GgmlType::Q8_0 => q8_0_to_bytes(&quantize_q8_0(x)),
    }
}
