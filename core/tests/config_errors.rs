//! Model configs that must be refused at load, from GGUF metadata and HF config.json: RoPE
//! scaling factors of 0, below 0 or not finite, llama3 parameters that give no frequencies,
//! `rope_scaling` that is not an object, partial rotary embedding, and a config.json that is not
//! an object. Also the `torch_dtype` that `to_hf_json_with_dtype` writes.

use inferno_core::config::{ModelConfig, RopeScaling};
use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_core::Error;
use serde_json::{json, Value as Json};

mod common;

fn base_config() -> ModelConfig {
    common::tiny_llama_config()
}

/// The config read back from a GGUF holding its metadata, with `extra` keys set on top.
fn from_gguf(config: &ModelConfig, extra: &[(&str, Value)]) -> Result<ModelConfig, Error> {
    let mut w = GgufWriter::new();
    for (k, v) in config.to_gguf_metadata() {
        w.add_metadata(k, v).unwrap();
    }
    for (k, v) in extra {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    let bytes = w.to_bytes();
    ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap())
}

fn llama3(factor: f32, low: f32, high: f32, original_context: usize) -> RopeScaling {
    RopeScaling::Llama3 {
        factor,
        low_freq_factor: low,
        high_freq_factor: high,
        original_context,
    }
}

fn assert_rope_scaling_error(got: Result<ModelConfig, Error>, want: &str, case: &str) {
    match got {
        Err(Error::Metadata { key, problem }) => {
            assert_eq!(
                (key.as_str(), problem.as_str()),
                ("rope_scaling", want),
                "{case}"
            )
        }
        other => panic!("{case}: expected a rope_scaling error, got {other:?}"),
    }
}

#[test]
fn rope_scaling_linear_factor_0_negative_nan_inf_refused_from_gguf_and_hf() {
    for factor in [0.0f32, -2.0, f32::NAN, f32::INFINITY] {
        let config = ModelConfig {
            rope_scaling: Some(RopeScaling::Linear { factor }),
            ..base_config()
        };
        let want = format!("linear factor {factor} must be finite and positive");
        assert_rope_scaling_error(from_gguf(&config, &[]), &want, &format!("gguf {factor}"));
        // JSON has no NaN or infinity: config.json can only say 0 or a negative factor.
        if factor.is_finite() {
            let hf = ModelConfig::from_hf_json(&config.to_hf_json());
            assert_rope_scaling_error(hf, &want, &format!("hf {factor}"));
        }
    }
    let ok = ModelConfig {
        rope_scaling: Some(RopeScaling::Linear { factor: 0.5 }),
        ..base_config()
    };
    assert_eq!(from_gguf(&ok, &[]).unwrap(), ok);
}

#[test]
fn rope_scaling_llama3_bad_factor_freq_factors_and_original_context_refused() {
    let cases = [
        (
            llama3(0.0, 1.0, 4.0, 8192),
            "llama3 factor 0 must be finite and positive",
        ),
        (
            llama3(f32::NAN, 1.0, 4.0, 8192),
            "llama3 factor NaN must be finite and positive",
        ),
        (
            llama3(8.0, 0.0, 4.0, 8192),
            "llama3 low_freq_factor 0 and high_freq_factor 4 must be finite and positive",
        ),
        (
            llama3(8.0, 1.0, -4.0, 8192),
            "llama3 low_freq_factor 1 and high_freq_factor -4 must be finite and positive",
        ),
        (
            llama3(8.0, 2.0, 2.0, 8192),
            "llama3 low_freq_factor and high_freq_factor are both 2; they must differ",
        ),
        (
            llama3(8.0, 1.0, 4.0, 0),
            "llama3 original context length must be positive",
        ),
    ];
    for (scaling, want) in cases {
        let config = ModelConfig {
            rope_scaling: Some(scaling.clone()),
            ..base_config()
        };
        assert_rope_scaling_error(from_gguf(&config, &[]), want, &format!("gguf {scaling:?}"));
        if !want.contains("NaN") {
            let hf = ModelConfig::from_hf_json(&config.to_hf_json());
            assert_rope_scaling_error(hf, want, &format!("hf {scaling:?}"));
        }
    }
    let ok = ModelConfig {
        rope_scaling: Some(llama3(8.0, 1.0, 4.0, 8192)),
        ..base_config()
    };
    assert_eq!(from_gguf(&ok, &[]).unwrap(), ok);
}

