//! The K-quants (GGUF spec, llama.cpp's `block_q*_K`): super-blocks of [`QK_K`] = 256 elements
//! with per-sub-block scales (and for Q2_K, Q4_K, Q5_K, minimums) quantized against one or two
//! f16 super-block scales. Block structs as stored, byte decoding, and dequantization exactly as
//! llama.cpp's `dequantize_row_q*_K` (checked against the `gguf` Python package by
//! tests/tests/gguf_reference.rs). [`KBlock::sub_blocks`] gives what the row dot of rule 4
//! reads: each 32-element sub-block's integer quants and its scale factors.

use super::{f16_to_f32, f32_to_f16};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// Q2_K: 16 sub-blocks of 16, 2-bit quants, 4-bit scale and 4-bit minimum per sub-block.
/// value = `d * (scales[s] & 15) * q - dmin * (scales[s] >> 4)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: u16,
    pub dmin: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// Q3_K: 16 sub-blocks of 16, 3-bit quants (2 low bits in `qs`, the high bit in `hmask`, set
/// meaning "no -4"), 6-bit scales (packed in 12 bytes) offset by 32. value = d * (sc - 32) * q.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// Q4_K: 8 sub-blocks of 32, 4-bit quants, 6-bit scales and minimums packed in 12 bytes.
/// value = d * sc * q - dmin * m.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4K {
    pub d: u16,
    pub dmin: u16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Q5_K: Q4_K with a fifth bit per quant in `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5K {
    pub d: u16,
    pub dmin: u16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// Q6_K: 16 sub-blocks of 16, 6-bit quants (4 low bits in `ql`, 2 high in `qh`) offset by 32,
/// i8 scales. value = d * sc * (q - 32).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// One 32-element sub-block as the row dot reads it: `q` the integer quants (offsets applied,
/// so every value is in i8), and how its two 16-element halves are scaled. The value of
/// element i of half h is `(scale_int[h] * q[i]) * d - min_int[h] * dmin` in exact arithmetic;
/// see [`KBlock::sub_blocks`] for the f32 factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubBlock {
    pub q: [i8; 32],
    /// Integer scale of each 16-element half (equal for the 32-element sub-blocks of Q4_K and
    /// Q5_K).
    pub scale: [i32; 2],
    /// Integer minimum of each half (0 for Q3_K and Q6_K).
    pub min: [i32; 2],
}

/// What every K-quant block offers the kernels and the loader.
pub trait KBlock: Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    const BYTES: usize;
    /// Whether values subtract `dmin * min` (Q2_K, Q4_K, Q5_K).
    const HAS_MIN: bool;
    /// A block of zeros (d = 0): the padding of a tile.
    const ZERO: Self;
    fn from_bytes(b: &[u8]) -> Self;
    fn to_bytes(&self, out: &mut Vec<u8>);
    /// (d, dmin) as f32 (dmin 0 for the types without minimums).
    fn scales(&self) -> (f32, f32);
    /// Sets the f16 super-block scale and (if the type has one) minimum scale.
    fn set_scales(&mut self, d: u16, dmin: u16);
    /// The 8 sub-blocks of 32 elements, in element order.
    fn sub_blocks(&self) -> [SubBlock; 8];
    /// llama.cpp's `dequantize_row_q*_K` for one block.
    fn dequantize(&self, out: &mut [f32; QK_K]);
}

/// llama.cpp's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block j of Q4_K / Q5_K.
#[inline(always)]
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q3_K's 16 scales (0..=63, before the -32), unpacked from 12 bytes as llama.cpp does.
pub fn q3k_scales(packed: &[u8; 12]) -> [i8; 16] {
    let word = |i: usize| u32::from_le_bytes(packed[4 * i..4 * i + 4].try_into().unwrap());
    let (a0, a1, tmp) = (word(0), word(1), word(2));
    const K1: u32 = 0x0303_0303;
    const K2: u32 = 0x0f0f_0f0f;
    let aux = [
        (a0 & K2) | ((tmp & K1) << 4),
        (a1 & K2) | (((tmp >> 2) & K1) << 4),
        ((a0 >> 4) & K2) | (((tmp >> 4) & K1) << 4),
        ((a1 >> 4) & K2) | (((tmp >> 6) & K1) << 4),
    ];
    std::array::from_fn(|i| aux[i / 4].to_le_bytes()[i % 4] as i8)
}

/// Quant l of sub-block j of Q4_K's layout: a nibble of qs[32 (j / 2) + l], plus 16 if bit j
/// of `qh[l]` is set (Q5_K).
#[inline(always)]
fn k4_quant(qs: &[u8; 128], qh: Option<&[u8; 32]>, j: usize, l: usize) -> u8 {
    let byte = qs[32 * (j / 2) + l];
    let low = if j % 2 == 1 { byte >> 4 } else { byte & 15 };
    low | qh.map_or(0, |h| ((h[l] >> j) & 1) << 4)
}

/// The sub-blocks of Q4_K and Q5_K (`qh` for Q5_K's fifth bits).
fn k4_sub_blocks(scales: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>) -> [SubBlock; 8] {
    std::array::from_fn(|j| {
        let (sc, m) = scale_min_k4(j, scales);
        SubBlock {
            q: std::array::from_fn(|l| k4_quant(qs, qh, j, l) as i8),
            scale: [sc as i32; 2],
            min: [m as i32; 2],
        }
    })
}

/// llama.cpp's dequantize_row_q4_K / _q5_K: `d1 * q - m1` with `d1 = d * sc`, `m1 = dmin * m`.
fn k4_dequantize(
    d: f32,
    dmin: f32,
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: Option<&[u8; 32]>,
    out: &mut [f32; QK_K],
) {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        for l in 0..32 {
            out[32 * j + l] = d1 * k4_quant(qs, qh, j, l) as f32 - m1;
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl Default for BlockQ2K {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockQ2K {
    const BYTES: usize = 84;
    const HAS_MIN: bool = true;
    const ZERO: Self = BlockQ2K {
        scales: [0; 16],
        qs: [0; 64],
        d: 0,
        dmin: 0,
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockQ2K {
            scales: b[0..16].try_into().unwrap(),
            qs: b[16..80].try_into().unwrap(),
            d: u16_at(b, 80),
            dmin: u16_at(b, 82),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.scales);
        out.extend_from_slice(&self.qs);
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend_from_slice(&self.dmin.to_le_bytes());
    }
    fn set_scales(&mut self, d: u16, dmin: u16) {
        self.d = d;
        self.dmin = dmin;
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), f16_to_f32(self.dmin))
    }
    /// Element 128n + 32j + l: bits 2j.. of qs[32n + l]; sub-block 16-half s = 8n + 2j + l / 16.
    fn sub_blocks(&self) -> [SubBlock; 8] {
        std::array::from_fn(|b| {
            let (n, j) = (b / 4, b % 4);
            let half = |h: usize| self.scales[8 * n + 2 * j + h];
            SubBlock {
                q: std::array::from_fn(|l| ((self.qs[32 * n + l] >> (2 * j)) & 3) as i8),
                scale: [(half(0) & 15) as i32, (half(1) & 15) as i32],
                min: [(half(0) >> 4) as i32, (half(1) >> 4) as i32],
            }
        })
    }
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, min) = self.scales();
        let mut y = 0;
        let mut is = 0;
        for n in 0..2 {
            let q = &self.qs[32 * n..32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let sc = self.scales[is];
                    is += 1;
                    let (dl, ml) = (d * (sc & 0xf) as f32, min * (sc >> 4) as f32);
                    for l in 0..16 {
                        out[y] = dl * ((q[16 * half + l] >> shift) & 3) as f32 - ml;
                        y += 1;
                    }
                }
            }
        }
    }
}

impl Default for BlockQ3K {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockQ3K {
    const BYTES: usize = 110;
    const HAS_MIN: bool = false;
    const ZERO: Self = BlockQ3K {
        hmask: [0; 32],
        qs: [0; 64],
        scales: [0; 12],
        d: 0,
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockQ3K {
            hmask: b[0..32].try_into().unwrap(),
            qs: b[32..96].try_into().unwrap(),
            scales: b[96..108].try_into().unwrap(),
            d: u16_at(b, 108),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hmask);
        out.extend_from_slice(&self.qs);
        out.extend_from_slice(&self.scales);
        out.extend_from_slice(&self.d.to_le_bytes());
    }
    fn set_scales(&mut self, d: u16, dmin: u16) {
        self.d = d;
        let _ = dmin;
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), 0.0)
    }
    /// As Q2_K's layout; the high bit of element 128n + 32j + l is bit 4n + j of `hmask[l]`.
    fn sub_blocks(&self) -> [SubBlock; 8] {
        let sc = q3k_scales(&self.scales);
        std::array::from_fn(|b| {
            let (n, j) = (b / 4, b % 4);
            let m = 1u8 << (4 * n + j);
            SubBlock {
                q: std::array::from_fn(|l| {
                    let low = ((self.qs[32 * n + l] >> (2 * j)) & 3) as i8;
                    low - if self.hmask[l] & m != 0 { 0 } else { 4 }
                }),
                scale: [
                    sc[8 * n + 2 * j] as i32 - 32,
                    sc[8 * n + 2 * j + 1] as i32 - 32,
                ],
                min: [0, 0],
            }
        })
    }
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d_all = f16_to_f32(self.d);
        let sc = q3k_scales(&self.scales);
        let mut y = 0;
        let mut is = 0;
        let mut m = 1u8;
        for n in 0..2 {
            let q = &self.qs[32 * n..32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let dl = d_all * (sc[is] as i32 - 32) as f32;
                    is += 1;
                    for l in 0..16 {
                        let i = 16 * half + l;
                        let low = ((q[i] >> shift) & 3) as i8;
                        let v = low - if self.hmask[i] & m != 0 { 0 } else { 4 };
                        out[y] = dl * v as f32;
                        y += 1;
                    }
                }
                m <<= 1;
            }
        }
    }
}

impl Default for BlockQ4K {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockQ4K {
    const BYTES: usize = 144;
    const HAS_MIN: bool = true;
    const ZERO: Self = BlockQ4K {
        d: 0,
        dmin: 0,
        scales: [0; 12],
        qs: [0; 128],
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockQ4K {
            d: u16_at(b, 0),
            dmin: u16_at(b, 2),
            scales: b[4..16].try_into().unwrap(),
            qs: b[16..144].try_into().unwrap(),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend_from_slice(&self.dmin.to_le_bytes());
        out.extend_from_slice(&self.scales);
        out.extend_from_slice(&self.qs);
    }
    fn set_scales(&mut self, d: u16, dmin: u16) {
        self.d = d;
        self.dmin = dmin;
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), f16_to_f32(self.dmin))
    }
    /// Element 64c + l (l < 32): low nibble of qs[32c + l]; 64c + 32 + l: its high nibble.
    fn sub_blocks(&self) -> [SubBlock; 8] {
        k4_sub_blocks(&self.scales, &self.qs, None)
    }
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, min) = self.scales();
        k4_dequantize(d, min, &self.scales, &self.qs, None, out);
    }
}

impl Default for BlockQ5K {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockQ5K {
    const BYTES: usize = 176;
    const HAS_MIN: bool = true;
    const ZERO: Self = BlockQ5K {
        d: 0,
        dmin: 0,
        scales: [0; 12],
        qh: [0; 32],
        qs: [0; 128],
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockQ5K {
            d: u16_at(b, 0),
            dmin: u16_at(b, 2),
            scales: b[4..16].try_into().unwrap(),
            qh: b[16..48].try_into().unwrap(),
            qs: b[48..176].try_into().unwrap(),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend_from_slice(&self.dmin.to_le_bytes());
        out.extend_from_slice(&self.scales);
        out.extend_from_slice(&self.qh);
        out.extend_from_slice(&self.qs);
    }
    fn set_scales(&mut self, d: u16, dmin: u16) {
        self.d = d;
        self.dmin = dmin;
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), f16_to_f32(self.dmin))
    }
    /// Q4_K's layout; bit 4 of sub-block j's element l is bit j of `qh[l]`.
    fn sub_blocks(&self) -> [SubBlock; 8] {
        k4_sub_blocks(&self.scales, &self.qs, Some(&self.qh))
    }
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, min) = self.scales();
        k4_dequantize(d, min, &self.scales, &self.qs, Some(&self.qh), out);
    }
}

impl Default for BlockQ6K {
    fn default() -> Self {
        <Self as KBlock>::ZERO
    }
}

impl KBlock for BlockQ6K {
    const BYTES: usize = 210;
    const HAS_MIN: bool = false;
    const ZERO: Self = BlockQ6K {
        ql: [0; 128],
        qh: [0; 64],
        scales: [0; 16],
        d: 0,
    };
    fn from_bytes(b: &[u8]) -> Self {
        BlockQ6K {
            ql: b[0..128].try_into().unwrap(),
            qh: b[128..192].try_into().unwrap(),
            scales: std::array::from_fn(|i| b[192 + i] as i8),
            d: u16_at(b, 208),
        }
    }
    fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ql);
        out.extend_from_slice(&self.qh);
        out.extend(self.scales.iter().map(|&s| s as u8));
        out.extend_from_slice(&self.d.to_le_bytes());
    }
    fn set_scales(&mut self, d: u16, dmin: u16) {
        self.d = d;
        let _ = dmin;
    }
    fn scales(&self) -> (f32, f32) {
        (f16_to_f32(self.d), 0.0)
    }
    /// Element 128n + 32k + l: the low (k < 2) or high nibble of ql[64n + 32(k % 2) + l], bits
    /// 2k.. of qh[32n + l] on top, minus 32; scale of its half: scales[8n + 2k + l / 16].
    fn sub_blocks(&self) -> [SubBlock; 8] {
        std::array::from_fn(|b| {
            let (n, k) = (b / 4, b % 4);
            SubBlock {
                q: std::array::from_fn(|l| {
                    let byte = self.ql[64 * n + 32 * (k % 2) + l];
                    let low = if k < 2 { byte & 15 } else { byte >> 4 };
                    let high = (self.qh[32 * n + l] >> (2 * k)) & 3;
                    (low | (high << 4)) as i8 - 32
                }),
                scale: [
                    self.scales[8 * n + 2 * k] as i32,
                    self.scales[8 * n + 2 * k + 1] as i32,
                ],
                min: [0, 0],
            }
        })
    }
    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        for n in 0..2 {
            let (ql, qh, sc) = (
                &self.ql[64 * n..],
                &self.qh[32 * n..],
                &self.scales[8 * n..],
            );
            let y = &mut out[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

/// Stored bytes -> blocks (`bytes.len()` a multiple of the block size, checked by the caller).
pub fn blocks_from_bytes<B: KBlock>(bytes: &[u8]) -> Vec<B> {
    bytes.chunks_exact(B::BYTES).map(B::from_bytes).collect()
}

/// Stored bytes -> values.
pub fn dequantize_bytes<B: KBlock>(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / B::BYTES * QK_K];
    for (b, o) in blocks_from_bytes::<B>(bytes)
        .iter()
        .zip(out.chunks_exact_mut(QK_K))
    {
        b.dequantize(o.try_into().unwrap());
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reference quantizers: llama.cpp's `quantize_row_q*_K_ref` (ggml-quants.c), which is what
// llama-quantize runs for every K type when no importance matrix is given (`quantize_q*_K`
// with `quant_weights == NULL`). Every float operation is written in the C source's order and
// association; nothing is fused (ggml-quants.c is built into ggml-base without -mfma, so gcc
// has no fused multiply-add to contract into), so the bytes equal llama-quantize's.

/// Below this largest magnitude a group counts as all zeros (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// llama.cpp's `nearest_int`: round half to even by the 1.5 * 2^23 trick (exact for
/// |x| <= 2^22; past that it wraps exactly as the C code does, never panics).
#[inline(always)]
pub(super) fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The element of largest magnitude, with its sign (the first of equals), or `None` when
/// every magnitude is below [`GROUP_MAX_EPS`] (the group counts as zeros).
pub(super) fn largest_magnitude(x: &[f32]) -> Option<f32> {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax >= GROUP_MAX_EPS).then_some(max)
}

/// llama.cpp's `make_qx_quants` with `rmse_type == 1` and no importance weights (the only way
/// Q6_K calls it): signed quants `L[i] - nmax` in [-nmax, nmax - 1] and their scale, searched
/// over 19 candidate scales for the least weighted (x^2) squared error.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let Some(max) = largest_magnitude(x) else {
        l_out.fill(0);
        return 0.0;
    };
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = clamp(nearest_int(iscale * v));
        *lo = (l + nmax) as i8;
        let w = v * v;
        sumlx = sumlx + w * v * l as f32;
        suml2 = suml2 + w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = clamp(nearest_int(iscale * v));
            let w = v * v;
            sumlx = sumlx + w * v * l as f32;
            suml2 = suml2 + w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
                *lo = (nmax + clamp(nearest_int(iscale * v))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// llama.cpp's `make_q3_quants` with `do_rmse`: quants in [0, 2 nmax) (offset by nmax), refined
/// one element at a time (up to 5 passes) while the weighted error drops.
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let Some(max) = largest_magnitude(x) else {
        l_out.fill(0);
        return 0.0;
    };
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = clamp(nearest_int(iscale * v));
        *lo = l as i8;
        let w = v * v;
        sumlx = sumlx + w * v * l as f32;
        suml2 = suml2 + w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
            let w = v * v;
            let li = *lo as f32;
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(v * sl2 / slx));
                if new_l != *lo as i32 {
                    slx = slx + w * v * new_l as f32;
                    sl2 = sl2 + w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *lo = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for lo in l_out.iter_mut() {
        *lo += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of llama.cpp's `make_qkx2_quants` scale search.
struct Qkx2 {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
}

/// llama.cpp's `make_qkx2_quants`: unsigned quants in [0, nmax] with a scale and a minimum
/// (returned as (scale, -min)), searched over `nstep + 1` candidate scales for the least
/// weighted error.
fn make_qkx2_quants(p: &Qkx2, x: &[f32], weights: &[f32], l_out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w = sum_w + w;
        sum_x = sum_x + w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax;
    let error = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error = best_error + weights[i] * error(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l = sum_l + w * l;
            sum_l2 = sum_l2 + w * l * l;
            sum_xl = sum_xl + w * l * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error = cur_error + weights[i] * error(diff);
            }
            if cur_error < best_error {
                l_out.copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Checks a row for whole super-blocks (the caller's invariant, as `assert(k % QK_K == 0)`).
fn super_blocks<'a>(x: &'a [f32], ty: &str) -> std::slice::ChunksExact<'a, f32> {
    assert!(
        x.len().is_multiple_of(QK_K),
        "{ty} rows hold whole 256-element super-blocks"
    );
    x.chunks_exact(QK_K)
}

/// The 2-bit quants of 256 elements packed as Q2_K and Q3_K store them: element
/// 128n + 32s + l in bits 2s.. of byte 32n + l.
fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    std::array::from_fn(|b| {
        let (n, l0) = (b / 32, b % 32);
        let at = |s: usize| l[128 * n + 32 * s + l0];
        at(0) | (at(1) << 2) | (at(2) << 4) | (at(3) << 6)
    })
}

/// llama.cpp's `quantize_row_q2_K_ref`.
pub fn quantize_q2_k(x: &[f32]) -> Vec<BlockQ2K> {
    const Q4SCALE: f32 = 15.0;
    let search = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    super_blocks(x, "Q2_K")
        .map(|x| {
            let mut l = [0u8; QK_K];
            let mut scales = [0.0f32; 16];
            let mut mins = [0.0f32; 16];
            let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
            for j in 0..16 {
                let xs = &x[16 * j..16 * j + 16];
                let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
                (scales[j], mins[j]) =
                    make_qkx2_quants(&search, xs, &weights, &mut l[16 * j..16 * j + 16]);
                if scales[j] > max_scale {
                    max_scale = scales[j];
                }
                if mins[j] > max_min {
                    max_min = mins[j];
                }
            }
            let mut y = BlockQ2K::ZERO;
            if max_scale > 0.0 {
                let iscale = Q4SCALE / max_scale;
                for j in 0..16 {
                    y.scales[j] = nearest_int(iscale * scales[j]) as u8;
                }
                y.d = f32_to_f16(max_scale / Q4SCALE);
            } else {
                y.d = f32_to_f16(0.0);
            }
            if max_min > 0.0 {
                let iscale = Q4SCALE / max_min;
                for j in 0..16 {
                    y.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
                }
                y.dmin = f32_to_f16(max_min / Q4SCALE);
            } else {
                y.dmin = f32_to_f16(0.0);
            }
            for j in 0..16 {
                let d = f16_to_f32(y.d) * (y.scales[j] & 0xf) as f32;
                if d == 0.0 {
                    continue;
                }
                let dm = f16_to_f32(y.dmin) * (y.scales[j] >> 4) as f32;
                for i in 0..16 {
                    l[16 * j + i] = nearest_int((x[16 * j + i] + dm) / d).clamp(0, 3) as u8;
                }
            }
            y.qs = pack_2bit(&l);
            y
        })
        .collect()
}

/// llama.cpp's `quantize_row_q3_K_ref`.
pub fn quantize_q3_k(x: &[f32]) -> Vec<BlockQ3K> {
    super_blocks(x, "Q3_K")
        .map(|x| {
            let mut l = [0i8; QK_K];
            let mut scales = [0.0f32; 16];
            let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
            for j in 0..16 {
                scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
                if scales[j].abs() > amax {
                    amax = scales[j].abs();
                    max_scale = scales[j];
                }
            }
            let mut y = BlockQ3K::ZERO;
            if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                for j in 0..16 {
                    // C stores nearest_int's result in an int8_t before clamping.
                    let q = nearest_int(iscale * scales[j]) as i8;
                    let q = (q.clamp(-32, 31) + 32) as u8;
                    if j < 8 {
                        y.scales[j] = q & 0xf;
                    } else {
                        y.scales[j - 8] |= (q & 0xf) << 4;
                    }
                    y.scales[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
                }
                y.d = f32_to_f16(1.0 / iscale);
            } else {
                y.d = f32_to_f16(0.0);
            }
            let sc = q3k_scales(&y.scales);
            for j in 0..16 {
                let d = f16_to_f32(y.d) * (sc[j] as i32 - 32) as f32;
                if d == 0.0 {
                    continue;
                }
                for i in 0..16 {
                    l[16 * j + i] = nearest_int(x[16 * j + i] / d).clamp(-4, 3) as i8 + 4;
                }
            }
            // The high bit of element j goes to bit j / 32 of hmask[j % 32].
            let mut low = [0u8; QK_K];
            for (j, &q) in l.iter().enumerate() {
                let q = q as u8;
                if q > 3 {
                    y.hmask[j % 32] |= 1 << (j / 32);
                    low[j] = q - 4;
                } else {
                    low[j] = q;
                }
            }
            y.qs = pack_2bit(&low);
            y
        })
        .collect()
}

/// The 8 sub-block scales and minimums of Q4_K / Q5_K (`make_qkx2_quants` over weights
/// `sqrt(mean x^2) + |x|`), quantized to 6 bits against the super-block's largest: returns the
/// block's (d, dmin, packed scales) and leaves each sub-block's first-pass quants in `l`.
fn k4_scales(x: &[f32], search: &Qkx2, l: &mut [u8; QK_K]) -> (u16, u16, [u8; 12]) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 = sum_x2 + v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        (scales[j], mins[j]) = make_qkx2_quants(search, xs, &weights, &mut l[32 * j..32 * j + 32]);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // C stores nearest_int's result in a uint8_t before taking the minimum with 63.
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    (
        f32_to_f16(max_scale / 63.0),
        f32_to_f16(max_min / 63.0),
        pack_scale_min_k4(&ls, &lm),
    )
}

/// The final quants of Q4_K / Q5_K in [0, nmax] against the block's stored (f16, 6-bit)
/// scales; sub-blocks whose scale is 0 keep their first-pass quants.
fn k4_final_quants(x: &[f32], d: u16, dmin: u16, packed: &[u8; 12], nmax: i32, l: &mut [u8; QK_K]) {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, packed);
        let d = f16_to_f32(d) * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = f16_to_f32(dmin) * m as f32;
        for i in 0..32 {
            l[32 * j + i] = nearest_int((x[32 * j + i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

/// The low nibbles of 256 quants as Q4_K / Q5_K store them: element 64c + i in the low nibble
/// of byte 32c + i, element 64c + 32 + i in its high nibble.
fn pack_nibbles(l: &[u8; QK_K]) -> [u8; QK_K / 2] {
    std::array::from_fn(|b| {
        let (c, i) = (b / 32, b % 32);
        (l[64 * c + i] & 15) | ((l[64 * c + 32 + i] & 15) << 4)
    })
}

/// llama.cpp's `quantize_row_q4_K_ref`.
pub fn quantize_q4_k(x: &[f32]) -> Vec<BlockQ4K> {
    let search = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    super_blocks(x, "Q4_K")
        .map(|x| {
            let mut l = [0u8; QK_K];
            let (d, dmin, scales) = k4_scales(x, &search, &mut l);
            k4_final_quants(x, d, dmin, &scales, 15, &mut l);
            BlockQ4K {
                d,
                dmin,
                scales,
                qs: pack_nibbles(&l),
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q5_K_ref`.
pub fn quantize_q5_k(x: &[f32]) -> Vec<BlockQ5K> {
    let search = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    super_blocks(x, "Q5_K")
        .map(|x| {
            let mut l = [0u8; QK_K];
            let (d, dmin, scales) = k4_scales(x, &search, &mut l);
            k4_final_quants(x, d, dmin, &scales, 31, &mut l);
            // Bit 4 of element 64c + i is bit 2c of qh[i]; of element 64c + 32 + i, bit 2c + 1.
            let mut qh = [0u8; 32];
            for c in 0..4 {
                for i in 0..32 {
                    qh[i] |= ((l[64 * c + i] >> 4) << (2 * c))
                        | ((l[64 * c + 32 + i] >> 4) << (2 * c + 1));
                }
            }
            BlockQ5K {
                d,
                dmin,
                scales,
                qh,
                qs: pack_nibbles(&l),
            }
        })
        .collect()
}

