//! Model files that must be refused at load with a message naming the tensor: tensors the
//! config's forward would not read (a layer past the block count, an unknown suffix, llama.cpp's
//! rope_freqs without llama3 scaling), in GGUF and in an HF directory; safetensors dtypes and
//! headers inferno cannot read; and a matrix whose byte count does not fit its shape.

use inferno_core::config::{ModelConfig, RopeScaling};
use inferno_core::formats::gguf::{GgufFile, GgufWriter};
use inferno_core::formats::hf_dir::{write_safetensors, HfFiles};
use inferno_core::formats::{safetensors, ModelSource};
use inferno_core::kernels::Matrix;
use inferno_core::quant::GgmlType;
use inferno_core::Error;

mod common;

fn one_layer_config(rope_scaling: Option<RopeScaling>) -> ModelConfig {
    ModelConfig {
        rope_scaling,
        ..common::tiny_llama_config()
    }
}

/// A GGUF with the config's metadata and one 4-element F32 tensor per name.
fn gguf_with_tensors(config: &ModelConfig, names: &[&str]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in config.to_gguf_metadata() {
        w.add_metadata(k, v).unwrap();
    }
    for name in names {
        w.add_tensor(*name, GgmlType::F32, &[4], vec![0u8; 16])
            .unwrap();
    }
    w.to_bytes()
}

fn gguf_source_error(config: &ModelConfig, names: &[&str]) -> Option<Error> {
    let bytes = gguf_with_tensors(config, names);
    ModelSource::from_gguf(&GgufFile::parse(&bytes).unwrap()).err()
}

/// Every tensor a one-layer model with biases and QK norms reads.
const ONE_LAYER_TENSORS: [&str; 17] = [
    "token_embd.weight",
    "output_norm.weight",
    "output.weight",
    "blk.0.attn_norm.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_k.weight",
    "blk.0.attn_v.weight",
    "blk.0.attn_q.bias",
    "blk.0.attn_k.bias",
    "blk.0.attn_v.bias",
    "blk.0.attn_q_norm.weight",
    "blk.0.attn_k_norm.weight",
    "blk.0.attn_output.weight",
    "blk.0.ffn_norm.weight",
    "blk.0.ffn_gate.weight",
    "blk.0.ffn_up.weight",
    "blk.0.ffn_down.weight",
];

#[test]
fn gguf_every_tensor_of_a_1_layer_model_with_biases_and_qk_norm_is_accepted() {
    assert!(gguf_source_error(&one_layer_config(None), &ONE_LAYER_TENSORS).is_none());
}

#[test]
fn gguf_unused_tensors_blk_1_of_1_layer_unknown_suffix_and_unknown_global_are_named() {
    let cases = [
        (
            "blk.1.attn_q.weight",
            "tensor 'blk.1.attn_q.weight' is not used by a 1-layer llama model (layer 1 is past the config's 1 layers); refusing to ignore it",
        ),
        (
            "blk.0.attn_output.bias",
            "tensor 'blk.0.attn_output.bias' is not used by a 1-layer llama model (the forward has no per-layer 'attn_output.bias'); refusing to ignore it",
        ),
        (
            "blk.0.ffn_gate.bias",
            "tensor 'blk.0.ffn_gate.bias' is not used by a 1-layer llama model (the forward has no per-layer 'ffn_gate.bias'); refusing to ignore it",
        ),
        (
            "pos_embd.weight",
            "tensor 'pos_embd.weight' is not used by a 1-layer llama model (not a tensor of the Llama layout); refusing to ignore it",
        ),
    ];
    for (extra, want) in cases {
        let mut names = ONE_LAYER_TENSORS.to_vec();
        names.insert(5, extra);
        match gguf_source_error(&one_layer_config(None), &names) {
            Some(e @ Error::UnusedTensor { .. }) => assert_eq!(e.to_string(), want),
            other => panic!("{extra}: expected UnusedTensor, got {other:?}"),
        }
    }
}

#[test]
fn gguf_rope_freqs_accepted_with_llama3_scaling_refused_with_linear() {
    let llama3 = Some(RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192,
    });
    let mut names = ONE_LAYER_TENSORS.to_vec();
    names.push("rope_freqs.weight");
    assert!(gguf_source_error(&one_layer_config(llama3), &names).is_none());
    let linear = Some(RopeScaling::Linear { factor: 2.0 });
    match gguf_source_error(&one_layer_config(linear), &names) {
        Some(Error::UnusedTensor { name, why, .. }) => assert_eq!(
            (name.as_str(), why.as_str()),
            (
                "rope_freqs.weight",
                "per-frequency RoPE factors need llama3 RoPE scaling"
            )
        ),
        other => panic!("expected UnusedTensor, got {other:?}"),
    }
}

type Tensor = (String, GgmlType, Vec<usize>, Vec<u8>);

fn f32_tensor(name: &str, n: usize) -> Tensor {
    (name.into(), GgmlType::F32, vec![n], vec![0u8; n * 4])
}

