//! ModelConfig: the shape and hyper-parameters of a Llama-family model, read from GGUF metadata
//! or an HF config.json (and written back to either). Nothing here is hard-coded per model.

use serde_json::{json, Value as Json};

use crate::formats::gguf::{GgufFile, Value};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// Architectures the one Llama forward computes.
pub const ARCHITECTURES: [&str; 5] = ["llama", "qwen2", "qwen3", "mistral", "gemma3"];

/// How RoPE frequencies are scaled (HF `rope_scaling`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Llama 3.1's "llama3" frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: usize,
    },
    /// Plain linear position interpolation.
    Linear { factor: f32 },
    /// llama.cpp's `rope_freqs.weight` (how its converter writes Llama 3.1+ scaling): one
    /// factor per frequency, each inverse frequency divided by its factor.
    Factors(Vec<f32>),
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
    /// Attention sees only the last this many positions, the query's own included (Mistral's
    /// sliding window); None: every position. `extras.sliding_window_pattern` says which
    /// layers it applies to.
    pub sliding_window: Option<usize>,
    /// What Gemma 3 adds to the Llama layer; `Extras::default()` for the others.
    pub extras: Extras,
}

/// The activation of the FFN gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen, Mistral.
    #[default]
    Silu,
    /// GELU, tanh approximation (GeGLU): Gemma.
    GeluTanh,
}

/// Architecture features beyond Llama's, each off in `Extras::default()`; Gemma 3 turns them
/// all on. Read from metadata where the file has them, else from the values llama.cpp
/// hard-codes for the architecture (so a file means what it means there).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extras {
    pub activation: Activation,
    /// The token embeddings are multiplied by this before the first layer (Gemma: sqrt(dim),
    /// in f32, as llama.cpp's `ggml_scale(inp, sqrtf(n_embd))`); None: not scaled.
    pub embedding_scale: Option<f32>,
    /// Attention scores are `dot(q, k) * attention_scale` (rule 6); None: 1 / sqrt(head_dim).
    pub attention_scale: Option<f32>,
    /// With a sliding window: layer l is windowed ("local") when `l % n < n - 1`, so the last
    /// layer of every group of n is global (llama.cpp's swa pattern; Gemma 3: 6). None: the
    /// window applies to every layer (Mistral).
    pub sliding_window_pattern: Option<usize>,
    /// RoPE base of the windowed layers, never scaled (Gemma 3: 10000); None: `rope_theta`.
    pub rope_theta_local: Option<f32>,
    /// Every layer RMS-normalizes its attention and FFN outputs before each residual add
    /// (Gemma's `post_attention_norm` and `post_ffw_norm`).
    pub post_norms: bool,
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

    /// The sliding window of layer `l`, if that layer has one (rule 6).
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        let local = match self.extras.sliding_window_pattern {
            None => true,
            Some(n) => l % n < n - 1,
        };
        self.sliding_window.filter(|_| local)
    }

    /// Bytes of f16 cache one decode step reads with `positions` cached: every layer's K and V
    /// rows, a windowed layer's at most its window. A step reads them besides the weights.
    pub fn cache_bytes_read(&self, positions: usize) -> usize {
        (0..self.n_layers)
            .map(|l| {
                let rows = positions.min(self.layer_window(l).unwrap_or(usize::MAX));
                rows * self.kv_dim() * 2 * std::mem::size_of::<u16>()
            })
            .sum()
    }

    /// The factor of every attention score (rule 6).
    pub fn attention_scale(&self) -> f32 {
        self.extras
            .attention_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim as f32).sqrt())
    }

    /// Checks the relations the forward relies on, so a malformed file fails at load with a
    /// message instead of panicking in a kernel.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &str| Err(crate::Error::metadata("config", what.to_string()));
        if self.dim == 0 || self.hidden_dim == 0 || self.n_layers == 0 || self.vocab_size == 0 {
            return bad("dim, hidden_dim, n_layers and vocab_size must be positive");
        }
        if self.n_heads == 0
            || self.n_kv_heads == 0
            || !self.n_heads.is_multiple_of(self.n_kv_heads)
        {
            return bad("n_heads must be a positive multiple of n_kv_heads");
        }
        if self.sliding_window == Some(0) {
            return bad("a sliding window of 0 positions sees nothing");
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad("head_dim must be positive and even");
        }
        if self.context_length == 0 {
            return bad("context_length must be positive");
        }
        // Bounds that keep every allocation below ~2^40 elements on hostile metadata.
        if self.dim > 1 << 16
            || self.hidden_dim > 1 << 18
            || self.n_layers > 1024
            || self.n_heads > 1024
            || self.head_dim > 1024
            || self.vocab_size > 1 << 22
            || self.context_length > 1 << 24
        {
            return bad("dimensions are implausibly large");
        }
        if !(self.rms_eps.is_finite()
            && self.rms_eps >= 0.0
            && self.rope_theta.is_finite()
            && self.rope_theta > 0.0)
        {
            return bad("rms_eps and rope_theta must be finite, rope_theta positive");
        }
        if let Some(scaling) = &self.rope_scaling {
            scaling.validate()?;
        }
        let e = &self.extras;
        let positive = |x: Option<f32>| x.is_none_or(|x| x.is_finite() && x > 0.0);
        if !positive(e.embedding_scale) || !positive(e.attention_scale) {
            return bad("the embedding and attention scales must be finite and positive");
        }
        if !positive(e.rope_theta_local) {
            return bad("the local RoPE base must be finite and positive");
        }
        if e.sliding_window_pattern == Some(0) {
            return bad("a sliding-window pattern of 0 layers has no layer");
        }
        Ok(())
    }
}

