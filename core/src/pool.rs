//! The spin pool behind `Parallel` (ARCHITECTURE.md section 5), natively and in the threads wasm
//! build. N-1 worker threads wait on an epoch counter, spinning for about a millisecond and then
//! sleeping on a condvar; the caller publishes a job, works on it too, and returns when every
//! chunk is done. The pool starts no thread itself: it is handed a spawner (std threads in
//! inferno-native, Web Workers hosted by rayon in inferno-wasm).

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;

use crate::parallel::Parallel;

/// How long an idle worker spins before it sleeps. A decode step issues its parallel calls well
/// under this apart, so workers stay hot during generation and cost no CPU between requests.
#[cfg(not(target_arch = "wasm32"))]
const SPIN: std::time::Duration = std::time::Duration::from_millis(1);

/// When an idle worker has spun long enough to sleep: about [`SPIN`] by the clock natively;
/// wasm has no clock in core, so there a count of spins (each an atomic load of a line that
/// is not changing, ~1 ns) stands for the same millisecond.
struct SpinBudget {
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
    spins: u32,
}

impl SpinBudget {
    fn start() -> SpinBudget {
        SpinBudget {
            #[cfg(not(target_arch = "wasm32"))]
            start: std::time::Instant::now(),
            spins: 0,
        }
    }

    /// Counts one spin; true once the budget is spent (checked every 256 spins).
    fn spent(&mut self) -> bool {
        self.spins = self.spins.wrapping_add(1);
        if !self.spins.is_multiple_of(256) {
            return false;
        }
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed() > SPIN;
        #[cfg(target_arch = "wasm32")]
        return self.spins >= 1 << 20;
    }
}

/// A job's function as the workers see it: the caller's `&dyn Fn`, lifetime erased (see `run`).
type Job = &'static (dyn Fn(usize) + Sync);

/// Starts one worker thread running the given function (which returns when the pool is
/// dropped); a handle to join it, where the platform has one.
pub type Spawn<'a, E> =
    dyn FnMut(usize, Box<dyn FnOnce() + Send>) -> Result<Option<JoinHandle<()>>, E> + 'a;

thread_local! {
    /// Set on worker threads and on a caller while it runs a job: a `run` from there executes
    /// inline, since the pool is busy with the job that made the call.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Keeps the counters that every thread writes on their own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

#[derive(Default)]
struct Shared {
    /// The current job's epoch (high 32 bits) and its next unclaimed chunk (low 32 bits), in one
    /// word so that a claim made with a stale epoch fails: a thread only ever calls the function
    /// of the job whose chunk it claimed. Workers wait for the epoch to change.
    ticket: Padded<AtomicU64>,
    /// Chunks finished (run or panicked) in the current job; `run` returns when it reaches n.
    done: Padded<AtomicUsize>,
    /// The current job's chunk count, written before its ticket is published.
    n: AtomicUsize,
    /// The current job's function: a pointer to the caller's `Job`, which outlives every call
    /// (see `run`). Atomic rather than a mutex: fetching it never waits on a lock. (Waking a
    /// sleeping worker still takes `sleep_lock`, so in a browser the caller must be a worker,
    /// whose waits are allowed, not the page's main thread.)
    job: AtomicPtr<Job>,
    /// The first panic of the current job, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    sleepers: AtomicUsize,
    /// Nanoseconds callers waited at the end of jobs (`Parallel::waited_ns`).
    waited_ns: AtomicU64,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    /// Worker threads started (joined on drop where they have handles).
    n_workers: usize,
    workers: Vec<JoinHandle<()>>,
    /// Held by the thread whose job is running; another thread calling `run` meanwhile runs inline.
    submit: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `threads` threads in all: the caller plus `threads - 1` workers, each started
    /// by `spawn(index, worker)`.
    pub fn with_spawner<E>(threads: usize, spawn: &mut Spawn<'_, E>) -> Result<ThreadPool, E> {
        let shared = Arc::new(Shared::default());
        let mut pool = ThreadPool {
            shared: shared.clone(),
            n_workers: 0,
            workers: Vec::new(),
            submit: Mutex::new(()),
        };
        for i in 1..threads.max(1) {
            let shared = shared.clone();
            // On an error, dropping the pool stops the workers already started.
            let handle = spawn(i, Box::new(move || worker(&shared)))?;
            pool.n_workers += 1;
            pool.workers.extend(handle);
        }
        Ok(pool)
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
        self.n_workers + 1
    }

    fn waited_ns(&self) -> u64 {
        self.shared.waited_ns.load(Relaxed)
    }

    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n <= 1 || self.n_workers == 0 || IN_POOL.get() || n >= CLOSED as usize {
            (0..n).for_each(f);
            return;
        }
        let _submit = match self.submit.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..n).for_each(f),
        };
        let s = &*self.shared;
        // SAFETY: the 'static reference (and the pointer to it that the workers read) is used
        // only by a thread that claimed one of this job's chunks (the claim checks the epoch),
        // and only until that chunk is counted in `done`. This function does not return before
        // `done` reaches n, by which point every chunk is claimed and finished, so no call can
        // start or still be running; and it cannot unwind before then, because every chunk, the
        // caller's too, runs under catch_unwind.
        let mut f_static: Job = unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
        };
        let epoch = ((s.ticket.0.load(Relaxed) >> 32) + 1) & 0xffff_ffff;
        // Close the finished job's ticket before `n` changes: a worker still holding the old
        // ticket must not pair it with the new `n` (its claim now fails instead).
        s.ticket.0.store(epoch << 32 | CLOSED, Relaxed);
        s.job.store(&mut f_static, Relaxed);
        s.done.0.store(0, Relaxed);
        s.n.store(n, Release);
        // SeqCst pairs with the sleeper count (see `worker`): either a worker sees the new epoch
        // before it sleeps, or we see it asleep and wake it.
        s.ticket.0.store(epoch << 32, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _lock = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }

        IN_POOL.set(true);
        work(s, Some(f));
        IN_POOL.set(false);

        // Workers that never got to this job are not waited for: their claims fail.
        #[cfg(not(target_arch = "wasm32"))]
        let waiting = (s.done.0.load(Acquire) < n).then(std::time::Instant::now);
        let mut spins = 0u32;
        while s.done.0.load(Acquire) < n {
            // With more threads than cores, a worker holding a chunk may be waiting for our core.
            spins = spins.saturating_add(1);
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(since) = waiting {
            s.waited_ns
                .fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
        }
        s.job.store(std::ptr::null_mut(), Relaxed);
        let panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(payload) = panic {
            drop(_submit);
            resume_unwind(payload);
        }
    }
}

