//! How work is cut for threads ([`Tuning`]): rows per matmul work item and tokens per attention
//! work item, and the backend for one-token forwards, fixed or timed at load
//! ([`Tuning::autotune`], [`Tuning::pick_decode_kernels`]). No choice changes a result (rules 7
//! and 1: every backend gives the reference's bits).

#[cfg(not(target_arch = "wasm32"))]
use super::forward::{matmul, Activations, Compute};
#[cfg(not(target_arch = "wasm32"))]
use super::Weights;
use crate::kernels::tiles::MAX_TOKENS_PER_CALL;
use crate::kernels::{Kernels, Matrix};
#[cfg(not(target_arch = "wasm32"))]
use crate::parallel::Parallel;
use crate::quant::GgmlType;

/// How work is cut for threads: rows per matmul work item (per matrix shape, for one token and
/// for a batch) and tokens per attention work item. No choice changes a result (rule 7), so the
/// fastest is picked at load ([`Tuning::autotune`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// ((type, rows, cols), [rows per work item for 1 token, for a batch]).
    pub matmul_rows: Vec<((GgmlType, usize, usize), [usize; 2])>,
    /// Rows per work item for shapes not listed.
    pub default_rows: [usize; 2],
    /// Tokens per attention work item in a batch.
    pub attention_tokens: usize,
    /// The backend for forwards of one token, when the load-time tuner timed another faster
    /// there than the engine's (AVX-512 is double-pumped on AMD Zen 4: its AVX2 kernels decode
    /// faster while AVX-512 prefills faster). None: the engine's kernels for everything.
    pub decode_kernels: Option<&'static Kernels>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning::fixed(64, 64, 16)
    }
}

/// Rows per matmul work item the tuner tries (whole 8-row tiles).
pub const TUNE_ROWS: [usize; 5] = [16, 32, 64, 128, 256];
/// Tokens of the batch the tuner times.
#[cfg(not(target_arch = "wasm32"))]
const TUNE_BATCH: usize = 16;
/// Prefetch distances (bytes) the tuner tries for one-token matmuls over huge pages, no
/// prefetch first.
pub const STREAM_PREFETCH: [usize; 4] = [0, 4096, 8192, 16384];
/// Weight bytes per timed walk of [`Tuning::timed_streaming`]: four times a 32 MiB L3.
#[cfg(not(target_arch = "wasm32"))]
const STREAM_BYTES: usize = 128 << 20;
/// Walks per candidate: five, as a 5-10 ms walk on a shared machine meets bursts of other load.
#[cfg(not(target_arch = "wasm32"))]
const STREAM_ROUNDS: usize = 5;
/// Rows per one-token work item [`Tuning::timed_streaming`] tries against the per-shape ones.
#[cfg(not(target_arch = "wasm32"))]
const STREAM_ROWS: [usize; 4] = [64, 128, 256, 512];

impl Tuning {
    /// One configuration for every shape (e.g. to check that any configuration gives the same bits).
    pub fn fixed(decode_rows: usize, batch_rows: usize, attention_tokens: usize) -> Tuning {
        Tuning {
            matmul_rows: Vec::new(),
            default_rows: [decode_rows.max(1), batch_rows.max(1)],
            attention_tokens: attention_tokens.max(1),
            decode_kernels: None,
        }
    }