/// llama.cpp's `quantize_row_q6_K_ref`.
pub fn quantize_q6_k(x: &[f32]) -> Vec<BlockQ6K> {
    super_blocks(x, "Q6_K")
        .map(|x| {
            let mut l = [0i8; QK_K];
            let mut scales = [0.0f32; 16];
            let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
            for ib in 0..16 {
                scales[ib] = make_qx_quants_rmse1(
                    32,
                    &x[16 * ib..16 * ib + 16],
                    &mut l[16 * ib..16 * ib + 16],
                );
                if scales[ib].abs() > max_abs_scale {
                    max_abs_scale = scales[ib].abs();
                    max_scale = scales[ib];
                }
            }
            let mut y = BlockQ6K::ZERO;
            if max_abs_scale < GROUP_MAX_EPS {
                return y;
            }
            let iscale = -128.0 / max_scale;
            y.d = f32_to_f16(1.0 / iscale);
            for ib in 0..16 {
                y.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
            }
            for j in 0..16 {
                let d = f16_to_f32(y.d) * y.scales[j] as f32;
                if d == 0.0 {
                    continue;
                }
                for i in 0..16 {
                    l[16 * j + i] = nearest_int(x[16 * j + i] / d).clamp(-32, 31) as i8 + 32;
                }
            }
            // Element 128n + 32s + i: low nibble in ql[64n + 32(s % 2) + i] (low half for s < 2),
            // high two bits at bits 2s of qh[32n + i].
            for n in 0..2 {
                for i in 0..32 {
                    let q = |s: usize| l[128 * n + 32 * s + i] as u8;
                    y.ql[64 * n + i] = (q(0) & 15) | ((q(2) & 15) << 4);
                    y.ql[64 * n + 32 + i] = (q(1) & 15) | ((q(3) & 15) << 4);
                    y.qh[32 * n + i] =
                        (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
                }
            }
            y
        })
        .collect()
}

/// Blocks -> stored bytes.
pub fn blocks_to_bytes<B: KBlock>(blocks: &[B]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * B::BYTES);
    for b in blocks {
        b.to_bytes(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// The sub-block view gives exactly the dequantized values (in exact arithmetic: the
    /// scales here are small powers of two, so the f32 products are exact).
    fn check_sub_blocks<B: KBlock>(seed: u64, set_scales: impl Fn(&mut Vec<u8>)) {
        let mut raw = bytes(B::BYTES, seed);
        set_scales(&mut raw);
        let b = B::from_bytes(&raw);
        let mut back = Vec::new();
        b.to_bytes(&mut back);
        assert_eq!(back, raw, "bytes round trip");
        let mut want = [0.0f32; QK_K];
        b.dequantize(&mut want);
        let (d, dmin) = b.scales();
        for (s, sb) in b.sub_blocks().iter().enumerate() {
            for (i, &q) in sb.q.iter().enumerate() {
                let h = i / 16;
                let v = d * (sb.scale[h] * q as i32) as f32 - dmin * sb.min[h] as f32;
                assert_eq!(v, want[32 * s + i], "sub-block {s} element {i}");
            }
        }
    }

    #[test]
    fn sub_blocks_equal_dequantization_q2_k_q3_k_q4_k_q5_k_q6_k() {
        // d = 0.5 and dmin = 0.25 as f16, at the fields' offsets.
        let (half, quarter) = (0x3800u16.to_le_bytes(), 0x3400u16.to_le_bytes());
        for seed in 1..20 {
            check_sub_blocks::<BlockQ2K>(seed, |r| {
                r[80..82].copy_from_slice(&half);
                r[82..84].copy_from_slice(&quarter);
            });
            check_sub_blocks::<BlockQ3K>(seed, |r| r[108..110].copy_from_slice(&half));
            check_sub_blocks::<BlockQ4K>(seed, |r| {
                r[0..2].copy_from_slice(&half);
                r[2..4].copy_from_slice(&quarter);
            });
            check_sub_blocks::<BlockQ5K>(seed, |r| {
                r[0..2].copy_from_slice(&half);
                r[2..4].copy_from_slice(&quarter);
            });
            check_sub_blocks::<BlockQ6K>(seed, |r| r[208..210].copy_from_slice(&half));
        }
    }

    #[test]
    fn scale_min_k4_unpacks_the_6_bit_fields() {
        let mut q = [0u8; 12];
        q[0] = 0b11_000101; // sc0 = 5, top bits of sc4 = 3
        q[4] = 0b10_001001; // m0 = 9, top bits of m4 = 2
        q[8] = 0x7a; // sc4 low = 0xa, m4 low = 7
        assert_eq!(scale_min_k4(0, &q), (5, 9));
        assert_eq!(scale_min_k4(4, &q), (0xa | (3 << 4), 7 | (2 << 4)));
    }
}

/// Index into an interleaved quant array of byte `i` (of a 32-byte chunk `chunk`) of `lane`'s
/// block: `256 * chunk + 32 * (i / 4) + 4 * lane + i % 4`. One 256-bit load of column
/// `(chunk, i / 4)` gives the 8 rows' 4 bytes, as in [`super::repack`].
#[inline(always)]
pub const fn k_interleaved(lane: usize, chunk: usize, i: usize) -> usize {
    256 * chunk + 32 * (i / 4) + 4 * lane + i % 4
}

/// The 6-bit scales and minimums of Q4_K / Q5_K packed back into 12 bytes (the inverse of
/// [`scale_min_k4`]: the 96 bits hold exactly 16 six-bit values).
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    q
}

/// Super-block b of 8 rows of Q4_K, laid out for the SIMD twins: the 8 rows' f16 scales, their
/// 8 sub-block scales and minimums decoded (sub-block-major, one byte per row), and the quants
/// interleaved in 4-byte columns per 32-byte chunk (chunk c holds sub-blocks 2c in its low
/// nibbles and 2c + 1 in its high ones).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ4K {
    pub d: [u16; 8],
    pub dmin: [u16; 8],
    /// `sc[j][lane]`, 0..=63.
    pub sc: [[u8; 8]; 8],
    /// `m[j][lane]`, 0..=63.
    pub m: [[u8; 8]; 8],
    /// [`k_interleaved`] over 4 chunks of each row's 128 `qs` bytes.
    pub qs: [u8; 8 * 128],
}
const _: () = assert!(std::mem::size_of::<TileQ4K>() == 1184);

