//! The one generation loop. [`prefill`] brings a [`Session`] to a prompt (keeping the cache's
//! common prefix); then each [`Generator::step`] is logits -> sampler -> token -> stop check ->
//! streamed text piece. The CLI (`run`, `chat`), [`crate::chat_session::ChatSession`] (and
//! through it the browser) drive it, and so will the HTTP server. With speculation on, a step
//! verifies a draft from [`crate::speculative`] in the same forward and may yield several tokens.
//! The generator owns no cache: it borrows the session at every step, so a caller without
//! threads (the browser worker) can stop or yield between tokens.

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::model::{LogitsFor, Scratch};
use crate::sampler::{Sampler, SamplerConfig};
use crate::session::{append_batch, Append, Session};
use crate::speculative::{Gate, NgramIndex, SpeculativeOptions, SpeculativeStats};
use crate::tokenizer::StreamDecoder;
use crate::{Error, Result};

/// Most tokens a reply gets unless told otherwise (CLI, page, server).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// Everything that decides a reply besides the prompt: the sampler and when to stop. The one
/// home of the defaults that the CLI, the wasm binding and the page read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    #[serde(flatten)]
    pub sampler: SamplerConfig,
    /// Most tokens to generate (the end-of-generation token is not counted).
    pub max_tokens: usize,
    /// Strings that end the reply; the stop string itself is not emitted.
    pub stop: Vec<String>,
    /// Prompt-lookup speculation (same output either way; only speed differs).
    pub speculative: SpeculativeOptions,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampler: SamplerConfig::default(),
            max_tokens: DEFAULT_MAX_TOKENS,
            stop: Vec::new(),
            speculative: SpeculativeOptions::default(),
        }
    }
}

impl GenerateOptions {
    /// Greedy decoding (temperature 0) with the other defaults.
    pub fn greedy() -> Self {
        GenerateOptions {
            sampler: SamplerConfig::greedy(),
            ..Default::default()
        }
    }

    /// Options from a JSON object with the field names above (`temperature`, `top_k`, `top_p`,
    /// `min_p`, `repeat_penalty`, `repeat_last_n`, `seed`, `max_tokens`, `stop`, and
    /// `speculative` as `{"enabled", "draft_max", "ngram_min", "ngram_max"}`); missing
    /// fields take the defaults, unknown ones are an error.
    pub fn from_json(json: &str) -> Result<Self> {
        let bad = |e: String| Error::InvalidArgument(format!("generation options: {e}"));
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        let Some(object) = value.as_object() else {
            return Err(bad("expected a JSON object".into()));
        };
        // serde cannot deny unknown fields through `flatten`: the known ones are the defaults'.
        let known = serde_json::to_value(GenerateOptions::default()).expect("options serialize");
        if let Some(unknown) = object.keys().find(|k| known.get(k.as_str()).is_none()) {
            return Err(bad(format!("unknown field `{unknown}`")));
        }
        let options: GenerateOptions =
            serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        options.validate()?;
        Ok(options)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("options serialize")
    }

