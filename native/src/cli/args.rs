//! The command line: every command and flag of `inferno` (clap), and how flags become engine
//! and generation options. What the commands do is in the sibling modules.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::generate::GenerateOptions;
use inferno_core::model::WeightDtype;
use inferno_core::sampler::SamplerConfig;
use inferno_core::speculative::SpeculativeOptions;
use inferno_native::{bench, convert, load, pool, quantize, synthetic};

#[derive(Parser)]
#[command(
    name = "inferno",
    version,
    about = "Hand-written LLM inference for Llama-family models"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Generate a reply to one prompt, streamed to stdout.
    Run {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        gen: GenerateArgs,
        /// Feed the prompt as-is instead of as a user message in the chat template.
        #[arg(long)]
        raw: bool,
        /// The prompt ("-" reads it from stdin).
        prompt: String,
    },
    /// Chat interactively; the session keeps its cache, so each turn prefills only what's new.
    /// Commands: /reset, /system TEXT, /quit (or Ctrl-D).
    Chat {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        gen: GenerateArgs,
    },
    /// Print the token ids of a text as one JSON array.
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        text: String,
    },
    /// Perplexity of a text file: non-overlapping windows (every token but each window's first)
    /// and llama-perplexity's scoring (second half of full windows). No BOS unless the model asks.
    Perplexity {
        #[command(flatten)]
        model: ModelArgs,
        /// The text file to score.
        file: PathBuf,
        /// Window (context) length in tokens.
        #[arg(long, visible_alias = "ctx", default_value_t = 512)]
        window: usize,
        /// Score only the first N windows (0: all).
        #[arg(long, default_value_t = 0)]
        windows: usize,
        /// One JSON object per method on stdout: {"method", "ctx", "ppl", "tokens_scored"}.
        #[arg(long)]
        json: bool,
    },
    /// Compare a model's next-token distributions with a reference model's over a text file:
    /// top-1 agreement and KL(reference || model), e.g. a quantized file against the f32
    /// Hugging Face directory, or against itself with --reference-dtype f32.
    Compare {
        #[command(flatten)]
        model: ModelArgs,
        /// The reference model (GGUF file or Hugging Face directory).
        #[arg(long)]
        reference: PathBuf,
        /// Weights of the reference as stored, or dequantized to f32.
        #[arg(long, value_enum, default_value_t = Dtype::Stored)]
        reference_dtype: Dtype,
        /// The text file.
        file: PathBuf,
        /// Window (context) length in tokens.
        #[arg(long, visible_alias = "ctx", default_value_t = 512)]
        window: usize,
        /// Compare only the first N windows (0: all).
        #[arg(long, default_value_t = 0)]
        windows: usize,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Check a model against reference data in the oracle's format (DIR/logits/*.json: top-10
    /// logits per position, the last row, a greedy continuation): worst logit error, top-1
    /// agreement, first greedy divergence. Exits with an error if a given bound is missed.
    Verify {
        #[command(flatten)]
        model: ModelArgs,
        /// The reference data directory (e.g. tests/data/oracle).
        #[arg(long)]
        oracle: PathBuf,
        /// Fail if any top-10 logit is further than this from the reference.
        #[arg(long)]
        max_logit_error: Option<f32>,
        /// Fail if the top-1 agreement over all positions is below this share (0..1).
        #[arg(long)]
        min_top1: Option<f64>,
        /// One JSON object per prompt and a summary on stdout.
        #[arg(long)]
        json: bool,
    },
    /// An OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models,
    /// /v1/compose, /health, /metrics) decoding all conversations together; the chat page at /.
    Serve(ServeArgs),
    /// Print what a model file holds: architecture, shape, tensor types, tokenizer.
    Info {
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Measure prefill and decode speed (median of trials) against memory bandwidth.
    Bench(bench::BenchArgs),
    /// Write a Hugging Face directory (safetensors, config.json, tokenizer files) from a model.
    Convert {
        /// Input model (GGUF file or HF directory).
        input: PathBuf,
        /// Output directory (created).
        output: PathBuf,
        #[arg(long, value_enum, default_value_t = convert::HfDtype::F32)]
        dtype: convert::HfDtype,
    },
    /// Write a GGUF in one of llama-quantize's file types (llama.cpp's reference quantizers and
    /// its per-tensor choices: the _S/_M/_L mixes give some tensors more bits).
    Quantize {
        /// Input model (GGUF file or HF directory).
        input: PathBuf,
        /// Output GGUF file.
        output: PathBuf,
        #[arg(long = "type", value_enum, default_value_t = quantize::QuantType::Q4_K_M)]
        ty: quantize::QuantType,
        /// Re-quantize tensors that are already quantized (each round loses precision).
        #[arg(long)]
        allow_requantize: bool,
    },
    /// Write a random-weight Llama GGUF of a given shape (for benches and tests), with the
    /// tokenizer of a real GGUF.
    Synthetic {
        /// Output GGUF file.
        output: PathBuf,
        #[arg(long, value_enum, default_value_t = synthetic::ShapeName::TinyLlama1_1B)]
        shape: synthetic::ShapeName,
        #[arg(long = "type", value_enum, default_value_t = synthetic::MatrixType::Q4_0)]
        ty: synthetic::MatrixType,
        /// Seed of the weights (same seed, same file).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// GGUF whose tokenizer the model gets [default: the fetched SmolLM2-135M-Instruct].
        #[arg(long)]
        tokenizer_from: Option<PathBuf>,
    },
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on (127.0.0.1: this machine only).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the one chosen is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Conversations decoded together; more requests wait their turn.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// KV cache bytes for running requests and cached prefixes together (K, M, G suffixes).
    #[arg(long, default_value = "2G", value_parser = inferno_native::serve::parse_bytes)]
    pub ctx_budget: usize,
    /// Largest request body (K, M, G suffixes); larger ones get 413.
    #[arg(long, default_value = "1M", value_parser = inferno_native::serve::parse_bytes)]
    pub max_body: usize,
    /// Seconds a request may run before it is cancelled.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Seconds a connection has to send a request's headers before it is closed.
    #[arg(long, default_value_t = 10)]
    pub header_timeout: u64,
    /// The chat page's directory [default: this repository's www/, if there].
    #[arg(long)]
    pub www: Option<PathBuf>,
}

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// GGUF file or Hugging Face directory [default: the fetched SmolLM2-135M-Instruct].
    #[arg(long, short)]
    pub model: Option<PathBuf>,
    /// Worker threads [default: all cores but one, at least one].
    #[arg(long, short)]
    pub threads: Option<usize>,
    /// Keep weights as stored (quantized) or dequantize to f32 (the verification path).
    #[arg(long, value_enum, default_value_t = Dtype::Stored)]
    pub dtype: Dtype,
}

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Stored,
    F32,
}

