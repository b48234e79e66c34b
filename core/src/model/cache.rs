//! The KV cache of one sequence: per layer, one row of kv_dim per position for K and for V,
//! f16 by the contract (rule 6) or f32 on the verification path. Owned by a session, never by
//! the weights.
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

/// One layer's K or V cache, one row of kv_dim per position.
#[derive(Debug, Clone)]
pub enum CacheData {
    /// f16 bits, rounded to nearest even: the contract's cache.
    F16(Vec<u16>),
    /// f32: the verification path ([`WeightDtype::F32`]) keeps activations unrounded.
    F32(Vec<f32>),
}

impl CacheData {
    fn new(dtype: WeightDtype) -> CacheData {
        match dtype {
            WeightDtype::AsStored => CacheData::F16(Vec::new()),
            WeightDtype::F32 => CacheData::F32(Vec::new()),
        }
    }

    /// Makes room for `n` elements in all (the length is unchanged).
    fn reserve_total(&mut self, n: usize) {
        match self {
            CacheData::F16(d) => d.reserve_exact(n.saturating_sub(d.len())),
            CacheData::F32(d) => d.reserve_exact(n.saturating_sub(d.len())),
        }
    }

    /// Frees what lies past the first `n` elements.
    fn shrink_to(&mut self, n: usize) {
        match self {
            CacheData::F16(d) => {
                d.truncate(n);
                d.shrink_to_fit();
            }
            CacheData::F32(d) => {
                d.truncate(n);
                d.shrink_to_fit();
            }
        }
    }

    fn bytes_held(&self) -> usize {
        match self {
            CacheData::F16(d) => d.capacity() * 2,
            CacheData::F32(d) => d.capacity() * 4,
        }
    }

    pub(super) fn resize(&mut self, n: usize) {
        match self {
            CacheData::F16(d) => d.resize(n, 0),
            CacheData::F32(d) => d.resize(n, 0.0),
        }
    }

    /// Drops the first `n` elements (the rest moves to the front; the allocation stays).
    fn drop_front(&mut self, n: usize) {
        match self {
            CacheData::F16(d) => drop(d.drain(..n)),
            CacheData::F32(d) => drop(d.drain(..n)),
        }
    }

    /// Stores `x` at element offset `at`.
    pub(super) fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            CacheData::F16(d) => d[at..at + x.len()]
                .iter_mut()
                .zip(x)
                .for_each(|(d, &s)| *d = f32_to_f16(s)),
            CacheData::F32(d) => d[at..at + x.len()].copy_from_slice(x),
        }
    }

    pub(super) fn view(&self) -> KvSlice<'_> {
        match self {
            CacheData::F16(d) => KvSlice::F16(d),
            CacheData::F32(d) => KvSlice::F32(d),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            CacheData::F16(d) => d.len() * 2,
            CacheData::F32(d) => d.len() * 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LayerCache {
    pub k: CacheData, // (positions first .., kv_dim)
    pub v: CacheData, // (positions first .., kv_dim)
    /// The position of the first row held (0 unless a window let older rows go).
    pub first: usize,
    /// The layer's sliding window, if any.
    pub window: Option<usize>,
}

impl LayerCache {
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

    /// Lets the oldest rows go once twice [`LayerCache::keep`] are held past `first`, with
    /// `len` positions in use.
    fn compact(&mut self, len: usize, kv_dim: usize) {
        let Some(keep) = self.keep() else {
            return;
        };
        if len - self.first < 2 * keep {
            return;
        }
        let drop = (len - keep - self.first) * kv_dim;
        self.k.drop_front(drop);
        self.v.drop_front(drop);
        self.first = len - keep;
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
            .map(|l| LayerCache {
                k: CacheData::new(dtype),
                v: CacheData::new(dtype),
                first: 0,
                window: config.layer_window(l),
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
            return true;
        }
        self.len = 0;
        for l in &mut self.layers {
            l.first = 0;
        }
        false
    }

    /// After a forward pass: windowed layers let go of rows no query can see any more.
    pub fn compact(&mut self, kv_dim: usize) {
        let len = self.len;
        for l in &mut self.layers {
            l.compact(len, kv_dim);
        }
    }

    /// Rows layer `l` holds (its positions from `first` to `len`).
    pub fn rows_held(&self, l: usize) -> usize {
        self.len - self.layers[l].first
    }

    /// Bytes held for positions in use.
    pub fn bytes_used(&self) -> usize {
        self.layers.iter().map(|l| l.k.bytes() + l.v.bytes()).sum()
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
    pub fn reserve(&mut self, positions: usize, kv_dim: usize) {
        for l in &mut self.layers {
            let rows = l.keep().map_or(positions, |keep| positions.min(2 * keep));
            l.k.reserve_total(rows * kv_dim);
            l.v.reserve_total(rows * kv_dim);
        }
    }

    /// Frees the memory past the positions in use.
    pub fn shrink_to_fit(&mut self, kv_dim: usize) {
        for l in &mut self.layers {
            let held = (self.len - l.first) * kv_dim;
            l.k.shrink_to(held);
            l.v.shrink_to(held);
        }
    }
}
