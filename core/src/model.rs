//! The model: immutable [`Weights`] (shared by every session) and the forward pass over a batch
//! of tokens. One model for every weight format; `forward` reads like the math.

use crate::config::{ModelConfig, RopeScaling};
use crate::formats::{ModelSource, QkRowOrder, RawTensor};
use crate::kernels::tiles::{for_each_tile, MAX_TOKENS_PER_CALL};
use crate::kernels::{Input, Kernels, KvSlice, Matrix};
use crate::parallel::Parallel;
use crate::quant::{f32_to_f16, BlockQ8Act, GgmlType, QK};
use crate::{Error, Result};

/// How weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightDtype {
    /// As stored in the file: quantized matrices multiply Q8 activations (the fast path).
    #[default]
    AsStored,
    /// Everything dequantized to f32 with f32 activations (the verification path).
    F32,
}

/// One transformer block's weights.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,      // (dim)
    pub wqkv: Stacked, // (q_dim + 2*kv_dim, dim): wq, wk, wv; RoPE pairs (i, i + head_dim/2)
    pub bq: Option<Vec<f32>>, // (q_dim), Qwen2
    pub bk: Option<Vec<f32>>, // (kv_dim)
    pub bv: Option<Vec<f32>>, // (kv_dim)
    pub q_norm: Option<Vec<f32>>, // (head_dim), Qwen3
    pub k_norm: Option<Vec<f32>>, // (head_dim)
    pub wo: Matrix,    // (dim, q_dim)
    pub ffn_norm: Vec<f32>, // (dim)
    pub w_gate_up: Stacked, // (2*hidden_dim, dim): w_gate, w_up
    pub w_down: Matrix, // (dim, hidden_dim)
}

/// Matrices whose outputs follow one another in one output row (Q, K, V; gate, up): a single
/// matrix when their types match, so one matmul call and one activation quantization serve
/// them all; otherwise one matrix per part. Rows are independent, so both give the same values.
#[derive(Debug, Clone)]
pub struct Stacked {
    /// One fused matrix, or the parts in order.
    pub matrices: Vec<Matrix>,
    /// Rows of each logical part (e.g. [q_dim, kv_dim, kv_dim]).
    pub part_rows: Vec<usize>,
}

impl Stacked {
    /// Fuses `parts` when their types and columns match.
    pub fn new(parts: Vec<Matrix>) -> Stacked {
        let part_rows = parts.iter().map(|m| m.rows).collect();
        let refs: Vec<&Matrix> = parts.iter().collect();
        let matrices = match Matrix::concat_rows(&refs) {
            Some(fused) if parts.len() > 1 => vec![fused],
            _ => parts,
        };
        Stacked {
            matrices,
            part_rows,
        }
    }

    /// Output values per token (the rows of every part).
    pub fn rows(&self) -> usize {
        self.part_rows.iter().sum()
    }

    /// Part `i` as its own matrix (a copy; e.g. to write a file).
    pub fn part(&self, i: usize) -> Matrix {
        let first: usize = self.part_rows[..i].iter().sum();
        let mut source = Vec::with_capacity(self.part_rows[i]);
        let (mut m, mut r) = (0, first);
        while source.len() < self.part_rows[i] {
            if r >= self.matrices[m].rows {
                r -= self.matrices[m].rows;
                m += 1;
                continue;
            }
            source.push((m, r));
            r += 1;
        }
        let refs: Vec<&Matrix> = self.matrices.iter().collect();
        Matrix::gather_rows(&refs, &source).expect("parts of one stack")
    }

    fn byte_size(&self) -> usize {
        self.matrices.iter().map(|m| m.byte_size()).sum()
    }
}

