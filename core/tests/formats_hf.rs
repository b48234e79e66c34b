//! Hugging Face side of the formats: safetensors round trips and hostile shards, the model
//! directory (oracle's SmolLM2 tokenizer files + synthetic shards) as a ModelSource, the shard
//! index, and config.json in both directions.

use inferno_core::config::{ModelConfig, RopeScaling};
use inferno_core::formats::hf_dir::{shard_names, write_safetensors, HfFiles};
use inferno_core::formats::{safetensors, ModelSource, QkRowOrder, SpecialTokens, TokenizerSource};
use inferno_core::quant::GgmlType;
use inferno_core::Error;

mod common;

fn oracle_hf(file: &str) -> String {
    common::read_oracle(&format!("hf/{file}"))
}

type Tensor = (String, GgmlType, Vec<usize>, Vec<u8>);

fn tensor(name: &str, ty: GgmlType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let len = ty.bytes_for(n as u64).unwrap() as usize;
    let salt = name.len() as u8;
    (
        name.to_string(),
        ty,
        shape.to_vec(),
        (0..len).map(|i| (i as u8).wrapping_mul(7) ^ salt).collect(),
    )
}

#[test]
fn safetensors_round_trip_f32_f16_bf16_in_1_to_3_dims() {
    let tensors = vec![
        tensor("a.f32", GgmlType::F32, &[3]),
        tensor("b.f16", GgmlType::F16, &[2, 5]),
        tensor("c.bf16", GgmlType::BF16, &[2, 1, 3]),
        tensor("d.empty", GgmlType::F32, &[0, 4]),
    ];
    let bytes = write_safetensors(&tensors).unwrap();
    let mut read = safetensors::read(&bytes).unwrap();
    read.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(read.len(), tensors.len());
    for (got, (name, ty, shape, data)) in read.iter().zip(&tensors) {
        assert_eq!(
            (&got.name, got.ty, &got.shape, got.data),
            (name, *ty, shape, data.as_slice())
        );
    }
}

#[test]
fn safetensors_writer_refuses_q4_0_and_wrong_byte_count() {
    assert!(matches!(
        write_safetensors(&[tensor("q", GgmlType::Q4_0, &[32])]),
        Err(Error::InvalidArgument(_))
    ));
    let (name, ty, shape, mut data) = tensor("f", GgmlType::F32, &[4]);
    data.pop();
    assert!(matches!(
        write_safetensors(&[(name, ty, shape, data)]),
        Err(Error::InvalidArgument(_))
    ));
}

/// A safetensors file with one tensor whose header is written by hand.
fn raw_safetensors(header: &str, data_len: usize) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + data_len, 0);
    b
}

#[test]
fn safetensors_unsupported_dtype_i64_and_f64_are_named() {
    for dtype in ["I64", "F64"] {
        let b = raw_safetensors(
            &format!(r#"{{"w":{{"dtype":"{dtype}","shape":[2],"data_offsets":[0,16]}}}}"#),
            16,
        );
        match safetensors::read(&b) {
            Err(Error::UnsupportedSafetensorsDtype { name, dtype: got }) => {
                assert_eq!((name.as_str(), got.as_str()), ("w", dtype))
            }
            other => panic!("{dtype}: {other:?}"),
        }
    }
}

#[test]
fn safetensors_corrupt_headers_give_format_errors() {
    for (what, b) in [
        ("empty", vec![]),
        ("header length u64::MAX", u64::MAX.to_le_bytes().to_vec()),
        (
            "header length past end",
            raw_safetensors("{}", 0)[..9].to_vec(),
        ),
        ("not json", raw_safetensors("{not json", 0)),
        (
            "offsets past data",
            raw_safetensors(
                r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
                8,
            ),
        ),
        (
            "shape vs offsets",
            raw_safetensors(
                r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#,
                16,
            ),
        ),
        (
            "shape overflow",
            raw_safetensors(
                r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}"#,
                16,
            ),
        ),
        (
            "unknown dtype",
            raw_safetensors(
                r#"{"w":{"dtype":"X9","shape":[4],"data_offsets":[0,16]}}"#,
                16,
            ),
        ),
    ] {
        assert!(
            matches!(safetensors::read(&b), Err(Error::Format { .. })),
            "{what}: {:?}",
            safetensors::read(&b)
        );
    }
}

#[test]
fn safetensors_truncation_at_every_offset_and_byte_flips_never_panic() {
    let bytes = write_safetensors(&[
        tensor("a", GgmlType::F32, &[8]),
        tensor("b", GgmlType::BF16, &[2, 4]),
    ])
    .unwrap();
    for len in 0..bytes.len() {
        assert!(
            safetensors::read(&bytes[..len]).is_err(),
            "truncated to {len}"
        );
    }
    let mut b = bytes.clone();
    for i in 0..b.len() {
        for mask in [0x01u8, 0x20, 0xFF] {
            b[i] ^= mask;
            let _ = safetensors::read(&b);
            b[i] ^= mask;
        }
    }
}

