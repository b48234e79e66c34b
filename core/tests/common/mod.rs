//! Helpers shared by core's integration tests: the oracle's reference data, which lives in the
//! repository (tests/data/oracle, a copy of the Hugging Face transformers reference run).

#![allow(dead_code)] // each test binary uses some of these

use std::path::PathBuf;

use inferno_core::config::ModelConfig;

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

/// A one-layer Llama shape small enough to write by hand (dim 64, 4 heads of 16, 2 KV heads,
/// vocabulary 8), for tests of metadata, configs and file checks.
pub fn tiny_llama_config() -> ModelConfig {
    ModelConfig {
        architecture: "llama".into(),
        dim: 64,
        hidden_dim: 96,
        n_layers: 1,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        vocab_size: 8,
        context_length: 128,
        rms_eps: 1e-6,
        rope_theta: 1e6,
        rope_scaling: None,
        tied_embeddings: true,
        attention_bias: false,
        qk_norm: false,
        sliding_window: None,
        extras: Default::default(),
    }
}
