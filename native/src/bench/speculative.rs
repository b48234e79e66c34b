//! `inferno bench --speculative`: plain against speculative decoding, tokens/s on three
//! workloads (code being edited, a table being continued, fresh prose) with 1 and N threads,
//! the median of trials after a warm-up, both in the same run; and what a batched forward of k
//! tokens costs against k single-token forwards, the reason a verified draft pays.
//!
//! The output is the same with and without speculation (tests/tests/speculative.rs asserts
//! it), so each pair of trials decodes exactly the same tokens and only the time differs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use inferno_core::chat::ChatMessage;
use inferno_core::engine::Engine;
use inferno_core::generate::{prefill, GenerateOptions, Generator};
use inferno_core::speculative::{SpeculativeOptions, SpeculativeStats};
use serde::Serialize;

use super::{median, rate, BenchArgs};
use crate::pool;

/// The three workloads. Code and prose are chat turns (the template and the stop at the end of
/// the turn as a user meets them); the table is a raw continuation (prefix `RAW`), since the
/// small default model asked in a chat to continue a table writes prose about it instead.
const WORKLOADS: &[(&str, &str)] = &[
    (
        "code",
        "Here is a Rust file:\n\n```rust\nfn area(width: f64, height: f64) -> f64 {\n    width * height\n}\n\nfn perimeter(width: f64, height: f64) -> f64 {\n    2.0 * (width + height)\n}\n\nfn diagonal(width: f64, height: f64) -> f64 {\n    (width * width + height * height).sqrt()\n}\n\nfn is_square(width: f64, height: f64) -> bool {\n    width == height\n}\n```\n\nRewrite the whole file with the type f32 instead of f64.",
    ),
    (
        "table",
        "RAW| n | n squared | n cubed |\n|---|---|---|\n| 1 | 1 | 1 |\n| 2 | 4 | 8 |\n| 3 | 9 | 27 |\n| 4 | 16 | 64 |\n| 5 | 25 | 125 |\n",
    ),
    (
        "prose",
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    ),
];

/// One line of `inferno bench --speculative --json`.
#[derive(Serialize, Debug, Clone)]
pub struct SpeculativeRow {
    pub model: String,
    pub kernels: String,
    pub threads: usize,
    pub workload: String,
    /// Tokens of the reply (the same with and without speculation).
    pub tokens: usize,
    pub plain_tok_s: f64,
    pub speculative_tok_s: f64,
    /// speculative_tok_s / plain_tok_s, from the medians of the same run.
    pub speedup: f64,
    pub acceptance: f64,
    pub tokens_per_forward: f64,
}

/// One line of the batched-forward cost table.
#[derive(Serialize, Debug, Clone)]
pub struct BatchCostRow {
    pub threads: usize,
    pub k: usize,
    /// One forward of k tokens.
    pub batch_ms: f64,
    /// k forwards of one token.
    pub single_ms: f64,
    /// batch_ms / single_ms: below 1 is what speculation saves per accepted token.
    pub ratio: f64,
}

pub fn bench(engine: &Engine, model: &str, threads: &[usize], args: &BenchArgs) -> Result<()> {
    if args.decode_tokens == 0 {
        bail!("--decode-tokens must be at least 1");
    }
    let spec = SpeculativeOptions {
        enabled: true,
        draft_max: args.draft_max,
        ..SpeculativeOptions::default()
    };
    spec.validate()?;
    eprintln!(
        "plain vs speculative (draft-max {}, ngram {}..{}), greedy, up to {} tokens per reply",
        spec.draft_max, spec.ngram_min, spec.ngram_max, args.decode_tokens
    );
    let mut rows = Vec::new();
    let mut costs = Vec::new();
    for &t in threads {
        let pool = Arc::new(pool::start(t)?);
        let engine = engine.with_kernels(engine.kernels(), pool);
        for &(workload, user) in WORKLOADS {
            let prompt = match user.strip_prefix("RAW") {
                Some(raw) => engine.encode_prompt(raw)?,
                None => engine.encode_chat(&[ChatMessage::new("user", user)], true)?,
            };
            let mut plain = Vec::new();
            let mut fast = Vec::new();
            let mut stats = SpeculativeStats::default();
            let mut tokens = 0;
            // Trial 0 is the warm-up; plain and speculative alternate so drift hits both.
            for trial in 0..=args.trials {
                let (p, want) = reply(
                    &engine,
                    &prompt,
                    args.decode_tokens,
                    &SpeculativeOptions::off(),
                )?;
                let (s, got) = reply(&engine, &prompt, args.decode_tokens, &spec)?;
                if got.0 != want.0 {
                    bail!("{workload}: speculative decoding changed the reply (a bug: please report it)");
                }
                if trial > 0 {
                    plain.push(p);
                    fast.push(s);
                }
                tokens = want.0.len();
                stats = got.1;
            }
            let plain_tok_s = rate(tokens, median(&mut plain).as_secs_f64());
            let speculative_tok_s = rate(tokens, median(&mut fast).as_secs_f64());
            let row = SpeculativeRow {
                model: model.to_string(),
                kernels: engine.kernels().name.to_string(),
                threads: t,
                workload: workload.to_string(),
                tokens,
                plain_tok_s,
                speculative_tok_s,
                speedup: speculative_tok_s / plain_tok_s.max(1e-9),
                acceptance: stats.acceptance(),
                tokens_per_forward: stats.tokens_per_forward(),
            };
            eprintln!(
                "  threads {t} {workload}: {tokens} tokens, plain {plain_tok_s:.1} tok/s, speculative {speculative_tok_s:.1} tok/s = {:.2}x ({:.0}% accepted, {:.2} tokens/forward)",
                row.speedup,
                100.0 * row.acceptance,
                row.tokens_per_forward
            );
            if args.json {
                println!("{}", serde_json::to_string(&row)?);
            }
            rows.push(row);
        }
        for k in [1, 2, 4, 8] {
            let row = batch_cost(&engine, t, k, args.trials)?;
            eprintln!(
                "  threads {t}: a forward of {k} tokens costs {:.2}x {k} single-token forwards",
                row.ratio
            );
            if args.json {
                println!("{}", serde_json::to_string(&row)?);
            }
            costs.push(row);
        }
    }
    print_tables(&rows, &costs, args.json);
    Ok(())
}