impl super::repack::Tile for TileQ4K {
    type Block = BlockQ4K;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileQ4K {
        d: [0; 8],
        dmin: [0; 8],
        sc: [[0; 8]; 8],
        m: [[0; 8]; 8],
        qs: [0; 8 * 128],
    };
    fn block(&self, lane: usize) -> BlockQ4K {
        let sc = std::array::from_fn(|j| self.sc[j][lane]);
        let m = std::array::from_fn(|j| self.m[j][lane]);
        BlockQ4K {
            d: self.d[lane],
            dmin: self.dmin[lane],
            scales: pack_scale_min_k4(&sc, &m),
            qs: std::array::from_fn(|i| self.qs[k_interleaved(lane, i / 32, i % 32)]),
        }
    }
    fn set_block(&mut self, lane: usize, b: &BlockQ4K) {
        self.d[lane] = b.d;
        self.dmin[lane] = b.dmin;
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b.scales);
            self.sc[j][lane] = sc;
            self.m[j][lane] = m;
        }
        for (i, &q) in b.qs.iter().enumerate() {
            self.qs[k_interleaved(lane, i / 32, i % 32)] = q;
        }
    }
}

/// Super-block b of 8 rows of Q6_K for the SIMD twins: f16 scales, the 16 sub-block scales
/// (`sc[s][lane]`), and in `q` the 4 `ql` chunks and 2 `qh` chunks, each interleaved per 32-byte
/// column ([`k_interleaved`]), in the order the dots first read them: ql 0, qh 0, ql 1, ql 2,
/// qh 1, ql 3 ([`TileQ6K::QL_AT`], [`TileQ6K::QH_AT`]). In that order the tiles are one ascending
/// stream the CPU's prefetchers follow; with all of `ql` before all of `qh` each sub-block read
/// jumped 1 KiB ahead and back, and a one-token matmul from DRAM ran at half Q4_K's rate.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ6K {
    pub d: [u16; 8],
    pub sc: [[i8; 8]; 16],
    pub q: [u8; 8 * 192],
}
const _: () = assert!(std::mem::size_of::<TileQ6K>() == 1680);

