//! Engine: weights + tokenizer + chat template + kernels + parallel executor. The public API
//! that the CLI, the server and the browser use; cheap to clone (one shared, immutable inner).

use std::sync::Arc;

use crate::chat::{ChatMessage, ChatTemplate};
use crate::config::ModelConfig;
use crate::formats::gguf::GgufFile;
use crate::formats::{ModelSource, SpecialTokens, TokenizerSource};
use crate::kernels::Kernels;
use crate::model::{Compute, Profile, Tuning, WeightDtype, Weights};
use crate::parallel::{Parallel, Serial};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// Load-time tuning: a few tens of ms at most; `INFERNO_AUTOTUNE=0` keeps the defaults (tests
/// that build many engines). wasm keeps the defaults (it runs serially).
fn tune(weights: &Weights, kernels: &'static Kernels, parallel: &dyn Parallel) -> Tuning {
    tune_with(weights, kernels, None, parallel)
}

/// [`tune`], and for kernels the engine chose itself (not asked for by the caller or by
/// INFERNO_KERNELS), the backend timed fastest for one-token forwards.
fn tune_auto(weights: &Weights, kernels: &'static Kernels, parallel: &dyn Parallel) -> Tuning {
    #[cfg(not(target_arch = "wasm32"))]
    if std::env::var("INFERNO_AUTOTUNE").as_deref() != Ok("0") {
        let decode_kernels = Tuning::pick_decode_kernels(weights, kernels, parallel);
        return tune_with(weights, kernels, decode_kernels, parallel);
    }
    tune(weights, kernels, parallel)
}

/// The work cut per matrix shape, and the machine's prefetch distance for one-token matmuls
/// timed with the kernels that run them (set for the process: a property of the machine).
fn tune_with(
    weights: &Weights,
    kernels: &'static Kernels,
    decode_kernels: Option<&'static Kernels>,
    parallel: &dyn Parallel,
) -> Tuning {
    #[cfg(not(target_arch = "wasm32"))]
    {
        if std::env::var("INFERNO_AUTOTUNE").as_deref() != Ok("0") {
            let budget = std::time::Duration::from_millis(40);
            let tuning = Tuning {
                decode_kernels,
                ..Tuning::autotune(weights, kernels, parallel, budget)
            };
            let decode = decode_kernels.unwrap_or(kernels);
            let (tuning, distance) = tuning.timed_streaming(weights, decode, parallel);
            crate::kernels::set_stream_prefetch(distance);
            return tuning;
        }
    }
    let _ = (weights, kernels, parallel);
    Tuning {
        decode_kernels,
        ..Tuning::default()
    }
}

/// How to build an [`Engine`].
#[derive(Clone, Default)]
pub struct EngineOptions {
    pub dtype: WeightDtype,
    /// None: `Kernels::select()` (INFERNO_KERNELS or the best for this host).
    pub kernels: Option<&'static Kernels>,
    /// None: run serially.
    pub parallel: Option<Arc<dyn Parallel>>,
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    weights: Arc<Weights>,
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
    special: SpecialTokens,
    kernels: &'static Kernels,
    parallel: Arc<dyn Parallel>,
    /// How work is cut for threads (never changes a result).
    tuning: Arc<Tuning>,
    /// Where the forward's time goes, on an engine made by `with_profile`.
    profile: Option<Arc<Profile>>,
    /// The engine chose its kernels itself (nobody asked for a backend), so the tuner may pick
    /// another for one-token forwards.
    auto_kernels: bool,
}

impl Engine {
    /// Builds an engine from any parsed model format.
    pub fn from_source(source: &ModelSource<'_>, options: EngineOptions) -> Result<Engine> {
        Self::from_source_with_progress(source, options, &mut |_, _| {})
    }

    pub fn from_source_with_progress(
        source: &ModelSource<'_>,
        options: EngineOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Engine> {
        let tokenizer = build_tokenizer(&source.tokenizer)?;
        source
            .special
            .check_ids(&tokenizer, source.config.vocab_size)?;
        let special = source.special.clone();
        let token_text =
            |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).unwrap_or_default();
        let (bos, eos) = (token_text(special.bos), token_text(special.eos));
        let template = match &source.chat_template {
            Some(t) => ChatTemplate::new(t, &bos, &eos)?,
            // A Gemma vocabulary without a template: its own turns, not ChatML's unknown ones.
            None if tokenizer.token_id("<start_of_turn>").is_some() => ChatTemplate::gemma(&bos),
            None => ChatTemplate::chatml(),
        };
        let weights = Weights::load_with_progress(source, options.dtype, progress)?;
        let chosen_here =
            options.kernels.is_none() && std::env::var_os("INFERNO_KERNELS").is_none();
        let kernels = match options.kernels {
            Some(k) => k,
            None => Kernels::select()?,
        };
        let parallel = options.parallel.unwrap_or_else(|| Arc::new(Serial));
        let tuning = if chosen_here {
            tune_auto(&weights, kernels, &*parallel)
        } else {
            tune(&weights, kernels, &*parallel)
        };
        Ok(Engine {
            inner: Arc::new(Inner {
                weights: Arc::new(weights),
                tokenizer: Arc::new(tokenizer),
                template: Arc::new(template),
                special,
                kernels,
                parallel,
                tuning: Arc::new(tuning),
                profile: None,
                auto_kernels: chosen_here,
            }),
        })
    }

