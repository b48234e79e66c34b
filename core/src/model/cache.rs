//! The KV cache of one sequence: per layer and KV head, one row of head_dim per position for K
//! and for V (each head's rows contiguous, [`CacheData`]), f16 by the contract (rule 6) or f32
//! on the verification path. Owned by a session, never by the weights.
//!
//! A layer with a sliding window W (Mistral, five of Gemma 3's six layers) keeps only the
//! positions a query can still see: from `first` on, at least [`LayerCache::keep`] of them
//! (the window plus as many again, so a rollback of up to W positions, a speculative draft or
//! a regenerated reply, never needs what was dropped). When it holds twice that, the oldest
//! rows are dropped in one move, so a long conversation costs about 4W rows per such layer
//! instead of its whole length, at an amortized copy of one row per token. The rows held are
//! the same values either way: attention reads the same positions (rule 6).

use super::WeightDtype;
use crate::config::ModelConfig;
use crate::kernels::KvSlice;
use crate::quant::f32_to_f16;

/// The storage of one layer's K or V cache: head-major, each KV head's rows (head_dim
/// elements per position) one after another in a run of [`LayerCache`]'s `cap` rows, so the
/// attention kernel streams a head's positions from consecutive memory. (Position-major rows
/// of kv_dim put one head's row of 128 bytes every 512 at TinyLlama's 4 KV heads of 64, which
/// the CPU's prefetchers follow badly: decode attention after 1500 positions on one Zen 3
/// core, 22 layers' cache from DRAM, 8.7-9.0 ns per (query head, position) against 7.5 with
/// each head's rows contiguous.)
#[derive(Debug, Clone)]
pub enum CacheData {
    /// f16 bits, rounded to nearest even: the contract's cache.
    F16(Vec<u16>),
    /// f32: the verification path ([`WeightDtype::F32`]) keeps activations unrounded.
    F32(Vec<f32>),
}

/// Where a layer's rows lie in its [`CacheData`]: `heads` runs of `cap` rows of `head_dim`.
#[derive(Debug, Clone, Copy)]
struct Runs {
    heads: usize,
    head_dim: usize,
    cap: usize,
}

impl Runs {
    /// The first element of head h's row `row`.
    fn at(&self, h: usize, row: usize) -> usize {
        (h * self.cap + row) * self.head_dim
    }
}

/// Both element types' storage through one generic body.
macro_rules! each_type {
    ($data:expr, $d:ident => $body:expr) => {
        match $data {
            CacheData::F16($d) => $body,
            CacheData::F32($d) => $body,
        }
    };
}

impl CacheData {
    fn new(dtype: WeightDtype) -> CacheData {
        match dtype {
            WeightDtype::AsStored => CacheData::F16(Vec::new()),
            WeightDtype::F32 => CacheData::F32(Vec::new()),
        }
    }

    /// Moves the first `rows` rows of every head from the runs `from` into new runs of `cap`
    /// rows (zeros past them), in an allocation of exactly that size.
    fn relayout(&mut self, from: Runs, rows: usize, cap: usize) {
        fn moved<T: Copy + Default>(d: &[T], from: Runs, rows: usize, to: Runs) -> Vec<T> {
            let mut out = vec![T::default(); to.heads * to.cap * to.head_dim];
            let n = rows * to.head_dim;
            for h in 0..to.heads {
                out[to.at(h, 0)..to.at(h, 0) + n]
                    .copy_from_slice(&d[from.at(h, 0)..from.at(h, 0) + n]);
            }
            out
        }
        let to = Runs { cap, ..from };
        each_type!(self, d => *d = moved(d, from, rows, to));
    }

    /// Stores `x` (one position's kv_dim values, head after head) as row `row` of each head.
    fn write(&mut self, runs: Runs, row: usize, x: &[f32]) {
        for (h, xh) in x.chunks_exact(runs.head_dim).enumerate() {
            let at = runs.at(h, row);
            match self {
                CacheData::F16(d) => d[at..at + xh.len()]
                    .iter_mut()
                    .zip(xh)
                    .for_each(|(d, &s)| *d = f32_to_f16(s)),
                CacheData::F32(d) => d[at..at + xh.len()].copy_from_slice(xh),
            }
        }
    }

    /// Drops the first `n` of every head's `rows` rows (the rest moves to the front of its run;
    /// the allocation stays).
    fn drop_front(&mut self, runs: Runs, n: usize, rows: usize) {
        for h in 0..runs.heads {
            let (from, to) = (runs.at(h, n), runs.at(h, 0));
            each_type!(self, d => d.copy_within(from..runs.at(h, rows), to));
        }
    }

