//! The library examples run as a user would run them: `native/examples/chat.rs` streams two
//! greedy replies, the second reusing the first turn's cache. Cargo builds examples with the
//! tests (`make test`), so the binary sits beside this test's.

use std::path::PathBuf;
use std::process::Command;

use inferno_tests::model_path;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/examples-<hash> -> target/<profile>/examples/<name>
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test --release --workspace` (make test) builds it",
        path.display()
    );
    path
}

#[test]
fn example_chat_streams_two_turns_and_reuses_the_cache() {
    let out = Command::new(example("chat"))
        .arg(model_path())
        .env("INFERNO_AUTOTUNE", "0")
        .output()
        .expect("run the chat example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Paris"), "{stdout}");
    assert!(stdout.contains("Rome"), "{stdout}");
    let reused: Vec<usize> = stdout
        .lines()
        .filter_map(|l| l.split(" reused").next()?.rsplit(", ").next()?.parse().ok())
        .collect();
    assert_eq!(reused.len(), 2, "{stdout}");
    assert_eq!(reused[0], 0);
    assert!(reused[1] > 30, "the second turn reuses the first: {stdout}");
}