fn smollm2_files(shards: Vec<&[u8]>) -> HfFiles<'_> {
    HfFiles {
        config_json: oracle_hf("config.json"),
        shards,
        tokenizer_json: Some(oracle_hf("tokenizer.json")),
        tokenizer_config_json: Some(oracle_hf("tokenizer_config.json")),
        chat_template: Some(oracle_hf("chat_template.jinja")),
    }
}

#[test]
fn hf_directory_smollm2_files_with_two_synthetic_shards() {
    let shard0 = write_safetensors(&[
        tensor("model.embed_tokens.weight", GgmlType::BF16, &[4, 8]),
        tensor(
            "model.layers.0.self_attn.q_proj.weight",
            GgmlType::F32,
            &[8, 8],
        ),
        tensor(
            "model.layers.0.self_attn.rotary_emb.inv_freq",
            GgmlType::F32,
            &[4],
        ),
    ])
    .unwrap();
    let shard1 = write_safetensors(&[
        tensor(
            "model.layers.1.mlp.down_proj.weight",
            GgmlType::F16,
            &[8, 16],
        ),
        tensor("model.norm.weight", GgmlType::F32, &[8]),
    ])
    .unwrap();
    let files = smollm2_files(vec![&shard0, &shard1]);
    let source = ModelSource::from_hf(&files).unwrap();
    let mut names: Vec<&str> = source.tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "blk.0.attn_q.weight",
            "blk.1.ffn_down.weight",
            "output_norm.weight",
            "token_embd.weight"
        ]
    );
    let down = source.tensor("blk.1.ffn_down.weight").unwrap();
    assert_eq!(
        (down.ty, down.shape.as_slice()),
        (GgmlType::F16, [8usize, 16].as_slice())
    );
    assert_eq!(
        down.data,
        tensor(
            "model.layers.1.mlp.down_proj.weight",
            GgmlType::F16,
            &[8, 16]
        )
        .3
        .as_slice()
    );
    assert_eq!(source.qk_row_order, QkRowOrder::HalfSplit);
    assert_eq!(
        source.config,
        ModelConfig::from_hf_json(&oracle_hf("config.json")).unwrap()
    );
    assert!(source.config.tied_embeddings);
    assert_eq!(
        source.special,
        SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            eos_extra: vec![],
            add_bos: false
        }
    );
    let template = oracle_hf("tokenizer_config.json");
    let template: serde_json::Value = serde_json::from_str(&template).unwrap();
    assert_eq!(
        source.chat_template.as_deref(),
        template["chat_template"].as_str()
    );
    assert!(
        matches!(&source.tokenizer, TokenizerSource::Json(t) if *t == oracle_hf("tokenizer.json"))
    );
}

#[test]
fn hf_directory_flags_follow_tensors_lm_head_and_q_bias() {
    let shard = write_safetensors(&[
        tensor("lm_head.weight", GgmlType::F32, &[4, 8]),
        tensor("model.layers.0.self_attn.q_proj.bias", GgmlType::F32, &[8]),
        tensor(
            "model.layers.0.self_attn.q_norm.weight",
            GgmlType::F32,
            &[8],
        ),
    ])
    .unwrap();
    let source = ModelSource::from_hf(&smollm2_files(vec![&shard])).unwrap();
    assert!(!source.config.tied_embeddings);
    assert!(source.config.attention_bias);
    assert!(source.config.qk_norm);
    assert_eq!(source.tensor("output.weight").unwrap().shape, vec![4, 8]);
}

#[test]
fn hf_directory_errors_missing_tokenizer_json_and_tensor_in_two_shards() {
    let shard = write_safetensors(&[tensor("model.norm.weight", GgmlType::F32, &[8])]).unwrap();
    let files = HfFiles {
        tokenizer_json: None,
        ..smollm2_files(vec![&shard])
    };
    assert!(
        matches!(ModelSource::from_hf(&files), Err(Error::Tokenizer(m)) if m.contains("missing tokenizer.json"))
    );
    let files = smollm2_files(vec![&shard, &shard]);
    assert!(matches!(
        ModelSource::from_hf(&files),
        Err(Error::Format { .. })
    ));
}

