//! ChatSession: a conversation (system message + turns) over one [`Session`], each reply
//! produced by the one [`Generator`] one step at a time, so a caller without threads (the
//! browser worker) can stream and stop between tokens. Each turn re-renders the whole
//! conversation and keeps the common prefix of the KV cache; `sync_draft` prefills the user's
//! message while it is being typed. When the conversation outgrows the context, the oldest
//! turns after the system message are dropped and what remains is prefilled again.

use crate::chat::ChatMessage;
use crate::engine::Engine;
use crate::generate::{prefill, GenerateOptions, Generator, StopReason};
use crate::sampler::Sampler;
use crate::session::{draft_ends_safely, DraftSync, Session};
use crate::speculative::SpeculativeStats;
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
    /// Oldest turns (a user message and its reply each) dropped so the conversation fits the
    /// context with room for a reply; 0 almost always.
    pub dropped_turns: usize,
}

/// The assistant reply being generated.
#[derive(Debug)]
struct Turn {
    user: String,
    generator: Generator,
}

pub struct ChatSession {
    session: Session,
    system: Option<String>,
    /// Completed turns: user, assistant, user, assistant, ...
    messages: Vec<ChatMessage>,
    options: GenerateOptions,
    /// The sampler between turns (a turn's generator holds it while the turn runs), so the
    /// random stream goes on from turn to turn.
    sampler: Option<Sampler>,
    turn: Option<Turn>,
    /// The last ended turn's tokens, speculation figures and stop reason.
    last: (usize, SpeculativeStats, Option<StopReason>),
}

impl ChatSession {
    pub fn new(engine: &Engine) -> ChatSession {
        let options = GenerateOptions::default();
        ChatSession {
            session: engine.new_session(),
            system: None,
            messages: Vec::new(),
            sampler: Some(Sampler::new(options.sampler.clone())),
            options,
            turn: None,
            last: Default::default(),
        }
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// Sets the sampler, max tokens and stop strings (the random stream restarts from the
    /// seed). A turn in progress keeps the options it started with.
    pub fn set_options(&mut self, options: GenerateOptions) -> Result<()> {
        options.validate()?;
        self.sampler = Some(Sampler::new(options.sampler.clone()));
        self.options = options;
        Ok(())
    }

    pub fn options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Sets (or removes, with None or "") the system message; the conversation starts over.
    pub fn set_system(&mut self, system: Option<&str>) {
        self.system = system.filter(|s| !s.is_empty()).map(str::to_string);
        self.reset();
    }

    /// Forgets the turns (the cache is kept: the next turn reuses what still matches).
    pub fn reset(&mut self) {
        self.messages.clear();
        self.reset_turn();
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
        let mut history = self.conversation(DRAFT_SENTINEL);
        history.pop();
        sync_chat_draft(&mut self.session, &history, draft)
    }

    /// Starts a reply to `user`: renders the conversation, brings the cache to it (keeping the
    /// common prefix) and computes the first logits. Then call `next_token` until it returns
    /// None. If the conversation would leave no room for a reply, the oldest turns are dropped
    /// (reported in [`TurnStart::dropped_turns`]); a single message longer than the context
    /// is an error.
    pub fn begin_turn(&mut self, user: &str) -> Result<TurnStart> {
        if user.trim().is_empty() {
            return Err(Error::EmptyPrompt);
        }
        self.reset_turn();
        let engine = self.session.engine().clone();
        let context = engine.config().context_length;
        // Room for a reply: max_tokens, but never more than a quarter of the context, so a
        // large max_tokens does not throw away the conversation.
        let reserve = self.options.max_tokens.clamp(1, (context / 4).max(1));
        let mut dropped_turns = 0;
        let ids = loop {
            let ids = engine.encode_chat(&self.conversation(user), true)?;
            if ids.len() + reserve <= context || self.messages.is_empty() {
                break ids;
            }
            self.messages.drain(..2.min(self.messages.len()));
            dropped_turns += 1;
        };
        let start = prefill(&mut self.session, &ids)?;
        let sampler = self
            .sampler
            .take()
            .unwrap_or_else(|| Sampler::new(self.options.sampler.clone()));
        let mut generator =
            Generator::with_sampler(sampler, self.options.max_tokens, self.options.stop.clone());
        generator.set_speculative(&self.options.speculative);
        self.turn = Some(Turn {
            user: user.to_string(),
            generator,
        });
        Ok(TurnStart {
            prompt_tokens: start.prompt_tokens,
            reused: start.reused,
            prefilled: start.prefilled,
            dropped_turns,
        })
    }

    /// A turn that was begun and never ended is dropped (its sampler kept).
    fn reset_turn(&mut self) {
        if let Some(turn) = self.turn.take() {
            self.sampler = Some(turn.generator.finish().1);
        }
    }

    /// One step of the reply: the text it completes (may be empty while a character or a
    /// possible stop string is pending), or None once the reply has ended (end-of-generation
    /// token, stop string, `max_tokens`, full context).
    pub fn next_token(&mut self) -> Result<Option<String>> {
        let Some(turn) = self.turn.as_mut() else {
            return Err(Error::InvalidArgument("no turn in progress".into()));
        };
        turn.generator.step(&mut self.session)
    }

    /// Ends the reply being generated (the user pressed Stop); `end_turn` still records it.
    pub fn cancel(&mut self) {
        if let Some(turn) = self.turn.as_mut() {
            turn.generator.cancel();
        }
    }

    /// Tokens sampled in the current (or last) turn.
    pub fn turn_tokens(&self) -> usize {
        self.turn
            .as_ref()
            .map_or(self.last.0, |t| t.generator.tokens().len())
    }

    /// What speculation did in the current (or last) turn.
    pub fn turn_stats(&self) -> SpeculativeStats {
        self.turn
            .as_ref()
            .map_or(self.last.1, |t| t.generator.stats())
    }

    /// Why the current turn stopped, if it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        match &self.turn {
            Some(t) => t.generator.stop_reason(),
            None => self.last.2,
        }
    }

    /// Records the turn (user message and the reply as streamed so far, also when stopped
    /// early) and returns the reply's text.
    pub fn end_turn(&mut self) -> Result<String> {
        let Some(turn) = self.turn.take() else {
            return Err(Error::InvalidArgument("no turn in progress".into()));
        };
        let (reply, sampler) = turn.generator.finish();
        self.sampler = Some(sampler);
        self.last = (reply.tokens.len(), reply.stats, reply.stop);
        self.messages.push(ChatMessage::new("user", turn.user));
        self.messages
            .push(ChatMessage::new("assistant", reply.text.as_str()));
        Ok(reply.text)
    }
}

