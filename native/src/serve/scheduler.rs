//! The engine thread of `inferno serve`: every active request advances in one forward pass per
//! step (core's [`step_batch`]: the next token of each reply, plus a chunk of any prompt being
//! prefilled), so the weights are read once per step for all of them. New requests join
//! between steps. Finished sessions go to a prefix cache (LRU under a KV byte budget) that the
//! next request starting with the same tokens continues from.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inferno_core::generate::{
    step_batch, GenerateOptions, Generator, Reply, StopReason, TokenLogprob,
};
use inferno_core::model::{LogitsFor, Scratch};
use inferno_core::session::{common_prefix, Append, Session};
use inferno_core::Engine;
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::Metrics;

/// What a request asks of the engine thread.
pub struct Job {
    pub work: Work,
    /// The prompt's tokens (for a compose: the conversation and draft to prefill).
    pub prompt: Vec<u32>,
    /// Continue from a cached session that starts with the same tokens.
    pub cache_prompt: bool,
    /// KV positions the request may need (prompt, reply, the last token), reserved at admission.
    pub positions: usize,
    pub events: UnboundedSender<Event>,
    pub deadline: Instant,
}

pub enum Work {
    Generate {
        options: GenerateOptions,
        /// Alternatives per token when log-probabilities are asked for.
        logprobs: Option<usize>,
    },
    /// Prefill only (compose-while-typing), then keep the session in the cache.
    Compose,
}

