//! The kernel conformance suite, defined once: named cases, each comparing one entry of a
//! candidate backend with [`reference`] bitwise (`to_bits` equality; any NaN equals any NaN, see
//! [`bits_eq`]). Driven natively by core/tests/kernels_x86.rs (every x86 backend) and in wasm by
//! [`super::wasm32::selftest`] (every wasm backend of the build, under Node). A case's data come
//! from its name and the seed only, so a failure anywhere replays natively by name:
//! `INFERNO_CONFORMANCE_CASE='<name>' [INFERNO_CONFORMANCE_SEED=<seed>] cargo test --release -p
//! inferno-core --test kernels_x86 replay -- --nocapture`. Test code; not part of inference
//! (built with the `conformance` feature only).

use super::testdata::{
    bits_eq, iq4_nl_blocks, q4_0_blocks, q4_1_blocks, q5_0_blocks, q5_1_blocks, q8_0_blocks,
    random_activations, random_matrix, Rng,
};
use super::{reference, Input, Kernels, KvHead, KvSlice, Matrix};
use crate::quant::iq4::BlockIQ4XS;
use crate::quant::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, KBlock, QK_K};
use crate::quant::{f32_to_f16, BlockQ8Act, GgmlType, QK};

/// The seed every driver uses unless told otherwise (the wasm runner passes the same).
pub const SEED: u64 = 20261201;

type Check = Box<dyn Fn(&Kernels, &mut Rng) -> Result<(), String> + Send + Sync>;

/// One named case: the name holds every parameter (`matmul(type=Q4_1,rows=7,cols=96,...)`).
pub struct Case {
    pub name: String,
    check: Check,
}

impl Case {
    fn new(
        name: String,
        check: impl Fn(&Kernels, &mut Rng) -> Result<(), String> + Send + Sync + 'static,
    ) -> Case {
        Case {
            name,
            check: Box::new(check),
        }
    }

    /// The entry of `candidate` this case covers against the reference, on data drawn from the
    /// name and `seed`; the error names the case, the seed and the first differing element.
    pub fn run(&self, candidate: &Kernels, seed: u64) -> Result<(), String> {
        let mut rng = Rng::new(seed, fnv1a(&self.name));
        (self.check)(candidate, &mut rng).map_err(|e| format!("{} seed={seed}: {e}", self.name))
    }

    /// The kernel entry the case covers (the name up to its parameters).
    pub fn entry(&self) -> &str {
        self.name.split('(').next().unwrap_or(&self.name)
    }
}

/// FNV-1a 64 of a case name: its data stream within a seed.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every case, in a fixed order.
pub fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    dot_f32(&mut all);
    quantize_q8(&mut all);
    rmsnorm(&mut all);
    silu_mul(&mut all);
    gelu_tanh_mul(&mut all);
    rope(&mut all);
    dot_q(&mut all);
    matmul(&mut all);
    attention(&mut all);
    all
}

/// The case called `name`, if any.
pub fn case(name: &str) -> Option<Case> {
    cases().into_iter().find(|c| c.name == name)
}

/// Runs every case whose entry is in `entries` (all if empty) on `candidate`; the failures, in
/// order.
pub fn run(candidate: &Kernels, entries: &[&str], seed: u64) -> Vec<String> {
    cases()
        .iter()
        .filter(|c| entries.is_empty() || entries.contains(&c.entry()))
        .filter_map(|c| c.run(candidate, seed).err())
        .collect()
}

/// Lengths of the rule-2 entries: the contract's awkward ones and real model sizes.
const LENGTHS: [usize; 16] = [
    0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 576, 1536, 2048, 5632, 5633,
];
/// Q8 block counts (x 32 values): 0, 1, 2 and model widths 576, 1536, 5632.
const BLOCKS: [usize; 6] = [0, 1, 2, 18, 48, 176];

fn dot_f32(all: &mut Vec<Case>) {
    for n in LENGTHS {
        for specials in [false, true] {
            all.push(Case::new(
                format!("dot_f32(n={n},specials={specials})"),
                move |k, rng| {
                    let (a, b) = (rng.edgy_values(n, specials), rng.edgy_values(n, specials));
                    let want = [reference::dot_f32(&a, &b)];
                    bits_eq("dot", k.name, &[(k.dot_f32)(&a, &b)], &want)
                },
            ));
        }
    }
}

