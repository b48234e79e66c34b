//! inferno-wasm: the browser's boundary over inferno-core. Nothing is computed here: every
//! export converts JS values, calls [`Engine`] or [`ChatSession`], and turns errors into
//! `JsError` (a panic is reported to the console by the panic hook).
//!
//! - [`WasmEngine`]: a model loaded from the bytes of a GGUF file (or an HF directory's files);
//!   tokenize / detokenize, config, and raw logits for tests.
//! - [`WasmChat`]: a conversation whose KV cache is kept between turns, streamed one token per
//!   call so the worker can post each piece and honour Stop between tokens.
//! - [`WasmGeneration`]: one reply at a time to a whole conversation (or a raw prompt) sent
//!   each time, the KV cache kept between requests: the npm package's OpenAI-shaped API.
//! - With the `threads` feature: `initThreadPool(n - 1)` (wasm-bindgen-rayon) starts Web Workers
//!   on the module's shared memory, then `use_threads(n)` runs core's spin pool on them, and
//!   engines built afterwards split their work over n threads (rule 7: the same bits as one).
#![forbid(unsafe_code)]

use inferno_core::chat_session::{sync_chat_draft, ChatSession};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::formats::hf_dir::HfFiles;
use inferno_core::formats::ModelSource;
use inferno_core::generate::GenerateOptions;
use inferno_core::generate::{prefill, Generator};
use inferno_core::sampler::argmax;
use inferno_core::{ChatMessage, Session};
use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

#[cfg(feature = "threads")]
pub use threads::use_threads;
#[cfg(feature = "threads")]
pub use wasm_bindgen_rayon::init_thread_pool;

#[cfg(feature = "threads")]
mod threads {
    use std::sync::{Arc, OnceLock};

    use inferno_core::parallel::Parallel;
    use inferno_core::pool::ThreadPool;
    use wasm_bindgen::prelude::*;

    /// Core's spin pool, its workers hosted on the Web Workers of rayon's pool (each takes one
    /// worker loop and keeps it: between a decode step's calls the workers spin instead of
    /// sleeping, which a rayon job per call cannot do).
    static POOL: OnceLock<Arc<ThreadPool>> = OnceLock::new();

    /// Call once `initThreadPool(threads - 1)` has resolved: engines loaded from then on split
    /// their work over `threads` threads (the caller and the pool's). Returns the count in use.
    #[wasm_bindgen]
    pub fn use_threads(threads: usize) -> Result<usize, JsError> {
        let workers = rayon::current_num_threads();
        if threads > workers + 1 {
            return Err(JsError::new(&format!(
                "{threads} threads asked for, but initThreadPool started {workers} workers"
            )));
        }
        let pool = POOL.get_or_init(|| {
            let spawned = ThreadPool::with_spawner(threads, &mut |_, work| {
                rayon::spawn(work);
                Ok::<_, std::convert::Infallible>(None)
            });
            Arc::new(spawned.unwrap_or_else(|never| match never {}))
        });
        Ok(pool.threads())
    }

    /// The pool, once started.
    pub fn parallel() -> Option<Arc<dyn Parallel>> {
        POOL.get().map(|p| p.clone() as Arc<dyn Parallel>)
    }
}

/// How the engine splits its work: core's pool in the threads build once it is started,
/// otherwise one thread.
fn engine_options() -> EngineOptions {
    #[cfg(feature = "threads")]
    let parallel = threads::parallel();
    #[cfg(not(feature = "threads"))]
    let parallel = None;
    EngineOptions {
        parallel,
        ..EngineOptions::default()
    }
}

fn js_error(e: inferno_core::Error) -> JsError {
    JsError::new(&e.to_string())
}

/// Calls `progress(done, total)` during the weight load, if given (errors in it are ignored:
/// progress is cosmetic).
fn progress_callback(progress: Option<Function>) -> impl FnMut(usize, usize) {
    move |done, total| {
        if let Some(f) = &progress {
            let _ = f.call2(
                &JsValue::NULL,
                &JsValue::from(done as f64),
                &JsValue::from(total as f64),
            );
        }
    }
}

#[wasm_bindgen]
pub struct WasmEngine {
    engine: Engine,
}

