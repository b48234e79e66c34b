//! The spin pool's contract: every chunk exactly once for any n and thread count (more threads
//! than cores included), nested calls, panics re-raised on the caller with the pool still usable,
//! idle workers asleep (process CPU time stays flat), and drop joining the workers.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use inferno_core::parallel::Parallel;
use inferno_native::pool::{self, ThreadPool};

const THREADS: [usize; 4] = [1, 2, 3, 8];

/// The tests take turns: the idle test measures the whole process's CPU time and the drop test
/// lists its threads, so no other pool may be running meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn counts_after_run(pool: &ThreadPool, n: usize) -> Vec<usize> {
    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    pool.run(n, &|i| {
        hits[i].fetch_add(1, Relaxed);
    });
    hits.into_iter().map(|h| h.into_inner()).collect()
}

#[test]
fn every_chunk_runs_exactly_once() {
    let _turn = one_at_a_time();
    for threads in THREADS {
        let pool = pool::start(threads).unwrap();
        assert_eq!(pool.threads(), threads);
        for n in [0, 1, 2, 7, 1000] {
            // Repeat so that consecutive jobs meet workers both spinning and asleep.
            for round in 0..3 {
                let counts = counts_after_run(&pool, n);
                assert!(
                    counts.iter().all(|&c| c == 1),
                    "run(threads={threads},n={n},round={round}): counts {counts:?}"
                );
                if round == 1 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

#[test]
fn many_small_jobs_back_to_back() {
    let _turn = one_at_a_time();
    // The decode pattern: hundreds of short jobs in a row; a lost wake-up would hang here.
    for threads in [2, 3] {
        let pool = pool::start(threads).unwrap();
        let total = AtomicUsize::new(0);
        for _ in 0..5000 {
            pool.run(4, &|i| {
                total.fetch_add(i + 1, Relaxed);
            });
        }
        assert_eq!(total.into_inner(), 5000 * 10, "threads={threads}");
    }
}

#[test]
fn nested_run_executes_inline() {
    let _turn = one_at_a_time();
    for threads in THREADS {
        let pool = pool::start(threads).unwrap();
        let hits: Vec<AtomicUsize> = (0..7 * 5).map(|_| AtomicUsize::new(0)).collect();
        pool.run(7, &|outer| {
            pool.run(5, &|inner| {
                hits[outer * 5 + inner].fetch_add(1, Relaxed);
            });
        });
        assert!(
            hits.iter().all(|h| h.load(Relaxed) == 1),
            "nested(threads={threads})"
        );
    }
}

#[test]
fn run_from_two_threads_at_once() {
    let _turn = one_at_a_time();
    // Two sessions sharing one pool: the second caller runs inline while the first's job runs.
    let pool = Arc::new(pool::start(3).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let counts = counts_after_run(&pool, 33);
                    assert!(counts.iter().all(|&c| c == 1));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn panic_in_a_chunk_reaches_the_caller_and_the_pool_survives() {
    let _turn = one_at_a_time();
    for threads in THREADS {
        let pool = pool::start(threads).unwrap();
        for bad in [0, 5, 99] {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.run(100, &|i| {
                    if i == bad {
                        panic!("chunk {i} failed");
                    }
                    // Give the other threads time to be inside the job too.
                    std::hint::black_box((0..1000).sum::<u64>());
                });
            }));
            let payload = caught.expect_err("the panic must reach the caller");
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert_eq!(message, format!("chunk {bad} failed"), "threads={threads}");
            let counts = counts_after_run(&pool, 1000);
            assert!(
                counts.iter().all(|&c| c == 1),
                "after a panic (threads={threads})"
            );
        }
    }
}

/// User + system CPU time of this process, from /proc/self/stat (fields 14 and 15, in ticks).
fn process_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The command name (field 2) may hold spaces; fields after it follow the closing ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: u64 = fields[11].parse().unwrap();
    let stime: u64 = fields[12].parse().unwrap();
    // The kernel reports these in USER_HZ ticks, which is 100 on x86-64 Linux.
    Duration::from_millis((utime + stime) * 10)
}

#[test]
fn idle_workers_sleep() {
    let _turn = one_at_a_time();
    let pool = pool::start(3).unwrap();
    for _ in 0..100 {
        counts_after_run(&pool, 64);
    }
    // Let the workers finish spinning, then watch the process over 300 ms of idleness: two
    // workers that kept spinning would burn 600 ms.
    std::thread::sleep(Duration::from_millis(20));
    let before = process_cpu_time();
    std::thread::sleep(Duration::from_millis(300));
    let used = process_cpu_time() - before;
    assert!(
        used < Duration::from_millis(50),
        "idle pool used {used:?} of CPU in 300 ms"
    );
    // And it still works after sleeping.
    assert!(counts_after_run(&pool, 10).iter().all(|&c| c == 1));
}

#[test]
fn drop_joins_the_workers() {
    let _turn = one_at_a_time();
    let pool = pool::start(4).unwrap();
    counts_after_run(&pool, 100);
    drop(pool);
    // Every worker has exited: its thread name no longer shows up among this process's tasks.
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("inferno-worker")),
        "workers still alive after drop: {names:?}"
    );
}

#[test]
fn workers_share_the_work() {
    let _turn = one_at_a_time();
    for threads in [2, 3] {
        let pool = pool::start(threads).unwrap();
        let names = Mutex::new(std::collections::BTreeSet::new());
        // Chunks that wait rather than compute, so every thread gets a core in time.
        pool.run(threads * 8, &|_| {
            std::thread::sleep(Duration::from_millis(2));
            let name = std::thread::current()
                .name()
                .unwrap_or("caller")
                .to_string();
            names.lock().unwrap().insert(name);
        });
        let names = names.into_inner().unwrap();
        assert_eq!(names.len(), threads, "threads={threads}: ran on {names:?}");
    }
}
