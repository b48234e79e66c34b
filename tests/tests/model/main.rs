//! Tests on the real SmolLM2-135M model, in one binary so the weights are loaded once per path
//! (quantized as stored, and dequantized to f32) and shared by every test.

mod contract;
mod fingerprint;
mod oracle;

use std::sync::OnceLock;

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::model::WeightDtype;
use serde_json::Value;

/// The model as stored (Q4_1 / Q8_0 weights x Q8 activations), on the best kernels.
pub fn quantized() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::from_gguf_bytes(inferno_tests::model_bytes(), EngineOptions::default())
            .expect("load the model")
    })
}

/// The verification path: weights dequantized to f32, f32 activations and KV cache.
pub fn f32_path() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let options = EngineOptions {
            dtype: WeightDtype::F32,
            ..Default::default()
        };
        Engine::from_gguf_bytes(inferno_tests::model_bytes(), options)
            .expect("load the model as f32")
    })
}

/// One oracle prompt file (tests/data/oracle/logits/NAME.json).
pub fn oracle_prompt(name: &str) -> Value {
    let path = inferno_tests::oracle_dir().join(format!("logits/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("oracle json")
}

pub const ORACLE_PROMPTS: [&str; 4] = [
    "raw_1_short",
    "raw_3_prose",
    "chat_1_default_system",
    "chat_2_with_system",
];

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
