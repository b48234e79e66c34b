//! Session: one sequence's tokens and KV cache. `append` runs a batched forward, `truncate`
//! drops positions, `fork` copies, `sync_draft` prefills a message while it is being typed.
//! Because of the reduction contract, any sequence of these operations leaves the same logits
//! as one forward over the final tokens.

use crate::engine::Engine;
use crate::model::{KvCache, LogitsFor, Scratch, Sequence};
use crate::{Error, Result};

/// Tokens per forward pass of a long prefill ([`Session::prefill`], [`Session::append`]).
pub const PREFILL_CHUNK: usize = 512;

#[derive(Clone)]
pub struct Session {
    engine: Engine,
    tokens: Vec<u32>,
    cache: KvCache,
    /// The forward pass's work buffers, reused by every append.
    scratch: Scratch,
    /// Logits after the last token, if computed since the last change.
    last_logits: Option<Vec<f32>>,
}

/// What `sync_draft` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftSync {
    /// Tokens kept from before (after the anchor).
    pub reused: usize,
    /// Tokens newly prefilled.
    pub prefilled: usize,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl Engine {
    /// A new, empty session on this engine.
    pub fn new_session(&self) -> Session {
        Session::new(self)
    }
}

impl Session {
    pub fn new(engine: &Engine) -> Session {
        Session {
            engine: engine.clone(),
            tokens: Vec::new(),
            cache: KvCache::new(engine.config(), engine.weights().dtype),
            scratch: Scratch::default(),
            last_logits: None,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Positions left before the context is full.
    pub fn remaining(&self) -> usize {
        self.engine
            .config()
            .context_length
            .saturating_sub(self.tokens.len())
    }

    /// Bytes held by the KV cache.
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes_used()
    }

    /// Bytes the KV cache has allocated (used or reserved).
    pub fn cache_bytes_held(&self) -> usize {
        self.cache.bytes_held()
    }

    /// KV cache bytes per position of this model.
    pub fn cache_bytes_per_position(&self) -> usize {
        let c = self.engine.config();
        let element = match self.engine.weights().dtype {
            crate::model::WeightDtype::AsStored => 2,
            crate::model::WeightDtype::F32 => 4,
        };
        c.n_layers * 2 * c.kv_dim() * element
    }

    /// Allocates the KV cache for `positions` positions now (never past the context).
    pub fn reserve(&mut self, positions: usize) {
        let c = self.engine.config();
        let positions = positions.min(c.context_length);
        self.cache.reserve(positions);
    }

    /// Frees the KV cache's memory past the positions in use (and the work buffers).
    pub fn shrink_to_fit(&mut self) {
        self.cache.shrink_to_fit();
        self.scratch = Scratch::default();
    }

    /// Runs the model over `tokens` (one batched forward) and keeps the logits of the last.
    pub fn append(&mut self, tokens: &[u32]) -> Result<()> {
        self.run(tokens, LogitsFor::Last)
    }

    /// Like [`Session::append`], but returns the logits of every new position
    /// (`tokens.len() * vocab_size`), e.g. for perplexity or speculative verification.
    pub fn append_all_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.forward(tokens, LogitsFor::All)
    }

