//! Random-weight Llama GGUFs of any shape: `inferno synthetic` writes one for the bench (the
//! TinyLlama-1.1B shape, bigger than the caches, so decode is bandwidth-bound), and the tests build
//! theirs here to cover shapes the real model lacks. The tokenizer metadata is copied from a real
//! GGUF, so prompts tokenize as they would for that model.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use inferno_core::config::ModelConfig;
use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_core::quant::kquants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, KBlock, QK_K,
};
use inferno_core::quant::{f32_to_f16, quantize_bytes, GgmlType};

/// Dimensions of a synthetic Llama model: the part of a [`ModelConfig`] the generator can
/// write (no biases, QK norms or RoPE scaling), so a shape cannot ask for tensors it never makes.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticShape {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rows of the embedding. With SmolLM2's tokenizer (49152 tokens) a smaller vocab means the
    /// tokenizer can produce ids the model does not have.
    pub vocab_size: usize,
    pub context_length: usize,
    pub tied_embeddings: bool,
    pub rope_theta: f32,
    pub rms_eps: f32,
}

/// SmolLM2's vocabulary size: synthetic models reuse its tokenizer.
pub const SMOLLM2_VOCAB: usize = 49152;

/// The shapes `inferno synthetic --shape` knows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeName {
    #[value(name = "tiny")]
    Tiny,
    #[value(name = "untied")]
    Untied,
    #[value(name = "head-dim-128")]
    HeadDim128,
    #[value(name = "tinyllama-1.1b")]
    TinyLlama1_1B,
}

impl ShapeName {
    pub fn shape(self) -> SyntheticShape {
        match self {
            ShapeName::Tiny => SyntheticShape::tiny(),
            ShapeName::Untied => SyntheticShape::untied(),
            ShapeName::HeadDim128 => SyntheticShape::head_dim_128(),
            ShapeName::TinyLlama1_1B => SyntheticShape::tinyllama_1_1b(),
        }
    }
}

/// Matrix types `inferno synthetic --type` writes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum MatrixType {
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    Q5_1,
    #[value(name = "q8_0")]
    Q8_0,
    /// Random super-blocks (every field drawn at random, not quantized weights).
    #[value(name = "q4_k")]
    Q4_K,
    #[value(name = "q6_k")]
    Q6_K,
    /// Quantized by llama-quantize's IQ4_NL / IQ4_XS quantizer.
    #[value(name = "iq4_nl")]
    IQ4_NL,
    #[value(name = "iq4_xs")]
    IQ4_XS,
    #[value(name = "f16")]
    F16,
    #[value(name = "bf16")]
    Bf16,
    #[value(name = "f32")]
    F32,
}

impl MatrixType {
    pub fn ggml(self) -> GgmlType {
        match self {
            MatrixType::Q4_0 => GgmlType::Q4_0,
            MatrixType::Q4_1 => GgmlType::Q4_1,
            MatrixType::Q5_0 => GgmlType::Q5_0,
            MatrixType::Q5_1 => GgmlType::Q5_1,
            MatrixType::Q8_0 => GgmlType::Q8_0,
            MatrixType::Q4_K => GgmlType::Q4_K,
            MatrixType::Q6_K => GgmlType::Q6_K,
            MatrixType::IQ4_NL => GgmlType::IQ4_NL,
            MatrixType::IQ4_XS => GgmlType::IQ4_XS,
            MatrixType::F16 => GgmlType::F16,
            MatrixType::Bf16 => GgmlType::BF16,
            MatrixType::F32 => GgmlType::F32,
        }
    }
}

impl SyntheticShape {
    /// Small and fast: 2 layers of dim 64, GQA 4:2, head_dim 16, tied.
    pub fn tiny() -> Self {
        SyntheticShape {
            dim: 64,
            hidden_dim: 128,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            vocab_size: SMOLLM2_VOCAB,
            context_length: 512,
            tied_embeddings: true,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
        }
    }

    /// [`SyntheticShape::tiny`] with a separate output matrix.
    pub fn untied() -> Self {
        SyntheticShape {
            tied_embeddings: false,
            ..Self::tiny()
        }
    }

    /// head_dim 128 without GQA: dim 256 = 2 heads of 128, 2 KV heads.
    pub fn head_dim_128() -> Self {
        SyntheticShape {
            dim: 256,
            hidden_dim: 512,
            n_heads: 2,
            n_kv_heads: 2,
            head_dim: 128,
            ..Self::tiny()
        }
    }

