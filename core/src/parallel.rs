//! How core asks for work to be split. Core never spawns threads: native implements [`Parallel`]
//! with its spin pool, wasm runs [`Serial`]. Only independent outputs are ever split (rule 7), so
//! the thread count never changes a result.

use std::sync::Mutex;

/// Runs `n` independent chunks of work, in any order, on any threads.
pub trait Parallel: Send + Sync {
    /// How many threads (including the caller) may run chunks at once.
    fn threads(&self) -> usize;
    /// Calls `f(i)` once for every i in 0..n and returns when all calls have returned.
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync));
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

/// Splits the `rows` outputs of every token into chunks of `chunk_rows` and runs
/// `f(first_row, outs)` for each chunk in parallel, where `outs[t]` is a token's slice of that
/// chunk (a chunk with many tokens may come as several calls, see
/// [`crate::kernels::tiles::for_each_tile`], which does the splitting without allocating).
/// `out` holds `n_tokens` rows of `rows` values.
pub fn for_each_row_chunk(
    par: &dyn Parallel,
    out: &mut [f32],
    rows: usize,
    chunk_rows: usize,
    f: &(dyn Fn(usize, &mut [&mut [f32]]) + Sync),
) {
    if rows == 0 || out.is_empty() {
        return;
    }
    assert!(
        out.len() % rows == 0,
        "for_each_row_chunk: out is not whole rows"
    );
    let n_tokens = out.len() / rows;
    crate::kernels::tiles::for_each_tile(
        par,
        out,
        rows,
        0,
        rows,
        chunk_rows,
        n_tokens,
        &|first, _, outs| f(first, outs),
    );
}

/// Runs `f(i, item)` for every item of `items` in parallel, each item owned by one call.
pub fn for_each_mut<T: Send>(
    par: &dyn Parallel,
    items: &mut [T],
    f: &(dyn Fn(usize, &mut T) + Sync),
) {
    let cells: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    par.run(cells.len(), &|i| {
        let mut item = cells[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i, &mut item);
    });
}
