//! Batched decoding across conversations (what `inferno serve` runs) gives every reply exactly
//! what it gets alone: eight requests with different prompts, samplers, stop strings, lengths
//! and speculation, joining one by one while the others decode, their prompts prefilled in
//! chunks inside the same forward passes; the tokens, text, log-probabilities, stop reasons and
//! the sessions' tokens are compared with `==` against each request run alone, on 1 and 2
//! threads and on every backend.

use std::sync::Arc;

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::generate::{
    prefill, step_batch, GenerateOptions, Generator, Reply, StopReason, TokenLogprob,
};
use inferno_core::kernels::Kernels;
use inferno_core::model::{LogitsFor, Scratch};
use inferno_core::parallel::Serial;
use inferno_core::sampler::SamplerConfig;
use inferno_core::session::{append_batch, Append, Session};
use inferno_core::speculative::SpeculativeOptions;
use inferno_native::pool;
use inferno_tests::model_bytes;

fn engine() -> Engine {
    Engine::from_gguf_bytes(model_bytes(), EngineOptions::default()).expect("model loads")
}

struct Request {
    prompt: Vec<u32>,
    options: GenerateOptions,
}

/// Eight requests: greedy and seeded, every sampler cut and penalty, a stop string, short and
/// long prompts, speculation on two of them; log-probabilities (top 3) on all.
fn requests(engine: &Engine, max_tokens: usize) -> Vec<Request> {
    let texts = [
        "The capital of France is",
        "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn sub(a: i32, b: i32) -> i32 {\n",
        "Once upon a time",
        "List three colours:\n1.",
        "Water boils at",
        "| id | name |\n|----|------|\n| 1 | apple |\n| 2 | pear |\n| 3 |",
        "A haiku about the sea:",
        "Question: what is 2 + 2?\nAnswer:",
    ];
    let samplers = [
        SamplerConfig::greedy(),
        SamplerConfig::greedy(),
        SamplerConfig {
            seed: 7,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            temperature: 1.1,
            top_k: 0,
            top_p: 0.8,
            min_p: 0.0,
            seed: 3,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            repeat_penalty: 1.3,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..SamplerConfig::greedy()
        },
        SamplerConfig {
            temperature: 0.9,
            top_k: 5,
            min_p: 0.1,
            seed: 11,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 5,
            ..SamplerConfig::default()
        },
        SamplerConfig::greedy(),
    ];
    texts
        .iter()
        .zip(samplers)
        .enumerate()
        .map(|(i, (text, sampler))| Request {
            prompt: engine.encode_prompt(text).expect("prompt encodes"),
            options: GenerateOptions {
                sampler,
                max_tokens: max_tokens - i % 3,
                stop: if i == 3 {
                    vec!["3.".into()]
                } else {
                    Vec::new()
                },
                speculative: if i == 1 || i == 5 {
                    SpeculativeOptions {
                        enabled: true,
                        ..Default::default()
                    }
                } else {
                    SpeculativeOptions::off()
                },
            },
        })
        .collect()
}

#[derive(Debug, PartialEq)]
struct Outcome {
    tokens: Vec<u32>,
    text: String,
    streamed: String,
    logprobs: Vec<TokenLogprob>,
    stop: Option<StopReason>,
    session_tokens: Vec<u32>,
}

fn outcome(session: &Session, generator: Generator, streamed: String) -> Outcome {
    let logprobs = generator.logprobs().to_vec();
    let (generated, _) = generator.finish();
    Outcome {
        tokens: generated.tokens,
        text: generated.text,
        streamed,
        logprobs,
        stop: generated.stop,
        session_tokens: session.tokens().to_vec(),
    }
}

fn new_generator(request: &Request) -> Generator {
    let mut generator = Generator::new(&request.options).expect("options are valid");
    generator.set_logprobs(Some(3));
    generator
}

/// Each request alone: prefill, then one `Generator::step` after another.
fn alone(engine: &Engine, request: &Request) -> Outcome {
    let mut session = engine.new_session();
    prefill(&mut session, &request.prompt).expect("prefill");
    let mut generator = new_generator(request);
    let mut streamed = String::new();
    while let Some(piece) = generator.step(&mut session).expect("step") {
        streamed.push_str(&piece);
    }
    outcome(&session, generator, streamed)
}

/// A request in the batch: waiting, prefilling its prompt chunk by chunk, or decoding.
struct Slot<'r> {
    request: &'r Request,
    session: Session,
    generator: Option<Generator>,
    streamed: String,
    done: bool,
}

