//! The forward pass over a batch of tokens ([`Weights::forward`]), reading like the math, and
//! its steps: matmul over threads, RMSNorm rows, attention over the cache; plus the reused work
//! buffers ([`Scratch`]) and matmul inputs ([`Activations`]).

use super::profile::{Clock, Part, Profile};
use super::{KvCache, LayerCache, LayerWeights, Stacked, Tuning, Weights};
use crate::config::{Activation, ModelConfig};
use crate::kernels::tiles::{for_each_rows, for_each_tile, MAX_TOKENS_PER_CALL};
use crate::kernels::{Input, Kernels, KvHead, Matrix};
use crate::parallel::Parallel;
use crate::quant::{BlockQ8Act, QK};
use crate::{Error, Result};

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

/// What a forward pass computes with: the backend's kernels, the threads, and how work is cut
/// for them. Only the speed depends on these, never a result (rule 7).
#[derive(Clone, Copy)]
pub struct Compute<'a> {
    pub kernels: &'a Kernels,
    pub parallel: &'a dyn Parallel,
    pub tuning: &'a Tuning,
    /// Where the time goes, when profiling (`inferno bench --profile`).
    pub profile: Option<&'a Profile>,
}

/// One sequence's part of a forward pass: its cache, the tokens that follow what the cache
/// holds, and which of their positions get logits.
pub struct Sequence<'a> {
    pub cache: &'a mut KvCache,
    pub tokens: &'a [u32],
    pub want: LogitsFor,
}

impl Sequence<'_> {
    /// Rows of logits this sequence gets.
    pub fn logit_rows(&self) -> usize {
        match self.want {
            LogitsFor::None => 0,
            LogitsFor::Last => usize::from(!self.tokens.is_empty()),
            LogitsFor::All => self.tokens.len(),
        }
    }
}

