//! `inferno perplexity`, `compare` and `verify`: how good a model file is, against a text or
//! against reference data. The figures come from core's eval module and the native verify
//! module; this file reads the inputs and prints (a table line, or JSON with --json).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_native::load;
use inferno_native::progress::{PlainOutput, Progress};
use serde_json::json;

use super::args::{Dtype, ModelArgs};

/// A text file's tokens under `engine`, cut to the first `windows` windows (0: all).
fn text_tokens(engine: &Engine, file: &Path, window: usize, windows: usize) -> Result<Vec<u32>> {
    if window < 2 {
        bail!("--window must be at least 2 tokens (a window's first token is not scored), got {window}");
    }
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid UTF-8 (byte {})",
            file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let mut tokens = match engine.encode_prompt(&text) {
        Err(inferno_core::Error::EmptyPrompt) => bail!("{} has no tokens to score", file.display()),
        tokens => tokens?,
    };
    if windows > 0 {
        tokens.truncate(windows.saturating_mul(window));
    }
    Ok(tokens)
}

/// NaN (no token scored) is JSON null.
fn number(v: f64) -> serde_json::Value {
    if v.is_finite() {
        json!(v)
    } else {
        serde_json::Value::Null
    }
}

pub fn perplexity(
    model: &ModelArgs,
    file: &Path,
    window: usize,
    windows: usize,
    json: bool,
) -> Result<()> {
    let engine = model.engine()?;
    let tokens = text_tokens(&engine, file, window, windows)?;
    let t0 = Instant::now();
    let progress = Progress::new("perplexity", "windows", PlainOutput::EveryStep);
    let p = inferno_core::eval::score(&engine, &tokens, window, &mut |done, total| {
        progress.set(done, total)
    })
    .with_context(|| format!("cannot score {}", file.display()))?;
    progress.finish();
    if json {
        for (method, ppl, scored) in [
            ("llamacpp", p.llamacpp_style, p.llamacpp_style_scored),
            (
                "non_overlapping",
                p.non_overlapping,
                p.non_overlapping_scored,
            ),
        ] {
            let line = json!({
                "method": method, "ctx": window, "ppl": number(ppl), "tokens_scored": scored,
                "tokens": tokens.len(), "kernels": engine.kernels().name,
            });
            println!("{line}");
        }
        return Ok(());
    }
    // llama.cpp scores full windows only: a shorter text has no such score (not 1.0).
    let llamacpp = match p.llamacpp_style_scored {
        0 => format!("llama.cpp-style: n/a (no full window of {window} tokens)"),
        n => format!(
            "llama.cpp-style: ppl {:.4} over {n} tokens",
            p.llamacpp_style
        ),
    };
    println!(
        "tokens {} | non-overlapping {window}: ppl {:.4} over {} tokens | {llamacpp} | {:.1} s | kernels {}",
        tokens.len(),
        p.non_overlapping,
        p.non_overlapping_scored,
        t0.elapsed().as_secs_f64(),
        engine.kernels().name
    );
    Ok(())
}

pub fn compare(
    model: &ModelArgs,
    reference: &Path,
    reference_dtype: Dtype,
    file: &Path,
    window: usize,
    windows: usize,
    json: bool,
) -> Result<()> {
    let options = model.options()?;
    let engine = load::load_engine(&model.path(), options.clone())?;
    // The same threads run both models, one after the other.
    let reference_engine = load::load_engine(
        reference,
        EngineOptions {
            dtype: reference_dtype.weight_dtype(),
            ..options
        },
    )
    .with_context(|| format!("cannot load the reference {}", reference.display()))?;
    let tokens = text_tokens(&engine, file, window, windows)?;
    let t0 = Instant::now();
    let progress = Progress::new("compare", "windows", PlainOutput::EveryStep);
    let c =
        inferno_core::eval::compare(&engine, &reference_engine, &tokens, window, &mut |d, t| {
            progress.set(d, t)
        })
        .with_context(|| format!("cannot compare over {}", file.display()))?;
    progress.finish();
    if json {
        let line = json!({
            "model": model.path(), "reference": reference, "ctx": window,
            "positions": c.positions, "top1_agreement": c.top1_agreement(),
            "mean_kl": c.mean_kl, "max_kl": c.max_kl, "kernels": engine.kernels().name,
        });
        println!("{line}");
        return Ok(());
    }
    println!(
        "{} positions | top-1 agreement {:.2}% ({} of {}) | mean KL {:.6} | max KL {:.4} | {:.1} s | kernels {}",
        c.positions,
        100.0 * c.top1_agreement(),
        c.top1_agree,
        c.positions,
        c.mean_kl,
        c.max_kl,
        t0.elapsed().as_secs_f64(),
        engine.kernels().name
    );
    Ok(())
}

pub fn verify(
    model: &ModelArgs,
    oracle: &Path,
    max_logit_error: Option<f32>,
    min_top1: Option<f64>,
    json: bool,
) -> Result<()> {
    let engine = model.engine()?;
    let reports = inferno_native::verify::verify(&engine, oracle)?;
    let positions: usize = reports.iter().map(|r| r.positions).sum();
    let agree: usize = reports.iter().map(|r| r.top1_agree).sum();
    let worst = reports
        .iter()
        .map(|r| r.max_logit_error)
        .fold(0.0, f32::max);
    let top1 = agree as f64 / positions.max(1) as f64;
    for r in &reports {
        if json {
            println!("{}", serde_json::to_string(r)?);
            continue;
        }
        let greedy = match &r.divergence {
            None => format!(
                "greedy {} of {} steps equal",
                r.greedy_matched, r.greedy_steps
            ),
            Some(d) => format!(
                "greedy leaves at step {} (ours {}, reference {}, reference margin {:.3})",
                d.step, d.ours, d.reference, d.reference_margin
            ),
        };
        println!(
            "{}: {} tokens{} | top-1 {}/{} | worst top-10 logit error {:.2e}{} | {greedy}",
            r.name,
            r.tokens,
            if r.tokenization_ok {
                ""
            } else {
                " (TOKENIZATION DIFFERS)"
            },
            r.top1_agree,
            r.positions,
            r.max_logit_error,
            r.last_row_max_error
                .map_or(String::new(), |e| format!(", last row {e:.2e}")),
        );
    }
    let tokenization_ok = reports.iter().all(|r| r.tokenization_ok);
    if json {
        let summary = json!({
            "summary": true, "prompts": reports.len(), "positions": positions,
            "top1_agreement": top1, "max_logit_error": worst, "tokenization_ok": tokenization_ok,
            "kernels": engine.kernels().name,
        });
        println!("{summary}");
    } else {
        println!(
            "{} prompts, {positions} positions | top-1 agreement {:.2}% | worst top-10 logit error {worst:.2e} | tokenization {} | kernels {}",
            reports.len(),
            100.0 * top1,
            if tokenization_ok { "equal" } else { "DIFFERS" },
            engine.kernels().name
        );
    }
    let mut failed = Vec::new();
    if !tokenization_ok {
        failed.push("the tokenization differs from the reference".to_string());
    }
    if let Some(max) = max_logit_error {
        if worst > max {
            failed.push(format!(
                "worst logit error {worst:.3e} > --max-logit-error {max:e}"
            ));
        }
    }
    if let Some(min) = min_top1 {
        if top1 < min {
            failed.push(format!("top-1 agreement {top1:.4} < --min-top1 {min}"));
        }
    }
    if !failed.is_empty() {
        bail!("verification failed: {}", failed.join("; "));
    }
    Ok(())
}
