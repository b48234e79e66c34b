//! `inferno info` and `inferno convert` (any model -> HF directory); the GGUF writing helpers
//! `inferno quantize` ([`crate::quantize`]) shares.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use inferno_core::engine::build_tokenizer;
use inferno_core::formats::gguf::{GgufWriter, Value};
use inferno_core::formats::{hf_dir, names, ModelSource, TokenizerSource};
use inferno_core::model::{interleaved_to_half_split, WeightDtype, Weights};
use inferno_core::quant::{quantize_bytes, GgmlType};

use crate::load::ModelFiles;

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum HfDtype {
    F32,
    Bf16,
}

pub fn info(path: &Path) -> Result<()> {
    let files = ModelFiles::open(path)?;
    files.with_source(|source| {
        let c = &source.config;
        println!("model         {}", path.display());
        println!("architecture  {}", c.architecture);
        println!("layers        {}", c.n_layers);
        println!("dim           {} (hidden {})", c.dim, c.hidden_dim);
        println!(
            "heads         {} query, {} kv, head_dim {}",
            c.n_heads, c.n_kv_heads, c.head_dim
        );
        println!("vocab         {}", c.vocab_size);
        println!("context       {}", c.context_length);
        println!(
            "rope theta    {} (scaling: {:?})",
            c.rope_theta, c.rope_scaling
        );
        println!("rms eps       {:e}", c.rms_eps);
        println!(
            "embeddings    {}",
            if c.tied_embeddings { "tied" } else { "untied" }
        );
        let mut by_type = std::collections::BTreeMap::<&str, (usize, usize)>::new();
        for t in &source.tensors {
            let e = by_type.entry(t.ty.name()).or_default();
            e.0 += 1;
            e.1 += t.data.len();
        }
        let total: usize = source.tensors.iter().map(|t| t.data.len()).sum();
        println!(
            "tensors       {} ({:.1} MiB)",
            source.tensors.len(),
            total as f64 / (1 << 20) as f64
        );
        for (ty, (n, bytes)) in by_type {
            println!(
                "  {ty:<6} {n:>4} tensors, {:.1} MiB",
                bytes as f64 / (1 << 20) as f64
            );
        }
        let tokenizer = build_tokenizer(&source.tokenizer)?;
        println!(
            "tokenizer     {} ids, bos {:?}, eos {:?} (+{:?}), add_bos {}",
            tokenizer.vocab_size(),
            source.special.bos,
            source.special.eos,
            source.special.eos_extra,
            source.special.add_bos
        );
        println!(
            "chat template {}",
            if source.chat_template.is_some() {
                "yes"
            } else if tokenizer.token_id("<start_of_turn>").is_some() {
                "no (Gemma's turns are used)"
            } else {
                "no (ChatML is used)"
            }
        );
        println!(
            "kernels       {}",
            inferno_core::kernels::Kernels::select()?.name
        );
        Ok(())
    })
}

