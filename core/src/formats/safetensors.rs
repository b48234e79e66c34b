//! safetensors shards (Hugging Face checkpoints), read from bytes through the `safetensors` crate
//! and written with its serializer. Only float tensors (F32, F16, BF16) are models' weights;
//! any other dtype is reported by name. Names stay as in the file (HF names); hf_dir maps them.

use std::borrow::Cow;

use safetensors::{Dtype, SafeTensors, View};

use super::RawTensor;
use crate::quant::GgmlType;
use crate::{Error, Result};

/// The GGML type holding the same bytes as a safetensors dtype, if inferno computes with it.
pub fn ggml_type_of(dtype: Dtype) -> Option<GgmlType> {
    match dtype {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// The safetensors dtype for a GGML type, for the float types only.
pub fn dtype_of(ty: GgmlType) -> Option<Dtype> {
    match ty {
        GgmlType::F32 => Some(Dtype::F32),
        GgmlType::F16 => Some(Dtype::F16),
        GgmlType::BF16 => Some(Dtype::BF16),
        _ => None,
    }
}

/// Every tensor of one shard, in the file's order, borrowing the shard's bytes.
pub fn read(bytes: &[u8]) -> Result<Vec<RawTensor<'_>>> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| {
        let problem = match bad_tensor_in_header(bytes) {
            Some(tensor_problem) => format!("{tensor_problem} ({e})"),
            None => e.to_string(),
        };
        Error::format("safetensors", problem)
    })?;
    let mut tensors: Vec<RawTensor> = Vec::with_capacity(file.len());
    for (name, view) in file.iter() {
        let ty = ggml_type_of(view.dtype()).ok_or_else(|| Error::UnsupportedSafetensorsDtype {
            name: name.to_string(),
            dtype: view.dtype().to_string(),
        })?;
        let shape = view.shape().to_vec();
        // The crate checks this too; a mismatch here would make every later slice wrong.
        let n = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        if n.and_then(|n| ty.bytes_for(n)) != Some(view.data().len() as u64) {
            return Err(Error::format(
                "safetensors",
                format!(
                    "tensor '{name}': shape {shape:?} does not match its {} bytes",
                    view.data().len()
                ),
            ));
        }
        tensors.push(RawTensor {
            name: name.to_string(),
            ty,
            shape,
            data: view.data(),
        });
    }
    // Data order, as a reader of the file would expect it (iteration order is the header's).
    tensors.sort_by_key(|t| t.data.as_ptr() as usize);
    Ok(tensors)
}

/// Bits per element of the safetensors dtypes (the crate's names), for messages only.
fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "U16" | "I16" | "F16" | "BF16" => 16,
        "U32" | "I32" | "F32" => 32,
        "U64" | "I64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// The crate's header errors mostly do not say which tensor is wrong: find the first tensor
/// whose entry is malformed (unknown dtype, shape that overflows or disagrees with its offsets,
/// offsets past the data), in data order, as the crate checks them. `None` if the header is not
/// readable or every entry looks fine.
fn bad_tensor_in_header(bytes: &[u8]) -> Option<String> {
    let header_len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = 8u64.checked_add(header_len)?;
    let header = bytes.get(8..usize::try_from(end).ok()?)?;
    let data_len = bytes.len() as u64 - end;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let mut entries: Vec<(&String, &serde_json::Value)> = header
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .collect();
    let start_of = |v: &serde_json::Value| v["data_offsets"][0].as_u64().unwrap_or(0);
    entries.sort_by_key(|(_, v)| start_of(v));
    let mut expected_start = 0u64;
    for (name, info) in entries {
        let dtype = info["dtype"].as_str().unwrap_or("(none)");
        let Some(bits) = dtype_bits(dtype) else {
            return Some(format!("tensor '{name}': unknown dtype '{dtype}'"));
        };
        let shape: Option<Vec<u64>> = info["shape"]
            .as_array()
            .and_then(|dims| dims.iter().map(serde_json::Value::as_u64).collect());
        let Some(shape) = shape else {
            return Some(format!("tensor '{name}': shape is not a list of sizes"));
        };
        let offsets = (
            info["data_offsets"][0].as_u64(),
            info["data_offsets"][1].as_u64(),
        );
        let (Some(start), Some(stop)) = offsets else {
            return Some(format!("tensor '{name}': data_offsets is not [start, end]"));
        };
        if start != expected_start || stop < start {
            return Some(format!(
                "tensor '{name}': data_offsets [{start}, {stop}] do not follow the previous tensor (which ends at {expected_start})"
            ));
        }
        let size = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(bits))
            .map(|b| b.div_ceil(8));
        match size {
            None => return Some(format!("tensor '{name}': shape {shape:?} overflows")),
            Some(size) if size != stop - start => {
                return Some(format!(
                "tensor '{name}': {dtype} shape {shape:?} takes {size} bytes, data_offsets give {}",
                stop - start
            ))
            }
            Some(_) => {}
        }
        if stop > data_len {
            return Some(format!(
                "tensor '{name}': data_offsets end at {stop}, past the {data_len} bytes of data"
            ));
        }
        expected_start = stop;
    }
    None
}

/// A tensor handed to the safetensors serializer.
struct Borrowed<'t> {
    dtype: Dtype,
    shape: &'t [usize],
    data: &'t [u8],
}

impl View for Borrowed<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// A safetensors file of (name, type F32|F16|BF16, shape outermost-first, little-endian bytes).
pub fn write(tensors: &[(String, GgmlType, Vec<usize>, Vec<u8>)]) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(name, ty, shape, data)| {
            let dtype = dtype_of(*ty).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "tensor '{name}': safetensors holds F32, F16 or BF16, not {}",
                    ty.name()
                ))
            })?;
            let n = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
            if n.and_then(|n| ty.bytes_for(n)) != Some(data.len() as u64) {
                return Err(Error::InvalidArgument(format!(
                    "tensor '{name}': shape {shape:?} does not match its {} bytes",
                    data.len()
                )));
            }
            Ok((name.as_str(), Borrowed { dtype, shape, data }))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None).map_err(|e| Error::format("safetensors", e.to_string()))
}
