//! The model: immutable [`Weights`] (shared by every session) and the forward pass over a batch
//! of tokens. One model for every weight format; `forward` reads like the math.

use crate::config::{ModelConfig, RopeScaling};
use crate::formats::{ModelSource, QkRowOrder, RawTensor};
use crate::kernels::{Input, Kernels, KvSlice, Matrix};
use crate::parallel::{for_each_row_chunk, Parallel};
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
    pub wq: Matrix,               // (q_dim, dim), RoPE pairs (i, i + head_dim/2)
    pub wk: Matrix,               // (kv_dim, dim), same row order as wq
    pub wv: Matrix,               // (kv_dim, dim)
    pub bq: Option<Vec<f32>>,     // (q_dim), Qwen2
    pub bk: Option<Vec<f32>>,     // (kv_dim)
    pub bv: Option<Vec<f32>>,     // (kv_dim)
    pub q_norm: Option<Vec<f32>>, // (head_dim), Qwen3
    pub k_norm: Option<Vec<f32>>, // (head_dim)
    pub wo: Matrix,               // (dim, q_dim)
    pub ffn_norm: Vec<f32>,       // (dim)
    pub w_gate: Matrix,           // (hidden_dim, dim)
    pub w_up: Matrix,             // (hidden_dim, dim)
    pub w_down: Matrix,           // (dim, hidden_dim)
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
                wq: unpermute(matrix(&name("attn_q.weight"), q_dim, dim)?, c.n_heads),
                wk: unpermute(matrix(&name("attn_k.weight"), kv_dim, dim)?, c.n_kv_heads),
                wv: matrix(&name("attn_v.weight"), kv_dim, dim)?,
                bq: optional_vector(&name("attn_q.bias"), q_dim)?,
                bk: optional_vector(&name("attn_k.bias"), kv_dim)?,
                bv: optional_vector(&name("attn_v.bias"), kv_dim)?,
                q_norm: optional_vector(&name("attn_q_norm.weight"), hd)?,
                k_norm: optional_vector(&name("attn_k_norm.weight"), hd)?,
                wo: matrix(&name("attn_output.weight"), dim, q_dim)?,
                ffn_norm: vector(&name("ffn_norm.weight"), dim)?,
                w_gate: matrix(&name("ffn_gate.weight"), hidden, dim)?,
                w_up: matrix(&name("ffn_up.weight"), hidden, dim)?,
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
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
                    .iter()
                    .map(|m| m.byte_size())
                    .sum::<usize>()
            })
            .sum();
        per_layer + self.output_matrix().byte_size()
    }

    fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Runs the model over `tokens` at positions `cache.len ..`, appending their K/V to `cache`,
    /// and returns the logits asked for (`vocab_size` per position, in order).
    pub fn forward(
        &self,
        k: &Kernels,
        par: &dyn Parallel,
        cache: &mut KvCache,
        tokens: &[u32],
        want: LogitsFor,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let (n, pos0) = (tokens.len(), cache.len);
        let (dim, hd, q_dim, kv_dim, hidden) =
            (c.dim, c.head_dim, c.q_dim(), c.kv_dim(), c.hidden_dim);
        if n == 0 {
            return Ok(Vec::new());
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

        // token embeddings
        let mut x = vec![0.0f32; n * dim]; // (n, dim), the residual stream
        for (t, &tok) in tokens.iter().enumerate() {
            self.token_embd
                .row_f32(tok as usize, &mut x[t * dim..(t + 1) * dim]);
        }
        // RoPE angles for these positions
        let (cos, sin) = self.rope_angles(pos0, n); // (n, head_dim/2) each
        let half = hd / 2;
        let scale = 1.0 / (hd as f32).sqrt();

        let mut xn = vec![0.0f32; n * dim]; // (n, dim), normalized input of a sub-block
        let mut q = vec![0.0f32; n * q_dim]; // (n, q_dim)
        let mut kk = vec![0.0f32; n * kv_dim]; // (n, kv_dim)
        let mut vv = vec![0.0f32; n * kv_dim]; // (n, kv_dim)
        let mut att = vec![0.0f32; n * q_dim]; // (n, q_dim), attention output per head
        let mut proj = vec![0.0f32; n * dim]; // (n, dim), a projection back to the stream
        let mut gate = vec![0.0f32; n * hidden]; // (n, hidden_dim)
        let mut up = vec![0.0f32; n * hidden]; // (n, hidden_dim)
        let mut act = Activations::default();

        for (l, w) in self.layers.iter().enumerate() {
            // attention RMSNorm
            rmsnorm_rows(k, &x, &w.attn_norm, c.rms_eps, &mut xn);
            // q, k, v for these positions
            act.set(k, &xn, dim);
            matmul(k, par, &w.wq, &act, &mut q);
            matmul(k, par, &w.wk, &act, &mut kk);
            matmul(k, par, &w.wv, &act, &mut vv);
            add_bias(&mut q, w.bq.as_deref());
            add_bias(&mut kk, w.bk.as_deref());
            add_bias(&mut vv, w.bv.as_deref());
            // per-head QK-norm (Qwen3)
            if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
                rmsnorm_rows(k, &q.clone(), qn, c.rms_eps, &mut q);
                rmsnorm_rows(k, &kk.clone(), kn, c.rms_eps, &mut kk);
            }
            // RoPE
            for t in 0..n {
                let (ct, st) = (
                    &cos[t * half..(t + 1) * half],
                    &sin[t * half..(t + 1) * half],
                );
                (k.rope)(&mut q[t * q_dim..(t + 1) * q_dim], hd, ct, st);
                (k.rope)(&mut kk[t * kv_dim..(t + 1) * kv_dim], hd, ct, st);
            }
            // K and V into the cache at positions pos0 ..
            let cache_l = &mut cache.layers[l];
            cache_l.k.write(pos0 * kv_dim, &kk);
            cache_l.v.write(pos0 * kv_dim, &vv);
            // attention over the cache: token t sees positions 0 ..= pos0 + t; query head h reads
            // KV head h / (n_heads / n_kv_heads)
            let group = c.n_heads / c.n_kv_heads;
            let (keys, values) = (cache_l.k.view(), cache_l.v.view());
            for_each_row_chunk(par, &mut att, q_dim, hd, &|first, outs| {
                let h = first / hd;
                for (t, o) in outs.iter_mut().enumerate() {
                    let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                    (k.attention)(
                        qh,
                        keys,
                        values,
                        pos0 + t + 1,
                        kv_dim,
                        (h / group) * hd,
                        scale,
                        o,
                    );
                }
            });
            // output projection, residual
            act.set(k, &att, q_dim);
            matmul(k, par, &w.wo, &act, &mut proj);
            add_into(&mut x, &proj);

            // FFN RMSNorm
            rmsnorm_rows(k, &x, &w.ffn_norm, c.rms_eps, &mut xn);
            // SwiGLU
            act.set(k, &xn, dim);
            matmul(k, par, &w.w_gate, &act, &mut gate);
            matmul(k, par, &w.w_up, &act, &mut up);
            (k.silu_mul)(&mut gate, &up);
            act.set(k, &gate, hidden);
            matmul(k, par, &w.w_down, &act, &mut proj);
            // residual
            add_into(&mut x, &proj);
        }
        cache.len = pos0 + n;

        // final RMSNorm and logits for the positions asked for
        let rows = match want {
            LogitsFor::None => return Ok(Vec::new()),
            LogitsFor::Last => (n - 1)..n,
            LogitsFor::All => 0..n,
        };
        let x = &x[rows.start * dim..rows.end * dim];
        let mut xn = vec![0.0f32; x.len()];
        rmsnorm_rows(k, x, &self.output_norm, c.rms_eps, &mut xn);
        act.set(k, &xn, dim);
        let mut logits = vec![0.0f32; rows.len() * c.vocab_size]; // (positions, vocab_size)
        matmul(k, par, self.output_matrix(), &act, &mut logits);
        Ok(logits)
    }

    /// cos and sin of every RoPE angle for positions pos0 .. pos0 + n, each (n, head_dim / 2).
    fn rope_angles(&self, pos0: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(n * half);
        let mut sin = Vec::with_capacity(n * half);
        for pos in pos0..pos0 + n {
            for &f in &self.inv_freq {
                // The pure-Rust libm gives the same bits on every target.
                let angle = pos as f32 * f;
                cos.push(libm::cosf(angle));
                sin.push(libm::sinf(angle));
            }
        }
        (cos, sin)
    }
}