impl WasmEngine {
    fn from_source(
        source: &ModelSource<'_>,
        progress: Option<Function>,
    ) -> Result<WasmEngine, JsError> {
        let mut progress = progress_callback(progress);
        let engine = Engine::from_source_with_progress(source, engine_options(), &mut progress)
            .map_err(js_error)?;
        Ok(WasmEngine { engine })
    }
}

#[wasm_bindgen]
impl WasmEngine {
    /// Loads a GGUF file. The bytes are copied into wasm memory for parsing and dropped once the
    /// weights are repacked, so the caller can release its buffer right after.
    #[wasm_bindgen(constructor)]
    pub fn new(gguf: &[u8], progress: Option<Function>) -> Result<WasmEngine, JsError> {
        let file = inferno_core::formats::gguf::GgufFile::parse(gguf).map_err(js_error)?;
        let source = ModelSource::from_gguf(&file).map_err(js_error)?;
        WasmEngine::from_source(&source, progress)
    }

    /// Loads a Hugging Face directory's files: config.json, the safetensors shards (an array
    /// of Uint8Array), tokenizer.json, and optionally tokenizer_config.json and
    /// chat_template.jinja.
    pub fn from_hf(
        config_json: String,
        shards: Array,
        tokenizer_json: String,
        tokenizer_config_json: Option<String>,
        chat_template: Option<String>,
        progress: Option<Function>,
    ) -> Result<WasmEngine, JsError> {
        let shard_bytes: Vec<Vec<u8>> = shards
            .iter()
            .map(|s| {
                s.dyn_into::<Uint8Array>()
                    .map(|a| a.to_vec())
                    .map_err(|_| JsError::new("every shard must be a Uint8Array"))
            })
            .collect::<Result<_, _>>()?;
        let files = HfFiles {
            config_json,
            shards: shard_bytes.iter().map(Vec::as_slice).collect(),
            tokenizer_json: Some(tokenizer_json),
            tokenizer_config_json,
            chat_template,
        };
        let source = ModelSource::from_hf(&files).map_err(js_error)?;
        WasmEngine::from_source(&source, progress)
    }

    /// The kernel backend the engine runs ("reference", "simd128", "relaxed", ...).
    pub fn kernels(&self) -> String {
        self.engine.kernels().name.to_string()
    }

    /// The model's shape as an HF-style config.json.
    pub fn config(&self) -> String {
        self.engine.config().to_hf_json()
    }

    /// Token ids of `text` (special tokens parsed, no BOS added).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, JsError> {
        self.engine.tokenizer().encode(text).map_err(js_error)
    }

    pub fn detokenize(&self, ids: &[u32]) -> Result<String, JsError> {
        self.engine.tokenizer().decode(ids, false).map_err(js_error)
    }

    /// Logits after the last of `ids`, one forward from an empty cache (for the bitwise tests).
    pub fn forward_logits(&self, ids: &[u32]) -> Result<Vec<f32>, JsError> {
        let mut session = self.engine.new_session();
        session.append(ids).map_err(js_error)?;
        Ok(session.logits().map_err(js_error)?.to_vec())
    }

    /// `n` greedy tokens after `ids` (argmax, end-of-generation tokens included): a probe for
    /// the bitwise tests against the oracle's unstopped continuations, not a way to generate
    /// text (that is `WasmChat`, on core's one generation loop).
    pub fn greedy(&self, ids: &[u32], n: usize) -> Result<Vec<u32>, JsError> {
        let mut session = self.engine.new_session();
        session.append(ids).map_err(js_error)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = argmax(session.logits().map_err(js_error)?);
            session.append(&[id]).map_err(js_error)?;
            out.push(id);
        }
        Ok(out)
    }
}

/// Core's generation defaults as JSON (`temperature`, `top_k`, `top_p`, `min_p`,
/// `repeat_penalty`, `repeat_last_n`, `seed`, `max_tokens`, `stop`, `speculative`): what the page shows
/// before the user changes anything, the same values the CLI uses.
#[wasm_bindgen]
pub fn generate_defaults() -> String {
    GenerateOptions::default().to_json()
}