    /// Like [`Session::append_all_logits`] without a copy: the logits of every new position
    /// (`tokens.len() * vocab_size`, borrowed from the work buffers) and all tokens so far.
    /// What speculative verification reads.
    pub fn append_scored(&mut self, tokens: &[u32]) -> Result<(&[f32], &[u32])> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("append_scored of no tokens".into()));
        }
        self.run(tokens, LogitsFor::All)?;
        Ok((self.scratch.logits(), &self.tokens))
    }

    /// Prefills without computing logits (they are computed on demand by [`Session::logits`]).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<()> {
        self.run(tokens, LogitsFor::None)
    }

    fn forward(&mut self, tokens: &[u32], want: LogitsFor) -> Result<Vec<f32>> {
        self.run(tokens, want)?;
        Ok(match want {
            LogitsFor::All => self.scratch.logits().to_vec(),
            _ => Vec::new(),
        })
    }

    /// Prefills again the tokens whose positions the cache no longer holds (after a
    /// truncation past what a windowed layer kept, see [`Session::truncate`]), a chunk at a
    /// time.
    fn catch_up(&mut self) -> Result<()> {
        while self.cache.len < self.tokens.len() {
            let held = self.cache.len;
            let end = self.tokens.len().min(held + PREFILL_CHUNK);
            let e = &self.engine;
            let result = e.weights().forward(
                e.compute(),
                &mut self.cache,
                &mut self.scratch,
                &self.tokens[held..end],
                LogitsFor::None,
            );
            if let Err(err) = result {
                let _ = self.cache.truncate(held);
                return Err(err);
            }
        }
        Ok(())
    }

    /// Runs `tokens` through the model; the logits stay in the scratch (the last position's
    /// are kept). A long prefill that wants at most the last logits goes [`PREFILL_CHUNK`]
    /// tokens per forward: the same bits (batched == token by token), work buffers sized by
    /// the chunk rather than the prompt, and windowed layers' caches trimmed between chunks.
    fn run(&mut self, tokens: &[u32], want: LogitsFor) -> Result<()> {
        if want == LogitsFor::All || tokens.len() <= PREFILL_CHUNK {
            return self.run_one(tokens, want);
        }
        // Checked before the first chunk, so a bad prompt leaves the session as it was.
        let c = self.engine.config();
        if self.tokens.len() + tokens.len() > c.context_length {
            return Err(Error::ContextOverflow {
                needed: self.tokens.len() + tokens.len(),
                context: c.context_length,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::InvalidToken {
                id: bad,
                vocab_size: c.vocab_size,
            });
        }
        let (head, last) = tokens.split_at(tokens.len() - (tokens.len() - 1) % PREFILL_CHUNK - 1);
        for chunk in head.chunks(PREFILL_CHUNK) {
            self.run_one(chunk, LogitsFor::None)?;
        }
        self.run_one(last, want)
    }

    /// One forward pass over `tokens`.
    fn run_one(&mut self, tokens: &[u32], want: LogitsFor) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        self.catch_up()?;
        let e = &self.engine;
        let result = e.weights().forward(
            e.compute(),
            &mut self.cache,
            &mut self.scratch,
            tokens,
            want,
        );
        match result {
            Ok(logits) => {
                let vocab = e.config().vocab_size;
                let last = (want != LogitsFor::None).then(|| &logits[logits.len() - vocab..]);
                Self::absorb(&mut self.tokens, &mut self.last_logits, tokens, last);
                Ok(())
            }
            Err(err) => {
                // A failed forward may have written part of the cache: drop what is not ours
                // (never past what the windowed layers keep: nothing of ours was dropped).
                let _ = self.cache.truncate(self.tokens.len());
                Err(err)
            }
        }
    }

    /// Takes a finished forward's tokens and the logits after its last one (if it kept them).
    /// Fields, not `&mut self`: the logits still borrow the scratch.
    fn absorb(
        session_tokens: &mut Vec<u32>,
        kept: &mut Option<Vec<f32>>,
        tokens: &[u32],
        last_logits: Option<&[f32]>,
    ) {
        session_tokens.extend_from_slice(tokens);
        match last_logits {
            None => *kept = None,
            Some(last) => {
                // The buffer is reused from step to step: no allocation per decoded token.
                let kept = kept.get_or_insert_with(Vec::new);
                kept.clear();
                kept.extend_from_slice(last);
            }
        }
    }

    /// The logits after the last token (recomputing the last position if they were dropped).
    pub fn logits(&mut self) -> Result<&[f32]> {
        if self.last_logits.is_none() {
            let Some(&last) = self.tokens.last() else {
                return Err(Error::EmptyPrompt);
            };
            self.truncate(self.tokens.len() - 1);
            self.append(&[last])?;
        }
        Ok(self.last_logits.as_deref().unwrap_or_default())
    }

    /// The logits after the last token and the tokens so far (what a sampler reads).
    pub fn logits_and_tokens(&mut self) -> Result<(&[f32], &[u32])> {
        self.logits()?;
        Ok((
            self.last_logits.as_deref().unwrap_or_default(),
            &self.tokens,
        ))
    }

    /// Drops every position >= n. A length change: nothing is copied or recomputed, unless a
    /// windowed layer (Mistral, Gemma 3) has already let go of positions the next token would
    /// see, which only happens going back more than the window: then the next append prefills
    /// the first n tokens again (the same bits as when they were first prefilled).
    pub fn truncate(&mut self, n: usize) {
        if n < self.tokens.len() {
            self.tokens.truncate(n);
            let _ = self.cache.truncate(n);
            self.last_logits = None;
        }
    }

    /// Positions the KV cache holds for layer `l` (a windowed layer keeps about 2 to 4 windows;
    /// the others every position).
    pub fn cache_positions_held(&self, l: usize) -> usize {
        self.cache.rows_held(l)
    }

    /// A copy of this session (e.g. a prefilled system prompt every conversation starts from).
    pub fn fork(&self) -> Session {
        self.clone()
    }

    /// Makes the session hold exactly `target`: keeps the longest common prefix, drops the
    /// rest and prefills what is new. Returns how many tokens were reused.
    pub fn sync_tokens(&mut self, target: &[u32]) -> Result<usize> {
        let common = common_prefix(&self.tokens, target);
        self.truncate(common);
        self.prefill(&target[common..])?;
        Ok(common)
    }

    /// Compose-while-typing: `text` is a draft that follows the first `anchor` tokens. The draft
    /// is re-tokenized, the longest matching prefix after the anchor is kept and the rest is
    /// prefilled. The last token is held back unless the text ends at a safe boundary
    /// (whitespace or punctuation), since more typing could still merge into it.
    pub fn sync_draft(&mut self, anchor: usize, text: &str) -> Result<DraftSync> {
        if anchor > self.tokens.len() {
            return Err(Error::InvalidArgument(format!(
                "draft anchor {anchor} is past the session's {} tokens",
                self.tokens.len()
            )));
        }
        let mut ids = self.engine.tokenizer().encode(text)?;
        if !draft_ends_safely(text) {
            ids.pop();
        }
        let room = self.remaining() + (self.tokens.len() - anchor);
        ids.truncate(room);
        let reused = common_prefix(&self.tokens[anchor..], &ids);
        self.truncate(anchor + reused);
        self.prefill(&ids[reused..])?;
        Ok(DraftSync {
            reused,
            prefilled: ids.len() - reused,
        })
    }
}