/// Times one greedy reply; returns the time and (tokens, stats).
fn reply(
    engine: &Engine,
    prompt: &[u32],
    max_tokens: usize,
    speculative: &SpeculativeOptions,
) -> Result<(Duration, (Vec<u32>, SpeculativeStats))> {
    let mut session = engine.new_session();
    prefill(&mut session, prompt)?;
    let options = GenerateOptions {
        max_tokens,
        speculative: speculative.clone(),
        ..GenerateOptions::greedy()
    };
    let mut generator = Generator::new(&options)?;
    let t0 = Instant::now();
    generator.run(&mut session, &mut |_| true)?;
    let elapsed = t0.elapsed();
    let (generated, _) = generator.finish();
    Ok((elapsed, (generated.tokens, generated.stats)))
}

/// One forward of k tokens against k forwards of one, after a 64-token context, median of
/// trials (each a fresh cut of the same session, so the cache is warm and equal).
fn batch_cost(engine: &Engine, threads: usize, k: usize, trials: usize) -> Result<BatchCostRow> {
    let vocab = engine.config().vocab_size as u32;
    let context: Vec<u32> = (0..64u32)
        .map(|i| ((i * 2654435761u32) >> 8) % vocab)
        .collect();
    let tokens: Vec<u32> = (0..k as u32).map(|i| (i * 40503 + 17) % vocab).collect();
    let mut session = engine.new_session();
    session.prefill(&context).context("batch cost prefill")?;
    let mut batch = Vec::new();
    let mut single = Vec::new();
    for trial in 0..=trials.max(3) {
        session.truncate(context.len());
        let t0 = Instant::now();
        session.append_scored(&tokens)?;
        let b = t0.elapsed();
        session.truncate(context.len());
        let t1 = Instant::now();
        for &t in &tokens {
            session.append(&[t])?;
        }
        let s = t1.elapsed();
        if trial > 0 {
            batch.push(b);
            single.push(s);
        }
    }
    let batch_ms = median(&mut batch).as_secs_f64() * 1e3;
    let single_ms = median(&mut single).as_secs_f64() * 1e3;
    Ok(BatchCostRow {
        threads,
        k,
        batch_ms,
        single_ms,
        ratio: batch_ms / single_ms.max(1e-9),
    })
}

fn print_tables(rows: &[SpeculativeRow], costs: &[BatchCostRow], to_stderr: bool) {
    let mut out = String::new();
    out.push_str("| threads | workload | tokens | plain tok/s | speculative tok/s | speedup | accepted | tokens/forward |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2}x | {:.0}% | {:.2} |\n",
            r.threads,
            r.workload,
            r.tokens,
            r.plain_tok_s,
            r.speculative_tok_s,
            r.speedup,
            100.0 * r.acceptance,
            r.tokens_per_forward
        ));
    }
    out.push_str("\n| threads | k | one forward of k ms | k forwards of 1 ms | ratio |\n|---|---|---|---|---|\n");
    for c in costs {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.2} |\n",
            c.threads, c.k, c.batch_ms, c.single_ms, c.ratio
        ));
    }
    if to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
}
