//! `inferno bench --profile`: where a decoded token's time goes, per (threads, context): the
//! wall time of greedy decode steps split into each matmul, attention, activation
//! quantization, norms, RoPE and the cache write, the gate activation and the rest (the
//! forward's own clock, `inferno_core::model::Profile`), and, inside those, the time the calling
//! thread waited at the pool's barriers for the other threads. With `--batch B`, B sequences
//! decode together (one forward per step over one token of each, as `inferno serve` runs
//! them): the split is per step, and the aggregate tokens/s is what batching buys. The same
//! split of the prompts' prefill (per prompt token) follows in a second table.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use inferno_core::engine::Engine;
use inferno_core::model::{LogitsFor, Part, Scratch};
use inferno_core::parallel::Parallel;
use inferno_core::sampler::{Sampler, SamplerConfig};
use inferno_core::session::{append_batch, Append};
use serde::Serialize;

use super::{BenchArgs, Prompts};
use crate::pool;

/// One line of `inferno bench --profile --json`: milliseconds per decoded token (phase
/// "decode") or per prompt token (phase "prefill": the prompts of the same trials).
#[derive(Serialize, Debug, Clone)]
pub struct ProfileRow {
    pub phase: &'static str,
    pub model: String,
    pub threads: usize,
    pub kernels: String,
    pub context: usize,
    /// Sequences decoded together.
    pub batch: usize,
    pub decode_tokens: usize,
    /// Per step (one token of each sequence), or per prompt token.
    pub total_ms: f64,
    /// Tokens per second over all the sequences (prompt tokens per second for prefill).
    pub aggregate_tok_s: f64,
    /// (part, ms per token), in the forward's order.
    pub parts: Vec<(String, f64)>,
    /// Of the total, the caller's wait for other threads at the end of parallel calls.
    pub barrier_wait_ms: f64,
    /// Outside the forward: sampling and the loop (prefill: the session's own work).
    pub outside_forward_ms: f64,
}

pub fn bench(engine: &Engine, model: &str, threads: &[usize], args: &BenchArgs) -> Result<()> {
    let prompts = Prompts::new(engine, args)?;
    let (mut rows, mut prefill_rows) = (Vec::new(), Vec::new());
    for &t in threads {
        let pool = Arc::new(pool::start(t)?);
        let engine = engine
            .with_kernels(engine.kernels(), pool.clone())
            .with_profile();
        let profile = engine.profile().expect("a profiling engine");
        for (p, &context) in args.prompt_lengths.iter().enumerate() {
            for &batch in &args.batch {
                let mut parts = [0u64; Part::ALL.len()];
                let (mut total, mut waited) = (0f64, 0u64);
                let mut prefill = Measured::default();
                let mut scratch = Scratch::default();
                for trial in 0..=args.trials {
                    // Each sequence its own prompt (the trials' prompts, in turn).
                    let mut sessions = Vec::with_capacity(batch);
                    profile.reset();
                    let (prefill_waited, prefill_from) = (pool.waited_ns(), Instant::now());
                    for b in 0..batch {
                        let mut session = engine.new_session();
                        let prompt = prompts.get(p, (trial + b) % (args.trials + 1));
                        session.append(prompt)?;
                        sessions.push(session);
                        if trial > 0 {
                            prefill.tokens += prompt.len();
                        }
                    }
                    if trial > 0 {
                        let waited = pool.waited_ns() - prefill_waited;
                        prefill.add(prefill_from, waited, profile.snapshot());
                    }
                    let mut sampler = Sampler::new(SamplerConfig::greedy());
                    profile.reset();
                    let waited_before = pool.waited_ns();
                    let t0 = Instant::now();
                    for _ in 0..args.decode_tokens {
                        let next: Vec<[u32; 1]> = sessions
                            .iter_mut()
                            .map(|s| s.logits().map(|l| [sampler.sample(l, &[])]))
                            .collect::<inferno_core::Result<_>>()?;
                        let mut parts: Vec<Append> = sessions
                            .iter_mut()
                            .zip(&next)
                            .map(|(session, token)| Append {
                                session,
                                tokens: token,
                                want: LogitsFor::Last,
                            })
                            .collect();
                        append_batch(&mut scratch, &mut parts)?;
                    }
                    // Trial 0 is the warm-up.
                    if trial > 0 {
                        total += t0.elapsed().as_secs_f64();
                        waited += pool.waited_ns() - waited_before;
                        for (sum, ns) in parts.iter_mut().zip(profile.snapshot()) {
                            *sum += ns;
                        }
                    }
                }
                let steps = (args.decode_tokens * args.trials).max(1) as f64;
                let ms = |ns: u64| ns as f64 / 1e6 / steps;
                let in_forward: u64 = parts.iter().sum();
                let total_ms = total * 1e3 / steps;
                let row = ProfileRow {
                    phase: "decode",
                    model: model.to_string(),
                    threads: t,
                    kernels: engine.kernels().name.to_string(),
                    context,
                    batch,
                    decode_tokens: args.decode_tokens,
                    total_ms,
                    aggregate_tok_s: batch as f64 * 1e3 / total_ms.max(1e-12),
                    parts: Part::ALL
                        .iter()
                        .zip(parts)
                        .map(|(part, ns)| (part.name().to_string(), ms(ns)))
                        .collect(),
                    barrier_wait_ms: ms(waited),
                    outside_forward_ms: (total_ms - ms(in_forward)).max(0.0),
                };
                if args.json {
                    println!("{}", serde_json::to_string(&row)?);
                }
                // Milliseconds per prompt token.
                let prompt_tokens = prefill.tokens.max(1) as f64;
                let per_token = |ns: u64| ns as f64 / 1e6 / prompt_tokens;
                let total_ms = prefill.seconds * 1e3 / prompt_tokens;
                let in_forward: u64 = prefill.parts.iter().sum();
                prefill_rows.push(ProfileRow {
                    phase: "prefill",
                    total_ms,
                    aggregate_tok_s: 1e3 / total_ms.max(1e-12),
                    parts: Part::ALL
                        .iter()
                        .zip(prefill.parts)
                        .map(|(part, ns)| (part.name().to_string(), per_token(ns)))
                        .collect(),
                    barrier_wait_ms: per_token(prefill.waited_ns),
                    outside_forward_ms: (total_ms - per_token(in_forward)).max(0.0),
                    ..row.clone()
                });
                rows.push(row);
            }
        }
    }
    if args.json {
        for row in &prefill_rows {
            println!("{}", serde_json::to_string(row)?);
        }
    }
    print_table(&rows, "ms per decode step", args.json);
    print_table(&prefill_rows, "ms per prompt token (prefill)", args.json);
    Ok(())
}

