//! GGUF reader/writer: round trips of every value and tensor type, typed getters, config and
//! ModelSource from metadata, every named error, and hostile files (truncated, bit-flipped,
//! absurd counts) that must give an error, never a panic or a huge allocation.

use inferno_core::config::{ModelConfig, RopeScaling};
use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_core::formats::{ModelSource, QkRowOrder};
use inferno_core::quant::GgmlType;
use inferno_core::Error;

mod common;

const ALL_TYPES: [GgmlType; 6] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
];

fn every_value_type() -> Vec<(String, Value)> {
    vec![
        ("t.u8".into(), Value::U8(200)),
        ("t.i8".into(), Value::I8(-100)),
        ("t.u16".into(), Value::U16(60000)),
        ("t.i16".into(), Value::I16(-30000)),
        ("t.u32".into(), Value::U32(4_000_000_000)),
        ("t.i32".into(), Value::I32(-2_000_000_000)),
        ("t.u64".into(), Value::U64(u64::MAX)),
        ("t.i64".into(), Value::I64(i64::MIN)),
        ("t.f32".into(), Value::F32(-1.5e-7)),
        ("t.f64".into(), Value::F64(std::f64::consts::PI)),
        ("t.bool_true".into(), Value::Bool(true)),
        ("t.bool_false".into(), Value::Bool(false)),
        (
            "t.string".into(),
            Value::String("héllo <|im_end|>\n".into()),
        ),
        ("t.empty_string".into(), Value::String(String::new())),
        (
            "t.array_u32".into(),
            Value::Array(vec![Value::U32(1), Value::U32(2), Value::U32(3)]),
        ),
        (
            "t.array_str".into(),
            Value::Array(vec![Value::String("a".into()), Value::String("Ġb".into())]),
        ),
        ("t.array_f64".into(), Value::Array(vec![Value::F64(0.5)])),
        (
            "t.array_bool".into(),
            Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
        ),
        ("t.array_empty".into(), Value::Array(vec![])),
        (
            "t.array_nested".into(),
            Value::Array(vec![
                Value::Array(vec![Value::I16(-1), Value::I16(2)]),
                Value::Array(vec![Value::I16(3)]),
            ]),
        ),
    ]
}

/// Bytes of `n` elements of `ty` that differ from tensor to tensor.
fn pattern_bytes(ty: GgmlType, n: usize, salt: u8) -> Vec<u8> {
    let len = ty.bytes_for(n as u64).unwrap() as usize;
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// Shapes of 1 to 4 dimensions, every inner dimension a whole number of 32-blocks.
const SHAPES: [&[usize]; 4] = [&[64], &[3, 32], &[2, 1, 96], &[2, 2, 1, 32]];

fn round_trip_file() -> (Vec<u8>, Vec<(String, GgmlType, Vec<usize>, Vec<u8>)>) {
    let mut w = GgufWriter::new();
    for (k, v) in every_value_type() {
        w.add_metadata(k, v).unwrap();
    }
    let mut tensors = Vec::new();
    for (i, ty) in ALL_TYPES.into_iter().enumerate() {
        for (j, shape) in SHAPES.into_iter().enumerate() {
            let n = shape.iter().product();
            tensors.push((
                format!("t{i}.{j}.{}", ty.name()),
                ty,
                shape.to_vec(),
                pattern_bytes(ty, n, (i * 4 + j) as u8),
            ));
        }
    }
    for (name, ty, shape, data) in &tensors {
        w.add_tensor(name.clone(), *ty, shape, data.clone())
            .unwrap();
    }
    (w.to_bytes(), tensors)
}

#[test]
fn round_trip_every_value_type_and_every_tensor_type_in_1_to_4_dims() {
    let (bytes, tensors) = round_trip_file();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.alignment, 32);
    assert_eq!(file.data_offset % 32, 0);
    assert_eq!(file.metadata, every_value_type());
    assert_eq!(file.tensors.len(), tensors.len());
    for (info, (name, ty, shape, data)) in file.tensors.iter().zip(&tensors) {
        assert_eq!(&info.name, name);
        assert_eq!(info.ty, *ty);
        assert_eq!(info.shape().unwrap(), *shape);
        assert_eq!(
            info.dims,
            shape.iter().rev().map(|&d| d as u64).collect::<Vec<_>>()
        );
        assert_eq!(info.offset % 32, 0, "{name}");
        assert_eq!(file.tensor_data(info), data.as_slice(), "{name}");
    }
    // write_to and to_bytes agree, and writing twice gives the same bytes.
    let mut w = GgufWriter::new();
    for (k, v) in every_value_type() {
        w.add_metadata(k, v).unwrap();
    }
    for (name, ty, shape, data) in &tensors {
        w.add_tensor(name.clone(), *ty, shape, data.as_slice())
            .unwrap();
    }
    let mut streamed = Vec::new();
    w.write_to(&mut streamed).unwrap();
    assert_eq!(streamed, bytes);
}

