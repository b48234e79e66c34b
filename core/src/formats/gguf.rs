//! GGUF v2/v3 reader and writer (the llama.cpp / Ollama file format), from bytes: no file system,
//! so the browser can hand it a fetched buffer and native code a memory map.
//! Spec: github.com/ggml-org/ggml/blob/master/docs/gguf.md. The reader trusts nothing: every count
//! is checked against the bytes left before anything is allocated.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::quant::GgmlType;
use crate::{Error, Result};

const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGUF allows at most 4 dimensions per tensor.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays are legal; a hostile file could nest them until the stack overflows.
const MAX_ARRAY_NESTING: usize = 8;

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

// GGUF value type ids (gguf.md, `gguf_metadata_value_type`).
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// Smallest encoding of one value of a type: what an array of `n` of them needs at least.
fn min_encoded_size(type_id: u32) -> Option<u64> {
    Some(match type_id {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 => 8,
        T_STRING => 8,    // length prefix
        T_ARRAY => 4 + 8, // element type + count
        _ => return None,
    })
}

impl Value {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => T_U8,
            Value::I8(_) => T_I8,
            Value::U16(_) => T_U16,
            Value::I16(_) => T_I16,
            Value::U32(_) => T_U32,
            Value::I32(_) => T_I32,
            Value::U64(_) => T_U64,
            Value::I64(_) => T_I64,
            Value::F32(_) => T_F32,
            Value::F64(_) => T_F64,
            Value::Bool(_) => T_BOOL,
            Value::String(_) => T_STRING,
            Value::Array(_) => T_ARRAY,
        }
    }

    /// Any integer type, as i128 (wide enough for every GGUF integer).
    fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v as i128,
            Value::I8(v) => v as i128,
            Value::U16(v) => v as i128,
            Value::I16(v) => v as i128,
            Value::U32(v) => v as i128,
            Value::I32(v) => v as i128,
            Value::U64(v) => v as i128,
            Value::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// Any integer value that fits in u64: converters write u32, i32 or u64 for the same key.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// Any integer value that fits in u32.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_i128().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer value that fits in i64.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_i128().and_then(|v| i64::try_from(v).ok())
    }

    /// A float, or an integer read as a float (some converters write integral values as ints).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => self.as_i128().map(|v| v as f32),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// The value of `key` in a metadata list (as in [`GgufFile::metadata`] or
/// [`crate::formats::TokenizerSource::Gguf`]).
pub fn lookup<'v>(metadata: &'v [(String, Value)], key: &str) -> Option<&'v Value> {
    metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
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

impl TensorInfo {
    /// Number of elements (the parser has checked that it does not overflow).
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Bytes the tensor occupies in the data section.
    pub fn byte_size(&self) -> Option<u64> {
        self.ty.bytes_for(self.n_elements())
    }

    /// Shape outermost-first (`[rows, cols]` for a matrix): GGUF's dims reversed.
    pub fn shape(&self) -> Result<Vec<usize>> {
        self.dims
            .iter()
            .rev()
            .map(|&d| {
                usize::try_from(d).map_err(|_| {
                    Error::format(
                        "GGUF",
                        format!(
                            "tensor '{}': dimension {d} does not fit in usize",
                            self.name
                        ),
                    )
                })
            })
            .collect()
    }
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

/// A cursor over the file that reports where and what ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos.min(self.bytes.len())) as u64
    }

    fn truncated(&self, what: &str, needed: u64) -> Error {
        Error::Truncated {
            what: what.to_string(),
            offset: self.pos as u64,
            needed,
            len: self.bytes.len() as u64,
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        // n <= remaining, so it fits in usize and the range is inside the slice.
        let end = self.pos + n as usize;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what, n))?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        b.try_into().map_err(|_| self.truncated(what, N as u64))
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(u8::from_le_bytes(self.array(what)?))
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items that each take at least `min_size` bytes: checked against what is left,
    /// so a hostile count cannot make us allocate.
    fn count(&mut self, min_size: u64, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let needed = n.saturating_mul(min_size);
        if needed > self.remaining() {
            return Err(self.truncated(what, needed));
        }
        usize::try_from(n).map_err(|_| self.truncated(what, needed))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let offset = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            Error::format(
                "GGUF",
                format!("{what} at offset {offset} is not valid UTF-8"),
            )
        })
    }

    fn value(&mut self, type_id: u32, key: &str, depth: usize) -> Result<Value> {
        Ok(match type_id {
            T_U8 => Value::U8(self.u8(key)?),
            T_I8 => Value::I8(self.u8(key)? as i8),
            T_U16 => Value::U16(self.u16(key)?),
            T_I16 => Value::I16(self.u16(key)? as i16),
            T_U32 => Value::U32(self.u32(key)?),
            T_I32 => Value::I32(self.u32(key)? as i32),
            T_U64 => Value::U64(self.u64(key)?),
            T_I64 => Value::I64(self.u64(key)? as i64),
            T_F32 => Value::F32(f32::from_bits(self.u32(key)?)),
            T_F64 => Value::F64(f64::from_bits(self.u64(key)?)),
            T_BOOL => Value::Bool(self.u8(key)? != 0),
            T_STRING => Value::String(self.string(key)?),
            T_ARRAY => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(Error::metadata(
                        key,
                        format!("arrays nested deeper than {MAX_ARRAY_NESTING}"),
                    ));
                }
                let elem_type = self.u32(key)?;
                let min = min_encoded_size(elem_type).ok_or_else(|| {
                    Error::metadata(key, format!("unknown array element type {elem_type}"))
                })?;
                let n = self.count(min, key)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem_type, key, depth + 1)?);
                }
                Value::Array(items)
            }
            other => return Err(Error::metadata(key, format!("unknown value type {other}"))),
        })
    }
}

