//! The one generation loop. [`prefill`] brings a [`Session`] to a prompt (keeping the cache's
//! common prefix); then each [`Generator::step`] is logits -> sampler -> token -> stop check ->
//! streamed text piece. The CLI (`run`, `chat`), [`crate::chat_session::ChatSession`] (and
//! through it the browser) drive it, and so will the speculative decoder and the HTTP server.
//! The generator owns no cache: it borrows the session at every step, so a caller without
//! threads (the browser worker) can stop or yield between tokens.

use serde::{Deserialize, Serialize};

use crate::sampler::{Sampler, SamplerConfig};
use crate::session::Session;
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
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampler: SamplerConfig::default(),
            max_tokens: DEFAULT_MAX_TOKENS,
            stop: Vec::new(),
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
    /// `min_p`, `repeat_penalty`, `repeat_last_n`, `seed`, `max_tokens`, `stop`); missing
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
        self.sampler.validate()
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

/// A reply being generated: the sampler, the stop rules and the text streamed so far.
#[derive(Debug, Clone)]
pub struct Generator {
    sampler: Sampler,
    max_tokens: usize,
    stop: Vec<String>,
    decoder: StreamDecoder,
    /// Text held back because it may be the start of a stop string.
    pending: String,
    text: String,
    tokens: Vec<u32>,
    end_token: Option<u32>,
    stop_reason: Option<StopReason>,
    /// Everything, including the held-back text, has been returned.
    drained: bool,
}

/// A finished reply.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// Sampled tokens appended to the session (the end token is not among them).
    pub tokens: Vec<u32>,
    /// The end-of-generation token that stopped it, if one did.
    pub end_token: Option<u32>,
    /// The text emitted (stop string excluded).
    pub text: String,
    pub stop: Option<StopReason>,
}

impl Generator {
    /// A generator with a fresh sampler seeded from the options.
    pub fn new(options: &GenerateOptions) -> Result<Generator> {
        options.validate()?;
        Ok(Self::with_sampler(
            Sampler::new(options.sampler.clone()),
            options.max_tokens,
            options.stop.clone(),
        ))
    }

    /// A generator that continues an existing sampler's random stream (a chat's next turn).
    pub fn with_sampler(sampler: Sampler, max_tokens: usize, stop: Vec<String>) -> Generator {
        Generator {
            sampler,
            max_tokens,
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            decoder: StreamDecoder::new(),
            pending: String::new(),
            text: String::new(),
            tokens: Vec::new(),
            end_token: None,
            stop_reason: None,
            drained: false,
        }
    }

    /// One step: samples the next token from the session's logits, appends it and returns the
    /// text it completes (possibly empty while a character or a possible stop string is
    /// pending). Returns None once the reply has ended and all its text has been returned.
    pub fn step(&mut self, session: &mut Session) -> Result<Option<String>> {
        if self.drained {
            return Ok(None);
        }
        if self.stop_reason.is_none() {
            if self.tokens.len() >= self.max_tokens {
                self.stop_reason = Some(StopReason::MaxTokens);
            } else if session.remaining() == 0 {
                self.stop_reason = Some(StopReason::ContextFull);
            }
        }
        if self.stop_reason.is_some() {
            return self.drain(session).map(Some);
        }
        let (logits, history) = session.logits_and_tokens()?;
        let id = self.sampler.sample(logits, history);
        if session.engine().is_end_of_generation(id) {
            self.stop_reason = Some(StopReason::EndOfGeneration);
            self.end_token = Some(id);
            return self.drain(session).map(Some);
        }
        session.append(&[id])?;
        self.tokens.push(id);
        let piece = self.decoder.push(session.engine().tokenizer(), id)?;
        Ok(Some(self.accept_text(&piece)))
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
