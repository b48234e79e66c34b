//! The wasm kernels (simd128, relaxed-simd) against the reference, bitwise, in Node.js: each
//! of the three builds of tests/wasm-selftest (reference, simd128, simd128 + relaxed-simd) runs
//! its in-module self test (core/src/kernels/wasm32/selftest.rs) under run.mjs. The modules are
//! built by `make wasm-selftest` (a prerequisite of `make test`); a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `variant`'s module under Node (with `node_flags`), expecting exactly `backends`.
fn run_selftest(variant: &str, node_flags: &[&str], backends: &str) {
    let root = workspace();
    // The cargo profile `make` built it with (make test: wasm-test).
    let profile = std::env::var("INFERNO_WASM_PROFILE").unwrap_or_else(|_| "wasm-release".into());
    let wasm = root.join(format!(
        "target/wasm-{variant}/wasm32-unknown-unknown/{profile}/inferno_wasm_selftest.wasm"
    ));
    assert!(
        wasm.is_file(),
        "{} is missing: run `make wasm-selftest` (make test does) first",
        wasm.display()
    );
    let out = Command::new("node")
        .args(node_flags)
        .arg(root.join("tests/wasm-selftest/run.mjs"))
        .arg(&wasm)
        .args(["--expect", backends, "--seed", "20261201"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (Node.js 20 is needed): {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}");
    assert!(
        out.status.success(),
        "wasm self test [{variant}] failed ({}):\n{stdout}{stderr}",
        out.status
    );
}

#[test]
fn wasm_reference_build_has_only_the_reference() {
    run_selftest("reference", &[], "reference");
}

#[test]
fn wasm_simd128_kernels_equal_reference_bitwise() {
    run_selftest("simd128", &[], "reference,simd128");
}

/// Node 20 needs the flag for relaxed-simd, and its baseline compiler (Liftoff) gets
/// relaxed_dot wrong inside loops (measured on Node 20): TurboFan only.
#[test]
fn wasm_relaxed_simd_kernels_equal_reference_bitwise() {
    run_selftest(
        "relaxed",
        &["--experimental-wasm-relaxed-simd", "--no-liftoff"],
        "reference,simd128,relaxed",
    );
}