fn quantize_q8(all: &mut Vec<Case>) {
    for nb in BLOCKS {
        for specials in [false, true] {
            let name = format!("quantize_q8(blocks={nb},specials={specials})");
            all.push(Case::new(name, move |k, rng| {
                let mut x = rng.edgy_values(nb * QK, specials);
                // A block of subnormals only (127 / amax overflows to inf), and an all-zero block.
                if nb >= 2 {
                    x[..QK].iter_mut().enumerate().for_each(|(i, v)| {
                        *v = f32::from_bits(i as u32 % 5) * if i % 2 == 0 { 1.0 } else { -1.0 }
                    });
                    x[QK..2 * QK].fill(0.0);
                }
                let mut want = vec![BlockQ8Act::default(); nb];
                reference::quantize_q8(&x, &mut want);
                let filler = BlockQ8Act {
                    d: 1.0,
                    sums: [9, -9],
                    qs: [5; QK],
                };
                let mut got = vec![filler; nb];
                (k.quantize_q8)(&x, &mut got);
                for (b, (g, w)) in got.iter().zip(&want).enumerate() {
                    if !(g.d.to_bits() == w.d.to_bits() && g.sums == w.sums && g.qs == w.qs) {
                        return Err(format!(
                            "[{}]: block {b}: got {g:?}, reference {w:?}",
                            k.name
                        ));
                    }
                }
                Ok(())
            }));
        }
    }
}

fn rmsnorm(all: &mut Vec<Case>) {
    for n in LENGTHS {
        for specials in [false, true] {
            let name = format!("rmsnorm(n={n},specials={specials})");
            all.push(Case::new(name, move |k, rng| {
                let (x, w) = (rng.edgy_values(n, specials), rng.values(n));
                let mut want = vec![0.0; n];
                reference::rmsnorm(&x, &w, 1e-5, &mut want);
                let mut got = vec![7.0; n];
                (k.rmsnorm)(&x, &w, 1e-5, &mut got);
                bits_eq("out", k.name, &got, &want)
            }));
        }
    }
}

fn silu_mul(all: &mut Vec<Case>) {
    gate_mul(all, "silu_mul", reference::silu_mul, |k| k.silu_mul, 1.01);
}

fn gelu_tanh_mul(all: &mut Vec<Case>) {
    gate_mul(
        all,
        "gelu_tanh_mul",
        reference::gelu_tanh_mul,
        |k| k.gelu_tanh_mul,
        0.05,
    );
}

/// Cases of a gate activation times up: every third gate on a ramp of `step` (from -120 steps
/// to 120, where exp under- and overflows), the others and `up` edgy values and specials.
fn gate_mul(
    all: &mut Vec<Case>,
    entry: &'static str,
    want_of: fn(&mut [f32], &[f32]),
    entry_of: fn(&Kernels) -> fn(&mut [f32], &[f32]),
    step: f32,
) {
    for n in LENGTHS {
        all.push(Case::new(format!("{entry}(n={n})"), move |k, rng| {
            let mut gate = rng.edgy_values(n, true);
            for (j, g) in gate.iter_mut().enumerate().filter(|(j, _)| j % 3 == 0) {
                *g = ((j * 37 % 241) as f32 - 120.0) * step;
            }
            let up = rng.edgy_values(n, true);
            let mut want = gate.clone();
            want_of(&mut want, &up);
            let mut got = gate.clone();
            entry_of(k)(&mut got, &up);
            bits_eq("gate", k.name, &got, &want)
        }));
    }
}

fn rope(all: &mut Vec<Case>) {
    for head_dim in [2, 6, 16, 24, 64, 128] {
        for heads in [1, 3, 9] {
            let name = format!("rope(head_dim={head_dim},heads={heads})");
            all.push(Case::new(name, move |k, rng| {
                let x = rng.edgy_values(head_dim * heads, true);
                let angles: Vec<f32> = (0..head_dim / 2).map(|i| i as f32 * 0.7 + 0.1).collect();
                let cos: Vec<f32> = angles.iter().map(|&a| libm::cosf(a)).collect();
                let sin: Vec<f32> = angles.iter().map(|&a| libm::sinf(a)).collect();
                let mut want = x.clone();
                reference::rope(&mut want, head_dim, &cos, &sin);
                let mut got = x.clone();
                (k.rope)(&mut got, head_dim, &cos, &sin);
                bits_eq("x", k.name, &got, &want)
            }));
        }
    }
}

