//! Speculative decoding gives exactly plain decoding's output (ARCHITECTURE.md section 6):
//! the same tokens, text, stop reason, end token, cache and sampler state after the reply, for
//! code, lists, prose and chat turns, greedy and seeded with every sampler cut, draft lengths
//! 1..8, stop strings and max_tokens landing inside accepted runs, a full context, 1 and 2
//! threads and every backend.

use std::sync::Arc;

use inferno_core::chat::ChatMessage;
use inferno_core::chat_session::ChatSession;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::generate::{prefill, GenerateOptions, Generated, Generator, StopReason};
use inferno_core::kernels::Kernels;
use inferno_core::parallel::Serial;
use inferno_core::quant::GgmlType;
use inferno_core::sampler::{Sampler, SamplerConfig};
use inferno_core::speculative::SpeculativeOptions;
use inferno_native::pool;
use inferno_tests::{model_bytes, synthetic_gguf, SyntheticShape};

/// Prompts (no chat template) whose continuations repeat the context a lot, a little, or not.
const CODE: &str = "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn sub(a: i32, b: i32) -> i32 {\n    a - b\n}\n\nfn mul(a: i32, b: i32) -> i32 {\n";
const LIST: &str = "| id | name | colour |\n|----|------|--------|\n| 1 | apple | red |\n| 2 | banana | yellow |\n| 3 | cherry | red |\n| 4 |";
const PROSE: &str = "The old lighthouse keeper climbed the stairs one last time, thinking of";
const CHAT: &str =
    "List the first six planets of the solar system, one per line, each with its number.";

fn engine() -> Engine {
    Engine::from_gguf_bytes(model_bytes(), EngineOptions::default()).expect("model loads")
}

fn speculative(draft_max: usize) -> SpeculativeOptions {
    SpeculativeOptions {
        enabled: true,
        draft_max,
        ..Default::default()
    }
}

fn options(sampler: SamplerConfig, max_tokens: usize, spec: SpeculativeOptions) -> GenerateOptions {
    GenerateOptions {
        sampler,
        max_tokens,
        stop: Vec::new(),
        speculative: spec,
    }
}

/// A finished reply with what it left behind: the session's tokens and the sampler.
struct Reply {
    generated: Generated,
    session_tokens: Vec<u32>,
    sampler: Sampler,
    /// Pieces as streamed, joined.
    streamed: String,
}

fn generate(engine: &Engine, prompt: &[u32], options: &GenerateOptions) -> Reply {
    let mut session = engine.new_session();
    prefill(&mut session, prompt).expect("prefill");
    let mut generator = Generator::new(options).expect("options are valid");
    let mut streamed = String::new();
    generator
        .run(&mut session, &mut |piece| {
            streamed.push_str(piece);
            true
        })
        .expect("generation");
    let (generated, sampler) = generator.finish();
    Reply {
        generated,
        session_tokens: session.tokens().to_vec(),
        sampler,
        streamed,
    }
}

/// Generates with speculation off, then on with each draft length, and asserts the replies are
/// the same in every respect. Returns the tokens drafted and accepted over all the speculative
/// runs, so callers can check the comparison was not vacuous.
fn assert_same_with_and_without(
    engine: &Engine,
    prompt: &[u32],
    plain: &GenerateOptions,
    drafts: &[usize],
    what: &str,
) -> (usize, usize) {
    let mut off = plain.clone();
    off.speculative.enabled = false;
    let want = generate(engine, prompt, &off);
    assert_eq!(want.generated.stats.drafted, 0);
    let (mut drafted, mut accepted) = (0, 0);
    for &k in drafts {
        let mut on = plain.clone();
        on.speculative = SpeculativeOptions {
            draft_max: k,
            ..speculative(k)
        };
        let got = generate(engine, prompt, &on);
        let ctx = format!("{what}, draft_max {k}");
        assert_eq!(got.generated.tokens, want.generated.tokens, "{ctx}: tokens");
        assert_eq!(got.generated.text, want.generated.text, "{ctx}: text");
        assert_eq!(got.streamed, want.streamed, "{ctx}: streamed pieces");
        assert_eq!(
            got.generated.stop, want.generated.stop,
            "{ctx}: stop reason"
        );
        assert_eq!(
            got.generated.end_token, want.generated.end_token,
            "{ctx}: end token"
        );
        assert_eq!(got.session_tokens, want.session_tokens, "{ctx}: cache");
        assert!(
            got.sampler == want.sampler,
            "{ctx}: sampler state after the reply"
        );
        let s = got.generated.stats;
        assert_eq!(s.tokens, got.generated.tokens.len(), "{ctx}: stats tokens");
        assert!(
            s.accepted <= s.drafted && s.drafted <= s.attempts * k,
            "{ctx}: {s:?}"
        );
        drafted += s.drafted;
        accepted += s.accepted;
    }
    (drafted, accepted)
}