impl Dtype {
    pub fn weight_dtype(self) -> WeightDtype {
        match self {
            Dtype::Stored => WeightDtype::AsStored,
            Dtype::F32 => WeightDtype::F32,
        }
    }
}

#[derive(Args, Clone)]
pub struct GenerateArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long = "temp", default_value_t = defaults().sampler.temperature)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: no cut).
    #[arg(long, default_value_t = defaults().sampler.top_k)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1: no cut).
    #[arg(long, default_value_t = defaults().sampler.top_p)]
    pub top_p: f32,
    /// Drop tokens less likely than min-p times the most likely one (0: no cut).
    #[arg(long, default_value_t = defaults().sampler.min_p)]
    pub min_p: f32,
    /// Penalize tokens seen in the last --repeat-last-n tokens (1: no penalty).
    #[arg(long, default_value_t = defaults().sampler.repeat_penalty)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = defaults().sampler.repeat_last_n)]
    pub repeat_last_n: usize,
    /// Subtract this from the logit of every token in the last --repeat-last-n (0: none).
    #[arg(long, default_value_t = defaults().sampler.presence_penalty, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtract this per occurrence in the last --repeat-last-n tokens (0: none).
    #[arg(long, default_value_t = defaults().sampler.frequency_penalty, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Random seed [default: from the clock].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = defaults().max_tokens)]
    pub max_tokens: usize,
    /// Stop when this text is generated (repeatable; not printed).
    #[arg(long)]
    pub stop: Vec<String>,
    /// System message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Prompt-lookup speculative decoding (the same text either way; only speed differs).
    #[arg(long, value_enum, default_value_t = OnOff::from(defaults().speculative.enabled))]
    pub speculative: OnOff,
    /// Most tokens drafted per speculative step.
    #[arg(long, default_value_t = defaults().speculative.draft_max)]
    pub draft_max: usize,
    /// Shortest and longest context suffix looked up for a draft.
    #[arg(long, default_value_t = defaults().speculative.ngram_min)]
    pub ngram_min: usize,
    #[arg(long, default_value_t = defaults().speculative.ngram_max)]
    pub ngram_max: usize,
    /// Print prefill and decode speed (and what speculation did) to stderr.
    #[arg(long)]
    pub stats: bool,
}

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnOff {
    On,
    Off,
}

impl From<bool> for OnOff {
    fn from(on: bool) -> OnOff {
        if on {
            OnOff::On
        } else {
            OnOff::Off
        }
    }
}

impl std::fmt::Display for OnOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if *self == OnOff::On { "on" } else { "off" })
    }
}

/// Core's defaults, the one place they are defined; the flags above show them.
fn defaults() -> GenerateOptions {
    GenerateOptions::default()
}

impl GenerateArgs {
    /// The generation options these flags ask for (validated).
    pub fn options(&self) -> Result<GenerateOptions> {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        let options = GenerateOptions {
            sampler: SamplerConfig {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                repeat_last_n: self.repeat_last_n,
                presence_penalty: self.presence_penalty,
                frequency_penalty: self.frequency_penalty,
                seed,
            },
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            speculative: SpeculativeOptions {
                enabled: self.speculative == OnOff::On,
                draft_max: self.draft_max,
                ngram_min: self.ngram_min,
                ngram_max: self.ngram_max,
            },
        };
        options.validate()?;
        Ok(options)
    }
}

impl ModelArgs {
    pub fn path(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(load::default_model_path)
    }

    pub fn engine(&self) -> Result<Engine> {
        load::load_engine(&self.path(), self.options()?)
    }

    /// The engine options these flags ask for, with a started pool (share it with
    /// `EngineOptions::clone` to load a second model on the same threads).
    pub fn options(&self) -> Result<EngineOptions> {
        let threads = self.threads.unwrap_or_else(pool::default_threads);
        if threads == 0 || threads > 1024 {
            bail!("--threads must be between 1 and 1024");
        }
        Ok(EngineOptions {
            dtype: self.dtype.weight_dtype(),
            kernels: None,
            parallel: Some(Arc::new(pool::start(threads)?)),
        })
    }
}
