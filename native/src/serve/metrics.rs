//! The counters and gauges of `inferno serve`, rendered at GET /metrics in Prometheus' text
//! format. Atomics: the engine thread and the HTTP tasks update them without locks.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub cache_reused_tokens: AtomicU64,
    pub batch_steps: AtomicU64,
    pub batched_tokens: AtomicU64,
    pub active_streams: AtomicU64,
    pub queue_depth: AtomicU64,
    pub kv_bytes: AtomicU64,
    pub kv_bytes_peak: AtomicU64,
    pub kv_budget_bytes: AtomicU64,
    pub cached_sessions: AtomicU64,
}

impl Metrics {
    pub fn render(&self) -> String {
        let rows: [(&str, &str, &str, &AtomicU64); 16] = [
            (
                "inferno_requests_total",
                "counter",
                "Completion, chat and compose requests received.",
                &self.requests,
            ),
            (
                "inferno_requests_failed_total",
                "counter",
                "Requests answered with an error.",
                &self.failed,
            ),
            (
                "inferno_requests_cancelled_total",
                "counter",
                "Requests stopped early: client gone, timeout or shutdown.",
                &self.cancelled,
            ),
            (
                "inferno_prompt_tokens_total",
                "counter",
                "Prompt tokens of admitted requests.",
                &self.prompt_tokens,
            ),
            (
                "inferno_generated_tokens_total",
                "counter",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "inferno_cache_hits_total",
                "counter",
                "Requests that continued a cached session.",
                &self.cache_hits,
            ),
            (
                "inferno_cache_misses_total",
                "counter",
                "Requests that started from an empty session.",
                &self.cache_misses,
            ),
            (
                "inferno_cache_reused_tokens_total",
                "counter",
                "Prompt tokens taken from cached sessions.",
                &self.cache_reused_tokens,
            ),
            (
                "inferno_batch_steps_total",
                "counter",
                "Forward passes of the engine thread.",
                &self.batch_steps,
            ),
            (
                "inferno_batched_tokens_total",
                "counter",
                "Tokens run through those forward passes.",
                &self.batched_tokens,
            ),
            (
                "inferno_active_streams",
                "gauge",
                "Requests being prefilled or decoded.",
                &self.active_streams,
            ),
            (
                "inferno_queue_depth",
                "gauge",
                "Requests waiting for a slot.",
                &self.queue_depth,
            ),
            (
                "inferno_kv_bytes",
                "gauge",
                "KV cache bytes held by active requests and cached sessions.",
                &self.kv_bytes,
            ),
            (
                "inferno_kv_bytes_peak",
                "gauge",
                "Most KV cache bytes held at once.",
                &self.kv_bytes_peak,
            ),
            (
                "inferno_kv_budget_bytes",
                "gauge",
                "The KV cache budget (--ctx-budget).",
                &self.kv_budget_bytes,
            ),
            (
                "inferno_cached_sessions",
                "gauge",
                "Sessions kept for prefix reuse.",
                &self.cached_sessions,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
                value.load(Ordering::Relaxed)
            );
        }
        out
    }
}
