//! `inferno bench`: prefill and greedy-decode speed per (threads, prompt length), the median of
//! several trials after a warm-up, with decode bytes/token set against a measured memory read
//! bandwidth (ARCHITECTURE.md section 7). Prompts are generated prose, different for every trial.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::memory::{self, Buf};
use inferno_core::model::STREAM_PREFETCH;
use inferno_core::parallel::Parallel;
use inferno_core::sampler::{Sampler, SamplerConfig};
use serde::Serialize;

mod profile;
mod speculative;

use crate::synthetic::SplitMix64;
use crate::{load, pool};

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// GGUF file or Hugging Face directory [default: the fetched SmolLM2-135M-Instruct].
    #[arg(long, short)]
    pub model: Option<PathBuf>,
    /// Thread counts to measure, comma-separated [default: 1 and the default thread count].
    #[arg(long, short, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Prompt lengths in tokens, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [50, 500, 1500])]
    pub prompt_lengths: Vec<usize>,
    /// Timed trials per (threads, prompt length), after one warm-up; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// Tokens to decode greedily after each prompt.
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
    /// One JSON object per line on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Plain against speculative decoding on three workloads, and the cost of batched
    /// forwards, instead of the prefill/decode table (--decode-tokens caps each reply).
    #[arg(long)]
    pub speculative: bool,
    /// Where each decoded token's time goes (each matmul, attention, quantization, norms, ...,
    /// and the wait at the pool's barriers), per thread count and prompt length, instead of the
    /// prefill/decode table.
    #[arg(long, conflicts_with = "speculative")]
    pub profile: bool,
    /// Sequences decoded together for --profile (comma-separated; one forward per step over
    /// one token of each, as `inferno serve` batches conversations).
    #[arg(long, value_delimiter = ',', default_values_t = [1], requires = "profile")]
    pub batch: Vec<usize>,
    /// Most tokens drafted per step, for --speculative.
    #[arg(long, default_value_t = inferno_core::speculative::SpeculativeOptions::default().draft_max)]
    pub draft_max: usize,
}

/// One line of `inferno bench --json`.
#[derive(Serialize, Debug, Clone)]
pub struct BenchRow {
    pub model: String,
    pub threads: usize,
    pub kernels: String,
    pub prompt_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tokens: usize,
    pub decode_tok_s: f64,
    /// Weight bytes read per decoded token times decode tokens/s.
    pub decode_gb_s: f64,
    /// This machine's read bandwidth with `threads` threads (the decode ceiling): the fastest
    /// of the probe's ways ([`ReadBandwidth::fastest`]).
    pub bandwidth_gb_s: f64,
    /// The probe's plain sum alone (the CPU's own prefetchers), GB/s.
    pub plain_read_gb_s: f64,
    /// decode_gb_s as a share of bandwidth_gb_s.
    pub bandwidth_pct: f64,
    /// MB of f16 KV cache a decode step reads halfway through the timed steps (every layer's
    /// K and V rows it sees), besides the weights.
    pub cache_mb_per_token: f64,
    /// Like bandwidth_pct, with those cache bytes counted too.
    pub bandwidth_pct_with_cache: f64,
    /// The check on bandwidth_gb_s: a memcpy's read + write GB/s on the same threads.
    pub copy_gb_s: f64,
    /// The process's peak resident memory once the model was loaded (before the 1 GiB
    /// bandwidth probe), MB; 0 where unknown.
    pub peak_rss_mb: f64,
    /// Of that, MB in 2 MiB pages (inferno_core::memory; `INFERNO_HUGE_PAGES=0` turns them
    /// off); 0 where unknown.
    pub huge_pages_mb: f64,
    /// Bytes ahead that one-token matmuls prefetched weights in 2 MiB pages (the load-time
    /// tuner's choice for this machine and thread count; 0: the CPU's own prefetchers only).
    pub stream_prefetch_bytes: usize,
    /// Rows per one-token matmul work item when every shape has the same (the load-time tuner
    /// times sizes streaming from memory on several threads); 0 where not: sized per matrix
    /// shape, or on 1 thread, where each one-token matmul reads its matrix whole in one item.
    pub decode_rows_per_item: usize,
}

