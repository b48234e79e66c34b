//! Shared helpers for the cross-crate tests: the test model (fetched once), the oracle directory,
//! a small .npy reader, and synthetic random-weight Llama GGUFs that carry the real SmolLM2
//! tokenizer, so model code can be tested at any shape without another download.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use inferno_core::formats::gguf::{GgufFile, Value};
use inferno_core::quant::GgmlType;
use inferno_native::synthetic::{self, tokenizer_metadata};
pub use inferno_native::synthetic::{SplitMix64, SyntheticShape, SMOLLM2_VOCAB};

/// Path of the SmolLM2-135M-Instruct Q4_1 GGUF, fetched (and checksummed) by
/// scripts/fetch-model.sh on first use. Panics with the script's output if it fails: the model
/// tests must not pass silently without a model.
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-model.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
        assert!(
            path.is_file(),
            "fetch-model.sh printed '{}', which is not a file",
            path.display()
        );
        path
    })
    .clone()
}

/// The `inferno` binary the CLI tests run: `$INFERNO_BIN` (make test sets it), else the release
/// build of this workspace.
pub fn inferno_binary() -> PathBuf {
    let path = std::env::var_os("INFERNO_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/inferno"));
    assert!(
        path.is_file(),
        "{} is missing: run `make build` (or `make test`) first",
        path.display()
    );
    path
}

/// The test model's bytes, read once per test binary.
pub fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = model_path();
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    })
}

/// Gemma 3 270M Q4_K_M (made by llama.cpp; `scripts/fetch-model.sh gemma3-270m`, which `make
/// test` runs), or `$INFERNO_GEMMA`. Never committed: its licence forbids it.
pub fn gemma_path() -> PathBuf {
    let path = match std::env::var_os("INFERNO_GEMMA") {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = std::env::var_os("INFERNO_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/inferno")
                });
            cache.join("models/gemma-3-270m-q4_k_m.gguf")
        }
    };
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-model.sh gemma3-270m (make test does)",
        path.display()
    );
    path
}

/// The oracle's reference data (tests/data/oracle, in the repository), or `$INFERNO_ORACLE`.
pub fn oracle_dir() -> PathBuf {
    match std::env::var_os("INFERNO_ORACLE") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("data/oracle"),
    }
}

/// Reads a little-endian float32 C-order .npy file (format versions 1-3): (shape, values).
pub fn read_npy_f32(path: impl AsRef<Path>) -> (Vec<usize>, Vec<f32>) {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    inferno_native::npy::parse_f32(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// All `tokenizer.*` metadata of the real SmolLM2 GGUF (chat template included).
pub fn smollm2_tokenizer_metadata() -> &'static [(String, Value)] {
    static META: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    META.get_or_init(|| {
        tokenizer_metadata(&GgufFile::parse(model_bytes()).expect("the test model parses"))
    })
}

/// A random-weight Llama GGUF of the given shape with the real SmolLM2 tokenizer (see
/// [`inferno_native::synthetic::synthetic_gguf`]). Same seed, same bytes.
pub fn synthetic_gguf(shape: &SyntheticShape, seed: u64, ty: GgmlType) -> Vec<u8> {
    synthetic::synthetic_gguf(shape, seed, ty, smollm2_tokenizer_metadata())
        .expect("synthetic shapes are valid")
        .to_bytes()
}