    /// TinyLlama-1.1B's shape (22 layers, dim 2048, 32 heads, 4 KV heads, FFN 5632, untied), for
    /// the bench. The vocabulary is SmolLM2's 49152 rather than TinyLlama's 32000 so that every id
    /// the real tokenizer produces exists: the output matmul is 1.5x TinyLlama's.
    pub fn tinyllama_1_1b() -> Self {
        SyntheticShape {
            dim: 2048,
            hidden_dim: 5632,
            n_layers: 22,
            n_heads: 32,
            n_kv_heads: 4,
            head_dim: 64,
            vocab_size: SMOLLM2_VOCAB,
            context_length: 2048,
            tied_embeddings: false,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
        }
    }

    /// The config [`ModelConfig::from_gguf`] reads back from [`synthetic_gguf`]'s file.
    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            architecture: "llama".into(),
            dim: self.dim,
            hidden_dim: self.hidden_dim,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            vocab_size: self.vocab_size,
            context_length: self.context_length,
            rms_eps: self.rms_eps,
            rope_theta: self.rope_theta,
            rope_scaling: None,
            tied_embeddings: self.tied_embeddings,
            attention_bias: false,
            qk_norm: false,
            sliding_window: None,
            extras: Default::default(),
        }
    }
}

/// splitmix64: tiny, portable, and good enough for random weights and bench prompts.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-a, a), from the top 24 bits (exact in f32).
    pub fn uniform(&mut self, a: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * unit - 1.0) * a
    }

    /// One of `items`, uniformly (up to the negligible modulo bias).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len() as u64) as usize]
    }
}

/// The `tokenizer.*` metadata of a GGUF, to give a synthetic model a real tokenizer.
pub fn tokenizer_metadata(gguf: &GgufFile) -> Vec<(String, Value)> {
    gguf.metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
        .collect()
}

/// For a K-quant, the f16 (d, dmin) that make its random super-blocks' values about ±a
/// (typical scale x quant products differ per type); None for the other types.
fn k_block_scale(ty: GgmlType, a: f32) -> Option<(u16, u16)> {
    let (d, dmin) = match ty {
        GgmlType::Q2_K => (a / 12.0, a / 16.0),
        GgmlType::Q3_K => (a / 32.0, 0.0),
        GgmlType::Q4_K => (a / 512.0, a / 512.0),
        GgmlType::Q5_K => (a / 1024.0, a / 1024.0),
        GgmlType::Q6_K => (a / 1024.0, 0.0),
        _ => return None,
    };
    Some((f32_to_f16(d), f32_to_f16(dmin)))
}

/// `n` elements of random K-quant super-blocks of type `ty` with the given scales.
fn random_k_bytes(rng: &mut SplitMix64, ty: GgmlType, n: usize, d: u16, dmin: u16) -> Vec<u8> {
    fn blocks<B: KBlock>(rng: &mut SplitMix64, n: usize, d: u16, dmin: u16) -> Vec<u8> {
        let mut out = Vec::with_capacity(n / QK_K * B::BYTES);
        for _ in 0..n / QK_K {
            let raw: Vec<u8> = (0..B::BYTES).map(|_| rng.next_u64() as u8).collect();
            let mut b = B::from_bytes(&raw);
            b.set_scales(d, dmin);
            b.to_bytes(&mut out);
        }
        out
    }
    match ty {
        GgmlType::Q2_K => blocks::<BlockQ2K>(rng, n, d, dmin),
        GgmlType::Q3_K => blocks::<BlockQ3K>(rng, n, d, dmin),
        GgmlType::Q4_K => blocks::<BlockQ4K>(rng, n, d, dmin),
        GgmlType::Q5_K => blocks::<BlockQ5K>(rng, n, d, dmin),
        GgmlType::Q6_K => blocks::<BlockQ6K>(rng, n, d, dmin),
        _ => unreachable!("random_k_bytes is called for K-quants only"),
    }
}

