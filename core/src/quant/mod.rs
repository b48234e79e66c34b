//! Tensor element types and the GGUF block formats, with llama.cpp's reference quantizers
//! (same bytes as llama-quantize writes) and exact dequantizers. Reference code, not optimized.

pub mod iq4;
pub mod kquants;
pub mod repack;

pub use half::{bf16, f16};

use kquants::KBlock;

/// GGML tensor types that inferno computes with. Other ids are named in errors only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    BF16,
}

impl GgmlType {
    /// Elements per block.
    pub const fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL => QK,
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ4_XS => kquants::QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            GgmlType::Q4_1 => std::mem::size_of::<BlockQ4_1>(),
            GgmlType::Q5_0 => std::mem::size_of::<BlockQ5_0>(),
            GgmlType::Q5_1 => std::mem::size_of::<BlockQ5_1>(),
            GgmlType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
            GgmlType::Q2_K => kquants::BlockQ2K::BYTES,
            GgmlType::Q3_K => kquants::BlockQ3K::BYTES,
            GgmlType::Q4_K => kquants::BlockQ4K::BYTES,
            GgmlType::Q5_K => kquants::BlockQ5K::BYTES,
            GgmlType::Q6_K => kquants::BlockQ6K::BYTES,
            GgmlType::IQ4_NL => std::mem::size_of::<iq4::BlockIQ4NL>(),
            GgmlType::IQ4_XS => iq4::BlockIQ4XS::BYTES,
        }
    }

    /// The GGUF type id.
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
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
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            10 => GgmlType::Q2_K,
            11 => GgmlType::Q3_K,
            12 => GgmlType::Q4_K,
            13 => GgmlType::Q5_K,
            14 => GgmlType::Q6_K,
            20 => GgmlType::IQ4_NL,
            23 => GgmlType::IQ4_XS,
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

/// Q4_0 block (GGUF spec): value j = d * ((qs\[j\] & 15) - 8), value j+16 = d * ((qs\[j\] >> 4) - 8).
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

/// Q5_0 block (GGUF spec): 5-bit quants q in 0..=31, value = d * (q - 16). The low 4 bits are
/// laid out as Q4_0's nibbles (element j low, j + 16 high nibble of `qs[j]`); bit 4 of element
/// e is bit e of the little-endian u32 `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ5_0 {
    /// Scale, f16 bits.
    pub d: u16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// Q5_1 block (GGUF spec): value = d * q + m with q in 0..=31, quants laid out as in Q5_0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ5_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum, f16 bits.
    pub m: u16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// The 32 quants (0..=31) of a 5-bit block: low nibbles from `qs`, bit 4 from `qh`.
#[inline(always)]
pub fn q5_quants(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let h = u32::from_le_bytes(qh);
    std::array::from_fn(|e| {
        let low = if e < QK / 2 {
            qs[e] & 15
        } else {
            qs[e - QK / 2] >> 4
        };
        low | ((((h >> e) & 1) as u8) << 4)
    })
}

/// The inverse of [`q5_quants`]: (qh, qs) for 32 quants in 0..=31.
fn q5_pack(q: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
    let mut h = 0u32;
    for (e, &v) in q.iter().enumerate() {
        h |= u32::from((v >> 4) & 1) << e;
    }
    let qs = std::array::from_fn(|j| (q[j] & 15) | ((q[j + QK / 2] & 15) << 4));
    (h.to_le_bytes(), qs)
}

/// Q8_0 block (GGUF spec): value = d * qs\[j\].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits.
    pub d: u16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// An activation block for the quantized matmuls (contract rule 3, ARCHITECTURE.md): not a file
/// format, so the scale stays f32 and the sums of the quants are precomputed, per 16-element half
/// because the K-quants scale each half on its own (Q4_1's whole-block sum is their sum).
#[repr(C, align(4))]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BlockQ8Act {
    pub d: f32,
    /// `[Σ qs[..16], Σ qs[16..]]`, each within ±16 * 127.
    pub sums: [i16; 2],
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8Act>() == 40);

impl BlockQ8Act {
    /// Σ of all 32 quants, exact.
    #[inline(always)]
    pub fn sum(&self) -> i32 {
        i32::from(self.sums[0]) + i32::from(self.sums[1])
    }

    /// The half sums as one i32 (first half in the low 16 bits), ready to broadcast against
    /// per-half i16 pairs in a `madd`: the field's own bytes, read as one word.
    #[inline(always)]
    pub fn sums_pair(&self) -> i32 {
        i32::from(self.sums[0] as u16) | (i32::from(self.sums[1]) << 16)
    }
}

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
    assert!(
        x.len().is_multiple_of(QK),
        "Q4_0 rows hold whole 32-element blocks"
    );
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
    assert!(
        x.len().is_multiple_of(QK),
        "Q4_1 rows hold whole 32-element blocks"
    );
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

