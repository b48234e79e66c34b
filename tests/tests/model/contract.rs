//! The reduction contract at model level: a batch gives the same bits as token-by-token, and a
//! session built by any sequence of appends, truncates, forks and draft syncs gives the same
//! logits as one forward over its final tokens. On the real model and on synthetic shapes.

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::quant::GgmlType;
use inferno_tests::{synthetic_gguf, SyntheticShape};

use crate::{bits, ids, oracle_prompt, quantized};

/// Logits of every position, one batched forward.
fn batched(engine: &Engine, tokens: &[u32]) -> Vec<f32> {
    engine.new_session().append_all_logits(tokens).unwrap()
}

/// Logits of every position, one token per forward.
fn one_by_one(engine: &Engine, tokens: &[u32]) -> Vec<f32> {
    let mut session = engine.new_session();
    let mut out = Vec::new();
    for &t in tokens {
        session.append(&[t]).unwrap();
        out.extend_from_slice(session.logits().unwrap());
    }
    out
}

/// Tokens spread over the vocabulary (any id is valid input).
fn spread_tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

#[test]
fn batched_equals_token_by_token_real_model_quantized_40_tokens() {
    let engine = quantized();
    let prompt = ids(&oracle_prompt("raw_3_prose")["prompt_ids"]);
    let tokens = &prompt[..40];
    assert_eq!(
        bits(&batched(engine, tokens)),
        bits(&one_by_one(engine, tokens))
    );
}

fn check_synthetic(shape: SyntheticShape, ty: GgmlType, n_tokens: usize) {
    let bytes = synthetic_gguf(&shape, 7, ty);
    let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default()).unwrap();
    let tokens = spread_tokens(n_tokens, engine.config().vocab_size);
    let a = batched(&engine, &tokens);
    assert!(
        a.iter().all(|v| v.is_finite()),
        "{shape:?} {ty:?}: logits must be finite"
    );
    assert_eq!(
        bits(&a),
        bits(&one_by_one(&engine, &tokens)),
        "{shape:?} {ty:?}"
    );
}

#[test]
fn batched_equals_token_by_token_synthetic_tiny_q4_1_q4_0_q8_0_f16_bf16_f32_70_tokens() {
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        check_synthetic(SyntheticShape::tiny(), ty, 70);
    }
}

#[test]
fn batched_equals_token_by_token_synthetic_head_dim_128_no_gqa_q4_0_70_tokens() {
    check_synthetic(SyntheticShape::head_dim_128(), GgmlType::Q4_0, 70);
}

#[test]
fn batched_equals_token_by_token_synthetic_untied_q8_0_130_tokens() {
    check_synthetic(SyntheticShape::untied(), GgmlType::Q8_0, 130);
}

#[test]
fn session_appends_truncates_forks_equal_one_forward_real_model() {
    let engine = quantized();
    let prompt = ids(&oracle_prompt("raw_3_prose")["prompt_ids"]);
    let target = &prompt[..90];
    let want = bits(&batched(engine, target)[89 * engine.config().vocab_size..]);

    // Appends in uneven pieces.
    let mut s = engine.new_session();
    for piece in [&target[..5], &target[5..6], &target[6..23], &target[23..90]] {
        s.append(piece).unwrap();
    }
    assert_eq!(bits(s.logits().unwrap()), want, "uneven appends");

    // A detour: append other tokens, truncate back, continue.
    let mut s = engine.new_session();
    s.append(&target[..50]).unwrap();
    s.append(&prompt[200..230]).unwrap();
    s.truncate(30);
    s.prefill(&target[30..70]).unwrap();
    s.append(&target[70..]).unwrap();
    assert_eq!(bits(s.logits().unwrap()), want, "truncate and re-append");

    // Fork a prefix, continue both copies.
    let mut base = engine.new_session();
    base.append(&target[..64]).unwrap();
    let mut fork = base.fork();
    fork.append(&target[64..]).unwrap();
    base.append(&prompt[64..80]).unwrap();
    assert_eq!(bits(fork.logits().unwrap()), want, "fork");
    assert_eq!(base.len(), 80);

    // Logits dropped by a truncate are recomputed on demand.
    let mut s = engine.new_session();
    s.append(&target[..]).unwrap();
    s.append(&prompt[90..95]).unwrap();
    s.truncate(90);
    assert_eq!(bits(s.logits().unwrap()), want, "logits after truncate");
}

#[test]
fn sync_draft_while_typing_equals_one_forward_real_model() {
    let engine = quantized();
    let anchor = engine.tokenizer().encode("<|im_start|>user\n").unwrap();
    let mut s = engine.new_session();
    s.append(&anchor).unwrap();
    // A user types, pauses, fixes a typo, types on.
    for draft in [
        "Wh",
        "What is the capi",
        "What is the capitol",
        "What is the capital of Fr",
        "What is the capital of France?",
    ] {
        s.sync_draft(anchor.len(), draft).unwrap();
        // The session holds the anchor plus a prefix of the draft's tokens.
        let draft_ids = engine.tokenizer().encode(draft).unwrap();
        assert_eq!(&s.tokens()[..anchor.len()], &anchor[..]);
        assert!(
            draft_ids.starts_with(&s.tokens()[anchor.len()..]),
            "{draft}: session holds a prefix of the draft"
        );
    }
    // The text ends at punctuation, so nothing was held back.
    let full: Vec<u32> = anchor
        .iter()
        .copied()
        .chain(
            engine
                .tokenizer()
                .encode("What is the capital of France?")
                .unwrap(),
        )
        .collect();
    assert_eq!(s.tokens(), &full[..]);
    let want = bits(&batched(engine, &full)[(full.len() - 1) * engine.config().vocab_size..]);
    assert_eq!(bits(s.logits().unwrap()), want);

    // A draft that does not end at a boundary holds its last token back.
    let r = s
        .sync_draft(anchor.len(), "What is the capital of Germ")
        .unwrap();
    let draft_ids = engine
        .tokenizer()
        .encode("What is the capital of Germ")
        .unwrap();
    assert_eq!(s.len(), anchor.len() + draft_ids.len() - 1);
    assert_eq!(r.reused + r.prefilled, draft_ids.len() - 1);
}

#[test]
fn context_overflow_and_bad_token_are_errors_not_panics() {
    let shape = SyntheticShape {
        context_length: 16,
        ..SyntheticShape::tiny()
    };
    let engine = Engine::from_gguf_bytes(
        &synthetic_gguf(&shape, 3, GgmlType::Q4_0),
        EngineOptions::default(),
    )
    .unwrap();
    let mut s = engine.new_session();
    s.append(&spread_tokens(10, 1000)).unwrap();
    let err = s.append(&spread_tokens(7, 1000)).unwrap_err();
    assert!(
        matches!(
            err,
            inferno_core::Error::ContextOverflow {
                needed: 17,
                context: 16
            }
        ),
        "{err}"
    );
    // The failed append left the session as it was.
    assert_eq!(s.len(), 10);
    s.append(&spread_tokens(6, 1000)).unwrap();
    assert_eq!(s.len(), 16);
    let err = engine
        .new_session()
        .append(&[engine.config().vocab_size as u32])
        .unwrap_err();
    assert!(
        matches!(err, inferno_core::Error::InvalidToken { .. }),
        "{err}"
    );
    assert!(matches!(
        engine.encode_prompt("").unwrap_err(),
        inferno_core::Error::EmptyPrompt
    ));
}
