//! The wasm backends against the reference, bitwise, inside the wasm module itself (`cargo test`
//! cannot run wasm): the Node.js runner of tests/wasm-selftest calls [`self_test`], which runs
//! every case of the conformance suite ([`crate::kernels::conformance`], the one the x86 tests
//! run) on every wasm backend of this build, plus the simd128 twins of `exp` and the f16
//! conversion. Failures are reported by case name; the same name replays natively.

use crate::kernels::conformance::{self, Case};

/// Failures listed in the message at most (the count is always given).
const MAX_REPORTED: usize = 20;

/// Every case on every wasm backend of this build; on failure, the failing cases by name (with
/// backend and seed), one a line.
pub fn self_test(seed: u64) -> Result<(), String> {
    let mut failures = Vec::new();
    #[cfg(target_feature = "simd128")]
    {
        failures.extend(exp_twin().err());
        failures.extend(f16_twin().err());
    }
    let backends = super::available();
    if !backends.is_empty() {
        let cases: Vec<Case> = conformance::cases();
        for k in backends {
            failures.extend(cases.iter().filter_map(|c| c.run(k, seed).err()));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    let mut message = format!("{} failing cases:\n", failures.len());
    for f in failures.iter().take(MAX_REPORTED) {
        message.push_str(f);
        message.push('\n');
    }
    if failures.len() > MAX_REPORTED {
        message.push_str("...\n");
    }
    message.push_str(
        "replay one natively: INFERNO_CONFORMANCE_CASE='<name>' INFERNO_CONFORMANCE_SEED=<seed> \
         cargo test --release -p inferno-core --test kernels_x86 replay -- --nocapture",
    );
    Err(message)
}

/// exp4 against math::exp on [`crate::kernels::testdata::exp_inputs`].
#[cfg(target_feature = "simd128")]
fn exp_twin() -> Result<(), String> {
    use super::common::exp4;
    use crate::kernels::math::exp;
    use core::arch::wasm32::*;
    let xs = crate::kernels::testdata::exp_inputs();
    for c in xs.chunks(4) {
        let mut v = [0.0f32; 4];
        v[..c.len()].copy_from_slice(c);
        let y = exp4(f32x4(v[0], v[1], v[2], v[3]));
        let got = [
            f32x4_extract_lane::<0>(y),
            f32x4_extract_lane::<1>(y),
            f32x4_extract_lane::<2>(y),
            f32x4_extract_lane::<3>(y),
        ];
        let want = v.map(exp);
        crate::kernels::testdata::bits_eq(&format!("exp4({v:?})"), "simd128", &got, &want)?;
    }
    Ok(())
}

/// Every f16 bit pattern through the vector conversion.
#[cfg(target_feature = "simd128")]
fn f16_twin() -> Result<(), String> {
    use super::common::f16x4_to_f32x4;
    use crate::quant::f16_to_f32;
    use core::arch::wasm32::*;
    for h in (0..=u16::MAX).step_by(4) {
        let y = f16x4_to_f32x4(u32x4(h as u32, h as u32 + 1, h as u32 + 2, h as u32 + 3));
        let got = [
            f32x4_extract_lane::<0>(y).to_bits(),
            f32x4_extract_lane::<1>(y).to_bits(),
            f32x4_extract_lane::<2>(y).to_bits(),
            f32x4_extract_lane::<3>(y).to_bits(),
        ];
        let want = [0, 1, 2, 3].map(|i| f16_to_f32(h + i).to_bits());
        if got != want {
            return Err(format!(
                "f16x4_to_f32x4({h:#06x}..): got {got:x?}, want {want:x?}"
            ));
        }
    }
    Ok(())
}
