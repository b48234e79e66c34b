//! inferno-native: inferno on x86-64. The executor behind core's `Parallel` ([`pool`]), model
//! loading from the file system ([`load`]), and the `inferno` CLI's model-file commands
//! ([`convert`]), speed measurement ([`bench`]), random-weight models ([`synthetic`]) and progress
//! reports ([`progress`]). The CLI itself is `main.rs`.

pub mod bench;
pub mod convert;
pub mod load;
pub mod pool;
pub mod progress;
pub mod synthetic;
