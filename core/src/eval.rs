//! Perplexity scoring, as the oracle and llama.cpp define it: the text is cut into windows, each
//! run from position 0 with a fresh cache, and each token is scored by the model's prediction
//! from the tokens before it in its window. For a model that wants BOS (Gemma), every window
//! starts with BOS in place of its first token, as llama-perplexity does: such a model is lost
//! without it, and the first token of a window is never scored anyway.

use crate::engine::Engine;
use crate::{Error, Result};

/// Per-token negative log-likelihood (natural log) of `tokens` under non-overlapping windows of
/// `window` tokens: entry i is the NLL of token i, NaN for the first token of each window.
/// `on_window(done, total)` is called after each window. A window below 2 tokens scores nothing
/// and is an error. When the model adds BOS, each window's first token is replaced by BOS
/// (llama-perplexity's rule), which changes no scored position but the window's second token's.
pub fn window_nll(
    engine: &Engine,
    tokens: &[u32],
    window: usize,
    on_window: &mut dyn FnMut(usize, usize),
) -> Result<Vec<f64>> {
    check_window(window)?;
    let vocab = engine.config().vocab_size;
    let mut nll = vec![f64::NAN; tokens.len()];
    let total = tokens.len().div_ceil(window);
    let special = engine.special_tokens();
    let bos = special.bos.filter(|_| special.add_bos);
    let mut input = Vec::with_capacity(window);
    for (w, chunk) in tokens.chunks(window).enumerate() {
        input.clear();
        input.extend_from_slice(chunk);
        if let Some(bos) = bos {
            input[0] = bos;
        }
        let mut session = engine.new_session();
        let logits = session.append_all_logits(&input)?; // (chunk.len(), vocab)
        for p in 0..chunk.len() - 1 {
            let row = &logits[p * vocab..(p + 1) * vocab];
            nll[w * window + p + 1] = log_sum_exp(row) - row[chunk[p + 1] as usize] as f64;
        }
        on_window(w + 1, total);
    }
    Ok(nll)
}

/// `ln Σ exp(x)` in f64 (a report, not part of the forward contract).
pub fn log_sum_exp(x: &[f32]) -> f64 {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    max + x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln()
}

fn check_window(window: usize) -> Result<()> {
    if window < 2 {
        return Err(Error::InvalidArgument(format!(
            "the perplexity window must be at least 2 tokens (a window's first token is not scored), got {window}"
        )));
    }
    Ok(())
}

/// Both perplexities of `tokens` ([`window_nll`], then [`perplexity`]), an error if not one token
/// could be scored (fewer than 2 tokens): a perplexity of 1.0 over 0 tokens means nothing.
pub fn score(
    engine: &Engine,
    tokens: &[u32],
    window: usize,
    on_window: &mut dyn FnMut(usize, usize),
) -> Result<Perplexity> {
    check_window(window)?;
    // With windows of 2 or more, the first window scores a token exactly when there are 2.
    if tokens.len() < 2 {
        return Err(Error::NothingToScore {
            tokens: tokens.len(),
        });
    }
    Ok(perplexity(
        &window_nll(engine, tokens, window, on_window)?,
        window,
    ))
}

/// Perplexity scores of a text by the oracle's two methods. A method that scored no token (the
/// llama.cpp style when the text is shorter than one window) has a perplexity of NaN, not 1.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// Every token but the first of each window (the oracle's `non_overlapping_512`).
    pub non_overlapping: f64,
    pub non_overlapping_scored: usize,
    /// Full windows only, second half only (`llama-perplexity -c 512`).
    pub llamacpp_style: f64,
    pub llamacpp_style_scored: usize,
}

/// Both perplexities from per-token NLLs computed with [`window_nll`]. A window below 2 scores
/// nothing (both perplexities NaN).
pub fn perplexity(nll: &[f64], window: usize) -> Perplexity {
    if check_window(window).is_err() {
        return Perplexity {
            non_overlapping: f64::NAN,
            non_overlapping_scored: 0,
            llamacpp_style: f64::NAN,
            llamacpp_style_scored: 0,
        };
    }
    let mean = |it: &mut dyn Iterator<Item = f64>| {
        let (mut s, mut n) = (0.0, 0usize);
        for v in it {
            s += v;
            n += 1;
        }
        // 0/0 is NaN: no token scored, no perplexity.
        ((s / n as f64).exp(), n)
    };
    let (non_overlapping, non_overlapping_scored) =
        mean(&mut nll.iter().copied().filter(|v| !v.is_nan()));
    let full = nll.len() / window * window;
    let first = window / 2 + 1;
    let (llamacpp_style, llamacpp_style_scored) = mean(
        &mut nll[..full]
            .iter()
            .enumerate()
            .filter(|(i, _)| i % window >= first)
            .map(|(_, &v)| v),
    );
    Perplexity {
        non_overlapping,
        non_overlapping_scored,
        llamacpp_style,
        llamacpp_style_scored,
    }
}