fn dot_q(all: &mut Vec<Case>) {
    for nb in BLOCKS {
        all.push(Case::new(format!("dot_q8(blocks={nb})"), move |k, rng| {
            let x = random_activations(rng, 1, nb * QK);
            let mut q8 = vec![BlockQ8Act::default(); nb];
            reference::quantize_q8(&x, &mut q8);
            let (w0, w1, w8) = (
                q4_0_blocks(rng, nb),
                q4_1_blocks(rng, nb),
                q8_0_blocks(rng, nb),
            );
            let (got, want) = ((k.dot_q4_0_q8)(&w0, &q8), reference::dot_q4_0_q8(&w0, &q8));
            bits_eq("dot_q4_0_q8", k.name, &[got], &[want])?;
            let (got, want) = ((k.dot_q4_1_q8)(&w1, &q8), reference::dot_q4_1_q8(&w1, &q8));
            bits_eq("dot_q4_1_q8", k.name, &[got], &[want])?;
            let (got, want) = ((k.dot_q8_0_q8)(&w8, &q8), reference::dot_q8_0_q8(&w8, &q8));
            bits_eq("dot_q8_0_q8", k.name, &[got], &[want])?;
            let (w5, w51) = (q5_0_blocks(rng, nb), q5_1_blocks(rng, nb));
            let (got, want) = ((k.dot_q5_0_q8)(&w5, &q8), reference::dot_q5_0_q8(&w5, &q8));
            bits_eq("dot_q5_0_q8", k.name, &[got], &[want])?;
            let (got, want) = (
                (k.dot_q5_1_q8)(&w51, &q8),
                reference::dot_q5_1_q8(&w51, &q8),
            );
            bits_eq("dot_q5_1_q8", k.name, &[got], &[want])?;
            let w4 = iq4_nl_blocks(rng, nb);
            let (got, want) = (
                (k.dot_iq4_nl_q8)(&w4, &q8),
                reference::dot_iq4_nl_q8(&w4, &q8),
            );
            bits_eq("dot_iq4_nl_q8", k.name, &[got], &[want])
        }));
    }
}

/// Rows `first_row ..` of a `first_row + rows + 2`-row matrix times `tokens` activations.
fn matmul_case(ty: GgmlType, rows: usize, cols: usize, tokens: usize, first_row: usize) -> Case {
    let name = format!(
        "matmul(type={},rows={rows},cols={cols},tokens={tokens},first_row={first_row})",
        ty.name()
    );
    Case::new(name, move |k, rng| {
        let w = random_matrix(rng, ty, first_row + rows + 2, cols);
        let x = random_activations(rng, tokens, cols);
        matmul_eq(k, &w, first_row, rows, tokens, &x)
    })
}

/// `k.matmul` of rows `first_row .. first_row + rows` of `w` by the `tokens` activations `x`,
/// bitwise against the reference.
fn matmul_eq(
    k: &Kernels,
    w: &Matrix,
    first_row: usize,
    rows: usize,
    tokens: usize,
    x: &[f32],
) -> Result<(), String> {
    let mut q8 = vec![BlockQ8Act::default(); x.len() / QK];
    if w.wants_q8() {
        reference::quantize_q8(x, &mut q8);
    }
    let input = if w.wants_q8() {
        Input::Q8(&q8)
    } else {
        Input::F32(x)
    };
    let run = |k: &Kernels| {
        let mut out = vec![0.0f32; tokens * rows];
        let mut outs: Vec<&mut [f32]> = out.chunks_mut(rows.max(1)).take(tokens).collect();
        if rows == 0 {
            outs = (0..tokens).map(|_| <&mut [f32]>::default()).collect();
        }
        (k.matmul)(w, first_row, &input, &mut outs);
        out
    };
    bits_eq("out", k.name, &run(k), &run(&reference::KERNELS))
}

