//! Token selection: greedy, temperature, top-k, top-p, min-p and repetition penalty, with a
//! seeded portable RNG (ChaCha8) so a seed gives the same text on every machine and in the
//! browser. Ties are broken by the lower token id. Reference code; sampling is not a hot path.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::kernels::math::exp;

/// How the next token is picked. `Default` is the one set of defaults every front end uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerConfig {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no top-k cut.
    pub top_k: usize,
    /// 1.0 means no nucleus cut.
    pub top_p: f32,
    /// 0.0 means no min-p cut.
    pub min_p: f32,
    /// 1.0 means no penalty (llama.cpp's rule: positive logits divided, negative multiplied).
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token among the recent ones (OpenAI's
    /// `presence_penalty`, llama.cpp's rule); 0.0 means none.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it occurs among the recent ones (OpenAI's
    /// `frequency_penalty`); 0.0 means none.
    pub frequency_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }

    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::InvalidArgument(m.to_string()));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature must be a finite number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top-p must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min-p must be in [0, 1]");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat penalty must be a finite number > 0");
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return bad("presence penalty must be in [-2, 2]");
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return bad("frequency penalty must be in [-2, 2]");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sampler {
    pub config: SamplerConfig,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Sampler { config, rng }
    }

    /// Picks the next token from `logits` given the tokens so far (for the repetition penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let cfg = &self.config;
        let mut logits = std::borrow::Cow::Borrowed(logits);
        if cfg.repeat_penalty != 1.0 && cfg.repeat_last_n > 0 {
            let l = logits.to_mut();
            let recent = &history[history.len().saturating_sub(cfg.repeat_last_n)..];
            let mut seen = std::collections::BTreeSet::new();
            for &t in recent {
                if (t as usize) < l.len() && seen.insert(t) {
                    let v = &mut l[t as usize];
                    *v = if *v > 0.0 {
                        *v / cfg.repeat_penalty
                    } else {
                        *v * cfg.repeat_penalty
                    };
                }
            }
        }
        if (cfg.presence_penalty != 0.0 || cfg.frequency_penalty != 0.0) && cfg.repeat_last_n > 0 {
            let l = logits.to_mut();
            let recent = &history[history.len().saturating_sub(cfg.repeat_last_n)..];
            let mut counts = std::collections::BTreeMap::new();
            for &t in recent.iter().filter(|&&t| (t as usize) < l.len()) {
                *counts.entry(t).or_insert(0u32) += 1;
            }
            for (t, count) in counts {
                let v = &mut l[t as usize];
                *v = *v - (count as f32 * cfg.frequency_penalty + cfg.presence_penalty);
            }
        }
        if cfg.temperature == 0.0 {
            return argmax(&logits);
        }

        // Candidates sorted by logit, highest first, ties by lower id; NaN logits never win.
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .map(|(i, &v)| (i as u32, v))
            .collect();
        if cand.is_empty() {
            return 0;
        }
        // Highest logit first, ties by lower id: a total order, so selecting the top k and
        // sorting only them gives exactly the head of the full sort (at a fraction of its cost
        // over a 50k-token vocabulary).
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if cfg.top_k > 0 && cfg.top_k < cand.len() {
            cand.select_nth_unstable_by(cfg.top_k - 1, order);
            cand.truncate(cfg.top_k);
        }
        cand.sort_unstable_by(order);
        // Probabilities at temperature, in the sorted order (a fixed order of sums).
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand
            .iter()
            .map(|&(_, v)| exp((v - max) / cfg.temperature))
            .collect();
        let total: f32 = probs.iter().fold(0.0, |a, &p| a + p);
        probs.iter_mut().for_each(|p| *p = *p / total);
        // top-p: the smallest prefix whose mass reaches top_p.
        if cfg.top_p < 1.0 {
            let mut mass = 0.0f32;
            let mut keep = probs.len();
            for (i, &p) in probs.iter().enumerate() {
                mass = mass + p;
                if mass >= cfg.top_p {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
        }
        // min-p: drop candidates below min_p times the top probability.
        if cfg.min_p > 0.0 {
            let floor = probs[0] * cfg.min_p;
            let keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
            probs.truncate(keep);
        }
        let total: f32 = probs.iter().fold(0.0, |a, &p| a + p);
        // A uniform draw in [0, total) from 24 random bits: exact in f32 on every target.
        let u = (self.rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32) * total;
        let mut acc = 0.0f32;
        for (i, &p) in probs.iter().enumerate() {
            acc = acc + p;
            if u < acc {
                return cand[i].0;
            }
        }
        cand[probs.len() - 1].0
    }
}

/// The index of the largest logit; the lowest id wins a tie; NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_ties_pick_lowest_id() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN]), 1);
    }

    #[test]
    fn greedy_ignores_seed() {
        let logits = [0.1, 2.0, 1.9];
        for seed in 0..4 {
            let mut s = Sampler::new(SamplerConfig {
                seed,
                ..SamplerConfig::greedy()
            });
            assert_eq!(s.sample(&logits, &[]), 1);
        }
    }

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative() {
        let cfg = SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        };
        let mut s = Sampler::new(cfg);
        // Token 0 (3.0 -> 1.5) loses to token 1 (2.0).
        assert_eq!(s.sample(&[3.0, 2.0, -1.0], &[0]), 1);
    }

    #[test]
    fn presence_and_frequency_penalties_subtract_once_and_per_occurrence() {
        let mut s = Sampler::new(SamplerConfig {
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..SamplerConfig::greedy()
        });
        // Token 0 seen 3 times: 3.0 - (3 * 0.25 + 0.5) = 1.75 beats token 1's 2.0 - 0.75 = 1.25.
        assert_eq!(s.sample(&[3.0, 2.0, 1.0], &[0, 0, 0, 1]), 0);
        // 3.0 - (8 * 0.25 + 0.5) = 0.5 and 2.0 - (4 * 0.25 + 0.5) = 0.5 lose to unseen 1.0.
        assert_eq!(
            s.sample(&[3.0, 2.0, 1.0], &[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]),
            2
        );
    }

    #[test]
    fn top_k_1_is_greedy_at_any_temperature() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 1.0, 0.5, 0.99], &[]), 1);
        }
    }

    #[test]
    fn same_seed_same_draws_seed_7() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Default::default()
        };
        let (mut a, mut b) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
        let da: Vec<u32> = (0..32).map(|_| a.sample(&logits, &[])).collect();
        let db: Vec<u32> = (0..32).map(|_| b.sample(&logits, &[])).collect();
        assert_eq!(da, db);
        assert!(
            da.iter().collect::<std::collections::BTreeSet<_>>().len() > 3,
            "draws should vary: {da:?}"
        );
    }

    #[test]
    fn min_p_keeps_only_the_top_when_others_are_tiny() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            seed: 1,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&[10.0, 0.0, 0.0], &[]), 0);
        }
    }
}