/// One session's part of [`append_batch`]: the tokens it appends and which logits it wants.
pub struct Append<'a> {
    pub session: &'a mut Session,
    pub tokens: &'a [u32],
    pub want: LogitsFor,
}

/// Appends to several sessions of one engine in a single forward pass (a server's
/// conversations: the weights are read once for all of them). Each session ends exactly as if
/// its part had run alone through [`Session::append`] (`Last`), [`Session::prefill`] (`None`) or
/// [`Session::append_scored`] (`All`), bit for bit (rule 7). Returns the logits asked for, part
/// after part ([`Sequence::logit_rows`] rows of `vocab_size` each), borrowed from `scratch`.
/// On an error no session changes.
pub fn append_batch<'s>(scratch: &'s mut Scratch, parts: &mut [Append<'_>]) -> Result<&'s [f32]> {
    let Some(engine) = parts.first().map(|p| p.session.engine.clone()) else {
        return Ok(&[]);
    };
    if let Some(p) = parts
        .iter()
        .find(|p| !std::ptr::eq(p.session.engine.weights(), engine.weights()))
    {
        return Err(Error::InvalidArgument(format!(
            "append_batch: a session of {} tokens is on another model",
            p.session.len()
        )));
    }
    for p in parts.iter_mut() {
        if !p.tokens.is_empty() {
            p.session.catch_up()?;
        }
    }
    let mut sequences: Vec<Sequence<'_>> = parts
        .iter_mut()
        .map(|p| Sequence {
            cache: &mut p.session.cache,
            tokens: p.tokens,
            want: p.want,
        })
        .collect();
    let rows: Vec<usize> = sequences.iter().map(Sequence::logit_rows).collect();
    let result = engine
        .weights()
        .forward_batch(engine.compute(), scratch, &mut sequences);
    drop(sequences);
    let logits = match result {
        Ok(logits) => logits,
        Err(err) => {
            // A failed forward may have grown a cache: drop what is not ours.
            for p in parts.iter_mut() {
                let len = p.session.tokens.len();
                let _ = p.session.cache.truncate(len);
            }
            return Err(err);
        }
    };
    let vocab = engine.config().vocab_size;
    let mut at = 0;
    for (p, rows) in parts.iter_mut().zip(rows) {
        if p.tokens.is_empty() {
            continue;
        }
        at += rows;
        let last = (p.want != LogitsFor::None).then(|| &logits[(at - 1) * vocab..at * vocab]);
        let s = &mut *p.session;
        Session::absorb(&mut s.tokens, &mut s.last_logits, p.tokens, last);
    }
    Ok(logits)
}

/// A draft ends at a safe boundary (whitespace or punctuation) when more typing cannot merge
/// into its last token; otherwise the last token is held back.
pub fn draft_ends_safely(text: &str) -> bool {
    text.chars()
        .last()
        .is_some_and(|c| c.is_whitespace() || c.is_ascii_punctuation())
}

/// Length of the longest common prefix of two token sequences.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
