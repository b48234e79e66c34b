//! The browser build end to end (run by `make test` after `make wasm`, which sets
//! INFERNO_WASM_TESTS=1; without it these tests skip with a message):
//! - every wasm variant in npm/pkg/ (reference, simd128, relaxed, threads) gives the native
//!   reference kernels' last-position logits bit for bit on the oracle prompts, and the same
//!   greedy tokens (tests/wasm/logits.mjs under Node; relaxed with
//!   --experimental-wasm-relaxed-simd --no-liftoff; threads in a worker of headless Chromium);
//! - the chat page in headless Chromium streams a reply, a greedy reply equals the native
//!   CLI's, and bad files show an error (tests/wasm/browser.mjs; screenshot in target/);
//! - the npm package (npm/) packed, installed into a fresh project, its types compiled, and the
//!   native CLI's greedy reply streamed in Node, headless Chromium and headless Firefox, with an
//!   abort and a reload from the Cache API (tests/wasm/npm.mjs);
//! - the simd128 build's chat replies are the same with speculative decoding on and off, and
//!   equal to native core's, greedy and seeded (tests/wasm/speculative.mjs under Node).

use std::path::{Path, PathBuf};
use std::process::Command;

use inferno_core::chat_session::ChatSession;
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::generate::GenerateOptions;
use inferno_core::kernels::Kernels;
use inferno_core::sampler::argmax;
use inferno_tests::{model_bytes, model_path, oracle_dir};

const GREEDY_TOKENS: usize = 8;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn enabled(test: &str) -> bool {
    let on = std::env::var("INFERNO_WASM_TESTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipping {test}: set INFERNO_WASM_TESTS=1 after `make wasm` (make test does)");
    }
    on
}