    /// The backend that runs a one-token forward fastest on this machine, timed on layer 0's
    /// largest matrix (a decode step is mostly such matmuls), if it is not `kernels`. Only
    /// backends this host runs, the reference excepted.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn pick_decode_kernels(
        weights: &Weights,
        kernels: &'static Kernels,
        parallel: &dyn Parallel,
    ) -> Option<&'static Kernels> {
        use std::time::Instant;
        let candidates: Vec<&'static Kernels> = Kernels::available()
            .into_iter()
            .filter(|k| k.name != "reference")
            .collect();
        if candidates.len() < 2 {
            return None;
        }
        let layer = weights.layers.first()?;
        let w = layer
            .wqkv
            .matrices
            .iter()
            .chain(&layer.w_gate_up.matrices)
            .chain([&layer.wo, &layer.w_down])
            .max_by_key(|m| m.rows * m.cols)?;
        let x = probe_input(w.cols);
        let mut out = vec![0.0f32; w.rows];
        let tuning = Tuning::default();
        let mut act = Activations::default();
        let mut best: Option<(f64, &'static Kernels)> = None;
        for k in candidates {
            let compute = Compute {
                kernels: k,
                parallel,
                tuning: &tuning,
                profile: None,
            };
            act.set(compute, &x, w.cols, w.cols, [w]);
            let mut time = f64::INFINITY;
            for _ in 0..5 {
                let t0 = Instant::now();
                matmul(compute, w, &act, &mut out, w.rows, 0);
                time = time.min(t0.elapsed().as_secs_f64());
            }
            if best.is_none_or(|(t, _)| time < t) {
                best = Some((time, k));
            }
        }
        best.map(|(_, k)| k).filter(|k| k.name != kernels.name)
    }

    /// This tuning timed streaming from memory, and the prefetch distance for it: one walk
    /// over the layers' quantized matrices in a forward's order, 128 MiB of them (past the L3
    /// cache, so the walk streams from memory as a decode does), built once and timed for both
    /// choices, each by candidates taking turns for five rounds so a drift in the machine's
    /// bandwidth hits all alike; a candidate's median must beat the first's by 3% to win.
    /// `kernels` are those that run one-token forwards. A model under 32 MiB of such matrices,
    /// whose weights stay in cache, keeps this tuning and 0.
    ///
    /// - **Prefetch distance** (one of [`STREAM_PREFETCH`], [`crate::kernels::stream_prefetch`]):
    ///   how far ahead one-token matmuls prefetch weights in 2 MiB pages, no prefetch first.
    ///   The process's setting is left as it was: the caller sets the one returned.
    /// - **Rows per one-token work item** on several threads: this tuning's own (timed per
    ///   matrix, which a decode reads from DRAM but the per-shape timing from L3) first, then 64,
    ///   128, 256 or 512 rows for every shape, walked with the distance just picked. Longer
    ///   items are longer runs of one thread through a matrix, which the CPU's prefetchers and
    ///   ours follow further: TinyLlama-shape Q4_K_M decode after 50 tokens, 2 threads of an AMD
    ///   EPYC Zen 3, avx2, per-shape rows 34.1-39.6 tok/s against 35.9-43.4 at 256 rows (six
    ///   alternated rounds, 256 ahead in five). One thread reads each matrix in one item, so it
    ///   keeps this tuning.
    ///
    /// About 40 walks, 0.2-0.4 s on 2 vCPUs at 15-35 GB/s.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn timed_streaming(
        self,
        weights: &Weights,
        kernels: &'static Kernels,
        parallel: &dyn Parallel,
    ) -> (Tuning, usize) {
        use crate::kernels::{set_stream_prefetch, stream_prefetch};
        // What there is to time: the distance where kernels prefetch (x86-64), the rows where
        // one-token matrices are split.
        let distance_applies = cfg!(target_arch = "x86_64");
        let rows_apply = !Tuning::whole_matrices(parallel.threads(), 1);
        if kernels.name == "reference" || !(distance_applies || rows_apply) {
            return (self, 0);
        }
        let Some(mut walk) = StreamWalk::new(weights, kernels, parallel) else {
            return (self, 0);
        };
        let before = stream_prefetch();
        let mut distance = 0;
        if distance_applies {
            let best = walk.fastest(STREAM_PREFETCH.len(), |c| {
                set_stream_prefetch(STREAM_PREFETCH[c]);
                &self
            });
            distance = STREAM_PREFETCH[best];
        }
        let mut tuning = self;
        if rows_apply {
            set_stream_prefetch(distance);
            let mut candidates = vec![tuning.clone()];
            candidates.extend(
                STREAM_ROWS
                    .iter()
                    .map(|&rows| tuning.with_decode_rows(rows)),
            );
            let best = walk.fastest(candidates.len(), |c| &candidates[c]);
            tuning = candidates.swap_remove(best);
        }
        set_stream_prefetch(before);
        (tuning, distance)
    }

    /// The rows per one-token work item on `threads` threads, if every shape has the same;
    /// None where they differ, or where each matrix is one item ([`Tuning::whole_matrices`]).
    pub fn uniform_decode_rows(&self, threads: usize) -> Option<usize> {
        let rows = self.default_rows[0];
        let uniform = self.matmul_rows.iter().all(|(_, r)| r[0] == rows);
        (uniform && !Tuning::whole_matrices(threads, 1)).then_some(rows)
    }

    /// This tuning with `rows` per one-token work item for every shape.
    pub fn with_decode_rows(&self, rows: usize) -> Tuning {
        let mut tuning = self.clone();
        tuning.default_rows[0] = rows.max(1);
        for (_, r) in &mut tuning.matmul_rows {
            r[0] = rows.max(1);
        }
        tuning
    }

    /// Whether a matmul of `n_tokens` tokens on `threads` threads takes each matrix whole as
    /// one work item: one thread, and tokens that fit one kernel call (no split to share out).
    pub fn whole_matrices(threads: usize, n_tokens: usize) -> bool {
        threads == 1 && n_tokens <= MAX_TOKENS_PER_CALL
    }

    /// Rows per work item for `w` with `n_tokens` tokens on `threads` threads.
    pub fn rows_per_item(&self, w: &Matrix, n_tokens: usize, threads: usize) -> usize {
        if Tuning::whole_matrices(threads, n_tokens) {
            return w.rows;
        }
        let slot = usize::from(n_tokens > 1);
        let key = (w.ty(), w.rows, w.cols);
        self.matmul_rows
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(self.default_rows[slot], |(_, r)| r[slot])
    }

    /// Times each of [`TUNE_ROWS`] per matrix shape (layer 0's matrices and the output), for one
    /// token and for a batch, and keeps the fastest; stops at `budget` and keeps the defaults
    /// for what is left. Native only (wasm has no clock here and runs serially).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn autotune(
        weights: &Weights,
        kernels: &Kernels,
        parallel: &dyn Parallel,
        budget: std::time::Duration,
    ) -> Tuning {
        use std::time::Instant;
        let start = Instant::now();
        let mut tuning = Tuning::default();
        let mut shapes: Vec<&Matrix> = Vec::new();
        if let Some(l) = weights.layers.first() {
            shapes.extend(&l.wqkv.matrices);
            shapes.push(&l.wo);
            shapes.extend(&l.w_gate_up.matrices);
            shapes.push(&l.w_down);
        }
        shapes.push(weights.output_matrix());
        let mut act = Activations::default();
        'shapes: for w in shapes {
            let key = (w.ty(), w.rows, w.cols);
            if tuning.matmul_rows.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let mut best = tuning.default_rows;
            for (slot, n_tokens) in [(0, 1), (1, TUNE_BATCH)] {
                let x = probe_input(n_tokens * w.cols);
                let compute = Compute {
                    kernels,
                    parallel,
                    tuning: &tuning,
                    profile: None,
                };
                act.set(compute, &x, w.cols, w.cols, [w]);
                let mut out = vec![0.0f32; n_tokens * w.rows];
                let mut fastest = f64::INFINITY;
                for rows in TUNE_ROWS {
                    if rows > w.rows.next_multiple_of(8) && rows > TUNE_ROWS[0] {
                        break;
                    }
                    let cut = Tuning::fixed(rows, rows, 1);
                    let compute = Compute {
                        kernels,
                        parallel,
                        tuning: &cut,
                        profile: None,
                    };
                    let mut time = f64::INFINITY;
                    for _ in 0..3 {
                        let t0 = Instant::now();
                        matmul(compute, w, &act, &mut out, w.rows, 0);
                        time = time.min(t0.elapsed().as_secs_f64());
                    }
                    if time < fastest {
                        (fastest, best[slot]) = (time, rows);
                    }
                    if start.elapsed() > budget {
                        break 'shapes;
                    }
                }
            }
            tuning.matmul_rows.push((key, best));
        }
        tuning
    }
}