/// Prefill's share of the trials: wall time, the pool's barrier waits and the forward's parts.
#[derive(Default)]
struct Measured {
    tokens: usize,
    seconds: f64,
    waited_ns: u64,
    parts: [u64; Part::ALL.len()],
}

impl Measured {
    fn add(&mut self, since: Instant, waited_ns: u64, parts: [u64; Part::ALL.len()]) {
        self.seconds += since.elapsed().as_secs_f64();
        self.waited_ns += waited_ns;
        for (sum, ns) in self.parts.iter_mut().zip(parts) {
            *sum += ns;
        }
    }
}

fn print_table(rows: &[ProfileRow], title: &str, to_stderr: bool) {
    let mut out = format!("| {title} |");
    for r in rows {
        let batch = if r.batch > 1 {
            format!(", batch {}", r.batch)
        } else {
            String::new()
        };
        let at = if r.phase == "prefill" {
            "prompt"
        } else {
            "ctx"
        };
        out.push_str(&format!(" {}t, {at} {}{batch} |", r.threads, r.context));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(rows.len()));
    out.push('\n');
    let mut line = |name: &str, value: &dyn Fn(&ProfileRow) -> f64| {
        out.push_str(&format!("| {name} |"));
        for r in rows {
            let v = value(r);
            out.push_str(&format!(
                " {v:.3} ({:.0}%) |",
                100.0 * v / r.total_ms.max(1e-12)
            ));
        }
        out.push('\n');
    };
    line("**total**", &|r| r.total_ms);
    let matmuls = |r: &ProfileRow| -> f64 {
        r.parts
            .iter()
            .filter(|(n, _)| n.starts_with("matmul"))
            .map(|(_, v)| v)
            .sum()
    };
    line("all matmuls", &matmuls);
    for (i, part) in Part::ALL.iter().enumerate() {
        line(part.name(), &|r| r.parts[i].1);
    }
    line("sampling and the loop", &|r| r.outside_forward_ms);
    line("(of the above: waiting at barriers)", &|r| {
        r.barrier_wait_ms
    });
    out.push('\n');
    if to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
}
