//! Where a forward pass's time goes, for `inferno bench --profile`: wall time per part of the
//! layer step (each matmul by matrix, attention, activation quantization, norms, RoPE and the
//! cache write, the gate activation, the rest), summed over forwards. Off unless an engine is
//! made with [`crate::engine::Engine::with_profile`]: without a profile a lap reads no clock,
//! so the forward pays nothing and the wasm build (no clock in core) never calls one.

use std::sync::atomic::{AtomicU64, Ordering};

/// A part of the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    MatmulQkv,
    MatmulWo,
    MatmulGateUp,
    MatmulDown,
    MatmulOutput,
    Attention,
    Quantize,
    Norms,
    RopeCache,
    GateActivation,
    Other,
}

impl Part {
    pub const ALL: [Part; 11] = [
        Part::MatmulQkv,
        Part::MatmulWo,
        Part::MatmulGateUp,
        Part::MatmulDown,
        Part::MatmulOutput,
        Part::Attention,
        Part::Quantize,
        Part::Norms,
        Part::RopeCache,
        Part::GateActivation,
        Part::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::MatmulQkv => "matmul q,k,v",
            Part::MatmulWo => "matmul attn out",
            Part::MatmulGateUp => "matmul gate,up",
            Part::MatmulDown => "matmul down",
            Part::MatmulOutput => "matmul output",
            Part::Attention => "attention",
            Part::Quantize => "activation quantization",
            Part::Norms => "norms",
            Part::RopeCache => "rope + kv write",
            Part::GateActivation => "gate activation",
            Part::Other => "embeddings, residuals, other",
        }
    }
}

/// Nanoseconds spent per part, summed over the forwards since the last reset.
#[derive(Debug, Default)]
pub struct Profile {
    ns: [AtomicU64; Part::ALL.len()],
}

impl Profile {
    pub fn add(&self, part: Part, ns: u64) {
        self.ns[part as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// Nanoseconds of each part (in [`Part::ALL`]'s order).
    pub fn snapshot(&self) -> [u64; Part::ALL.len()] {
        std::array::from_fn(|i| self.ns[i].load(Ordering::Relaxed))
    }

    pub fn reset(&self) {
        self.ns.iter().for_each(|n| n.store(0, Ordering::Relaxed));
    }
}

/// Times the steps of one forward: each `lap` charges the time since the previous lap to a part.
pub(crate) struct Clock<'a> {
    profile: Option<&'a Profile>,
    #[cfg(not(target_arch = "wasm32"))]
    last: Option<std::time::Instant>,
}

impl<'a> Clock<'a> {
    pub(crate) fn start(profile: Option<&'a Profile>) -> Clock<'a> {
        Clock {
            profile,
            #[cfg(not(target_arch = "wasm32"))]
            last: profile.map(|_| std::time::Instant::now()),
        }
    }

    pub(crate) fn lap(&mut self, part: Part) {
        #[cfg(not(target_arch = "wasm32"))]
        if let (Some(profile), Some(last)) = (self.profile, self.last) {
            let now = std::time::Instant::now();
            profile.add(part, (now - last).as_nanos() as u64);
            self.last = Some(now);
        }
        #[cfg(target_arch = "wasm32")]
        let _ = (self.profile, part);
    }
}
