//! `inferno quantize`: any model -> a GGUF in one of llama-quantize's file types (Q4_0 ..
//! Q8_0, F16, and the K-quant mixes Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K), with
//! llama.cpp's reference quantizers and its per-tensor type choices, so a GGUF input gives the
//! bytes llama-quantize writes (scripts/check-quantize.sh compares them).
//!
//! The rules follow llama.cpp's `src/llama-quant.cpp` (`llama_tensor_get_type_impl`,
//! `tensor_type_fallback`, `tensor_allows_quantization`) for the Llama-family architectures
//! inferno runs: tensors in the loader's order (non-layer tensors first, then by layer, by
//! name within each), counters of attn_v and ffn_down in that order, the input's metadata in
//! its order with `general.quantization_version` and `general.file_type` moved to the end.

use std::path::Path;

use anyhow::{bail, Result};
use clap::ValueEnum;
use inferno_core::config::ModelConfig;
use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_core::formats::{ModelSource, QkRowOrder};
use inferno_core::quant::{dequantize_bytes, quantize_bytes, GgmlType};

use crate::convert::{add_tokenizer_metadata, half_split_to_interleaved, write_gguf_atomically};
use crate::load::ModelFiles;

/// A file type of llama-quantize: the default type of the linear layers and the mix around it.
#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
#[allow(non_camel_case_types)]
pub enum QuantType {
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
    #[value(name = "f16")]
    F16,
    #[value(name = "q2_k")]
    Q2_K,
    #[value(name = "q3_k_s")]
    Q3_K_S,
    #[value(name = "q3_k_m")]
    Q3_K_M,
    #[value(name = "q3_k_l")]
    Q3_K_L,
    #[value(name = "q4_k_s")]
    Q4_K_S,
    #[value(name = "q4_k_m")]
    Q4_K_M,
    #[value(name = "q5_k_s")]
    Q5_K_S,
    #[value(name = "q5_k_m")]
    Q5_K_M,
    #[value(name = "q6_k")]
    Q6_K,
    #[value(name = "iq4_nl")]
    IQ4_NL,
    #[value(name = "iq4_xs")]
    IQ4_XS,
}

impl QuantType {
    /// The type of the linear layers that no rule moves (llama_ftype_get_default_type).
    pub fn default_type(self) -> GgmlType {
        use QuantType::*;
        match self {
            Q4_0 => GgmlType::Q4_0,
            Q4_1 => GgmlType::Q4_1,
            Q5_0 => GgmlType::Q5_0,
            Q5_1 => GgmlType::Q5_1,
            Q8_0 => GgmlType::Q8_0,
            F16 => GgmlType::F16,
            Q2_K => GgmlType::Q2_K,
            Q3_K_S | Q3_K_M | Q3_K_L => GgmlType::Q3_K,
            Q4_K_S | Q4_K_M => GgmlType::Q4_K,
            Q5_K_S | Q5_K_M => GgmlType::Q5_K,
            Q6_K => GgmlType::Q6_K,
            IQ4_NL => GgmlType::IQ4_NL,
            IQ4_XS => GgmlType::IQ4_XS,
        }
    }

    /// llama.cpp's `general.file_type` (LLAMA_FTYPE_MOSTLY_*).
    pub fn file_type(self) -> u32 {
        use QuantType::*;
        match self {
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q8_0 => 7,
            Q5_0 => 8,
            Q5_1 => 9,
            Q2_K => 10,
            Q3_K_S => 11,
            Q3_K_M => 12,
            Q3_K_L => 13,
            Q4_K_S => 14,
            Q4_K_M => 15,
            Q5_K_S => 16,
            Q5_K_M => 17,
            Q6_K => 18,
            IQ4_NL => 25,
            IQ4_XS => 30,
        }
    }
}

/// What a tensor is for, from its name (llama-quant.cpp's `tensor_get_category`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    match name {
        "output.weight" => return Category::Output,
        "token_embd.weight" => return Category::TokenEmbd,
        _ => {}
    }
    let rules = [
        ("attn_v.weight", Category::AttnV),
        ("attn_k.weight", Category::AttnK),
        ("attn_q.weight", Category::AttnQ),
        ("attn_output.weight", Category::AttnOutput),
        ("ffn_up", Category::FfnUp),
        ("ffn_gate", Category::FfnGate),
        ("ffn_down", Category::FfnDown),
    ];
    rules
        .iter()
        .find(|(part, _)| name.contains(part))
        .map_or(Category::Other, |&(_, c)| c)
}

/// Whether llama-quantize quantizes a tensor at all: 2-D or more, named `*weight`, not a norm.
fn allows_quantization(name: &str, dims: usize) -> bool {
    dims >= 2 && name.ends_with("weight") && !name.contains("_norm.weight")
}

