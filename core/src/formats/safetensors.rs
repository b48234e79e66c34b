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
    let file =
        SafeTensors::deserialize(bytes).map_err(|e| Error::format("safetensors", e.to_string()))?;
    let mut tensors: Vec<RawTensor> = Vec::with_capacity(file.len());
    for (name, view) in file.iter() {
        let ty = ggml_type_of(view.dtype()).ok_or_else(|| Error::UnsupportedTensorType {
            name: name.to_string(),
            ggml_type: u32::MAX,
            type_name: format!("safetensors {:?}", view.dtype()),
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