fn raw(engine: &Engine, text: &str) -> Vec<u32> {
    engine.encode_prompt(text).expect("prompt encodes")
}

fn chat(engine: &Engine, user: &str) -> Vec<u32> {
    engine
        .encode_chat(&[ChatMessage::new("user", user)], true)
        .expect("chat renders")
}

#[test]
fn greedy_code_list_prose_chat_same_tokens_draft_max_1_to_8() {
    let engine = engine();
    let plain = options(SamplerConfig::greedy(), 40, SpeculativeOptions::off());
    let drafts: Vec<usize> = (1..=8).collect();
    for (what, prompt) in [
        ("code", raw(&engine, CODE)),
        ("list", raw(&engine, LIST)),
        ("prose", raw(&engine, PROSE)),
        ("chat", chat(&engine, CHAT)),
    ] {
        let (drafted, accepted) =
            assert_same_with_and_without(&engine, &prompt, &plain, &drafts, what);
        if what != "prose" {
            assert!(
                accepted > 0,
                "{what}: speculation accepted nothing of {drafted} drafted"
            );
        }
    }
}

#[test]
fn seeded_temp_top_k_top_p_min_p_repeat_penalty_same_tokens_and_rng_state() {
    let engine = engine();
    let base = SamplerConfig {
        temperature: 0.8,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplerConfig::default()
    };
    let samplers = [
        (
            "temp 0.8 seed 7",
            SamplerConfig {
                seed: 7,
                ..base.clone()
            },
        ),
        (
            "temp 0.8 seed 1",
            SamplerConfig {
                seed: 1,
                ..base.clone()
            },
        ),
        (
            "temp 0.5 seed 42",
            SamplerConfig {
                temperature: 0.5,
                seed: 42,
                ..base.clone()
            },
        ),
        (
            "top-k 5 seed 3",
            SamplerConfig {
                top_k: 5,
                seed: 3,
                ..base.clone()
            },
        ),
        (
            "top-p 0.9 seed 4",
            SamplerConfig {
                top_p: 0.9,
                seed: 4,
                ..base.clone()
            },
        ),
        (
            "min-p 0.1 seed 5",
            SamplerConfig {
                min_p: 0.1,
                seed: 5,
                ..base.clone()
            },
        ),
        (
            "repeat penalty 1.3 seed 6",
            SamplerConfig {
                repeat_penalty: 1.3,
                repeat_last_n: 16,
                seed: 6,
                ..base.clone()
            },
        ),
        (
            "defaults seed 8",
            SamplerConfig {
                seed: 8,
                ..SamplerConfig::default()
            },
        ),
        (
            "greedy repeat penalty 1.2",
            SamplerConfig {
                repeat_penalty: 1.2,
                ..SamplerConfig::greedy()
            },
        ),
    ];
    let prompts = [("code", raw(&engine, CODE)), ("list", raw(&engine, LIST))];
    let mut accepted = 0;
    for (name, sampler) in samplers {
        for (what, prompt) in &prompts {
            let plain = options(sampler.clone(), 32, SpeculativeOptions::off());
            accepted += assert_same_with_and_without(
                &engine,
                prompt,
                &plain,
                &[2, 4, 8],
                &format!("{what}, {name}"),
            )
            .1;
        }
    }
    assert!(accepted > 0, "sampled runs never accepted a draft");
}

#[test]
fn stop_strings_and_max_tokens_inside_accepted_runs_end_at_the_same_token() {
    let engine = engine();
    let prompt = raw(&engine, CODE);
    let plain = options(SamplerConfig::greedy(), 40, SpeculativeOptions::off());
    let full = generate(&engine, &prompt, &plain).generated.text;
    // Every distinct word of the reply as a stop string, and a few cuts inside words.
    let mut stops: Vec<String> = full.split_whitespace().map(str::to_string).collect();
    stops.dedup();
    stops.extend(["b) ->", "i3", "\n}\n", "}"].map(String::from));
    for stop in stops {
        let o = GenerateOptions {
            stop: vec![stop.clone()],
            ..plain.clone()
        };
        assert_same_with_and_without(&engine, &prompt, &o, &[3, 8], &format!("stop {stop:?}"));
    }
    for max_tokens in 1..=14 {
        let o = options(
            SamplerConfig::greedy(),
            max_tokens,
            SpeculativeOptions::off(),
        );
        let (_, accepted) = assert_same_with_and_without(
            &engine,
            &prompt,
            &o,
            &[4, 8],
            &format!("max_tokens {max_tokens}"),
        );
        if max_tokens >= 8 {
            assert!(accepted > 0, "max_tokens {max_tokens}: nothing accepted");
        }
    }
}

