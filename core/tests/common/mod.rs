//! Helpers shared by core's integration tests: the oracle's reference data, which lives in the
//! repository (tests/data/oracle, a copy of the Hugging Face transformers reference run).

use std::path::PathBuf;

/// The oracle directory (`tests/data/oracle` of this repository), or `$INFERNO_ORACLE`.
pub fn oracle_dir() -> PathBuf {
    match std::env::var_os("INFERNO_ORACLE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/oracle"),
    }
}

/// A text file of the oracle, by its path inside the oracle directory.
pub fn read_oracle(rel: &str) -> String {
    let path = oracle_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