    /// Head h's first `rows` rows.
    fn head(&self, runs: Runs, h: usize, rows: usize) -> KvSlice<'_> {
        let (from, to) = (runs.at(h, 0), runs.at(h, rows));
        match self {
            CacheData::F16(d) => KvSlice::F16(&d[from..to]),
            CacheData::F32(d) => KvSlice::F32(&d[from..to]),
        }
    }

    fn element_bytes(&self) -> usize {
        match self {
            CacheData::F16(_) => 2,
            CacheData::F32(_) => 4,
        }
    }

    fn bytes_held(&self) -> usize {
        each_type!(self, d => d.capacity()) * self.element_bytes()
    }
}

#[derive(Debug, Clone)]
pub struct LayerCache {
    k: CacheData, // (KV heads, cap, head_dim): rows first .. first + rows of each head
    v: CacheData, // (KV heads, cap, head_dim)
    runs: Runs,
    /// Rows in use in each head's run: positions first .. first + rows, which is the cache's
    /// `len` between forward passes (a forward sets it ahead for the rows it writes).
    rows: usize,
    /// The position of the first row held (0 unless a window let older rows go).
    pub first: usize,
    /// The layer's sliding window, if any.
    pub window: Option<usize>,
}

impl LayerCache {
    /// An empty layer of `heads` KV heads of `head_dim`, with the layer's sliding window.
    fn new(dtype: WeightDtype, heads: usize, head_dim: usize, window: Option<usize>) -> Self {
        LayerCache {
            k: CacheData::new(dtype),
            v: CacheData::new(dtype),
            runs: Runs {
                heads,
                head_dim,
                cap: 0,
            },
            rows: 0,
            first: 0,
            window,
        }
    }

    /// Positions a windowed layer keeps behind the next one: the window (W - 1 earlier
    /// positions are seen by the next query) and W more for rollbacks.
    fn keep(&self) -> Option<usize> {
        self.window.map(|w| 2 * w - 1)
    }

    /// Whether the query at position `p` finds every position it sees here.
    fn serves(&self, p: usize) -> bool {
        let sees_from = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        self.first <= sees_from
    }

    /// Makes room for `cap` rows per head (never fewer than those in use).
    fn set_cap(&mut self, cap: usize) {
        let cap = cap.max(self.rows);
        if cap != self.runs.cap {
            self.k.relayout(self.runs, self.rows, cap);
            self.v.relayout(self.runs, self.rows, cap);
            self.runs.cap = cap;
        }
    }

    /// Sets the rows in use to `rows` (positions first .. first + rows), growing the runs
    /// (to at least twice their size, so appending costs an amortized copy per row) when they
    /// are short. Rows past those in use before hold stale values until written.
    pub fn set_rows(&mut self, rows: usize) {
        if rows > self.runs.cap {
            self.set_cap(rows.max(2 * self.runs.cap));
        }
        self.rows = rows;
    }

    /// Stores one position's K and V (kv_dim values each, head after head) as row `row`.
    pub fn write(&mut self, row: usize, k: &[f32], v: &[f32]) {
        assert!(
            row < self.rows,
            "cache: row {row} past the {} in use",
            self.rows
        );
        self.k.write(self.runs, row, k);
        self.v.write(self.runs, row, v);
    }

    /// KV head h's keys and values, one row of head_dim per position held.
    pub fn head(&self, h: usize) -> (KvSlice<'_>, KvSlice<'_>) {
        (
            self.k.head(self.runs, h, self.rows),
            self.v.head(self.runs, h, self.rows),
        )
    }

    /// Lets the oldest rows go once twice [`LayerCache::keep`] are held past `first`, with
    /// `len` positions in use.
    fn compact(&mut self, len: usize) {
        let Some(keep) = self.keep() else {
            return;
        };
        if len - self.first < 2 * keep {
            return;
        }
        let drop = len - keep - self.first;
        self.k.drop_front(self.runs, drop, self.rows);
        self.v.drop_front(self.runs, drop, self.rows);
        self.rows -= drop;
        self.first = len - keep;
    }

    fn bytes_used(&self) -> usize {
        2 * self.rows * self.runs.heads * self.runs.head_dim * self.k.element_bytes()
    }
}

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub layers: Vec<LayerCache>,
    /// Positions held (the next token's position).
    pub len: usize,
}

impl KvCache {
    pub fn new(config: &ModelConfig, dtype: WeightDtype) -> KvCache {
        let layers = (0..config.n_layers)
            .map(|l| {
                let window = config.layer_window(l);
                LayerCache::new(dtype, config.n_kv_heads, config.head_dim, window)
            })
            .collect();
        KvCache { layers, len: 0 }
    }

