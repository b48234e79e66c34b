//! The binary's quality tools and speculative flags on the real model: `perplexity --json
//! --ctx`, `compare`, `verify` against the oracle data (figures asserted as the library tests
//! assert them), and `run --speculative on|off` with its --stats line.

use std::path::PathBuf;
use std::process::{Command, Output};

use inferno_tests::{inferno_binary, model_path, oracle_dir};

const GPL3: &str = "/usr/share/common-licenses/GPL-3";

fn inferno(args: &[&str]) -> Output {
    Command::new(inferno_binary())
        .args(args)
        .env("INFERNO_MODEL", model_path())
        .output()
        .expect("start inferno")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// One line on stderr, "error: ..." with `want`, exit code 1.
fn assert_clean_error(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains(want),
        "want {want:?}: {err}"
    );
}

#[test]
fn perplexity_json_ctx_512_whole_gpl3_two_methods_within_1_percent_of_llamacpp() {
    let o = inferno(&["perplexity", "--json", "--ctx", "512", GPL3]);
    let lines = json_lines(&ok(&o));
    assert_eq!(lines.len(), 2, "{lines:?}");
    let by = |m: &str| {
        lines
            .iter()
            .find(|l| l["method"] == m)
            .unwrap_or_else(|| panic!("{m}"))
    };
    let (l, n) = (by("llamacpp"), by("non_overlapping"));
    assert_eq!(
        (l["ctx"].as_u64(), n["ctx"].as_u64()),
        (Some(512), Some(512))
    );
    // The oracle's counts, and llama.cpp's figures on the same file (tests/data/oracle/README.md).
    assert_eq!(l["tokens_scored"].as_u64(), Some(3570));
    assert_eq!(n["tokens_scored"].as_u64(), Some(7624));
    let (lp, np) = (l["ppl"].as_f64().unwrap(), n["ppl"].as_f64().unwrap());
    assert!((lp / 18.4052 - 1.0).abs() <= 0.01, "llama.cpp-style {lp}");
    assert!((np / 22.4234 - 1.0).abs() <= 0.01, "non-overlapping {np}");
}

