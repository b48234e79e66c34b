//! Seeded test data for the kernel conformance suite ([`super::conformance`]), which the x86
//! tests and the wasm self test both run, so both meet the same edge values (+-0, subnormals,
//! huge, inf, NaN, int8 extremes, zero blocks, inf/NaN scales). Test code, not used by inference
//! (built for tests and the `conformance` feature only).

use crate::kernels::math::{EXP_OVERFLOW, EXP_UNDERFLOW};
use crate::kernels::{Matrix, MatrixData};
use crate::quant::iq4::{BlockIQ4NL, BlockIQ4XS};
use crate::quant::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, KBlock, QK_K};
use crate::quant::{
    f32_to_bf16, f32_to_f16, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, GgmlType, QK,
};

/// splitmix64: portable, seeded.
pub struct Rng(pub u64);

impl Rng {
    /// A stream per (seed, case), so one case can be replayed alone.
    pub fn new(seed: u64, case: u64) -> Rng {
        Rng(seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Roughly normal, times a random power of two in [2^-8, 2^8].
    pub fn value(&mut self) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (s - 2.0) * f32::from_bits(((self.below(17) as i32 - 8 + 127) as u32) << 23)
    }

    pub fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.value()).collect()
    }

    /// Values with edge cases sprinkled in (about one in eight); inf and NaN too if `specials`.
    pub fn edgy_values(&mut self, n: usize, specials: bool) -> Vec<f32> {
        const EDGES: [f32; 10] = [
            0.0,
            -0.0,
            1e-40,
            -1.4e-45,
            1.2e-38,
            1e30,
            -3e38,
            f32::MAX,
            127.0,
            -127.0,
        ];
        const SPECIALS: [f32; 3] = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        (0..n)
            .map(|_| match self.below(8) {
                0 if specials && self.below(4) == 0 => SPECIALS[self.below(SPECIALS.len())],
                0 => EDGES[self.below(EDGES.len())],
                _ => self.value(),
            })
            .collect()
    }

    /// f16 scale bits: mostly ordinary, sometimes zero, subnormal, huge or negative, and now
    /// and then inf or NaN (a tile with one takes the kernels' exact-conversion path).
    pub fn scale_f16(&mut self) -> u16 {
        match self.below(64) {
            0 => return 0x7c00,
            1 => return 0xfe01,
            _ => {}
        }
        match self.below(10) {
            0 => 0,
            1 => 0x0001,          // smallest subnormal
            2 => 0x7bff,          // 65504
            3 => 0x8000 | 0x3c00, // -1.0
            _ => f32_to_f16(self.value().abs() * 0.01),
        }
    }
}

/// Q4_0 blocks with [`Rng::scale_f16`] scales and the extreme nibbles 0, 8 and 15 now and then.
pub fn q4_0_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockQ4_0> {
    (0..nb)
        .map(|_| BlockQ4_0 {
            d: rng.scale_f16(),
            qs: std::array::from_fn(|_| match rng.below(16) {
                0 => 0x88,
                1 => 0xff,
                2 => 0x00,
                _ => rng.next_u64() as u8,
            }),
        })
        .collect()
}

/// Q4_1 blocks: as [`q4_0_blocks`], the minimums mostly negative.
pub fn q4_1_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockQ4_1> {
    (0..nb)
        .map(|_| BlockQ4_1 {
            d: rng.scale_f16(),
            m: rng.scale_f16() ^ 0x8000,
            qs: std::array::from_fn(|_| match rng.below(16) {
                0 => 0xff,
                1 => 0x00,
                _ => rng.next_u64() as u8,
            }),
        })
        .collect()
}

/// 5-bit high bits: all set, none, alternating, or random.
fn q5_high(rng: &mut Rng) -> [u8; 4] {
    match rng.below(8) {
        0 => [0xff; 4],
        1 => [0; 4],
        2 => [0x55, 0xaa, 0x55, 0xaa],
        _ => (rng.next_u64() as u32).to_le_bytes(),
    }
}

/// Q5_0 blocks: [`q4_0_blocks`]' nibbles with [`q5_high`] bits (quants 0, 16 and 31 occur).
pub fn q5_0_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockQ5_0> {
    q4_0_blocks(rng, nb)
        .into_iter()
        .map(|b| BlockQ5_0 {
            d: b.d,
            qh: q5_high(rng),
            qs: b.qs,
        })
        .collect()
}

/// Q5_1 blocks: [`q4_1_blocks`]' scales, minimums and nibbles with [`q5_high`] bits.
pub fn q5_1_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockQ5_1> {
    q4_1_blocks(rng, nb)
        .into_iter()
        .map(|b| BlockQ5_1 {
            d: b.d,
            m: b.m,
            qh: q5_high(rng),
            qs: b.qs,
        })
        .collect()
}

/// Q8_0 blocks with -128 (outside rule 4's range, still exact), +-127 now and then.
pub fn q8_0_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockQ8_0> {
    (0..nb)
        .map(|_| BlockQ8_0 {
            d: rng.scale_f16(),
            qs: std::array::from_fn(|_| match rng.below(8) {
                0 => -128,
                1 => 127,
                2 => -127,
                _ => rng.next_u64() as i8,
            }),
        })
        .collect()
}