#[test]
fn version_2_parses_like_version_3() {
    let (mut bytes, _) = round_trip_file();
    bytes[4] = 2;
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.version, 2);
    assert_eq!(file.metadata, every_value_type());
}

#[test]
fn version_1_and_4_are_unsupported_and_bad_magic_is_named() {
    let (bytes, _) = round_trip_file();
    for version in [1u32, 4] {
        let mut b = bytes.clone();
        b[4..8].copy_from_slice(&version.to_le_bytes());
        assert!(
            matches!(GgufFile::parse(&b), Err(Error::UnsupportedGgufVersion { version: v }) if v == version)
        );
    }
    let mut b = bytes.clone();
    b[0] = b'X';
    assert!(matches!(GgufFile::parse(&b), Err(Error::BadMagic { found }) if &found == b"XGUF"));
    assert!(matches!(
        GgufFile::parse(b"GG"),
        Err(Error::Truncated { .. })
    ));
}

#[test]
fn typed_getters_accept_any_fitting_integer_and_reject_wrong_types() {
    let (bytes, _) = round_trip_file();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.get_u32("t.u8").unwrap(), 200);
    assert_eq!(file.get_u32("t.u16").unwrap(), 60000);
    assert_eq!(file.get_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(file.get_f32("t.f64").unwrap(), std::f32::consts::PI);
    assert_eq!(file.get_f32("t.u8").unwrap(), 200.0);
    assert!(file.get_bool("t.bool_true").unwrap());
    assert_eq!(file.get_str("t.string").unwrap(), "héllo <|im_end|>\n");
    assert_eq!(file.get_str_array("t.array_str").unwrap(), ["a", "Ġb"]);
    assert_eq!(file.get_array("t.array_empty").unwrap(), &[]);
    assert_eq!(file.opt_u32("t.missing").unwrap(), None);
    for (key, result) in [
        ("t.i8", file.get_u32("t.i8").map(|_| ())),   // negative
        ("t.u64", file.get_u32("t.u64").map(|_| ())), // does not fit
        ("t.string", file.get_u32("t.string").map(|_| ())),
        ("t.u32", file.get_str("t.u32").map(|_| ())),
        ("t.u8", file.get_bool("t.u8").map(|_| ())),
        ("t.array_u32", file.get_str_array("t.array_u32").map(|_| ())),
        ("t.missing", file.get_u32("t.missing").map(|_| ())),
    ] {
        assert!(
            matches!(result, Err(Error::Metadata { key: ref k, .. }) if k == key),
            "{key}: {result:?}"
        );
    }
}