    /// Drops every position >= n (a length change; the memory is reused). Returns false if a
    /// windowed layer has already let go of positions the query at n would see: then the cache
    /// is emptied, and the caller must prefill the first n tokens again.
    #[must_use]
    pub fn truncate(&mut self, n: usize) -> bool {
        if n >= self.len {
            return true;
        }
        self.len = n;
        if self.layers.iter().all(|l| l.serves(n)) {
            for l in &mut self.layers {
                l.rows = n - l.first;
            }
            return true;
        }
        self.len = 0;
        for l in &mut self.layers {
            (l.first, l.rows) = (0, 0);
        }
        false
    }

    /// After a forward pass: windowed layers let go of rows no query can see any more.
    pub fn compact(&mut self) {
        let len = self.len;
        for l in &mut self.layers {
            l.compact(len);
        }
    }

    /// Rows layer `l` holds (its positions from `first` to `len`).
    pub fn rows_held(&self, l: usize) -> usize {
        self.layers[l].rows
    }

    /// Bytes held for positions in use.
    pub fn bytes_used(&self) -> usize {
        self.layers.iter().map(LayerCache::bytes_used).sum()
    }

    /// Bytes allocated, used or not (what a memory budget counts).
    pub fn bytes_held(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.k.bytes_held() + l.v.bytes_held())
            .sum()
    }

    /// Allocates room for `positions` positions now, so growing up to them never reallocates
    /// (a server reserves a request's whole need when it admits it).
    /// (A windowed layer never holds more than twice its `keep` and one batch.)
    pub fn reserve(&mut self, positions: usize) {
        for l in &mut self.layers {
            let rows = l.keep().map_or(positions, |keep| positions.min(2 * keep));
            if rows > l.runs.cap {
                l.set_cap(rows);
            }
        }
    }

    /// Frees the memory past the positions in use.
    pub fn shrink_to_fit(&mut self) {
        for l in &mut self.layers {
            l.set_cap(l.rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer of 3 KV heads of 2 with `rows` positions written one at a time: position p's K
    /// value i of head h is 8 p + 2 h + i (V: its negation), exact in f16.
    fn filled(rows: usize, window: Option<usize>) -> LayerCache {
        let mut l = LayerCache::new(WeightDtype::AsStored, 3, 2, window);
        for p in 0..rows {
            l.set_rows(p + 1);
            let k: Vec<f32> = (0..6)
                .map(|j| (8 * p + 2 * (j / 2) + j % 2) as f32)
                .collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            l.write(p, &k, &v);
        }
        l
    }

    /// Head h's keys and values from the cache, as f32.
    fn head_values(l: &LayerCache, h: usize) -> (Vec<f32>, Vec<f32>) {
        let f32s = |s: KvSlice<'_>| match s {
            KvSlice::F16(d) => d.iter().map(|&b| crate::quant::f16_to_f32(b)).collect(),
            KvSlice::F32(d) => d.to_vec(),
        };
        let (k, v) = l.head(h);
        (f32s(k), f32s(v))
    }

    fn expected(positions: std::ops::Range<usize>, h: usize) -> Vec<f32> {
        positions
            .flat_map(|p| (0..2).map(move |i| (8 * p + 2 * h + i) as f32))
            .collect()
    }

    #[test]
    fn rows_3_heads_of_2_grown_one_at_a_time_read_back_per_head() {
        let l = filled(37, None);
        assert_eq!(l.runs.cap, 64);
        for h in 0..3 {
            let (k, v) = head_values(&l, h);
            assert_eq!(k, expected(0..37, h));
            assert_eq!(v, expected(0..37, h).iter().map(|x| -x).collect::<Vec<_>>());
        }
    }

    #[test]
    fn window_4_compacts_each_head_to_its_last_7_rows_and_shrinks_to_them() {
        let mut l = filled(14, Some(4));
        // keep = 2 * 4 - 1 = 7: at 14 positions held, the oldest 7 go.
        l.compact(14);
        assert_eq!((l.first, l.rows), (7, 7));
        for h in 0..3 {
            assert_eq!(head_values(&l, h).0, expected(7..14, h));
        }
        l.set_cap(7);
        assert_eq!((l.runs.cap, l.bytes_used()), (7, 2 * 7 * 6 * 2));
        for h in 0..3 {
            assert_eq!(head_values(&l, h).0, expected(7..14, h));
        }
    }
}
