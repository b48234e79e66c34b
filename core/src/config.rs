//! ModelConfig: the shape and hyper-parameters of a Llama-family model, read from GGUF metadata
//! or an HF config.json. Nothing here is hard-coded per model.

/// How RoPE frequencies are scaled (HF `rope_scaling`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Llama 3.1's "llama3" frequency-dependent scaling.
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_context: usize },
    /// Plain linear position interpolation.
    Linear { factor: f32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// "llama", "qwen2", "qwen3", "mistral": all computed by the one Llama forward.
    pub architecture: String,
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    /// The output projection is the token embedding (no `output.weight`).
    pub tied_embeddings: bool,
    /// Q, K and V projections carry biases (Qwen2).
    pub attention_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3).
    pub qk_norm: bool,
}

impl ModelConfig {
    /// Width of one layer's K (and V) vectors.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of one layer's Q vector.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Checks the relations the forward relies on, so a malformed file fails at load with a
    /// message instead of panicking in a kernel.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &str| Err(crate::Error::metadata("config", what.to_string()));
        if self.dim == 0 || self.hidden_dim == 0 || self.n_layers == 0 || self.vocab_size == 0 {
            return bad("dim, hidden_dim, n_layers and vocab_size must be positive");
        }
        if self.n_heads == 0 || self.n_kv_heads == 0 || self.n_heads % self.n_kv_heads != 0 {
            return bad("n_heads must be a positive multiple of n_kv_heads");
        }
        if self.head_dim == 0 || self.head_dim % 2 != 0 {
            return bad("head_dim must be positive and even");
        }
        if self.context_length == 0 {
            return bad("context_length must be positive");
        }
        // Bounds that keep every allocation below ~2^40 elements on hostile metadata.
        if self.dim > 1 << 16 || self.hidden_dim > 1 << 18 || self.n_layers > 1024
            || self.n_heads > 1024 || self.head_dim > 1024 || self.vocab_size > 1 << 22
            || self.context_length > 1 << 24
        {
            return bad("dimensions are implausibly large");
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) || !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad("rms_eps and rope_theta must be finite, rope_theta positive");
        }
        Ok(())
    }
}
