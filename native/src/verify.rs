//! `inferno verify`: a model against reference data in the oracle's format (tests/data/oracle,
//! README there): for every prompt in `DIR/logits/*.json`, the tokenization, every position's
//! top-10 logits, the last position's full row (`.npy`) and the greedy continuation. Reports the
//! worst logit error, top-1 agreement and where greedy decoding first leaves the reference (with
//! the reference's top1-top2 margin there: a divergence at a near-tie is expected of a
//! quantized engine, one at a wide margin is a bug).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use inferno_core::engine::Engine;
use inferno_core::sampler::argmax;
use serde::{Deserialize, Serialize};

/// What the oracle's `logits/<prompt>.json` holds that verification reads.
#[derive(Deserialize)]
struct OraclePrompt {
    name: String,
    prompt_text: String,
    prompt_ids: Vec<u32>,
    positions: Vec<OraclePosition>,
    last_position_full_logits_npy: Option<String>,
    greedy: Option<OracleGreedy>,
}

#[derive(Deserialize)]
struct OraclePosition {
    top10_ids: Vec<u32>,
    top10_logits: Vec<f32>,
}

#[derive(Deserialize)]
struct OracleGreedy {
    ids: Vec<u32>,
    steps: Vec<OracleStep>,
}

#[derive(Deserialize)]
struct OracleStep {
    margin_top1_top2: f64,
}

/// One prompt's figures.
#[derive(Serialize, Debug, Clone)]
pub struct PromptReport {
    pub name: String,
    pub tokens: usize,
    /// Our tokenizer gives the reference's ids for the prompt text.
    pub tokenization_ok: bool,
    pub top1_agree: usize,
    pub positions: usize,
    /// Largest |logit difference| over every position's reference top-10.
    pub max_logit_error: f32,
    /// Largest |logit difference| over the last position's whole row, if the reference has it.
    pub last_row_max_error: Option<f32>,
    /// Greedy steps compared, and how many matched before the first divergence.
    pub greedy_steps: usize,
    pub greedy_matched: usize,
    pub divergence: Option<Divergence>,
}

/// Where our greedy continuation first differs from the reference's.
#[derive(Serialize, Debug, Clone)]
pub struct Divergence {
    pub step: usize,
    pub ours: u32,
    pub reference: u32,
    /// The reference's top1-top2 logit margin at that step.
    pub reference_margin: f64,
}

/// Every prompt of `dir`, in file-name order.
pub fn verify(engine: &Engine, dir: &Path) -> Result<Vec<PromptReport>> {
    let logits_dir = dir.join("logits");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&logits_dir)
        .with_context(|| {
            format!(
                "cannot read {} (an oracle directory has logits/*.json)",
                logits_dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} has no prompt files (*.json)", logits_dir.display());
    }
    files
        .iter()
        .map(|f| verify_prompt(engine, &logits_dir, f).with_context(|| format!("{}", f.display())))
        .collect()
}

fn verify_prompt(engine: &Engine, dir: &Path, file: &Path) -> Result<PromptReport> {
    let text = std::fs::read_to_string(file).context("cannot read")?;
    let oracle: OraclePrompt = serde_json::from_str(&text).context("not an oracle prompt file")?;
    let vocab = engine.config().vocab_size;
    let ids = &oracle.prompt_ids;
    if ids.is_empty() || oracle.positions.len() != ids.len() {
        bail!(
            "{} prompt ids but {} positions",
            ids.len(),
            oracle.positions.len()
        );
    }
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        bail!("prompt id {bad} is outside the model's {vocab}-token vocabulary");
    }
    let tokenization_ok = engine.tokenizer().encode(&oracle.prompt_text).ok().as_ref() == Some(ids);

    let mut session = engine.new_session();
    let logits = session.append_all_logits(ids)?; // (tokens, vocab)
    let (mut top1_agree, mut max_logit_error) = (0, 0.0f32);
    for (row, pos) in logits.chunks_exact(vocab).zip(&oracle.positions) {
        if pos.top10_ids.first() == Some(&argmax(row)) {
            top1_agree += 1;
        }
        for (&id, &l) in pos.top10_ids.iter().zip(&pos.top10_logits) {
            let ours = *row
                .get(id as usize)
                .context("a top-10 id outside the vocabulary")?;
            max_logit_error = max_logit_error.max((ours - l).abs());
        }
    }
    let last_row_max_error = match &oracle.last_position_full_logits_npy {
        Some(name) => {
            let path = dir.join(name);
            let bytes =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            let (_, want) = crate::npy::parse_f32(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let last = &logits[(ids.len() - 1) * vocab..];
            if want.len() != last.len() {
                bail!(
                    "{}: {} logits, the model has {vocab}",
                    path.display(),
                    want.len()
                );
            }
            Some(
                last.iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max),
            )
        }
        None => None,
    };

    // Greedy, not stopped at end-of-generation tokens (as the reference's), until it leaves.
    let (mut greedy_steps, mut greedy_matched, mut divergence) = (0, 0, None);
    if let Some(greedy) = &oracle.greedy {
        let room = engine.config().context_length.saturating_sub(ids.len());
        greedy_steps = greedy.ids.len().min(room);
        for (step, &want) in greedy.ids.iter().take(greedy_steps).enumerate() {
            let ours = argmax(session.logits()?);
            if ours != want {
                divergence = Some(Divergence {
                    step,
                    ours,
                    reference: want,
                    reference_margin: greedy
                        .steps
                        .get(step)
                        .map_or(f64::NAN, |s| s.margin_top1_top2),
                });
                break;
            }
            greedy_matched += 1;
            if step + 1 < greedy_steps {
                session.append(&[ours])?;
            }
        }
    }
    Ok(PromptReport {
        name: oracle.name,
        tokens: ids.len(),
        tokenization_ok,
        top1_agree,
        positions: ids.len(),
        max_logit_error,
        last_row_max_error,
        greedy_steps,
        greedy_matched,
        divergence,
    })
}
