//! How work is cut for threads ([`Tuning`]): rows per matmul work item and tokens per attention
//! work item, and the backend for one-token forwards, fixed or timed at load
//! ([`Tuning::autotune`], [`Tuning::pick_decode_kernels`]). No choice changes a result (rules 7
//! and 1: every backend gives the reference's bits).

#[cfg(not(target_arch = "wasm32"))]
use super::forward::{matmul, Activations, Compute};
#[cfg(not(target_arch = "wasm32"))]
use super::Weights;
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
        let x: Vec<f32> = (0..w.cols)
            .map(|i| ((i * 7919 % 255) as f32 - 127.0) / 64.0)
            .collect();
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

    /// Rows per work item for `w` with `n_tokens` tokens.
    pub fn rows_per_item(&self, w: &Matrix, n_tokens: usize) -> usize {
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
                let x: Vec<f32> = (0..n_tokens * w.cols)
                    .map(|i| ((i * 7919 % 255) as f32 - 127.0) / 64.0)
                    .collect();
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
