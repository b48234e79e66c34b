//! A two-turn chat with inferno as a library: load a model (memory-mapped, on every core but
//! one), stream each reply as it is generated, and let the second turn reuse the first turn's
//! KV cache. Run it with `cargo run --release -p inferno-native --example chat [MODEL.gguf]`
//! (default: the model `make run` fetched).

use std::io::Write;
use std::sync::Arc;

use inferno_core::{ChatSession, EngineOptions, GenerateOptions};
use inferno_native::{load, pool};

fn main() -> anyhow::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(load::default_model_path);
    let options = EngineOptions {
        parallel: Some(Arc::new(pool::start(pool::default_threads())?)),
        ..EngineOptions::default()
    };
    let engine = load::load_engine(&path, options)?;

    let mut chat = ChatSession::new(&engine);
    chat.set_options(GenerateOptions {
        max_tokens: 32,
        ..GenerateOptions::greedy()
    })?;
    for user in [
        "What is the capital of France? Answer in one word.",
        "And the capital of Italy?",
    ] {
        println!("> {user}");
        let start = chat.begin_turn(user)?;
        while let Some(piece) = chat.next_token()? {
            print!("{piece}");
            std::io::stdout().flush()?;
        }
        let generated = chat.turn_tokens();
        chat.end_turn()?;
        println!(
            "\n({} prompt tokens, {} reused from the cache, {generated} generated)\n",
            start.prompt_tokens, start.reused
        );
    }
    Ok(())
}