    pub fn validate(&self) -> Result<()> {
        self.sampler.validate()?;
        self.speculative.validate()
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StopReason {
    /// The model wrote an end-of-generation token (EOS, end of turn).
    EndOfGeneration,
    /// The text reached a stop string.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context window is full.
    ContextFull,
    /// The caller stopped it.
    Cancelled,
}

/// What [`prefill`] did to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefill {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Of those, tokens whose cache was already there.
    pub reused: usize,
    /// Tokens run through the model now (the last prompt token is run again when everything
    /// was cached, since its logits are needed).
    pub prefilled: usize,
}

/// Brings `session` to exactly `prompt` (keeping the longest common prefix of its cache) and
/// computes the logits after it, ready for the first [`Generator::step`].
pub fn prefill(session: &mut Session, prompt: &[u32]) -> Result<Prefill> {
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    let context = session.engine().config().context_length;
    if prompt.len() >= context {
        return Err(Error::ContextOverflow {
            needed: prompt.len() + 1,
            context,
        });
    }
    let reused = session.sync_tokens(prompt)?;
    let recompute_last = usize::from(reused == prompt.len());
    session.logits()?;
    Ok(Prefill {
        prompt_tokens: prompt.len(),
        reused: reused - recompute_last,
        prefilled: prompt.len() - reused + recompute_last,
    })
}

/// A reply being generated: the sampler, the stop rules, the speculative decoder's state and
/// the text streamed so far.
///
/// Each step runs one forward over the token sampled last (the *pending* token: emitted, not
/// yet in the cache) followed by any drafted tokens, then draws from the logits position by
/// position with the sampler plain decoding uses. A drafted token is kept while it equals the
/// draw; the first draw that differs (or the draw after the last drafted token) becomes the
/// next pending token, and the cache is cut back past the rejected ones. The draws, the
/// histories they see and the sampler's random stream are exactly those of plain decoding, so
/// the tokens are too (ARCHITECTURE.md section 6).
#[derive(Debug, Clone)]
pub struct Generator {
    sampler: Sampler,
    max_tokens: usize,
    stop: Vec<String>,
    speculative: SpeculativeOptions,
    /// The context's n-grams (built on the first step when speculation is on).
    index: Option<NgramIndex>,
    gate: Gate,
    stats: SpeculativeStats,
    /// Sampled and emitted, not yet run through the model.
    next: Option<u32>,
    /// The first step draws from the logits the prefill left in the session.
    started: bool,
    decoder: StreamDecoder,
    /// Text held back because it may be the start of a stop string.
    pending: String,
    text: String,
    tokens: Vec<u32>,
    end_token: Option<u32>,
    stop_reason: Option<StopReason>,
    /// Everything, including the held-back text, has been returned.
    drained: bool,
    /// Keep each sampled token's log-probability and this many alternatives (OpenAI's
    /// `logprobs` / `top_logprobs`).
    logprobs_top: Option<usize>,
    logprobs: Vec<TokenLogprob>,
}

/// A sampled token's log-probability under the model (log-softmax of the raw logits, before
/// temperature and penalties) and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// (token, log-probability), most likely first; ties by the lower id.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// Token `id`'s entry from one row of logits, with the `top` most likely tokens. Sums in
    /// f64 in index order, so the value is the same on every machine.
    pub fn of(logits: &[f32], id: u32, top: usize) -> TokenLogprob {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&x| libm::exp(f64::from(x - max))).sum();
        let log_sum = libm::log(sum);
        let logprob = |x: f32| (f64::from(x - max) - log_sum) as f32;
        let mut order: Vec<u32> = Vec::new();
        if top > 0 {
            order = (0..logits.len() as u32).collect();
            let key = |&i: &u32| (std::cmp::Reverse(OrdF32(logits[i as usize])), i);
            let k = top.min(order.len());
            if k < order.len() {
                order.select_nth_unstable_by_key(k - 1, key);
                order.truncate(k);
            }
            order.sort_by_key(key);
        }
        TokenLogprob {
            id,
            logprob: logprob(logits[id as usize]),
            top: order
                .into_iter()
                .map(|i| (i, logprob(logits[i as usize])))
                .collect(),
        }
    }
}

/// f32 ordered by `total_cmp` (NaN logits sort without a panic).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF32(f32);

impl Eq for OrdF32 {}

impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF32 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Where [`Generator::begin_step`] left a step.
enum Begin {
    /// Finished without a forward: the step's result.
    Done(Option<String>),
    /// These tokens must run through the model first.
    Forward(Vec<u32>),
}

/// One reply of [`step_batch`]: a generator and the session it extends.
pub struct Reply<'a> {
    pub session: &'a mut Session,
    pub generator: &'a mut Generator,
}