/// Activations of one matmul input: f32 rows and, for quantized weights, their Q8 blocks
/// (quantized once and shared by every matrix that reads the same input).
#[derive(Debug, Default)]
struct Activations {
    f32: Vec<f32>,
    q8: Vec<BlockQ8Act>,
    cols: usize,
}

impl Activations {
    fn set(&mut self, k: &Kernels, x: &[f32], cols: usize) {
        self.f32.clear();
        self.f32.extend_from_slice(x);
        self.cols = cols;
        self.q8.clear();
        if cols % QK == 0 {
            self.q8.resize(x.len() / QK, BlockQ8Act::default());
            (k.quantize_q8)(x, &mut self.q8);
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

/// Rows of a matmul chunk handed to one thread: big enough to amortize the call, small enough
/// to balance two threads on the smallest matrix.
const MATMUL_CHUNK_ROWS: usize = 64;

/// `out (n, w.rows) = x (n, w.cols) · wᵀ`, rows split across threads.
fn matmul(k: &Kernels, par: &dyn Parallel, w: &Matrix, x: &Activations, out: &mut [f32]) {
    debug_assert_eq!(x.cols, w.cols);
    let input = x.input(w);
    for_each_row_chunk(par, out, w.rows, MATMUL_CHUNK_ROWS, &|first, outs| {
        (k.matmul)(w, first, &input, outs)
    });
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