/// IQ4_NL blocks: [`q4_0_blocks`]' scales and nibbles (every index, the extremes 0 and 15
/// now and then).
pub fn iq4_nl_blocks(rng: &mut Rng, nb: usize) -> Vec<BlockIQ4NL> {
    q4_0_blocks(rng, nb)
        .into_iter()
        .map(|b| BlockIQ4NL { d: b.d, qs: b.qs })
        .collect()
}

/// K-quant super-blocks: random quants and sub-block scales, [`Rng::scale_f16`] super-block
/// scales (the minimum scale negated now and then).
pub fn k_blocks<B: KBlock>(rng: &mut Rng, n: usize) -> Vec<B> {
    (0..n)
        .map(|_| {
            let bytes: Vec<u8> = (0..B::BYTES)
                .map(|_| match rng.below(16) {
                    0 => 0xff,
                    1 => 0x00,
                    _ => rng.next_u64() as u8,
                })
                .collect();
            let mut b = B::from_bytes(&bytes);
            let (d, dmin) = (rng.scale_f16(), rng.scale_f16());
            b.set_scales(
                d,
                if rng.below(4) == 0 {
                    dmin ^ 0x8000
                } else {
                    dmin
                },
            );
            b
        })
        .collect()
}

/// A `rows` x `cols` matrix of type `ty` from the generators above (quantized ones tiled).
pub fn random_matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Matrix {
    let n = rows * cols;
    let nb = n / QK;
    let data = match ty {
        GgmlType::F32 => MatrixData::F32(rng.edgy_values(n, false).into()),
        GgmlType::F16 => MatrixData::F16(
            rng.edgy_values(n, false)
                .into_iter()
                .map(f32_to_f16)
                .collect(),
        ),
        GgmlType::BF16 => MatrixData::BF16(
            rng.edgy_values(n, false)
                .into_iter()
                .map(f32_to_bf16)
                .collect(),
        ),
        GgmlType::Q4_0 => return Matrix::from_q4_0(rows, cols, &q4_0_blocks(rng, nb)),
        GgmlType::Q4_1 => return Matrix::from_q4_1(rows, cols, &q4_1_blocks(rng, nb)),
        GgmlType::Q5_0 => return Matrix::from_q5_0(rows, cols, &q5_0_blocks(rng, nb)),
        GgmlType::Q5_1 => return Matrix::from_q5_1(rows, cols, &q5_1_blocks(rng, nb)),
        GgmlType::Q8_0 => return Matrix::from_q8_0(rows, cols, &q8_0_blocks(rng, nb)),
        GgmlType::Q2_K => return k_matrix::<BlockQ2K>(rng, ty, rows, cols),
        GgmlType::Q3_K => return k_matrix::<BlockQ3K>(rng, ty, rows, cols),
        GgmlType::Q4_K => return k_matrix::<BlockQ4K>(rng, ty, rows, cols),
        GgmlType::Q5_K => return k_matrix::<BlockQ5K>(rng, ty, rows, cols),
        GgmlType::Q6_K => return k_matrix::<BlockQ6K>(rng, ty, rows, cols),
        GgmlType::IQ4_NL => return Matrix::from_iq4_nl(rows, cols, &iq4_nl_blocks(rng, nb)),
        GgmlType::IQ4_XS => return k_matrix::<BlockIQ4XS>(rng, ty, rows, cols),
    };
    Matrix { rows, cols, data }
}

fn k_matrix<B: KBlock>(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Matrix {
    let blocks = k_blocks::<B>(rng, rows * cols / QK_K);
    let mut bytes = Vec::new();
    for b in &blocks {
        b.to_bytes(&mut bytes);
    }
    Matrix::from_bytes("random", ty, rows, cols, &bytes).expect("whole super-blocks")
}

/// Activations of `tokens` x `cols`; some blocks all zero, some with one huge value, some at
/// the int8 extremes.
pub fn random_activations(rng: &mut Rng, tokens: usize, cols: usize) -> Vec<f32> {
    let mut x = rng.edgy_values(tokens * cols, false);
    for block in x.chunks_mut(QK) {
        match rng.below(8) {
            0 => block.fill(0.0),
            1 => block[rng.below(block.len())] = 1e6,
            2 => block
                .iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = if i % 2 == 0 { 1.0 } else { -1.0 }),
            _ => {}
        }
    }
    x
}

/// Bitwise equality, except that any NaN equals any NaN: Rust (and wasm) leave the sign and
/// payload of a NaN result unspecified when several NaNs meet (LLVM may commute `a + b`), so the
/// reference itself does not fix them; that a result is NaN is fixed.
pub fn bits_eq(what: &str, backend: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what} [{backend}]: lengths {} != {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if !(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())) {
            return Err(format!(
                "{what} [{backend}]: element {i}: got {g:e} ({:#010x}), reference {w:e} ({:#010x})",
                g.to_bits(),
                w.to_bits()
            ));
        }
    }
    Ok(())
}

/// Inputs for the exp twins: every 4099th bit pattern (all signs, exponents, NaNs), a dense
/// sweep over the range where exp is neither 0 nor inf, and the special values.
pub fn exp_inputs() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX / 4099)
        .map(|i| f32::from_bits(i * 4099))
        .collect();
    let mut x = -110.0f32;
    while x < 95.0 {
        xs.push(x);
        x += 0.000_731;
    }
    xs.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        EXP_OVERFLOW,
        EXP_UNDERFLOW,
        f32::from_bits(EXP_OVERFLOW.to_bits() + 1),
        f32::from_bits(EXP_UNDERFLOW.to_bits() + 1),
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    xs
}