/// Everything a forward pass reads and nobody writes.
#[derive(Debug, Clone)]
pub struct Weights {
    pub config: ModelConfig,
    /// How the matrices are kept; the KV cache follows (f16 as stored, f32 on the f32 path).
    pub dtype: WeightDtype,
    pub token_embd: Matrix, // (vocab_size, dim)
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // (dim)
    /// `None` when the output projection is the token embedding (tied).
    pub output: Option<Matrix>, // (vocab_size, dim)
    /// RoPE inverse frequencies, scaling applied (head_dim / 2).
    pub inv_freq: Vec<f32>,
}

/// Which positions of a batch get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Only the last token (generation).
    Last,
    /// Every token (scoring, perplexity, speculative verification).
    All,
    /// None (prefill that will be continued).
    None,
}

/// One layer's K or V cache, one row of kv_dim per position.
#[derive(Debug, Clone)]
pub enum CacheData {
    /// f16 bits, rounded to nearest even: the contract's cache.
    F16(Vec<u16>),
    /// f32: the verification path ([`WeightDtype::F32`]) keeps activations unrounded.
    F32(Vec<f32>),
}

impl CacheData {
    fn new(dtype: WeightDtype) -> CacheData {
        match dtype {
            WeightDtype::AsStored => CacheData::F16(Vec::new()),
            WeightDtype::F32 => CacheData::F32(Vec::new()),
        }
    }

    fn resize(&mut self, n: usize) {
        match self {
            CacheData::F16(d) => d.resize(n, 0),
            CacheData::F32(d) => d.resize(n, 0.0),
        }
    }

    /// Stores `x` at element offset `at`.
    fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            CacheData::F16(d) => d[at..at + x.len()]
                .iter_mut()
                .zip(x)
                .for_each(|(d, &s)| *d = f32_to_f16(s)),
            CacheData::F32(d) => d[at..at + x.len()].copy_from_slice(x),
        }
    }

    fn view(&self) -> KvSlice<'_> {
        match self {
            CacheData::F16(d) => KvSlice::F16(d),
            CacheData::F32(d) => KvSlice::F32(d),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            CacheData::F16(d) => d.len() * 2,
            CacheData::F32(d) => d.len() * 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LayerCache {
    pub k: CacheData, // (positions, kv_dim)
    pub v: CacheData, // (positions, kv_dim)
}

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub layers: Vec<LayerCache>,
    /// Positions held (the next token's position).
    pub len: usize,
}

impl KvCache {
    pub fn new(config: &ModelConfig, dtype: WeightDtype) -> KvCache {
        let layer = LayerCache {
            k: CacheData::new(dtype),
            v: CacheData::new(dtype),
        };
        KvCache {
            layers: vec![layer; config.n_layers],
            len: 0,
        }
    }

    /// Drops every position >= n (a length change; the memory is reused).
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Bytes held for positions in use.
    pub fn bytes_used(&self) -> usize {
        self.layers.iter().map(|l| l.k.bytes() + l.v.bytes()).sum()
    }
}

impl Weights {
    /// Builds the weights from any format, checking every shape against the config.
    pub fn load(source: &ModelSource<'_>, dtype: WeightDtype) -> Result<Weights> {
        Self::load_with_progress(source, dtype, &mut |_, _| {})
    }