/// The process's peak resident set (VmHWM) in bytes, where the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn bench(args: &BenchArgs) -> Result<()> {
    let path = args.model.clone().unwrap_or_else(load::default_model_path);
    let mut threads = args.threads.clone();
    if threads.is_empty() {
        threads = vec![1, pool::default_threads()];
        threads.dedup();
    }
    if threads.iter().any(|&t| t == 0 || t > 1024) {
        bail!("--threads must be between 1 and 1024");
    }
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    if args.prompt_lengths.contains(&0) {
        bail!("--prompt-lengths must be at least 1");
    }
    if args.batch.iter().any(|&b| b == 0 || b > 256) {
        bail!("--batch must be between 1 and 256");
    }
    let engine = load::load_engine(&path, EngineOptions::default())?;
    let peak_rss_mb = peak_rss_bytes().unwrap_or(0) as f64 / 1e6;
    // Nothing else big is allocated yet: this is the weights' share in 2 MiB pages.
    let huge_pages_mb = memory::huge_page_bytes().unwrap_or(0) as f64 / 1e6;
    eprintln!(
        "peak resident memory after load: {peak_rss_mb:.1} MB (weights {:.1} MB, {huge_pages_mb:.1} MB in 2 MiB pages)",
        engine.weights().byte_size() as f64 / 1e6
    );
    let context = engine.config().context_length;
    if let Some(&longest) = args.prompt_lengths.iter().max() {
        if longest + args.decode_tokens > context {
            bail!(
                "a {longest}-token prompt plus {} decoded tokens exceeds the model's context of {context}",
                args.decode_tokens
            );
        }
    }
    let model = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let bytes_per_token = engine.weights().bytes_per_token();
    eprintln!(
        "model {model} | kernels {} (one-token forwards: {}) | weights read per token {:.1} MB | {} trials after a warm-up, median",
        engine.kernels().name,
        engine.decode_kernels().name,
        bytes_per_token as f64 / 1e6,
        args.trials
    );
    // Other processes on the cores skew every figure; say how busy the machine was.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        eprintln!("load average at start: {}", load.trim());
    }
    if args.speculative {
        return speculative::bench(&engine, &model, &threads, args);
    }
    if args.profile {
        return profile::bench(&engine, &model, &threads, args);
    }
    let prompts = Prompts::new(&engine, args)?;

    let mut rows = Vec::new();
    for &t in &threads {
        let pool = Arc::new(pool::start(t)?);
        let read = read_bandwidth_gb_s(pool.as_ref())
            .context("cannot measure the memory read bandwidth")?;
        let bandwidth_gb_s = read.fastest();
        let copy_gb_s = copy_bandwidth_gb_s(pool.as_ref())
            .context("cannot measure the memory copy bandwidth")?;
        let ways = |f: &dyn Fn(usize, f64) -> String| {
            let each = STREAM_PREFETCH.iter().zip(read.by_ahead);
            each.map(|(&a, g)| f(a, g)).collect::<Vec<_>>().join(" / ")
        };
        eprintln!(
            "threads {t}: memory read bandwidth {bandwidth_gb_s:.1} GB/s (summing 1 GiB, best of 3 \
             rounds; lines fetched {} ahead: {} GB/s); check: copying 512 MiB moves {copy_gb_s:.1} \
             GB/s (read + write)",
            ways(&|a, _| if a == 0 { "0".into() } else { format!("{}", a / 1024) }) + " KiB",
            ways(&|_, g| format!("{g:.1}")),
        );
        let engine = engine.with_kernels(engine.kernels(), pool);
        let stream_prefetch_bytes = inferno_core::kernels::stream_prefetch();
        let whole = inferno_core::model::Tuning::whole_matrices(t, 1);
        let decode_rows_per_item = engine.tuning().uniform_decode_rows(t).unwrap_or(0);
        eprintln!(
            "threads {t}: one-token matmuls prefetch weights in 2 MiB pages {}, in work items {} (timed at load)",
            match stream_prefetch_bytes {
                0 => "not at all".to_string(),
                b => format!("{} KiB ahead", b / 1024),
            },
            match (whole, decode_rows_per_item) {
                (true, _) => "of whole matrices".to_string(),
                (false, 0) => "sized per matrix shape".to_string(),
                (false, r) => format!("of {r} rows"),
            }
        );
        for (p, &prompt_tokens) in args.prompt_lengths.iter().enumerate() {
            let mut prefill = Vec::new();
            let mut decode = Vec::new();
            for trial in 0..=args.trials {
                let (pre, dec) = run_trial(&engine, prompts.get(p, trial), args.decode_tokens)?;
                // Trial 0 is the warm-up: caches, page faults, CPU clocks.
                if trial > 0 {
                    prefill.push(pre);
                    decode.push(dec);
                }
            }
            let prefill_s = median(&mut prefill).as_secs_f64();
            let decode_s = median(&mut decode).as_secs_f64();
            let decode_tok_s = rate(args.decode_tokens, decode_s);
            let cache_bytes = engine
                .config()
                .cache_bytes_read(prompt_tokens + args.decode_tokens / 2);
            let pct =
                |bytes: usize| 100.0 * bytes as f64 * decode_tok_s / 1e9 / bandwidth_gb_s.max(1e-9);
            let row = BenchRow {
                model: model.clone(),
                threads: t,
                kernels: engine.kernels().name.to_string(),
                prompt_tokens,
                prefill_ms: prefill_s * 1e3,
                prefill_tok_s: rate(prompt_tokens, prefill_s),
                decode_tokens: args.decode_tokens,
                decode_tok_s,
                decode_gb_s: bytes_per_token as f64 * decode_tok_s / 1e9,
                bandwidth_gb_s,
                plain_read_gb_s: read.plain(),
                bandwidth_pct: pct(bytes_per_token),
                cache_mb_per_token: cache_bytes as f64 / 1e6,
                bandwidth_pct_with_cache: pct(bytes_per_token + cache_bytes),
                copy_gb_s,
                peak_rss_mb,
                huge_pages_mb,
                stream_prefetch_bytes,
                decode_rows_per_item,
            };
            if args.json {
                println!("{}", serde_json::to_string(&row)?);
            }
            eprintln!(
                "  threads {t} prompt {prompt_tokens}: prefill {:.1} ms = {:.1} tok/s | decode {:.1} tok/s",
                row.prefill_ms, row.prefill_tok_s, row.decode_tok_s
            );
            rows.push(row);
        }
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        eprintln!("load average at end: {}", load.trim());
    }
    print_table(&rows, args.json);
    Ok(())
}

