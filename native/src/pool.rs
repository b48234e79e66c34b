//! The native executor behind core's `Parallel`: core's spin pool ([`inferno_core::pool`]) on
//! std threads.

use anyhow::Context;
pub use inferno_core::pool::ThreadPool;

/// A pool of `threads` threads in all: the caller plus `threads - 1` std threads.
pub fn start(threads: usize) -> anyhow::Result<ThreadPool> {
    ThreadPool::with_spawner(threads, &mut |i, work| {
        std::thread::Builder::new()
            .name(format!("inferno-worker-{i}"))
            .spawn(work)
            .map(Some)
    })
    .context("cannot start a worker thread")
}

/// The default thread count: every core but one left for the OS, at least one.
pub fn default_threads() -> usize {
    ThreadPool::default_threads()
}