    /// Like [`Weights::load`], calling `progress(done, total)` after each tensor.
    pub fn load_with_progress(
        source: &ModelSource<'_>,
        dtype: WeightDtype,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Weights> {
        let c = source.config.clone();
        c.validate()?;
        let (dim, hidden, q_dim, kv_dim, hd) =
            (c.dim, c.hidden_dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let total = 3 + c.n_layers * 9;
        let mut done = 0;
        let mut step = |progress: &mut dyn FnMut(usize, usize)| {
            done += 1;
            progress(done.min(total), total);
        };

        let matrix = |name: &str, rows: usize, cols: usize| -> Result<Matrix> {
            let t = tensor(source, name)?;
            check_shape(t, &[rows, cols])?;
            let m = Matrix::from_bytes(name, t.ty, rows, cols, t.data)?;
            if m.wants_q8() && cols % QK != 0 {
                return Err(Error::ShapeMismatch {
                    name: name.into(),
                    expected: vec![rows, cols.next_multiple_of(QK)],
                    got: vec![rows, cols],
                });
            }
            Ok(match dtype {
                WeightDtype::AsStored => m,
                WeightDtype::F32 => m.to_f32(),
            })
        };
        let vector = |name: &str, len: usize| -> Result<Vec<f32>> {
            let t = tensor(source, name)?;
            check_shape(t, &[len])?;
            vector_f32(t)
        };
        let optional_vector = |name: &str, len: usize| -> Result<Option<Vec<f32>>> {
            match source.tensor(name) {
                Some(t) => {
                    check_shape(t, &[len])?;
                    vector_f32(t).map(Some)
                }
                None => Ok(None),
            }
        };
        // GGUF llama files store Q/K rows as RoPE pairs (2i, 2i+1); our kernels rotate the HF pairs
        // (i, i + head_dim/2). Undo the permutation by moving whole rows.
        let unpermute = |m: Matrix, n_heads: usize| -> Matrix {
            match source.qk_row_order {
                QkRowOrder::HalfSplit => m,
                QkRowOrder::Interleaved => m.permute_rows(&interleaved_to_half_split(n_heads, hd)),
            }
        };

        let token_embd = matrix("token_embd.weight", c.vocab_size, dim)?;
        step(progress);
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let name = |s: &str| format!("blk.{l}.{s}");
            let layer = LayerWeights {
                attn_norm: vector(&name("attn_norm.weight"), dim)?,
                wqkv: Stacked::new(vec![
                    unpermute(matrix(&name("attn_q.weight"), q_dim, dim)?, c.n_heads),
                    unpermute(matrix(&name("attn_k.weight"), kv_dim, dim)?, c.n_kv_heads),
                    matrix(&name("attn_v.weight"), kv_dim, dim)?,
                ]),
                bq: optional_vector(&name("attn_q.bias"), q_dim)?,
                bk: optional_vector(&name("attn_k.bias"), kv_dim)?,
                bv: optional_vector(&name("attn_v.bias"), kv_dim)?,
                q_norm: optional_vector(&name("attn_q_norm.weight"), hd)?,
                k_norm: optional_vector(&name("attn_k_norm.weight"), hd)?,
                wo: matrix(&name("attn_output.weight"), dim, q_dim)?,
                ffn_norm: vector(&name("ffn_norm.weight"), dim)?,
                w_gate_up: Stacked::new(vec![
                    matrix(&name("ffn_gate.weight"), hidden, dim)?,
                    matrix(&name("ffn_up.weight"), hidden, dim)?,
                ]),
                w_down: matrix(&name("ffn_down.weight"), dim, hidden)?,
            };
            if source.qk_row_order == QkRowOrder::Interleaved
                && (layer.bq.is_some() || layer.bk.is_some())
            {
                return Err(Error::format(
                    "model",
                    "Q/K biases with interleaved GGUF row order are not supported",
                ));
            }
            layers.push(layer);
            for _ in 0..9 {
                step(progress);
            }
        }
        let output_norm = vector("output_norm.weight", dim)?;
        step(progress);
        let output = if source.tensor("output.weight").is_some() {
            Some(matrix("output.weight", c.vocab_size, dim)?)
        } else if c.tied_embeddings {
            None
        } else {
            return Err(Error::MissingTensor {
                name: "output.weight".into(),
            });
        };
        step(progress);
        let inv_freq = rope_inv_freq(&c);
        Ok(Weights {
            config: c,
            dtype,
            token_embd,
            layers,
            output_norm,
            output,
            inv_freq,
        })
    }

    /// Bytes of weights read per decoded token (every matrix once, plus one embedding row).
    pub fn bytes_per_token(&self) -> usize {
        let per_layer: usize = self
            .layers
            .iter()
            .map(|l| {
                l.wqkv.byte_size()
                    + l.w_gate_up.byte_size()
                    + l.wo.byte_size()
                    + l.w_down.byte_size()
            })
            .sum();
        per_layer + self.output_matrix().byte_size()
    }

    fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Runs the model over `tokens` at positions `cache.len ..`, appending their K/V to `cache`,
    /// and returns the logits asked for (`vocab_size` per position, in order), which live in
    /// `scratch` until the next call. `tuning` only says how work is cut for threads.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<'s>(
        &self,
        k: &Kernels,
        par: &dyn Parallel,
        tuning: &Tuning,
        cache: &mut KvCache,
        scratch: &'s mut Scratch,
        tokens: &[u32],
        want: LogitsFor,
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        let (n, pos0) = (tokens.len(), cache.len);
        let (dim, hd, q_dim, kv_dim, hidden) =
            (c.dim, c.head_dim, c.q_dim(), c.kv_dim(), c.hidden_dim);
        if n == 0 {
            return Ok(&[]);
        }
        if pos0 + n > c.context_length {
            return Err(Error::ContextOverflow {
                needed: pos0 + n,
                context: c.context_length,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::InvalidToken {
                id: bad,
                vocab_size: c.vocab_size,
            });
        }
        for layer in cache.layers.iter_mut() {
            layer.k.resize((pos0 + n) * kv_dim);
            layer.v.resize((pos0 + n) * kv_dim);
        }
        let qkv_dim = q_dim + 2 * kv_dim;
        let Scratch {
            x,
            xn,
            qkv,
            att,
            proj,
            ffn,
            head,
            cos,
            sin,
            act,
            logits,
        } = scratch;
        let x = sized(x, n * dim); // (n, dim), the residual stream
        let xn = sized(xn, n * dim); // (n, dim), normalized input of a sub-block
        let qkv = sized(qkv, n * qkv_dim); // (n, q_dim + 2*kv_dim): q, k, v of each token
        let att = sized(att, n * q_dim); // (n, q_dim), attention output per head
        let proj = sized(proj, n * dim); // (n, dim), a projection back to the stream
        let ffn = sized(ffn, n * 2 * hidden); // (n, 2*hidden_dim): gate, up of each token
        let head = sized(head, hd); // (head_dim), one head before its QK-norm

        // token embeddings
        for (t, &tok) in tokens.iter().enumerate() {
            self.token_embd
                .row_f32(tok as usize, &mut x[t * dim..(t + 1) * dim]);
        }
        // RoPE angles for these positions
        let half = hd / 2;
        self.rope_angles(pos0, n, cos, sin); // (n, head_dim/2) each
        let scale = 1.0 / (hd as f32).sqrt();
        let group = c.n_heads / c.n_kv_heads;

        for (l, w) in self.layers.iter().enumerate() {
            // attention RMSNorm
            rmsnorm_rows(k, x, &w.attn_norm, c.rms_eps, xn);
            // q, k, v for these positions: one matmul when Q, K and V are fused
            act.set(k, xn, dim, dim);
            matmul_stacked(k, par, tuning, &w.wqkv, act, qkv);
            let cache_l = &mut cache.layers[l];
            for (t, row) in qkv.chunks_exact_mut(qkv_dim).enumerate() {
                let (q, rest) = row.split_at_mut(q_dim);
                let (kt, vt) = rest.split_at_mut(kv_dim);
                add_bias(q, w.bq.as_deref());
                add_bias(kt, w.bk.as_deref());
                add_bias(vt, w.bv.as_deref());
                // per-head QK-norm (Qwen3)
                if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
                    for (part, norm) in [(&mut *q, qn), (&mut *kt, kn)] {
                        for h in part.chunks_exact_mut(hd) {
                            head.copy_from_slice(h);
                            (k.rmsnorm)(head, norm, c.rms_eps, h);
                        }
                    }
                }
                // RoPE
                let (ct, st) = (
                    &cos[t * half..(t + 1) * half],
                    &sin[t * half..(t + 1) * half],
                );
                (k.rope)(q, hd, ct, st);
                (k.rope)(kt, hd, ct, st);
                // K and V into the cache at position pos0 + t
                cache_l.k.write((pos0 + t) * kv_dim, kt);
                cache_l.v.write((pos0 + t) * kv_dim, vt);
            }
            // attention over the cache: token t sees positions 0 ..= pos0 + t; query head h reads
            // KV head h / group. A work item is some query heads of one KV head for a tile of
            // tokens; one kernel call takes them all, so each block of the KV head is read and
            // converted once and reused from L1 by every (token, head) pair.
            let (keys, values) = (cache_l.k.view(), cache_l.v.view());
            let qkv: &[f32] = qkv;
            let heads_per_item = attention_heads_per_item(c.n_heads, group, n, par.threads());
            let item_tokens = tuning.attention_tokens;
            for_each_tile(
                par,
                att,
                q_dim,
                0,
                q_dim,
                heads_per_item * hd,
                item_tokens,
                &|first, t0, outs| {
                    // (tokens, heads * hd) query rows of this item; token t0 + j sees
                    // pos0 + t0 + 1 + j positions.
                    let width = outs.first().map_or(0, |o| o.len());
                    let row = |j: usize| {
                        let at = (t0 + j) * qkv_dim + first;
                        &qkv[at..at + width]
                    };
                    let mut qs: [&[f32]; MAX_TOKENS_PER_CALL] = [&[]; MAX_TOKENS_PER_CALL];
                    for (j, q) in qs.iter_mut().enumerate().take(outs.len()) {
                        *q = row(j);
                    }
                    (k.attention)(
                        &qs[..outs.len()],
                        hd,
                        keys,
                        values,
                        pos0 + t0 + 1,
                        kv_dim,
                        (first / hd / group) * hd,
                        scale,
                        outs,
                    );
                },
            );
            // output projection, residual
            act.set(k, att, q_dim, q_dim);
            matmul(k, par, tuning, &w.wo, act, proj, dim, 0);
            add_into(x, proj);

            // FFN RMSNorm
            rmsnorm_rows(k, x, &w.ffn_norm, c.rms_eps, xn);
            // SwiGLU: gate and up in one matmul when fused
            act.set(k, xn, dim, dim);
            matmul_stacked(k, par, tuning, &w.w_gate_up, act, ffn);
            for row in ffn.chunks_exact_mut(2 * hidden) {
                let (gate, up) = row.split_at_mut(hidden);
                (k.silu_mul)(gate, up);
            }
            act.set(k, ffn, 2 * hidden, hidden);
            matmul(k, par, tuning, &w.w_down, act, proj, dim, 0);
            // residual
            add_into(x, proj);
        }
        cache.len = pos0 + n;

        // final RMSNorm and logits for the positions asked for
        let rows = match want {
            LogitsFor::None => return Ok(&[]),
            LogitsFor::Last => (n - 1)..n,
            LogitsFor::All => 0..n,
        };
        let x = &x[rows.start * dim..rows.end * dim];
        let xn = &mut xn[..x.len()];
        rmsnorm_rows(k, x, &self.output_norm, c.rms_eps, xn);
        act.set(k, xn, dim, dim);
        logits.resize(rows.len() * c.vocab_size, 0.0); // (positions, vocab_size)
        let output = self.output_matrix();
        matmul(k, par, tuning, output, act, logits, c.vocab_size, 0);
        Ok(logits)
    }