/// SmolLM2's HF files (30 layers) with one shard of these tensors.
fn hf_source_error(tensors: &[Tensor]) -> Option<Error> {
    let shard = write_safetensors(tensors).unwrap();
    let files = HfFiles {
        config_json: common::read_oracle("hf/config.json"),
        shards: vec![&shard],
        tokenizer_json: Some(common::read_oracle("hf/tokenizer.json")),
        tokenizer_config_json: Some(common::read_oracle("hf/tokenizer_config.json")),
        chat_template: None,
    };
    ModelSource::from_hf(&files).err()
}

#[test]
fn hf_layer_29_and_inv_freq_accepted_layer_30_mlp_bias_and_lm_head_bias_named() {
    let fine = [
        f32_tensor("model.norm.weight", 4),
        f32_tensor("model.layers.29.mlp.up_proj.weight", 4),
        f32_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", 4),
    ];
    assert!(hf_source_error(&fine).is_none());
    for (extra, why) in [
        (
            "model.layers.30.mlp.up_proj.weight",
            "layer 30 is past the config's 30 layers",
        ),
        (
            "model.layers.0.mlp.gate_proj.bias",
            "the forward has no per-layer 'ffn_gate.bias'",
        ),
        ("lm_head.bias", "not a tensor of the Llama layout"),
    ] {
        let mut tensors = fine.to_vec();
        tensors.push(f32_tensor(extra, 4));
        match hf_source_error(&tensors) {
            Some(Error::UnusedTensor {
                name,
                architecture,
                n_layers,
                why: got,
            }) => assert_eq!(
                (name.as_str(), architecture.as_str(), n_layers, got.as_str()),
                (extra, "llama", 30, why)
            ),
            other => panic!("{extra}: expected UnusedTensor, got {other:?}"),
        }
    }
}

/// A safetensors file with a hand-written header and `data_len` zero bytes of data.
fn raw_safetensors(header: &str, data_len: usize) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + data_len, 0);
    b
}

#[test]
fn safetensors_f8_e4m3_is_named_by_dtype_and_tensor() {
    let b = raw_safetensors(
        r#"{"model.norm.weight":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}"#,
        4,
    );
    let e = safetensors::read(&b).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tensor 'model.norm.weight': unsupported safetensors dtype F8_E4M3 (supported: F32, F16, BF16)"
    );
}

#[test]
fn safetensors_header_errors_name_the_tensor_x9_shape_3_offsets_past_data_gap() {
    let ok = r#""a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#;
    let cases = [
        (
            format!(r#"{{{ok},"w":{{"dtype":"X9","shape":[4],"data_offsets":[8,24]}}}}"#),
            24,
            "tensor 'w': unknown dtype 'X9'",
        ),
        (
            format!(r#"{{{ok},"w":{{"dtype":"F32","shape":[3],"data_offsets":[8,24]}}}}"#),
            24,
            "tensor 'w': F32 shape [3] takes 12 bytes, data_offsets give 16",
        ),
        (
            format!(r#"{{{ok},"w":{{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}}}"#),
            16,
            "tensor 'w': data_offsets end at 24, past the 16 bytes of data",
        ),
        (
            format!(r#"{{{ok},"w":{{"dtype":"F32","shape":[4],"data_offsets":[12,28]}}}}"#),
            28,
            "tensor 'w': data_offsets [12, 28] do not follow the previous tensor (which ends at 8)",
        ),
    ];
    for (header, data_len, want) in cases {
        match safetensors::read(&raw_safetensors(&header, data_len)) {
            Err(Error::Format { format, problem }) => {
                assert_eq!(format, "safetensors");
                assert!(problem.starts_with(want), "{header}: {problem}");
            }
            other => panic!("{header}: expected a format error, got {other:?}"),
        }
    }
}

#[test]
fn matrix_from_bytes_q4_0_20x64_with_one_byte_short_is_a_byte_count_error() {
    // 20 rows of 2 Q4_0 blocks (18 bytes each) take 720 bytes.
    let bytes = vec![0u8; 719];
    match Matrix::from_bytes("blk.0.attn_q.weight", GgmlType::Q4_0, 20, 64, &bytes) {
        Err(e @ Error::TensorBytes { .. }) => assert_eq!(
            e.to_string(),
            "tensor 'blk.0.attn_q.weight' (Q4_0): 20x64 elements take 720 bytes, the tensor has 719"
        ),
        other => panic!("expected TensorBytes, got {:?}", other.map(|m| m.rows)),
    }
    assert!(Matrix::from_bytes("w", GgmlType::Q4_0, 20, 64, &[0u8; 720]).is_ok());
    // 33 columns cannot be Q4_0 blocks: a shape error, reported as the nearest block shape.
    match Matrix::from_bytes("w", GgmlType::Q4_0, 1, 33, &[0u8; 18]) {
        Err(Error::ShapeMismatch { expected, got, .. }) => {
            assert_eq!((expected, got), (vec![1, 64], vec![1, 33]))
        }
        other => panic!("expected ShapeMismatch, got {:?}", other.map(|m| m.rows)),
    }
}