/// A K-quant matrix of `rows` rows and 512 columns whose every block byte is `fill` (0xff: every
/// quant, sub-block scale and minimum at its maximum) with super-block scales `d` and `dmin`
/// (f16 bits), against activations at the int8 extremes: of alternating sign (or with one
/// huge value per block) when `sign` is 0, else all `sign` (every quant +-127: the largest
/// i16 pair sums a backend can add up), `tokens` tokens.
fn matmul_k_extreme_case(
    ty: GgmlType,
    fill: u8,
    (d, dmin): (u16, u16),
    sign: f32,
    rows: usize,
    tokens: usize,
) -> Case {
    let name = format!(
        "matmul_k_extreme(type={},fill={fill:#04x},d={d:#06x},dmin={dmin:#06x},sign={sign},rows={rows},tokens={tokens})",
        ty.name()
    );
    Case::new(name, move |k, rng| {
        let cols = 512;
        let w = match ty {
            GgmlType::Q2_K => filled_k::<BlockQ2K>(ty, rows + 1, cols, fill, d, dmin),
            GgmlType::Q3_K => filled_k::<BlockQ3K>(ty, rows + 1, cols, fill, d, dmin),
            GgmlType::Q4_K => filled_k::<BlockQ4K>(ty, rows + 1, cols, fill, d, dmin),
            GgmlType::Q5_K => filled_k::<BlockQ5K>(ty, rows + 1, cols, fill, d, dmin),
            GgmlType::IQ4_XS => filled_k::<BlockIQ4XS>(ty, rows + 1, cols, fill, d, dmin),
            _ => filled_k::<BlockQ6K>(ty, rows + 1, cols, fill, d, dmin),
        };
        let x = extreme_activations(rng, tokens, cols, sign);
        matmul_eq(k, &w, 1, rows, tokens, &x)
    })
}

/// A 32-element block type's matrix of `rows` rows and 256 columns whose every quant byte is
/// `fill` (0xff: every 4-bit quant 15, the largest in-place high nibble a one-token dot reads;
/// 0x88, 0x77: the levels next to the middle; 0: the smallest) with scale `d` and, for Q4_1 and
/// Q5_1, minimum `m` (f16 bits), against activations at the int8 extremes as in
/// [`matmul_k_extreme_case`], `tokens` tokens.
fn matmul_block_extreme_case(
    ty: GgmlType,
    fill: u8,
    (d, m): (u16, u16),
    sign: f32,
    rows: usize,
    tokens: usize,
) -> Case {
    let name = format!(
        "matmul_block_extreme(type={},fill={fill:#04x},d={d:#06x},m={m:#06x},sign={sign},rows={rows},tokens={tokens})",
        ty.name()
    );
    Case::new(name, move |k, rng| {
        let cols = 256;
        let block_bytes = ty.bytes_for(QK as u64).expect("a block type") as usize;
        let has_min = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
        let mut block = vec![fill; block_bytes];
        block[..2].copy_from_slice(&d.to_le_bytes());
        if has_min {
            block[2..4].copy_from_slice(&m.to_le_bytes());
        }
        let bytes = block.repeat((rows + 1) * cols / QK);
        let w = Matrix::from_bytes("filled", ty, rows + 1, cols, &bytes).expect("whole blocks");
        let x = extreme_activations(rng, tokens, cols, sign);
        matmul_eq(k, &w, 1, rows, tokens, &x)
    })
}

/// `tokens` x `cols` activations whose quants are all +-127: of alternating sign (in runs of 3)
/// with, on half the draws, one huge negative value per block when `sign` is 0, else all `sign`.
fn extreme_activations(rng: &mut Rng, tokens: usize, cols: usize, sign: f32) -> Vec<f32> {
    let mut x: Vec<f32> = (0..tokens * cols)
        .map(|i| match sign {
            0.0 if (i / 3) % 2 == 0 => 1.0,
            0.0 => -1.0,
            _ => sign,
        })
        .collect();
    if sign == 0.0 && rng.below(2) == 0 {
        x.iter_mut().step_by(QK).for_each(|v| *v = -3e4);
    }
    x
}

/// A K-quant matrix whose every block is `fill` bytes with super-block scales `d`, `dmin`.
fn filled_k<B: KBlock>(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    fill: u8,
    d: u16,
    dmin: u16,
) -> Matrix {
    let mut b = B::from_bytes(&vec![fill; B::BYTES]);
    b.set_scales(d, dmin);
    let mut bytes = Vec::new();
    for _ in 0..rows * cols / QK_K {
        b.to_bytes(&mut bytes);
    }
    Matrix::from_bytes("filled", ty, rows, cols, &bytes).expect("whole super-blocks")
}

