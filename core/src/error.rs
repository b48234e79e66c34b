//! The one error type of inferno-core. Every variant carries the context a user needs to act on
//! it (which tensor, which offset, which key); nothing that came from a file or a user panics.

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "file is truncated: {what} needs {needed} bytes at offset {offset}, but the file has {len}"
    )]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        len: u64,
    },

    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },

    #[error("unsupported GGUF version {version} (supported: 2, 3)")]
    UnsupportedGgufVersion { version: u32 },

    #[error("tensor '{name}': unsupported tensor type {ggml_type} ({type_name})")]
    UnsupportedTensorType {
        name: String,
        ggml_type: u32,
        type_name: String,
    },

    #[error("tensor '{name}': expected shape {expected:?}, got {got:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },

    #[error("tensor '{name}' ({ty}): {rows}x{cols} elements take {expected_bytes} bytes, the tensor has {got_bytes}")]
    TensorBytes {
        name: String,
        ty: &'static str,
        rows: usize,
        cols: usize,
        expected_bytes: u64,
        got_bytes: u64,
    },

    #[error("tensor '{name}': unsupported safetensors dtype {dtype} (supported: F32, F16, BF16)")]
    UnsupportedSafetensorsDtype { name: String, dtype: String },

    #[error("tensor '{name}' is not used by a {n_layers}-layer {architecture} model ({why}); refusing to ignore it")]
    UnusedTensor {
        name: String,
        architecture: String,
        n_layers: usize,
        why: String,
    },

    #[error("{key} = {value}: {problem}")]
    UnsupportedConfig {
        key: String,
        value: String,
        problem: String,
    },

    #[error("the {role} token id {id} is outside the vocabulary (the model has {model_vocab} ids, the tokenizer {tokenizer_vocab} tokens)")]
    TokenOutOfVocabulary {
        role: String,
        id: u32,
        model_vocab: usize,
        tokenizer_vocab: usize,
    },

    #[error("tensor '{name}' is missing from the model file")]
    MissingTensor { name: String },

    #[error("tensor '{name}': data [{offset}, {offset}+{size}) lies outside the {len}-byte data section")]
    TensorOutOfBounds {
        name: String,
        offset: u64,
        size: u64,
        len: u64,
    },

    #[error("metadata key '{key}': {problem}")]
    Metadata { key: String, problem: String },

    #[error("{format}: {problem}")]
    Format {
        format: &'static str,
        problem: String,
    },

    #[error("unsupported model architecture '{0}' (supported: llama, qwen2, qwen3, mistral)")]
    UnsupportedArchitecture(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}")]
    Template(String),

    #[error("the prompt is empty")]
    EmptyPrompt,

    #[error("nothing to score: perplexity needs at least 2 tokens, the text has {tokens}")]
    NothingToScore { tokens: usize },

    #[error("context overflow: {needed} positions needed, the context holds {context}")]
    ContextOverflow { needed: usize, context: usize },

    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    InvalidToken { id: u32, vocab_size: usize },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl Error {
    /// Shorthand for a [`Error::Format`] error.
    pub fn format(format: &'static str, problem: impl Into<String>) -> Self {
        Error::Format {
            format,
            problem: problem.into(),
        }
    }

    /// Shorthand for a [`Error::Metadata`] error.
    pub fn metadata(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Metadata {
            key: key.into(),
            problem: problem.into(),
        }
    }
}