#[test]
fn end_of_generation_inside_a_reply_chat_turns_seeded_same_replies() {
    let engine = engine();
    let users = [
        "What is 2 + 2? Answer with one number.",
        "Repeat exactly: red, green, blue, red, green, blue, red, green, blue.",
        "Now write those three colours again, in the same order, twice.",
    ];
    for sampler in [
        SamplerConfig::greedy(),
        SamplerConfig {
            temperature: 0.8,
            seed: 7,
            ..Default::default()
        },
    ] {
        let mut replies: Vec<Vec<(String, Option<StopReason>, usize)>> = Vec::new();
        let mut accepted = 0;
        for spec in [SpeculativeOptions::off(), speculative(4)] {
            let mut chat = ChatSession::new(&engine);
            chat.set_options(options(sampler.clone(), 48, spec))
                .unwrap();
            let mut turns = Vec::new();
            for user in users {
                chat.begin_turn(user).unwrap();
                let mut streamed = String::new();
                while let Some(piece) = chat.next_token().unwrap() {
                    streamed.push_str(&piece);
                }
                let stop = chat.stop_reason();
                let tokens = chat.turn_tokens();
                accepted += chat.turn_stats().accepted;
                let text = chat.end_turn().unwrap();
                assert_eq!(streamed, text);
                turns.push((text, stop, tokens));
            }
            replies.push(turns);
        }
        assert_eq!(replies[0], replies[1], "sampler {sampler:?}");
        assert!(
            replies[0]
                .iter()
                .any(|t| t.1 == Some(StopReason::EndOfGeneration)),
            "some reply ends with the end-of-turn token: {:?}",
            replies[0]
        );
        assert!(accepted > 0, "sampler {sampler:?}: nothing accepted");
    }
}

#[test]
fn threads_1_and_2_same_tokens_with_speculation() {
    let prompts = {
        let e = engine();
        [raw(&e, CODE), raw(&e, LIST)]
    };
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let plain = options(SamplerConfig::greedy(), 40, SpeculativeOptions::off());
            generate(&engine(), p, &plain).generated.tokens
        })
        .collect();
    for threads in [1, 2] {
        let pool = pool::start(threads).expect("pool starts");
        let e = Engine::from_gguf_bytes(
            model_bytes(),
            EngineOptions {
                parallel: Some(Arc::new(pool)),
                ..Default::default()
            },
        )
        .unwrap();
        for (prompt, want) in prompts.iter().zip(&want) {
            let on = options(SamplerConfig::greedy(), 40, speculative(6));
            let got = generate(&e, prompt, &on);
            assert_eq!(&got.generated.tokens, want, "threads {threads}");
            assert!(got.generated.stats.accepted > 0);
        }
    }
}

#[test]
fn every_backend_with_speculation_equals_reference_without() {
    let engine = engine();
    let prompt = raw(&engine, CODE);
    let reference =
        engine.with_kernels(&inferno_core::kernels::reference::KERNELS, Arc::new(Serial));
    let plain = options(SamplerConfig::greedy(), 24, SpeculativeOptions::off());
    let want = generate(&reference, &prompt, &plain).generated.tokens;
    for k in Kernels::available() {
        let on = options(SamplerConfig::greedy(), 24, speculative(5));
        let got = generate(&engine.with_kernels(k, Arc::new(Serial)), &prompt, &on);
        assert_eq!(got.generated.tokens, want, "backend {}", k.name);
    }
}

#[test]
fn synthetic_context_48_fills_up_same_with_and_without() {
    // Random weights fall into loops, which drafts predict; the context ends the reply.
    let shape = SyntheticShape {
        context_length: 48,
        ..SyntheticShape::tiny()
    };
    let engine = Engine::from_gguf_bytes(
        &synthetic_gguf(&shape, 3, GgmlType::Q8_0),
        EngineOptions::default(),
    )
    .unwrap();
    let vocab = engine.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7919 + 11) % vocab).collect();
    for sampler in [
        SamplerConfig::greedy(),
        SamplerConfig {
            temperature: 1.0,
            top_k: 3,
            seed: 9,
            ..Default::default()
        },
    ] {
        let plain = options(sampler.clone(), 100, SpeculativeOptions::off());
        assert_same_with_and_without(
            &engine,
            &prompt,
            &plain,
            &[1, 4, 8],
            &format!("{sampler:?}"),
        );
        let off = generate(&engine, &prompt, &plain);
        assert_eq!(off.generated.stop, Some(StopReason::ContextFull));
        assert_eq!(off.session_tokens.len(), 48);
    }
}