#[test]
fn writer_rejects_wrong_byte_counts_bad_dims_duplicates_and_mixed_arrays() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("a", GgmlType::Q4_0, &[2, 32], vec![0u8; 35])
        .is_err());
    assert!(w
        .add_tensor("a", GgmlType::Q4_0, &[2, 31], vec![0u8; 36])
        .is_err());
    assert!(w.add_tensor("a", GgmlType::F32, &[], vec![]).is_err());
    assert!(w
        .add_tensor("a", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4])
        .is_err());
    w.add_tensor("a", GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap();
    assert!(w
        .add_tensor("a", GgmlType::F32, &[1], vec![0u8; 4])
        .is_err());
    assert!(w
        .add_metadata("m", Value::Array(vec![Value::U8(1), Value::I8(1)]))
        .is_err());
    // A later value for the same key replaces the first; general.alignment is always 32.
    w.add_metadata("k", Value::U8(1)).unwrap();
    w.add_metadata("k", Value::U8(2)).unwrap();
    w.add_metadata("general.alignment", Value::U32(64)).unwrap();
    let bytes = w.to_bytes();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.metadata, vec![("k".to_string(), Value::U8(2))]);
    assert_eq!(file.alignment, 32);
}

// ---- hand-built headers for hostile files ----

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&n_tensors.to_le_bytes());
    out.extend_from_slice(&n_kv.to_le_bytes());
    out
}

fn tensor_info(out: &mut Vec<u8>, name: &str, dims: &[u64], type_id: u32, offset: u64) {
    string(out, name);
    out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
}

/// A file with one tensor, its data section `data_len` bytes long.
fn one_tensor_file(dims: &[u64], type_id: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut b = header(1, 0);
    tensor_info(&mut b, "w", dims, type_id, offset);
    b.resize(b.len().next_multiple_of(32) + data_len, 0);
    b
}

#[test]
fn unknown_tensor_type_iq3_s_id_21_and_id_999_are_named_q4_k_id_12_and_iq4_xs_id_23_parse() {
    // Q4_K (one 256-element super-block of 144 bytes) and IQ4_XS (136 bytes) are types inferno
    // computes with.
    let b = one_tensor_file(&[256], 12, 0, 144);
    assert!(GgufFile::parse(&b).is_ok());
    let b = one_tensor_file(&[256], 23, 0, 136);
    assert!(GgufFile::parse(&b).is_ok());
    let b = one_tensor_file(&[256], 21, 0, 110);
    match GgufFile::parse(&b) {
        Err(Error::UnsupportedTensorType {
            name,
            ggml_type,
            type_name,
        }) => {
            assert_eq!(
                (name.as_str(), ggml_type, type_name.as_str()),
                ("w", 21, "IQ3_S")
            )
        }
        other => panic!("{other:?}"),
    }
    let b = one_tensor_file(&[256], 999, 0, 144);
    assert!(
        matches!(GgufFile::parse(&b), Err(Error::UnsupportedTensorType { ggml_type: 999, ref type_name, .. }) if type_name == "unknown")
    );
}

#[test]
fn tensor_out_of_bounds_f32_64_elements_in_255_bytes_and_offset_past_end() {
    let b = one_tensor_file(&[64], 0, 0, 255);
    match GgufFile::parse(&b) {
        Err(Error::TensorOutOfBounds {
            name,
            offset,
            size,
            len,
        }) => assert_eq!((name.as_str(), offset, size, len), ("w", 0, 256, 255)),
        other => panic!("{other:?}"),
    }
    assert!(GgufFile::parse(&one_tensor_file(&[64], 0, 0, 256)).is_ok());
    let b = one_tensor_file(&[64], 0, u64::MAX - 31, 256);
    assert!(matches!(
        GgufFile::parse(&b),
        Err(Error::TensorOutOfBounds { .. })
    ));
}

#[test]
fn bad_tensor_shapes_0_dims_5_dims_overflow_partial_block_misaligned_offset() {
    for (what, b) in [
        ("0 dims", one_tensor_file(&[], 0, 0, 64)),
        ("5 dims", one_tensor_file(&[1, 1, 1, 1, 1], 0, 0, 64)),
        ("overflow", one_tensor_file(&[1 << 32, 1 << 32], 0, 0, 64)),
        ("q4_0 of 33", one_tensor_file(&[33], 2, 0, 64)),
        ("offset 4", one_tensor_file(&[1], 0, 4, 64)),
    ] {
        assert!(
            matches!(GgufFile::parse(&b), Err(Error::Format { .. })),
            "{what}: {:?}",
            GgufFile::parse(&b)
        );
    }
}

