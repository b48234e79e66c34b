//! The forward against an independent one: a plain-loops f64 transformer written here from the
//! architectures' definitions (not from our code), on random f32 weights written as GGUF, for
//! what the real test model does not exercise: Qwen2's Q/K/V biases and half-split RoPE,
//! Qwen3's QK-norm, per-frequency RoPE factors (Llama 3 GGUFs' rope_freqs.weight), Mistral's
//! sliding window and Gemma 3's layer (scaled embeddings, post norms, GELU-tanh, a window on
//! five layers of six with their own RoPE base). Our f32 path agrees within 1e-4 of the logits'
//! scale; the windowed models also keep the contract (batched == token by token, bitwise) on
//! their quantized path.

use inferno_core::config::{Activation, Extras, ModelConfig};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::formats::gguf::GgufWriter;
use inferno_core::model::WeightDtype;
use inferno_core::quant::GgmlType;
use inferno_core::session::PREFILL_CHUNK;
use inferno_native::synthetic::SplitMix64;
use inferno_tests::smollm2_tokenizer_metadata;

const VOCAB: usize = 49152;

/// The weights as f64 row-major matrices `[rows][cols]` (GGUF row order).
struct Model {
    c: ModelConfig,
    rope_factors: Option<Vec<f64>>,
    embd: Vec<f64>,
    out_norm: Vec<f64>,
    layers: Vec<Layer>,
}

struct Layer {
    attn_norm: Vec<f64>,
    wq: Vec<f64>,
    wk: Vec<f64>,
    wv: Vec<f64>,
    bias: Option<[Vec<f64>; 3]>,
    qk_norm: Option<[Vec<f64>; 2]>,
    wo: Vec<f64>,
    /// Gemma's post_attention_norm and post_ffw_norm.
    post_norms: Option<[Vec<f64>; 2]>,
    ffn_norm: Vec<f64>,
    wg: Vec<f64>,
    wu: Vec<f64>,
    wd: Vec<f64>,
}

fn config(arch: &str) -> ModelConfig {
    ModelConfig {
        architecture: arch.into(),
        dim: 64,
        hidden_dim: 96,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        vocab_size: VOCAB,
        context_length: 256,
        rms_eps: 1e-5,
        rope_theta: 10000.0,
        rope_scaling: None,
        tied_embeddings: true,
        attention_bias: arch == "qwen2",
        qk_norm: arch == "qwen3",
        sliding_window: None,
        extras: Default::default(),
    }
}

/// Random weights for `c`, written as an F32 GGUF (with `rope_factors` as rope_freqs.weight),
/// and the same weights in f64.
fn model(c: ModelConfig, rope_factors: Option<Vec<f32>>, seed: u64) -> (Vec<u8>, Model) {
    let mut rng = SplitMix64(seed);
    let mut w = GgufWriter::new();
    for (k, v) in c.to_gguf_metadata() {
        w.add_metadata(k, v).unwrap();
    }
    for (k, v) in smollm2_tokenizer_metadata() {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    let mut tensor = |w: &mut GgufWriter, name: String, shape: &[usize], around: f32, a: f32| {
        let n: usize = shape.iter().product();
        let x: Vec<f32> = (0..n).map(|_| around + rng.uniform(a)).collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, GgmlType::F32, shape, bytes).unwrap();
        x.iter().map(|&v| v as f64).collect::<Vec<f64>>()
    };
    let (d, h, q, kv, hd) = (c.dim, c.hidden_dim, c.q_dim(), c.kv_dim(), c.head_dim);
    let a = |cols: usize| 1.0 / (cols as f32).sqrt();
    let embd = tensor(&mut w, "token_embd.weight".into(), &[VOCAB, d], 0.0, 1.0);
    let out_norm = tensor(&mut w, "output_norm.weight".into(), &[d], 1.0, 0.1);
    let mut layers = Vec::new();
    for l in 0..c.n_layers {
        let name = |s: &str| format!("blk.{l}.{s}");
        let attn_norm = tensor(&mut w, name("attn_norm.weight"), &[d], 1.0, 0.1);
        let wq = tensor(&mut w, name("attn_q.weight"), &[q, d], 0.0, a(d));
        let wk = tensor(&mut w, name("attn_k.weight"), &[kv, d], 0.0, a(d));
        let wv = tensor(&mut w, name("attn_v.weight"), &[kv, d], 0.0, a(d));
        let bias = c.attention_bias.then(|| {
            [
                tensor(&mut w, name("attn_q.bias"), &[q], 0.0, 0.5),
                tensor(&mut w, name("attn_k.bias"), &[kv], 0.0, 0.5),
                tensor(&mut w, name("attn_v.bias"), &[kv], 0.0, 0.5),
            ]
        });
        let qk_norm = c.qk_norm.then(|| {
            [
                tensor(&mut w, name("attn_q_norm.weight"), &[hd], 1.0, 0.3),
                tensor(&mut w, name("attn_k_norm.weight"), &[hd], 1.0, 0.3),
            ]
        });
        let wo = tensor(&mut w, name("attn_output.weight"), &[d, q], 0.0, a(q));
        let post_norms = c.extras.post_norms.then(|| {
            [
                tensor(&mut w, name("post_attention_norm.weight"), &[d], 1.0, 0.3),
                tensor(&mut w, name("post_ffw_norm.weight"), &[d], 1.0, 0.3),
            ]
        });
        let ffn_norm = tensor(&mut w, name("ffn_norm.weight"), &[d], 1.0, 0.1);
        let wg = tensor(&mut w, name("ffn_gate.weight"), &[h, d], 0.0, a(d));
        let wu = tensor(&mut w, name("ffn_up.weight"), &[h, d], 0.0, a(d));
        let wd = tensor(&mut w, name("ffn_down.weight"), &[d, h], 0.0, a(h));
        layers.push(Layer {
            attn_norm,
            wq,
            wk,
            wv,
            bias,
            qk_norm,
            wo,
            post_norms,
            ffn_norm,
            wg,
            wu,
            wd,
        });
    }
    if let Some(f) = &rope_factors {
        let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor("rope_freqs.weight", GgmlType::F32, &[f.len()], bytes)
            .unwrap();
    }
    let mut c = c;
    if let Some(f) = &rope_factors {
        c.rope_scaling = Some(inferno_core::config::RopeScaling::Factors(f.clone()));
    }
    let m = Model {
        c,
        rope_factors: rope_factors.map(|f| f.iter().map(|&v| v as f64).collect()),
        embd,
        out_norm,
        layers,
    };
    (w.to_bytes(), m)
}

fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * r * g).collect()
}

/// RoPE on one head at position `pos`: Llama and Mistral GGUFs rotate the pairs (2i, 2i + 1),
/// Qwen's and Gemma's the pairs (i, i + head_dim / 2); frequency i is theta^(-2i / head_dim) /
/// factor_i.
fn rope(m: &Model, head: &mut [f64], pos: usize, theta: f64) {
    let hd = head.len();
    let interleaved = matches!(m.c.architecture.as_str(), "llama" | "mistral");
    for i in 0..hd / 2 {
        let mut f = theta.powf(-((2 * i) as f64) / hd as f64);
        if let Some(factors) = &m.rope_factors {
            f /= factors[i];
        }
        let (s, c) = (pos as f64 * f).sin_cos();
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + hd / 2)
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

/// Logits at every position of `tokens`.
fn forward_f64(m: &Model, tokens: &[u32]) -> Vec<Vec<f64>> {
    let c = &m.c;
    let (d, hd, eps) = (c.dim, c.head_dim, c.rms_eps as f64);
    let group = c.n_heads / c.n_kv_heads;
    let gemma = c.architecture == "gemma3";
    // Gemma multiplies the embeddings by sqrt(dim).
    let embd_scale = if gemma { (d as f64).sqrt() } else { 1.0 };
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            let row = &m.embd[t as usize * d..(t as usize + 1) * d];
            row.iter().map(|v| v * embd_scale).collect()
        })
        .collect();
    for (li, l) in m.layers.iter().enumerate() {
        // Gemma 3: five windowed layers with RoPE base 10000, then one global layer.
        let local = !gemma || li % 6 < 5;
        let window = c.sliding_window.filter(|_| local);
        let theta = if gemma && local {
            10000.0
        } else {
            c.rope_theta as f64
        };
        let post_norm = |y: Vec<f64>, which: usize| match &l.post_norms {
            Some(n) => rmsnorm(&y, &n[which], eps),
            None => y,
        };
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        let mut qs = Vec::new();
        for (p, x) in xs.iter().enumerate() {
            let h = rmsnorm(x, &l.attn_norm, eps);
            let (mut q, mut k, mut v) = (matvec(&l.wq, &h), matvec(&l.wk, &h), matvec(&l.wv, &h));
            if let Some([bq, bk, bv]) = &l.bias {
                for (y, b) in [(&mut q, bq), (&mut k, bk), (&mut v, bv)] {
                    y.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                }
            }
            for (y, norm) in [(&mut q, 0), (&mut k, 1)] {
                for head in y.chunks_exact_mut(hd) {
                    if let Some(n) = &l.qk_norm {
                        let normed = rmsnorm(head, &n[norm], eps);
                        head.copy_from_slice(&normed);
                    }
                    rope(m, head, p, theta);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for (p, x) in xs.iter_mut().enumerate() {
            let first = window.map_or(0, |w| (p + 1).saturating_sub(w));
            let mut att = vec![0.0; c.q_dim()];
            for head in 0..c.n_heads {
                let kvh = head / group;
                let q = &qs[p][head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (first..=p)
                    .map(|s| {
                        let k = &ks[s][kvh * hd..(kvh + 1) * hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for (s, w) in (first..=p).zip(&e) {
                    let v = &vs[s][kvh * hd..(kvh + 1) * hd];
                    for (o, vv) in att[head * hd..(head + 1) * hd].iter_mut().zip(v) {
                        *o += w / total * vv;
                    }
                }
            }
            let o = post_norm(matvec(&l.wo, &att), 0);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rmsnorm(x, &l.ffn_norm, eps);
            let (g, u) = (matvec(&l.wg, &h), matvec(&l.wu, &h));
            let act = |g: f64| {
                if gemma {
                    // GELU, tanh approximation.
                    let k = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * g * (1.0 + (k * (g + 0.044715 * g * g * g)).tanh())
                } else {
                    g / (1.0 + (-g).exp())
                }
            };
            let a: Vec<f64> = g.iter().zip(&u).map(|(&g, u)| act(g) * u).collect();
            let down = post_norm(matvec(&l.wd, &a), 1);
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
    }
    xs.iter()
        .map(|x| matvec(&m.embd, &rmsnorm(x, &m.out_norm, eps)))
        .collect()
}

const PROMPT: [u32; 12] = [504, 2988, 314, 42, 216, 34, 32, 7042, 30, 198, 1116, 29];

/// Our f32 path against the f64 forward, every position; returns the largest difference.
fn check(c: ModelConfig, factors: Option<Vec<f32>>, what: &str) -> f64 {
    let (bytes, m) = model(c, factors, 77);
    let options = EngineOptions {
        dtype: WeightDtype::F32,
        ..Default::default()
    };
    let engine = Engine::from_gguf_bytes(&bytes, options).expect("model loads");
    assert_eq!(engine.config(), &m.c, "{what}: config read back");
    let ours = engine.new_session().append_all_logits(&PROMPT).unwrap();
    let want = forward_f64(&m, &PROMPT);
    let scale = want.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
    let mut worst = 0.0f64;
    for (p, row) in want.iter().enumerate() {
        for (i, &w) in row.iter().enumerate() {
            worst = worst.max((ours[p * VOCAB + i] as f64 - w).abs());
        }
    }
    eprintln!("{what}: max |f32 - f64| = {worst:.2e}, logits up to {scale:.2}");
    assert!(
        worst <= 1e-4 * scale.max(1.0),
        "{what}: {worst} (scale {scale})"
    );
    worst
}

#[test]
fn llama_plain_and_with_rope_freqs_factors_agree_with_f64_within_1e_5() {
    check(config("llama"), None, "llama");
    let factors: Vec<f32> = (0..8).map(|i| 1.0 + 0.5 * i as f32).collect();
    check(
        config("llama"),
        Some(factors),
        "llama with rope_freqs.weight",
    );
}

#[test]
fn qwen2_biases_and_qwen3_qk_norm_half_split_rope_agree_with_f64_within_1e_5() {
    check(config("qwen2"), None, "qwen2 (biases)");
    check(config("qwen3"), None, "qwen3 (QK-norm)");
}

/// What `ModelConfig::from_gguf` reads for a gemma3 file of this shape: llama.cpp's fixed
/// pattern of 6, local base 10000, 1/sqrt(head_dim), sqrt(dim).
fn gemma3_config(window: usize) -> ModelConfig {
    let c = ModelConfig {
        n_layers: 6,
        rope_theta: 1e6,
        qk_norm: true,
        sliding_window: Some(window),
        ..config("gemma3")
    };
    ModelConfig {
        extras: Extras {
            activation: Activation::GeluTanh,
            embedding_scale: Some((c.dim as f32).sqrt()),
            attention_scale: Some(1.0 / (c.head_dim as f32).sqrt()),
            sliding_window_pattern: Some(6),
            rope_theta_local: Some(10000.0),
            post_norms: true,
        },
        ..c
    }
}

#[test]
fn gemma3_cache_read_per_step_window_8_at_100_positions_is_17920_bytes() {
    // Five windowed layers read 8 rows, the sixth all 100; K and V of 2 heads x 16, 2 bytes.
    let c = gemma3_config(8);
    assert_eq!(c.kv_dim(), 32);
    assert_eq!(c.cache_bytes_read(100), 5 * 8 * 32 * 4 + 100 * 32 * 4);
    assert_eq!(c.cache_bytes_read(5), 6 * 5 * 32 * 4);
}

#[test]
fn gemma3_six_layers_window_4_agrees_with_f64_and_batched_equals_token_by_token() {
    let c = gemma3_config(4);
    check(c.clone(), None, "gemma3, window 4");
    let (bytes, _) = model(c, None, 77);
    let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default()).unwrap();
    let batched = engine.new_session().append_all_logits(&PROMPT).unwrap();
    assert_token_by_token_equals(&engine, &batched);
}

/// The contract on the quantized cache path: one token at a time gives `batched`'s bits.
fn assert_token_by_token_equals(engine: &Engine, batched: &[f32]) {
    let mut s = engine.new_session();
    let mut stepwise = Vec::new();
    for &t in &PROMPT {
        stepwise.extend(s.append_all_logits(&[t]).unwrap());
    }
    assert_eq!(stepwise.len(), batched.len());
    assert!(batched
        .iter()
        .zip(&stepwise)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn mistral_sliding_window_5_agrees_with_f64_and_batched_equals_token_by_token() {
    let c = ModelConfig {
        sliding_window: Some(5),
        ..config("mistral")
    };
    check(c.clone(), None, "mistral, window 5");
    // Without the window the logits differ once the window cuts (position 5 on).
    let (bytes, _) = model(c.clone(), None, 77);
    let (full, _) = model(config("mistral"), None, 77);
    let logits = |b: &[u8]| {
        Engine::from_gguf_bytes(b, EngineOptions::default())
            .unwrap()
            .new_session()
            .append_all_logits(&PROMPT)
            .unwrap()
    };
    let (windowed, unwindowed) = (logits(&bytes), logits(&full));
    assert_eq!(windowed[..5 * VOCAB], unwindowed[..5 * VOCAB]);
    assert_ne!(windowed[5 * VOCAB..], unwindowed[5 * VOCAB..]);
    let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default()).unwrap();
    assert_token_by_token_equals(&engine, &windowed);
}

/// A window of 5 keeps at most 4 windows' worth of positions (2 * (2W - 1) = 18) in every
/// layer's cache over 60 decoded tokens, with every position's logits equal to one batched
/// forward's; a rollback of W positions needs nothing dropped, and a truncation past what was
/// kept prefills the prefix again: the same bits either way.
#[test]
fn mistral_window_5_cache_holds_at_most_18_positions_over_60_and_truncations_keep_the_bits() {
    let c = ModelConfig {
        sliding_window: Some(5),
        ..config("mistral")
    };
    let layers = c.n_layers;
    let (bytes, _) = model(c, None, 78);
    let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default()).unwrap();
    let tokens: Vec<u32> = (0..60).map(|i| PROMPT[i % 12] + i as u32).collect();
    let batched = engine.new_session().append_all_logits(&tokens).unwrap();
    let at = |p: usize| &batched[p * VOCAB..(p + 1) * VOCAB];
    let same = |got: &[f32], p: usize| {
        assert!(
            got.iter()
                .zip(at(p))
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "position {p}"
        );
    };
    let mut s = engine.new_session();
    for (p, &t) in tokens.iter().enumerate() {
        same(&s.append_all_logits(&[t]).unwrap(), p);
        for l in 0..layers {
            assert!(s.cache_positions_held(l) <= 18, "layer {l} at {p}");
        }
    }
    // Back 5 (a rejected draft, a regenerated reply): the kept rows still serve.
    let held = s.cache_positions_held(0);
    s.truncate(55);
    assert_eq!(s.cache_positions_held(0), held - 5);
    same(
        &s.append_all_logits(&tokens[55..]).unwrap()[4 * VOCAB..],
        59,
    );
    // Back to 10: dropped rows are needed, so the 10 are prefilled again on the next append.
    s.truncate(10);
    let again = s.append_all_logits(&tokens[10..]).unwrap();
    for p in 10..60 {
        same(&again[(p - 10) * VOCAB..(p - 9) * VOCAB], p);
    }
}

/// A prefill longer than [`PREFILL_CHUNK`] (512) runs a chunk per forward (512 + 512 + 176):
/// the last logits equal one batched forward's, and the windowed layers are trimmed as it goes.
#[test]
fn mistral_window_5_prefill_of_1200_tokens_in_chunks_equals_one_batch() {
    let c = ModelConfig {
        sliding_window: Some(5),
        context_length: 2048,
        ..config("mistral")
    };
    let (bytes, _) = model(c, None, 79);
    let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default()).unwrap();
    let tokens: Vec<u32> = (0..1200).map(|i| (i * 7919 % VOCAB) as u32).collect();
    assert!(tokens.len() > 2 * PREFILL_CHUNK);
    let batched = engine.new_session().append_all_logits(&tokens).unwrap();
    let mut s = engine.new_session();
    s.append(&tokens).unwrap();
    assert!(s.cache_positions_held(0) <= 18);
    let last = s.logits().unwrap();
    assert!(last
        .iter()
        .zip(&batched[1199 * VOCAB..])
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}
