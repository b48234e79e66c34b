//! The `inferno` commands: [`args`] defines them, [`generate`] runs `run` and `chat`, and the
//! rest are short enough to live here or in the library modules they call.

pub mod args;
mod generate;

use std::time::Instant;

use anyhow::{Context, Result};
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
            let mut tokens = engine.encode_prompt(&text)?;
            if windows > 0 {
                tokens.truncate(windows * window);
            }
            let t0 = Instant::now();
            let nll =
                inferno_core::eval::window_nll(&engine, &tokens, window, &mut |done, total| {
                    eprint!("\rwindow {done}/{total}");
                })?;
            eprintln!();
            let p = inferno_core::eval::perplexity(&nll, window);
            println!("tokens {} | non-overlapping {window}: ppl {:.4} over {} tokens | llama.cpp-style: ppl {:.4} over {} tokens | {:.1} s | kernels {}", tokens.len(), p.non_overlapping, p.non_overlapping_scored, p.llamacpp_style, p.llamacpp_style_scored, t0.elapsed().as_secs_f64(), engine.kernels().name);
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