#[test]
fn absurd_counts_and_lengths_fail_fast_with_truncated() {
    // Each count would ask for exabytes if believed.
    let huge = 0xFFFF_FFFF_FFFF_u64;
    let mut cases = vec![
        ("kv count", header(0, u64::MAX)),
        ("tensor count", header(u64::MAX, 0)),
    ];
    let mut b = header(0, 1);
    b.extend_from_slice(&huge.to_le_bytes());
    cases.push(("key length", b));
    let mut b = header(0, 1);
    string(&mut b, "k");
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&huge.to_le_bytes());
    cases.push(("string value length", b));
    for elem_type in [0u32, 8, 9, 12] {
        let mut b = header(0, 1);
        string(&mut b, "k");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&elem_type.to_le_bytes());
        b.extend_from_slice(&huge.to_le_bytes());
        b.extend_from_slice(&[0; 64]);
        cases.push(("array length", b));
    }
    let mut b = header(1, 0);
    b.extend_from_slice(&huge.to_le_bytes());
    cases.push(("tensor name length", b));
    for (what, b) in cases {
        assert!(
            matches!(GgufFile::parse(&b), Err(Error::Truncated { .. })),
            "{what}: {:?}",
            GgufFile::parse(&b)
        );
    }
}

#[test]
fn nested_arrays_deeper_than_8_are_refused_not_recursed() {
    let depth = 100_000;
    let mut b = header(0, 1);
    string(&mut b, "deep");
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..depth {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    assert!(matches!(GgufFile::parse(&b), Err(Error::Metadata { ref key, .. }) if key == "deep"));
}

#[test]
fn alignment_0_3_and_string_are_refused_64_is_used() {
    for (value, ok) in [
        (Value::U32(0), false),
        (Value::U32(3), false),
        (Value::String("32".into()), false),
        (Value::U32(64), true),
    ] {
        let mut b = header(1, 1);
        string(&mut b, "general.alignment");
        let mut payload = Vec::new();
        match &value {
            Value::U32(v) => {
                payload.extend_from_slice(&4u32.to_le_bytes());
                payload.extend_from_slice(&v.to_le_bytes());
            }
            Value::String(s) => {
                payload.extend_from_slice(&8u32.to_le_bytes());
                string(&mut payload, s);
            }
            _ => unreachable!(),
        }
        b.extend_from_slice(&payload);
        tensor_info(&mut b, "w", &[16], 0, 0);
        b.resize(b.len().next_multiple_of(64) + 64, 0);
        let parsed = GgufFile::parse(&b);
        if ok {
            let file = parsed.unwrap();
            assert_eq!((file.alignment, file.data_offset % 64), (64, 0));
        } else {
            assert!(
                matches!(parsed, Err(Error::Metadata { ref key, .. }) if key == "general.alignment"),
                "{value:?}: {parsed:?}"
            );
        }
    }
}

#[test]
fn duplicate_metadata_key_and_duplicate_tensor_name_are_refused() {
    let mut b = header(0, 2);
    for _ in 0..2 {
        string(&mut b, "k");
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(1);
    }
    assert!(matches!(GgufFile::parse(&b), Err(Error::Metadata { .. })));
    let mut b = header(2, 0);
    tensor_info(&mut b, "w", &[8], 0, 0);
    tensor_info(&mut b, "w", &[8], 0, 32);
    b.resize(b.len().next_multiple_of(32) + 64, 0);
    assert!(matches!(GgufFile::parse(&b), Err(Error::Format { .. })));
}

#[test]
fn truncation_at_every_offset_of_a_small_file_gives_err_never_panics() {
    let (bytes, _) = round_trip_file();
    // Cutting only the padding after the last tensor leaves a complete file.
    let file = GgufFile::parse(&bytes).unwrap();
    let data_end = file
        .tensors
        .iter()
        .map(|t| file.data_offset + t.offset + t.byte_size().unwrap())
        .max()
        .unwrap() as usize;
    for len in 0..bytes.len() {
        assert_eq!(
            GgufFile::parse(&bytes[..len]).is_ok(),
            len >= data_end,
            "truncated to {len}"
        );
    }
}

#[test]
fn flipping_every_byte_of_a_small_file_with_3_masks_never_panics() {
    let (bytes, _) = round_trip_file();
    let header_end = GgufFile::parse(&bytes).unwrap().data_offset as usize;
    let mut b = bytes.clone();
    for i in 0..header_end {
        for mask in [0x01u8, 0x80, 0xFF] {
            b[i] ^= mask;
            let _ = GgufFile::parse(&b);
            b[i] ^= mask;
        }
    }
}

// ---- config and ModelSource from metadata ----

fn base_config(architecture: &str) -> ModelConfig {
    ModelConfig {
        architecture: architecture.into(),
        ..common::tiny_llama_config()
    }
}

/// A file with `config`'s metadata, a token list and the given F32 tensors (name, shape).
fn model_file(
    config: &ModelConfig,
    tensors: &[(&str, &[usize])],
    extra: &[(&str, Value)],
) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in config.to_gguf_metadata() {
        w.add_metadata(k, v).unwrap();
    }
    let tokens = [
        "<unk>",
        "<s>",
        "</s>",
        "<|im_end|>",
        "a",
        "<|eot_id|>",
        "b",
        "c",
    ];
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(
            tokens
                .iter()
                .map(|t| Value::String(t.to_string()))
                .collect(),
        ),
    )
    .unwrap();
    w.add_metadata("tokenizer.ggml.model", Value::String("llama".into()))
        .unwrap();
    w.add_metadata("tokenizer.ggml.bos_token_id", Value::I32(1))
        .unwrap();
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U64(2))
        .unwrap();
    for (k, v) in extra {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    for (name, shape) in tensors {
        let n: usize = shape.iter().product();
        w.add_tensor(*name, GgmlType::F32, shape, vec![0u8; n * 4])
            .unwrap();
    }
    w.to_bytes()
}