impl<'a> GgufFile<'a> {
    /// Parses the header, metadata and tensor table, and checks that every tensor lies inside
    /// the file. Tensor data is not copied.
    pub fn parse(bytes: &'a [u8]) -> Result<GgufFile<'a>> {
        let mut r = Reader { bytes, pos: 0 };
        let magic: [u8; 4] = r.array("magic")?;
        if magic != MAGIC {
            return Err(Error::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(Error::UnsupportedGgufVersion { version });
        }
        // Each tensor info takes at least name length + n_dims + one dim + type + offset.
        let n_tensors = r.u64("tensor count")?;
        // Each key/value takes at least key length + type + one byte.
        let n_kv = r.count(8 + 4 + 1, "metadata key/value count")?;
        let mut metadata = Vec::with_capacity(n_kv);
        let mut seen = HashSet::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let type_id = r.u32(&key)?;
            let value = r.value(type_id, &key, 0)?;
            if !seen.insert(key.clone()) {
                return Err(Error::metadata(key, "appears twice"));
            }
            metadata.push((key, value));
        }

        let alignment = match lookup(&metadata, "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                _ => {
                    return Err(Error::metadata(
                        "general.alignment",
                        format!("must be a nonzero power of two, got {v:?}"),
                    ))
                }
            },
        };

        let min_info = 8 + 4 + 8 + 4 + 8;
        if n_tensors
            .checked_mul(min_info)
            .is_none_or(|needed| needed > r.remaining())
        {
            return Err(r.truncated("tensor infos", n_tensors.saturating_mul(min_info)));
        }
        let n_tensors = n_tensors as usize; // bounded by the file length just above
        let mut tensors = Vec::with_capacity(n_tensors);
        let mut names = HashSet::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            let n_dims = r.u32(&name)? as usize;
            if !(1..=MAX_DIMS).contains(&n_dims) {
                return Err(Error::format(
                    "GGUF",
                    format!("tensor '{name}': {n_dims} dimensions (allowed 1..={MAX_DIMS})"),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(r.u64(&name)?);
            }
            let type_id = r.u32(&name)?;
            let offset = r.u64(&name)?;
            let ty = GgmlType::from_id(type_id).ok_or_else(|| Error::UnsupportedTensorType {
                name: name.clone(),
                ggml_type: type_id,
                type_name: GgmlType::name_of_id(type_id).to_string(),
            })?;
            if dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .is_none()
            {
                return Err(Error::format(
                    "GGUF",
                    format!("tensor '{name}': element count of {dims:?} overflows"),
                ));
            }
            if offset % alignment != 0 {
                return Err(Error::format("GGUF", format!("tensor '{name}': offset {offset} is not a multiple of the alignment {alignment}")));
            }
            if !names.insert(name.clone()) {
                return Err(Error::format(
                    "GGUF",
                    format!("tensor '{name}' appears twice"),
                ));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                offset,
            });
        }

