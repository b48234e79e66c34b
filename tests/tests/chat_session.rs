//! ChatSession (the CLI's and the browser's chat loop) on the real model: a turn streamed token
//! by token equals the generator run on the same rendered prompt; a prefilled draft changes
//! only what Enter has to prefill, not the reply; the second turn reuses the first turn's cache;
//! stop strings end a reply and are not emitted; a conversation that outgrows the context drops
//! its oldest turns and answers as a fresh session over what remains would.

use inferno_core::chat::ChatMessage;
use inferno_core::chat_session::ChatSession;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::formats::gguf::GgufFile;
use inferno_core::formats::ModelSource;
use inferno_core::generate::{prefill, GenerateOptions, Generated, Generator, StopReason};
use inferno_tests::model_bytes;

fn engine() -> Engine {
    Engine::from_gguf_bytes(model_bytes(), EngineOptions::default()).unwrap()
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        ..GenerateOptions::greedy()
    }
}

fn greedy_chat(engine: &Engine, max_tokens: usize) -> ChatSession {
    let mut chat = ChatSession::new(engine);
    chat.set_options(greedy(max_tokens)).unwrap();
    chat
}

/// The generator over `messages` rendered, from an empty cache.
fn generate_fresh(
    engine: &Engine,
    messages: &[ChatMessage],
    options: &GenerateOptions,
) -> Generated {
    let ids = engine.encode_chat(messages, true).unwrap();
    let mut session = engine.new_session();
    prefill(&mut session, &ids).unwrap();
    let mut generator = Generator::new(options).unwrap();
    generator.run(&mut session, &mut |_| true).unwrap();
    generator.finish().0
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
fn streamed_turn_equals_the_generator_on_the_rendered_prompt() {
    let engine = engine();
    let user = "What is the capital of France?";
    let messages = [ChatMessage::new("user", user)];
    let ids = engine.encode_chat(&messages, true).unwrap();
    let want = generate_fresh(&engine, &messages, &greedy(24));

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
    let want = generate_fresh(&engine, &messages, &greedy(12));
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
    let mut chat = ChatSession::new(&engine);
    chat.set_options(GenerateOptions {
        stop: vec![word.clone()],
        ..greedy(24)
    })
    .unwrap();
    let (streamed, text, ..) = turn(&mut chat, user);
    assert_eq!(streamed, text);
    assert_eq!(text, full[..full.find(&word).unwrap()]);
}

#[test]
fn seeded_turn_equals_the_generator_with_the_same_seed_temp_0_8_seed_7() {
    let engine = engine();
    let options = GenerateOptions {
        sampler: inferno_core::sampler::SamplerConfig {
            temperature: 0.8,
            seed: 7,
            ..Default::default()
        },
        max_tokens: 20,
        ..Default::default()
    };
    let user = "Write a short poem about the sea.";
    let want = generate_fresh(&engine, &[ChatMessage::new("user", user)], &options);
    let mut chat = ChatSession::new(&engine);
    chat.set_options(options).unwrap();
    let (streamed, text, ..) = turn(&mut chat, user);
    assert_eq!(streamed, want.text);
    assert_eq!(text, want.text);
}

#[test]
fn cancelled_turn_records_what_was_streamed() {
    let engine = engine();
    let mut chat = greedy_chat(&engine, 24);
    chat.begin_turn("Tell me about Paris.").unwrap();
    let mut streamed = String::new();
    while streamed.split_whitespace().count() < 3 {
        streamed.push_str(&chat.next_token().unwrap().expect("a long reply"));
    }
    chat.cancel();
    assert_eq!(chat.next_token().unwrap(), None);
    assert_eq!(chat.stop_reason(), Some(StopReason::Cancelled));
    assert_eq!(chat.end_turn().unwrap(), streamed);
    assert_eq!(chat.messages()[1].content, streamed);
}

/// The test model with its context cut to `context` positions.
fn engine_with_context(context: usize) -> Engine {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let mut source = ModelSource::from_gguf(&file).unwrap();
    source.config.context_length = context;
    Engine::from_source(&source, EngineOptions::default()).unwrap()
}

#[test]
fn full_context_drops_the_oldest_turns_context_192_max_tokens_16() {
    let engine = engine_with_context(192);
    let mut chat = greedy_chat(&engine, 16);
    chat.set_system(Some("You are brief."));
    let users = [
        "Name a fruit.",
        "Name a color.",
        "Name an animal.",
        "Name a city.",
        "Name a river.",
        "Name a planet.",
        "Name a metal.",
        "Name a tree.",
    ];
    let mut dropped = 0;
    for user in users {
        // What the turn must equal: a fresh session over the turns the chat still keeps.
        let start = chat.begin_turn(user).unwrap();
        assert!(start.prompt_tokens + 16 <= 192, "{start:?}");
        dropped += start.dropped_turns;
        let mut messages = vec![ChatMessage::new("system", "You are brief.")];
        messages.extend(chat.messages().iter().cloned());
        messages.push(ChatMessage::new("user", user));
        while chat.next_token().unwrap().is_some() {}
        let reply = chat.end_turn().unwrap();
        assert_eq!(
            reply,
            generate_fresh(&engine, &messages, &greedy(16)).text,
            "{user}"
        );
    }
    assert!(
        dropped > 0,
        "eight turns of ~35 tokens never filled 192 positions"
    );
    assert_eq!(chat.messages().len(), 2 * (users.len() - dropped));
}

#[test]
fn one_message_longer_than_the_context_is_an_error_context_64() {
    let engine = engine_with_context(64);
    let mut chat = greedy_chat(&engine, 8);
    let long = "word ".repeat(100);
    let e = chat.begin_turn(&long).unwrap_err();
    assert!(e.to_string().contains("context overflow"), "{e}");
    // The chat stays usable.
    chat.begin_turn("Hi").unwrap();
    while chat.next_token().unwrap().is_some() {}
    chat.end_turn().unwrap();
}
