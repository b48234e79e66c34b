//! Model-level determinism across thread counts (ARCHITECTURE.md, contract rule 7): the spin pool with
//! 1, 2, 3 and 8 threads gives the same logits bit for bit, on a synthetic model (batched prefill
//! then token-by-token decode) and on the real model (one short prompt).

use std::sync::Arc;

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::quant::GgmlType;
use inferno_native::pool;
use inferno_tests::{synthetic_gguf, SyntheticShape};

/// Over 32 tokens, so the per-token steps between matmuls (norms, activation quantization, the
/// gate) are split across threads too (`forward::per_token`).
const PROMPT: &str = "Once upon a time, in a land far away, there lived a clockmaker who \
                      could not tell the time. Every morning he wound a hundred clocks, and \
                      every evening each of them showed a different hour, so the village \
                      never agreed on when to eat.";

fn engine(bytes: &[u8], threads: usize) -> Engine {
    let pool = pool::start(threads).expect("pool starts");
    Engine::from_gguf_bytes(
        bytes,
        EngineOptions {
            parallel: Some(Arc::new(pool)),
            ..Default::default()
        },
    )
    .expect("model loads")
}

/// Every position's logits for the prompt, then three single-token decode steps.
fn logits(engine: &Engine, prompt: &[u32]) -> Vec<f32> {
    let mut session = engine.new_session();
    let mut all = session.append_all_logits(prompt).expect("prefill");
    for &token in &prompt[..3] {
        all.extend(session.append_all_logits(&[token]).expect("decode"));
    }
    all
}

fn assert_same_for_every_thread_count(bytes: &[u8], what: &str) {
    let one = engine(bytes, 1);
    let vocab = one.config().vocab_size;
    let prompt: Vec<u32> = one
        .encode_prompt(PROMPT)
        .expect("prompt encodes")
        .into_iter()
        .map(|t| t % vocab as u32)
        .collect();
    assert!(
        prompt.len() >= 32,
        "{what}: the prompt is {} tokens",
        prompt.len()
    );
    let want = logits(&one, &prompt);
    for threads in [2, 3, 8] {
        let got = logits(&engine(bytes, threads), &prompt);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{what} (threads={threads}, kernels={}): position {} logit {}: got {g:e}, \
                 1 thread {w:e}",
                one.kernels().name,
                i / vocab,
                i % vocab
            );
        }
    }
}

#[test]
fn synthetic_q4_1_same_logits_for_1_2_3_8_threads() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 1, GgmlType::Q4_1);
    assert_same_for_every_thread_count(&bytes, "synthetic tiny Q4_1");
}

#[test]
fn synthetic_q5_0_same_logits_for_1_2_3_8_threads() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 2, GgmlType::Q5_0);
    assert_same_for_every_thread_count(&bytes, "synthetic tiny Q5_0");
}

#[test]
fn real_model_same_logits_for_1_2_3_8_threads() {
    assert_same_for_every_thread_count(inferno_tests::model_bytes(), "SmolLM2-135M Q4_1");
}

#[test]
fn synthetic_dim_256_q4_k_q6_k_same_logits_for_1_2_3_8_threads() {
    let shape = SyntheticShape {
        dim: 256,
        hidden_dim: 512,
        head_dim: 64,
        ..SyntheticShape::tiny()
    };
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        let bytes = synthetic_gguf(&shape, 4, ty);
        assert_same_for_every_thread_count(&bytes, &format!("synthetic dim 256 {ty:?}"));
    }
}
