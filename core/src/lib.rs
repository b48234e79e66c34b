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
//! - [`model`]: immutable weights and the forward pass.
//! - [`session`]: tokens + KV cache; append / truncate / fork / sync_draft.
//! - [`sampler`]: seeded, portable token selection.
//! - [`eval`]: perplexity scoring.
//! - [`engine`]: weights + tokenizer + kernels; the API used by the CLI and the browser.
// `unsafe` only where it is named below: the SIMD backends (kernels::x86, kernels::wasm32), the
// output tiles handed to threads (kernels::tiles) and the spin pool (pool); each block says why
// it is sound in a `// SAFETY:` line.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod chat;
pub mod chat_session;
pub mod config;
pub mod engine;
pub mod error;
pub mod eval;
pub mod formats;
pub mod kernels;
pub mod model;
pub mod parallel;
#[allow(unsafe_code)] // lifetime-erased jobs shared with the workers
pub mod pool;
pub mod quant;
pub mod sampler;
pub mod session;
pub mod tokenizer;

pub use error::{Error, Result};