impl Weights {
    /// Runs the model over `tokens` at positions `cache.len ..`, appending their K/V to `cache`,
    /// and returns the logits asked for (`vocab_size` per position, in order), which live in
    /// `scratch` until the next call. The one-sequence case of [`Weights::forward_batch`].
    pub fn forward<'s>(
        &self,
        compute: Compute<'_>,
        cache: &mut KvCache,
        scratch: &'s mut Scratch,
        tokens: &[u32],
        want: LogitsFor,
    ) -> Result<&'s [f32]> {
        let mut sequence = [Sequence {
            cache,
            tokens,
            want,
        }];
        self.forward_batch(compute, scratch, &mut sequence)
    }

    /// One forward pass over several sequences at once (a server's conversations): their
    /// tokens go through every matmul together, so the weights are read once for all of them,
    /// while RoPE, the cache and attention stay each sequence's own. Every output row is
    /// computed by the same operations as when its sequence runs alone (rule 7), so the bits do
    /// not depend on the company. Returns the logits asked for, sequence after sequence
    /// ([`Sequence::logit_rows`] rows of `vocab_size` each). Nothing is written unless every
    /// sequence is valid.
    pub fn forward_batch<'s>(
        &self,
        compute: Compute<'_>,
        scratch: &'s mut Scratch,
        sequences: &mut [Sequence<'_>],
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        let (dim, head_dim, q_dim, kv_dim, hidden_dim) =
            (c.dim, c.head_dim, c.q_dim(), c.kv_dim(), c.hidden_dim);
        for s in sequences.iter() {
            let (n, pos0) = (s.tokens.len(), s.cache.len);
            if pos0 + n > c.context_length {
                return Err(Error::ContextOverflow {
                    needed: pos0 + n,
                    context: c.context_length,
                });
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(Error::InvalidToken {
                    id: bad,
                    vocab_size: c.vocab_size,
                });
            }
        }
        // Each sequence's first row in the batch and first position in its cache.
        let places: Vec<Place> = sequences
            .iter()
            .scan(0, |row, s| {
                let place = Place {
                    row: *row,
                    n: s.tokens.len(),
                    pos0: s.cache.len,
                };
                *row += s.tokens.len();
                Some(place)
            })
            .collect();
        let n: usize = places.iter().map(|s| s.n).sum();
        if n == 0 {
            return Ok(&[]);
        }
        // A one-token forward may run on the backend the tuner found fastest for decode.
        let compute = match compute.tuning.decode_kernels {
            Some(decode) if n == 1 => Compute {
                kernels: decode,
                ..compute
            },
            _ => compute,
        };
        let kernels = compute.kernels;
        for (s, place) in sequences.iter_mut().zip(&places) {
            for layer in s.cache.layers.iter_mut() {
                layer.set_rows(place.pos0 + place.n - layer.first);
            }
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
            cos_local,
            sin_local,
            act,
            logits,
        } = scratch;
        let x = sized(x, n * dim); // (n, dim), the residual stream
        let xn = sized(xn, n * dim); // (n, dim), normalized input of a sub-block
        let qkv = sized(qkv, n * qkv_dim); // (n, q_dim + 2*kv_dim): q, k, v of each token
        let att = sized(att, n * q_dim); // (n, q_dim), attention output per head
        let proj = sized(proj, n * dim); // (n, dim), a projection back to the stream
        let ffn = sized(ffn, n * 2 * hidden_dim); // (n, 2*hidden_dim): gate, up of each token
        let head = sized(head, head_dim); // (head_dim), one head before its QK-norm
        let mut clock = Clock::start(compute.profile);

        // token embeddings, scaled (Gemma: by sqrt(dim))
        let tokens = sequences.iter().flat_map(|s| s.tokens.iter());
        for (t, &tok) in tokens.enumerate() {
            self.token_embd
                .row_f32(tok as usize, &mut x[t * dim..(t + 1) * dim]);
        }
        if let Some(scale) = c.extras.embedding_scale {
            x.iter_mut().for_each(|v| *v = *v * scale);
        }
        // RoPE angles for each token's position, and for the windowed layers' own base (Gemma 3)
        rope_angles(&self.inv_freq, &places, cos, sin); // (n, head_dim/2) each
        if let Some(inv_freq) = &self.inv_freq_local {
            rope_angles(inv_freq, &places, cos_local, sin_local);
        }

        for (l, w) in self.layers.iter().enumerate() {
            let window = c.layer_window(l);
            let (cos, sin) = match (&self.inv_freq_local, window) {
                (Some(_), Some(_)) => (&*cos_local, &*sin_local),
                _ => (&*cos, &*sin),
            };
            clock.lap(Part::Other);
            // attention RMSNorm
            rmsnorm_rows(compute, x, &w.attn_norm, c.rms_eps, xn);
            clock.lap(Part::Norms);
            // q, k, v for these positions: one matmul when Q, K and V are fused
            act.set(compute, xn, dim, dim, &w.wqkv.matrices);
            clock.lap(Part::Quantize);
            matmul_stacked(compute, &w.wqkv, act, qkv);
            clock.lap(Part::MatmulQkv);
            // biases, QK-norm, RoPE; K and V into each sequence's cache
            let half = head_dim / 2;
            for (s, place) in sequences.iter_mut().zip(&places) {
                let rows = place.row..place.row + place.n;
                let layer_cache = &mut s.cache.layers[l];
                // The row of position pos0 (a windowed layer may have let older rows go).
                let row0 = place.pos0 - layer_cache.first;
                qkv_to_cache(
                    kernels,
                    c,
                    w,
                    &mut qkv[rows.start * qkv_dim..rows.end * qkv_dim],
                    head,
                    &cos[rows.start * half..rows.end * half],
                    &sin[rows.start * half..rows.end * half],
                    layer_cache,
                    row0,
                );
            }
            clock.lap(Part::RopeCache);
            // attention over each sequence's cache (the layer's window, if any)
            attention(compute, c, sequences, l, &places, qkv, att, window);
            clock.lap(Part::Attention);
            // output projection, post-attention RMSNorm (Gemma), residual
            act.set(compute, att, q_dim, q_dim, [&w.wo]);
            clock.lap(Part::Quantize);
            matmul(compute, &w.wo, act, proj, dim, 0);
            clock.lap(Part::MatmulWo);
            let out = post_norm(compute, w.post_attention_norm.as_deref(), c, proj, xn);
            add_into(x, out);

            // FFN RMSNorm
            rmsnorm_rows(compute, x, &w.ffn_norm, c.rms_eps, xn);
            clock.lap(Part::Norms);
            // SwiGLU or GeGLU: gate and up in one matmul when fused
            act.set(compute, xn, dim, dim, &w.w_gate_up.matrices);
            clock.lap(Part::Quantize);
            matmul_stacked(compute, &w.w_gate_up, act, ffn);
            clock.lap(Part::MatmulGateUp);
            let gate_mul = match c.extras.activation {
                Activation::Silu => kernels.silu_mul,
                Activation::GeluTanh => kernels.gelu_tanh_mul,
            };
            per_token(compute, ffn, 2 * hidden_dim, &|_, ffn| {
                for row in ffn.chunks_exact_mut(2 * hidden_dim) {
                    let (gate, up) = row.split_at_mut(hidden_dim);
                    gate_mul(gate, up);
                }
            });
            clock.lap(Part::GateActivation);
            // down projection, post-FFN RMSNorm (Gemma), residual
            act.set(compute, ffn, 2 * hidden_dim, hidden_dim, [&w.w_down]);
            clock.lap(Part::Quantize);
            matmul(compute, &w.w_down, act, proj, dim, 0);
            clock.lap(Part::MatmulDown);
            let out = post_norm(compute, w.post_ffw_norm.as_deref(), c, proj, xn);
            add_into(x, out);
        }
        for (s, place) in sequences.iter_mut().zip(&places) {
            s.cache.len = place.pos0 + place.n;
            s.cache.compact();
        }

        // final RMSNorm and logits for the positions asked for, gathered into `proj`
        let mut picked = 0;
        for (s, place) in sequences.iter().zip(&places) {
            if place.n == 0 {
                continue;
            }
            let rows = match s.want {
                LogitsFor::None => continue,
                LogitsFor::Last => place.row + place.n - 1..place.row + place.n,
                LogitsFor::All => place.row..place.row + place.n,
            };
            let from = &x[rows.start * dim..rows.end * dim];
            proj[picked * dim..picked * dim + from.len()].copy_from_slice(from);
            picked += rows.len();
        }
        if picked == 0 {
            clock.lap(Part::Other);
            return Ok(&[]);
        }
        let (x, xn) = (&proj[..picked * dim], &mut xn[..picked * dim]);
        rmsnorm_rows(compute, x, &self.output_norm, c.rms_eps, xn);
        clock.lap(Part::Other);
        let output = self.output_matrix();
        act.set(compute, xn, dim, dim, [output]);
        clock.lap(Part::Quantize);
        logits.resize(picked * c.vocab_size, 0.0); // (positions, vocab_size)
        matmul(compute, output, act, logits, c.vocab_size, 0);
        clock.lap(Part::MatmulOutput);
        Ok(logits)
    }
}