fn matmul(all: &mut Vec<Case>) {
    use GgmlType::*;
    for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL] {
        for (rows, cols, tokens) in [
            (70, 576, 9),
            (64, 576, 1),
            (64, 1536, 1),
            (65, 2048, 3),
            (33, 2048, 5),
            (31, 2048, 6),
            (9, 5632, 4),
            (8, 5632, 7),
            (7, 5632, 8),
            (17, 1536, 4),
            // Several spans of 2048 columns (quant::repack::Spans), the last one short, with
            // partial groups, pairs and one token.
            (70, 2112, 9),
            (70, 2112, 1),
            (1, 32, 1),
            (0, 64, 2),
            (7, 0, 3),
        ] {
            all.push(matmul_case(ty, rows, cols, tokens, 3));
        }
        for rows in 1..=70 {
            for tokens in [1, 2, 3, 4, 5, 8, 9] {
                all.push(matmul_case(ty, rows, 64, tokens, rows % 6));
            }
        }
    }
    // Every quant byte at an extreme, with the extreme scales (65504, -65504, the smallest
    // subnormal, inf, NaN), one token (4-bit quants read in place on VNNI backends) and five.
    for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL] {
        for fill in [0xff, 0x88, 0x77, 0x00] {
            for scales in [
                (0x7bff, 0x7bff),
                (0xfbff, 0x7bff),
                (0x0001, 0x8001),
                (0x7c00, 0x3c00),
                (0x7e00, 0x3c00),
            ] {
                for (rows, tokens) in [(1, 1), (9, 1), (9, 5)] {
                    for sign in [0.0, 1.0, -1.0] {
                        all.push(matmul_block_extreme_case(
                            ty, fill, scales, sign, rows, tokens,
                        ));
                    }
                }
            }
        }
    }
    // Every K type has x86 and wasm twins (IQ4_XS is one to the kernels).
    for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS] {
        // 2304 and 5632 columns: spans of 8 super-blocks, the last one short.
        for (rows, cols, tokens) in [
            (17, 256, 1),
            (9, 768, 3),
            (33, 1536, 2),
            (8, 256, 9),
            (17, 2304, 1),
            (19, 2304, 6),
            (17, 2304, 11),
            (9, 5632, 1),
        ] {
            all.push(matmul_case(ty, rows, cols, tokens, 3));
        }
        for rows in 1..=17 {
            for tokens in 1..=9 {
                all.push(matmul_case(ty, rows, 256, tokens, rows % 6));
            }
        }
        // Every byte 0xff (every quant, scale and minimum at its maximum), 0x7f, 0x80 (Q6_K's
        // signed scale extremes) or 0, with the extreme super-block scales: 65504, -65504, the
        // smallest subnormal, inf and NaN.
        for fill in [0xff, 0x7f, 0x80, 0x00] {
            for (d, dmin) in [
                (0x7bff, 0x7bff),
                (0xfbff, 0x7bff),
                (0x0001, 0x8001),
                (0x7c00, 0x3c00),
                (0x3c00, 0x7c00),
                (0x7e00, 0x3c00),
            ] {
                for (rows, tokens) in [(1, 1), (9, 5)] {
                    for sign in [0.0, 1.0, -1.0] {
                        all.push(matmul_k_extreme_case(
                            ty,
                            fill,
                            (d, dmin),
                            sign,
                            rows,
                            tokens,
                        ));
                    }
                }
            }
        }
    }
    for ty in [F32, F16, BF16] {
        for (rows, cols, tokens) in [
            (70, 576, 9),
            (9, 65, 3),
            (9, 33, 2),
            (9, 63, 2),
            (1, 0, 1),
            (3, 1536, 2),
        ] {
            all.push(matmul_case(ty, rows, cols, tokens, 3));
        }
        for cols in [0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 127, 129] {
            for rows in [1, 5, 12] {
                for tokens in 1..=3 {
                    all.push(matmul_case(ty, rows, cols, tokens, 1));
                }
            }
        }
    }
}

/// `queries` consecutive tokens, the last of which sees all `n_pos` positions, each with `heads`
/// query heads of the KV head at offset head_dim of 3-head cache rows. `spread` scales the
/// queries so scores span exp's underflow range; `specials` puts inf and NaN in the cache;
/// `zero_ties` makes every product a signed zero (queries +0, keys positive at even positions
/// and negative at odd ones: every product of an odd position is -0), so every score is a zero
/// and every block maximum a tie.
#[derive(Debug, Clone, Copy)]
struct AttentionCase {
    queries: usize,
    heads: usize,
    head_dim: usize,
    n_pos: usize,
    f16: bool,
    spread: f32,
    specials: bool,
    zero_ties: bool,
}

