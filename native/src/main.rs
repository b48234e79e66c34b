//! `inferno`: run, chat with, inspect, convert and quantize Llama-family models on this CPU.
//! Generated text goes to stdout; progress, stats and errors to stderr.

use inferno_native::progress::{PlainOutput, Progress};
use inferno_native::{bench, convert, load, pool, synthetic};

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use inferno_core::chat::ChatMessage;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::model::WeightDtype;
use inferno_core::sampler::{Sampler, SamplerConfig};
use inferno_core::session::Session;

#[derive(Parser)]
#[command(
    name = "inferno",
    version,
    about = "Hand-written LLM inference for Llama-family models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        /// Window length in tokens.
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Score only the first N windows (0: all).
        #[arg(long, default_value_t = 0)]
        windows: usize,
    },
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
    /// Write a GGUF with the linear layers in another type (llama.cpp's reference quantizers).
    Quantize {
        /// Input model (GGUF file or HF directory).
        input: PathBuf,
        /// Output GGUF file.
        output: PathBuf,
        #[arg(long = "type", value_enum, default_value_t = convert::QuantType::Q4_0)]
        ty: convert::QuantType,
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
struct ModelArgs {
    /// GGUF file or Hugging Face directory [default: the fetched SmolLM2-135M-Instruct].
    #[arg(long, short)]
    model: Option<PathBuf>,
    /// Worker threads [default: all cores but one, at least one].
    #[arg(long, short)]
    threads: Option<usize>,
    /// Keep weights as stored (quantized) or dequantize to f32 (the verification path).
    #[arg(long, value_enum, default_value_t = Dtype::Stored)]
    dtype: Dtype,
}

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    Stored,
    F32,
}

#[derive(Args, Clone)]
struct GenerateArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long = "temp", default_value_t = 0.7)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Random seed [default: from the clock].
    #[arg(long)]
    seed: Option<u64>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// Stop when this text is generated (repeatable; not printed).
    #[arg(long)]
    stop: Vec<String>,
    /// System message for the chat template.
    #[arg(long)]
    system: Option<String>,
    /// Print prefill and decode speed to stderr.
    #[arg(long)]
    stats: bool,
}

impl GenerateArgs {
    fn sampler(&self) -> Result<Sampler> {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        let config = SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed,
        };
        config.validate()?;
        Ok(Sampler::new(config))
    }
}

impl ModelArgs {
    fn path(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(load::default_model_path)
    }

    fn engine(&self) -> Result<Engine> {
        let threads = self.threads.unwrap_or_else(pool::default_threads);
        if threads == 0 || threads > 1024 {
            bail!("--threads must be between 1 and 1024");
        }
        let options = EngineOptions {
            dtype: if self.dtype == Dtype::F32 {
                WeightDtype::F32
            } else {
                WeightDtype::AsStored
            },
            kernels: None,
            parallel: Some(Arc::new(pool::start(threads)?)),
        };
        load::load_engine(&self.path(), options)
    }
}

fn main() {
    // A bug must still end in one line on stderr and exit code 1, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error (a bug in inferno, please report it): {msg}{at}");
    }));
    let cli = Cli::parse();
    let result = std::panic::catch_unwind(|| run(cli)).unwrap_or_else(|_| std::process::exit(1));
    if let Err(e) = result {
        // One line, no backtrace: the chain of contexts joined.
        let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("error: {}", msg.join(": "));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            model,
            gen,
            raw,
            prompt,
        } => {
            let prompt = if prompt == "-" { read_stdin()? } else { prompt };
            let engine = model.engine()?;
            let ids = if raw {
                engine.encode_prompt(&prompt)?
            } else {
                if prompt.trim().is_empty() {
                    return Err(inferno_core::Error::EmptyPrompt.into());
                }
                let mut messages = Vec::new();
                if let Some(system) = &gen.system {
                    messages.push(ChatMessage {
                        role: "system".into(),
                        content: system.clone(),
                    });
                }
                messages.push(ChatMessage {
                    role: "user".into(),
                    content: prompt,
                });
                engine.encode_chat(&messages, true)?
            };
            let mut session = engine.new_session();
            let mut sampler = gen.sampler()?;
            turn(&mut session, &ids, &mut sampler, &gen)?;
            println!();
            Ok(())
        }
        Command::Chat { model, gen } => chat(model, gen),
        Command::Tokenize { model, text } => {
            let files = load::ModelFiles::open(&model.path())?;
            let ids = files.with_source(|source| {
                let tokenizer = inferno_core::engine::build_tokenizer(&source.tokenizer)?;
                Ok(tokenizer.encode(&text)?)
            })?;
            println!("{}", serde_json::to_string(&ids)?);
            Ok(())
        }
        Command::Perplexity {
            model,
            file,
            window,
            windows,
        } => {
            if window < 2 {
                bail!("--window must be at least 2 tokens (a window's first token is not scored), got {window}");
            }
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not valid UTF-8 (byte {})",
                    file.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            let engine = model.engine()?;
            let mut tokens = match engine.encode_prompt(&text) {
                Err(inferno_core::Error::EmptyPrompt) => {
                    bail!("{} has no tokens to score", file.display())
                }
                tokens => tokens?,
            };
            if windows > 0 {
                tokens.truncate(windows * window);
            }
            let t0 = Instant::now();
            let progress = Progress::new("perplexity", "windows", PlainOutput::EveryStep);
            let p = inferno_core::eval::score(&engine, &tokens, window, &mut |done, total| {
                progress.set(done, total)
            })
            .with_context(|| format!("cannot score {}", file.display()))?;
            progress.finish();
            // llama.cpp scores full windows only: a shorter text has no such score (not 1.0).
            let llamacpp = match p.llamacpp_style_scored {
                0 => format!("llama.cpp-style: n/a (no full window of {window} tokens)"),
                n => format!(
                    "llama.cpp-style: ppl {:.4} over {n} tokens",
                    p.llamacpp_style
                ),
            };
            println!("tokens {} | non-overlapping {window}: ppl {:.4} over {} tokens | {llamacpp} | {:.1} s | kernels {}", tokens.len(), p.non_overlapping, p.non_overlapping_scored, t0.elapsed().as_secs_f64(), engine.kernels().name);
            Ok(())
        }
        Command::Info { model } => convert::info(&model.path()),
        Command::Bench(args) => bench::bench(&args),
        Command::Convert {
            input,
            output,
            dtype,
        } => convert::convert(&input, &output, dtype),
        Command::Quantize { input, output, ty } => convert::quantize(&input, &output, ty),
        Command::Synthetic {
            output,
            shape,
            ty,
            seed,
            tokenizer_from,
        } => {
            let tokenizer_from = tokenizer_from.unwrap_or_else(load::default_model_path);
            synthetic::write(&output, shape, ty.ggml(), seed, &tokenizer_from)
        }
    }
}