#[test]
fn perplexity_json_short_text_has_null_llamacpp_ppl_and_ctx_sets_the_window() {
    let dir = std::env::temp_dir().join(format!("inferno-cli-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("short.txt");
    std::fs::write(
        &file,
        "The quick brown fox jumps over the lazy dog. ".repeat(4),
    )
    .unwrap();
    let lines = json_lines(&ok(&inferno(&[
        "perplexity",
        "--json",
        "--ctx",
        "16",
        file.to_str().unwrap(),
    ])));
    let l = lines.iter().find(|l| l["method"] == "llamacpp").unwrap();
    let n = lines
        .iter()
        .find(|l| l["method"] == "non_overlapping")
        .unwrap();
    let tokens = n["tokens"].as_u64().unwrap();
    // Windows of 16: every token but each window's first; llama.cpp style: 7 per full window.
    assert_eq!(
        n["tokens_scored"].as_u64(),
        Some(tokens - tokens.div_ceil(16))
    );
    assert_eq!(l["tokens_scored"].as_u64(), Some(tokens / 16 * 7));
    let lines = json_lines(&ok(&inferno(&[
        "perplexity",
        "--json",
        "--ctx",
        "4096",
        file.to_str().unwrap(),
    ])));
    let l = lines.iter().find(|l| l["method"] == "llamacpp").unwrap();
    assert!(l["ppl"].is_null() && l["tokens_scored"] == 0, "{l}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_q4_1_against_itself_is_identical_and_against_its_f32_path_agrees_95_percent() {
    let model = model_path();
    let m = model.to_str().unwrap();
    let same = json_lines(&ok(&inferno(&[
        "compare",
        "--model",
        m,
        "--reference",
        m,
        "--json",
        "--windows",
        "1",
        GPL3,
    ])));
    assert_eq!(same[0]["positions"].as_u64(), Some(512));
    assert_eq!(same[0]["top1_agreement"].as_f64(), Some(1.0));
    assert_eq!(same[0]["mean_kl"].as_f64(), Some(0.0));
    let f32 = json_lines(&ok(&inferno(&[
        "compare",
        "--model",
        m,
        "--reference",
        m,
        "--reference-dtype",
        "f32",
        "--json",
        "--ctx",
        "256",
        "--windows",
        "2",
        GPL3,
    ])));
    let (agree, kl) = (
        f32[0]["top1_agreement"].as_f64().unwrap(),
        f32[0]["mean_kl"].as_f64().unwrap(),
    );
    assert_eq!(f32[0]["positions"].as_u64(), Some(512));
    // Measured on these 512 positions: 95-96% top-1 and a mean KL near 0.004 nats (Q8
    // activations and 4-bit weights against f32).
    assert!(agree >= 0.93, "top-1 agreement {agree}");
    assert!(kl > 0.0 && kl < 0.01, "mean KL {kl}");
    let text = ok(&inferno(&[
        "compare",
        "--model",
        m,
        "--reference",
        m,
        "--windows",
        "1",
        GPL3,
    ]));
    assert!(
        text.contains("top-1 agreement 100.00% (512 of 512) | mean KL 0.000000"),
        "{text}"
    );
}

#[test]
fn verify_against_the_oracle_f32_path_passes_tight_bounds_quantized_reports_its_divergence() {
    let oracle: PathBuf = oracle_dir();
    let dir = oracle.to_str().unwrap();
    let f32 = ok(&inferno(&[
        "verify",
        "--oracle",
        dir,
        "--dtype",
        "f32",
        "--max-logit-error",
        "2e-3",
        "--min-top1",
        "1",
    ]));
    assert!(
        f32.contains("4 prompts, 385 positions | top-1 agreement 100.00%"),
        "{f32}"
    );
    assert!(f32.contains("raw_1_short: 5 tokens | top-1 5/5"), "{f32}");
    assert!(f32.contains("greedy 48 of 48 steps equal"), "{f32}");
    let lines = json_lines(&ok(&inferno(&["verify", "--oracle", dir, "--json"])));
    let summary = lines.last().unwrap();
    assert_eq!(summary["positions"].as_u64(), Some(385));
    let top1 = summary["top1_agreement"].as_f64().unwrap();
    // As the library's oracle test: 373/385 on the quantized path, misses only at near-ties.
    assert!(top1 >= 0.965, "{top1}");
    for r in &lines[..lines.len() - 1] {
        if let Some(d) = r.get("divergence").filter(|d| !d.is_null()) {
            let margin = d["reference_margin"].as_f64().unwrap();
            assert!(
                margin < 0.25,
                "{}: greedy left the oracle at margin {margin}",
                r["name"]
            );
        }
    }
    // A bound the quantized path misses fails with the figure.
    assert_clean_error(
        &inferno(&["verify", "--oracle", dir, "--max-logit-error", "1e-3"]),
        "verification failed: worst logit error",
    );
    assert_clean_error(
        &inferno(&["verify", "--oracle", "/nonexistent-oracle"]),
        "cannot read /nonexistent-oracle/logits",
    );
}

#[test]
fn run_speculative_on_and_off_print_the_same_text_and_stats_show_acceptance() {
    let prompt = "Rewrite this list with a dash before each item:\napples\npears\nplums\ncherries\nlemons\nlimes";
    let run = |spec: &str| {
        ok(&inferno(&[
            "run",
            "--temp",
            "0.8",
            "--seed",
            "7",
            "--max-tokens",
            "40",
            "--speculative",
            spec,
            "--stats",
            prompt,
        ]))
    };
    let on = inferno(&[
        "run",
        "--temp",
        "0.8",
        "--seed",
        "7",
        "--max-tokens",
        "40",
        "--speculative",
        "on",
        "--draft-max",
        "6",
        "--ngram-min",
        "1",
        "--ngram-max",
        "3",
        "--stats",
        prompt,
    ]);
    let text_on = ok(&on);
    assert_eq!(text_on, run("off"));
    assert_eq!(run("on"), run("off"));
    let stats = String::from_utf8_lossy(&on.stderr);
    let line = stats
        .lines()
        .find(|l| l.starts_with("[speculative:"))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(
        line.contains("attempts")
            && line.contains("accepted (")
            && line.contains("tokens per forward"),
        "{line}"
    );
    let off = inferno(&[
        "run",
        "--temp",
        "0",
        "--max-tokens",
        "4",
        "--speculative",
        "off",
        "--stats",
        "Hi",
    ]);
    ok(&off);
    assert!(!String::from_utf8_lossy(&off.stderr).contains("[speculative:"));
    assert_clean_error(&inferno(&["run", "--draft-max", "0", "hi"]), "draft-max");
    assert_clean_error(
        &inferno(&["run", "--ngram-min", "5", "--ngram-max", "2", "hi"]),
        "ngram-min",
    );
}

#[test]
fn bench_speculative_json_rows_for_three_workloads_and_four_batch_sizes() {
    let o = inferno(&[
        "bench",
        "--speculative",
        "--json",
        "--threads",
        "1",
        "--trials",
        "1",
        "--decode-tokens",
        "8",
    ]);
    let lines = json_lines(&ok(&o));
    let workloads: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["workload"].as_str())
        .collect();
    assert_eq!(workloads, ["code", "table", "prose"]);
    for l in lines.iter().filter(|l| l.get("workload").is_some()) {
        assert_eq!(l["threads"].as_u64(), Some(1));
        assert!(
            l["tokens"].as_u64().unwrap() <= 8 && l["speedup"].as_f64().unwrap() > 0.0,
            "{l}"
        );
    }
    let ks: Vec<u64> = lines.iter().filter_map(|l| l["k"].as_u64()).collect();
    assert_eq!(ks, [1, 2, 4, 8]);
}

#[test]
fn bench_profile_json_decode_then_prefill_rows_per_context_with_every_part_within_the_total() {
    let o = inferno(&[
        "bench",
        "--profile",
        "--json",
        "--threads",
        "2",
        "--prompt-lengths",
        "8,40",
        "--trials",
        "1",
        "--decode-tokens",
        "4",
    ]);
    let lines = json_lines(&ok(&o));
    let rows: Vec<(&str, u64)> = lines
        .iter()
        .map(|l| (l["phase"].as_str().unwrap(), l["context"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("decode", 8),
            ("decode", 40),
            ("prefill", 8),
            ("prefill", 40)
        ]
    );
    for l in &lines {
        let parts = l["parts"].as_array().unwrap();
        let names: Vec<&str> = parts.iter().map(|p| p[0].as_str().unwrap()).collect();
        assert_eq!(names.len(), 11, "{l}");
        assert_eq!(names[0], "matmul q,k,v");
        assert!(names.contains(&"attention"), "{l}");
        let sum: f64 = parts.iter().map(|p| p[1].as_f64().unwrap()).sum();
        let total = l["total_ms"].as_f64().unwrap();
        assert!(
            sum > 0.0 && sum <= total * 1.0001,
            "parts {sum} > total {total}: {l}"
        );
        assert!(l["barrier_wait_ms"].as_f64().unwrap() <= total, "{l}");
    }
}
