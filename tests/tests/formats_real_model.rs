//! The real test model (SmolLM2-135M-Instruct Q4_1) through the format layer: GGUF metadata,
//! config (equal to the oracle README's "Model facts" and to the oracle's HF config.json), the
//! ModelSource, and synthetic models that read back as the shape they were written with.

use inferno_core::config::ModelConfig;
use inferno_core::formats::gguf::GgufFile;
use inferno_core::formats::{ModelSource, QkRowOrder, SpecialTokens, TokenizerSource};
use inferno_core::quant::GgmlType;
use inferno_tests::{model_bytes, oracle_dir, synthetic_gguf, SyntheticShape};

#[test]
fn smollm2_gguf_header_metadata_and_tensor_table() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.alignment, 32);
    assert_eq!(file.metadata.len(), 33);
    assert_eq!(file.tensors.len(), 272);
    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(
        file.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(
        file.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );
    let count = |ty| file.tensors.iter().filter(|t| t.ty == ty).count();
    assert_eq!(
        (
            count(GgmlType::Q4_1),
            count(GgmlType::F32),
            count(GgmlType::Q8_0)
        ),
        (210, 61, 1)
    );
    let embd = file.tensor_info("token_embd.weight").unwrap();
    assert_eq!(
        (embd.dims.as_slice(), embd.ty),
        ([576u64, 49152].as_slice(), GgmlType::Q8_0)
    );
    assert_eq!(file.tensor_data(embd).len(), 49152 * 576 / 32 * 34);
    assert!(file.tensor_info("output.weight").is_none());
    // The last tensor ends inside the file.
    let end = file
        .tensors
        .iter()
        .map(|t| file.data_offset + t.offset + t.byte_size().unwrap())
        .max()
        .unwrap();
    assert!(end <= model_bytes().len() as u64);
}

fn smollm2_config() -> ModelConfig {
    ModelConfig {
        architecture: "llama".into(),
        dim: 576,
        hidden_dim: 1536,
        n_layers: 30,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        vocab_size: 49152,
        context_length: 8192,
        rms_eps: 1e-5,
        rope_theta: 100000.0,
        rope_scaling: None,
        tied_embeddings: true,
        attention_bias: false,
        qk_norm: false,
        sliding_window: None,
        extras: Default::default(),
    }
}

#[test]
fn smollm2_cache_read_per_step_at_100_positions_is_2304000_bytes() {
    // 30 layers x 100 rows x (K and V of 3 heads x 64) x 2 bytes.
    assert_eq!(smollm2_config().cache_bytes_read(100), 2_304_000);
    assert_eq!(smollm2_config().cache_bytes_read(0), 0);
}

#[test]
fn smollm2_config_from_gguf_equals_model_facts() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    assert_eq!(ModelConfig::from_gguf(&file).unwrap(), smollm2_config());
}

#[test]
fn smollm2_config_from_oracle_hf_config_json_equals_gguf_config() {
    let text = std::fs::read_to_string(oracle_dir().join("hf/config.json")).unwrap();
    let file = GgufFile::parse(model_bytes()).unwrap();
    assert_eq!(
        ModelConfig::from_hf_json(&text).unwrap(),
        ModelConfig::from_gguf(&file).unwrap()
    );
}

#[test]
fn smollm2_model_source_from_gguf() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let source = ModelSource::from_gguf(&file).unwrap();
    assert_eq!(source.config, smollm2_config());
    assert_eq!(source.qk_row_order, QkRowOrder::Interleaved);
    assert_eq!(source.tensors.len(), 272);
    let q = source.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.ty, q.shape.as_slice(), q.data.len()),
        (
            GgmlType::Q4_1,
            [576usize, 576].as_slice(),
            576 * 576 / 32 * 20
        )
    );
    let k = source.tensor("blk.29.attn_k.weight").unwrap();
    assert_eq!(k.shape, vec![192, 576]);
    let down = source.tensor("blk.3.ffn_down.weight").unwrap();
    assert_eq!(down.shape, vec![576, 1536]);
    assert_eq!(
        source.tensor("output_norm.weight").unwrap().shape,
        vec![576]
    );
    assert_eq!(
        source.special,
        SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            eos_extra: vec![],
            add_bos: false
        }
    );
    let template = source.chat_template.as_deref().unwrap();
    assert!(
        template.starts_with("{% for message in messages %}"),
        "{template}"
    );
    match &source.tokenizer {
        TokenizerSource::Gguf(meta) => {
            let keys: Vec<&str> = meta.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "tokenizer.ggml.add_space_prefix",
                    "tokenizer.ggml.add_bos_token",
                    "tokenizer.ggml.model",
                    "tokenizer.ggml.pre",
                    "tokenizer.ggml.tokens",
                    "tokenizer.ggml.token_type",
                    "tokenizer.ggml.merges",
                    "tokenizer.ggml.bos_token_id",
                    "tokenizer.ggml.eos_token_id",
                    "tokenizer.ggml.unknown_token_id",
                    "tokenizer.ggml.padding_token_id",
                    "tokenizer.chat_template",
                ]
            );
        }
        other => panic!("expected GGUF tokenizer metadata, got {other:?}"),
    }
}

#[test]
fn synthetic_presets_read_back_as_their_shape_q4_0_q8_0_f32() {
    for (shape, ty) in [
        (SyntheticShape::tiny(), GgmlType::Q4_0),
        (SyntheticShape::untied(), GgmlType::Q8_0),
        (SyntheticShape::head_dim_128(), GgmlType::F32),
    ] {
        let bytes = synthetic_gguf(&shape, 7, ty);
        let file = GgufFile::parse(&bytes).unwrap();
        let source = ModelSource::from_gguf(&file).unwrap();
        assert_eq!(source.config, shape.config(), "{shape:?}");
        let per_layer = 9;
        let globals = if shape.tied_embeddings { 2 } else { 3 };
        assert_eq!(source.tensors.len(), globals + per_layer * shape.n_layers);
        let q = source.tensor("blk.1.attn_q.weight").unwrap();
        assert_eq!(
            (q.ty, q.shape.clone()),
            (ty, vec![shape.n_heads * shape.head_dim, shape.dim])
        );
        assert_eq!(
            source.tensor("blk.1.ffn_norm.weight").unwrap().ty,
            GgmlType::F32
        );
        assert_eq!(source.special.eos, Some(2));
        assert_eq!(
            synthetic_gguf(&shape, 7, ty),
            bytes,
            "same seed, same bytes"
        );
        assert_ne!(
            synthetic_gguf(&shape, 8, ty),
            bytes,
            "other seed, other bytes"
        );
    }
}