impl RopeScaling {
    /// Factors that give the forward finite, meaningful frequencies: a factor of 0 divides every
    /// frequency by zero, and llama3's smoothing divides by `high_freq_factor - low_freq_factor`.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::metadata("rope_scaling", what.to_string()));
        let positive = |x: f32| x.is_finite() && x > 0.0;
        match *self {
            RopeScaling::Factors(ref f) => {
                if let Some(bad_factor) = f.iter().find(|&&x| !positive(x)) {
                    return bad(&format!(
                        "rope_freqs.weight holds {bad_factor}; every factor must be finite and positive"
                    ));
                }
            }
            RopeScaling::Linear { factor } => {
                if !positive(factor) {
                    return bad(&format!(
                        "linear factor {factor} must be finite and positive"
                    ));
                }
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                if !positive(factor) {
                    return bad(&format!(
                        "llama3 factor {factor} must be finite and positive"
                    ));
                }
                if !positive(low_freq_factor) || !positive(high_freq_factor) {
                    return bad(&format!("llama3 low_freq_factor {low_freq_factor} and high_freq_factor {high_freq_factor} must be finite and positive"));
                }
                if low_freq_factor == high_freq_factor {
                    return bad(&format!("llama3 low_freq_factor and high_freq_factor are both {low_freq_factor}; they must differ"));
                }
                if original_context == 0 {
                    return bad("llama3 original context length must be positive");
                }
            }
        }
        Ok(())
    }
}

/// What kind of JSON value `v` is, for messages.
fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn check_architecture(arch: &str) -> Result<String> {
    if ARCHITECTURES.contains(&arch) {
        Ok(arch.to_string())
    } else {
        Err(Error::UnsupportedArchitecture(arch.to_string()))
    }
}