/// A random-weight Llama GGUF of the given shape: matrices of type `ty` (uniform in
/// ±1/sqrt(cols)), F32 norms near 1.0, the given tokenizer metadata. Same seed, same bytes.
pub fn synthetic_gguf(
    shape: &SyntheticShape,
    seed: u64,
    ty: GgmlType,
    tokenizer: &[(String, Value)],
) -> Result<GgufWriter<'static>> {
    let config = shape.config();
    config.validate().context("invalid synthetic shape")?;
    let mut writer = GgufWriter::new();
    for (key, value) in config.to_gguf_metadata() {
        writer.add_metadata(key, value)?;
    }
    let name = format!("synthetic llama seed {seed}");
    writer.add_metadata("general.name", Value::String(name))?;
    for (key, value) in tokenizer {
        writer.add_metadata(key.clone(), value.clone())?;
    }

    let mut rng = SplitMix64(seed);
    let mut matrix = |name: String, rows: usize, cols: usize| -> Result<_> {
        if !cols.is_multiple_of(ty.block_len()) {
            bail!(
                "{name}: rows of {cols} are not whole {} blocks of {}; pick a shape whose \
                 dimensions are multiples of {}",
                ty.name(),
                ty.block_len(),
                ty.block_len()
            );
        }
        let a = 1.0 / (cols as f32).sqrt();
        let bytes = match k_block_scale(ty, a) {
            // K-quants have no quantizer yet: random super-blocks, scaled to about ±a.
            Some((d, dmin)) => random_k_bytes(&mut rng, ty, rows * cols, d, dmin),
            None => {
                let x: Vec<f32> = (0..rows * cols).map(|_| rng.uniform(a)).collect();
                quantize_bytes(ty, &x)?
            }
        };
        Ok((name, ty, vec![rows, cols], bytes))
    };
    let (dim, hidden) = (shape.dim, shape.hidden_dim);
    let (q_dim, kv_dim) = (config.q_dim(), config.kv_dim());
    let mut tensors = vec![matrix("token_embd.weight".into(), shape.vocab_size, dim)?];
    if !shape.tied_embeddings {
        tensors.push(matrix("output.weight".into(), shape.vocab_size, dim)?);
    }
    for l in 0..shape.n_layers {
        tensors.push(matrix(format!("blk.{l}.attn_q.weight"), q_dim, dim)?);
        tensors.push(matrix(format!("blk.{l}.attn_k.weight"), kv_dim, dim)?);
        tensors.push(matrix(format!("blk.{l}.attn_v.weight"), kv_dim, dim)?);
        tensors.push(matrix(format!("blk.{l}.attn_output.weight"), dim, q_dim)?);
        tensors.push(matrix(format!("blk.{l}.ffn_gate.weight"), hidden, dim)?);
        tensors.push(matrix(format!("blk.{l}.ffn_up.weight"), hidden, dim)?);
        tensors.push(matrix(format!("blk.{l}.ffn_down.weight"), dim, hidden)?);
    }
    let mut norm = |name: String| {
        let x: Vec<f32> = (0..dim).map(|_| 1.0 + rng.uniform(0.1)).collect();
        (
            name,
            GgmlType::F32,
            vec![dim],
            quantize_bytes(GgmlType::F32, &x).expect("f32 always encodes"),
        )
    };
    tensors.push(norm("output_norm.weight".into()));
    for l in 0..shape.n_layers {
        tensors.push(norm(format!("blk.{l}.attn_norm.weight")));
        tensors.push(norm(format!("blk.{l}.ffn_norm.weight")));
    }
    for (name, ty, dims, data) in tensors {
        writer.add_tensor(name, ty, &dims, data)?;
    }
    Ok(writer)
}

/// `inferno synthetic`: writes [`synthetic_gguf`] to `output`, with the tokenizer of `tokenizer_from`.
pub fn write(
    output: &Path,
    shape: ShapeName,
    ty: GgmlType,
    seed: u64,
    tokenizer_from: &Path,
) -> Result<()> {
    let source = crate::load::ModelFiles::open(tokenizer_from)?;
    let tokenizer = match &source {
        crate::load::ModelFiles::Gguf(map) => tokenizer_metadata(&GgufFile::parse(map)?),
        crate::load::ModelFiles::Hf { .. } => anyhow::bail!(
            "--tokenizer-from must be a GGUF file ({} is a directory)",
            tokenizer_from.display()
        ),
    };
    let writer = synthetic_gguf(&shape.shape(), seed, ty, &tokenizer)?;
    crate::convert::write_gguf_atomically(&writer, output)?;
    eprintln!("wrote {}", output.display());
    Ok(())
}
