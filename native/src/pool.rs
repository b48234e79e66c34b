//! The native executor behind core's `Parallel`: a fixed set of worker threads (rayon's pool
//! for now; the spin pool of the native-speed work replaces it behind the same trait).

use inferno_core::parallel::Parallel;

pub struct ThreadPool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl ThreadPool {
    pub fn new(threads: usize) -> anyhow::Result<ThreadPool> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("inferno-worker-{i}"))
            .build()?;
        Ok(ThreadPool { pool, threads })
    }

    /// The default thread count: every core but one left for the OS, at least one.
    pub fn default_threads() -> usize {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        if cores > 2 {
            cores - 1
        } else {
            cores
        }
    }
}

impl Parallel for ThreadPool {
    fn threads(&self) -> usize {
        self.threads
    }

    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n <= 1 || self.threads == 1 {
            (0..n).for_each(f);
            return;
        }
        self.pool.install(|| {
            use rayon::prelude::*;
            (0..n).into_par_iter().for_each(f);
        });
    }
}