/// What the engine thread tells a request, in order.
#[derive(Debug)]
pub enum Event {
    /// Text of one step and the log-probabilities of its tokens (when asked for).
    Delta {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        stop: StopReason,
        usage: Usage,
    },
    Composed {
        reused: usize,
        prefilled: usize,
    },
    Failed(String),
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

pub struct Config {
    /// Replies decoded together; more requests wait.
    pub parallel: usize,
    /// KV bytes for active requests and cached sessions together.
    pub budget: usize,
    /// Prompt tokens prefilled per step (shared by the requests being prefilled), so a long
    /// prompt never stalls the replies being decoded for long.
    pub prefill_chunk: usize,
}

/// A request being served: its session, and its generator once the prompt is in.
struct Slot {
    job: Job,
    session: Session,
    generator: Option<Generator>,
    cached_tokens: usize,
    /// Log-probabilities already sent.
    sent: usize,
    /// Tokens already counted in the metrics.
    counted: usize,
}

struct Cached {
    session: Session,
    last_used: u64,
}

struct Scheduler {
    engine: Engine,
    config: Config,
    metrics: Arc<Metrics>,
    queue: VecDeque<Job>,
    active: Vec<Slot>,
    cache: Vec<Cached>,
    clock: u64,
    scratch: Scratch,
    bytes_per_position: usize,
}

/// Runs until every sender of `jobs` is gone. `stopping` cancels what is queued and running.
pub fn run(
    engine: Engine,
    config: Config,
    jobs: Receiver<Job>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
) {
    let bytes_per_position = engine.new_session().cache_bytes_per_position();
    let mut s = Scheduler {
        engine,
        config,
        metrics,
        queue: VecDeque::new(),
        active: Vec::new(),
        cache: Vec::new(),
        clock: 0,
        scratch: Scratch::default(),
        bytes_per_position,
    };
    loop {
        if s.active.is_empty() && s.queue.is_empty() {
            match jobs.recv_timeout(Duration::from_millis(200)) {
                Ok(job) => s.queue.push_back(job),
                Err(RecvTimeoutError::Timeout) => {
                    s.publish();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            s.queue.push_back(job);
        }
        if stopping.load(Ordering::Relaxed) {
            s.cancel_all("the server is shutting down");
            continue;
        }
        s.drop_vanished();
        s.admit();
        s.step();
        s.publish();
    }
}

impl Scheduler {
    /// Bytes held by active requests (their reservations) and by the cache.
    fn kv_bytes(&self) -> usize {
        let active: usize = self
            .active
            .iter()
            .map(|s| s.session.cache_bytes_held())
            .sum();
        active + self.cached_bytes()
    }

    fn cached_bytes(&self) -> usize {
        self.cache
            .iter()
            .map(|c| c.session.cache_bytes_held())
            .sum()
    }

    fn publish(&self) {
        let m = &self.metrics;
        let kv = self.kv_bytes() as u64;
        m.kv_bytes.store(kv, Ordering::Relaxed);
        m.kv_bytes_peak.fetch_max(kv, Ordering::Relaxed);
        m.active_streams
            .store(self.active.len() as u64, Ordering::Relaxed);
        m.queue_depth
            .store(self.queue.len() as u64, Ordering::Relaxed);
        m.cached_sessions
            .store(self.cache.len() as u64, Ordering::Relaxed);
    }

    /// Requests whose client is gone or whose time is up stop here, queued or running.
    fn drop_vanished(&mut self) {
        let now = Instant::now();
        let metrics = &self.metrics;
        self.queue.retain(|job| {
            let gone = job.events.is_closed() || now > job.deadline;
            if gone {
                fail_timed_out(job, now);
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            !gone
        });
        let mut i = 0;
        while i < self.active.len() {
            let job = &self.active[i].job;
            if job.events.is_closed() || now > job.deadline {
                fail_timed_out(job, now);
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                let slot = self.active.swap_remove(i);
                self.keep(slot.session);
            } else {
                i += 1;
            }
        }
    }

    fn cancel_all(&mut self, why: &str) {
        for job in self.queue.drain(..) {
            let _ = job.events.send(Event::Failed(why.to_string()));
            self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        for slot in self.active.drain(..) {
            let _ = slot.job.events.send(Event::Failed(why.to_string()));
            self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.publish();
    }

    /// Moves queued requests into free slots while their KV reservation fits the budget
    /// (evicting cached sessions, oldest first, to make room).
    fn admit(&mut self) {
        while self.active.len() < self.config.parallel {
            let Some(job) = self.queue.front() else { break };
            let need = job.positions * self.bytes_per_position;
            // The cached session this prompt continues, if any, out of the cache while others
            // are evicted (its bytes still count).
            let mut held = match job.cache_prompt {
                true => self.best_cached(&job.prompt),
                false => None,
            }
            .map(|(i, shared)| (self.cache.swap_remove(i), shared));
            let active: usize = self
                .active
                .iter()
                .map(|s| s.session.cache_bytes_held())
                .sum();
            let held_bytes = |h: &Option<(Cached, usize)>| {
                h.as_ref().map_or(0, |(c, _)| c.session.cache_bytes_held())
            };
            while active + need + self.cached_bytes() + held_bytes(&held) > self.config.budget {
                let Some(oldest) = self.oldest_cached() else {
                    break;
                };
                self.cache.swap_remove(oldest);
            }
            if active + need + held_bytes(&held) > self.config.budget {
                held = None;
            }
            if active + need > self.config.budget {
                if let Some((cached, _)) = held {
                    self.cache.push(cached);
                }
                if self.active.is_empty() {
                    // Unreachable after the handler's check (need <= budget); never spin.
                    let job = self.queue.pop_front().expect("front exists");
                    let _ = job.events.send(Event::Failed(format!(
                        "the request needs {need} bytes of KV cache, more than the budget"
                    )));
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                break;
            }
            let job = self.queue.pop_front().expect("front exists");
            self.start(job, held);
        }
    }

    fn oldest_cached(&self) -> Option<usize> {
        (0..self.cache.len()).min_by_key(|&i| self.cache[i].last_used)
    }

    /// The cached session sharing the longest prefix with `prompt` (at least one token), as
    /// (index, shared tokens).
    fn best_cached(&self, prompt: &[u32]) -> Option<(usize, usize)> {
        self.cache
            .iter()
            .enumerate()
            .map(|(i, c)| (i, common_prefix(c.session.tokens(), prompt)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, self.cache[i].last_used))
    }

    /// Starts a request from `held` (a cached session and the tokens it shares with the
    /// prompt) or from nothing.
    fn start(&mut self, job: Job, held: Option<(Cached, usize)>) {
        // The last prompt token always runs, since its logits start the reply.
        let keep_max = match job.work {
            Work::Generate { .. } => job.prompt.len().saturating_sub(1),
            Work::Compose => job.prompt.len(),
        };
        let mut session = match held {
            Some((cached, shared)) if shared.min(keep_max) > 0 => {
                let shared = shared.min(keep_max);
                let session = if cached.session.len() <= shared {
                    // The prompt extends it: the new request takes it over.
                    cached.session
                } else {
                    // Others may want the longer session: keep it, continue from a copy.
                    let mut fork = cached.session.fork();
                    fork.truncate(shared);
                    let last_used = self.tick();
                    self.cache.push(Cached {
                        session: cached.session,
                        last_used,
                    });
                    fork
                };
                self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .cache_reused_tokens
                    .fetch_add(shared as u64, Ordering::Relaxed);
                session
            }
            other => {
                if let Some((cached, _)) = other {
                    self.cache.push(cached);
                }
                self.metrics.cache_misses.fetch_add(1, Ordering::Relaxed);
                self.engine.new_session()
            }
        };
        session.reserve(job.positions);
        let cached_tokens = session.len();
        self.active.push(Slot {
            job,
            session,
            generator: None,
            cached_tokens,
            sent: 0,
            counted: 0,
        });
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A session done with goes to the cache (its unused reservation freed); the cache then
    /// shrinks to the budget.
    fn keep(&mut self, mut session: Session) {
        if session.is_empty() {
            return;
        }
        session.shrink_to_fit();
        let last_used = self.tick();
        self.cache.push(Cached { session, last_used });
        while self.kv_bytes() > self.config.budget {
            let Some(oldest) = self.oldest_cached() else {
                break;
            };
            self.cache.swap_remove(oldest);
        }
    }

    /// One forward pass: the next token of every reply and a chunk of every prompt being
    /// prefilled (up to the chunk budget, first come first served).
    fn step(&mut self) {
        let mut chunk = self.config.prefill_chunk;
        let mut replies = Vec::new();
        let mut prefills = Vec::new();
        let mut prefilling = Vec::new();
        let mut tokens = 0;
        for (i, slot) in self.active.iter_mut().enumerate() {
            let Slot {
                job,
                session,
                generator,
                ..
            } = slot;
            match generator {
                Some(generator) => {
                    tokens += 1;
                    replies.push((i, Reply { session, generator }));
                }
                None if chunk > 0 => {
                    let at = session.len();
                    let end = (at + chunk).min(job.prompt.len());
                    chunk -= end - at;
                    tokens += end - at;
                    let last = end == job.prompt.len();
                    prefilling.push((i, last));
                    let want = match (&job.work, last) {
                        (Work::Generate { .. }, true) => LogitsFor::Last,
                        _ => LogitsFor::None,
                    };
                    prefills.push(Append {
                        session,
                        tokens: &job.prompt[at..end],
                        want,
                    });
                }
                None => {}
            }
        }
        if replies.is_empty() && prefills.is_empty() {
            return;
        }
        let (who, mut replies): (Vec<usize>, Vec<Reply>) = replies.into_iter().unzip();
        let result = step_batch(&mut self.scratch, &mut replies, &mut prefills);
        drop(replies);
        drop(prefills);
        self.metrics.batch_steps.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .batched_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        let results = match result {
            Ok(results) => results,
            Err(e) => {
                // A forward that failed as a whole: everyone in it stops with the reason.
                let mut involved = who.clone();
                involved.extend(prefilling.iter().map(|&(i, _)| i));
                self.finish_failed(involved, &e.to_string());
                return;
            }
        };
        let mut finished = Vec::new();
        for (i, result) in who.into_iter().zip(results) {
            let slot = &mut self.active[i];
            match result {
                Ok(piece) => {
                    if send_delta(slot, piece.unwrap_or_default(), &self.metrics).is_err() {
                        continue; // the client is gone: dropped before the next step
                    }
                    let generator = slot.generator.as_ref().expect("a reply has a generator");
                    if piece_done(generator) {
                        finished.push(i);
                    }
                }
                Err(e) => {
                    let _ = slot.job.events.send(Event::Failed(e.to_string()));
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    slot.generator.as_mut().map(Generator::cancel);
                    finished.push(i);
                }
            }
        }
        for (i, last) in prefilling {
            if !last {
                continue;
            }
            let slot = &mut self.active[i];
            match &slot.job.work {
                Work::Generate { options, logprobs } => {
                    // Options were validated by the handler.
                    match Generator::new(options) {
                        Ok(mut generator) => {
                            generator.set_logprobs(*logprobs);
                            slot.generator = Some(generator);
                        }
                        Err(e) => {
                            let _ = slot.job.events.send(Event::Failed(e.to_string()));
                            finished.push(i);
                        }
                    }
                }
                Work::Compose => {
                    let _ = slot.job.events.send(Event::Composed {
                        reused: slot.cached_tokens,
                        prefilled: slot.session.len() - slot.cached_tokens,
                    });
                    finished.push(i);
                }
            }
        }
        self.finish(finished);
    }

    /// Ends the replies at `indices`: their Done event (usage, finish reason) and their
    /// sessions into the cache.
    fn finish(&mut self, mut indices: Vec<usize>) {
        indices.sort_unstable();
        indices.dedup();
        for &i in indices.iter().rev() {
            let slot = self.active.swap_remove(i);
            if let Some(generator) = slot.generator {
                let stop = generator.stop_reason();
                let completion_tokens = generator.tokens().len();
                if let Some(stop) = stop.filter(|&s| s != StopReason::Cancelled) {
                    let usage = Usage {
                        prompt_tokens: slot.job.prompt.len(),
                        cached_tokens: slot.cached_tokens,
                        completion_tokens,
                    };
                    let _ = slot.job.events.send(Event::Done { stop, usage });
                }
            }
            self.keep(slot.session);
        }
    }

    fn finish_failed(&mut self, mut indices: Vec<usize>, why: &str) {
        indices.sort_unstable();
        indices.dedup();
        for &i in indices.iter().rev() {
            let slot = self.active.swap_remove(i);
            let _ = slot.job.events.send(Event::Failed(why.to_string()));
            self.metrics.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sends a step's text and the log-probabilities of its new tokens; counts the tokens.
fn send_delta(slot: &mut Slot, text: String, metrics: &Metrics) -> Result<(), ()> {
    let generator = slot.generator.as_ref().expect("a reply has a generator");
    let logprobs = generator.logprobs()[slot.sent..].to_vec();
    slot.sent += logprobs.len();
    let tokens = generator.tokens().len();
    metrics
        .generated_tokens
        .fetch_add((tokens - slot.counted) as u64, Ordering::Relaxed);
    slot.counted = tokens;
    if text.is_empty() && logprobs.is_empty() {
        return Ok(());
    }
    slot.job
        .events
        .send(Event::Delta { text, logprobs })
        .map_err(|_| ())
}

/// A reply whose generator has stopped has returned all its text (core drains it in the step
/// that stops).
fn piece_done(generator: &Generator) -> bool {
    generator.stop_reason().is_some()
}

fn fail_timed_out(job: &Job, now: Instant) {
    if now > job.deadline {
        let _ = job
            .events
            .send(Event::Failed("the request timed out".to_string()));
    }
}