/// What `sync_draft` or `begin_turn` did to the cache.
#[wasm_bindgen]
#[derive(Clone, Copy)]
pub struct CacheStats {
    /// Tokens of the rendered conversation (0 for a draft).
    pub prompt_tokens: u32,
    /// Tokens already in the cache.
    pub reused: u32,
    /// Tokens run through the model by this call.
    pub prefilled: u32,
    /// Oldest turns dropped so the conversation fits the context (0 almost always).
    pub dropped_turns: u32,
}

#[wasm_bindgen]
pub struct WasmChat {
    chat: ChatSession,
}

#[wasm_bindgen]
impl WasmChat {
    #[wasm_bindgen(constructor)]
    pub fn new(engine: &WasmEngine) -> WasmChat {
        WasmChat {
            chat: ChatSession::new(&engine.engine),
        }
    }

    /// Sets the system message (empty or undefined removes it); the conversation starts over.
    pub fn set_system(&mut self, system: Option<String>) {
        self.chat.set_system(system.as_deref());
    }

    /// Forgets the turns (the cache is reused by the next turn where it still matches).
    pub fn reset(&mut self) {
        self.chat.reset();
    }

    /// Generation options as a JSON object with core's field names (see
    /// `generate_defaults`); missing fields take the defaults. The seed restarts the random
    /// stream.
    pub fn set_options(&mut self, options_json: &str) -> Result<(), JsError> {
        let options = GenerateOptions::from_json(options_json).map_err(js_error)?;
        self.chat.set_options(options).map_err(js_error)
    }

    /// Compose-while-typing: prefills the conversation with `draft` as the next user message.
    pub fn sync_draft(&mut self, draft: &str) -> Result<CacheStats, JsError> {
        let d = self.chat.sync_draft(draft).map_err(js_error)?;
        Ok(CacheStats {
            prompt_tokens: 0,
            reused: d.reused as u32,
            prefilled: d.prefilled as u32,
            dropped_turns: 0,
        })
    }

    /// Starts the assistant's reply to `user` (prefill happens here).
    pub fn begin_turn(&mut self, user: &str) -> Result<CacheStats, JsError> {
        let t = self.chat.begin_turn(user).map_err(js_error)?;
        Ok(CacheStats {
            prompt_tokens: t.prompt_tokens as u32,
            reused: t.reused as u32,
            prefilled: t.prefilled as u32,
            dropped_turns: t.dropped_turns as u32,
        })
    }

    /// One step of the reply (one forward: one token, or several when a speculative draft was
    /// accepted): its text (possibly empty), or undefined when the reply is over.
    pub fn next_token(&mut self) -> Result<Option<String>, JsError> {
        self.chat.next_token().map_err(js_error)
    }

    /// Ends the reply now (the user pressed Stop); `end_turn` still records it.
    pub fn cancel(&mut self) {
        self.chat.cancel();
    }

    /// Records the turn (also a reply stopped early) and returns the reply's text.
    pub fn end_turn(&mut self) -> Result<String, JsError> {
        self.chat.end_turn().map_err(js_error)
    }

    /// Tokens sampled in the current (or last) turn.
    pub fn turn_tokens(&self) -> u32 {
        self.chat.turn_tokens() as u32
    }

    /// What speculation did in the current (or last) turn, as JSON: `attempts`, `drafted`,
    /// `accepted`, `forwards`, `tokens`.
    pub fn turn_stats(&self) -> String {
        self.chat.turn_stats().to_json()
    }

    /// Why the reply ended ("EndOfGeneration", "MaxTokens", ...), if it has.
    pub fn stop_reason(&self) -> Option<String> {
        self.chat.stop_reason().map(|r| format!("{r:?}"))
    }

    /// Tokens held in the KV cache.
    pub fn cached_tokens(&self) -> u32 {
        self.chat.session().len() as u32
    }
}

/// Parses the OpenAI-style message list the package sends (`[{role, content}]`, content a string).
fn messages_from_json(json: &str) -> Result<Vec<ChatMessage>, JsError> {
    serde_json::from_str(json).map_err(|e| {
        JsError::new(&format!(
            "messages must be [{{role, content}}] with string contents: {e}"
        ))
    })
}