    /// cos and sin of every RoPE angle for positions pos0 .. pos0 + n, each (n, head_dim / 2).
    fn rope_angles(&self, pos0: usize, n: usize, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
        cos.clear();
        sin.clear();
        for pos in pos0..pos0 + n {
            for &f in &self.inv_freq {
                // The pure-Rust libm gives the same bits on every target.
                let angle = pos as f32 * f;
                cos.push(libm::cosf(angle));
                sin.push(libm::sinf(angle));
            }
        }
    }
}

/// Query heads per attention work item: a whole group of one KV head (its cache read once), or,
/// when a single token has fewer groups than threads, the largest divisor of the group that
/// gives every thread an item (one head at worst). Reading the cache once per group beats an even
/// split: SmolLM2 (3 groups) decodes ~20-40% faster on 2 threads with 3 uneven items than with 9.
fn attention_heads_per_item(n_heads: usize, group: usize, tokens: usize, threads: usize) -> usize {
    if tokens > 1 || threads <= 1 {
        return group;
    }
    (1..=group)
        .rev()
        .find(|&d| group.is_multiple_of(d) && n_heads / d >= threads)
        .unwrap_or(1)
}

/// The first `n` elements of a reused buffer, grown if needed (allocates only while growing).
fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// One sequence's work buffers for [`Weights::forward`], reused from call to call: after the
/// largest batch has been seen, a forward pass allocates nothing.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    x: Vec<f32>,
    xn: Vec<f32>,
    qkv: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    ffn: Vec<f32>,
    head: Vec<f32>,
    cos: Vec<f32>,
    sin: Vec<f32>,
    act: Activations,
    logits: Vec<f32>,
}