/// Times a prefill of `prompt` in a fresh session, then `decode_tokens` greedy steps.
fn run_trial(
    engine: &Engine,
    prompt: &[u32],
    decode_tokens: usize,
) -> Result<(Duration, Duration)> {
    let mut session = engine.new_session();
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    let t0 = Instant::now();
    session.append(prompt)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    // Every step decodes, end-of-generation tokens included, so each trial times the same work.
    for _ in 0..decode_tokens {
        let token = sampler.sample(session.logits()?, &[]);
        session.append(&[token])?;
    }
    Ok((prefill, t1.elapsed()))
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn rate(tokens: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        0.0
    }
}

fn print_table(rows: &[BenchRow], to_stderr: bool) {
    let mut out = String::new();
    out.push_str("| threads | prompt | prefill ms | prefill tok/s | decode tok/s | decode GB/s | bandwidth GB/s | % of bandwidth | cache MB per token | % with cache | peak RSS after load MB |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.0}% | {:.1} | {:.0}% | {:.0} |\n",
            r.threads,
            r.prompt_tokens,
            r.prefill_ms,
            r.prefill_tok_s,
            r.decode_tok_s,
            r.decode_gb_s,
            r.bandwidth_gb_s,
            r.bandwidth_pct,
            r.cache_mb_per_token,
            r.bandwidth_pct_with_cache,
            r.peak_rss_mb,
        ));
    }
    if to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
}