fn cache_stats(p: inferno_core::Prefill) -> CacheStats {
    CacheStats {
        prompt_tokens: p.prompt_tokens as u32,
        reused: p.reused as u32,
        prefilled: p.prefilled as u32,
        dropped_turns: 0,
    }
}

/// One reply at a time over one KV cache kept between requests. Each request brings the whole
/// prompt (a conversation rendered by the model's template, or raw text); the cache keeps the
/// longest common prefix, so a conversation that grows by one turn prefills only that turn.
#[wasm_bindgen]
pub struct WasmGeneration {
    session: Session,
    generator: Option<Generator>,
}

#[wasm_bindgen]
impl WasmGeneration {
    #[wasm_bindgen(constructor)]
    pub fn new(engine: &WasmEngine) -> WasmGeneration {
        WasmGeneration {
            session: engine.engine.new_session(),
            generator: None,
        }
    }

    /// Starts the assistant's reply to `messages_json` (`[{role, content}]`) with the options
    /// of `generate_defaults` (JSON, missing fields take the defaults); prefill happens here.
    pub fn begin_chat(
        &mut self,
        messages_json: &str,
        options_json: &str,
    ) -> Result<CacheStats, JsError> {
        let messages = messages_from_json(messages_json)?;
        let engine = self.session.engine().clone();
        let ids = engine.encode_chat(&messages, true).map_err(js_error)?;
        self.begin(&ids, options_json)
    }

    /// Starts a continuation of the raw `prompt` (no chat template; BOS if the model wants it).
    pub fn begin_prompt(
        &mut self,
        prompt: &str,
        options_json: &str,
    ) -> Result<CacheStats, JsError> {
        let engine = self.session.engine().clone();
        let ids = engine.encode_prompt(prompt).map_err(js_error)?;
        self.begin(&ids, options_json)
    }

    fn begin(&mut self, ids: &[u32], options_json: &str) -> Result<CacheStats, JsError> {
        self.generator = None;
        let options = GenerateOptions::from_json(options_json).map_err(js_error)?;
        let generator = Generator::new(&options).map_err(js_error)?;
        let start = prefill(&mut self.session, ids).map_err(js_error)?;
        self.generator = Some(generator);
        Ok(cache_stats(start))
    }

    /// One step of the reply: its text (possibly empty), or undefined once it is over.
    pub fn next_token(&mut self) -> Result<Option<String>, JsError> {
        let Some(generator) = self.generator.as_mut() else {
            return Err(JsError::new("no reply in progress"));
        };
        generator.step(&mut self.session).map_err(js_error)
    }

    /// Ends the reply now (aborted); `finish` still reports it.
    pub fn cancel(&mut self) {
        if let Some(generator) = self.generator.as_mut() {
            generator.cancel();
        }
    }

    /// Ends the reply and returns it as JSON: `text`, `completion_tokens`, `stop` (core's
    /// StopReason name, or null) and `speculative` (`attempts`, `drafted`, `accepted`,
    /// `forwards`, `tokens`).
    pub fn finish(&mut self) -> Result<String, JsError> {
        let Some(generator) = self.generator.take() else {
            return Err(JsError::new("no reply in progress"));
        };
        let (reply, _) = generator.finish();
        Ok(serde_json::json!({
            "text": reply.text,
            "completion_tokens": reply.tokens.len(),
            "stop": reply.stop,
            "speculative": reply.stats,
        })
        .to_string())
    }

    /// Compose-while-typing: prefills `history_json` (`[{role, content}]`, the conversation
    /// before the message being typed) followed by `draft` as the next user message.
    pub fn compose(&mut self, history_json: &str, draft: &str) -> Result<CacheStats, JsError> {
        if self.generator.is_some() {
            return Err(JsError::new(
                "a reply is being generated: compose after it ends",
            ));
        }
        let history = messages_from_json(history_json)?;
        let d = sync_chat_draft(&mut self.session, &history, draft).map_err(js_error)?;
        Ok(CacheStats {
            prompt_tokens: 0,
            reused: d.reused as u32,
            prefilled: d.prefilled as u32,
            dropped_turns: 0,
        })
    }

    /// Tokens held in the KV cache.
    pub fn cached_tokens(&self) -> u32 {
        self.session.len() as u32
    }
}
