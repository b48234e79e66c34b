//! Golden tokenizer tests against the oracle (SmolLM2 tokenizer.json): every case's ids with
//! special tokens parsed and as plain text, decode round trips, the streaming decoder, and
//! error cases. Failures name the case so it can be replayed.

use inferno_core::tokenizer::{StreamDecoder, Tokenizer};
use inferno_core::Error;
use serde_json::Value;

mod common;

use common::read_oracle as read;

fn tokenizer() -> Tokenizer {
    Tokenizer::from_json(&read("hf/tokenizer.json")).expect("oracle tokenizer.json loads")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn cases() -> Vec<Value> {
    let all: Value = serde_json::from_str(&read("tokenizer_cases.json")).expect("cases json");
    all["cases"].as_array().expect("cases").clone()
}

fn logits_files() -> Vec<Value> {
    [
        "raw_1_short",
        "raw_3_prose",
        "chat_1_default_system",
        "chat_2_with_system",
    ]
    .iter()
    .map(|name| serde_json::from_str(&read(&format!("logits/{name}.json"))).expect("json"))
    .collect()
}

#[test]
fn oracle_cases_encode_from_json() {
    let tok = tokenizer();
    let cases = cases();
    assert_eq!(cases.len(), 45);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let text = case["text"].as_str().expect("text");
        let got = tok.encode(text).expect("encode");
        if got != ids(&case["ids"]) {
            failures.push(format!(
                "encode(source=json, case={i}, text={text:?}): got {got:?}"
            ));
        }
        let got = tok.encode_plain(text).expect("encode_plain");
        if got != ids(&case["ids_split_special_tokens"]) {
            failures.push(format!(
                "encode_plain(source=json, case={i}, text={text:?}): got {got:?}"
            ));
        }
        let decoded = tok.decode(&ids(&case["ids"]), false).expect("decode");
        if decoded != case["decoded"].as_str().expect("decoded") || decoded != text {
            failures.push(format!(
                "decode(source=json, case={i}, text={text:?}): got {decoded:?}"
            ));
        }
        let pieces: Vec<String> = ids(&case["ids"])
            .iter()
            .map(|&id| tok.token_text(id).expect("token"))
            .collect();
        let expected: Vec<String> = case["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_str().expect("token").to_string())
            .collect();
        if pieces != expected {
            failures.push(format!(
                "token_text(source=json, case={i}, text={text:?}): {pieces:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn oracle_prompts_encode_from_json() {
    let tok = tokenizer();
    for file in logits_files() {
        let name = file["name"].as_str().expect("name");
        let text = file["prompt_text"].as_str().expect("prompt_text");
        assert_eq!(
            tok.encode(text).expect("encode"),
            ids(&file["prompt_ids"]),
            "prompt={name}"
        );
    }
}

#[test]
fn special_tokens_from_json() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    for (text, id) in [("<|endoftext|>", 0), ("<|im_start|>", 1), ("<|im_end|>", 2)] {
        assert_eq!(tok.token_id(text), Some(id), "token_id({text})");
        assert_eq!(
            tok.token_text(id).as_deref(),
            Some(text),
            "token_text({id})"
        );
        assert!(tok.is_special(id), "is_special({id})");
    }
    assert!(!tok.is_special(19556));
    assert_eq!(tok.token_id("Ġworld"), Some(905));
    assert_eq!(tok.token_id("not a token at all"), None);
    assert_eq!(tok.token_text(49152), None);
    // Skipping specials drops the chat markers only.
    let chat = tok
        .encode("<|im_start|>user\nhi<|im_end|>\n")
        .expect("encode");
    assert_eq!(tok.decode(&chat, true).expect("decode"), "user\nhi\n");
}

#[test]
fn empty_text_encodes_to_nothing() {
    let tok = tokenizer();
    assert_eq!(tok.encode("").expect("encode"), Vec::<u32>::new());
    assert_eq!(
        tok.encode_plain("").expect("encode_plain"),
        Vec::<u32>::new()
    );
    assert_eq!(tok.decode(&[], false).expect("decode"), "");
}

#[test]
fn invalid_ids_are_errors() {
    let tok = tokenizer();
    for bad in [49152u32, 49153, 100_000, u32::MAX] {
        match tok.decode(&[19556, bad], false) {
            Err(Error::InvalidToken { id, vocab_size }) => {
                assert_eq!((id, vocab_size), (bad, 49152), "decode(id={bad})")
            }
            other => panic!("decode(id={bad}): expected InvalidToken, got {other:?}"),
        }
        let mut stream = StreamDecoder::new();
        assert!(
            matches!(stream.push(&tok, bad), Err(Error::InvalidToken { .. })),
            "push(id={bad})"
        );
    }
}

#[test]
fn to_json_round_trips() {
    let tok = tokenizer();
    let again = Tokenizer::from_json(&tok.to_json().expect("to_json")).expect("reload");
    for (i, case) in cases().iter().enumerate() {
        let text = case["text"].as_str().expect("text");
        assert_eq!(
            again.encode(text).expect("encode"),
            ids(&case["ids"]),
            "case={i}"
        );
        assert_eq!(
            again.encode_plain(text).expect("encode"),
            ids(&case["ids_split_special_tokens"]),
            "plain case={i}"
        );
    }
    assert!(matches!(
        Tokenizer::from_json("{not json"),
        Err(Error::Tokenizer(_))
    ));
}

/// Pushes ids one at a time; the pieces plus the flush must be exactly decode(all).
fn stream_all(tok: &Tokenizer, ids: &[u32]) -> (String, Vec<String>) {
    let mut stream = StreamDecoder::new();
    let mut pieces = Vec::new();
    for &id in ids {
        pieces.push(stream.push(tok, id).expect("push"));
    }
    pieces.push(stream.flush(tok).expect("flush"));
    (pieces.concat(), pieces)
}

#[test]
fn stream_decoder_matches_decode_on_greedy_ids() {
    let tok = tokenizer();
    for file in logits_files() {
        let name = file["name"].as_str().expect("name");
        let greedy = ids(&file["greedy"]["ids"]);
        let (text, _) = stream_all(&tok, &greedy);
        assert_eq!(
            text,
            tok.decode(&greedy, false).expect("decode"),
            "stream(greedy={name})"
        );
        assert_eq!(
            text,
            file["greedy"]["text"].as_str().expect("text"),
            "oracle text {name}"
        );
        let prompt = ids(&file["prompt_ids"]);
        let (text, _) = stream_all(&tok, &prompt);
        assert_eq!(
            text,
            file["prompt_text"].as_str().expect("prompt"),
            "stream(prompt={name})"
        );
    }
}

#[test]
fn stream_decoder_never_splits_characters() {
    let tok = tokenizer();
    let texts = [
        "I love 🦙 and 🤗!",
        "👨‍👩‍👧‍👦 family emoji",
        "你好，世界 こんにちは世界",
        "e\u{301} a\u{308}o\u{302} Zalgo: Z\u{351}\u{34b}a\u{35b}\u{308}l\u{34c}",
        "Straße über Ünïcödé",
        "مرحبا بالعالم",
        "x² + y³ = z½ ٣٤٥",
        "<|im_start|>user\n🦙🦙🦙<|im_end|>\n",
    ];
    for text in texts {
        let ids = tok.encode(text).expect("encode");
        let (streamed, pieces) = stream_all(&tok, &ids);
        assert_eq!(
            streamed,
            tok.decode(&ids, false).expect("decode"),
            "stream(text={text:?})"
        );
        assert_eq!(streamed, text, "stream(text={text:?})");
        for piece in &pieces {
            assert!(
                !piece.contains('\u{FFFD}'),
                "stream(text={text:?}) piece {piece:?}"
            );
        }
    }
}

#[test]
fn stream_decoder_flushes_invalid_bytes() {
    let tok = tokenizer();
    // The first byte of a 4-byte character, alone: only flush emits it, as U+FFFD.
    let lead = tok.token_id("ð").expect("byte token for 0xF0");
    let hello = tok.token_id("Hello").expect("Hello");
    let mut stream = StreamDecoder::new();
    assert_eq!(stream.push(&tok, hello).expect("push"), "Hello");
    assert_eq!(stream.push(&tok, lead).expect("push"), "");
    assert_eq!(stream.flush(&tok).expect("flush"), "\u{FFFD}");
    assert_eq!(
        tok.decode(&[hello, lead], false).expect("decode"),
        "Hello\u{FFFD}"
    );
    // A run of stray bytes does not hold back the text forever, and the total still matches.
    let ids: Vec<u32> = std::iter::repeat_n(lead, 20).chain([hello]).collect();
    let (streamed, pieces) = stream_all(&tok, &ids);
    assert_eq!(streamed, tok.decode(&ids, false).expect("decode"));
    assert!(
        pieces[..20].iter().any(|p| !p.is_empty()),
        "stray bytes were held to the end"
    );
}

#[test]
fn stream_decoder_skipping_special() {
    let tok = tokenizer();
    let ids = tok
        .encode("<|im_start|>assistant\nParis.<|im_end|>")
        .expect("encode");
    let mut stream = StreamDecoder::skipping_special();
    let mut text = String::new();
    for &id in &ids {
        text += &stream.push(&tok, id).expect("push");
    }
    text += &stream.flush(&tok).expect("flush");
    assert_eq!(text, "assistant\nParis.");
}