/// Sums a 1 GiB array with every thread of `pool` (many slices, taken in turn), each way of
/// reading ([`ReadBandwidth`]) once per round, and returns each way's best of 3 rounds in GB/s.
/// The sum is what a decode step does to the weights, and
/// the array lives in the same kind of memory as they do (2 MiB pages where the OS gives them,
/// inferno_core::memory), so the percentage compares like with like.
pub fn read_bandwidth_gb_s(pool: &dyn Parallel) -> Result<ReadBandwidth> {
    const BYTES: usize = 1 << 30;
    // Written, not just allocated, so that every page is really mapped before timing.
    let data = Buf::try_filled(1u64, BYTES / 8).context("cannot allocate 1 GiB")?;
    // Many parts, not one per thread: a worker that was asleep when the job began still gets its
    // share (with one part each, the caller could read both halves before the worker woke).
    let parts = pool.threads() * 32;
    let part_len = data.len().div_ceil(parts);
    let mut best = [f64::INFINITY; STREAM_PREFETCH.len()];
    // The ways alternated round by round, so a noisy neighbour hurts them alike.
    for _ in 0..3 {
        for (&ahead, best) in STREAM_PREFETCH.iter().zip(&mut best) {
            let total = std::sync::atomic::AtomicU64::new(0);
            let t0 = Instant::now();
            pool.run(parts, &|i| {
                let part = data.chunks(part_len).nth(i).unwrap_or_default();
                let sum = inferno_core::kernels::sum_ahead(part, ahead);
                total.fetch_add(sum, std::sync::atomic::Ordering::Relaxed);
            });
            *best = best.min(t0.elapsed().as_secs_f64());
            std::hint::black_box(total.into_inner());
        }
    }
    Ok(ReadBandwidth {
        by_ahead: best.map(|s| BYTES as f64 / s / 1e9),
    })
}

/// What [`read_bandwidth_gb_s`] measured, one way of reading per prefetch distance the
/// load-time tuner picks from for the matmuls (`STREAM_PREFETCH`, `Tuning::timed_streaming`:
/// the CPU's own prefetchers alone, then each line fetched that many bytes ahead), so the roof
/// covers every way the matmuls may read (a Zen 3 core decoded the TinyLlama-shape Q4_0 file at
/// 104-106% of a plain sum's figure with the tuned 16 KiB; measured later, the plain sum was the
/// fastest way on that machine).
#[derive(Debug, Clone, Copy)]
pub struct ReadBandwidth {
    /// GB/s of each way of `STREAM_PREFETCH`, in its order (best of 3 rounds).
    pub by_ahead: [f64; STREAM_PREFETCH.len()],
}

// The plain sum is the first way ([`ReadBandwidth::plain`]).
const _: () = assert!(STREAM_PREFETCH[0] == 0);

impl ReadBandwidth {
    /// The fastest way, GB/s: the roof decode is measured against.
    pub fn fastest(&self) -> f64 {
        self.by_ahead.iter().fold(0.0, |m: f64, &g| m.max(g))
    }

    /// The plain sum alone (the CPU's own prefetchers), GB/s.
    pub fn plain(&self) -> f64 {
        self.by_ahead[0]
    }
}

/// A second measure of the same memory, to check the first: `copy_from_slice` (memcpy) of 512
/// MiB between two buffers, split over the threads; bytes read plus bytes written per second,
/// best of 3. A copy also writes, so it lands near or under the read figure, never far above
/// it; a read figure far above this would be a broken probe.
pub fn copy_bandwidth_gb_s(pool: &dyn Parallel) -> Result<f64> {
    const BYTES: usize = 1 << 29;
    let from = Buf::try_filled(3u64, BYTES / 8).context("cannot allocate 2 x 512 MiB")?;
    let mut to = Buf::try_filled(0u64, BYTES / 8).context("cannot allocate 2 x 512 MiB")?;
    let parts = pool.threads() * 32;
    let part_len = from.len().div_ceil(parts);
    let chunks: Vec<std::sync::Mutex<&mut [u64]>> =
        to.chunks_mut(part_len).map(std::sync::Mutex::new).collect();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        pool.run(chunks.len(), &|i| {
            let source = from.chunks(part_len).nth(i).unwrap_or_default();
            if let Ok(mut target) = chunks[i].lock() {
                target.copy_from_slice(source);
            }
        });
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&chunks);
    Ok(2.0 * BYTES as f64 / best / 1e9)
}