/// Every weight under its GGUF name, dequantized to f32 in HF row order: (name, shape, values).
fn weight_tensors(w: &Weights) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out = Vec::new();
    let matrix = |out: &mut Vec<_>, name: String, m: &inferno_core::kernels::Matrix| {
        let f = m.to_f32();
        let inferno_core::kernels::MatrixData::F32(data) = f.data else {
            unreachable!("to_f32 gives f32")
        };
        out.push((name, vec![m.rows, m.cols], data.to_vec()));
    };
    let vector =
        |out: &mut Vec<_>, name: String, v: &[f32]| out.push((name, vec![v.len()], v.to_vec()));
    matrix(&mut out, "token_embd.weight".into(), &w.token_embd);
    for (l, layer) in w.layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{l}.{s}");
        vector(&mut out, n("attn_norm.weight"), &layer.attn_norm);
        matrix(&mut out, n("attn_q.weight"), &layer.wqkv.part(0));
        matrix(&mut out, n("attn_k.weight"), &layer.wqkv.part(1));
        matrix(&mut out, n("attn_v.weight"), &layer.wqkv.part(2));
        for (s, b) in [
            ("attn_q.bias", &layer.bq),
            ("attn_k.bias", &layer.bk),
            ("attn_v.bias", &layer.bv),
            ("attn_q_norm.weight", &layer.q_norm),
            ("attn_k_norm.weight", &layer.k_norm),
        ] {
            if let Some(b) = b {
                vector(&mut out, n(s), b);
            }
        }
        matrix(&mut out, n("attn_output.weight"), &layer.wo);
        vector(&mut out, n("ffn_norm.weight"), &layer.ffn_norm);
        matrix(&mut out, n("ffn_gate.weight"), &layer.w_gate_up.part(0));
        matrix(&mut out, n("ffn_up.weight"), &layer.w_gate_up.part(1));
        matrix(&mut out, n("ffn_down.weight"), &layer.w_down);
    }
    vector(&mut out, "output_norm.weight".into(), &w.output_norm);
    if let Some(o) = &w.output {
        matrix(&mut out, "output.weight".into(), o);
    }
    out
}

/// Writes an HF directory: model.safetensors (HF names, HF RoPE order), config.json,
/// tokenizer.json, tokenizer_config.json (with the chat template).
pub fn convert(input: &Path, output: &Path, dtype: HfDtype) -> Result<()> {
    let files = ModelFiles::open(input)?;
    files.with_source(|source| {
        if let Some(inferno_core::config::RopeScaling::Factors(_)) = source.config.rope_scaling {
            bail!(
                "{}: its per-frequency RoPE factors (rope_freqs.weight) have no config.json form; \
                 convert the original Hugging Face model instead",
                input.display()
            );
        }
        let weights = Weights::load(source, WeightDtype::AsStored)?;
        let tokenizer = build_tokenizer(&source.tokenizer)?;
        let (ty, torch_dtype) = match dtype {
            HfDtype::F32 => (GgmlType::F32, "float32"),
            HfDtype::Bf16 => (GgmlType::BF16, "bfloat16"),
        };
        let tensors = weight_tensors(&weights)
            .into_iter()
            .map(|(name, shape, data)| {
                let hf = names::gguf_to_hf(&name)
                    .with_context(|| format!("no HF name for tensor {name}"))?;
                Ok((hf, ty, shape, quantize_bytes(ty, &data)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let safetensors = hf_dir::write_safetensors(&tensors)?;
        std::fs::create_dir_all(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        let write = |name: &str, bytes: &[u8]| -> Result<()> {
            let path = output.join(name);
            std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))
        };
        write("model.safetensors", &safetensors)?;
        write(
            "config.json",
            source.config.to_hf_json_with_dtype(torch_dtype).as_bytes(),
        )?;
        write("tokenizer.json", tokenizer.to_json()?.as_bytes())?;
        let token = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i));
        let mut tc = serde_json::json!({
            "add_bos_token": source.special.add_bos,
            "bos_token": token(source.special.bos),
            "eos_token": token(source.special.eos),
            "tokenizer_class": "PreTrainedTokenizerFast",
        });
        if let Some(t) = &source.chat_template {
            tc["chat_template"] = serde_json::Value::String(t.clone());
        }
        write(
            "tokenizer_config.json",
            serde_json::to_string_pretty(&tc)?.as_bytes(),
        )?;
        eprintln!(
            "wrote {} tensors ({:.1} MiB) to {}",
            tensors.len(),
            safetensors.len() as f64 / (1 << 20) as f64,
            output.display()
        );
        Ok(())
    })
}

/// Writes a GGUF whose 2-D weights are in `ty`; norms and biases stay f32.
/// Writes a GGUF next to `output` and renames it into place, so a failed or interrupted write
/// never leaves a half file under the name (nor clobbers the input when they are the same path).
pub fn write_gguf_atomically(w: &GgufWriter, output: &Path) -> Result<()> {
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))
        .and_then(|file| {
            let mut out = std::io::BufWriter::new(file);
            w.write_to(&mut out)?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            Ok(())
        })
        .with_context(|| format!("cannot write {}", tmp.display()));
    if let Err(e) = written.and_then(|()| {
        std::fs::rename(&tmp, output)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), output.display()))
    }) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Rows of a half-split (HF) Q/K matrix reordered into llama.cpp's interleaved order.