    /// Builds an engine from the bytes of a GGUF file.
    pub fn from_gguf_bytes(bytes: &[u8], options: EngineOptions) -> Result<Engine> {
        let file = GgufFile::parse(bytes)?;
        let source = ModelSource::from_gguf(&file)?;
        Self::from_source(&source, options)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.inner.weights.config
    }

    pub fn weights(&self) -> &Weights {
        &self.inner.weights
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.inner.special
    }

    pub fn kernels(&self) -> &'static Kernels {
        self.inner.kernels
    }

    /// The backend one-token forwards (decode steps) run on: the load-time tuner's pick, or
    /// [`Engine::kernels`].
    pub fn decode_kernels(&self) -> &'static Kernels {
        self.inner
            .tuning
            .decode_kernels
            .unwrap_or(self.inner.kernels)
    }

    pub fn parallel(&self) -> &dyn Parallel {
        &*self.inner.parallel
    }

    /// How work is cut for threads (tuned at load; any tuning gives the same results).
    pub fn tuning(&self) -> &Tuning {
        &self.inner.tuning
    }

    /// Kernels, threads and tuning together, as a forward pass takes them.
    pub fn compute(&self) -> Compute<'_> {
        Compute {
            kernels: self.inner.kernels,
            parallel: &*self.inner.parallel,
            tuning: &self.inner.tuning,
            profile: self.inner.profile.as_deref(),
        }
    }

    /// The same engine timing each part of every forward into a fresh [`Profile`] (for
    /// `inferno bench --profile`; the results are the same bits).
    pub fn with_profile(&self) -> Engine {
        let mut engine = self.rebuilt(
            self.inner.kernels,
            self.inner.parallel.clone(),
            (*self.inner.tuning).clone(),
        );
        if let Some(inner) = Arc::get_mut(&mut engine.inner) {
            inner.profile = Some(Arc::new(Profile::default()));
        }
        engine
    }

    /// The profile of an engine made by [`Engine::with_profile`].
    pub fn profile(&self) -> Option<&Profile> {
        self.inner.profile.as_deref()
    }

    /// The same model with other kernels or another executor (cheap: the weights are shared),
    /// tuned again for them.
    /// Keeping the engine's own kernels (a new executor) keeps its per-phase choice, tuned
    /// again for the new threads.
    pub fn with_kernels(&self, kernels: &'static Kernels, parallel: Arc<dyn Parallel>) -> Engine {
        let i = &self.inner;
        let tuning = if i.auto_kernels && kernels == i.kernels {
            tune_auto(&i.weights, kernels, &*parallel)
        } else {
            tune(&i.weights, kernels, &*parallel)
        };
        let mut engine = self.rebuilt(kernels, parallel, tuning);
        if let Some(inner) = Arc::get_mut(&mut engine.inner) {
            inner.auto_kernels = i.auto_kernels && kernels == i.kernels;
        }
        engine
    }

    /// The same engine with a given tuning (e.g. to check that every configuration gives the
    /// same bits).
    pub fn with_tuning(&self, tuning: Tuning) -> Engine {
        let i = &self.inner;
        self.rebuilt(i.kernels, i.parallel.clone(), tuning)
    }

    fn rebuilt(
        &self,
        kernels: &'static Kernels,
        parallel: Arc<dyn Parallel>,
        tuning: Tuning,
    ) -> Engine {
        let i = &self.inner;
        Engine {
            inner: Arc::new(Inner {
                weights: i.weights.clone(),
                tokenizer: i.tokenizer.clone(),
                template: i.template.clone(),
                special: i.special.clone(),
                kernels,
                parallel,
                tuning: Arc::new(tuning),
                profile: None,
                auto_kernels: false,
            }),
        }
    }

    /// Token ids for a raw prompt: BOS first if the model asks for it, special tokens parsed.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if self.inner.special.add_bos {
            ids.extend(self.inner.special.bos);
        }
        ids.extend(self.inner.tokenizer.encode(text)?);
        if ids.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        Ok(ids)
    }

    /// Renders a conversation with the model's chat template.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.inner.template.render(messages, add_generation_prompt)
    }

    /// Token ids of a rendered conversation (the template writes BOS itself where it wants one).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let text = self.render_chat(messages, add_generation_prompt)?;
        self.inner.tokenizer.encode(&text)
    }

    /// True for EOS and the chat models' end-of-turn tokens.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        let s = &self.inner.special;
        s.eos == Some(id) || s.eos_extra.contains(&id)
    }
}

/// The tokenizer a model source describes.
pub fn build_tokenizer(source: &TokenizerSource) -> Result<Tokenizer> {
    match source {
        TokenizerSource::Json(json) => Tokenizer::from_json(json),
        TokenizerSource::Gguf(meta) => Tokenizer::from_gguf_metadata(meta),
    }
}