/// One step of several replies (and some prefill) in a single forward pass: what a server
/// runs for its conversations. Each reply's step gives exactly what [`Generator::step`] alone
/// would (rule 7: every row of the batch is computed as if its sequence ran alone), and each
/// prefill part ends as [`append_batch`] leaves it. Returns each reply's step result; the outer
/// error is a failed forward, after which no session has changed but the replies that were
/// in it cannot go on (cancel them).
pub fn step_batch(
    scratch: &mut Scratch,
    replies: &mut [Reply<'_>],
    prefills: &mut [Append<'_>],
) -> Result<Vec<Result<Option<String>>>> {
    let mut results: Vec<Option<Result<Option<String>>>> = Vec::with_capacity(replies.len());
    let mut batches: Vec<Option<Vec<u32>>> = Vec::with_capacity(replies.len());
    for r in replies.iter_mut() {
        match r.generator.begin_step(r.session) {
            Ok(Begin::Done(out)) => {
                results.push(Some(Ok(out)));
                batches.push(None);
            }
            Ok(Begin::Forward(batch)) => {
                results.push(None);
                batches.push(Some(batch));
            }
            Err(e) => {
                results.push(Some(Err(e)));
                batches.push(None);
            }
        }
    }
    let mut parts: Vec<Append<'_>> = Vec::new();
    let mut forwarded = Vec::new();
    for (i, (r, batch)) in replies.iter_mut().zip(&batches).enumerate() {
        if let Some(batch) = batch {
            forwarded.push(i);
            parts.push(Append {
                session: &mut *r.session,
                tokens: batch,
                want: LogitsFor::All,
            });
        }
    }
    for p in prefills.iter_mut() {
        parts.push(Append {
            session: &mut *p.session,
            tokens: p.tokens,
            want: p.want,
        });
    }
    let logits = append_batch(scratch, &mut parts)?;
    drop(parts);
    let mut row = 0;
    for &i in &forwarded {
        let batch = batches[i].as_deref().unwrap_or_default();
        let Reply { session, generator } = &mut replies[i];
        let engine = session.engine().clone();
        let vocab = engine.config().vocab_size;
        let rows = &logits[row * vocab..(row + batch.len()) * vocab];
        row += batch.len();
        let base = session.len() - batch.len();
        let result = generator
            .absorb(&engine, batch, rows, session.tokens())
            .and_then(|(text, in_cache)| {
                session.truncate(base + in_cache);
                generator.finish_step(text, session)
            });
        results[i] = Some(result);
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(Ok(None))).collect())
}

/// A finished reply.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// Sampled tokens (the end token is not among them). All are in the session's cache
    /// unless the reply was cancelled, when the last one may not be.
    pub tokens: Vec<u32>,
    /// The end-of-generation token that stopped it, if one did.
    pub end_token: Option<u32>,
    /// The text emitted (stop string excluded).
    pub text: String,
    pub stop: Option<StopReason>,
    pub stats: SpeculativeStats,
}

impl Generator {
    /// A generator with a fresh sampler seeded from the options.
    pub fn new(options: &GenerateOptions) -> Result<Generator> {
        options.validate()?;
        let mut g = Self::with_sampler(
            Sampler::new(options.sampler.clone()),
            options.max_tokens,
            options.stop.clone(),
        );
        g.set_speculative(&options.speculative);
        Ok(g)
    }

    /// A generator that continues an existing sampler's random stream (a chat's next turn),
    /// without speculation until [`Generator::set_speculative`].
    pub fn with_sampler(sampler: Sampler, max_tokens: usize, stop: Vec<String>) -> Generator {
        Generator {
            sampler,
            max_tokens,
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            speculative: SpeculativeOptions::off(),
            index: None,
            gate: Gate::default(),
            stats: SpeculativeStats::default(),
            next: None,
            started: false,
            decoder: StreamDecoder::new(),
            pending: String::new(),
            text: String::new(),
            tokens: Vec::new(),
            end_token: None,
            stop_reason: None,
            drained: false,
            logprobs_top: None,
            logprobs: Vec::new(),
        }
    }

    /// Turns speculation on or off (before the first step; later calls are ignored).
    pub fn set_speculative(&mut self, options: &SpeculativeOptions) {
        if !self.started {
            self.speculative = options.clone();
        }
    }

    /// One step: one forward (none on the first step, which draws from the prefill's logits)
    /// and the text of the one or more tokens it yields (possibly empty while a character or
    /// a possible stop string is pending). Returns None once the reply has ended and all its
    /// text has been returned.
    pub fn step(&mut self, session: &mut Session) -> Result<Option<String>> {
        let batch = match self.begin_step(session)? {
            Begin::Done(out) => return Ok(out),
            Begin::Forward(batch) => batch,
        };
        let base = session.len();
        let engine = session.engine().clone();
        let (logits, history) = session.append_scored(&batch)?;
        let (text, in_cache) = self.absorb(&engine, &batch, logits, history)?;
        session.truncate(base + in_cache);
        self.finish_step(text, session)
    }

    /// A step up to its forward: either done without one (the reply has ended, or the first
    /// step draws from the prefill's logits), or the tokens to run: the pending token and any
    /// drafted ones.
    fn begin_step(&mut self, session: &mut Session) -> Result<Begin> {
        if self.drained {
            return Ok(Begin::Done(None));
        }
        if self.stop_reason.is_some() {
            return self.drain(session).map(|t| Begin::Done(Some(t)));
        }
        if !self.started {
            self.started = true;
            if self.speculative.enabled {
                let mut index = NgramIndex::new(&self.speculative);
                index.extend(session.tokens());
                self.index = Some(index);
            }
            let engine = session.engine().clone();
            let context = engine.config().context_length;
            let (logits, history) = session.logits_and_tokens()?;
            let piece = match self.limit(history.len(), context) {
                Some(reason) => {
                    self.stop_reason = Some(reason);
                    String::new()
                }
                None => {
                    let id = self.draw(logits, history);
                    self.take(id, &engine)?
                }
            };
            return self.finish_step(piece, session).map(Begin::Done);
        }
        let Some(next) = self.next.take() else {
            // Unreachable: a started reply that has not stopped always has a pending token.
            self.stop_reason = Some(StopReason::Cancelled);
            return self.drain(session).map(|t| Begin::Done(Some(t)));
        };

        // [next, draft...]: the draft never outruns max_tokens or the context.
        let mut batch = vec![next];
        if let Some(index) = &self.index {
            let room =
                (self.max_tokens - self.tokens.len()).min(session.remaining().saturating_sub(1));
            let max = self.gate.draft_len(self.speculative.draft_max).min(room);
            if max > 0 && self.gate.open() {
                batch.extend_from_slice(index.draft(max));
            }
        }
        self.stats.forwards += 1;
        Ok(Begin::Forward(batch))
    }