#[test]
fn config_round_trips_through_metadata_for_llama_qwen2_qwen3_mistral_with_rope_scaling() {
    let scalings = [
        None,
        Some(RopeScaling::Linear { factor: 4.0 }),
        Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        }),
    ];
    for arch in ["llama", "qwen2", "qwen3", "mistral"] {
        for scaling in &scalings {
            let config = ModelConfig {
                rope_scaling: scaling.clone(),
                ..base_config(arch)
            };
            let bytes = model_file(&config, &[("token_embd.weight", &[8, 64])], &[]);
            let file = GgufFile::parse(&bytes).unwrap();
            assert_eq!(
                ModelConfig::from_gguf(&file).unwrap(),
                config,
                "{arch} {scaling:?}"
            );
        }
    }
}

#[test]
fn config_flags_come_from_tensors_output_bias_qk_norm() {
    let config = base_config("qwen3");
    let bytes = model_file(
        &config,
        &[
            ("token_embd.weight", &[8, 64]),
            ("output.weight", &[8, 64]),
            ("blk.0.attn_q.bias", &[64]),
            ("blk.0.attn_q_norm.weight", &[16]),
        ],
        &[],
    );
    let file = GgufFile::parse(&bytes).unwrap();
    let got = ModelConfig::from_gguf(&file).unwrap();
    assert_eq!(
        got,
        ModelConfig {
            tied_embeddings: false,
            attention_bias: true,
            qk_norm: true,
            ..config
        }
    );
}

