//! Model file formats. Each parser turns bytes into a [`ModelSource`]: the config, the tensors
//! under canonical (GGUF) names, and what the tokenizer is built from. The model loader never
//! sees which format a tensor came from, except for the RoPE row order of Q/K.

pub mod gguf;
pub mod hf_dir;
pub mod names;
pub mod safetensors;

use crate::config::ModelConfig;
use crate::quant::GgmlType;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A tensor as stored: type, shape and the bytes (little-endian) it occupies.
#[derive(Debug, Clone)]
pub struct RawTensor<'a> {
    /// Canonical GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    pub ty: GgmlType,
    /// Outermost dimension first: a matrix is `[rows, cols]` with `cols` contiguous.
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

/// Row order of the Q and K projection weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkRowOrder {
    /// Hugging Face order: RoPE pairs are (i, i + head_dim/2) within a head.
    HalfSplit,
    /// llama.cpp's GGUF order for llama: RoPE pairs are (2i, 2i+1); undone at load.
    Interleaved,
}

/// What the tokenizer is built from.
#[derive(Debug, Clone)]
pub enum TokenizerSource {
    /// The text of an HF tokenizer.json.
    Json(String),
    /// GGUF `tokenizer.ggml.*` metadata (the file's metadata list, copied).
    Gguf(Vec<(String, gguf::Value)>),
}

/// Everything a model is built from, independent of the file format.
#[derive(Debug)]
pub struct ModelSource<'a> {
    pub config: ModelConfig,
    pub tensors: Vec<RawTensor<'a>>,
    pub qk_row_order: QkRowOrder,
    pub tokenizer: TokenizerSource,
    /// Jinja chat template, if the model has one.
    pub chat_template: Option<String>,
    /// Special token ids (bos, eos, ...) resolved from metadata or tokenizer_config.json.
    pub special: SpecialTokens,
    /// Told of each tensor's bytes once the weights hold their own copy, so a caller whose
    /// bytes are a memory map can drop those pages while the rest loads (peak memory stays
    /// near the weights' size instead of the file's plus the weights').
    pub release: Release<'a>,
}

/// A tensor's bytes are no longer needed (see [`ModelSource::release`]).
#[derive(Clone, Copy, Default)]
pub struct Release<'a>(pub Option<&'a dyn Fn(&[u8])>);

impl Release<'_> {
    pub fn tell(&self, bytes: &[u8]) {
        if let Some(f) = self.0 {
            f(bytes);
        }
    }
}

impl std::fmt::Debug for Release<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Release(hook)"
        } else {
            "Release(none)"
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Extra ids that end generation (e.g. `<|im_end|>`, `<|eot_id|>`).
    pub eos_extra: Vec<u32>,
    /// Whether a BOS token is prepended to raw text (SmolLM2: false).
    pub add_bos: bool,
}

impl SpecialTokens {
    /// Checks at load that every id the engine may feed the model exists in both the tokenizer
    /// and the model's `vocab_size` rows: bos, eos, the end-of-turn ids, and the tokenizer's
    /// highest id (an added token past the embedding would fail only when a prompt uses it).
    pub fn check_ids(&self, tokenizer: &Tokenizer, model_vocab: usize) -> Result<()> {
        let out_of_vocabulary = |role: String, id: u32| Error::TokenOutOfVocabulary {
            role,
            id,
            model_vocab,
            tokenizer_vocab: tokenizer.vocab_size(),
        };
        let roles = self.bos.map(|id| ("bos", id)).into_iter().chain(
            self.eos
                .map(|id| ("eos", id))
                .into_iter()
                .chain(self.eos_extra.iter().map(|&id| ("end-of-turn", id))),
        );
        for (role, id) in roles {
            if id as usize >= model_vocab || tokenizer.token_text(id).is_none() {
                return Err(out_of_vocabulary(role.to_string(), id));
            }
        }
        if let Some((id, token)) = tokenizer.highest_id() {
            if id as usize >= model_vocab {
                return Err(out_of_vocabulary(format!("tokenizer's {token:?}"), id));
            }
        }
        Ok(())
    }
}

/// Per-layer tensors the Llama forward reads, after `blk.N.`; the biases, QK norms and post
/// norms are optional (Qwen2, Qwen3, Gemma 3).
pub const LAYER_TENSORS: [&str; 16] = [
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_q.bias",
    "attn_k.bias",
    "attn_v.bias",
    "attn_q_norm.weight",
    "attn_k_norm.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
    "post_attention_norm.weight",
    "post_ffw_norm.weight",
];

/// Tensors outside the layers that the forward reads (`output.weight` is absent when tied).
pub const GLOBAL_TENSORS: [&str; 3] = ["token_embd.weight", "output_norm.weight", "output.weight"];