/// Where a sequence sits in a batch: its first row and token count, and the position of its
/// first token.
#[derive(Debug, Clone, Copy)]
struct Place {
    row: usize,
    n: usize,
    pos0: usize,
}

/// cos and sin of every RoPE angle for each token of the batch at its own position, each
/// (n, head_dim / 2).
fn rope_angles(inv_freq: &[f32], places: &[Place], cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
    cos.clear();
    sin.clear();
    for place in places {
        for pos in place.pos0..place.pos0 + place.n {
            for &f in inv_freq {
                // The pure-Rust libm gives the same bits on every target.
                let angle = pos as f32 * f;
                cos.push(libm::cosf(angle));
                sin.push(libm::sinf(angle));
            }
        }
    }
}

/// A sub-block's output `y` (n, dim) as the residual stream receives it: RMS-normalized into
/// `out` when the layer has a post norm (Gemma), else `y` itself.
fn post_norm<'a>(
    compute: Compute<'_>,
    norm: Option<&[f32]>,
    c: &ModelConfig,
    y: &'a [f32],
    out: &'a mut [f32],
) -> &'a [f32] {
    match norm {
        Some(weight) => {
            rmsnorm_rows(compute, y, weight, c.rms_eps, out);
            out
        }
        None => y,
    }
}

