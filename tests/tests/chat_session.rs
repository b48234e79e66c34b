//! ChatSession (the browser's chat loop) on the real model: a turn streamed token by token
//! equals `Session::generate` on the same rendered prompt; a prefilled draft changes only what
//! Enter has to prefill, not the reply; the second turn reuses the first turn's cache; stop
//! strings end a reply and are not emitted.

use inferno_core::chat::ChatMessage;
use inferno_core::chat_session::ChatSession;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::sampler::{Sampler, SamplerConfig};
use inferno_tests::model_bytes;

fn engine() -> Engine {
    Engine::from_gguf_bytes(model_bytes(), EngineOptions::default()).unwrap()
}

fn greedy_chat(engine: &Engine, max_tokens: usize) -> ChatSession {
    let mut chat = ChatSession::new(engine);
    chat.set_sampler(SamplerConfig::greedy()).unwrap();
    chat.max_tokens = max_tokens;
    chat
}

/// Runs a whole turn; returns (the concatenated pieces, end_turn's text, prefilled tokens,
/// sampled tokens).
fn turn(chat: &mut ChatSession, user: &str) -> (String, String, usize, usize) {
    let start = chat.begin_turn(user).unwrap();
    let mut streamed = String::new();
    while let Some(piece) = chat.next_token().unwrap() {
        streamed.push_str(&piece);
    }
    let sampled = chat.turn_tokens();
    (streamed, chat.end_turn().unwrap(), start.prefilled, sampled)
}

#[test]
fn streamed_turn_equals_session_generate() {
    let engine = engine();
    let user = "What is the capital of France?";
    let ids = engine
        .encode_chat(&[ChatMessage::new("user", user)], true)
        .unwrap();
    let mut session = engine.new_session();
    session.append(&ids).unwrap();
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    let want = session
        .generate(&mut sampler, 24, &[], &mut |_| true)
        .unwrap();

    let mut chat = greedy_chat(&engine, 24);
    let (streamed, text, prefilled, sampled) = turn(&mut chat, user);
    assert_eq!(streamed, want.text);
    assert_eq!(text, want.text);
    assert_eq!(prefilled, ids.len());
    assert_eq!(sampled, want.tokens.len());
}

#[test]
fn draft_prefill_leaves_the_reply_unchanged_and_enter_cheap() {
    let engine = engine();
    let user = "Name three colors of the rainbow.";
    let (_, plain, ..) = turn(&mut greedy_chat(&engine, 16), user);

    let mut chat = greedy_chat(&engine, 16);
    chat.sync_draft("Name three").unwrap();
    let d = chat.sync_draft(user).unwrap();
    assert!(d.reused > 0, "the second draft keeps the first: {d:?}");
    let (_, text, prefilled, _) = turn(&mut chat, user);
    assert_eq!(text, plain);
    // Only the held-back last token and the assistant header remain for Enter.
    assert!(prefilled <= 6, "Enter prefilled {prefilled} tokens");
}

#[test]
fn second_turn_reuses_the_first_and_matches_a_fresh_render() {
    let engine = engine();
    let mut chat = greedy_chat(&engine, 12);
    let (_, first, ..) = turn(&mut chat, "Hello!");
    let start = chat.begin_turn("And who are you?").unwrap();
    assert!(start.reused > 10, "{start:?}");
    while chat.next_token().unwrap().is_some() {}
    let second = chat.end_turn().unwrap();

    // The same conversation from an empty cache.
    let messages = [
        ChatMessage::new("user", "Hello!"),
        ChatMessage::new("assistant", first.as_str()),
        ChatMessage::new("user", "And who are you?"),
    ];
    let ids = engine.encode_chat(&messages, true).unwrap();
    let mut session = engine.new_session();
    session.append(&ids).unwrap();
    let want = session
        .generate(
            &mut Sampler::new(SamplerConfig::greedy()),
            12,
            &[],
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(second, want.text);
}

#[test]
fn stop_string_ends_the_reply_unemitted() {
    let engine = engine();
    let user = "What is the capital of France?";
    let (_, full, ..) = turn(&mut greedy_chat(&engine, 24), user);
    let word = full
        .split_whitespace()
        .nth(2)
        .expect("a reply of a few words")
        .to_string();
    let mut chat = greedy_chat(&engine, 24);
    chat.stop = vec![word.clone()];
    let (streamed, text, ..) = turn(&mut chat, user);
    assert_eq!(streamed, text);
    assert_eq!(text, full[..full.find(&word).unwrap()]);
}
