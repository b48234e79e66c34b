//! The `inferno` commands: [`args`] defines them, [`generate`] runs `run` and `chat`, and the
//! rest are short enough to live here or in the library modules they call.

pub mod args;
mod generate;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use inferno_native::progress::{PlainOutput, Progress};
use inferno_native::{bench, convert, load, synthetic};

use args::{Cli, Command};

/// Runs one command.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            model,
            gen,
            raw,
            prompt,
        } => {
            let prompt = if prompt == "-" { read_stdin()? } else { prompt };
            generate::run(model, gen, raw, prompt)
        }
        Command::Chat { model, gen } => generate::chat(model, gen),
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