/// Why the forward for `config` would not read the tensor named `name` (a canonical GGUF
/// name), or `None` if it reads it. A tensor that is not read means the file describes another
/// model than the config does (e.g. a block count below the file's layers), and running it
/// anyway gives wrong output without a word.
pub fn unused_tensor_reason(name: &str, config: &ModelConfig) -> Option<String> {
    if GLOBAL_TENSORS.contains(&name) {
        return None;
    }
    if name == "rope_freqs.weight" {
        // llama.cpp's llama3 factors: inferno computes them from the llama3 parameters.
        return match config.rope_scaling {
            Some(
                crate::config::RopeScaling::Llama3 { .. } | crate::config::RopeScaling::Factors(_),
            ) => None,
            _ => Some("per-frequency RoPE factors need llama3 RoPE scaling".into()),
        };
    }
    let Some((layer, suffix)) = names::split_layer(name, "blk.") else {
        return Some("not a tensor of the Llama layout".into());
    };
    if !LAYER_TENSORS.contains(&suffix) {
        return Some(format!("the forward has no per-layer '{suffix}'"));
    }
    if suffix.starts_with("post_") && !config.extras.post_norms {
        return Some(format!(
            "'{suffix}' needs an architecture with post norms (gemma3)"
        ));
    }
    if layer >= config.n_layers {
        return Some(format!(
            "layer {layer} is past the config's {} layers",
            config.n_layers
        ));
    }
    None
}

fn unused_tensor(name: &str, config: &ModelConfig, why: String) -> Error {
    Error::UnusedTensor {
        name: name.to_string(),
        architecture: config.architecture.clone(),
        n_layers: config.n_layers,
        why,
    }
}

/// Tokens that end a turn in the chat formats we know; their ids join [`SpecialTokens::eos_extra`].
pub const END_OF_TURN_TOKENS: [&str; 4] = ["<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"];

impl<'a> ModelSource<'a> {
    pub fn tensor(&self, name: &str) -> Option<&RawTensor<'a>> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Everything a model is built from, out of a parsed GGUF file (tensor data is borrowed).
    pub fn from_gguf(file: &gguf::GgufFile<'a>) -> Result<ModelSource<'a>> {
        let config = ModelConfig::from_gguf(file)?;
        let tensors = file
            .tensors
            .iter()
            .map(|info| {
                Ok(RawTensor {
                    name: info.name.clone(),
                    ty: info.ty,
                    shape: info.shape()?,
                    data: file.tensor_data(info),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some((name, why)) = tensors
            .iter()
            .find_map(|t| Some((&t.name, unused_tensor_reason(&t.name, &config)?)))
        {
            return Err(unused_tensor(name, &config, why));
        }
        // llama.cpp's converter permutes Q/K rows for llama and mistral only; Qwen keeps HF order.
        let qk_row_order = match config.architecture.as_str() {
            "llama" | "mistral" => QkRowOrder::Interleaved,
            _ => QkRowOrder::HalfSplit,
        };
        let tokenizer_metadata: Vec<(String, gguf::Value)> = file
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned()
            .collect();
        let chat_template = file.opt_str("tokenizer.chat_template")?.map(str::to_string);
        // SentencePiece ("llama") vocabularies expect a BOS, byte-level BPE ("gpt2") ones do not.
        let add_bos_default = file.opt_str("tokenizer.ggml.model")? == Some("llama");
        let eos = file.opt_u32("tokenizer.ggml.eos_token_id")?;
        let eos_extra = match file.opt_array("tokenizer.ggml.tokens")? {
            Some(tokens) => end_of_turn_ids(tokens.iter().map(|t| t.as_str()), eos),
            None => Vec::new(),
        };
        let special = SpecialTokens {
            bos: file.opt_u32("tokenizer.ggml.bos_token_id")?,
            eos,
            eos_extra,
            add_bos: file
                .opt_bool("tokenizer.ggml.add_bos_token")?
                .unwrap_or(add_bos_default),
        };
        Ok(ModelSource {
            config,
            tensors,
            qk_row_order,
            tokenizer: TokenizerSource::Gguf(tokenizer_metadata),
            chat_template,
            special,
            release: Release::default(),
        })
    }
}

/// Ids of the [`END_OF_TURN_TOKENS`] found in a vocabulary listed in id order, except `eos`.
fn end_of_turn_ids<'t>(
    tokens: impl Iterator<Item = Option<&'t str>>,
    eos: Option<u32>,
) -> Vec<u32> {
    tokens
        .enumerate()
        .filter(|(_, t)| t.is_some_and(|t| END_OF_TURN_TOKENS.contains(&t)))
        .filter_map(|(id, _)| u32::try_from(id).ok())
        .filter(|&id| Some(id) != eos)
        .collect()
}