impl TileQ6K {
    /// Where `ql` chunk c (c < 4) starts in `q`.
    pub const QL_AT: [usize; 4] = [0, 512, 768, 1280];
    /// Where `qh` chunk n (n < 2) starts in `q`.
    pub const QH_AT: [usize; 2] = [256, 1024];

    /// Index in `q` of byte i of a block's `ql` in `lane`.
    const fn ql_index(lane: usize, i: usize) -> usize {
        Self::QL_AT[i / 32] + k_interleaved(lane, 0, i % 32)
    }

    /// Index in `q` of byte i of a block's `qh` in `lane`.
    const fn qh_index(lane: usize, i: usize) -> usize {
        Self::QH_AT[i / 32] + k_interleaved(lane, 0, i % 32)
    }
}

impl super::repack::Tile for TileQ6K {
    type Block = BlockQ6K;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileQ6K {
        d: [0; 8],
        sc: [[0; 8]; 16],
        q: [0; 8 * 192],
    };
    fn block(&self, lane: usize) -> BlockQ6K {
        BlockQ6K {
            ql: std::array::from_fn(|i| self.q[Self::ql_index(lane, i)]),
            qh: std::array::from_fn(|i| self.q[Self::qh_index(lane, i)]),
            scales: std::array::from_fn(|s| self.sc[s][lane]),
            d: self.d[lane],
        }
    }
    fn set_block(&mut self, lane: usize, b: &BlockQ6K) {
        self.d[lane] = b.d;
        for s in 0..16 {
            self.sc[s][lane] = b.scales[s];
        }
        for (i, &q) in b.ql.iter().enumerate() {
            self.q[Self::ql_index(lane, i)] = q;
        }
        for (i, &q) in b.qh.iter().enumerate() {
            self.q[Self::qh_index(lane, i)] = q;
        }
    }
}

