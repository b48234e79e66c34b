//! (browser crate: a later issue)