/// The layer of a `blk.N.` tensor, -1 for the others (the loader's sort key).
fn layer_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// llama-quantize's per-tensor type choice for one file type, with the counters that make
/// attn_v and ffn_down depend on their position among their kind.
struct Mix {
    ty: QuantType,
    tied: bool,
    n_gqa: usize,
    n_attention_wv: usize,
    i_attention_wv: usize,
    n_ffn_down: usize,
    i_ffn_down: usize,
}

/// Layers that get more bits in the _M mixes: the first and last eighth and every third.
fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl Mix {
    fn new(ty: QuantType, config: &ModelConfig, names: &[&str]) -> Mix {
        Mix {
            ty,
            tied: !names.contains(&"output.weight"),
            n_gqa: config.n_heads / config.n_kv_heads.max(1),
            n_attention_wv: names
                .iter()
                .filter(|n| category(n) == Category::AttnV)
                .count(),
            i_attention_wv: 0,
            n_ffn_down: config.n_layers,
            i_ffn_down: 0,
        }
    }

    /// The type of tensor `name` whose rows have `cols` elements, currently `current`.
    fn target(&mut self, name: &str, dims: usize, cols: usize, current: GgmlType) -> GgmlType {
        if !allows_quantization(name, dims) {
            return current;
        }
        let default = self.ty.default_type();
        if default.block_len() == 1 {
            return default;
        }
        let chosen = self.rule(category(name), cols, default);
        fallback(chosen, cols)
    }

    /// llama_tensor_get_type_impl, for the file types above and architectures without experts.
    fn rule(&mut self, category: Category, cols: usize, default: GgmlType) -> GgmlType {
        use QuantType as F;
        let ty = self.ty;
        match category {
            Category::Output | Category::TokenEmbd if category == Category::Output || self.tied => {
                if cols % default.block_len() != 0 {
                    GgmlType::Q8_0
                } else if default != GgmlType::Q8_0 {
                    GgmlType::Q6_K
                } else {
                    default
                }
            }
            Category::AttnV => {
                let i = self.i_attention_wv;
                self.i_attention_wv += 1;
                match ty {
                    F::Q2_K if self.n_gqa >= 4 => GgmlType::Q4_K,
                    F::Q2_K => GgmlType::Q3_K,
                    F::Q3_K_M if i < 2 => GgmlType::Q5_K,
                    F::Q3_K_M => GgmlType::Q4_K,
                    F::Q3_K_L => GgmlType::Q5_K,
                    F::Q4_K_M | F::Q5_K_M if use_more_bits(i, self.n_attention_wv) => {
                        GgmlType::Q6_K
                    }
                    F::Q4_K_S if i < 4 => GgmlType::Q5_K,
                    F::IQ4_NL | F::IQ4_XS if self.n_gqa >= 4 => GgmlType::Q5_K,
                    _ => default,
                }
            }
            Category::FfnDown => {
                let (i, n) = (self.i_ffn_down, self.n_ffn_down);
                self.i_ffn_down += 1;
                match ty {
                    F::Q2_K => GgmlType::Q3_K,
                    F::Q3_K_M if i < n / 16 => GgmlType::Q5_K,
                    F::Q3_K_M => GgmlType::Q4_K,
                    F::Q3_K_L => GgmlType::Q5_K,
                    F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => GgmlType::Q6_K,
                    F::Q4_K_S if i < n / 8 => GgmlType::Q5_K,
                    // No importance matrix here, so the first eighth gets more bits.
                    F::IQ4_NL | F::IQ4_XS if i < n / 8 => GgmlType::Q5_K,
                    _ => default,
                }
            }
            Category::AttnOutput => match ty {
                F::Q2_K => GgmlType::Q3_K,
                F::Q3_K_M => GgmlType::Q4_K,
                F::Q3_K_L => GgmlType::Q5_K,
                _ => default,
            },
            _ => default,
        }
    }
}

/// A type whose blocks do not tile the row falls back to one whose blocks do
/// (`tensor_type_fallback`), and to F16 when no block type fits.
fn fallback(ty: GgmlType, cols: usize) -> GgmlType {
    if cols % ty.block_len() == 0 {
        return ty;
    }
    let smaller = match ty {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    };
    if cols % smaller.block_len() == 0 {
        smaller
    } else {
        GgmlType::F16
    }
}