#[cfg(test)]
mod tile_tests {
    use super::*;
    use crate::quant::repack::{tile_rows, untile_row};

    #[test]
    fn pack_scale_min_k4_inverts_scale_min_k4_for_every_packed_byte_pattern() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let q: [u8; 12] = std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            });
            let sc = std::array::from_fn(|j| scale_min_k4(j, &q).0);
            let m = std::array::from_fn(|j| scale_min_k4(j, &q).1);
            assert_eq!(pack_scale_min_k4(&sc, &m), q);
        }
    }

    #[test]
    fn q4_k_q5_k_q6_k_tiles_round_trip_11_rows_of_3_super_blocks() {
        let mut s = 7u64;
        let mut raw = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect()
        };
        let (rows, nb) = (11, 3);
        let b4: Vec<BlockQ4K> = (0..rows * nb)
            .map(|_| BlockQ4K::from_bytes(&raw(144)))
            .collect();
        let t4: crate::memory::Buf<TileQ4K> = tile_rows(rows, nb, |r| &b4[r * nb..(r + 1) * nb]);
        let b6: Vec<BlockQ6K> = (0..rows * nb)
            .map(|_| BlockQ6K::from_bytes(&raw(210)))
            .collect();
        let t6: crate::memory::Buf<TileQ6K> = tile_rows(rows, nb, |r| &b6[r * nb..(r + 1) * nb]);
        let b5: Vec<BlockQ5K> = (0..rows * nb)
            .map(|_| BlockQ5K::from_bytes(&raw(176)))
            .collect();
        let t5: crate::memory::Buf<TileQ5K> = tile_rows(rows, nb, |r| &b5[r * nb..(r + 1) * nb]);
        for r in 0..rows {
            assert_eq!(untile_row(&t5, nb, r), &b5[r * nb..(r + 1) * nb]);
            assert_eq!(untile_row(&t4, nb, r), &b4[r * nb..(r + 1) * nb]);
            assert_eq!(untile_row(&t6, nb, r), &b6[r * nb..(r + 1) * nb]);
        }
    }
}

