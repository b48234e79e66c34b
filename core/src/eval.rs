//! Perplexity scoring, as the oracle and llama.cpp define it: the text is cut into windows, each
//! run from position 0 with a fresh cache, and each token is scored by the model's prediction
//! from the tokens before it in its window.

use crate::engine::Engine;
use crate::{Error, Result};

/// Per-token negative log-likelihood (natural log) of `tokens` under non-overlapping windows of
/// `window` tokens: entry i is the NLL of token i, NaN for the first token of each window.
/// `on_window(done, total)` is called after each window. A window below 2 tokens scores nothing
/// and is an error.
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
    for (w, chunk) in tokens.chunks(window).enumerate() {
        let mut session = engine.new_session();
        let logits = session.append_all_logits(chunk)?; // (chunk.len(), vocab)
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
    /// Full windows only, second half only (`llama-perplexity -c 512`, no BOS).
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
