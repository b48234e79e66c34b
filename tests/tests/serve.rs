//! `inferno serve` end to end, through the release binary:
//! - tests/python/test_serve.py with the official `openai` client: chat and completions,
//!   streamed and not, seeds, errors as the client's exception types; 8 concurrent streams equal
//!   to each request run alone, bitwise (text and logprobs); prefix reuse and compose giving the
//!   uncached reply; a client that disconnects frees its slot; a burst of 50 stays within the KV
//!   budget; timeouts and SIGTERM/SIGINT end streams cleanly; bad input over raw sockets (4xx
//!   JSON errors, 413, slowloris) leaves it serving.
//!   Needs scripts/setup-python.sh's venv as INFERNO_PYTHON (make test sets it), else skips.
//! - the chat page against the server in headless Chromium streams the native CLI's greedy
//!   reply (tests/wasm/serve_page.mjs); with INFERNO_WASM_TESTS=1 (as make test-wasm sets), else skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use inferno_tests::{inferno_binary, model_path};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `program args` in the repository with the binary and the model in its environment,
/// prints what it said and asserts it succeeded.
fn run(program: &Path, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo())
        .env("INFERNO_BIN", inferno_binary())
        .env("INFERNO_MODEL", model_path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        out.status
    );
}

#[test]
fn serve_openai_client_concurrent_bitwise_cache_compose_disconnect_burst_and_bad_input() {
    let Some(python) = std::env::var_os("INFERNO_PYTHON").map(PathBuf::from) else {
        eprintln!(
            "skipping: set INFERNO_PYTHON to scripts/setup-python.sh's python (make test does)"
        );
        return;
    };
    run(&python, &["tests/python/test_serve.py"]);
}

#[test]
fn serve_page_streams_the_native_greedy_reply_in_chromium() {
    if !std::env::var("INFERNO_WASM_TESTS").is_ok_and(|v| v == "1") {
        eprintln!(
            "skipping serve_page_streams_the_native_greedy_reply_in_chromium: set \
             INFERNO_WASM_TESTS=1 after `make wasm` (make test does)"
        );
        return;
    }
    run(Path::new("node"), &["tests/wasm/serve_page.mjs"]);
}