impl ModelConfig {
    /// Reads the config from GGUF metadata (`{arch}.*` keys) and, where metadata is silent, from
    /// the tensor table: tied output, attention biases and QK-norm are decided by which tensors
    /// exist, because that is what the forward will find.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig> {
        let architecture = check_architecture(file.architecture()?)?;
        let key = |k: &str| format!("{architecture}.{k}");
        let dim = file.get_usize(&key("embedding_length"))?;
        let n_heads = file.get_usize(&key("attention.head_count"))?;
        let n_kv_heads = file
            .opt_usize(&key("attention.head_count_kv"))?
            .unwrap_or(n_heads);
        let head_dim = match file.opt_usize(&key("attention.key_length"))? {
            Some(d) => d,
            None if n_heads > 0 => dim / n_heads,
            None => 0, // validate() names the real problem
        };
        // The embedding's row count is what the forward indexes; metadata and the token list
        // are the fallbacks for files that lack the tensor (a broken file fails later anyway).
        let embd_rows = file
            .tensor_info("token_embd.weight")
            .and_then(|t| t.dims.get(1))
            .and_then(|&d| usize::try_from(d).ok());
        let vocab_size = match file.opt_usize(&key("vocab_size"))? {
            Some(v) => v,
            None => match embd_rows {
                Some(rows) => rows,
                None => file
                    .opt_array("tokenizer.ggml.tokens")?
                    .map_or(0, |t| t.len()),
            },
        };
        // Partial rotary embedding (RoPE on the first n dimensions of a head) is not computed:
        // refuse it rather than rotate the whole head.
        let rope_dims_key = key("rope.dimension_count");
        if let Some(rope_dims) = file.opt_usize(&rope_dims_key)? {
            if rope_dims != head_dim {
                return Err(Error::UnsupportedConfig {
                    key: rope_dims_key,
                    value: rope_dims.to_string(),
                    problem: format!(
                        "partial rotary embedding is not supported (RoPE must cover the whole head of {head_dim} dimensions)"
                    ),
                });
            }
        }
        let rope_scaling = Self::gguf_rope_scaling(file, &architecture, head_dim)?;
        let n_layers = file.get_usize(&key("block_count"))?;
        let extras = match architecture.as_str() {
            "gemma3" => Self::gemma3_extras(dim, n_heads, head_dim, n_layers),
            _ => Extras::default(),
        };
        let config = ModelConfig {
            dim,
            hidden_dim: file.get_usize(&key("feed_forward_length"))?,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
            context_length: file.get_usize(&key("context_length"))?,
            rms_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta: file.opt_f32(&key("rope.freq_base"))?.unwrap_or(10000.0),
            rope_scaling,
            tied_embeddings: file.tensor_info("output.weight").is_none(),
            attention_bias: file.tensor_info("blk.0.attn_q.bias").is_some(),
            qk_norm: file.tensor_info("blk.0.attn_q_norm.weight").is_some(),
            sliding_window: file.opt_usize(&key("attention.sliding_window"))?,
            architecture,
            extras,
        };
        if config.extras.sliding_window_pattern.is_some() && config.sliding_window.is_none() {
            // llama.cpp requires the key for gemma3.
            return Err(Error::metadata(
                format!("{}.attention.sliding_window", config.architecture),
                "missing (the architecture's local layers need it)",
            ));
        }
        config.validate()?;
        Ok(config)
    }

    /// Gemma 3 as llama.cpp loads it (`LLM_ARCH_GEMMA3` in llama-model.cpp): these are not in
    /// the file but fixed for the architecture there.
    fn gemma3_extras(dim: usize, n_heads: usize, head_dim: usize, n_layers: usize) -> Extras {
        // Gemma 3 27B (62 layers) scales by 1/sqrt(dim / n_heads), every other size by
        // 1/sqrt(head_dim) (llama.cpp's f_attention_scale, after gemma_pytorch's config).
        let attention_scale = if n_layers == 62 && n_heads > 0 {
            1.0 / ((dim / n_heads) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        Extras {
            activation: Activation::GeluTanh,
            embedding_scale: Some((dim as f32).sqrt()),
            attention_scale: Some(attention_scale),
            // Five local layers, then one global (llama.cpp: set_swa_pattern(6)).
            sliding_window_pattern: Some(6),
            // llama.cpp: rope_freq_base_train_swa = 10000, rope_freq_scale_train_swa = 1.
            rope_theta_local: Some(10000.0),
            post_norms: true,
        }
    }

    fn gguf_rope_scaling(
        file: &GgufFile,
        arch: &str,
        head_dim: usize,
    ) -> Result<Option<RopeScaling>> {
        let key = |k: &str| format!("{arch}.rope.scaling.{k}");
        let kind = file.opt_str(&key("type"))?;
        let factor = || file.get_f32(&key("factor"));
        let scaling = match kind {
            None | Some("none") => None,
            Some("linear") => Some(RopeScaling::Linear { factor: factor()? }),
            // Not written by llama.cpp (it bakes llama3 scaling into `rope_freqs.weight`), but by
            // inferno's converter, so a converted file keeps the parameters.
            Some("llama3") => Some(RopeScaling::Llama3 {
                factor: factor()?,
                low_freq_factor: file.get_f32(&key("low_freq_factor"))?,
                high_freq_factor: file.get_f32(&key("high_freq_factor"))?,
                original_context: file.get_usize(&key("original_context_length"))?,
            }),
            Some(other) => {
                return Err(Error::metadata(
                    key("type"),
                    format!("unsupported RoPE scaling '{other}'"),
                ))
            }
        };
        match (scaling, file.tensor_info("rope_freqs.weight")) {
            // llama.cpp's per-frequency factors (Llama 3.1+): head_dim / 2 of them, f32.
            (None, Some(info)) => {
                let want = head_dim / 2;
                let shape_ok = info.dims.len() == 1 && info.dims[0] == want as u64;
                if info.ty != GgmlType::F32 || !shape_ok {
                    return Err(Error::metadata(
                        "rope_freqs.weight",
                        format!(
                            "expected {want} F32 factors (head_dim / 2), got {} of shape {:?}",
                            info.ty.name(),
                            info.dims
                        ),
                    ));
                }
                let factors: Vec<f32> = file
                    .tensor_data(info)
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                Ok(Some(RopeScaling::Factors(factors)))
            }
            (scaling, _) => Ok(scaling),
        }
    }

    /// The `{arch}.*` metadata that [`ModelConfig::from_gguf`] reads back, for writers.
    pub fn to_gguf_metadata(&self) -> Vec<(String, Value)> {
        let arch = &self.architecture;
        let key = |k: &str| format!("{arch}.{k}");
        let u32_of = |n: usize| Value::U32(n as u32);
        let mut out = vec![
            (
                "general.architecture".to_string(),
                Value::String(arch.clone()),
            ),
            (key("embedding_length"), u32_of(self.dim)),
            (key("feed_forward_length"), u32_of(self.hidden_dim)),
            (key("block_count"), u32_of(self.n_layers)),
            (key("attention.head_count"), u32_of(self.n_heads)),
            (key("attention.head_count_kv"), u32_of(self.n_kv_heads)),
            (key("attention.key_length"), u32_of(self.head_dim)),
            (key("attention.value_length"), u32_of(self.head_dim)),
            (key("rope.dimension_count"), u32_of(self.head_dim)),
            (key("context_length"), u32_of(self.context_length)),
            (key("vocab_size"), u32_of(self.vocab_size)),
            (
                key("attention.layer_norm_rms_epsilon"),
                Value::F32(self.rms_eps),
            ),
            (key("rope.freq_base"), Value::F32(self.rope_theta)),
        ];
        if let Some(w) = self.sliding_window {
            out.push((key("attention.sliding_window"), u32_of(w)));
        }
        match &self.rope_scaling {
            // The factors are a tensor (rope_freqs.weight), which writers copy with the rest.
            None | Some(RopeScaling::Factors(_)) => {}
            Some(RopeScaling::Linear { factor }) => {
                out.push((key("rope.scaling.type"), Value::String("linear".into())));
                out.push((key("rope.scaling.factor"), Value::F32(*factor)));
            }
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            }) => {
                out.push((key("rope.scaling.type"), Value::String("llama3".into())));
                out.push((key("rope.scaling.factor"), Value::F32(*factor)));
                out.push((
                    key("rope.scaling.low_freq_factor"),
                    Value::F32(*low_freq_factor),
                ));
                out.push((
                    key("rope.scaling.high_freq_factor"),
                    Value::F32(*high_freq_factor),
                ));
                out.push((
                    key("rope.scaling.original_context_length"),
                    u32_of(*original_context),
                ));
            }
        }
        out
    }

    /// Reads an HF config.json. `tied_embeddings`, `attention_bias` and `qk_norm` come from the
    /// file's fields here; [`crate::formats::ModelSource::from_hf`] then corrects them by which
    /// tensors the checkpoint actually holds.
    pub fn from_hf_json(text: &str) -> Result<ModelConfig> {
        let json: Json =
            serde_json::from_str(text).map_err(|e| Error::format("config.json", e.to_string()))?;
        if !json.is_object() {
            return Err(Error::format(
                "config.json",
                format!("must be a JSON object, found {}", json_kind(&json)),
            ));
        }
        let bad = |key: &str, want: &str| {
            Error::metadata(format!("config.json {key}"), format!("expected {want}"))
        };
        let opt_usize = |key: &str| -> Result<Option<usize>> {
            match json.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| bad(key, "a non-negative integer")),
            }
        };
        let usize_of =
            |key: &str| opt_usize(key)?.ok_or_else(|| bad(key, "a non-negative integer (missing)"));
        let opt_f32 = |v: Option<&Json>, key: &str| -> Result<Option<f32>> {
            match v {
                None | Some(Json::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(|x| Some(x as f32))
                    .ok_or_else(|| bad(key, "a number")),
            }
        };
        let opt_bool = |key: &str| -> Result<Option<bool>> {
            match json.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(v) => v.as_bool().map(Some).ok_or_else(|| bad(key, "a bool")),
            }
        };

        let architecture = match json.get("model_type").and_then(Json::as_str) {
            Some(t) => t.to_string(),
            None => {
                let class = json
                    .get("architectures")
                    .and_then(|a| a.get(0))
                    .and_then(Json::as_str)
                    .unwrap_or("(none)");
                class
                    .strip_suffix("ForCausalLM")
                    .map_or(class.to_string(), str::to_lowercase)
            }
        };
        let architecture = check_architecture(&architecture)?;
        if architecture == "gemma3" {
            // Its fixed extras (norm weights + 1, window pattern, two RoPE bases) are applied
            // by llama.cpp's converter and loader; inferno reads Gemma 3 from GGUF only.
            return Err(Error::UnsupportedArchitecture(
                "gemma3 from a Hugging Face directory (convert it to GGUF with llama.cpp)".into(),
            ));
        }

        let dim = usize_of("hidden_size")?;
        let n_heads = usize_of("num_attention_heads")?;
        let n_kv_heads = opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
        let head_dim = match opt_usize("head_dim")? {
            Some(d) => d,
            None if n_heads > 0 => dim / n_heads,
            None => 0,
        };
        if let Some(factor) = opt_f32(json.get("partial_rotary_factor"), "partial_rotary_factor")? {
            if factor != 1.0 {
                return Err(Error::UnsupportedConfig {
                    key: "config.json partial_rotary_factor".into(),
                    value: factor.to_string(),
                    problem:
                        "partial rotary embedding is not supported (RoPE must cover the whole head)"
                            .into(),
                });
            }
        }
        // transformers 5 moved rope_theta and the scaling parameters into rope_parameters.
        let object_or_null = |key: &str| -> Result<Option<&Json>> {
            match json.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(v) if v.is_object() => Ok(Some(v)),
                Some(v) => Err(Error::metadata(
                    format!("config.json {key}"),
                    format!("expected an object, found {}", json_kind(v)),
                )),
            }
        };
        let rope_parameters = object_or_null("rope_parameters")?;
        let rope_theta = match opt_f32(json.get("rope_theta"), "rope_theta")? {
            Some(t) => t,
            None => opt_f32(
                rope_parameters.and_then(|p| p.get("rope_theta")),
                "rope_parameters.rope_theta",
            )?
            .unwrap_or(10000.0),
        };
        // Mistral attends over a sliding window when `sliding_window` is set; Qwen2 configs carry
        // one too but use it only with `use_sliding_window`.
        let window = match json.get("sliding_window") {
            None | Some(Json::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|w| usize::try_from(w).ok())
                    .ok_or_else(|| {
                        Error::metadata(
                            "config.json sliding_window",
                            "expected a whole number or null",
                        )
                    })?,
            ),
        };
        let sliding_window = match architecture.as_str() {
            "mistral" => window,
            _ if opt_bool("use_sliding_window")?.unwrap_or(false) => window,
            _ => None,
        };
        let scaling_json = object_or_null("rope_scaling")?.or(rope_parameters);
        let rope_scaling = match scaling_json {
            None => None,
            Some(s) => Self::hf_rope_scaling(s)?,
        };
        let config = ModelConfig {
            dim,
            hidden_dim: usize_of("intermediate_size")?,
            n_layers: usize_of("num_hidden_layers")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size: usize_of("vocab_size")?,
            context_length: usize_of("max_position_embeddings")?,
            rms_eps: opt_f32(json.get("rms_norm_eps"), "rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            tied_embeddings: opt_bool("tie_word_embeddings")?.unwrap_or(false),
            // Qwen2 configs carry no attention_bias key but always have Q/K/V biases.
            attention_bias: opt_bool("attention_bias")?.unwrap_or(architecture == "qwen2"),
            qk_norm: architecture == "qwen3",
            sliding_window,
            architecture,
            extras: Extras::default(),
        };
        config.validate()?;
        Ok(config)
    }

    fn hf_rope_scaling(s: &Json) -> Result<Option<RopeScaling>> {
        let kind = match s.get("rope_type").or_else(|| s.get("type")) {
            None => "default",
            Some(v) => v.as_str().ok_or_else(|| {
                Error::metadata(
                    "config.json rope_scaling.rope_type",
                    format!("expected a string, found {}", json_kind(v)),
                )
            })?,
        };
        let num = |key: &str| -> Result<f32> {
            s.get(key)
                .and_then(Json::as_f64)
                .map(|x| x as f32)
                .ok_or_else(|| {
                    Error::metadata(
                        format!("config.json rope_scaling.{key}"),
                        "expected a number",
                    )
                })
        };
        Ok(match kind {
            "default" => None,
            "linear" => Some(RopeScaling::Linear {
                factor: num("factor")?,
            }),
            "llama3" => Some(RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_context: s
                    .get("original_max_position_embeddings")
                    .and_then(Json::as_u64)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        Error::metadata(
                            "config.json rope_scaling.original_max_position_embeddings",
                            "expected an integer",
                        )
                    })?,
            }),
            other => {
                return Err(Error::metadata(
                    "config.json rope_scaling",
                    format!("unsupported RoPE scaling '{other}'"),
                ))
            }
        })
    }

    /// An HF config.json for this config with float32 weights, readable by transformers.
    pub fn to_hf_json(&self) -> String {
        self.to_hf_json_with_dtype("float32")
    }

    /// An HF config.json whose `torch_dtype` names the dtype the weights are written in
    /// ("float32", "float16", "bfloat16"), for `inferno convert`.
    pub fn to_hf_json_with_dtype(&self, torch_dtype: &str) -> String {
        let class = match self.architecture.as_str() {
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            "mistral" => "MistralForCausalLM",
            _ => "LlamaForCausalLM",
        };
        let rope_scaling = match &self.rope_scaling {
            // Not expressible in config.json: `inferno convert` refuses such a model.
            None | Some(RopeScaling::Factors(_)) => Json::Null,
            Some(RopeScaling::Linear { factor }) => {
                json!({ "rope_type": "linear", "factor": factor })
            }
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            }) => json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_context,
            }),
        };
        let config = json!({
            "architectures": [class],
            "model_type": self.architecture,
            "hidden_act": "silu",
            "hidden_size": self.dim,
            "intermediate_size": self.hidden_dim,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.context_length,
            "rms_norm_eps": self.rms_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": rope_scaling,
            "tie_word_embeddings": self.tied_embeddings,
            "attention_bias": self.attention_bias,
            "torch_dtype": torch_dtype,
        });
        let mut config = config;
        if let Some(w) = self.sliding_window {
            config["sliding_window"] = json!(w);
            if self.architecture != "mistral" {
                config["use_sliding_window"] = json!(true);
            }
        }
        serde_json::to_string_pretty(&config).unwrap_or_default()
    }
}