/// Super-block b of 8 rows of Q5_K for the SIMD twins: [`TileQ4K`]'s layout, plus each row's
/// 32 `qh` bytes interleaved in 4-byte columns (bit j of byte l is the fifth bit of sub-block
/// j's element l).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ5K {
    pub d: [u16; 8],
    pub dmin: [u16; 8],
    pub sc: [[u8; 8]; 8],
    pub m: [[u8; 8]; 8],
    pub qh: [u8; 8 * 32],
    pub qs: [u8; 8 * 128],
}
const _: () = assert!(std::mem::size_of::<TileQ5K>() == 1440);

impl super::repack::Tile for TileQ5K {
    type Block = BlockQ5K;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileQ5K {
        d: [0; 8],
        dmin: [0; 8],
        sc: [[0; 8]; 8],
        m: [[0; 8]; 8],
        qh: [0; 8 * 32],
        qs: [0; 8 * 128],
    };
    fn block(&self, lane: usize) -> BlockQ5K {
        let sc = std::array::from_fn(|j| self.sc[j][lane]);
        let m = std::array::from_fn(|j| self.m[j][lane]);
        BlockQ5K {
            d: self.d[lane],
            dmin: self.dmin[lane],
            scales: pack_scale_min_k4(&sc, &m),
            qh: std::array::from_fn(|i| self.qh[k_interleaved(lane, 0, i)]),
            qs: std::array::from_fn(|i| self.qs[k_interleaved(lane, i / 32, i % 32)]),
        }
    }
    fn set_block(&mut self, lane: usize, b: &BlockQ5K) {
        self.d[lane] = b.d;
        self.dmin[lane] = b.dmin;
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b.scales);
            self.sc[j][lane] = sc;
            self.m[j][lane] = m;
        }
        for (i, &q) in b.qh.iter().enumerate() {
            self.qh[k_interleaved(lane, 0, i)] = q;
        }
        for (i, &q) in b.qs.iter().enumerate() {
            self.qs[k_interleaved(lane, i / 32, i % 32)] = q;
        }
    }
}

