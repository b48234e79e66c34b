//! The K-quants (GGUF spec, llama.cpp's `block_q*_K`): super-blocks of [`QK_K`] = 256 elements
//! with per-sub-block scales (and for Q2_K, Q4_K, Q5_K, minimums) quantized against one or two
//! f16 super-block scales. Block structs as stored, byte decoding, and dequantization exactly as
//! llama.cpp's `dequantize_row_q*_K` (checked against the `gguf` Python package by
//! tests/tests/gguf_reference.rs). [`KBlock::sub_blocks`] gives what the row dot of rule 4
//! reads: each 32-element sub-block's integer quants and its scale factors.

use super::f16_to_f32;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// Q2_K: 16 sub-blocks of 16, 2-bit quants, 4-bit scale and 4-bit minimum per sub-block.
/// value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4).
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
/// of qh[l] is set (Q5_K).
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
    /// As Q2_K's layout; the high bit of element 128n + 32j + l is bit 4n + j of hmask[l].
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
    /// Q4_K's layout; bit 4 of sub-block j's element l is bit j of qh[l].
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
/// (`sc[s][lane]`), `ql` interleaved per 32-byte chunk (4 chunks) and `qh` likewise (2 chunks).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileQ6K {
    pub d: [u16; 8],
    pub sc: [[i8; 8]; 16],
    pub ql: [u8; 8 * 128],
    pub qh: [u8; 8 * 64],
}
const _: () = assert!(std::mem::size_of::<TileQ6K>() == 1680);

impl super::repack::Tile for TileQ6K {
    type Block = BlockQ6K;
    const ZERO: Self = TileQ6K {
        d: [0; 8],
        sc: [[0; 8]; 16],
        ql: [0; 8 * 128],
        qh: [0; 8 * 64],
    };
    fn block(&self, lane: usize) -> BlockQ6K {
        BlockQ6K {
            ql: std::array::from_fn(|i| self.ql[k_interleaved(lane, i / 32, i % 32)]),
            qh: std::array::from_fn(|i| self.qh[k_interleaved(lane, i / 32, i % 32)]),
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
            self.ql[k_interleaved(lane, i / 32, i % 32)] = q;
        }
        for (i, &q) in b.qh.iter().enumerate() {
            self.qh[k_interleaved(lane, i / 32, i % 32)] = q;
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
        let t4: Vec<TileQ4K> = tile_rows(rows, nb, |r| &b4[r * nb..(r + 1) * nb]);
        let b6: Vec<BlockQ6K> = (0..rows * nb)
            .map(|_| BlockQ6K::from_bytes(&raw(210)))
            .collect();
        let t6: Vec<TileQ6K> = tile_rows(rows, nb, |r| &b6[r * nb..(r + 1) * nb]);
        let b5: Vec<BlockQ5K> = (0..rows * nb)
            .map(|_| BlockQ5K::from_bytes(&raw(176)))
            .collect();
        let t5: Vec<TileQ5K> = tile_rows(rows, nb, |r| &b5[r * nb..(r + 1) * nb]);
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
        let t2: Vec<TileQ2K> = tile_rows(rows, nb, |r| &b2[r * nb..(r + 1) * nb]);
        let b3: Vec<BlockQ3K> = (0..rows * nb)
            .map(|_| BlockQ3K::from_bytes(&raw(&mut s, 110)))
            .collect();
        let t3: Vec<TileQ3K> = tile_rows(rows, nb, |r| &b3[r * nb..(r + 1) * nb]);
        for r in 0..rows {
            assert_eq!(untile_row(&t2, nb, r), &b2[r * nb..(r + 1) * nb]);
            assert_eq!(untile_row(&t3, nb, r), &b3[r * nb..(r + 1) * nb]);
        }
    }
}
