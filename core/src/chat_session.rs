//! ChatSession: a conversation (system message + turns) over one [`Session`], driven one token
//! at a time so a caller without threads (the browser worker) can stream and stop between
//! tokens. Each turn re-renders the whole conversation and keeps the common prefix of the KV
//! cache; `sync_draft` prefills the user's message while it is being typed.

use crate::chat::ChatMessage;
use crate::engine::Engine;
use crate::sampler::{Sampler, SamplerConfig};
use crate::session::{DraftSync, Session, StopReason};
use crate::tokenizer::StreamDecoder;
use crate::{Error, Result};

/// Stands for the draft in a rendered conversation, so the text before it (the anchor) can be
/// cut out whatever the template writes around a user message. Private-use characters: no
/// template emits them and a user cannot type them by accident.
const DRAFT_SENTINEL: &str = "\u{E000}inferno-draft\u{E001}";

/// What `begin_turn` did to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnStart {
    /// Tokens of the whole rendered conversation (with the assistant header).
    pub prompt_tokens: usize,
    /// Of those, tokens already in the cache (previous turns, or a prefilled draft).
    pub reused: usize,
    /// Tokens run through the model now.
    pub prefilled: usize,
}

/// The assistant reply being generated.
#[derive(Debug, Default)]
struct Turn {
    user: String,
    decoder: StreamDecoder,
    /// Text held back because it may be the start of a stop string.
    pending: String,
    text: String,
    tokens: usize,
    stop: Option<StopReason>,
    /// Everything, including the held-back text, has been returned.
    drained: bool,
}

pub struct ChatSession {
    session: Session,
    system: Option<String>,
    /// Completed turns: user, assistant, user, assistant, ...
    messages: Vec<ChatMessage>,
    sampler: Sampler,
    pub max_tokens: usize,
    /// Strings that end a reply (not emitted).
    pub stop: Vec<String>,
    turn: Option<Turn>,
}

