//! Output tiles for threads: splits a (tokens x columns) region of an output buffer into
//! disjoint (token range x column range) tiles, or a buffer into runs of whole rows, and runs
//! them on a [`Parallel`] without allocating. Only independent outputs are split (rule 7), so no
//! tiling changes a result.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::parallel::Parallel;

/// Token slices handed to one call at most (a stack array): a tile with more tokens is run as
/// several calls, which only changes how often the weights are re-read, never a result.
pub const MAX_TOKENS_PER_CALL: usize = 32;

/// A buffer's start as a pointer every thread may hold. Each tile ([`for_each_tile`]) or run of
/// rows ([`for_each_rows`]) is claimed exactly once (an atomic ticket, or one index of
/// `Parallel::run`), and they are disjoint, so no element is ever reached twice.
struct SharedOut<T>(*mut T);

// SAFETY: the pointer is only dereferenced through slices of disjoint tiles or runs, each
// claimed by one thread, while `for_each_tile` / `for_each_rows` holds the `&mut` borrow of the
// buffer.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// Element `at` (a method, so closures capture the whole wrapper, not the raw field).
    fn at(&self, at: usize) -> *mut T {
        self.0.wrapping_add(at)
    }
}

/// `out` holds `out.len() / stride` tokens of `stride` values; the region is columns
/// `col0 .. col0 + cols` of every token. It is cut into tiles of `col_chunk` columns by
/// `token_chunk` tokens, and `f(first_col, first_token, outs)` runs for every tile (or part of a
/// tile, at most [`MAX_TOKENS_PER_CALL`] tokens), in any order, on any thread, where
/// `outs[j]` is columns `col0 + first_col ..` (up to `col_chunk`) of token `first_token + j`.
#[allow(clippy::too_many_arguments)]
pub fn for_each_tile(
    par: &dyn Parallel,
    out: &mut [f32],
    stride: usize,
    col0: usize,
    cols: usize,
    col_chunk: usize,
    token_chunk: usize,
    f: &(dyn Fn(usize, usize, &mut [&mut [f32]]) + Sync),
) {
    if cols == 0 || out.is_empty() {
        return;
    }
    assert!(
        stride > 0 && out.len() % stride == 0 && col0 + cols <= stride,
        "for_each_tile: the region is not inside whole rows"
    );
    let n_tokens = out.len() / stride;
    let (col_chunk, token_chunk) = (col_chunk.max(1), token_chunk.max(1));
    let col_tiles = cols.div_ceil(col_chunk);
    let n_tiles = col_tiles * n_tokens.div_ceil(token_chunk);
    let base = SharedOut(out.as_mut_ptr());
    let next = AtomicUsize::new(0);
    let work = |_: usize| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n_tiles {
            break;
        }
        let first_col = (i % col_tiles) * col_chunk;
        let len = col_chunk.min(cols - first_col);
        let first_token = (i / col_tiles) * token_chunk;
        let end_token = (first_token + token_chunk).min(n_tokens);
        let mut t0 = first_token;
        while t0 < end_token {
            let k = (end_token - t0).min(MAX_TOKENS_PER_CALL);
            let mut outs: [&mut [f32]; MAX_TOKENS_PER_CALL] = std::array::from_fn(|_| &mut [][..]);
            for (j, o) in outs.iter_mut().take(k).enumerate() {
                let at = (t0 + j) * stride + col0 + first_col;
                // SAFETY: at + len <= n_tokens * stride = out.len() (asserted above), so the
                // slice is inside `out`; tile i is claimed once (atomic ticket), and tiles
                // cover disjoint (token, column) ranges, so no two live slices overlap.
                *o = unsafe { std::slice::from_raw_parts_mut(base.at(at), len) };
            }
            f(first_col, t0, &mut outs[..k]);
            t0 += k;
        }
    };
    let workers = par.threads().min(n_tiles);
    if workers <= 1 {
        work(0);
    } else {
        par.run(workers, &work);
    }
}

/// `buf` holds rows of `row_len` values; `f(first_row, rows)` runs for consecutive runs of
/// `rows_per_run` rows (the last may be shorter), in any order, on any thread. One run (or one
/// thread) is one call on the caller, with no parallel region.
pub fn for_each_rows<T: Send>(
    par: &dyn Parallel,
    buf: &mut [T],
    row_len: usize,
    rows_per_run: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    if row_len == 0 || buf.is_empty() {
        return;
    }
    assert!(
        buf.len().is_multiple_of(row_len),
        "for_each_rows: not whole rows"
    );
    let n_rows = buf.len() / row_len;
    let per = rows_per_run.max(1);
    let runs = n_rows.div_ceil(per);
    if runs <= 1 || par.threads() <= 1 {
        f(0, buf);
        return;
    }
    let base = SharedOut(buf.as_mut_ptr());
    par.run(runs, &|i| {
        let first = i * per;
        let rows = per.min(n_rows - first);
        // SAFETY: run i is rows first..first + rows, inside `buf` (first < n_rows) and disjoint
        // from every other run; `Parallel::run` calls each i once, and `buf`'s borrow outlives
        // the call.
        let part =
            unsafe { std::slice::from_raw_parts_mut(base.at(first * row_len), rows * row_len) };
        f(first, part);
    });
}
