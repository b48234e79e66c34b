//! Gemma 3 270M (Q4_K_M, made by llama.cpp) end to end: SentencePiece ids of a few texts, the
//! contract on the real weights (batched == token by token across a sliding window cut down to
//! 8 positions, 1 == 2 threads, every backend == reference) and greedy text.

use std::sync::{Arc, OnceLock};

use inferno_core::chat::ChatMessage;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::formats::gguf::GgufFile;
use inferno_core::formats::ModelSource;
use inferno_core::kernels::{reference, Kernels};
use inferno_core::parallel::Serial;
use inferno_native::pool;

fn gemma_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = inferno_tests::gemma_path();
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    })
}

/// The real weights with the sliding window set to `window` (None: the file's 512), on the
/// host's best kernels, one thread.
fn engine_with_window(window: Option<usize>) -> Engine {
    let file = GgufFile::parse(gemma_bytes()).expect("gemma parses");
    let mut source = ModelSource::from_gguf(&file).expect("gemma is a model source");
    if let Some(w) = window {
        source.config.sliding_window = Some(w);
    }
    Engine::from_source(&source, EngineOptions::default()).expect("gemma loads")
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| engine_with_window(None))
}

#[test]
fn config_layers_and_scales_as_llama_cpp_loads_gemma3() {
    let c = engine().config();
    assert_eq!(
        (c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim),
        (640, 18, 4, 1, 256)
    );
    assert_eq!(c.sliding_window, Some(512));
    let global: Vec<usize> = (0..18).filter(|&l| c.layer_window(l).is_none()).collect();
    assert_eq!(global, vec![5, 11, 17]);
    assert_eq!(c.attention_scale(), 0.0625);
    assert_eq!(c.extras.embedding_scale, Some(640f32.sqrt()));
    assert_eq!((c.rope_theta, c.extras.rope_theta_local), (1e6, Some(1e4)));
    assert!(c.tied_embeddings && c.qk_norm && c.extras.post_norms);
}

/// Ids equal to llama.cpp's `llama-tokenize --no-bos` on the same file (the last case is ours
/// alone): pieces with `▁`, user-defined runs of spaces and newlines matched before splitting,
/// single digits, and 🦙 (no piece) as its four UTF-8 bytes.
#[test]
fn tokenize_spaces_newlines_digits_unicode_byte_fallback_specials() {
    let tok = engine().tokenizer();
    let cases: [(&str, &[u32]); 7] = [
        ("Hello world", &[9259, 1902]),
        // "  " is the user-defined token 138, cut out before the ▁ pieces are found.
        (" leading  two spaces", &[5830, 138, 13498, 9952]),
        (
            "line one\nline two\n\n\nend",
            &[1257, 886, 107, 1257, 1156, 109, 643],
        ),
        (
            "12345 digits 3.14",
            &[
                236770, 236778, 236800, 236812, 236810, 26798, 236743, 236800, 236761, 236770,
                236812,
            ],
        ),
        // 🦙 = <0xF0> <0x9F> <0xA6> <0x99>.
        (
            "naïve café 日本語 🦙",
            &[
                1789, 238527, 560, 33443, 33375, 238582, 236743, 478, 397, 404, 391,
            ],
        ),
        (
            "<start_of_turn>user<end_of_turn><eos>",
            &[105, 2364, 106, 1],
        ),
        ("\u{1}\u{7f}", &[249732, 251541]),
    ];
    for (text, want) in cases {
        let ids = tok.encode(text).expect("encodes");
        assert_eq!(ids, want, "text={text:?}");
        assert_eq!(tok.decode(&ids, false).expect("decodes"), text);
    }
    // Control tokens as plain text are spelled out; user-defined ones still match.
    let plain = tok.encode_plain("<eos>\n").expect("encodes");
    assert_eq!(plain, vec![236820, 211827, 236813, 107]);
    assert_eq!(
        engine().encode_prompt("Hi").expect("encodes"),
        vec![2, 10979]
    );
}

/// Every position's logits of `tokens` in one batch, and one token at a time.
fn batched_and_one_by_one(engine: &Engine, tokens: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let batched = engine
        .new_session()
        .append_all_logits(tokens)
        .expect("batch");
    let mut session = engine.new_session();
    let mut single = Vec::new();
    for &t in tokens {
        single.extend(session.append_all_logits(&[t]).expect("one token"));
    }
    (batched, single)
}

fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let vocab = 262144;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: position {} logit {}: got {g:e}, want {w:e}",
            i / vocab,
            i % vocab
        );
    }
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog, and then it runs away.";

