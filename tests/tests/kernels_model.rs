//! Model-level determinism across backends: the logits of every backend in
//! `Kernels::available()` equal the reference's bit for bit, on synthetic models of every weight
//! type (batched prefill, then token-by-token decode) and on the real model (one short prompt).

use std::sync::Arc;

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::kernels::Kernels;
use inferno_core::model::WeightDtype;
use inferno_core::parallel::Serial;
use inferno_core::quant::GgmlType;
use inferno_tests::{synthetic_gguf, SyntheticShape};

/// A prompt of about 40 tokens.
const PROMPT: &str = "The quick brown fox jumps over the lazy dog. In the beginning the Universe \
                      was created; this has made a lot of people very angry and been widely \
                      regarded as a bad move.";

/// Prefill of the prompt (every position's logits), then three decode steps.
fn logits(engine: &Engine, prompt: &[u32]) -> Vec<f32> {
    let mut session = engine.new_session();
    let mut all = session.append_all_logits(prompt).expect("prefill");
    for &token in &prompt[..3] {
        all.extend(session.append_all_logits(&[token]).expect("decode"));
    }
    all
}

fn assert_backends_match_reference(engine: &Engine, what: &str) {
    let prompt = engine.encode_prompt(PROMPT).expect("prompt encodes");
    let vocab = engine.config().vocab_size as u32;
    let prompt: Vec<u32> = prompt.into_iter().map(|t| t % vocab).collect();
    let reference =
        engine.with_kernels(&inferno_core::kernels::reference::KERNELS, Arc::new(Serial));
    let want = logits(&reference, &prompt);
    let backends: Vec<_> = Kernels::available()
        .into_iter()
        .filter(|k| k.name != "reference")
        .collect();
    if backends.is_empty() {
        println!("skipped: this host has no SIMD backend besides the reference");
    }
    for k in backends {
        let got = logits(&engine.with_kernels(k, Arc::new(Serial)), &prompt);
        assert_eq!(got.len(), want.len());
        let vocab = vocab as usize;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{what} [{}]: position {} logit {}: got {g:e}, reference {w:e}",
                k.name,
                i / vocab,
                i % vocab
            );
        }
    }
}

fn check_synthetic(shape: SyntheticShape, ty: GgmlType, dtype: WeightDtype, seed: u64) {
    let bytes = synthetic_gguf(&shape, seed, ty);
    let options = EngineOptions {
        dtype,
        ..Default::default()
    };
    let engine = Engine::from_gguf_bytes(&bytes, options).expect("synthetic model loads");
    let what = format!("synthetic {shape:?} {ty:?} {dtype:?}");
    assert_backends_match_reference(&engine, &what);
}

#[test]
fn synthetic_tiny_q4_1_q4_0_q5_0_q5_1_q8_0_iq4_nl_f16_bf16_f32_logits_all_backends() {
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        check_synthetic(SyntheticShape::tiny(), ty, WeightDtype::AsStored, 11);
    }
}

#[test]
fn synthetic_head_dim_128_q4_1_q5_1_q8_0_logits_all_backends() {
    for ty in [GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q8_0] {
        check_synthetic(
            SyntheticShape::head_dim_128(),
            ty,
            WeightDtype::AsStored,
            12,
        );
    }
}

#[test]
fn synthetic_untied_q4_0_logits_all_backends() {
    check_synthetic(
        SyntheticShape::untied(),
        GgmlType::Q4_0,
        WeightDtype::AsStored,
        13,
    );
}

#[test]
fn synthetic_tiny_q4_1_dtype_f32_verification_path_logits_all_backends() {
    check_synthetic(SyntheticShape::tiny(), GgmlType::Q4_1, WeightDtype::F32, 14);
}

#[test]
fn real_model_prompt_40_tokens_logits_all_backends() {
    let options = EngineOptions::default();
    let engine =
        Engine::from_gguf_bytes(inferno_tests::model_bytes(), options).expect("model loads");
    assert_backends_match_reference(&engine, "SmolLM2-135M Q4_1");
}

#[test]
fn synthetic_dim_256_q2_k_q3_k_q4_k_q5_k_q6_k_iq4_xs_logits_all_backends() {
    // K-quants need rows of whole 256-element super-blocks.
    let shape = SyntheticShape {
        dim: 256,
        hidden_dim: 512,
        head_dim: 64,
        ..SyntheticShape::tiny()
    };
    for ty in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        check_synthetic(shape.clone(), ty, WeightDtype::AsStored, 15);
    }
}

/// A synthetic tiny Q8_0 model with extra metadata and tensors, loaded.
fn synthetic_with(
    extra: &[(&str, inferno_core::formats::gguf::Value)],
    rope_freqs: Option<f32>,
) -> Engine {
    let shape = SyntheticShape::tiny();
    let mut w = inferno_native::synthetic::synthetic_gguf(
        &shape,
        21,
        GgmlType::Q8_0,
        inferno_tests::smollm2_tokenizer_metadata(),
    )
    .unwrap();
    for (k, v) in extra {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    if let Some(f) = rope_freqs {
        let bytes: Vec<u8> = (0..shape.head_dim / 2)
            .flat_map(|_| f.to_le_bytes())
            .collect();
        w.add_tensor(
            "rope_freqs.weight",
            GgmlType::F32,
            &[shape.head_dim / 2],
            bytes,
        )
        .unwrap();
    }
    Engine::from_gguf_bytes(&w.to_bytes(), EngineOptions::default()).expect("model loads")
}

#[test]
fn rope_freqs_factors_1_equal_no_scaling_and_factors_2_equal_linear_2_bitwise() {
    use inferno_core::formats::gguf::Value;
    let prompt: Vec<u32> = (0..24).map(|i| (i * 7919 + 3) % 49152).collect();
    let run = |e: &Engine| e.new_session().append_all_logits(&prompt).unwrap();
    let plain = run(&synthetic_with(&[], None));
    let ones = run(&synthetic_with(&[], Some(1.0)));
    assert!(plain
        .iter()
        .zip(&ones)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    let linear = run(&synthetic_with(
        &[
            ("llama.rope.scaling.type", Value::String("linear".into())),
            ("llama.rope.scaling.factor", Value::F32(2.0)),
        ],
        None,
    ));
    let twos = run(&synthetic_with(&[], Some(2.0)));
    assert!(linear
        .iter()
        .zip(&twos)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(
        plain.iter().zip(&twos).any(|(a, b)| a != b),
        "factors of 2 change the logits"
    );
}