pub(crate) fn half_split_to_interleaved(
    values: &[f32],
    n_heads: usize,
    head_dim: usize,
    cols: usize,
) -> Vec<f32> {
    // interleaved_to_half_split[hf_row] = gguf_row; invert it.
    let map = interleaved_to_half_split(n_heads, head_dim);
    let mut out = vec![0.0f32; values.len()];
    for (hf_row, &gguf_row) in map.iter().enumerate() {
        out[gguf_row * cols..(gguf_row + 1) * cols]
            .copy_from_slice(&values[hf_row * cols..(hf_row + 1) * cols]);
    }
    out
}

/// `tokenizer.ggml.*` metadata from an HF tokenizer.json (byte-level BPE only).
pub(crate) fn add_tokenizer_metadata(
    w: &mut GgufWriter<'_>,
    source: &ModelSource<'_>,
) -> Result<()> {
    let TokenizerSource::Json(json) = &source.tokenizer else {
        bail!("expected a tokenizer.json");
    };
    let j: serde_json::Value = serde_json::from_str(json).context("tokenizer.json")?;
    let model = &j["model"];
    if model["type"] != "BPE" {
        bail!(
            "quantize from an HF directory supports BPE tokenizers, not {}",
            model["type"]
        );
    }
    let vocab = model["vocab"]
        .as_object()
        .context("tokenizer.json has no model.vocab")?;
    let tokenizer = build_tokenizer(&source.tokenizer)?;
    let n = tokenizer.vocab_size();
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1i32; n];
    for (text, id) in vocab {
        if let Some(id) = id.as_u64().filter(|&i| (i as usize) < n) {
            tokens[id as usize] = text.clone();
        }
    }
    for added in j["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(text)) = (
            added["id"].as_u64().filter(|&i| (i as usize) < n),
            added["content"].as_str(),
        ) {
            tokens[id as usize] = text.to_string();
            types[id as usize] = if added["special"].as_bool() == Some(true) {
                3
            } else {
                4
            };
        }
    }
    let merges: Vec<String> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(pair) => Some(format!(
                "{} {}",
                pair.first()?.as_str()?,
                pair.get(1)?.as_str()?
            )),
            _ => None,
        })
        .collect();
    let digits = j["pre_tokenizer"].to_string().contains("\"Digits\"");
    w.add_metadata("tokenizer.ggml.model", Value::String("gpt2".into()))?;
    w.add_metadata(
        "tokenizer.ggml.pre",
        Value::String(if digits { "smollm" } else { "gpt2" }.into()),
    )?;
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(tokens.into_iter().map(Value::String).collect()),
    )?;
    w.add_metadata(
        "tokenizer.ggml.token_type",
        Value::Array(types.into_iter().map(Value::I32).collect()),
    )?;
    w.add_metadata(
        "tokenizer.ggml.merges",
        Value::Array(merges.into_iter().map(Value::String).collect()),
    )?;
    if let Some(b) = source.special.bos {
        w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(b))?;
    }
    if let Some(e) = source.special.eos {
        w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(e))?;
    }
    w.add_metadata(
        "tokenizer.ggml.add_bos_token",
        Value::Bool(source.special.add_bos),
    )?;
    if let Some(t) = &source.chat_template {
        w.add_metadata("tokenizer.chat_template", Value::String(t.clone()))?;
    }
    Ok(())
}