    /// The draws after a step's forward: `logits` has a row after each token of `batch`, and
    /// `history` is the session's tokens with the batch appended. Returns the text and how
    /// many of the batch's positions stay in the cache.
    fn absorb(
        &mut self,
        engine: &Engine,
        batch: &[u32],
        logits: &[f32],
        history: &[u32],
    ) -> Result<(String, usize)> {
        let (vocab, context) = (engine.config().vocab_size, engine.config().context_length);
        let drafted = batch.len() - 1;
        let base = history.len() - batch.len();
        let mut text = String::new();
        let mut kept = 0; // drafted tokens accepted
        let mut in_cache = batch.len(); // positions of the batch to keep
        for j in 0..=drafted {
            // The logits after batch[j], seen with the history plain decoding would have.
            let history = &history[..base + 1 + j];
            if let Some(reason) = self.limit(history.len(), context) {
                self.stop_reason = Some(reason);
                in_cache = j + 1;
                break;
            }
            let id = self.draw(&logits[j * vocab..(j + 1) * vocab], history);
            let accepted = j < drafted && batch[j + 1] == id;
            text.push_str(&self.take(id, engine)?);
            if accepted && self.end_token.is_none() {
                // Already in the cache: not pending.
                self.next = None;
                kept += 1;
                if self.stop_reason.is_some() {
                    // A stop inside an accepted run: the reply ends at this token, which plain
                    // decoding would have appended.
                    in_cache = j + 2;
                    break;
                }
                continue;
            }
            in_cache = j + 1;
            break;
        }
        if drafted > 0 {
            self.stats.attempts += 1;
            self.stats.drafted += drafted;
            self.stats.accepted += kept;
            self.gate.record(drafted, kept, self.speculative.draft_max);
        }
        Ok((text, in_cache))
    }

    /// The sampler's draw from one row of logits, with its log-probability kept when asked.
    fn draw(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let id = self.sampler.sample(logits, history);
        if let Some(top) = self.logprobs_top {
            self.logprobs.push(TokenLogprob::of(logits, id, top));
        }
        id
    }

    /// Why the reply must stop before drawing the token after `len` tokens of context, as
    /// plain decoding checks it: max_tokens first, then a full context.
    fn limit(&self, len: usize, context: usize) -> Option<StopReason> {
        if self.tokens.len() >= self.max_tokens {
            Some(StopReason::MaxTokens)
        } else if len >= context {
            Some(StopReason::ContextFull)
        } else {
            None
        }
    }

    /// A drawn token: the end of the reply, or the next pending token and its text.
    fn take(&mut self, id: u32, engine: &Engine) -> Result<String> {
        if engine.is_end_of_generation(id) {
            // The end token is not part of the reply, nor is its log-probability.
            self.logprobs.truncate(self.tokens.len());
            self.stop_reason = Some(StopReason::EndOfGeneration);
            self.end_token = Some(id);
            self.next = None;
            return Ok(String::new());
        }
        self.tokens.push(id);
        self.stats.tokens += 1;
        if let Some(index) = &mut self.index {
            index.push(id);
        }
        self.next = Some(id);
        let piece = self.decoder.push(engine.tokenizer(), id)?;
        let shown = self.accept_text(&piece);
        if self.tokens.len() >= self.max_tokens && self.stop_reason.is_none() {
            self.stop_reason = Some(StopReason::MaxTokens);
        }
        Ok(shown)
    }

    /// After a step's draws: once the reply has stopped, the last token goes into the cache
    /// (as plain decoding leaves it) and the held-back text is flushed.
    fn finish_step(&mut self, mut text: String, session: &mut Session) -> Result<Option<String>> {
        if self.stop_reason.is_some() {
            if let Some(last) = self.next.take() {
                if session.remaining() > 0 {
                    self.stats.forwards += 1;
                    session.append(&[last])?;
                }
            }
            if !self.drained {
                text.push_str(&self.drain(session)?);
            }
        }
        Ok(Some(text))
    }