fn run_node(args: &[&str]) {
    let out = Command::new("node")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("start node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "node {args:?} failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn wasm_variants_match_native_reference_logits_bitwise() {
    if !enabled("wasm_variants_match_native_reference_logits_bitwise") {
        return;
    }
    let options = EngineOptions {
        kernels: Some(Kernels::by_name("reference").unwrap()),
        ..EngineOptions::default()
    };
    let engine = Engine::from_gguf_bytes(model_bytes(), options).unwrap();
    let tmp = std::env::temp_dir().join(format!("inferno-wasm-logits-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();

    let mut cases = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(oracle_dir().join("logits"))
        .expect("oracle logits directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for file in &files {
        let case: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let name = case["name"].as_str().unwrap().to_string();
        let ids: Vec<u32> = serde_json::from_value(case["prompt_ids"].clone()).unwrap();
        let mut session = engine.new_session();
        session.append(&ids).unwrap();
        let logits = session.logits().unwrap().to_vec();
        let logits_path = tmp.join(format!("{name}.f32"));
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&logits_path, bytes).unwrap();
        let mut greedy = Vec::new();
        for _ in 0..GREEDY_TOKENS {
            let id = argmax(session.logits().unwrap());
            session.append(&[id]).unwrap();
            greedy.push(id);
        }
        cases.push(serde_json::json!({
            "name": name, "prompt_ids": ids, "logits_f32": logits_path, "greedy": greedy,
        }));
    }
    assert!(
        !cases.is_empty(),
        "no oracle prompts in {}",
        oracle_dir().display()
    );
    let cases_path = tmp.join("cases.json");
    std::fs::write(&cases_path, serde_json::to_string(&cases).unwrap()).unwrap();

    let model = model_path();
    let (model, cases_arg) = (model.to_str().unwrap(), cases_path.to_str().unwrap());
    // `make wasm` builds all four; WASM_VARIANTS (as in the Makefile) may name fewer.
    let variants = std::env::var("WASM_VARIANTS")
        .unwrap_or_else(|_| "reference simd128 relaxed threads".to_string());
    for variant in variants.split_whitespace() {
        let pkg = format!("npm/pkg/{variant}");
        assert!(
            repo().join(&pkg).join("inferno_wasm_bg.wasm").is_file(),
            "{pkg} is missing: run `make wasm`"
        );
        let mut args = Vec::new();
        if variant == "relaxed" {
            // Node 20's baseline compiler miscompiles relaxed dot products inside loops.
            args.extend(["--experimental-wasm-relaxed-simd", "--no-liftoff"]);
        }
        args.push("tests/wasm/logits.mjs");
        if variant == "threads" {
            // Its thread pool runs on Web Workers: in Chromium, on 2 threads and on 3 (more
            // threads than cores: chunks still land on threads in any order).
            let mut three = args.clone();
            three.extend(["--chromium", "3", &pkg, model, cases_arg]);
            run_node(&three);
            args.extend(["--chromium", "2"]);
        }
        args.extend([&pkg, model, cases_arg]);
        if variant == "reference" {
            // Scalar wasm is ~10x slower: the short prompts cover its code (a 311-token
            // prompt alone takes minutes on a busy machine).
            args.push("64");
        }
        run_node(&args);
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// The greedy reply of the native CLI to one user message.
fn native_reply(message: &str, max_tokens: usize) -> String {
    let bin = std::env::var_os("INFERNO_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/release/inferno"));
    let out = Command::new(&bin)
        .args([
            "run",
            "--temp",
            "0",
            "--max-tokens",
            &max_tokens.to_string(),
            message,
        ])
        .env("INFERNO_MODEL", model_path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // `run` ends its output with one newline of its own.
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

#[test]
fn browser_chat_streams_a_greedy_reply_equal_to_native() {
    if !enabled("browser_chat_streams_a_greedy_reply_equal_to_native") {
        return;
    }
    let message = "What is the capital of France?";
    let max_tokens = 24;
    let expected = native_reply(message, max_tokens);
    let expected_path =
        std::env::temp_dir().join(format!("inferno-browser-{}.json", std::process::id()));
    let spec = serde_json::json!({
        "model": model_path(), "message": message, "max_tokens": max_tokens,
        "expected": expected, "screenshot": repo().join("target/browser-screenshot.png"),
    });
    std::fs::write(&expected_path, spec.to_string()).unwrap();
    run_node(&["tests/wasm/browser.mjs", expected_path.to_str().unwrap()]);
    std::fs::remove_file(&expected_path).ok();
}

#[test]
fn npm_package_streams_the_native_greedy_reply_in_node_chromium_and_firefox() {
    if !enabled("npm_package_streams_the_native_greedy_reply_in_node_chromium_and_firefox") {
        return;
    }
    let message = "What is the capital of France?";
    let max_tokens = 24;
    let spec = serde_json::json!({
        "model": model_path(), "message": message, "max_tokens": max_tokens,
        "expected": native_reply(message, max_tokens),
    });
    let path = std::env::temp_dir().join(format!("inferno-npm-{}.json", std::process::id()));
    std::fs::write(&path, spec.to_string()).unwrap();
    run_node(&["tests/wasm/npm.mjs", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
}

#[test]
fn wasm_chat_same_replies_speculation_on_and_off_equal_to_native() {
    if !enabled("wasm_chat_same_replies_speculation_on_and_off_equal_to_native") {
        return;
    }
    let engine = Engine::from_gguf_bytes(model_bytes(), EngineOptions::default()).unwrap();
    let users = [
        "List the numbers from one to twelve in words, separated by commas.",
        "Write a Python function that returns the square of a number, then one for the cube.",
    ];
    let samplers = [
        serde_json::json!({ "temperature": 0.0, "max_tokens": 40 }),
        serde_json::json!({ "temperature": 0.8, "seed": 7, "max_tokens": 40 }),
    ];
    let mut cases = Vec::new();
    for user in users {
        for sampler in &samplers {
            let mut options = GenerateOptions::from_json(&sampler.to_string()).unwrap();
            options.speculative.enabled = false;
            let mut chat = ChatSession::new(&engine);
            chat.set_options(options).unwrap();
            chat.begin_turn(user).unwrap();
            while chat.next_token().unwrap().is_some() {}
            let expected = chat.end_turn().unwrap();
            cases.push(
                serde_json::json!({ "user": user, "options": sampler, "expected": expected }),
            );
        }
    }
    let path = std::env::temp_dir().join(format!("inferno-wasm-spec-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_string(&cases).unwrap()).unwrap();
    let model = model_path();
    run_node(&[
        "tests/wasm/speculative.mjs",
        "npm/pkg/simd128",
        model.to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    std::fs::remove_file(&path).ok();
}