/// Query heads per attention work item: a whole group of one KV head (its cache read once), or,
/// when a single token has fewer groups than threads, the largest divisor of the group that
/// gives every thread an item (one head at worst). Reading the cache once per group beats an even
/// split: SmolLM2 (3 groups) decodes ~20-40% faster on 2 threads with 3 uneven items than with 9.
/// It also beats finer items where the groups already divide evenly: the TinyLlama shape (4
/// groups of 8) after 1500 tokens, 2 threads on Zen 3, attention 4.9-5.8 ms per step with whole
/// groups, 6.5-7.8 with half groups (each cache read and converted twice).
fn attention_heads_per_item(n_heads: usize, group: usize, tokens: usize, threads: usize) -> usize {
    if tokens > 1 || threads <= 1 {
        return group;
    }
    (1..=group)
        .rev()
        .find(|&d| group.is_multiple_of(d) && n_heads / d >= threads)
        .unwrap_or(1)
}

/// The q, k, v rows of these tokens, made ready for attention: biases (Qwen2), per-head QK-norm
/// (Qwen3) and RoPE on q and k; then k and v into the cache at rows `row0 ..`.
#[allow(clippy::too_many_arguments)]
fn qkv_to_cache(
    kernels: &Kernels,
    c: &ModelConfig,
    w: &LayerWeights,
    qkv: &mut [f32],
    head: &mut [f32],
    cos: &[f32],
    sin: &[f32],
    layer_cache: &mut LayerCache,
    row0: usize,
) {
    let (head_dim, q_dim, kv_dim) = (c.head_dim, c.q_dim(), c.kv_dim());
    let half = head_dim / 2;
    for (t, row) in qkv.chunks_exact_mut(q_dim + 2 * kv_dim).enumerate() {
        let (q, rest) = row.split_at_mut(q_dim);
        let (k, v) = rest.split_at_mut(kv_dim);
        add_bias(q, w.bq.as_deref());
        add_bias(k, w.bk.as_deref());
        add_bias(v, w.bv.as_deref());
        // per-head QK-norm (Qwen3)
        if let (Some(q_norm), Some(k_norm)) = (&w.q_norm, &w.k_norm) {
            for (part, norm) in [(&mut *q, q_norm), (&mut *k, k_norm)] {
                for h in part.chunks_exact_mut(head_dim) {
                    head.copy_from_slice(h);
                    (kernels.rmsnorm)(head, norm, c.rms_eps, h);
                }
            }
        }
        // RoPE
        let (cos_t, sin_t) = (
            &cos[t * half..(t + 1) * half],
            &sin[t * half..(t + 1) * half],
        );
        (kernels.rope)(q, head_dim, cos_t, sin_t);
        (kernels.rope)(k, head_dim, cos_t, sin_t);
        // K and V into the cache at row row0 + t
        layer_cache.write(row0 + t, k, v);
    }
}