        let data_offset = (r.pos as u64).div_ceil(alignment).saturating_mul(alignment);
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        for t in &tensors {
            let size = t.byte_size().ok_or_else(|| {
                Error::format(
                    "GGUF",
                    format!(
                        "tensor '{}': {} elements are not whole {} blocks",
                        t.name,
                        t.n_elements(),
                        t.ty.name()
                    ),
                )
            })?;
            if t.offset.checked_add(size).is_none_or(|end| end > data_len) {
                return Err(Error::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: t.offset,
                    size,
                    len: data_len,
                });
            }
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            alignment,
            bytes,
            data_offset,
        })
    }

    /// The raw value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        lookup(&self.metadata, key)
    }

    fn typed<'s, T>(
        &'s self,
        key: &str,
        want: &str,
        convert: impl Fn(&'s Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => convert(v)
                .map(Some)
                .ok_or_else(|| Error::metadata(key, format!("expected {want}, found {v:?}"))),
        }
    }

    fn required<T>(&self, key: &str, value: Result<Option<T>>) -> Result<T> {
        value?.ok_or_else(|| Error::metadata(key, "missing"))
    }

    /// Optional integer key; any integer type whose value fits is accepted.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "an integer that fits in u32", Value::as_u32)
    }
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.typed(key, "an integer that fits in usize", |v| {
            v.as_u64().and_then(|n| usize::try_from(n).ok())
        })
    }
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a number", Value::as_f32)
    }
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", Value::as_bool)
    }
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", Value::as_str)
    }
    pub fn opt_array(&self, key: &str) -> Result<Option<&[Value]>> {
        self.typed(key, "an array", Value::as_array)
    }

    /// Required integer key: missing or of the wrong type is an [`Error::Metadata`].
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.required(key, self.opt_u32(key))
    }
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.required(key, self.opt_u64(key))
    }
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.required(key, self.opt_usize(key))
    }
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.required(key, self.opt_f32(key))
    }
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.required(key, self.opt_bool(key))
    }
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.required(key, self.opt_str(key))
    }
    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        self.required(key, self.opt_array(key))
    }
    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_array(key)?
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    Error::metadata(key, format!("expected an array of strings, found {v:?}"))
                })
            })
            .collect()
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of a tensor of this file. `parse` checked every tensor's bounds; an info that
    /// did not come from this file and points outside it gets an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &'a [u8] {
        let bytes: &'a [u8] = self.bytes;
        let range = info.byte_size().and_then(|size| {
            let start = self.data_offset.checked_add(info.offset)?;
            let end = start.checked_add(size)?;
            Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        });
        range.and_then(|r| bytes.get(r)).unwrap_or(&[])
    }
}

/// Builds a GGUF v3 file (alignment 32): metadata in insertion order, then tensors in order.
#[derive(Debug, Default)]
pub struct GgufWriter<'a> {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor<'a>>,
}

/// A tensor waiting to be written: name, type, shape outermost-first, bytes.
type PendingTensor<'a> = (String, GgmlType, Vec<usize>, Cow<'a, [u8]>);

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value_payload(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.push(*v as u8),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(*v as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(items) => {
            // GGUF arrays are homogeneous; `add_metadata` has checked that. An empty array is
            // written with element type u8.
            let elem_type = items.first().map_or(T_U8, Value::type_id);
            out.extend_from_slice(&elem_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value_payload(out, item);
            }
        }
    }
}

fn is_homogeneous(value: &Value) -> bool {
    match value {
        Value::Array(items) => {
            let first = items.first().map(Value::type_id);
            items
                .iter()
                .all(|v| Some(v.type_id()) == first && is_homogeneous(v))
        }
        _ => true,
    }
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata key (replacing an earlier value of the same key). `general.alignment`
    /// is ignored: the writer always aligns to 32, the default, and says so by omitting it.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: Value) -> Result<()> {
        let key = key.into();
        if !is_homogeneous(&value) {
            return Err(Error::metadata(
                key,
                "GGUF arrays must hold values of one type",
            ));
        }
        if key == "general.alignment" {
            return Ok(());
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        Ok(())
    }

    /// Drops a metadata key, if present (`add_metadata` after it puts the key last).
    pub fn remove_metadata(&mut self, key: &str) {
        self.metadata.retain(|(k, _)| k != key);
    }

    /// Adds a tensor with its shape outermost-first (`[rows, cols]`) and its raw bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        shape: &[usize],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let name = name.into();
        let data = data.into();
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}': {} dimensions (allowed 1..={MAX_DIMS})",
                shape.len()
            )));
        }
        let n = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let expected = n.and_then(|n| ty.bytes_for(n));
        if expected != Some(data.len() as u64) {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}': shape {shape:?} of {} needs {expected:?} bytes, got {}",
                ty.name(),
                data.len()
            )));
        }
        if self.tensors.iter().any(|t| t.0 == name) {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}' added twice"
            )));
        }
        self.tensors.push((name, ty, shape.to_vec(), data));
        Ok(())
    }

    /// Everything before the data section (header, metadata, tensor infos, padding).
    fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value_payload(&mut out, value);
        }
        let mut offset = 0u64;
        for (name, ty, shape, data) in &self.tensors {
            put_string(&mut out, name);
            out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for &d in shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += padded(data.len() as u64);
        }
        out.resize(padded(out.len() as u64) as usize, 0);
        out
    }

    /// Writes the file: header, then each tensor padded to the alignment.
    pub fn write_to(&self, mut w: impl std::io::Write) -> std::io::Result<()> {
        w.write_all(&self.header())?;
        let zeros = [0u8; DEFAULT_ALIGNMENT as usize];
        for (_, _, _, data) in &self.tensors {
            w.write_all(data)?;
            let pad = (padded(data.len() as u64) - data.len() as u64) as usize;
            w.write_all(&zeros[..pad])?;
        }
        Ok(())
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = self.write_to(&mut out);
        out
    }
}

fn padded(n: u64) -> u64 {
    n.div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT
}