/// One-token matmuls over the layers' quantized matrices in a forward's order, 128 MiB of them
/// ([`STREAM_BYTES`], four times a 32 MiB L3: the walk streams from memory as a decode does),
/// each with an activation row of its width.
#[cfg(not(target_arch = "wasm32"))]
struct StreamWalk<'a> {
    walk: Vec<&'a Matrix>,
    inputs: Vec<(usize, Activations)>,
    out: Vec<f32>,
    kernels: &'static Kernels,
    parallel: &'a dyn Parallel,
}

#[cfg(not(target_arch = "wasm32"))]
impl<'a> StreamWalk<'a> {
    /// None for a model under 32 MiB of such matrices, whose weights stay in cache.
    fn new(
        weights: &'a Weights,
        kernels: &'static Kernels,
        parallel: &'a dyn Parallel,
    ) -> Option<StreamWalk<'a>> {
        let mut walk: Vec<&Matrix> = Vec::new();
        let mut bytes = 0;
        'layers: for l in &weights.layers {
            let matrices = l.wqkv.matrices.iter().chain([&l.wo]);
            for w in matrices.chain(&l.w_gate_up.matrices).chain([&l.w_down]) {
                if w.wants_q8() {
                    walk.push(w);
                    bytes += w.byte_size();
                }
                if bytes >= STREAM_BYTES {
                    break 'layers;
                }
            }
        }
        if bytes < 32 << 20 {
            return None;
        }
        let tuning = Tuning::default();
        let compute = Compute {
            kernels,
            parallel,
            tuning: &tuning,
            profile: None,
        };
        let mut inputs: Vec<(usize, Activations)> = Vec::new();
        for w in &walk {
            if !inputs.iter().any(|(cols, _)| *cols == w.cols) {
                let mut act = Activations::default();
                act.set(compute, &probe_input(w.cols), w.cols, w.cols, [*w]);
                inputs.push((w.cols, act));
            }
        }
        let out = vec![0.0f32; walk.iter().map(|w| w.rows).max().unwrap_or(0)];
        Some(StreamWalk {
            walk,
            inputs,
            out,
            kernels,
            parallel,
        })
    }

    /// Seconds for one walk with `tuning`.
    fn time(&mut self, tuning: &Tuning) -> f64 {
        let compute = Compute {
            kernels: self.kernels,
            parallel: self.parallel,
            tuning,
            profile: None,
        };
        let t0 = std::time::Instant::now();
        for w in &self.walk {
            let act = &self
                .inputs
                .iter()
                .find(|(cols, _)| *cols == w.cols)
                .unwrap()
                .1;
            matmul(compute, w, act, &mut self.out[..w.rows], w.rows, 0);
        }
        t0.elapsed().as_secs_f64()
    }

    /// Which of `n` candidates walks fastest: `set(c)` readies candidate c and returns the
    /// tuning to walk with. After a warm-up walk (page tables, the pool's threads awake) the
    /// candidates take turns for [`STREAM_ROUNDS`] rounds, so a drift in the machine's bandwidth
    /// hits all alike; the fastest median wins if it beats candidate 0's by 3%, else 0 does.
    fn fastest<'t>(&mut self, n: usize, mut set: impl FnMut(usize) -> &'t Tuning) -> usize {
        self.time(set(0));
        let mut times = vec![[0.0f64; STREAM_ROUNDS]; n];
        for round in 0..STREAM_ROUNDS {
            for (c, t) in times.iter_mut().enumerate() {
                t[round] = self.time(set(c));
            }
        }
        let medians: Vec<f64> = times
            .iter_mut()
            .map(|t| {
                t.sort_by(f64::total_cmp);
                t[STREAM_ROUNDS / 2]
            })
            .collect();
        let (best, fastest) = medians
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map_or((0, 0.0), |(c, &t)| (c, t));
        if fastest < 0.97 * medians[0] {
            best
        } else {
            0
        }
    }
}

/// `len` activations for timing runs: deterministic, spread over [-2, 2) so every quantized
/// block gets a non-trivial scale (the values never reach a result anyone reads).
#[cfg(not(target_arch = "wasm32"))]
fn probe_input(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 % 255) as f32 - 127.0) / 64.0)
        .collect()
}
