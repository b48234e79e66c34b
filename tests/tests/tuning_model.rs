//! Model-level determinism over every way the work can be cut (ARCHITECTURE.md, contract rule 7):
//! for every backend, threads 1/2/3/8 and several forced tunings (rows per matmul work item,
//! tokens per attention work item) plus the load-time autotuned one, with and without prefetching
//! the weights ahead in one-token matmuls, a batched prefill and a token-by-token run give the
//! reference's logits bit for bit.

use std::sync::Arc;

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::kernels::{reference, set_stream_prefetch, Kernels};
use inferno_core::model::{Tuning, STREAM_PREFETCH};
use inferno_core::parallel::Serial;
use inferno_core::quant::GgmlType;
use inferno_native::pool::{self, ThreadPool};
use inferno_tests::{synthetic_gguf, SyntheticShape};

/// Forced configurations: (decode rows, batch rows, attention tokens), whole and partial tiles.
const TUNINGS: [(usize, usize, usize); 4] = [(8, 8, 1), (16, 256, 3), (256, 16, 64), (24, 40, 5)];

fn prompt(engine: &Engine, n: usize) -> Vec<u32> {
    let vocab = engine.config().vocab_size as u64;
    (0..n as u64)
        .map(|i| ((i * 7_919 + 13) % vocab) as u32)
        .collect()
}

/// Every position's logits: the whole prompt as one batch, or one token at a time.
fn logits(engine: &Engine, prompt: &[u32], batched: bool) -> Vec<f32> {
    let mut session = engine.new_session();
    if batched {
        return session.append_all_logits(prompt).expect("prefill");
    }
    let mut all = Vec::new();
    for &token in prompt {
        all.extend(session.append_all_logits(&[token]).expect("decode"));
    }
    all
}

fn assert_bits_eq(got: &[f32], want: &[f32], vocab: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: logit count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: position {} logit {}: got {g:e}, reference {w:e}",
            i / vocab,
            i % vocab
        );
    }
}

/// The reference (serial, default tuning, token by token) against every backend x threads x
/// tuning, batched and token by token (`token_by_token` false: batched only, for big models).
fn assert_every_configuration_matches(
    bytes: &[u8],
    n_tokens: usize,
    token_by_token: bool,
    what: &str,
) {
    let base = Engine::from_gguf_bytes(bytes, EngineOptions::default()).expect("model loads");
    let vocab = base.config().vocab_size;
    let prompt = prompt(&base, n_tokens);
    let reference = base
        .with_kernels(&reference::KERNELS, Arc::new(Serial))
        .with_tuning(Tuning::default());
    let want = logits(&reference, &prompt, !token_by_token);
    for kernels in Kernels::available() {
        for threads in [1, 2, 3, 8] {
            let pool: Arc<ThreadPool> = Arc::new(pool::start(threads).expect("pool starts"));
            let tuned = base.with_kernels(kernels, pool);
            let mut tunings: Vec<(String, Tuning)> = TUNINGS
                .iter()
                .map(|&(d, b, a)| (format!("fixed({d},{b},{a})"), Tuning::fixed(d, b, a)))
                .collect();
            tunings.push(("autotuned".into(), tuned.tuning().clone()));
            // The same tuning with the longest prefetch distance the tuner tries (a process-wide
            // setting: other tests of this binary running meanwhile get the same bits too). Only
            // few-token passes read it, so only token-by-token runs need it.
            if token_by_token {
                tunings.push(("autotuned+prefetch".into(), tuned.tuning().clone()));
            }
            for (name, tuning) in tunings {
                let engine = tuned.with_tuning(tuning);
                let distance = match name.as_str() {
                    "autotuned+prefetch" => STREAM_PREFETCH[STREAM_PREFETCH.len() - 1],
                    _ => 0,
                };
                set_stream_prefetch(distance);
                for batched in [true, false] {
                    if !batched && !token_by_token {
                        continue;
                    }
                    let got = logits(&engine, &prompt, batched);
                    let how = if batched { "batched" } else { "token-by-token" };
                    let case = format!(
                        "{what} (kernels={}, threads={threads}, tuning={name}, {how}, tokens={n_tokens})",
                        kernels.name
                    );
                    assert_bits_eq(&got, &want, vocab, &case);
                }
                set_stream_prefetch(0);
            }
        }
    }
}

#[test]
fn synthetic_tiny_q4_1_every_backend_threads_1_2_3_8_every_tuning_batched_and_token_by_token() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 3, GgmlType::Q4_1);
    assert_every_configuration_matches(&bytes, 37, true, "synthetic tiny Q4_1");
}

#[test]
fn synthetic_tiny_q4_0_every_backend_threads_1_2_3_8_every_tuning_batched_and_token_by_token() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 4, GgmlType::Q4_0);
    assert_every_configuration_matches(&bytes, 37, true, "synthetic tiny Q4_0");
}

#[test]
fn synthetic_untied_q8_0_every_backend_threads_1_2_3_8_every_tuning_batched_and_token_by_token() {
    let bytes = synthetic_gguf(&SyntheticShape::untied(), 5, GgmlType::Q8_0);
    assert_every_configuration_matches(&bytes, 21, true, "synthetic untied Q8_0");
}

#[test]
fn synthetic_head_dim_128_q4_0_every_backend_threads_1_2_3_8_every_tuning_batched() {
    let bytes = synthetic_gguf(&SyntheticShape::head_dim_128(), 6, GgmlType::Q4_0);
    assert_every_configuration_matches(&bytes, 70, false, "synthetic head_dim 128 Q4_0");
}

#[test]
fn real_model_every_backend_threads_1_2_3_8_every_tuning_batched_12_tokens() {
    assert_every_configuration_matches(
        inferno_tests::model_bytes(),
        12,
        false,
        "SmolLM2-135M Q4_1",
    );
}

/// The per-phase choice (one backend for one-token forwards, another for batches) gives the
/// reference's bits whichever pair runs, and a caller who names a backend gets only that one.
#[test]
fn synthetic_tiny_q4_1_decode_on_each_backend_batches_on_another_equal_reference() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 3, GgmlType::Q4_1);
    let reference_engine = Engine::from_gguf_bytes(
        &bytes,
        EngineOptions {
            kernels: Some(&reference::KERNELS),
            ..Default::default()
        },
    )
    .expect("model loads");
    let prompt = prompt(&reference_engine, 19);
    let expected = logits(&reference_engine, &prompt, false);
    assert_eq!(reference_engine.decode_kernels().name, "reference");
    for batch in Kernels::available() {
        for decode in Kernels::available() {
            let engine = reference_engine.with_kernels(batch, Arc::new(Serial));
            assert_eq!(
                engine.decode_kernels().name,
                batch.name,
                "named kernels only"
            );
            let tuning = Tuning {
                decode_kernels: Some(decode),
                ..engine.tuning().clone()
            };
            let engine = engine.with_tuning(tuning);
            assert_eq!(engine.decode_kernels().name, decode.name);
            // The prompt's first token alone (one-token forward), then the rest as a batch,
            // then token by token: every path mixes the two backends.
            let mut session = engine.new_session();
            let mut got = session.append_all_logits(&prompt[..1]).expect("forward");
            got.extend(session.append_all_logits(&prompt[1..9]).expect("forward"));
            for &t in &prompt[9..] {
                got.extend(session.append_all_logits(&[t]).expect("forward"));
            }
            assert!(
                got == expected,
                "decode on {} with batches on {} differs from the reference",
                decode.name,
                batch.name
            );
        }
    }
}