/// Claims and runs chunks of the published job until none are left. The caller passes the
/// job's function; a worker fetches it at its first successful claim.
fn work(s: &Shared, mut f: Option<&(dyn Fn(usize) + Sync)>) {
    let mut ticket = s.ticket.0.load(Acquire);
    // `f` belongs to this epoch's job: once the ticket shows a later job (a failed claim can
    // return one), go back and fetch that job's function instead of calling a finished one's.
    let epoch = ticket >> 32;
    loop {
        if ticket >> 32 != epoch {
            return;
        }
        let i = (ticket & CLOSED) as usize;
        // Acquire: a new `n` means the ticket we hold is already closed, so the claim fails.
        if i >= s.n.load(Acquire) {
            return;
        }
        if let Err(now) = s
            .ticket
            .0
            .compare_exchange_weak(ticket, ticket + 1, AcqRel, Acquire)
        {
            ticket = now;
            continue;
        }
        ticket += 1;
        let f = *f.get_or_insert_with(|| {
            // Published (Relaxed) before the ticket that our claim read with Acquire.
            let job = s.job.load(Relaxed);
            assert!(!job.is_null(), "a chunk was claimed with no job published");
            // SAFETY: `job` points at the caller's `Job`, alive until this chunk is counted
            // in `done` (see `run`).
            unsafe { *job }
        });
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            s.panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(payload);
        }
        s.done.0.fetch_add(1, Release);
    }
}

/// The chunk index of a ticket whose job is being replaced; no chunk can be claimed from it.
const CLOSED: u64 = 0xffff_ffff;

/// True when `ticket` opens a job other than epoch `seen`.
fn is_new_job(ticket: u64, seen: u64) -> bool {
    ticket >> 32 != seen && ticket & CLOSED != CLOSED
}

fn worker(s: &Shared) {
    IN_POOL.set(true);
    let mut seen = 0;
    loop {
        // Spin on the epoch for a while, then sleep until `run` or `drop` bumps it.
        let mut budget = SpinBudget::start();
        let mut ticket = s.ticket.0.load(Acquire);
        while !is_new_job(ticket, seen) {
            if budget.spent() {
                let mut lock = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, SeqCst);
                ticket = s.ticket.0.load(SeqCst);
                while !is_new_job(ticket, seen) {
                    lock = s.wake.wait(lock).unwrap_or_else(|e| e.into_inner());
                    ticket = s.ticket.0.load(SeqCst);
                }
                s.sleepers.fetch_sub(1, SeqCst);
                break;
            }
            std::hint::spin_loop();
            ticket = s.ticket.0.load(Acquire);
        }
        if s.shutdown.load(Acquire) {
            return;
        }
        // The epoch we woke for, not a later one: if that job is over already, `work` returns at
        // once and the next one still counts as new.
        seen = ticket >> 32;
        work(s, None);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Release);
        let epoch = ((s.ticket.0.load(Relaxed) >> 32) + 1) & 0xffff_ffff;
        s.ticket.0.store(epoch << 32, SeqCst);
        {
            let _lock = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            // A worker never panics: chunks run under catch_unwind.
            let _ = handle.join();
        }
    }
}
