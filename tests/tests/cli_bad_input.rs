//! The `inferno` binary on input that used to pass silently or panic: perplexity with a window
//! below 2, an empty or one-token file, progress on a non-terminal. The binary is INFERNO_BIN
//! (see cli.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use inferno_tests::model_path;

fn binary() -> PathBuf {
    let path = std::env::var_os("INFERNO_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/inferno"));
    assert!(
        path.is_file(),
        "{} is missing: run `make build` (or `make test`) first",
        path.display()
    );
    path
}

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
