//! How core asks for work to be split. Core never spawns threads: native implements [`Parallel`]
//! with its spin pool, wasm runs [`Serial`]. Only independent outputs are ever split (rule 7), so
//! the thread count never changes a result.

/// Runs `n` independent chunks of work, in any order, on any threads.
pub trait Parallel: Send + Sync {
    /// How many threads (including the caller) may run chunks at once.
    fn threads(&self) -> usize;
    /// Calls `f(i)` once for every i in 0..n and returns when all calls have returned.
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync));
    /// Nanoseconds the calling thread has spent, since the executor started, waiting for other
    /// threads to finish their chunks after running out of its own (the barrier at the end of
    /// each `run`); 0 where nobody waits or nobody measures.
    fn waited_ns(&self) -> u64 {
        0
    }
}

/// Runs every chunk on the calling thread, in order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;

impl Parallel for Serial {
    fn threads(&self) -> usize {
        1
    }
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f);
    }
}
