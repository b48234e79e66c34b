//! A Hugging Face model directory, handed over as bytes and strings (the caller reads the files):
//! config.json, safetensors shards, tokenizer.json, tokenizer_config.json, chat_template.jinja.
//! Turns it into a [`ModelSource`] under GGUF names; also lists shards and writes safetensors.

use serde_json::Value as Json;

use super::{
    names, safetensors, ModelSource, QkRowOrder, RawTensor, SpecialTokens, TokenizerSource,
};
use crate::config::ModelConfig;
use crate::quant::GgmlType;
use crate::{Error, Result};

/// The files of an HF model directory.
#[derive(Debug, Clone, Default)]
pub struct HfFiles<'a> {
    pub config_json: String,
    /// model.safetensors, or every shard listed by model.safetensors.index.json.
    pub shards: Vec<&'a [u8]>,
    pub tokenizer_json: Option<String>,
    pub tokenizer_config_json: Option<String>,
    /// chat_template.jinja, used when tokenizer_config.json has no `chat_template`.
    pub chat_template: Option<String>,
}

/// The shard file names of a model.safetensors.index.json, each once, sorted.
pub fn shard_names(index_json: &str) -> Result<Vec<String>> {
    let json: Json = serde_json::from_str(index_json)
        .map_err(|e| Error::format("model.safetensors.index.json", e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| Error::format("model.safetensors.index.json", "no \"weight_map\" object"))?;
    let mut names = map
        .values()
        .map(|v| {
            v.as_str().map(str::to_string).ok_or_else(|| {
                Error::format(
                    "model.safetensors.index.json",
                    format!("shard name {v} is not a string"),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    names.sort();
    names.dedup();
    // A shard name is joined to the model directory by the caller: keep it inside.
    if let Some(bad) = names
        .iter()
        .find(|n| n.is_empty() || n.contains('/') || n.contains('\\') || *n == "..")
    {
        return Err(Error::format(
            "model.safetensors.index.json",
            format!("shard name '{bad}' is not a plain file name"),
        ));
    }
    Ok(names)
}

/// A safetensors file of (HF name, F32|F16|BF16, shape outermost-first, bytes), for the
/// convert command.
pub fn write_safetensors(tensors: &[(String, GgmlType, Vec<usize>, Vec<u8>)]) -> Result<Vec<u8>> {
    safetensors::write(tensors)
}

/// A token's id in a tokenizer.json: added tokens first, then the model's vocabulary
/// (a map for BPE/WordPiece, a list of [piece, score] for Unigram).
fn token_id(tokenizer: &Json, token: &str) -> Option<u32> {
    let added = tokenizer
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten();
    for t in added {
        if t.get("content").and_then(Json::as_str) == Some(token) {
            return t
                .get("id")
                .and_then(Json::as_u64)
                .and_then(|id| u32::try_from(id).ok());
        }
    }
    let vocab = tokenizer.get("model")?.get("vocab")?;
    match vocab {
        Json::Object(map) => map
            .get(token)?
            .as_u64()
            .and_then(|id| u32::try_from(id).ok()),
        Json::Array(pieces) => {
            let index = pieces
                .iter()
                .position(|p| p.get(0).and_then(Json::as_str) == Some(token))?;
            u32::try_from(index).ok()
        }
        _ => None,
    }
}

/// A special token in tokenizer_config.json: a string, or an object with "content".
fn special_token_text<'j>(config: &'j Json, key: &str) -> Option<&'j str> {
    let v = config.get(key)?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Json::as_str))
}

/// config.json's `{key}_token_id`: one id or a list (Llama 3 lists several EOS ids).
fn config_token_ids(config: &Json, key: &str) -> Vec<u32> {
    let ids = match config.get(key) {
        Some(Json::Array(items)) => items.iter().filter_map(Json::as_u64).collect(),
        Some(v) => v.as_u64().into_iter().collect(),
        None => Vec::new(),
    };
    ids.into_iter()
        .filter_map(|id| u32::try_from(id).ok())
        .collect()
}

fn parse_json(text: &str, file: &'static str) -> Result<Json> {
    serde_json::from_str(text).map_err(|e| Error::format(file, e.to_string()))
}

impl<'a> ModelSource<'a> {
    /// Everything a model is built from, out of an HF directory's files (tensor data is
    /// borrowed from the shards). Which tensors exist decides tied output, attention biases and
    /// QK-norm, whatever config.json says.
    pub fn from_hf(files: &HfFiles<'a>) -> Result<ModelSource<'a>> {
        let mut config = ModelConfig::from_hf_json(&files.config_json)?;
        let mut tensors: Vec<RawTensor<'a>> = Vec::new();
        for shard in &files.shards {
            for tensor in safetensors::read(shard)? {
                // transformers used to save RoPE's inverse frequencies, which it recomputes
                // (as inferno does); any other tensor the forward would not read is refused.
                if tensor.name.ends_with("rotary_emb.inv_freq") {
                    continue;
                }
                let name = names::hf_to_gguf(&tensor.name).ok_or_else(|| {
                    let why = "not a tensor of the Llama layout".to_string();
                    super::unused_tensor(&tensor.name, &config, why)
                })?;
                if let Some(why) = super::unused_tensor_reason(&name, &config) {
                    return Err(super::unused_tensor(&tensor.name, &config, why));
                }
                if tensors.iter().any(|t| t.name == name) {
                    return Err(Error::format(
                        "safetensors",
                        format!("tensor '{}' appears in two shards", tensor.name),
                    ));
                }
                tensors.push(RawTensor { name, ..tensor });
            }
        }
        let has = |name: &str| tensors.iter().any(|t| t.name == name);
        config.tied_embeddings = !has("output.weight");
        config.attention_bias = has("blk.0.attn_q.bias");
        config.qk_norm = has("blk.0.attn_q_norm.weight");
        config.validate()?;

        let tokenizer_text = files
            .tokenizer_json
            .clone()
            .ok_or_else(|| Error::Tokenizer("the model directory is missing tokenizer.json (only the fast-tokenizer format is supported)".into()))?;
        let tokenizer = parse_json(&tokenizer_text, "tokenizer.json")?;
        let tokenizer_config = match &files.tokenizer_config_json {
            Some(text) => parse_json(text, "tokenizer_config.json")?,
            None => Json::Null,
        };
        let config_json = parse_json(&files.config_json, "config.json")?;

        let resolve = |key: &str| {
            special_token_text(&tokenizer_config, key).and_then(|t| token_id(&tokenizer, t))
        };
        let config_eos = config_token_ids(&config_json, "eos_token_id");
        let bos_text = special_token_text(&tokenizer_config, "bos_token");
        let bos = resolve("bos_token").or_else(|| {
            config_token_ids(&config_json, "bos_token_id")
                .first()
                .copied()
        });
        let eos = resolve("eos_token").or_else(|| config_eos.first().copied());
        let mut eos_extra: Vec<u32> = config_eos
            .into_iter()
            .filter(|&id| Some(id) != eos)
            .collect();
        for t in super::END_OF_TURN_TOKENS {
            if let Some(id) = token_id(&tokenizer, t) {
                if Some(id) != eos && !eos_extra.contains(&id) {
                    eos_extra.push(id);
                }
            }
        }
        // add_bos_token when tokenizer_config.json says; otherwise whether tokenizer.json's
        // post-processor puts the BOS token in front of a single sequence.
        let add_bos = match tokenizer_config
            .get("add_bos_token")
            .and_then(Json::as_bool)
        {
            Some(b) => b,
            None => post_processor_adds(&tokenizer, bos_text),
        };

        let chat_template = match tokenizer_config.get("chat_template") {
            Some(Json::String(t)) => Some(t.clone()),
            // The list form: [{"name": "default", "template": ...}, ...].
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
                .map(str::to_string),
            _ => None,
        }
        .or_else(|| files.chat_template.clone());

        Ok(ModelSource {
            config,
            tensors,
            qk_row_order: QkRowOrder::HalfSplit,
            tokenizer: TokenizerSource::Json(tokenizer_text),
            chat_template,
            special: SpecialTokens {
                bos,
                eos,
                eos_extra,
                add_bos,
            },
            release: super::Release::default(),
        })
    }
}

/// Whether tokenizer.json's TemplateProcessing starts a single sequence with `bos`.
fn post_processor_adds(tokenizer: &Json, bos: Option<&str>) -> bool {
    let Some(bos) = bos else { return false };
    let post = tokenizer.get("post_processor");
    // A Sequence post-processor nests the template one level down.
    let candidates = post.into_iter().chain(
        post.and_then(|p| p.get("processors"))
            .and_then(Json::as_array)
            .into_iter()
            .flatten(),
    );
    candidates
        .filter_map(|p| p.get("single").and_then(Json::as_array))
        .any(|single| {
            single
                .first()
                .and_then(|s| s.get("SpecialToken"))
                .and_then(|s| s.get("id"))
                .and_then(Json::as_str)
                == Some(bos)
        })
}