/// Attention over each sequence's cache, into `att` (n, q_dim): a token at position p sees
/// its own sequence's positions 0 ..= p (with the layer's sliding window W, only the last W of
/// them: a query whose window starts past 0 is one kernel call over the cache from its first
/// position, exactly as when it is decoded alone); query head h reads KV head h / group. A work
/// item is some query heads of one KV head for a tile of tokens; one kernel call takes the
/// tile's tokens of one sequence, so each block of the KV head is read and converted once and
/// reused from L1 by every (token, head) pair.
#[allow(clippy::too_many_arguments)]
fn attention(
    compute: Compute<'_>,
    c: &ModelConfig,
    sequences: &[Sequence<'_>],
    layer: usize,
    places: &[Place],
    qkv: &[f32],
    att: &mut [f32],
    window: Option<usize>,
) {
    let (head_dim, q_dim, kv_dim) = (c.head_dim, c.q_dim(), c.kv_dim());
    let qkv_dim = q_dim + 2 * kv_dim;
    let group = c.n_heads / c.n_kv_heads;
    let scale = c.attention_scale();
    let longest = places.iter().map(|s| s.n).max().unwrap_or(0);
    let heads_per_item =
        attention_heads_per_item(c.n_heads, group, longest, compute.parallel.threads());
    let tile_tokens = compute.tuning.attention_tokens.min(longest.max(1));
    for_each_tile(
        compute.parallel,
        att,
        q_dim,
        0,
        q_dim,
        heads_per_item * head_dim,
        tile_tokens,
        &|first, t0, outs| {
            let width = outs.first().map_or(0, |o| o.len());
            let kv_h = first / head_dim / group;
            // The tile's rows, one run per sequence they belong to.
            let mut j = 0;
            while j < outs.len() {
                let t = t0 + j;
                let s = places.partition_point(|s| s.row + s.n <= t);
                let place = places[s];
                let run = (place.row + place.n - t).min(outs.len() - j);
                let outs = &mut outs[j..j + run];
                let mut qs: [&[f32]; MAX_TOKENS_PER_CALL] = [&[]; MAX_TOKENS_PER_CALL];
                for (i, q) in qs.iter_mut().enumerate().take(run) {
                    let at = (t + i) * qkv_dim + first;
                    *q = &qkv[at..at + width];
                }
                // Token t + i is at position pos + i of its sequence.
                let pos = place.pos0 + (t - place.row);
                let cache = &sequences[s].cache.layers[layer];
                let (keys, values) = cache.head(kv_h);
                let kv_head = KvHead {
                    keys,
                    values,
                    positions: pos + 1,
                    kv_dim: head_dim,
                    offset: 0,
                    head_dim,
                    scale,
                };
                attend(compute, &kv_head, cache.first, &qs[..run], outs, window);
                j += run;
            }
        },
    );
}

/// Queries `qs` of one sequence, the first seeing `kv_head.positions` positions and each next
/// one more, attend over its cache, whose rows start at position `held_from`: in one kernel
/// call when no window cuts their view, else one call per query from its window's first
/// position.
fn attend(
    compute: Compute<'_>,
    kv_head: &KvHead<'_>,
    held_from: usize,
    qs: &[&[f32]],
    outs: &mut [&mut [f32]],
    window: Option<usize>,
) {
    // The first position the query at p sees.
    let window_start = |p: usize| window.map_or(0, |w| (p + 1).saturating_sub(w));
    let first = kv_head.positions - 1;
    if window_start(first + outs.len().saturating_sub(1)) == 0 {
        assert_eq!(
            held_from, 0,
            "attention: a cache without its first rows and no window"
        );
        (compute.kernels.attention)(qs, kv_head, outs);
        return;
    }
    for (j, out) in outs.iter_mut().enumerate() {
        let p = first + j;
        let lo = window_start(p);
        // The cache keeps every position a query can see (KvCache::compact).
        let row = lo - held_from;
        let windowed = KvHead {
            keys: kv_head.keys.from_position(row, kv_head.kv_dim),
            values: kv_head.values.from_position(row, kv_head.kv_dim),
            positions: p + 1 - lo,
            ..*kv_head
        };
        (compute.kernels.attention)(&qs[j..j + 1], &windowed, std::slice::from_mut(out));
    }
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
    cos_local: Vec<f32>,
    sin_local: Vec<f32>,
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
pub(super) struct Activations {
    f32: Vec<f32>,
    q8: Vec<BlockQ8Act>,
    cols: usize,
}

impl Activations {
    /// The input is the first `cols` values of every `stride`-long row of `x`, for the
    /// matrices `readers`: f32 rows if one of them has float weights, Q8 blocks if one has
    /// quantized ones. Each is written straight from `x`, split across the threads for a batch
    /// (a 500-token prefill's copy and quantization were ~5% of it on 2 threads when one
    /// thread copied every row first). The buffers keep their allocation and are resized
    /// without being emptied first: every value is overwritten, and refilling them with
    /// defaults (1-3 MB per call, on the caller, before the parallel region) cost a 500-token
    /// prefill 4% on 2 threads (TinyLlama-shape Q4_0 on Zen 4: 243-245 -> 253-254 tok/s).
    pub(super) fn set<'m>(
        &mut self,
        compute: Compute<'_>,
        x: &[f32],
        stride: usize,
        cols: usize,
        readers: impl IntoIterator<Item = &'m Matrix>,
    ) {
        let n = x.len() / stride;
        self.cols = cols;
        let (mut f32_rows, mut q8) = (false, false);
        for w in readers {
            if w.wants_q8() {
                q8 = true;
            } else {
                f32_rows = true;
            }
        }
        if f32_rows {
            self.f32.resize(n * cols, 0.0);
            per_token(compute, &mut self.f32, cols, &|first, rows| {
                let src = x[first * stride..].chunks(stride);
                for (dst, src) in rows.chunks_exact_mut(cols).zip(src) {
                    dst.copy_from_slice(&src[..cols]);
                }
            });
        } else {
            self.f32.clear();
        }
        if q8 {
            let nb = cols / QK;
            self.q8.resize(n * nb, BlockQ8Act::default());
            per_token(compute, &mut self.q8, nb, &|first, q8| {
                let src = x[first * stride..].chunks(stride);
                for (q, row) in q8.chunks_exact_mut(nb).zip(src) {
                    (compute.kernels.quantize_q8)(&row[..cols], q);
                }
            });
        } else {
            self.q8.clear();
        }
    }

    /// What `w` reads (it must have been among the `readers` of the last `set`).
    fn input(&self, w: &Matrix) -> Input<'_> {
        if w.wants_q8() {
            debug_assert!(!self.q8.is_empty(), "matmul input: Q8 blocks were not made");
            Input::Q8(&self.q8)
        } else {
            debug_assert!(!self.f32.is_empty(), "matmul input: f32 rows were not kept");
            Input::F32(&self.f32)
        }
    }
}