/// SmolLM2's config.json with `key` set to `value`.
fn oracle_config_with(key: &str, value: Json) -> String {
    let mut config: Json = serde_json::from_str(&common::read_oracle("hf/config.json")).unwrap();
    config[key] = value;
    config.to_string()
}

#[test]
fn hf_rope_scaling_string_number_and_list_refused_null_accepted() {
    for (value, kind) in [
        (json!("linear"), "a string"),
        (json!(2.0), "a number"),
        (json!([{"rope_type": "linear", "factor": 2.0}]), "an array"),
    ] {
        match ModelConfig::from_hf_json(&oracle_config_with("rope_scaling", value.clone())) {
            Err(Error::Metadata { key, problem }) => assert_eq!(
                (key.as_str(), problem),
                (
                    "config.json rope_scaling",
                    format!("expected an object, found {kind}")
                )
            ),
            other => panic!("rope_scaling {value}: got {other:?}"),
        }
    }
    let rope_parameters = oracle_config_with("rope_parameters", json!("default"));
    assert!(matches!(
        ModelConfig::from_hf_json(&rope_parameters),
        Err(Error::Metadata { key, .. }) if key == "config.json rope_parameters"
    ));
    let null = ModelConfig::from_hf_json(&oracle_config_with("rope_scaling", Json::Null)).unwrap();
    assert_eq!(null.rope_scaling, None);
    let rope_type_number = oracle_config_with("rope_scaling", json!({"rope_type": 3}));
    assert!(matches!(
        ModelConfig::from_hf_json(&rope_type_number),
        Err(Error::Metadata { key, .. }) if key == "config.json rope_scaling.rope_type"
    ));
}

#[test]
fn gguf_rope_dimension_count_8_of_head_dim_16_refused_16_accepted() {
    match from_gguf(&base_config(), &[("llama.rope.dimension_count", Value::U32(8))]) {
        Err(e @ Error::UnsupportedConfig { .. }) => assert_eq!(
            e.to_string(),
            "llama.rope.dimension_count = 8: partial rotary embedding is not supported (RoPE must cover the whole head of 16 dimensions)"
        ),
        other => panic!("expected UnsupportedConfig, got {other:?}"),
    }
    let whole = from_gguf(
        &base_config(),
        &[("llama.rope.dimension_count", Value::U32(16))],
    );
    assert_eq!(whole.unwrap(), base_config());
}

#[test]
fn hf_partial_rotary_factor_0_5_refused_1_0_accepted() {
    let half = oracle_config_with("partial_rotary_factor", json!(0.5));
    match ModelConfig::from_hf_json(&half) {
        Err(e @ Error::UnsupportedConfig { .. }) => assert_eq!(
            e.to_string(),
            "config.json partial_rotary_factor = 0.5: partial rotary embedding is not supported (RoPE must cover the whole head)"
        ),
        other => panic!("expected UnsupportedConfig, got {other:?}"),
    }
    let whole = oracle_config_with("partial_rotary_factor", json!(1.0));
    assert_eq!(ModelConfig::from_hf_json(&whole).unwrap().head_dim, 64);
}

#[test]
fn config_json_array_string_number_null_are_not_objects() {
    for (text, kind) in [
        ("[]", "an array"),
        (r#""llama""#, "a string"),
        ("3", "a number"),
        ("null", "null"),
    ] {
        match ModelConfig::from_hf_json(text) {
            Err(e @ Error::Format { .. }) => assert_eq!(
                e.to_string(),
                format!("config.json: must be a JSON object, found {kind}")
            ),
            other => panic!("{text}: got {other:?}"),
        }
    }
}

#[test]
fn to_hf_json_with_dtype_bfloat16_writes_it_and_default_is_float32() {
    let config = base_config();
    let torch_dtype = |text: String| {
        let json: Json = serde_json::from_str(&text).unwrap();
        json["torch_dtype"].as_str().unwrap().to_string()
    };
    assert_eq!(
        torch_dtype(config.to_hf_json_with_dtype("bfloat16")),
        "bfloat16"
    );
    assert_eq!(torch_dtype(config.to_hf_json()), "float32");
}
