//! inferno-native: inferno on x86-64. The executor behind core's `Parallel` ([`pool`]), model
//! loading from the file system ([`load`]), numpy arrays ([`npy`]), and the `inferno` CLI's model-file commands
//! ([`convert`]), speed measurement ([`bench`]), random-weight models ([`synthetic`]), progress
//! reports ([`progress`]) and checks against reference data ([`verify`]). The CLI itself is `main.rs`.

pub mod bench;
pub mod convert;
pub mod load;
pub mod npy;
pub mod pool;
pub mod progress;
pub mod synthetic;
pub mod verify;