#[test]
fn hf_directory_specials_from_object_tokens_config_eos_list_and_jinja_template() {
    let tokenizer_config = r#"{"bos_token": {"content": "<|endoftext|>"}, "eos_token": null}"#;
    let mut config: serde_json::Value = serde_json::from_str(&oracle_hf("config.json")).unwrap();
    config["eos_token_id"] = serde_json::json!([5, 6]);
    let shard = write_safetensors(&[tensor("model.norm.weight", GgmlType::F32, &[8])]).unwrap();
    let files = HfFiles {
        config_json: config.to_string(),
        tokenizer_config_json: Some(tokenizer_config.into()),
        ..smollm2_files(vec![&shard])
    };
    let source = ModelSource::from_hf(&files).unwrap();
    // <|im_end|> = 2 is an end-of-turn token of the vocabulary.
    assert_eq!(
        source.special,
        SpecialTokens {
            bos: Some(0),
            eos: Some(5),
            eos_extra: vec![6, 2],
            add_bos: false
        }
    );
    assert_eq!(source.chat_template, Some(oracle_hf("chat_template.jinja")));
}

#[test]
fn shard_names_sorted_unique_and_plain_file_names_only() {
    let index = r#"{"metadata": {"total_size": 1}, "weight_map": {
        "a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors"}}"#;
    assert_eq!(
        shard_names(index).unwrap(),
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    for bad in [
        r#"{"weight_map": {"a": "../x"}}"#,
        r#"{"weight_map": {"a": 3}}"#,
        r#"{"weights": {}}"#,
        "nope",
    ] {
        assert!(
            matches!(shard_names(bad), Err(Error::Format { .. })),
            "{bad}"
        );
    }
}

#[test]
fn hf_config_json_round_trips_for_each_architecture_and_rope_scaling() {
    let base = ModelConfig::from_hf_json(&oracle_hf("config.json")).unwrap();
    for arch in ["llama", "qwen2", "qwen3", "mistral"] {
        for scaling in [
            None,
            Some(RopeScaling::Linear { factor: 2.0 }),
            Some(RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_context: 8192,
            }),
        ] {
            let config = ModelConfig {
                architecture: arch.into(),
                rope_scaling: scaling,
                qk_norm: arch == "qwen3",
                ..base.clone()
            };
            assert_eq!(
                ModelConfig::from_hf_json(&config.to_hf_json()).unwrap(),
                config,
                "{arch}"
            );
        }
    }
}

#[test]
fn hf_config_json_defaults_and_errors() {
    // Minimal Qwen2 config: architectures only, no head_dim, no kv heads, no attention_bias.
    let qwen2 = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": 32,
        "rms_norm_eps": 1e-6, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}"#;
    let config = ModelConfig::from_hf_json(qwen2).unwrap();
    assert_eq!(
        (
            config.architecture.as_str(),
            config.n_kv_heads,
            config.head_dim,
            config.rope_theta,
            config.attention_bias,
            config.tied_embeddings
        ),
        ("qwen2", 4, 16, 1e6, true, false)
    );
    assert!(matches!(
        ModelConfig::from_hf_json(&qwen2.replace("Qwen2ForCausalLM", "GPT2LMHeadModel")),
        Err(Error::UnsupportedArchitecture(_))
    ));
    assert!(matches!(
        ModelConfig::from_hf_json(&qwen2.replace("\"hidden_size\": 64", "\"hidden_size\": -1")),
        Err(Error::Metadata { .. })
    ));
    assert!(matches!(
        ModelConfig::from_hf_json(
            &qwen2.replace("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"")
        ),
        Err(Error::Metadata { .. })
    ));
    assert!(matches!(
        ModelConfig::from_hf_json("{"),
        Err(Error::Format { .. })
    ));
}

#[test]
fn sliding_window_mistral_always_qwen2_only_with_use_sliding_window_round_trips() {
    let base =
        inferno_core::config::ModelConfig::from_hf_json(&common::read_oracle("hf/config.json"))
            .unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&base.to_hf_json()).unwrap();
    json["sliding_window"] = serde_json::json!(4096);
    json["model_type"] = serde_json::json!("mistral");
    let mistral = inferno_core::config::ModelConfig::from_hf_json(&json.to_string()).unwrap();
    assert_eq!(mistral.sliding_window, Some(4096));
    json["model_type"] = serde_json::json!("qwen2");
    let qwen2 = inferno_core::config::ModelConfig::from_hf_json(&json.to_string()).unwrap();
    assert_eq!(qwen2.sliding_window, None);
    json["use_sliding_window"] = serde_json::json!(true);
    let qwen2 = inferno_core::config::ModelConfig::from_hf_json(&json.to_string()).unwrap();
    assert_eq!(qwen2.sliding_window, Some(4096));
    for c in [mistral, qwen2] {
        assert_eq!(
            inferno_core::config::ModelConfig::from_hf_json(&c.to_hf_json()).unwrap(),
            c
        );
    }
    json["sliding_window"] = serde_json::json!("big");
    assert!(inferno_core::config::ModelConfig::from_hf_json(&json.to_string()).is_err());
}