/// Writes `output`: `input` (a GGUF file or an HF directory) in file type `ty`. A tensor that is
/// already quantized is re-quantized only with `allow_requantize` (as llama-quantize asks),
/// since every round loses precision; one already in its target type is copied as it is.
pub fn quantize(input: &Path, output: &Path, ty: QuantType, allow_requantize: bool) -> Result<()> {
    let files = ModelFiles::open(input)?;
    let gguf_metadata = match &files {
        ModelFiles::Gguf(map) => Some(GgufFile::parse(map)?.metadata),
        ModelFiles::Hf { .. } => None,
    };
    files.with_source(|source| {
        let mut w = GgufWriter::new();
        match gguf_metadata {
            Some(meta) => {
                for (k, v) in meta {
                    w.add_metadata(k, v)?;
                }
            }
            None => {
                for (k, v) in source.config.to_gguf_metadata() {
                    w.add_metadata(k, v)?;
                }
                add_tokenizer_metadata(&mut w, source)?;
            }
        }
        // llama.cpp sets these last: a key already there moves to the end.
        for (key, value) in [
            ("general.quantization_version", 2),
            ("general.file_type", ty.file_type()),
        ] {
            w.remove_metadata(key);
            w.add_metadata(key, Value::U32(value))?;
        }
        write_tensors(&mut w, source, ty, allow_requantize)?;
        write_gguf_atomically(&w, output)?;
        eprintln!(
            "wrote {} ({} tensors, {:?})",
            output.display(),
            source.tensors.len(),
            ty
        );
        Ok(())
    })
}

fn write_tensors<'a>(
    w: &mut GgufWriter<'a>,
    source: &ModelSource<'a>,
    ty: QuantType,
    allow_requantize: bool,
) -> Result<()> {
    let c = &source.config;
    // GGUF llama files keep llama.cpp's interleaved Q/K rows; an HF source is in half-split order.
    let to_interleaved = source.qk_row_order == QkRowOrder::HalfSplit
        && matches!(c.architecture.as_str(), "llama" | "mistral");
    let mut order: Vec<usize> = (0..source.tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&source.tensors[a].name, &source.tensors[b].name);
        (layer_of(a), a.as_bytes()).cmp(&(layer_of(b), b.as_bytes()))
    });
    let names: Vec<&str> = order
        .iter()
        .map(|&i| source.tensors[i].name.as_str())
        .collect();
    let mut mix = Mix::new(ty, c, &names);
    for &i in &order {
        let t = &source.tensors[i];
        let cols = t.shape.last().copied().unwrap_or(0);
        let target = mix.target(&t.name, t.shape.len(), cols, t.ty);
        let reorder = to_interleaved && t.shape.len() == 2;
        if target == t.ty && !reorder {
            w.add_tensor(t.name.clone(), t.ty, &t.shape, t.data)?;
            continue;
        }
        if t.ty.block_len() > 1 && target != t.ty && !allow_requantize {
            bail!(
                "{} is already quantized ({}): re-quantizing it to {} loses precision; pass --allow-requantize to do it anyway",
                t.name,
                t.ty.name(),
                target.name()
            );
        }
        let mut values = dequantize_bytes(t.ty, t.data);
        if reorder {
            let heads = match t.name.as_str() {
                n if n.ends_with("attn_q.weight") => Some(c.n_heads),
                n if n.ends_with("attn_k.weight") => Some(c.n_kv_heads),
                _ => None,
            };
            if let Some(heads) = heads {
                values = half_split_to_interleaved(&values, heads, c.head_dim, cols);
            }
        }
        w.add_tensor(
            t.name.clone(),
            target,
            &t.shape,
            quantize_bytes(target, &values)?,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_30_layers_first_last_eighth_and_every_third() {
        let more: Vec<usize> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
    }

    #[test]
    fn fallback_576_columns_q4_k_q5_0_q6_k_q8_0_q2_k_q4_0() {
        assert_eq!(fallback(GgmlType::Q4_K, 576), GgmlType::Q5_0);
        assert_eq!(fallback(GgmlType::Q5_K, 576), GgmlType::Q5_1);
        assert_eq!(fallback(GgmlType::Q6_K, 576), GgmlType::Q8_0);
        assert_eq!(fallback(GgmlType::Q2_K, 576), GgmlType::Q4_0);
        assert_eq!(fallback(GgmlType::Q4_K, 1536), GgmlType::Q4_K);
        assert_eq!(fallback(GgmlType::Q4_0, 48), GgmlType::F16);
        assert_eq!(fallback(GgmlType::IQ4_XS, 576), GgmlType::IQ4_NL);
    }

    #[test]
    fn layer_order_non_layer_first_then_by_layer_then_name() {
        let mut names = [
            "blk.10.attn_q.weight",
            "output_norm.weight",
            "blk.2.ffn_down.weight",
            "blk.2.attn_k.weight",
            "token_embd.weight",
        ];
        names.sort_by(|a, b| (layer_of(a), a.as_bytes()).cmp(&(layer_of(b), b.as_bytes())));
        assert_eq!(
            names,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.2.attn_k.weight",
                "blk.2.ffn_down.weight",
                "blk.10.attn_q.weight"
            ]
        );
    }
}