/// llama.cpp's `quantize_row_q5_0_ref`.
pub fn quantize_q5_0(x: &[f32]) -> Vec<BlockQ5_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q5_0 rows hold whole 32-element blocks"
    );
    x.chunks_exact(QK)
        .map(|xb| {
            let mut amax = 0.0f32;
            let mut max = 0.0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            // C's (int8_t)(x + 16.5f) truncates toward zero; `as i8` does too (and saturates).
            let q: [u8; QK] = std::array::from_fn(|j| ((xb[j] * id + 16.5) as i8).min(31) as u8);
            let (qh, qs) = q5_pack(&q);
            BlockQ5_0 {
                d: f32_to_f16(d),
                qh,
                qs,
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q5_1_ref`.
pub fn quantize_q5_1(x: &[f32]) -> Vec<BlockQ5_1> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q5_1 rows hold whole 32-element blocks"
    );
    x.chunks_exact(QK)
        .map(|xb| {
            let mut min = f32::MAX;
            let mut max = -f32::MAX;
            for &v in xb {
                min = if v < min { v } else { min };
                max = if v > max { v } else { max };
            }
            let d = (max - min) / 31.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            // C's (uint8_t)(x + 0.5f): x is in [0, 31] up to rounding.
            let q: [u8; QK] = std::array::from_fn(|j| ((xb[j] - min) * id + 0.5) as u8);
            let (qh, qs) = q5_pack(&q);
            BlockQ5_1 {
                d: f32_to_f16(d),
                m: f32_to_f16(min),
                qh,
                qs,
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q8_0_ref`.
pub fn quantize_q8_0(x: &[f32]) -> Vec<BlockQ8_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q8_0 rows hold whole 32-element blocks"
    );
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

pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (v, q) in o.iter_mut().zip(q5_quants(b.qh, &b.qs)) {
            *v = d * ((q as i32 - 16) as f32);
        }
    }
}

pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for (v, q) in o.iter_mut().zip(q5_quants(b.qh, &b.qs)) {
            *v = d * (q as f32) + m;
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

pub fn q5_0_from_bytes(bytes: &[u8]) -> Vec<BlockQ5_0> {
    bytes
        .chunks_exact(22)
        .map(|c| BlockQ5_0 {
            d: u16::from_le_bytes([c[0], c[1]]),
            qh: c[2..6].try_into().unwrap(),
            qs: c[6..22].try_into().unwrap(),
        })
        .collect()
}

pub fn q5_1_from_bytes(bytes: &[u8]) -> Vec<BlockQ5_1> {
    bytes
        .chunks_exact(24)
        .map(|c| BlockQ5_1 {
            d: u16::from_le_bytes([c[0], c[1]]),
            m: u16::from_le_bytes([c[2], c[3]]),
            qh: c[4..8].try_into().unwrap(),
            qs: c[8..24].try_into().unwrap(),
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

pub fn q5_0_to_bytes(blocks: &[BlockQ5_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 22);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

pub fn q5_1_to_bytes(blocks: &[BlockQ5_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 24);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qh);
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
        GgmlType::Q4_0 => blocks_to_f32(bytes, q4_0_from_bytes, dequantize_q4_0),
        GgmlType::Q4_1 => blocks_to_f32(bytes, q4_1_from_bytes, dequantize_q4_1),
        GgmlType::Q5_0 => blocks_to_f32(bytes, q5_0_from_bytes, dequantize_q5_0),
        GgmlType::Q5_1 => blocks_to_f32(bytes, q5_1_from_bytes, dequantize_q5_1),
        GgmlType::Q8_0 => blocks_to_f32(bytes, q8_0_from_bytes, dequantize_q8_0),
        GgmlType::Q2_K => kquants::dequantize_bytes::<kquants::BlockQ2K>(bytes),
        GgmlType::Q3_K => kquants::dequantize_bytes::<kquants::BlockQ3K>(bytes),
        GgmlType::Q4_K => kquants::dequantize_bytes::<kquants::BlockQ4K>(bytes),
        GgmlType::Q5_K => kquants::dequantize_bytes::<kquants::BlockQ5K>(bytes),
        GgmlType::Q6_K => kquants::dequantize_bytes::<kquants::BlockQ6K>(bytes),
        GgmlType::IQ4_NL => blocks_to_f32(bytes, iq4::iq4_nl_from_bytes, iq4::dequantize_iq4_nl),
        GgmlType::IQ4_XS => kquants::dequantize_bytes::<iq4::BlockIQ4XS>(bytes),
    }
}

/// Stored blocks -> their values, by a type's byte decoder and dequantizer.
fn blocks_to_f32<B>(
    bytes: &[u8],
    decode: fn(&[u8]) -> Vec<B>,
    dequantize: fn(&[B], &mut [f32]),
) -> Vec<f32> {
    let blocks = decode(bytes);
    let mut out = vec![0.0; blocks.len() * QK];
    dequantize(&blocks, &mut out);
    out
}

/// Encodes f32 values as raw little-endian tensor bytes of `ty` (quantizing with llama.cpp's
/// reference quantizers, `quantize_row_*_ref`, which llama-quantize runs without an importance
/// matrix). `x.len()` must be a whole number of blocks. A NaN or infinity is an error for the
/// block types (their scale searches have no meaning for it); F32/F16/BF16 store it as is.
pub fn quantize_bytes(ty: GgmlType, x: &[f32]) -> crate::Result<Vec<u8>> {
    if ty.block_len() > 1 {
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(crate::Error::InvalidArgument(format!(
                "cannot quantize to {}: element {i} is {}",
                ty.name(),
                x[i]
            )));
        }
    }
    Ok(match ty {
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
        GgmlType::Q5_0 => q5_0_to_bytes(&quantize_q5_0(x)),
        GgmlType::Q5_1 => q5_1_to_bytes(&quantize_q5_1(x)),
        GgmlType::Q8_0 => q8_0_to_bytes(&quantize_q8_0(x)),
        GgmlType::Q2_K => kquants::blocks_to_bytes(&kquants::quantize_q2_k(x)),
        GgmlType::Q3_K => kquants::blocks_to_bytes(&kquants::quantize_q3_k(x)),
        GgmlType::Q4_K => kquants::blocks_to_bytes(&kquants::quantize_q4_k(x)),
        GgmlType::Q5_K => kquants::blocks_to_bytes(&kquants::quantize_q5_k(x)),
        GgmlType::Q6_K => kquants::blocks_to_bytes(&kquants::quantize_q6_k(x)),
        GgmlType::IQ4_NL => iq4::iq4_nl_to_bytes(&iq4::quantize_iq4_nl(x)),
        GgmlType::IQ4_XS => kquants::blocks_to_bytes(&iq4::quantize_iq4_xs(x)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of 32 values with a ramp, a large negative and a zero.
    fn block() -> [f32; QK] {
        std::array::from_fn(|i| match i {
            3 => -4.0,
            7 => 0.0,
            _ => (i as f32 - 12.5) * 0.1,
        })
    }

    #[test]
    fn q5_quants_and_pack_round_trip_every_value_0_to_31() {
        let q: [u8; QK] = std::array::from_fn(|e| ((e * 7 + 3) % 32) as u8);
        let (qh, qs) = q5_pack(&q);
        assert_eq!(q5_quants(qh, &qs), q);
        // Element e's bit 4 is bit e of qh: element 0 is 3 (no bit), element 4 is 31 (bit).
        assert_eq!(u32::from_le_bytes(qh) & 1, 0);
        assert_eq!((u32::from_le_bytes(qh) >> 4) & 1, 1);
        assert_eq!(qs[0], 3 | ((q[16] & 15) << 4));
    }

    #[test]
    fn q5_0_maps_the_largest_magnitude_to_minus_16_and_round_trips_within_half_a_step() {
        let x = block();
        let b = quantize_q5_0(&x)[0];
        let d = f16_to_f32(b.d);
        // max = -4.0 (largest magnitude), d = max / -16 = 0.25.
        assert_eq!(d, 0.25);
        assert_eq!(q5_quants(b.qh, &b.qs)[3], 0);
        let mut y = [0.0f32; QK];
        dequantize_q5_0(&[b], &mut y);
        assert_eq!(y[3], -4.0);
        assert_eq!(y[7], 0.0);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= d / 2.0 + 1e-6, "{a} vs {b}");
        }
        let bytes = q5_0_to_bytes(&[b]);
        assert_eq!(bytes.len(), 22);
        assert_eq!(q5_0_from_bytes(&bytes), [b]);
        assert_eq!(dequantize_bytes(GgmlType::Q5_0, &bytes), y);
    }

    #[test]
    fn q5_1_spans_min_to_max_in_31_steps_and_round_trips_within_half_a_step() {
        let x = block();
        let b = quantize_q5_1(&x)[0];
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        assert_eq!(m, -4.0);
        assert_eq!(d, f16_to_f32(f32_to_f16((1.85 - -4.0) / 31.0)));
        let q = q5_quants(b.qh, &b.qs);
        assert_eq!((q[3], q[31]), (0, 31));
        let mut y = [0.0f32; QK];
        dequantize_q5_1(&[b], &mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= d / 2.0 + 1e-3, "{a} vs {b}");
        }
        let bytes = q5_1_to_bytes(&[b]);
        assert_eq!(bytes.len(), 24);
        assert_eq!(q5_1_from_bytes(&bytes), [b]);
        assert_eq!(GgmlType::from_id(7), Some(GgmlType::Q5_1));
        assert_eq!(GgmlType::Q5_0.bytes_for(64), Some(44));
    }
}
