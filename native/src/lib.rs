//! inferno-native: inferno on x86-64. The executor behind core's `Parallel` ([`pool`]), model
//! loading from the file system ([`load`]), numpy arrays ([`npy`]), and the `inferno` CLI's model-file commands
//! ([`convert`]), speed measurement ([`bench`](mod@bench)), random-weight models ([`synthetic`]), progress
//! reports ([`progress`]) and checks against reference data ([`verify`]). The CLI itself is `main.rs`.
//!
//! A model on every core, one streamed reply (`examples/chat.rs` is a two-turn version; the
//! conversation types are `inferno_core`'s):
//!
//! ```no_run
//! use std::sync::Arc;
//! use inferno_core::{ChatSession, EngineOptions, GenerateOptions};
//! use inferno_native::{load, pool};
//!
//! let parallel = Arc::new(pool::start(pool::default_threads())?);
//! let options = EngineOptions { parallel: Some(parallel), ..EngineOptions::default() };
//! let engine = load::load_engine(&load::default_model_path(), options)?;
//! let mut chat = ChatSession::new(&engine);
//! let mut settings = GenerateOptions { max_tokens: 64, ..GenerateOptions::greedy() };
//! settings.speculative.enabled = true; // prompt-lookup drafts: faster, the same reply
//! chat.set_options(settings)?;
//! chat.begin_turn("What is the capital of France?")?;
//! while let Some(piece) = chat.next_token()? {
//!     print!("{piece}");
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod bench;
pub mod convert;
pub mod load;
pub mod npy;
pub mod pool;
pub mod progress;
pub mod quantize;
pub mod serve;
pub mod synthetic;
pub mod verify;
