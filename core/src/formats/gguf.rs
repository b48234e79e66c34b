//! GGUF v2/v3 reader and writer (the llama.cpp / Ollama file format), from bytes: no file system,
//! so the browser can hand it a fetched buffer and native code a memory map.
//! Spec: github.com/ggml-org/ggml/blob/master/docs/gguf.md

use crate::quant::GgmlType;
use crate::{Error, Result};

/// One metadata value, of any of the GGUF value types.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

/// Where one tensor lives in the file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF order: `dims[0]` is the innermost (contiguous) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
}

/// A parsed GGUF file borrowing its bytes.
#[derive(Debug)]
pub struct GgufFile<'a> {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// The whole file.
    pub bytes: &'a [u8],
    /// Start of the data section within `bytes`.
    pub data_offset: u64,
}
