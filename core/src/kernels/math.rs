//! The one `exp` of the reduction contract (contract rule 5, ARCHITECTURE.md), used by every backend:
//! written with only +, -, *, round_ties_even, compares and bit operations, so the wasm and native
//! builds, and any SIMD twin, produce the same bits. Never `f32::exp` or a platform libm.

/// Above this, e^x overflows f32 (ln(f32::MAX) = 88.7228391...).
pub const EXP_OVERFLOW: f32 = 88.72284;
/// Below this, e^x rounds to zero (ln(2^-150) = -103.97208...).
pub const EXP_UNDERFLOW: f32 = -103.97208;

pub const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two (Cody-Waite, Cephes' constants): LN2_HI = 355/512 has 9 significant bits, so
/// n * LN2_HI is exact for every n that reaches it.
pub const LN2_HI: f32 = 0.693_359_375;
pub const LN2_LO: f32 = -2.121_944_4e-4;

/// Taylor coefficients 1/k! for k = 2..=7; the remainder on |r| <= ln2/2 is below 2^-27.
pub const EXP_POLY: [f32; 6] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// 2^n as f32 for n in [-126, 127], built from its bits.
#[inline(always)]
pub fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// e^x under the contract: NaN -> NaN, -inf -> 0, +inf and overflow -> +inf, underflow -> 0.
///
/// x = n ln2 + r with n = round_ties_even(x log2 e); e^r by a degree-7 polynomial in Horner form
/// (no fused multiply-add); then scaled by 2^n in two exact steps so subnormal results come out
/// right without a special case.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_OVERFLOW {
        return f32::INFINITY;
    }
    if x < EXP_UNDERFLOW {
        return 0.0;
    }
    let n = (x * LOG2_E).round_ties_even();
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = EXP_POLY[5];
    p = p * r + EXP_POLY[4];
    p = p * r + EXP_POLY[3];
    p = p * r + EXP_POLY[2];
    p = p * r + EXP_POLY[1];
    p = p * r + EXP_POLY[0];
    p = p * r + 1.0;
    p = p * r + 1.0;
    // n is in [-150, 128]: each half lies in [-75, 64], a normal power of two.
    let n = n as i32;
    let n1 = n / 2;
    (p * pow2i(n1)) * pow2i(n - n1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_special_values() {
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(f32::NEG_INFINITY).to_bits(), 0.0f32.to_bits());
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(-104.0).to_bits(), 0);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
    }

    #[test]
    fn exp_within_2_ulp_of_f64_over_range() {
        // Sweep the whole useful range, including the subnormal outputs.
        let mut x = -103.9f32;
        while x < 88.7 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            let ulp = if want < f32::MIN_POSITIVE as f64 {
                f32::from_bits(1) as f64
            } else {
                let w = want as f32;
                (f32::from_bits(w.to_bits() + 1) - w) as f64
            };
            assert!(
                (got - want).abs() <= 2.0 * ulp,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.001_37;
        }
    }

    #[test]
    fn exp_is_monotonic_near_zero() {
        let mut prev = 0.0f32;
        for i in -2000..2000 {
            let v = exp(i as f32 * 1e-3);
            assert!(v >= prev);
            prev = v;
        }
    }
}