/// Q3_K's 16 six-bit scales packed back into 12 bytes (the inverse of [`q3k_scales`]).
pub fn pack_q3k_scales(s: &[u8; 16]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for i in 0..4 {
        q[i] = (s[i] & 15) | ((s[8 + i] & 15) << 4);
        q[4 + i] = (s[4 + i] & 15) | ((s[12 + i] & 15) << 4);
        q[8 + i] =
            (s[i] >> 4) | ((s[4 + i] >> 4) << 2) | ((s[8 + i] >> 4) << 4) | ((s[12 + i] >> 4) << 6);
    }
    q
}

/// Super-block b of 8 rows of Q2_K for the SIMD twins: f16 scales, the 16 half-sub-block
/// scales and minimums decoded (`sc[s][lane]`, `m[s][lane]`, 0..=15), `qs` interleaved per
/// 32-byte chunk (2 chunks).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ2K {
    pub d: [u16; 8],
    pub dmin: [u16; 8],
    pub sc: [[u8; 8]; 16],
    pub m: [[u8; 8]; 16],
    pub qs: [u8; 8 * 64],
}
const _: () = assert!(std::mem::size_of::<TileQ2K>() == 800);

impl super::repack::Tile for TileQ2K {
    type Block = BlockQ2K;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileQ2K {
        d: [0; 8],
        dmin: [0; 8],
        sc: [[0; 8]; 16],
        m: [[0; 8]; 16],
        qs: [0; 8 * 64],
    };
    fn block(&self, lane: usize) -> BlockQ2K {
        BlockQ2K {
            scales: std::array::from_fn(|s| self.sc[s][lane] | (self.m[s][lane] << 4)),
            qs: std::array::from_fn(|i| self.qs[k_interleaved(lane, i / 32, i % 32)]),
            d: self.d[lane],
            dmin: self.dmin[lane],
        }
    }
    fn set_block(&mut self, lane: usize, b: &BlockQ2K) {
        self.d[lane] = b.d;
        self.dmin[lane] = b.dmin;
        for (s, &v) in b.scales.iter().enumerate() {
            self.sc[s][lane] = v & 15;
            self.m[s][lane] = v >> 4;
        }
        for (i, &q) in b.qs.iter().enumerate() {
            self.qs[k_interleaved(lane, i / 32, i % 32)] = q;
        }
    }
}

/// Super-block b of 8 rows of Q3_K for the SIMD twins: f16 scales, the 16 half-sub-block
/// scales decoded with their -32 (`sc[s][lane]`), `hmask` interleaved (1 chunk) and `qs` (2).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ3K {
    pub d: [u16; 8],
    pub sc: [[i8; 8]; 16],
    pub hmask: [u8; 8 * 32],
    pub qs: [u8; 8 * 64],
}
const _: () = assert!(std::mem::size_of::<TileQ3K>() == 912);

impl super::repack::Tile for TileQ3K {
    type Block = BlockQ3K;
    const COLUMNS: usize = QK_K;
    const ZERO: Self = TileQ3K {
        d: [0; 8],
        sc: [[0; 8]; 16],
        hmask: [0; 8 * 32],
        qs: [0; 8 * 64],
    };
    fn block(&self, lane: usize) -> BlockQ3K {
        let s: [u8; 16] = std::array::from_fn(|i| (self.sc[i][lane] as i32 + 32) as u8);
        BlockQ3K {
            hmask: std::array::from_fn(|i| self.hmask[k_interleaved(lane, 0, i)]),
            qs: std::array::from_fn(|i| self.qs[k_interleaved(lane, i / 32, i % 32)]),
            scales: pack_q3k_scales(&s),
            d: self.d[lane],
        }
    }
    fn set_block(&mut self, lane: usize, b: &BlockQ3K) {
        self.d[lane] = b.d;
        for (s, &v) in q3k_scales(&b.scales).iter().enumerate() {
            self.sc[s][lane] = v - 32;
        }
        for (i, &q) in b.hmask.iter().enumerate() {
            self.hmask[k_interleaved(lane, 0, i)] = q;
        }
        for (i, &q) in b.qs.iter().enumerate() {
            self.qs[k_interleaved(lane, i / 32, i % 32)] = q;
        }
    }
}