impl Scratch {
    /// The logits of the last forward pass that computed any.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }
}

/// Activations of one matmul input: f32 rows and, for quantized weights, their Q8 blocks
/// (quantized once and shared by every matrix that reads the same input).
#[derive(Debug, Default, Clone)]
struct Activations {
    f32: Vec<f32>,
    q8: Vec<BlockQ8Act>,
    cols: usize,
}

impl Activations {
    /// The input is the first `cols` values of every `stride`-long row of `x`.
    fn set(&mut self, k: &Kernels, x: &[f32], stride: usize, cols: usize) {
        let n = x.len() / stride;
        self.cols = cols;
        self.f32.clear();
        for row in x.chunks_exact(stride) {
            self.f32.extend_from_slice(&row[..cols]);
        }
        self.q8.clear();
        if cols % QK == 0 {
            let nb = cols / QK;
            self.q8.resize(n * nb, BlockQ8Act::default());
            for (row, q) in self
                .f32
                .chunks_exact(cols)
                .zip(self.q8.chunks_exact_mut(nb))
            {
                (k.quantize_q8)(row, q);
            }
        }
    }

    fn input(&self, w: &Matrix) -> Input<'_> {
        if w.wants_q8() {
            Input::Q8(&self.q8)
        } else {
            Input::F32(&self.f32)
        }
    }
}

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
        }
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
        k: &Kernels,
        par: &dyn Parallel,
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
                act.set(k, &x, w.cols, w.cols);
                let mut out = vec![0.0f32; n_tokens * w.rows];
                let mut fastest = f64::INFINITY;
                for rows in TUNE_ROWS {
                    if rows > w.rows.next_multiple_of(8) && rows > TUNE_ROWS[0] {
                        break;
                    }
                    let cut = Tuning::fixed(rows, rows, 1);
                    let mut time = f64::INFINITY;
                    for _ in 0..3 {
                        let t0 = Instant::now();
                        matmul(k, par, &cut, w, &act, &mut out, w.rows, 0);
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

/// Matmuls of a stack (one call when fused): `out` holds n tokens of `s.rows()` values.
fn matmul_stacked(
    k: &Kernels,
    par: &dyn Parallel,
    tuning: &Tuning,
    s: &Stacked,
    x: &Activations,
    out: &mut [f32],
) {
    let mut col0 = 0;
    for m in &s.matrices {
        matmul(k, par, tuning, m, x, out, s.rows(), col0);
        col0 += m.rows;
    }
}

/// `out[t][col0 ..][.. w.rows] = w · x[t]` for every token t (`out` is rows of `stride`), rows
/// split across threads in work items of the tuned size.
#[allow(clippy::too_many_arguments)]
fn matmul(
    k: &Kernels,
    par: &dyn Parallel,
    tuning: &Tuning,
    w: &Matrix,
    x: &Activations,
    out: &mut [f32],
    stride: usize,
    col0: usize,
) {
    debug_assert_eq!(x.cols, w.cols);
    let input = x.input(w);
    let n_tokens = out.len() / stride;
    let rows = tuning.rows_per_item(w, n_tokens);
    for_each_tile(
        par,
        out,
        stride,
        col0,
        w.rows,
        rows,
        n_tokens,
        &|first, t0, outs| (k.matmul)(w, first, &input.from_token(t0, w.cols), outs),
    );
}

fn rmsnorm_rows(k: &Kernels, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = weight.len();
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        (k.rmsnorm)(xr, weight, eps, or);
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, &bi)| *v = *v + bi);
        }
    }
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a = *a + b);
}

