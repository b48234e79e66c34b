//! The KV cache of one sequence: per layer, one row of kv_dim per position for K and for V,
//! f16 by the contract (rule 6) or f32 on the verification path. Owned by a session, never by
//! the weights.

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
    pub k: CacheData, // (positions, kv_dim)
    pub v: CacheData, // (positions, kv_dim)
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
        let layer = LayerCache {
            k: CacheData::new(dtype),
            v: CacheData::new(dtype),
        };
        KvCache {
            layers: vec![layer; config.n_layers],
            len: 0,
        }
    }

    /// Drops every position >= n (a length change; the memory is reused).
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
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
    pub fn reserve(&mut self, positions: usize, kv_dim: usize) {
        for l in &mut self.layers {
            l.k.reserve_total(positions * kv_dim);
            l.v.reserve_total(positions * kv_dim);
        }
    }

    /// Frees the memory past the positions in use.
    pub fn shrink_to_fit(&mut self, kv_dim: usize) {
        for l in &mut self.layers {
            l.k.shrink_to(self.len * kv_dim);
            l.v.shrink_to(self.len * kv_dim);
        }
    }
}
