//! Tokenizer input that must be refused with a message saying what is wrong: a GGUF
//! `tokenizer.ggml.pre` llama.cpp does not know, and a tokenizer.json whose merges name tokens
//! missing from its vocabulary. Also the load-time check of special token ids.

use inferno_core::formats::gguf::Value;
use inferno_core::formats::SpecialTokens;
use inferno_core::tokenizer::Tokenizer;
use inferno_core::Error;

mod common;

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

/// A byte-level vocabulary of 6 tokens, with `tokenizer.ggml.pre` = `pre` (or no key).
fn byte_level_metadata(pre: Option<&str>) -> Vec<(String, Value)> {
    let mut meta = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            strings(&["<|end|>", "1", "2", "12", "Ġ", "Ġ1"]),
        ),
        ("tokenizer.ggml.merges".into(), strings(&["1 2", "Ġ 1"])),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(0)),
    ];
    if let Some(pre) = pre {
        meta.push(("tokenizer.ggml.pre".into(), Value::String(pre.into())));
    }
    meta
}

#[test]
fn gguf_pre_tekken_and_unknown_are_refused_naming_the_value() {
    for pre in ["tekken", "unknown-pre", ""] {
        match Tokenizer::from_gguf_metadata(&byte_level_metadata(Some(pre))) {
            Err(Error::Metadata { key, problem }) => {
                assert_eq!(key, "tokenizer.ggml.pre", "pre={pre:?}");
                assert!(
                    problem.starts_with(&format!("unknown pre-tokenizer '{pre}' (supported: ")),
                    "pre={pre:?}: {problem}"
                );
            }
            other => panic!("pre={pre:?}: expected a metadata error, got {other:?}"),
        }
    }
}

#[test]
fn gguf_pre_missing_is_default_and_known_values_build() {
    let default = Tokenizer::from_gguf_metadata(&byte_level_metadata(Some("default"))).unwrap();
    let missing = Tokenizer::from_gguf_metadata(&byte_level_metadata(None)).unwrap();
    // GPT-2's regex keeps " 12" whole: Ġ + (1 2), as "default" does.
    assert_eq!(missing.encode(" 12").unwrap(), [4, 3]);
    assert_eq!(default.encode(" 12").unwrap(), [4, 3]);
    for pre in [
        "default",
        "gpt2",
        "gpt-2",
        "smollm",
        "llama3",
        "llama-bpe",
        "llama-v3",
        "smaug-bpe",
        "dbrx",
        "qwen2",
    ] {
        let tok = Tokenizer::from_gguf_metadata(&byte_level_metadata(Some(pre)));
        assert!(tok.is_ok(), "pre={pre}: {:?}", tok.err());
    }
}

#[test]
fn gguf_pre_that_is_not_a_string_is_refused() {
    let mut meta = byte_level_metadata(None);
    meta.push(("tokenizer.ggml.pre".into(), Value::U32(7)));
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&meta),
        Err(Error::Metadata { key, .. }) if key == "tokenizer.ggml.pre"
    ));
}

#[test]
fn tokenizer_json_merge_of_parens_missing_from_vocab_names_the_merge() {
    let json = r#"{
        "version": "1.0",
        "added_tokens": [],
        "model": {
            "type": "BPE",
            "vocab": {"a": 0, "b": 1, "ab": 2, "(": 3, ")": 4},
            "merges": ["a b", "( )"]
        }
    }"#;
    match Tokenizer::from_json(json) {
        Err(Error::Tokenizer(message)) => assert!(
            message.starts_with(
                "tokenizer.json: merges refer to tokens not in the vocabulary: merge 1 (\"(\" + \")\") needs \"()\", which is not in model.vocab ("
            ),
            "{message}"
        ),
        other => panic!("expected a tokenizer error, got {other:?}"),
    }
    // The same file with "()" in the vocabulary loads.
    let fixed = json.replace(r#"")": 4}"#, r#"")": 4, "()": 5}"#);
    assert_eq!(
        Tokenizer::from_json(&fixed).unwrap().encode("()").unwrap(),
        [5]
    );
}

#[test]
fn tokenizer_json_smollm2_oracle_loads_unchanged() {
    let tok = Tokenizer::from_json(&common::read_oracle("hf/tokenizer.json")).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
}

#[test]
fn special_ids_bos_eos_end_of_turn_past_6_tokens_or_model_vocab_are_refused() {
    let tok = Tokenizer::from_gguf_metadata(&byte_level_metadata(Some("gpt2"))).unwrap();
    let ok = SpecialTokens {
        bos: Some(0),
        eos: Some(0),
        eos_extra: vec![5],
        add_bos: false,
    };
    ok.check_ids(&tok, 6).unwrap();
    let cases = [
        (
            SpecialTokens {
                bos: Some(6),
                ..ok.clone()
            },
            6,
            "bos",
            6,
        ),
        (
            SpecialTokens {
                eos: Some(99),
                ..ok.clone()
            },
            6,
            "eos",
            99,
        ),
        (
            SpecialTokens {
                eos_extra: vec![1, 6],
                ..ok.clone()
            },
            6,
            "end-of-turn",
            6,
        ),
        // Inside the tokenizer but past the model's 5 embedding rows.
        (
            SpecialTokens {
                eos_extra: vec![],
                ..ok.clone()
            },
            5,
            "tokenizer's \"Ġ1\"",
            5,
        ),
    ];
    for (special, model_vocab, want_role, want_id) in cases {
        match special.check_ids(&tok, model_vocab) {
            Err(Error::TokenOutOfVocabulary {
                role,
                id,
                model_vocab: got_vocab,
                tokenizer_vocab,
            }) => assert_eq!(
                (role.as_str(), id, got_vocab, tokenizer_vocab),
                (want_role, want_id, model_vocab, 6)
            ),
            other => panic!("{special:?} with {model_vocab} ids: got {other:?}"),
        }
    }
    let message = SpecialTokens { bos: Some(6), ..ok }
        .check_ids(&tok, 6)
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "the bos token id 6 is outside the vocabulary (the model has 6 ids, the tokenizer 6 tokens)"
    );
}
