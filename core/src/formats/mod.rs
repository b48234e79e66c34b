//! Model file formats. Each parser turns bytes into a [`ModelSource`]: the config, the tensors
//! under canonical (GGUF) names, and what the tokenizer is built from. The model loader never
//! sees which format a tensor came from, except for the RoPE row order of Q/K.

pub mod gguf;
pub mod hf_dir;
pub mod names;
pub mod safetensors;

use crate::config::ModelConfig;
use crate::quant::GgmlType;

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

impl<'a> ModelSource<'a> {
    pub fn tensor(&self, name: &str) -> Option<&RawTensor<'a>> {
        self.tensors.iter().find(|t| t.name == name)
    }
}
