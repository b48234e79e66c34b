//! The `inferno` binary on input that used to pass silently or panic: perplexity with a window
//! below 2, an empty or one-token file, progress on a non-terminal; the real model with its
//! metadata edited (block count 29 of 30 layers, eos id past the vocabulary, an unknown
//! pre-tokenizer, RoPE factor 0, partial rotary); a config.json that is not an object; and the
//! torch_dtype `convert --dtype bf16` writes. The binary is INFERNO_BIN (see cli.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_tests::{inferno_binary as binary, model_bytes, model_path};

/// Runs the binary with stdin closed and stdout, stderr piped (so stderr is not a terminal).
fn inferno(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("INFERNO_MODEL", model_path())
        .env("INFERNO_AUTOTUNE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("start inferno")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts exit code 1 and exactly one stderr line, "error: " + `want`.
fn assert_error_line(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines, [format!("error: {want}")], "stderr: {err}");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inferno-bad-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The real model with metadata keys replaced (or added), written to `path`.
fn real_model_with(path: &Path, edits: &[(&str, Value)]) {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for (k, v) in edits {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    for t in &file.tensors {
        w.add_tensor(
            t.name.clone(),
            t.ty,
            &t.shape().unwrap(),
            file.tensor_data(t),
        )
        .unwrap();
    }
    let mut out = std::fs::File::create(path).unwrap();
    w.write_to(&mut out).unwrap();
}

#[test]
fn perplexity_window_0_and_1_are_clean_errors() {
    let dir = temp_dir("window");
    let text = dir.join("text.txt");
    std::fs::write(&text, "The capital of France is Paris.").unwrap();
    for window in ["0", "1"] {
        assert_error_line(
            &inferno(&["perplexity", "--window", window, s(&text)]),
            &format!("--window must be at least 2 tokens (a window's first token is not scored), got {window}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perplexity_empty_file_names_the_file_and_one_token_is_nothing_to_score() {
    let dir = temp_dir("short");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    assert_error_line(
        &inferno(&["perplexity", s(&empty)]),
        &format!("{} has no tokens to score", empty.display()),
    );
    let one = dir.join("one.txt");
    std::fs::write(&one, "a").unwrap();
    assert_eq!(stdout(&inferno(&["tokenize", "a"])).trim(), "[81]");
    assert_error_line(
        &inferno(&["perplexity", "--window", "2", s(&one)]),
        &format!(
            "cannot score {}: nothing to score: perplexity needs at least 2 tokens, the text has 1",
            one.display()
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perplexity_window_8_on_a_pipe_prints_one_line_per_window_and_window_64_has_no_llamacpp_score() {
    let dir = temp_dir("progress");
    let text = dir.join("text.txt");
    let sentence = "The capital of France is Paris. The capital of Germany is Berlin.";
    std::fs::write(&text, sentence).unwrap();
    let ids: Vec<u32> = serde_json::from_str(&stdout(&inferno(&["tokenize", sentence]))).unwrap();
    let n = ids.len();
    assert_eq!(n, 14);

    let o = inferno(&["perplexity", "--window", "8", s(&text)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r'), "{err:?}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        ["perplexity 1/2 windows", "perplexity 2/2 windows"]
    );
    // 14 tokens in windows of 8 and 6: 7 + 5 scored; llama.cpp style: positions 5..8 of the one
    // full window.
    let out = stdout(&o);
    assert!(
        out.starts_with("tokens 14 | non-overlapping 8: ppl "),
        "{out}"
    );
    assert!(
        out.contains(" over 12 tokens | llama.cpp-style: ppl "),
        "{out}"
    );
    assert!(out.contains(" over 3 tokens | "), "{out}");

    let o = inferno(&["perplexity", "--window", "64", s(&text)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(
        out.contains(" over 13 tokens | llama.cpp-style: n/a (no full window of 64 tokens) | "),
        "{out}"
    );
    assert!(!out.contains("ppl 1.0000"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn real_model_with_block_count_29_of_30_layers_names_the_first_unused_tensor() {
    let dir = temp_dir("layers");
    let model = dir.join("29.gguf");
    real_model_with(&model, &[("llama.block_count", Value::U32(29))]);
    let file = GgufFile::parse(model_bytes()).unwrap();
    let first = &file
        .tensors
        .iter()
        .find(|t| t.name.starts_with("blk.29."))
        .unwrap()
        .name;
    assert_error_line(
        &inferno(&["run", "--raw", "--model", s(&model), "hi"]),
        &format!(
            "cannot load model {}: tensor '{first}' is not used by a 29-layer llama model (layer 29 is past the config's 29 layers); refusing to ignore it",
            model.display()
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn real_model_edited_eos_49152_pre_tekken_rope_factor_0_rope_dims_32_are_clean_errors() {
    let dir = temp_dir("metadata");
    let model = dir.join("edited.gguf");
    let cannot_load = format!("cannot load model {}: ", model.display());
    // (metadata edits, command, error line)
    type Case<'a> = (&'a [(&'a str, Value)], &'a [&'a str], String);
    let cases: [Case; 4] = [
        (
            &[("tokenizer.ggml.eos_token_id", Value::U32(49152))],
            &["run", "--raw"],
            format!("{cannot_load}the eos token id 49152 is outside the vocabulary (the model has 49152 ids, the tokenizer 49152 tokens)"),
        ),
        (
            &[("tokenizer.ggml.pre", Value::String("tekken".into()))],
            &["tokenize"],
            "metadata key 'tokenizer.ggml.pre': unknown pre-tokenizer 'tekken' (supported: default, gpt2, gpt-2, smollm, llama3, llama-bpe, llama-v3, smaug-bpe, dbrx, qwen2)".into(),
        ),
        (
            &[
                ("llama.rope.scaling.type", Value::String("linear".into())),
                ("llama.rope.scaling.factor", Value::F32(0.0)),
            ],
            &["run", "--raw"],
            format!("{cannot_load}metadata key 'rope_scaling': linear factor 0 must be finite and positive"),
        ),
        (
            &[("llama.rope.dimension_count", Value::U32(32))],
            &["run", "--raw"],
            format!("{cannot_load}llama.rope.dimension_count = 32: partial rotary embedding is not supported (RoPE must cover the whole head of 64 dimensions)"),
        ),
    ];
    for (edits, command, want) in cases {
        real_model_with(&model, edits);
        let mut args = command.to_vec();
        args.extend(["--model", s(&model), "hi"]);
        assert_error_line(&inferno(&args), &want);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_json_that_is_an_array_is_a_clean_error() {
    let dir = temp_dir("config");
    std::fs::write(dir.join("config.json"), "[]").unwrap();
    // An empty safetensors file: 8-byte header length, then "{}".
    let mut shard = 2u64.to_le_bytes().to_vec();
    shard.extend_from_slice(b"{}");
    std::fs::write(dir.join("model.safetensors"), shard).unwrap();
    assert_error_line(
        &inferno(&["info", "--model", s(&dir)]),
        "config.json: must be a JSON object, found an array",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_dtype_bf16_writes_torch_dtype_bfloat16() {
    let dir = temp_dir("convert-bf16");
    let hf = dir.join("hf");
    let o = inferno(&[
        "convert",
        model_path().to_str().unwrap(),
        s(&hf),
        "--dtype",
        "bf16",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["torch_dtype"], "bfloat16");
    let _ = std::fs::remove_dir_all(&dir);
}
