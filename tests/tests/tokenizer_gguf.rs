//! The tokenizer built from the real GGUF's `tokenizer.ggml.*` metadata against the oracle and
//! against the oracle's tokenizer.json: the same ids for every case (special tokens parsed and
//! as plain text), the same vocabulary, and the GGUF chat template rendering the oracle prompts.

use inferno_core::chat::{ChatMessage, ChatTemplate};
use inferno_core::formats::gguf::{GgufFile, Value};
use inferno_core::tokenizer::{StreamDecoder, Tokenizer};
use inferno_tests::{model_bytes, oracle_dir};
use serde_json::Value as Json;

fn read_oracle(rel: &str) -> String {
    let path = oracle_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn metadata() -> Vec<(String, Value)> {
    GgufFile::parse(model_bytes())
        .expect("the test model parses")
        .metadata
}

fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn gguf_tokenizer_matches_oracle_cases_and_json() {
    let gguf = Tokenizer::from_gguf_metadata(&metadata()).expect("GGUF tokenizer builds");
    let json = Tokenizer::from_json(&read_oracle("hf/tokenizer.json")).expect("json tokenizer");
    let all: Json = serde_json::from_str(&read_oracle("tokenizer_cases.json")).expect("cases");
    let cases = all["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 45);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let text = case["text"].as_str().expect("text");
        let expected = ids(&case["ids"]);
        let got = gguf.encode(text).expect("encode");
        if got != expected {
            failures.push(format!(
                "encode(source=gguf, case={i}, text={text:?}): got {got:?}"
            ));
        }
        if json.encode(text).expect("encode") != got {
            failures.push(format!("encode(json vs gguf, case={i}, text={text:?})"));
        }
        let plain = gguf.encode_plain(text).expect("encode_plain");
        if plain != ids(&case["ids_split_special_tokens"]) {
            failures.push(format!(
                "encode_plain(source=gguf, case={i}, text={text:?}): {plain:?}"
            ));
        }
        let decoded = gguf.decode(&expected, false).expect("decode");
        if decoded != text {
            failures.push(format!(
                "decode(source=gguf, case={i}, text={text:?}): {decoded:?}"
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
fn gguf_and_json_vocabularies_agree() {
    let gguf = Tokenizer::from_gguf_metadata(&metadata()).expect("GGUF tokenizer builds");
    let json = Tokenizer::from_json(&read_oracle("hf/tokenizer.json")).expect("json tokenizer");
    assert_eq!(gguf.vocab_size(), 49152);
    assert_eq!(gguf.vocab_size(), json.vocab_size());
    for id in 0..json.vocab_size() as u32 {
        assert_eq!(
            gguf.token_text(id),
            json.token_text(id),
            "token_text(id={id})"
        );
        assert_eq!(
            gguf.is_special(id),
            json.is_special(id),
            "is_special(id={id})"
        );
    }
    assert_eq!(gguf.token_text(49152), None);
    assert!(gguf.decode(&[49152], false).is_err());
}

#[test]
fn gguf_tokenizer_streams_oracle_greedy_text() {
    let gguf = Tokenizer::from_gguf_metadata(&metadata()).expect("GGUF tokenizer builds");
    for name in [
        "raw_1_short",
        "raw_3_prose",
        "chat_1_default_system",
        "chat_2_with_system",
    ] {
        let file: Json =
            serde_json::from_str(&read_oracle(&format!("logits/{name}.json"))).expect("json");
        let prompt = file["prompt_text"].as_str().expect("prompt_text");
        assert_eq!(
            gguf.encode(prompt).expect("encode"),
            ids(&file["prompt_ids"]),
            "{name}"
        );
        let greedy = ids(&file["greedy"]["ids"]);
        let mut stream = StreamDecoder::new();
        let mut text = String::new();
        for &id in &greedy {
            text += &stream.push(&gguf, id).expect("push");
        }
        text += &stream.flush(&gguf).expect("flush");
        assert_eq!(
            text,
            file["greedy"]["text"].as_str().expect("text"),
            "stream(greedy={name})"
        );
    }
}

#[test]
fn gguf_chat_template_renders_oracle_prompts() {
    let meta = metadata();
    let gguf = Tokenizer::from_gguf_metadata(&meta).expect("GGUF tokenizer builds");
    let source = meta
        .iter()
        .find(|(k, _)| k == "tokenizer.chat_template")
        .and_then(|(_, v)| v.as_str())
        .expect("the test model has a chat template");
    let token = |key: &str| {
        let id = meta
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_u64())
            .expect(key);
        gguf.token_text(id as u32).expect("token")
    };
    let template = ChatTemplate::new(
        source,
        &token("tokenizer.ggml.bos_token_id"),
        &token("tokenizer.ggml.eos_token_id"),
    )
    .expect("template compiles");
    for name in ["chat_1_default_system", "chat_2_with_system"] {
        let file: Json =
            serde_json::from_str(&read_oracle(&format!("logits/{name}.json"))).expect("json");
        let messages: Vec<ChatMessage> =
            serde_json::from_value(file["messages"].clone()).expect("messages");
        let text = template.render(&messages, true).expect("render");
        assert_eq!(
            text,
            file["prompt_text"].as_str().expect("prompt_text"),
            "render({name})"
        );
        assert_eq!(
            gguf.encode(&text).expect("encode"),
            ids(&file["prompt_ids"]),
            "ids({name})"
        );
    }
}