/// All requests together: request i arrives at step i; each step is one `step_batch` over the
/// decoding replies and one prompt chunk of every prefilling request.
fn together(engine: &Engine, requests: &[Request], chunk: usize) -> Vec<Outcome> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut scratch = Scratch::default();
    let mut step = 0;
    while step < requests.len() || slots.iter().any(|s| !s.done) {
        if let Some(request) = requests.get(step) {
            slots.push(Slot {
                request,
                session: engine.new_session(),
                generator: None,
                streamed: String::new(),
                done: false,
            });
        }
        step += 1;
        let mut replies = Vec::new();
        let mut prefills = Vec::new();
        let mut starting = Vec::new();
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.done {
                continue;
            }
            match &mut slot.generator {
                Some(generator) => replies.push((
                    i,
                    Reply {
                        session: &mut slot.session,
                        generator,
                    },
                )),
                None => {
                    let prompt = &slot.request.prompt;
                    let at = slot.session.len();
                    let end = (at + chunk).min(prompt.len());
                    let last = end == prompt.len();
                    if last {
                        starting.push(i);
                    }
                    prefills.push(Append {
                        session: &mut slot.session,
                        tokens: &prompt[at..end],
                        want: if last {
                            LogitsFor::Last
                        } else {
                            LogitsFor::None
                        },
                    });
                }
            }
        }
        let (who, mut replies): (Vec<usize>, Vec<Reply>) = replies.into_iter().unzip();
        let results = step_batch(&mut scratch, &mut replies, &mut prefills).expect("forward");
        drop(replies);
        drop(prefills);
        for (i, result) in who.into_iter().zip(results) {
            match result.expect("step") {
                Some(piece) => slots[i].streamed.push_str(&piece),
                None => slots[i].done = true,
            }
        }
        for i in starting {
            slots[i].generator = Some(new_generator(slots[i].request));
        }
    }
    slots
        .into_iter()
        .map(|s| outcome(&s.session, s.generator.expect("started"), s.streamed))
        .collect()
}

fn assert_batched_equals_alone(engine: &Engine, max_tokens: usize, chunk: usize) {
    let requests = requests(engine, max_tokens);
    let expected: Vec<Outcome> = requests.iter().map(|r| alone(engine, r)).collect();
    let got = together(engine, &requests, chunk);
    for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(e, g, "request {i} differs beside the others");
    }
    // Not vacuous: replies of several tokens, log-probabilities kept, a stop string hit.
    assert!(expected
        .iter()
        .all(|o| o.tokens.len() >= 2 && o.logprobs.len() == o.tokens.len()));
    assert!(expected
        .iter()
        .all(|o| o.logprobs.iter().all(|l| l.top.len() == 3)));
}

#[test]
fn batch_8_requests_chunk_5_threads_2_equal_alone() {
    let pool = pool::start(2).expect("pool starts");
    let engine = engine();
    let engine = engine.with_kernels(engine.kernels(), Arc::new(pool));
    assert_batched_equals_alone(&engine, 24, 5);
}

#[test]
fn batch_8_requests_chunk_64_serial_equal_alone() {
    let engine = engine();
    let engine = engine.with_kernels(engine.kernels(), Arc::new(Serial));
    assert_batched_equals_alone(&engine, 16, 64);
}

#[test]
fn batch_8_requests_every_backend_equal_reference_alone() {
    let engine = engine();
    let reference =
        engine.with_kernels(&inferno_core::kernels::reference::KERNELS, Arc::new(Serial));
    let requests = requests(&engine, 6);
    let expected: Vec<Outcome> = requests.iter().map(|r| alone(&reference, r)).collect();
    for kernels in Kernels::available() {
        let got = together(
            &engine.with_kernels(kernels, Arc::new(Serial)),
            &requests,
            9,
        );
        for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
            assert_eq!(e, g, "request {i} on {} differs", kernels.name);
        }
    }
}

#[test]
fn append_batch_of_prefills_equals_each_alone_logits_bitwise() {
    let engine = engine();
    let prompts: Vec<Vec<u32>> = ["Hello", "The quick brown fox jumps over", "1 2 3 4 5 6 7 8"]
        .iter()
        .map(|t| engine.encode_prompt(t).expect("encodes"))
        .collect();
    let mut alone_logits = Vec::new();
    for p in &prompts {
        let mut s = engine.new_session();
        alone_logits.extend(s.append_all_logits(p).expect("forward"));
    }
    let mut sessions: Vec<Session> = prompts.iter().map(|_| engine.new_session()).collect();
    let mut scratch = Scratch::default();
    let mut parts: Vec<Append> = sessions
        .iter_mut()
        .zip(&prompts)
        .map(|(session, p)| Append {
            session,
            tokens: p,
            want: LogitsFor::All,
        })
        .collect();
    let logits = append_batch(&mut scratch, &mut parts)
        .expect("forward")
        .to_vec();
    assert_eq!(logits.len(), alone_logits.len());
    assert!(logits == alone_logits, "batched logits differ from alone");
    for (s, p) in sessions.iter().zip(&prompts) {
        assert_eq!(s.tokens(), &p[..]);
    }
}

#[test]
fn append_batch_over_context_changes_no_session() {
    let engine = engine();
    let context = engine.config().context_length;
    let (mut a, mut b) = (engine.new_session(), engine.new_session());
    a.append(&[1, 2, 3]).expect("forward");
    let too_long = vec![1u32; context + 1];
    let mut scratch = Scratch::default();
    let result = append_batch(
        &mut scratch,
        &mut [
            Append {
                session: &mut a,
                tokens: &[4, 5],
                want: LogitsFor::Last,
            },
            Append {
                session: &mut b,
                tokens: &too_long,
                want: LogitsFor::Last,
            },
        ],
    );
    let err = result
        .err()
        .expect("a sequence over the context is refused");
    assert!(err.to_string().contains("context"), "{err}");
    assert_eq!(a.tokens(), &[1, 2, 3]);
    assert!(b.is_empty());
}