/// Prompts of exact token lengths built from generated prose: every (length, trial) pair starts
/// from its own seed, so no two prompts share a prefix and nothing can be reused between trials.
struct Prompts {
    /// [prompt length index][trial] token ids.
    prompts: Vec<Vec<Vec<u32>>>,
}

impl Prompts {
    fn new(engine: &Engine, args: &BenchArgs) -> Result<Prompts> {
        let vocab = engine.config().vocab_size as u32;
        let mut prompts = Vec::new();
        for (p, &len) in args.prompt_lengths.iter().enumerate() {
            let mut trials = Vec::new();
            for trial in 0..=args.trials {
                let mut rng = SplitMix64((p as u64) << 32 | trial as u64);
                let mut text = String::new();
                let mut ids = Vec::new();
                while ids.len() < len {
                    // About 60 tokens a paragraph: extend, then re-tokenize the whole text.
                    let words = (len - ids.len()).max(8);
                    text.push_str(&paragraph(&mut rng, words));
                    ids = engine.encode_prompt(&text)?;
                }
                ids.truncate(len);
                // A model with a smaller vocabulary than its tokenizer must still accept them.
                trials.push(ids.into_iter().map(|t| t % vocab).collect());
            }
            prompts.push(trials);
        }
        Ok(Prompts { prompts })
    }

    fn get(&self, length_index: usize, trial: usize) -> &[u32] {
        &self.prompts[length_index][trial]
    }
}

const SUBJECTS: &[&str] = &[
    "the old miller",
    "a quiet engineer",
    "the harbour master",
    "my grandmother",
    "the committee",
    "a travelling musician",
    "the village baker",
    "the young botanist",
    "our neighbour",
    "the night watchman",
    "a curious child",
    "the lighthouse keeper",
    "the surveyor",
    "the weaver's apprentice",
    "a retired sailor",
    "the schoolteacher",
    "the clockmaker",
];
const VERBS: &[&str] = &[
    "repaired",
    "described",
    "carried",
    "painted",
    "measured",
    "forgot",
    "discovered",
    "sold",
    "borrowed",
    "studied",
    "counted",
    "buried",
    "polished",
    "questioned",
    "followed",
    "mapped",
];
const ADJECTIVES: &[&str] = &[
    "crooked",
    "silver",
    "enormous",
    "fragile",
    "ancient",
    "muddy",
    "bright",
    "forgotten",
    "narrow",
    "cheerful",
    "heavy",
    "strange",
    "wooden",
    "distant",
    "careful",
    "golden",
];
const OBJECTS: &[&str] = &[
    "bridge",
    "letters",
    "garden",
    "telescope",
    "river",
    "ledger",
    "windmill",
    "orchard",
    "lantern",
    "railway",
    "chapel",
    "violin",
    "map of the coast",
    "harvest",
    "staircase",
    "market square",
];
const PLACES: &[&str] = &[
    "before the storm",
    "after the fair",
    "near the northern pass",
    "during the long winter",
    "beside the canal",
    "under a grey sky",
    "at the edge of town",
    "on the first of May",
    "while the bells rang",
    "in the spring of that year",
    "behind the old mill",
];

/// A paragraph of at least `words` words of plain, varied English.
fn paragraph(rng: &mut SplitMix64, words: usize) -> String {
    let mut out = String::new();
    let mut count = 0;
    while count < words {
        let sentence = format!(
            "{} {} the {} {} {}, and {} {} it too. ",
            rng.pick(SUBJECTS),
            rng.pick(VERBS),
            rng.pick(ADJECTIVES),
            rng.pick(OBJECTS),
            rng.pick(PLACES),
            rng.pick(SUBJECTS),
            rng.pick(VERBS),
        );
        let mut chars = sentence.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
        count += sentence.split_whitespace().count();
    }
    out.push_str("\n\n");
    out
}
