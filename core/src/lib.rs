//! inferno-core: everything of the inferno inference engine that is the same on every target.
//!
//! Module map:
//! - [`formats`]: GGUF and Hugging Face (safetensors) readers and a GGUF writer, from bytes.
//! - [`config`]: the model's shape, read from metadata.
//! - [`quant`]: block formats and reference quantizers.
//! - [`tokenizer`], [`chat`]: text <-> token ids, chat templates.
//! - [`chat_session`]: a conversation over one session, streamed token by token.
//! - [`kernels`]: THE reduction contract and the per-backend function tables.
//! - [`parallel`]: how core asks for independent work to be split; [`pool`]: the spin pool that
//!   runs it on threads it is handed (core never spawns threads itself).
//! - [`memory`]: the weights' buffers, in 2 MiB pages on Linux.
//! - [`model`]: immutable weights and the forward pass.
//! - [`session`]: tokens + KV cache; append / truncate / fork / sync_draft.
//! - [`sampler`]: seeded, portable token selection.
//! - [`generate`]: the one generation loop (prefill, then sample -> append -> stop check ->
//!   text piece), driven by every front end.
//! - [`eval`]: perplexity scoring.
//! - [`engine`]: weights + tokenizer + kernels; the API used by the CLI and the browser.
//!
//! The types a program needs are re-exported here. Load a GGUF (its bytes: from a file, a
//! memory map or a browser download), chat, and stream the reply:
//!
//! ```
//! use inferno_core::{ChatSession, Engine, EngineOptions, GenerateOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::var_os("INFERNO_MODEL").map(std::path::PathBuf::from).unwrap_or_else(|| {
//! #     std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
//! #         .join(".cache/inferno/models/SmolLM2-135M-Instruct.Q4_1.gguf") // scripts/fetch-model.sh
//! # });
//! let bytes = std::fs::read(&path)?;
//! let engine = Engine::from_gguf_bytes(&bytes, EngineOptions::default())?;
//!
//! let mut chat = ChatSession::new(&engine);
//! chat.set_options(GenerateOptions { max_tokens: 24, ..GenerateOptions::greedy() })?;
//! chat.begin_turn("What is the capital of France? Answer in one word.")?;
//! while let Some(piece) = chat.next_token()? {
//!     print!("{piece}"); // each piece as soon as it is decoded
//! }
//! let reply = chat.end_turn()?; // the next turn reuses this turn's KV cache
//! assert!(reply.contains("Paris"));
//! # Ok(())
//! # }
//! ```
// `unsafe` only where it is named below: the SIMD backends (kernels::x86, kernels::wasm32), the
// output tiles handed to threads (kernels::tiles), the spin pool (pool) and the weights' huge-page
// mappings (memory); each block says why it is sound in a `// SAFETY:` line.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod chat;
pub mod chat_session;
pub mod config;
pub mod engine;
pub mod error;
pub mod eval;
pub mod formats;
pub mod generate;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod parallel;
#[allow(unsafe_code)] // lifetime-erased jobs shared with the workers
pub mod pool;
pub mod quant;
pub mod sampler;
pub mod session;
pub mod speculative;
pub mod tokenizer;

pub use chat::ChatMessage;
pub use chat_session::{ChatSession, TurnStart};
pub use engine::{Engine, EngineOptions};
pub use error::{Error, Result};
pub use generate::{prefill, GenerateOptions, Generated, Generator, Prefill, StopReason};
pub use model::WeightDtype;
pub use sampler::SamplerConfig;
pub use session::Session;
pub use speculative::{SpeculativeOptions, SpeculativeStats};