impl ChatSession {
    pub fn new(engine: &Engine) -> ChatSession {
        ChatSession {
            session: engine.new_session(),
            system: None,
            messages: Vec::new(),
            sampler: Sampler::new(SamplerConfig::default()),
            max_tokens: 512,
            stop: Vec::new(),
            turn: None,
        }
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// Replaces the sampler (and restarts its random stream from the config's seed).
    pub fn set_sampler(&mut self, config: SamplerConfig) -> Result<()> {
        config.validate()?;
        self.sampler = Sampler::new(config);
        Ok(())
    }

    pub fn sampler_config(&self) -> &SamplerConfig {
        &self.sampler.config
    }

    /// Sets (or removes, with None or "") the system message; the conversation starts over.
    pub fn set_system(&mut self, system: Option<&str>) {
        self.system = system.filter(|s| !s.is_empty()).map(str::to_string);
        self.reset();
    }

    /// Forgets the turns (the cache is kept: the next turn reuses what still matches).
    pub fn reset(&mut self) {
        self.messages.clear();
        self.turn = None;
    }

    /// The conversation so far with `user` as the next user message.
    fn conversation(&self, user: &str) -> Vec<ChatMessage> {
        let mut all = Vec::with_capacity(self.messages.len() + 2);
        if let Some(s) = &self.system {
            all.push(ChatMessage::new("system", s.as_str()));
        }
        all.extend(self.messages.iter().cloned());
        all.push(ChatMessage::new("user", user));
        all
    }

    /// Compose-while-typing: prefills the conversation up to the user's message (the anchor),
    /// then the draft. Only a cache warm-up: `begin_turn` re-encodes the final text and keeps
    /// whatever matches, so a draft tokenized differently at its edges costs time, not bits.
    pub fn sync_draft(&mut self, draft: &str) -> Result<DraftSync> {
        if self.turn.is_some() {
            return Err(Error::InvalidArgument(
                "a reply is being generated: end the turn before syncing a draft".into(),
            ));
        }
        let engine = self.session.engine().clone();
        let rendered = engine.render_chat(&self.conversation(DRAFT_SENTINEL), true)?;
        let Some(at) = rendered.rfind(DRAFT_SENTINEL) else {
            // The template rewrites user text: nothing safe to prefill.
            return Ok(DraftSync {
                reused: 0,
                prefilled: 0,
            });
        };
        let anchor = engine.tokenizer().encode(&rendered[..at])?;
        if anchor.len() >= engine.config().context_length {
            return Err(Error::ContextOverflow {
                needed: anchor.len() + 1,
                context: engine.config().context_length,
            });
        }
        let kept = self.session.sync_tokens(&anchor)?;
        let draft = self.session.sync_draft(anchor.len(), draft)?;
        Ok(DraftSync {
            reused: kept.min(anchor.len()) + draft.reused,
            prefilled: (anchor.len() - kept) + draft.prefilled,
        })
    }

    /// Starts a reply to `user`: renders the conversation, brings the cache to it (keeping the
    /// common prefix) and computes the first logits. Then call `next_token` until it returns None.
    pub fn begin_turn(&mut self, user: &str) -> Result<TurnStart> {
        if user.trim().is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let engine = self.session.engine().clone();
        let ids = engine.encode_chat(&self.conversation(user), true)?;
        let context = engine.config().context_length;
        if ids.len() >= context {
            return Err(Error::ContextOverflow {
                needed: ids.len() + 1,
                context,
            });
        }
        self.turn = None;
        let reused = self.session.sync_tokens(&ids)?;
        let recompute_last = reused == ids.len();
        self.session.logits()?;
        self.turn = Some(Turn {
            user: user.to_string(),
            ..Turn::default()
        });
        Ok(TurnStart {
            prompt_tokens: ids.len(),
            reused: reused - usize::from(recompute_last),
            prefilled: ids.len() - reused + usize::from(recompute_last),
        })
    }

    /// Samples and appends one token; returns the text it completes (may be empty while a
    /// character or a possible stop string is pending), or None once the reply has ended
    /// (end-of-generation token, stop string, `max_tokens`, full context).
    pub fn next_token(&mut self) -> Result<Option<String>> {
        let Some(turn) = self.turn.as_mut() else {
            return Err(Error::InvalidArgument("no turn in progress".into()));
        };
        if turn.drained {
            return Ok(None);
        }
        if turn.stop.is_none() {
            if turn.tokens >= self.max_tokens {
                turn.stop = Some(StopReason::MaxTokens);
            } else if self.session.remaining() == 0 {
                turn.stop = Some(StopReason::ContextFull);
            }
        }
        let engine = self.session.engine().clone();
        let tokenizer = engine.tokenizer();
        if turn.stop.is_some() {
            // Flush what the decoder and the stop-string hold back, then end.
            let rest = turn.decoder.flush(tokenizer)?;
            turn.pending.push_str(&rest);
            let out = std::mem::take(&mut turn.pending);
            turn.text.push_str(&out);
            turn.drained = true;
            return Ok((!out.is_empty()).then_some(out));
        }
        let logits = self.session.logits()?.to_vec();
        let id = self.sampler.sample(&logits, self.session.tokens());
        if engine.is_end_of_generation(id) {
            turn.stop = Some(StopReason::EndOfGeneration);
            return Ok(Some(String::new()));
        }
        self.session.append(&[id])?;
        turn.tokens += 1;
        let piece = turn.decoder.push(tokenizer, id)?;
        turn.pending.push_str(&piece);
        if let Some(at) = self
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| turn.pending.find(s.as_str()))
            .min()
        {
            turn.pending.truncate(at);
            let out = std::mem::take(&mut turn.pending);
            turn.text.push_str(&out);
            turn.stop = Some(StopReason::StopString);
            turn.drained = true;
            return Ok(Some(out));
        }
        let ready = turn.pending.len() - crate::session::stop_prefix_len(&turn.pending, &self.stop);
        let out: String = turn.pending.drain(..ready).collect();
        turn.text.push_str(&out);
        Ok(Some(out))
    }

    /// Tokens sampled in the current (or last) turn.
    pub fn turn_tokens(&self) -> usize {
        self.turn.as_ref().map_or(0, |t| t.tokens)
    }

    /// Why the current turn stopped, if it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.turn.as_ref().and_then(|t| t.stop)
    }

    /// Records the turn (user message and the reply so far, also when stopped early) and
    /// returns the reply's text.
    pub fn end_turn(&mut self) -> Result<String> {
        let Some(mut turn) = self.turn.take() else {
            return Err(Error::InvalidArgument("no turn in progress".into()));
        };
        if !turn.drained {
            let rest = turn.decoder.flush(self.session.engine().tokenizer())?;
            turn.text.push_str(&turn.pending);
            turn.text.push_str(&rest);
        }
        self.messages.push(ChatMessage::new("user", turn.user));
        self.messages
            .push(ChatMessage::new("assistant", turn.text.as_str()));
        Ok(turn.text)
    }
}