/// Compose-while-typing for any conversation: prefills `session` with `history` rendered by
/// the model's template followed by `draft` as the next user message (the cache keeps what
/// still matches). [`ChatSession::sync_draft`] calls it with its own turns; a front end that
/// sends the whole conversation each time (the npm package's OpenAI-shaped API) calls it
/// directly. Only a cache warm-up: the turn that follows re-encodes the final text.
pub fn sync_chat_draft(
    session: &mut Session,
    history: &[ChatMessage],
    draft: &str,
) -> Result<DraftSync> {
    let engine = session.engine().clone();
    let Some(anchor) = draft_anchor(&engine, history)? else {
        return Ok(DraftSync {
            reused: 0,
            prefilled: 0,
        });
    };
    let kept = session.sync_tokens(&anchor)?;
    let draft = session.sync_draft(anchor.len(), draft)?;
    Ok(DraftSync {
        reused: kept.min(anchor.len()) + draft.reused,
        prefilled: (anchor.len() - kept) + draft.prefilled,
    })
}

/// The tokens [`sync_chat_draft`] leaves in a session, for a caller that prefills them its own
/// way (a server, in its batch): `history` up to the next user message's text, then `draft`
/// as [`Session::sync_draft`] encodes it. None when nothing is safe to prefill.
pub fn chat_draft_tokens(
    engine: &Engine,
    history: &[ChatMessage],
    draft: &str,
) -> Result<Option<Vec<u32>>> {
    let Some(mut tokens) = draft_anchor(engine, history)? else {
        return Ok(None);
    };
    let mut ids = engine.tokenizer().encode(draft)?;
    if !draft_ends_safely(draft) {
        ids.pop();
    }
    tokens.extend(ids);
    tokens.truncate(engine.config().context_length);
    Ok(Some(tokens))
}

/// `history` rendered up to where the next user message's text begins, as tokens; None when
/// the template rewrites user text or the history alone fills the context.
fn draft_anchor(engine: &Engine, history: &[ChatMessage]) -> Result<Option<Vec<u32>>> {
    let mut conversation = history.to_vec();
    conversation.push(ChatMessage::new("user", DRAFT_SENTINEL));
    let rendered = engine.render_chat(&conversation, true)?;
    let Some(at) = rendered.rfind(DRAFT_SENTINEL) else {
        // The template rewrites user text: nothing safe to prefill.
        return Ok(None);
    };
    let anchor = engine.tokenizer().encode(&rendered[..at])?;
    if anchor.len() >= engine.config().context_length {
        // The next turn drops old turns anyway; nothing worth prefilling now.
        return Ok(None);
    }
    Ok(Some(anchor))
}
