//! Prompt-lookup speculative decoding: guesses of the next few tokens taken from the context
//! itself, verified by the model in one batched forward. Text that repeats what came before
//! (code being edited, a list or table being continued, a quote) is guessed right often, and a
//! batched forward of k tokens costs little more than one, since the weights are read once.
//!
//! This module only drafts and decides when drafting is worth it; [`crate::generate::Generator`]
//! verifies. Because batched logits are bit-identical to token-by-token logits (ARCHITECTURE.md
//! section 4) and the generator draws from them position by position with the sampler plain
//! decoding would use, the output is the same with speculation on or off, greedy or seeded.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Longest n-gram the index can be asked for, and longest draft: bounds on what a caller can
/// make the index store or a forward hold.
pub const MAX_NGRAM: usize = 16;
pub const MAX_DRAFT: usize = 32;

/// Whether and how to speculate. Part of [`crate::generate::GenerateOptions`] as `speculative`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeculativeOptions {
    pub enabled: bool,
    /// Most tokens drafted per attempt.
    pub draft_max: usize,
    /// Shortest suffix of the context that is looked up; 2, so that one common word alone
    /// never triggers a guess.
    pub ngram_min: usize,
    /// Longest suffix looked up (longer matches are tried first: they predict better).
    pub ngram_max: usize,
}

impl Default for SpeculativeOptions {
    fn default() -> Self {
        SpeculativeOptions {
            enabled: true,
            draft_max: 4,
            ngram_min: 2,
            ngram_max: 4,
        }
    }
}

impl SpeculativeOptions {
    pub fn off() -> Self {
        SpeculativeOptions {
            enabled: false,
            ..Default::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("speculative decoding: {m}")));
        if !(1..=MAX_DRAFT).contains(&self.draft_max) {
            return bad(format!("draft-max must be in 1..={MAX_DRAFT}"));
        }
        if self.ngram_min < 1 || self.ngram_min > self.ngram_max || self.ngram_max > MAX_NGRAM {
            return bad(format!(
                "need 1 <= ngram-min <= ngram-max <= {MAX_NGRAM} (got {} and {})",
                self.ngram_min, self.ngram_max
            ));
        }
        Ok(())
    }
}

/// The context's n-grams, n in ngram_min..=ngram_max, each mapped to the position right after
/// its latest occurrence, updated as tokens arrive, so a lookup costs O(ngram_max) and never
/// rescans the context.
#[derive(Debug, Clone)]
pub struct NgramIndex {
    ngram_min: usize,
    ngram_max: usize,
    tokens: Vec<u32>,
    /// (n, hash of the n tokens) -> index of the token that followed them, latest occurrence.
    /// Hashes may collide: a hit is checked against the tokens before it is used.
    next: HashMap<(u8, u64), u32>,
}