/// How a model's next-token distributions differ from a reference model's over a text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Positions compared (every token of the text predicts its successor).
    pub positions: usize,
    /// Positions where both models' most likely token is the same.
    pub top1_agree: usize,
    /// Mean and largest KL(reference || model), in nats.
    pub mean_kl: f64,
    pub max_kl: f64,
}

impl Comparison {
    pub fn top1_agreement(&self) -> f64 {
        self.top1_agree as f64 / self.positions.max(1) as f64
    }
}

/// Positions run per forward while comparing: bounds the logits held (two models, 64 x vocab).
const COMPARE_CHUNK: usize = 64;

/// Compares `model` against `reference` over `tokens` cut into non-overlapping windows of
/// `window` tokens (each from a fresh cache, as [`window_nll`]): top-1 agreement and the KL
/// divergence of the reference's distribution from the model's at every position. Both must
/// share the vocabulary. `on_window(done, total)` is called after each window.
pub fn compare(
    model: &Engine,
    reference: &Engine,
    tokens: &[u32],
    window: usize,
    on_window: &mut dyn FnMut(usize, usize),
) -> Result<Comparison> {
    check_window(window)?;
    let vocab = model.config().vocab_size;
    if reference.config().vocab_size != vocab {
        return Err(Error::InvalidArgument(format!(
            "the models' vocabularies differ ({vocab} and {} tokens): nothing to compare",
            reference.config().vocab_size
        )));
    }
    if tokens.is_empty() {
        return Err(Error::NothingToScore { tokens: 0 });
    }
    let (mut agree, mut kl_sum, mut kl_max, mut n) = (0, 0.0f64, 0.0f64, 0);
    let total = tokens.len().div_ceil(window);
    for (w, chunk) in tokens.chunks(window).enumerate() {
        let mut a = model.new_session();
        let mut b = reference.new_session();
        for part in chunk.chunks(COMPARE_CHUNK) {
            let la = a.append_all_logits(part)?; // (part.len(), vocab)
            let lb = b.append_all_logits(part)?;
            for (ra, rb) in la.chunks_exact(vocab).zip(lb.chunks_exact(vocab)) {
                if crate::sampler::argmax(ra) == crate::sampler::argmax(rb) {
                    agree += 1;
                }
                let kl = kl_divergence(rb, ra);
                kl_sum += kl;
                kl_max = kl_max.max(kl);
                n += 1;
            }
        }
        on_window(w + 1, total);
    }
    Ok(Comparison {
        positions: n,
        top1_agree: agree,
        mean_kl: kl_sum / n as f64,
        max_kl: kl_max,
    })
}

/// KL(p || q) = Σ p (log p - log q) of the softmaxes of two logit rows, in f64 (a report, not
/// part of the forward contract). Never negative.
pub fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let (lp, lq) = (log_sum_exp(p_logits), log_sum_exp(q_logits));
    let kl: f64 = p_logits
        .iter()
        .zip(q_logits)
        .map(|(&p, &q)| {
            let log_p = p as f64 - lp;
            log_p.exp() * (log_p - (q as f64 - lq))
        })
        .sum();
    kl.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_divergence_of_a_row_with_itself_is_0_and_of_two_known_rows_matches_the_formula() {
        let p = [1.0f32, 2.0, 3.0];
        assert_eq!(kl_divergence(&p, &p), 0.0);
        // Shifting logits does not change the distribution.
        assert_eq!(kl_divergence(&p, &[11.0, 12.0, 13.0]), 0.0);
        let q = [3.0f32, 2.0, 1.0];
        let sp: Vec<f64> = softmax(&p);
        let sq: Vec<f64> = softmax(&q);
        let want: f64 = sp.iter().zip(&sq).map(|(a, b)| a * (a / b).ln()).sum();
        assert!((kl_divergence(&p, &q) - want).abs() < 1e-12);
    }

    fn softmax(x: &[f32]) -> Vec<f64> {
        let s: f64 = x.iter().map(|&v| (v as f64).exp()).sum();
        x.iter().map(|&v| (v as f64).exp() / s).collect()
    }
}