fn read_stdin() -> Result<String> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
        .context("cannot read the prompt from stdin")?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "the prompt is not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Brings the session to `ids` (reusing the common prefix), then streams a reply to stdout.
fn turn(
    session: &mut Session,
    ids: &[u32],
    sampler: &mut Sampler,
    gen: &GenerateArgs,
) -> Result<String> {
    let context = session.engine().config().context_length;
    if ids.len() >= context {
        return Err(inferno_core::Error::ContextOverflow {
            needed: ids.len() + 1,
            context,
        }
        .into());
    }
    let t0 = Instant::now();
    let reused = session.sync_tokens(ids)?;
    session.logits()?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut stdout = std::io::stdout().lock();
    let mut write_error = None;
    let out = session.generate(
        sampler,
        gen.max_tokens,
        &gen.stop,
        &mut |piece| match stdout
            .write_all(piece.as_bytes())
            .and_then(|_| stdout.flush())
        {
            Ok(()) => true,
            Err(e) => {
                write_error = Some(e);
                false
            }
        },
    )?;
    if let Some(e) = write_error {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e).context("cannot write to stdout");
        }
    }
    let decode = t1.elapsed();
    if gen.stats {
        let new = ids.len() - reused;
        eprintln!(
            "\n[prefill {new} tokens ({reused} reused) in {:.1} ms = {:.1} tok/s | decode {} tokens in {:.1} ms = {:.1} tok/s | stop: {:?} | seed {} | kernels {}]",
            prefill.as_secs_f64() * 1e3,
            new as f64 / prefill.as_secs_f64().max(1e-9),
            out.tokens.len(),
            decode.as_secs_f64() * 1e3,
            out.tokens.len() as f64 / decode.as_secs_f64().max(1e-9),
            out.stop,
            sampler.config.seed,
            session.engine().kernels().name,
        );
    }
    Ok(out.text)
}

fn chat(model: ModelArgs, gen: GenerateArgs) -> Result<()> {
    let engine = model.engine()?;
    let mut session = engine.new_session();
    let mut sampler = gen.sampler()?;
    let mut system = gen.system.clone();
    let mut messages: Vec<ChatMessage> = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    eprintln!(
        "chat with {} ({}). /reset, /system TEXT, /quit or Ctrl-D to leave.",
        model.path().display(),
        engine.config().architecture
    );
    loop {
        eprint!("> ");
        std::io::stderr().flush().ok();
        let Some(line) = lines.next() else {
            eprintln!();
            return Ok(());
        };
        let line = match line {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                eprintln!("error: that line is not valid UTF-8; please type it again");
                continue;
            }
            Err(e) => return Err(e).context("cannot read stdin"),
        };
        let line = line.trim_end_matches(['\r', '\n']);
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/reset" => {
                messages.clear();
                session.truncate(0);
                eprintln!("(conversation cleared)");
                continue;
            }
            cmd if cmd.starts_with("/system") => {
                let text = cmd["/system".len()..].trim();
                system = (!text.is_empty()).then(|| text.to_string());
                messages.clear();
                eprintln!(
                    "(system message {}; conversation cleared)",
                    if system.is_some() { "set" } else { "removed" }
                );
                continue;
            }
            _ => {}
        }
        let mut all = Vec::new();
        if let Some(s) = &system {
            all.push(ChatMessage {
                role: "system".into(),
                content: s.clone(),
            });
        }
        all.extend(messages.iter().cloned());
        all.push(ChatMessage {
            role: "user".into(),
            content: line.to_string(),
        });
        let ids = engine.encode_chat(&all, true)?;
        match turn(&mut session, &ids, &mut sampler, &gen) {
            Ok(reply) => {
                println!();
                messages.push(ChatMessage {
                    role: "user".into(),
                    content: line.to_string(),
                });
                messages.push(ChatMessage {
                    role: "assistant".into(),
                    content: reply,
                });
            }
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
}
