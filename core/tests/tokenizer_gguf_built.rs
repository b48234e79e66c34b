//! Tokenizers built from hand-made GGUF metadata: a tiny SentencePiece (`llama`) vocabulary with
//! byte fallback and merges derived from scores, the `pre` variants of byte-level BPE, and the
//! errors for unsupported or malformed metadata.

use inferno_core::formats::gguf::Value;
use inferno_core::tokenizer::{StreamDecoder, Tokenizer};
use inferno_core::Error;

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

/// `<unk> <s> </s>`, the 256 byte tokens `<0x00>`..`<0xFF>`, then these pieces with scores.
const PIECES: [(&str, f32); 17] = [
    ("▁", -100.0),
    ("h", -100.0),
    ("e", -100.0),
    ("l", -100.0),
    ("o", -100.0),
    ("w", -100.0),
    ("r", -100.0),
    ("d", -100.0),
    ("he", -1.0),
    ("ll", -1.5),
    ("hell", -2.0),
    ("hello", -2.5),
    ("▁hello", -3.0),
    ("or", -3.5),
    ("▁w", -4.0),
    ("▁wor", -4.5),
    ("ld", -5.0),
];
const WORLD: (&str, f32) = ("▁world", -5.5);
const BYTE0: u32 = 3;

fn spm_metadata() -> Vec<(String, Value)> {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in PIECES.iter().chain([&WORLD]) {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(*score);
    }
    vec![
        ("tokenizer.ggml.model".into(), Value::String("llama".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.scores".into(),
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
    ]
}

fn spm() -> Tokenizer {
    Tokenizer::from_gguf_metadata(&spm_metadata()).expect("llama tokenizer builds")
}

fn id(tok: &Tokenizer, piece: &str) -> u32 {
    tok.token_id(piece)
        .unwrap_or_else(|| panic!("{piece} is in the vocabulary"))
}

fn byte(b: u8) -> u32 {
    BYTE0 + b as u32
}

#[test]
fn spm_merges_follow_scores() {
    let tok = spm();
    assert_eq!(tok.vocab_size(), 3 + 256 + 18);
    let (hello, world) = (id(&tok, "▁hello"), id(&tok, "▁world"));
    assert_eq!(
        tok.encode("hello world").expect("encode"),
        vec![hello, world]
    );
    // A leading space is the dummy prefix plus a real one.
    assert_eq!(
        tok.encode(" hello").expect("encode"),
        vec![id(&tok, "▁"), hello]
    );
    assert_eq!(tok.encode("").expect("encode"), Vec::<u32>::new());
    // "hell" without the dummy prefix still merges through he + ll.
    assert_eq!(
        tok.encode("hellhello").expect("encode"),
        vec![id(&tok, "▁"), id(&tok, "hell"), id(&tok, "hello")]
    );
}

#[test]
fn spm_byte_fallback_and_decode() {
    let tok = spm();
    let hello = id(&tok, "▁hello");
    let ids = tok.encode("hello é").expect("encode");
    assert_eq!(ids, vec![hello, id(&tok, "▁"), byte(0xC3), byte(0xA9)]);
    assert_eq!(tok.decode(&ids, false).expect("decode"), "hello é");
    assert_eq!(
        tok.decode(&[hello, id(&tok, "▁world")], false)
            .expect("decode"),
        "hello world"
    );
    // A lone continuation byte cannot become a character.
    assert_eq!(
        tok.decode(&[byte(0xA9)], false).expect("decode"),
        "\u{FFFD}"
    );
}

#[test]
fn spm_special_tokens() {
    let tok = spm();
    let hello = id(&tok, "▁hello");
    assert!(tok.is_special(0) && tok.is_special(1) && tok.is_special(2));
    assert!(!tok.is_special(hello) && !tok.is_special(byte(0x41)));
    assert_eq!(
        tok.encode("<s>hello</s>").expect("encode"),
        vec![1, hello, 2]
    );
    let plain = tok.encode_plain("<s>").expect("encode_plain");
    assert_eq!(
        plain,
        vec![id(&tok, "▁"), byte(b'<'), byte(b's'), byte(b'>')]
    );
    assert_eq!(tok.decode(&[1, hello, 2], true).expect("decode"), "hello");
    assert_eq!(
        tok.decode(&[1, hello, 2], false).expect("decode"),
        "<s> hello</s>"
    );
    assert!(matches!(
        tok.decode(&[hello, 277], false),
        Err(Error::InvalidToken {
            id: 277,
            vocab_size: 277
        })
    ));
}

#[test]
fn spm_stream_decoder_across_byte_fallback() {
    let tok = spm();
    for text in [
        "hello é world",
        "hello 🦙🦙 wörld 你好",
        "e\u{301}\u{308} hello",
    ] {
        let ids = tok.encode(text).expect("encode");
        let mut stream = StreamDecoder::new();
        let mut pieces = Vec::new();
        for &id in &ids {
            pieces.push(stream.push(&tok, id).expect("push"));
        }
        pieces.push(stream.flush(&tok).expect("flush"));
        for piece in &pieces {
            assert!(
                !piece.contains('\u{FFFD}'),
                "stream(text={text:?}) piece {piece:?}"
            );
        }
        assert_eq!(
            pieces.concat(),
            tok.decode(&ids, false).expect("decode"),
            "text={text:?}"
        );
        assert_eq!(pieces.concat(), text, "text={text:?}");
    }
}

#[test]
fn spm_merges_from_the_file_win_over_scores() {
    let mut meta = spm_metadata();
    // Only "h e" may merge: "hello" stays in pieces.
    meta.push(("tokenizer.ggml.merges".into(), strings(&["h e"])));
    let tok = Tokenizer::from_gguf_metadata(&meta).expect("builds");
    let expected: Vec<u32> = ["▁", "he", "l", "l", "o"]
        .iter()
        .map(|piece| id(&tok, piece))
        .collect();
    assert_eq!(tok.encode("hello").expect("encode"), expected);
}

/// Byte-level vocabulary over digits, where the pre-tokenizer decides the result of "12345".
fn digits_metadata(pre: &str) -> Vec<(String, Value)> {
    vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
        (
            "tokenizer.ggml.tokens".into(),
            strings(&[
                "<|end|>", "1", "2", "3", "4", "5", "12", "123", "1234", "45", "Ġ", "Ġ1",
            ]),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(
                [3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
                    .map(Value::I32)
                    .to_vec(),
            ),
        ),
        (
            "tokenizer.ggml.merges".into(),
            strings(&["1 2", "12 3", "123 4", "4 5", "Ġ 1"]),
        ),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(0)),
    ]
}

#[test]
fn byte_level_pre_tokenizers() {
    // (pre, "12345", " 12345<|end|>")
    let cases: [(&str, &[u32], &[u32]); 5] = [
        ("gpt2", &[8, 5], &[10, 8, 5, 0]),
        ("default", &[8, 5], &[10, 8, 5, 0]),
        ("smollm", &[1, 2, 3, 4, 5], &[10, 1, 2, 3, 4, 5, 0]),
        ("llama-bpe", &[7, 9], &[10, 7, 9, 0]),
        ("qwen2", &[1, 2, 3, 4, 5], &[10, 1, 2, 3, 4, 5, 0]),
    ];
    for (pre, digits, spaced) in cases {
        let tok = Tokenizer::from_gguf_metadata(&digits_metadata(pre)).expect("builds");
        assert_eq!(
            tok.encode("12345").expect("encode"),
            digits,
            "encode(pre={pre}, \"12345\")"
        );
        assert_eq!(
            tok.encode(" 12345<|end|>").expect("encode"),
            spaced,
            "encode(pre={pre}, \" 12345<|end|>\")"
        );
        assert_eq!(
            tok.decode(spaced, false).expect("decode"),
            " 12345<|end|>",
            "pre={pre}"
        );
        assert_eq!(
            tok.decode(spaced, true).expect("decode"),
            " 12345",
            "pre={pre}"
        );
        assert!(tok.is_special(0) && !tok.is_special(1), "pre={pre}");
    }
}

#[test]
fn unsupported_and_malformed_metadata() {
    let mut meta = digits_metadata("gpt2");
    meta[0].1 = Value::String("bert".into());
    match Tokenizer::from_gguf_metadata(&meta) {
        Err(Error::Tokenizer(message)) => assert!(message.contains("bert"), "{message}"),
        other => panic!("expected a tokenizer error naming bert, got {other:?}"),
    }
    let missing = [
        (digits_metadata("gpt2"), "tokenizer.ggml.tokens"),
        (digits_metadata("gpt2"), "tokenizer.ggml.merges"),
        (spm_metadata(), "tokenizer.ggml.scores"),
    ];
    for (meta, missing_key) in missing {
        let meta: Vec<_> = meta.into_iter().filter(|(k, _)| k != missing_key).collect();
        match Tokenizer::from_gguf_metadata(&meta) {
            Err(Error::Metadata { key, .. }) => assert_eq!(key, missing_key),
            other => panic!("without {missing_key}: expected a metadata error, got {other:?}"),
        }
    }
    let mut bad_merge = digits_metadata("gpt2");
    bad_merge[4].1 = strings(&["12"]);
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&bad_merge),
        Err(Error::Metadata { .. })
    ));
    let mut short_types = digits_metadata("gpt2");
    short_types[3].1 = Value::Array(vec![Value::I32(3)]);
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&short_types),
        Err(Error::Metadata { .. })
    ));
    let mut wrong_type = digits_metadata("gpt2");
    wrong_type[2].1 = Value::U32(7);
    assert!(matches!(
        Tokenizer::from_gguf_metadata(&wrong_type),
        Err(Error::Metadata { .. })
    ));
}