    /// Keeps each sampled token's log-probability and the `top` most likely tokens at its
    /// position ([`Generator::logprobs`]); before the first step.
    pub fn set_logprobs(&mut self, top: Option<usize>) {
        if !self.started {
            self.logprobs_top = top;
        }
    }

    /// One entry per sampled token (of [`Generator::tokens`]) when asked for.
    pub fn logprobs(&self) -> &[TokenLogprob] {
        &self.logprobs
    }

    /// What speculation did so far in this reply.
    pub fn stats(&self) -> SpeculativeStats {
        self.stats
    }

    /// Runs steps until the reply ends, calling `on_text` with every non-empty piece; when
    /// `on_text` returns false the reply is cancelled (what it was given stays the reply).
    pub fn run(
        &mut self,
        session: &mut Session,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<()> {
        while let Some(piece) = self.step(session)? {
            if !piece.is_empty() && !on_text(&piece) {
                self.cancel();
                break;
            }
        }
        Ok(())
    }

    /// Ends the reply now: nothing more is sampled, and text still held back is dropped.
    pub fn cancel(&mut self) {
        self.stop_reason.get_or_insert(StopReason::Cancelled);
        self.pending.clear();
        self.drained = true;
    }

    /// Tokens sampled so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Text returned so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Why the reply ended, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop_reason
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The reply, and the sampler (to continue its random stream in a later turn).
    pub fn finish(self) -> (Generated, Sampler) {
        let generated = Generated {
            tokens: self.tokens,
            end_token: self.end_token,
            text: self.text,
            stop: Some(self.stop_reason.unwrap_or(StopReason::Cancelled)),
            stats: self.stats,
        };
        (generated, self.sampler)
    }

    /// Adds a decoded piece; returns what can be shown now. A stop string ends the reply at
    /// the token that completes it; text that may still become a stop string is held back.
    fn accept_text(&mut self, piece: &str) -> String {
        self.pending.push_str(piece);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            self.pending.truncate(at);
            self.stop_reason = Some(StopReason::StopString);
            self.drained = true;
            return self.emit_pending(self.pending.len());
        }
        let ready = self.pending.len() - stop_prefix_len(&self.pending, &self.stop);
        self.emit_pending(ready)
    }

    /// The reply has stopped: flushes the decoder and the held-back text (a stop string can
    /// no longer complete) and returns it.
    fn drain(&mut self, session: &Session) -> Result<String> {
        let rest = self.decoder.flush(session.engine().tokenizer())?;
        self.pending.push_str(&rest);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            self.pending.truncate(at);
        }
        self.drained = true;
        Ok(self.emit_pending(self.pending.len()))
    }

    fn emit_pending(&mut self, n: usize) -> String {
        let out: String = self.pending.drain(..n).collect();
        self.text.push_str(&out);
        out
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of some stop string, so it is
/// held back until the next piece decides.
fn stop_prefix_len(text: &str, stop: &[String]) -> usize {
    let mut best = 0;
    for s in stop {
        for (i, _) in s.char_indices().skip(1) {
            if i > best && text.ends_with(&s[..i]) {
                best = i;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_prefix_len_holds_partial_stop_strings() {
        let stop = vec!["</s>".to_string(), "User:".to_string()];
        assert_eq!(stop_prefix_len("hello </", &stop), 2);
        assert_eq!(stop_prefix_len("hello Us", &stop), 2);
        assert_eq!(stop_prefix_len("hello", &stop), 0);
        assert_eq!(stop_prefix_len("x<", &stop), 1);
    }

    #[test]
    fn options_from_json_take_defaults_and_refuse_unknown_fields() {
        let o = GenerateOptions::from_json(r#"{"temperature": 0, "max_tokens": 7}"#).unwrap();
        assert_eq!(o.sampler.temperature, 0.0);
        assert_eq!(o.max_tokens, 7);
        assert_eq!(o.sampler.top_k, SamplerConfig::default().top_k);
        let e = GenerateOptions::from_json(r#"{"temprature": 0}"#).unwrap_err();
        assert!(e.to_string().contains("temprature"), "{e}");
        let e = GenerateOptions::from_json(r#"{"top_p": 0}"#).unwrap_err();
        assert!(e.to_string().contains("top-p"), "{e}");
        let round = GenerateOptions::from_json(&GenerateOptions::default().to_json()).unwrap();
        assert_eq!(round, GenerateOptions::default());
    }
}
