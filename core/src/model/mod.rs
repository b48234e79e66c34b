//! The model: immutable [`Weights`] (shared by every session) and the forward pass over a batch
//! of tokens. One model for every weight format; `forward` reads like the math.
//!
//! - `weights`: [`Weights`], [`LayerWeights`], [`Stacked`] and loading from any format.
//! - `cache`: [`KvCache`], one sequence's K and V per layer.
//! - `tuning`: [`Tuning`], how work is cut for threads (never changes a result).
//! - `forward`: [`Weights::forward`] and its steps, [`Compute`] (kernels, threads, tuning),
//!   [`Scratch`].

mod cache;
mod forward;
mod profile;
mod tuning;
mod weights;

pub use cache::{CacheData, KvCache, LayerCache};
pub use forward::{Compute, LogitsFor, Scratch, Sequence};
pub use profile::{Part, Profile};
pub use tuning::{Tuning, STREAM_PREFETCH, TUNE_ROWS};
pub use weights::{
    interleaved_to_half_split, rope_inv_freq, LayerWeights, Stacked, WeightDtype, Weights,
};