#[test]
fn config_defaults_kv_heads_head_dim_rope_theta_and_vocab_from_embedding_rows() {
    let mut w = GgufWriter::new();
    for (k, v) in [
        ("general.architecture", Value::String("llama".into())),
        ("llama.embedding_length", Value::I32(64)),
        ("llama.feed_forward_length", Value::U64(96)),
        ("llama.block_count", Value::U16(1)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.context_length", Value::U32(128)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
    ] {
        w.add_metadata(k, v).unwrap();
    }
    w.add_tensor(
        "token_embd.weight",
        GgmlType::F32,
        &[10, 64],
        vec![0u8; 10 * 64 * 4],
    )
    .unwrap();
    let bytes = w.to_bytes();
    let config = ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
    assert_eq!(
        config,
        ModelConfig {
            n_kv_heads: 4,
            vocab_size: 10,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
            ..base_config("llama")
        }
    );
}

#[test]
fn config_errors_name_architecture_missing_key_bad_scaling_and_rope_freqs() {
    let mut config = base_config("llama");
    config.architecture = "gpt2".into();
    let bytes = model_file(&config, &[], &[]);
    assert!(
        matches!(ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()), Err(Error::UnsupportedArchitecture(a)) if a == "gpt2")
    );

    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap();
    let bytes = w.to_bytes();
    assert!(
        matches!(ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()), Err(Error::Metadata { key, .. }) if key == "llama.embedding_length")
    );

    let bytes = model_file(
        &base_config("llama"),
        &[],
        &[("llama.rope.scaling.type", Value::String("yarn".into()))],
    );
    assert!(
        matches!(ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()), Err(Error::Metadata { key, .. }) if key == "llama.rope.scaling.type")
    );

    // rope_freqs.weight: head_dim / 2 = 8 positive F32 factors; zeros are refused by value,
    // another length by shape.
    let bytes = model_file(&base_config("llama"), &[("rope_freqs.weight", &[8])], &[]);
    assert!(
        matches!(ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()), Err(Error::Metadata { ref key, ref problem }) if key == "rope_scaling" && problem.contains("rope_freqs.weight holds 0")),
        "{:?}",
        ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap())
    );
    let bytes = model_file(&base_config("llama"), &[("rope_freqs.weight", &[5])], &[]);
    assert!(
        matches!(ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()), Err(Error::Metadata { key, .. }) if key == "rope_freqs.weight")
    );

    let bytes = model_file(
        &ModelConfig {
            n_kv_heads: 3,
            ..base_config("llama")
        },
        &[],
        &[],
    );
    assert!(matches!(
        ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()),
        Err(Error::Metadata { .. })
    ));
}

#[test]
fn model_source_row_order_specials_and_shapes_for_llama_and_qwen2() {
    for (arch, order) in [
        ("llama", QkRowOrder::Interleaved),
        ("mistral", QkRowOrder::Interleaved),
        ("qwen2", QkRowOrder::HalfSplit),
        ("qwen3", QkRowOrder::HalfSplit),
    ] {
        let bytes = model_file(
            &base_config(arch),
            &[
                ("token_embd.weight", &[8, 64]),
                ("blk.0.ffn_down.weight", &[64, 96]),
            ],
            &[],
        );
        let file = GgufFile::parse(&bytes).unwrap();
        let source = ModelSource::from_gguf(&file).unwrap();
        assert_eq!(source.qk_row_order, order, "{arch}");
        assert_eq!(
            source.tensor("blk.0.ffn_down.weight").unwrap().shape,
            vec![64, 96]
        );
        assert_eq!(
            source.tensor("blk.0.ffn_down.weight").unwrap().data.len(),
            64 * 96 * 4
        );
        assert_eq!(source.special.bos, Some(1));
        assert_eq!(source.special.eos, Some(2));
        assert_eq!(source.special.eos_extra, vec![3, 5]);
        assert!(
            source.special.add_bos,
            "llama tokenizer model defaults to a BOS"
        );
        assert_eq!(source.chat_template, None);
    }
    let bytes = model_file(
        &base_config("llama"),
        &[],
        &[
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.chat_template", Value::String("{{x}}".into())),
        ],
    );
    let file = GgufFile::parse(&bytes).unwrap();
    let source = ModelSource::from_gguf(&file).unwrap();
    assert!(
        !source.special.add_bos,
        "gpt2 tokenizer model defaults to no BOS"
    );
    assert_eq!(source.chat_template.as_deref(), Some("{{x}}"));
}