fn attention_case(a: AttentionCase) -> Case {
    let AttentionCase {
        queries,
        heads,
        head_dim,
        n_pos,
        f16,
        spread,
        specials,
        zero_ties,
    } = a;
    let name = format!(
        "attention(queries={queries},heads={heads},head_dim={head_dim},n_pos={n_pos},f16={f16},\
         spread={spread},specials={specials},zero_ties={zero_ties})"
    );
    Case::new(name, move |k, rng| {
        let kv_dim = 3 * head_dim;
        let q: Vec<f32> = rng
            .values(queries * heads * head_dim)
            .into_iter()
            .map(|v| v * spread)
            .collect();
        // Within f16's range, then exactly representable either way.
        let clamp = |v: Vec<f32>| -> Vec<f32> {
            v.into_iter()
                .map(|x| if x.is_finite() { x.clamp(-6e4, 6e4) } else { x })
                .collect()
        };
        let mut keys = clamp(rng.edgy_values(n_pos * kv_dim, specials));
        let mut values = clamp(rng.edgy_values(n_pos * kv_dim, specials));
        let q = if zero_ties {
            for (t, row) in keys.chunks_mut(kv_dim).enumerate() {
                for x in row {
                    *x = if t % 2 == 0 { x.abs() } else { -x.abs() };
                }
            }
            vec![0.0; q.len()]
        } else {
            q
        };
        // With specials and three 64-position blocks: none in the first block, so the kernels'
        // short f16 conversion (that block) and exact one (the others) meet in one call.
        if specials && n_pos > 128 {
            for x in keys[..64 * kv_dim]
                .iter_mut()
                .chain(values[..64 * kv_dim].iter_mut())
            {
                if !x.is_finite() {
                    *x = 1.0;
                }
            }
        }
        let k16: Vec<u16> = keys.iter().map(|&x| f32_to_f16(x)).collect();
        let v16: Vec<u16> = values.iter().map(|&x| f32_to_f16(x)).collect();
        let (keys, values) = if f16 {
            (KvSlice::F16(&k16), KvSlice::F16(&v16))
        } else {
            (KvSlice::F32(&keys), KvSlice::F32(&values))
        };
        let kv = KvHead {
            keys,
            values,
            positions: n_pos + 1 - queries, // positions query 0 sees
            kv_dim,
            offset: head_dim,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
        };
        let width = heads * head_dim;
        let qs: Vec<&[f32]> = q.chunks(width).collect();
        let mut want = vec![0.0; queries * width];
        let mut outs: Vec<&mut [f32]> = want.chunks_mut(width).collect();
        reference::attention(&qs, &kv, &mut outs);
        // The reference itself: every (query, head) is exactly that head's one-query attention.
        for (pair, (qh, wh)) in q.chunks(head_dim).zip(want.chunks(head_dim)).enumerate() {
            let mut alone = vec![0.0; head_dim];
            let one = KvHead {
                positions: kv.positions + pair / heads,
                ..kv
            };
            reference::attention(&[qh], &one, &mut [&mut alone[..]]);
            bits_eq("(query, head) alone", "reference", &alone, wh)?;
        }
        let mut got = vec![3.0; queries * width];
        let mut outs: Vec<&mut [f32]> = got.chunks_mut(width).collect();
        (k.attention)(&qs, &kv, &mut outs);
        bits_eq("out", k.name, &got, &want)
    })
}