fn tensor<'s, 'a>(source: &'s ModelSource<'a>, name: &str) -> Result<&'s RawTensor<'a>> {
    source.tensor(name).ok_or_else(|| Error::MissingTensor {
        name: name.to_string(),
    })
}

fn check_shape(t: &RawTensor<'_>, expected: &[usize]) -> Result<()> {
    if t.shape != expected {
        return Err(Error::ShapeMismatch {
            name: t.name.clone(),
            expected: expected.to_vec(),
            got: t.shape.clone(),
        });
    }
    Ok(())
}

fn vector_f32(t: &RawTensor<'_>) -> Result<Vec<f32>> {
    match t.ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            Ok(crate::quant::dequantize_bytes(t.ty, t.data))
        }
        other => Err(Error::UnsupportedTensorType {
            name: t.name.clone(),
            ggml_type: other.id(),
            type_name: format!("{} (vectors must be float)", other.name()),
        }),
    }
}

/// Row i of the half-split layout is row `result[i]` of llama.cpp's interleaved layout:
/// within a head, HF row `j * head_dim/2 + i` is GGUF row `2i + j`.
pub fn interleaved_to_half_split(n_heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..n_heads * head_dim)
        .map(|r| {
            let (h, within) = (r / head_dim, r % head_dim);
            let (j, i) = (within / half, within % half);
            h * head_dim + 2 * i + j
        })
        .collect()
}