#[cfg(test)]
mod low_bit_tile_tests {
    use super::*;
    use crate::quant::repack::{tile_rows, untile_row};

    fn raw(s: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *s ^= *s << 13;
                *s ^= *s >> 7;
                *s ^= *s << 17;
                *s as u8
            })
            .collect()
    }

    #[test]
    fn pack_q3k_scales_inverts_q3k_scales_and_q2_k_q3_k_tiles_round_trip() {
        let mut s = 11u64;
        for _ in 0..2000 {
            let q: [u8; 12] = raw(&mut s, 12).try_into().unwrap();
            let v: [u8; 16] = q3k_scales(&q).map(|x| x as u8);
            assert_eq!(pack_q3k_scales(&v), q);
        }
        let (rows, nb) = (11, 3);
        let b2: Vec<BlockQ2K> = (0..rows * nb)
            .map(|_| BlockQ2K::from_bytes(&raw(&mut s, 84)))
            .collect();
        let t2: crate::memory::Buf<TileQ2K> = tile_rows(rows, nb, |r| &b2[r * nb..(r + 1) * nb]);
        let b3: Vec<BlockQ3K> = (0..rows * nb)
            .map(|_| BlockQ3K::from_bytes(&raw(&mut s, 110)))
            .collect();
        let t3: crate::memory::Buf<TileQ3K> = tile_rows(rows, nb, |r| &b3[r * nb..(r + 1) * nb]);
        for r in 0..rows {
            assert_eq!(untile_row(&t2, nb, r), &b2[r * nb..(r + 1) * nb]);
            assert_eq!(untile_row(&t3, nb, r), &b3[r * nb..(r + 1) * nb]);
        }
    }
}

#[cfg(test)]
mod quantizer_tests {
    use super::*;
    use crate::quant::{dequantize_bytes, quantize_bytes, GgmlType};

    const K_TYPES: [GgmlType; 5] = [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// 16 super-blocks of seeded values, each block with its own amplitude (1e-3 .. 1e3) and a
    /// few blocks shifted all-positive or all-negative.
    fn seeded() -> Vec<f32> {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        (0..16 * QK_K)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0;
                let block = i / QK_K;
                let amplitude = [1e-3f32, 0.02, 1.0, 1e3][block % 4];
                let shift = [0.0f32, 0.0, 1.0, -1.0][block / 4];
                (u + shift) * amplitude
            })
            .collect()
    }

    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The bytes of llama.cpp's own quantizers (ggml_quantize_chunk without an importance
    /// matrix, from libggml-base of the peer build) for [`seeded`], pinned by their FNV-1a hash.
    #[test]
    fn q2_k_q3_k_q4_k_q5_k_q6_k_of_16_seeded_super_blocks_are_llama_cpp_bytes() {
        let x = seeded();
        let want = [
            (GgmlType::Q2_K, 0xfd9c_2281_9c96_263d),
            (GgmlType::Q3_K, 0x1cb9_7fc7_0819_2e05),
            (GgmlType::Q4_K, 0x9d02_9bf1_611f_4e4c),
            (GgmlType::Q5_K, 0x4df7_2997_1bec_ebe2),
            (GgmlType::Q6_K, 0xb0e3_9b86_5259_b3a4),
        ];
        for (ty, hash) in want {
            let bytes = quantize_bytes(ty, &x).unwrap();
            assert_eq!(bytes.len(), 16 * ty.block_bytes(), "{}", ty.name());
            assert_eq!(fnv1a(&bytes), hash, "{}", ty.name());
        }
    }

    /// llama.cpp's test-quantize-fns: data `0.1 + 2 cos(i)`, 4096 values, error
    /// `sqrt(sum (x - y)^2) / n` below 0.0075 (Q2_K), 0.0040 (Q3_K), 0.002 (the others).
    #[test]
    fn q2_k_to_q6_k_round_trip_within_test_quantize_fns_bounds_on_4096_values() {
        let x: Vec<f32> = (0..4096).map(|i| 0.1 + 2.0 * (i as f32).cos()).collect();
        for ty in K_TYPES {
            let y = dequantize_bytes(ty, &quantize_bytes(ty, &x).unwrap());
            let sum: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum();
            let error = sum.sqrt() as f32 / x.len() as f32;
            let bound = match ty {
                GgmlType::Q2_K => 0.0075,
                GgmlType::Q3_K => 0.0040,
                _ => 0.002,
            };
            assert!(error < bound, "{}: {error} >= {bound}", ty.name());
        }
    }

    #[test]
    fn all_zero_super_blocks_quantize_to_zero_bytes_and_back_to_zeros() {
        let x = vec![0.0f32; 2 * QK_K];
        for ty in K_TYPES {
            let bytes = quantize_bytes(ty, &x).unwrap();
            assert!(bytes.iter().all(|&b| b == 0), "{}", ty.name());
            assert!(dequantize_bytes(ty, &bytes).iter().all(|&v| v == 0.0));
        }
    }

    /// One value of 1e4 among zeros: every type keeps it within its step (the other values
    /// stay near zero), and nothing overflows.
    #[test]
    fn one_huge_value_among_zeros_is_kept_within_a_step() {
        let mut x = vec![0.0f32; QK_K];
        x[37] = 1e4;
        for ty in K_TYPES {
            let y = dequantize_bytes(ty, &quantize_bytes(ty, &x).unwrap());
            assert!((y[37] - 1e4).abs() <= 1e4 / 3.0, "{}: {}", ty.name(), y[37]);
            assert!(y.iter().all(|v| v.is_finite()), "{}", ty.name());
        }
    }

    #[test]
    fn nan_and_infinity_are_errors_naming_the_element() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![0.5f32; QK_K];
            x[200] = bad;
            for ty in K_TYPES.into_iter().chain([GgmlType::Q4_0, GgmlType::Q8_0]) {
                let e = quantize_bytes(ty, &x).unwrap_err().to_string();
                assert!(e.contains("element 200"), "{e}");
            }
        }
    }
}
