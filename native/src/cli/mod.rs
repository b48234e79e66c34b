//! The `inferno` commands: [`args`] defines them, [`generate`] runs `run` and `chat`, [`eval`]
//! `perplexity`, `compare` and `verify`, and the rest are short enough to live here or in the
//! library modules they call.

pub mod args;
mod eval;
mod generate;

use anyhow::{Context, Result};
use inferno_native::{bench, convert, load, quantize, serve, synthetic};

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
            json,
        } => eval::perplexity(&model, &file, window, windows, json),
        Command::Compare {
            model,
            reference,
            reference_dtype,
            file,
            window,
            windows,
            json,
        } => eval::compare(
            &model,
            &reference,
            reference_dtype,
            &file,
            window,
            windows,
            json,
        ),
        Command::Verify {
            model,
            oracle,
            max_logit_error,
            min_top1,
            json,
        } => eval::verify(&model, &oracle, max_logit_error, min_top1, json),
        Command::Serve(args) => {
            let engine = args.model.engine()?;
            let default_www = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../www");
            serve::serve(
                engine,
                serve::ServeOptions {
                    model_path: args.model.path(),
                    host: args.host,
                    port: args.port,
                    parallel: args.parallel,
                    ctx_budget: args.ctx_budget,
                    max_body: args.max_body,
                    timeout: std::time::Duration::from_secs(args.timeout),
                    header_timeout: std::time::Duration::from_secs(args.header_timeout.max(1)),
                    www: args.www.or(Some(default_www)),
                },
            )
        }
        Command::Info { model } => convert::info(&model.path()),
        Command::Bench(args) => bench::bench(&args),
        Command::Convert {
            input,
            output,
            dtype,
        } => convert::convert(&input, &output, dtype),
        Command::Quantize {
            input,
            output,
            ty,
            allow_requantize,
        } => quantize::quantize(&input, &output, ty, allow_requantize),
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