impl NgramIndex {
    pub fn new(options: &SpeculativeOptions) -> NgramIndex {
        NgramIndex {
            ngram_min: options.ngram_min.max(1),
            ngram_max: options.ngram_max.clamp(options.ngram_min.max(1), MAX_NGRAM),
            tokens: Vec::new(),
            next: HashMap::new(),
        }
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Adds a token: the n-grams that end just before it now have a continuation (it).
    pub fn push(&mut self, token: u32) {
        let at = self.tokens.len();
        for n in self.ngram_min..=self.ngram_max.min(at) {
            let key = (n as u8, hash(&self.tokens[at - n..at]));
            self.next.insert(key, at as u32);
        }
        self.tokens.push(token);
    }

    pub fn extend(&mut self, tokens: &[u32]) {
        for &t in tokens {
            self.push(t);
        }
    }

    /// Up to `max` tokens that followed the latest earlier occurrence of the context's longest
    /// indexed suffix (empty when no suffix of ngram_min or more tokens occurred before).
    pub fn draft(&self, max: usize) -> &[u32] {
        let len = self.tokens.len();
        for n in (self.ngram_min..=self.ngram_max.min(len)).rev() {
            let suffix = &self.tokens[len - n..];
            let Some(&at) = self.next.get(&(n as u8, hash(suffix))) else {
                continue;
            };
            let at = at as usize;
            // The suffix's own occurrence is not indexed yet (nothing followed it), so `at`
            // is an earlier one; check it, hashes can collide.
            if at >= n && at < len && &self.tokens[at - n..at] == suffix {
                return &self.tokens[at..len.min(at + max)];
            }
        }
        &[]
    }
}

/// FNV-1a over the tokens' bytes: portable (the same on every target), and plenty for a table
/// whose hits are checked.
fn hash(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tokens {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Drafting costs a wider forward whose extra positions are wasted when guesses fail, so the
/// draft shortens after a rejection and lengthens after a full acceptance, and drafting
/// pauses when guesses have been failing: acceptance over the last [`Gate::WINDOW`] attempts
/// below [`Gate::THRESHOLD`] pauses it for [`Gate::FIRST_PAUSE`] steps, doubling on each
/// consecutive pause up to [`Gate::MAX_PAUSE`]. Deterministic: it only sees counts.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// (drafted, accepted) of the latest attempts, oldest first.
    window: std::collections::VecDeque<(usize, usize)>,
    /// Steps left in the current pause.
    paused: usize,
    /// Length of the last pause (0: the last judgement was good).
    last_pause: usize,
    /// Tokens the next draft may have (0: not set yet, draft_max).
    length: usize,
}

impl Gate {
    pub const WINDOW: usize = 10;
    /// Attempts seen before the window is judged at all.
    pub const MIN_ATTEMPTS: usize = 4;
    /// Tuned with `inferno bench --speculative` (SmolLM2-135M Q4_1, 2-vCPU AMD EPYC Zen 4, 5
    /// trials, 1 and 2 threads): at 0.3 / 0.2 / 0.1 the table workload ran 1.26/1.19x,
    /// 1.36/1.18x and 1.32/1.30x plain, prose 1.00/1.07x, 0.99/1.00x and 0.99/0.98x. 0.2 keeps
    /// prose level and most of the gain on partly predictable text; with short drafts for such
    /// text (see [`Gate::draft_len`]) a failed guess costs little.
    pub const THRESHOLD: f64 = 0.2;
    pub const FIRST_PAUSE: usize = 5;
    pub const MAX_PAUSE: usize = 80;

    /// Whether this step may draft; a step that may not counts down the pause.
    pub fn open(&mut self) -> bool {
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        true
    }

    /// How many tokens to draft now, at most `max`: a draft that was accepted whole lets the
    /// next one be 2 longer, any rejection makes it 1 shorter (transformers' heuristic for
    /// assisted generation). A rejected token costs a position of the batched forward, so
    /// text that is only partly predictable gets short drafts.
    pub fn draft_len(&self, max: usize) -> usize {
        if self.length == 0 {
            max
        } else {
            self.length.min(max)
        }
    }

    /// Records an attempt's outcome (`max`: the draft_max it was drafted under).
    pub fn record(&mut self, drafted: usize, accepted: usize, max: usize) {
        if drafted == 0 {
            return;
        }
        let length = self.draft_len(max);
        self.length = if accepted == drafted {
            (length + 2).min(max)
        } else {
            length.saturating_sub(1).max(1)
        };
        if self.window.len() == Self::WINDOW {
            self.window.pop_front();
        }
        self.window.push_back((drafted, accepted));
        if self.window.len() < Self::MIN_ATTEMPTS {
            return;
        }
        let (d, a) = self
            .window
            .iter()
            .fold((0, 0), |(d, a), &(dd, aa)| (d + dd, a + aa));
        if (a as f64) < Self::THRESHOLD * d as f64 {
            self.last_pause = if self.last_pause == 0 {
                Self::FIRST_PAUSE
            } else {
                (self.last_pause * 2).min(Self::MAX_PAUSE)
            };
            self.paused = self.last_pause;
            // After a pause the text may have changed character: judge it afresh.
            self.window.clear();
        } else {
            self.last_pause = 0;
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused > 0
    }
}

/// What speculation did during one reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpeculativeStats {
    /// Steps that drafted at least one token.
    pub attempts: usize,
    /// Tokens drafted, and of those accepted.
    pub drafted: usize,
    pub accepted: usize,
    /// Forward passes run while generating (the prompt's prefill not counted).
    pub forwards: usize,
    /// Tokens generated.
    pub tokens: usize,
}

impl SpeculativeStats {
    /// Accepted / drafted (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("stats serialize")
    }

    /// Tokens generated per forward pass (1 without speculation).
    pub fn tokens_per_forward(&self) -> f64 {
        if self.forwards == 0 {
            self.tokens as f64
        } else {
            self.tokens as f64 / self.forwards as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(tokens: &[u32], min: usize, max: usize) -> NgramIndex {
        let mut index = NgramIndex::new(&SpeculativeOptions {
            ngram_min: min,
            ngram_max: max,
            ..Default::default()
        });
        index.extend(tokens);
        index
    }

    #[test]
    fn draft_follows_latest_earlier_occurrence_of_longest_suffix() {
        // Only the 2-gram [2, 3] occurred before; its latest occurrence was followed by 7.
        let i = index(&[1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3], 2, 4);
        assert_eq!(i.draft(4), &[7, 8, 5, 2]);
        assert_eq!(i.draft(1), &[7]);
        // The 3-gram [1, 2, 3] wins over the 2-gram; its latest earlier occurrence ends at 8.
        let i = index(&[1, 2, 3, 9, 5, 1, 2, 3, 7, 1, 2, 3], 2, 4);
        assert_eq!(i.draft(2), &[7, 1]);
    }

    #[test]
    fn draft_needs_ngram_min_tokens_of_match() {
        let i = index(&[4, 5, 6, 4], 2, 4);
        assert_eq!(i.draft(4), &[] as &[u32]);
        let i = index(&[4, 5, 6, 4], 1, 4);
        assert_eq!(i.draft(4), &[5, 6, 4]);
        let i = index(&[7], 2, 4);
        assert_eq!(i.draft(4), &[] as &[u32]);
    }

    #[test]
    fn draft_of_a_run_of_one_token_continues_the_run() {
        let i = index(&[3, 3, 3, 3], 2, 2);
        assert_eq!(i.draft(4), &[3]);
    }

    #[test]
    fn gate_pauses_5_then_10_and_resets_after_a_good_window() {
        let mut g = Gate::default();
        for _ in 0..3 {
            assert!(g.open());
            g.record(4, 0, 4);
        }
        assert!(g.open());
        g.record(4, 0, 4);
        let closed = (0..20).take_while(|_| !g.open()).count();
        assert_eq!(closed, 5);
        for _ in 0..3 {
            g.record(4, 0, 4);
        }
        g.record(4, 1, 4);
        assert_eq!((0..100).take_while(|_| !g.open()).count(), 10);
        for _ in 0..4 {
            g.record(4, 4, 4);
        }
        assert!(g.open());
        for _ in 0..4 {
            g.record(4, 0, 4);
        }
        // Window now 4 good + 4 bad: 16/32 accepted, still open.
        assert!(!g.is_paused());
        for _ in 0..6 {
            g.record(4, 0, 4);
        }
        // The good attempts slide out of the window: the pause starts over at 5.
        assert_eq!((0..100).take_while(|_| !g.open()).count(), 5);
    }

    #[test]
    fn gate_pause_doubles_up_to_80() {
        let mut g = Gate::default();
        let mut pauses = Vec::new();
        for _ in 0..7 {
            for _ in 0..Gate::MIN_ATTEMPTS {
                g.record(2, 0, 4);
            }
            pauses.push((0..1000).take_while(|_| !g.open()).count());
        }
        assert_eq!(pauses, [5, 10, 20, 40, 80, 80, 80]);
    }

    #[test]
    fn draft_len_starts_at_max_grows_2_on_full_acceptance_shrinks_1_on_rejection() {
        let mut g = Gate::default();
        assert_eq!(g.draft_len(6), 6);
        g.record(6, 2, 6);
        assert_eq!(g.draft_len(6), 5);
        for _ in 0..10 {
            g.record(1, 0, 6);
        }
        assert_eq!(g.draft_len(6), 1);
        g.record(1, 1, 6);
        assert_eq!(g.draft_len(6), 3);
        g.record(3, 3, 6);
        g.record(5, 5, 6);
        assert_eq!(g.draft_len(6), 6);
        // A draft shorter than asked (the lookup found fewer tokens), accepted whole, grows too.
        g.record(2, 0, 6);
        g.record(2, 2, 6);
        assert_eq!(g.draft_len(6), 6);
    }

    #[test]
    fn options_validate_bounds() {
        assert!(SpeculativeOptions::default().validate().is_ok());
        let o = |d, a, b| SpeculativeOptions {
            enabled: true,
            draft_max: d,
            ngram_min: a,
            ngram_max: b,
        };
        assert!(o(0, 2, 4).validate().is_err());
        assert!(o(33, 2, 4).validate().is_err());
        assert!(o(4, 3, 2).validate().is_err());
        assert!(o(4, 0, 2).validate().is_err());
        assert!(o(4, 2, 17).validate().is_err());
        assert!(o(8, 1, 16).validate().is_ok());
    }
}