/// Matmuls of a stack (one call when fused): `out` holds n tokens of `stack.rows()` values.
fn matmul_stacked(compute: Compute<'_>, stack: &Stacked, x: &Activations, out: &mut [f32]) {
    let mut col0 = 0;
    for m in &stack.matrices {
        matmul(compute, m, x, out, stack.rows(), col0);
        col0 += m.rows;
    }
}

/// `out[t][col0 ..][.. w.rows] = w · x[t]` for every token t (`out` is rows of `stride`), rows
/// split across threads in work items of the tuned size. On one thread, tokens that fit one
/// kernel call take the whole matrix as one item: items there only cut the same tiles, read
/// in the same order, into more calls (the load-time tuner's budget runs out before it times
/// the TinyLlama shape's down and output matrices, which kept 64-row items: 768 calls for the
/// output; each call sets up its walk anew. Decode after 50 tokens on 1 thread, Zen 4, three
/// alternated runs: TinyLlama-shape Q4_0 47.5-48.1 -> 50.2-51.1 tok/s, Q4_K_M 39.8-41.9 ->
/// 42.8-43.7).
pub(super) fn matmul(
    compute: Compute<'_>,
    w: &Matrix,
    x: &Activations,
    out: &mut [f32],
    stride: usize,
    col0: usize,
) {
    debug_assert_eq!(x.cols, w.cols);
    let input = x.input(w);
    let n_tokens = out.len() / stride;
    let rows = compute
        .tuning
        .rows_per_item(w, n_tokens, compute.parallel.threads());
    for_each_tile(
        compute.parallel,
        out,
        stride,
        col0,
        w.rows,
        rows,
        n_tokens,
        &|first, t0, outs| (compute.kernels.matmul)(w, first, &input.from_token(t0, w.cols), outs),
    );
}

fn rmsnorm_rows(compute: Compute<'_>, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = weight.len();
    per_token(compute, out, n, &|first, out| {
        for (xr, or) in x[first * n..].chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            (compute.kernels.rmsnorm)(xr, weight, eps, or);
        }
    });
}

/// A per-token step between matmuls (norms, activation quantization, the gate) over `buf`, one
/// token per `row_len` values: `f(first_token, tokens)`. A batch of 32 tokens or more is split
/// across the threads (rule 7: tokens are independent outputs), about four items per thread;
/// fewer tokens (decode, a speculative verify) run on the caller, where a parallel region would
/// cost more than it saves.
fn per_token<T: Send>(
    compute: Compute<'_>,
    buf: &mut [T],
    row_len: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let n_tokens = buf.len() / row_len.max(1);
    let threads = compute.parallel.threads();
    let per_item = if n_tokens < 32 || threads < 2 {
        n_tokens.max(1)
    } else {
        n_tokens.div_ceil(4 * threads).max(8)
    };
    for_each_rows(compute.parallel, buf, row_len, per_item, f);
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