/// RoPE inverse frequencies `1 / theta^(2i / head_dim)`, in f32 as HF computes them, with the
/// configured scaling applied.
pub fn rope_inv_freq(c: &ModelConfig) -> Vec<f32> {
    let hd = c.head_dim;
    let base: Vec<f32> = (0..hd / 2)
        .map(|i| 1.0 / libm::powf(c.rope_theta, (2 * i) as f32 / hd as f32))
        .collect();
    match &c.rope_scaling {
        None => base,
        Some(RopeScaling::Linear { factor }) => base.iter().map(|f| f / factor).collect(),
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_context,
        }) => {
            let old = *original_context as f32;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attention_heads_per_item;

    #[test]
    fn attention_heads_per_item_whole_groups_unless_a_token_has_fewer_groups_than_threads() {
        // SmolLM2: 9 heads in 3 groups of 3.
        assert_eq!(attention_heads_per_item(9, 3, 1, 1), 3);
        assert_eq!(attention_heads_per_item(9, 3, 1, 2), 3);
        assert_eq!(attention_heads_per_item(9, 3, 1, 4), 1);
        assert_eq!(attention_heads_per_item(9, 3, 16, 8), 3);
        // TinyLlama: 32 heads in 4 groups of 8.
        assert_eq!(attention_heads_per_item(32, 8, 1, 4), 8);
        assert_eq!(attention_heads_per_item(32, 8, 1, 8), 4);
        assert_eq!(attention_heads_per_item(32, 8, 1, 64), 1);
        // No GQA.
        assert_eq!(attention_heads_per_item(2, 1, 1, 8), 1);
    }
}