#[test]
fn window_8_batched_equals_token_by_token_bitwise_and_differs_from_window_512() {
    let small = engine_with_window(Some(8));
    let tokens = small.encode_prompt(PROMPT).expect("encodes");
    assert!(tokens.len() > 12, "the prompt must pass the window");
    let (batched, single) = batched_and_one_by_one(&small, &tokens);
    assert_bits_eq(&batched, &single, "window 8");
    // Up to the window both see everything; past it the local layers see less.
    let full = engine()
        .new_session()
        .append_all_logits(&tokens)
        .expect("batch");
    let vocab = 262144;
    assert_bits_eq(
        &batched[..8 * vocab],
        &full[..8 * vocab],
        "window 8 vs 512 (first 8)",
    );
    assert_ne!(batched[8 * vocab..], full[8 * vocab..]);
}

#[test]
fn two_threads_and_every_backend_equal_the_reference() {
    let tokens = &engine().encode_prompt(PROMPT).expect("encodes")[..6];
    let reference = engine().with_kernels(&reference::KERNELS, Arc::new(Serial));
    let want = reference
        .new_session()
        .append_all_logits(tokens)
        .expect("batch");
    let two = engine().with_kernels(engine().kernels(), Arc::new(pool::start(2).expect("pool")));
    let got = two.new_session().append_all_logits(tokens).expect("batch");
    assert_bits_eq(&got, &want, &format!("{}, 2 threads", two.kernels().name));
    for k in Kernels::available()
        .into_iter()
        .filter(|k| k.name != "reference")
    {
        let (batched, single) =
            batched_and_one_by_one(&engine().with_kernels(k, Arc::new(Serial)), tokens);
        assert_bits_eq(&batched, &want, k.name);
        assert_bits_eq(&single, &want, k.name);
    }
}

/// Greedy ids after `prompt` (ties to the lower id), `n` of them.
fn greedy(engine: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut session = engine.new_session();
    let mut logits = session.append_all_logits(prompt).expect("prefill");
    let vocab = engine.config().vocab_size;
    let mut out = Vec::new();
    for _ in 0..n {
        let last = &logits[logits.len() - vocab..];
        let best = (0..vocab)
            .max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a)))
            .expect("a vocabulary") as u32;
        if engine.is_end_of_generation(best) {
            break;
        }
        out.push(best);
        logits = session.append_all_logits(&[best]).expect("decode");
    }
    out
}

/// The file is the pre-trained 270M (named "Gemma 3 270m", no chat template), so plain text is
/// where its English shows; in Gemma's turns it repeats the user's line (llama.cpp would even
/// use ChatML here, the file having no template), which pins the template's ids and the reply.
#[test]
fn greedy_continuation_is_english_and_chat_turn_reply_is_pinned() {
    let engine = engine();
    let tok = engine.tokenizer();
    let prompt = engine
        .encode_prompt("The capital of France is")
        .expect("encodes");
    let ids = greedy(engine, &prompt, 12);
    let text = tok.decode(&ids, true).expect("decodes");
    assert_eq!(text, GREEDY_CONTINUATION, "ids {ids:?}");
    assert_eq!(ids, GREEDY_CONTINUATION_IDS);

    let chat = engine
        .encode_chat(
            &[ChatMessage::new(
                "user",
                "Write one sentence about the sea.",
            )],
            true,
        )
        .expect("renders");
    assert_eq!(chat[..4], [2, 105, 2364, 107]);
    assert_eq!(chat[chat.len() - 5..], [106, 107, 105, 4368, 107]);
    let ids = greedy(engine, &chat, 12);
    let reply = tok.decode(&ids, true).expect("decodes");
    assert_eq!(reply, GREEDY_REPLY, "ids {ids:?}");
}

const GREEDY_CONTINUATION: &str = " the capital of the country of France. It is the largest";
const GREEDY_CONTINUATION_IDS: &[u32] = &[
    506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488,
];
const GREEDY_REPLY: &str = "Write one sentence about the sea. mendatang\nWrite one sentence";

/// llama-perplexity's rule for a model that wants BOS: every window starts with BOS in place of
/// its first token. Window 2 of 6-token windows scores token 7 from [BOS, token 6].
#[test]
fn perplexity_windows_6_start_with_bos_in_place_of_their_first_token() {
    let engine = engine();
    let tokens = engine
        .encode_prompt("The capital of France is Paris, and the capital of Italy is Rome.")
        .expect("encodes");
    assert!(tokens.len() >= 12 && tokens[0] == 2, "{tokens:?}");
    let nll =
        inferno_core::eval::window_nll(engine, &tokens[..12], 6, &mut |_, _| {}).expect("scores");
    let vocab = engine.config().vocab_size;
    for (w, chunk) in tokens[..12].chunks(6).enumerate() {
        let mut input = chunk.to_vec();
        input[0] = 2; // BOS
        let mut session = engine.new_session();
        let logits = session.append_all_logits(&input).expect("runs").to_vec();
        for p in 0..5 {
            let row = &logits[p * vocab..(p + 1) * vocab];
            let want = inferno_core::eval::log_sum_exp(row) - row[chunk[p + 1] as usize] as f64;
            assert_eq!(
                nll[w * 6 + p + 1].to_bits(),
                want.to_bits(),
                "window {w} position {p}"
            );
        }
    }
}