fn attention(all: &mut Vec<Case>) {
    let one = |head_dim, n_pos, f16, spread| AttentionCase {
        queries: 1,
        heads: 1,
        head_dim,
        n_pos,
        f16,
        spread,
        specials: false,
        zero_ties: false,
    };
    for f16 in [true, false] {
        for head_dim in [64, 128] {
            for n_pos in [1, 63, 64, 65, 130] {
                for spread in [1.0, 30.0] {
                    all.push(attention_case(one(head_dim, n_pos, f16, spread)));
                }
            }
        }
        for head_dim in [8, 16, 24, 40] {
            for n_pos in [1, 2, 9, 64, 65, 127, 128, 140] {
                all.push(attention_case(one(head_dim, n_pos, f16, 4.0)));
            }
        }
        // Several query heads of one KV head, past the 16 heads of one pass.
        for heads in [2, 3, 8, 17] {
            for n_pos in [1, 65, 130] {
                all.push(attention_case(AttentionCase {
                    heads,
                    ..one(64, n_pos, f16, 4.0)
                }));
            }
        }
        for head_dim in [8, 24, 128] {
            all.push(attention_case(AttentionCase {
                heads: 3,
                ..one(head_dim, 70, f16, 4.0)
            }));
        }
        // Gemma 3's head_dim 256 with 4 query heads per KV head, and 48 (6 chunks of 8).
        for (head_dim, heads) in [(256, 4), (48, 3)] {
            for n_pos in [15, 16, 17, 130] {
                all.push(attention_case(AttentionCase {
                    heads,
                    ..one(head_dim, n_pos, f16, 4.0)
                }));
            }
        }
        // Consecutive query tokens (prefill), past the 512 (query, head) pairs of one pass.
        for queries in [2, 5, 16, 33] {
            for heads in [1, 3, 17] {
                for n_pos in [40, 65, 130] {
                    all.push(attention_case(AttentionCase {
                        queries,
                        heads,
                        ..one(64, n_pos, f16, 4.0)
                    }));
                }
            }
        }
        // Consecutive queries at other widths; at head_dim 192 and 256 the score step takes
        // four positions at a time, and the queries' last block ends inside a group of four.
        for (head_dim, queries, heads, n_poses) in [
            (8, 8, 3, [8, 100]),
            (128, 8, 3, [8, 100]),
            (192, 5, 2, [9, 70]),
            (256, 5, 2, [9, 70]),
            // Past the 512 pairs of one pass, where AVX-512 takes 16-position sub-blocks.
            (128, 40, 13, [45, 100]),
            (256, 130, 4, [140, 200]),
        ] {
            for n_pos in n_poses {
                all.push(attention_case(AttentionCase {
                    queries,
                    heads,
                    ..one(head_dim, n_pos, f16, 4.0)
                }));
            }
        }
        // At most 8 (query, head) pairs at head_dim >= 128: the sub-block kernels, where queries
        // end at different positions of one 16-position sub-block and of the last block.
        for (head_dim, queries, heads) in [(128, 2, 4), (160, 4, 2), (192, 1, 8), (256, 3, 2)] {
            for n_pos in [9, 17, 70, 130] {
                all.push(attention_case(AttentionCase {
                    queries,
                    heads,
                    ..one(head_dim, n_pos, f16, 4.0)
                }));
            }
        }
        // inf and NaN in a head_dim-256 cache.
        all.push(attention_case(AttentionCase {
            specials: true,
            heads: 4,
            ..one(256, 70, f16, 2.0)
        }));
        // Not a multiple of 8: the reference fallback.
        for head_dim in [6, 10] {
            all.push(attention_case(one(head_dim, 70, f16, 1.0)));
        }
        // Every score a zero, every block maximum a tie (-0 products included). The reference's
        // rule-2 accumulators start at +0, so its dot of -0 products is +0 (+0 + -0 = +0); a
        // twin that starts a lane from its first product (rule 6 allows it: AVX-512's) makes
        // the odd positions' scores -0, and lane-wise or tree maxima may keep either zero of a
        // tie. The outputs must not see it: exp(s - m) and exp(m - m') are 1 for either zero.
        for (head_dim, heads) in [(64, 1), (64, 8), (256, 4)] {
            for n_pos in [2, 65, 130] {
                all.push(attention_case(AttentionCase {
                    heads,
                    zero_ties: true,
                    ..one(head_dim, n_pos, f16, 1.0)
                }));
            }
        }
        // inf and NaN in the cache.
        for n_pos in [65, 130] {
            for spread in [1.0, 2.0] {
                all.push(attention_case(AttentionCase {
                    specials: true,
                    ..one(64, n_pos, f16, spread)
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_are_unique_and_cover_every_entry() {
        let all = cases();
        let mut names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "two cases share a name");
        for entry in [
            "dot_f32",
            "quantize_q8",
            "rmsnorm",
            "silu_mul",
            "gelu_tanh_mul",
            "rope",
            "dot_q8",
            "matmul",
            "matmul_block_extreme",
            "matmul_k_extreme",
            "attention",
        ] {
            assert!(all.iter().any(|c| c.entry() == entry), "no {entry} case");
        }
    }

    #[test]
    fn the_reference_passes_its_own_suite() {
        let failures = run(&reference::KERNELS, &["rope", "dot_q8"], SEED);
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
