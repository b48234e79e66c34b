//! Progress of a long step on stderr: an indicatif bar when stderr is a terminal; otherwise one
//! plain line per step (or nothing), so a log file reads "perplexity 2/8 windows", not text
//! joined by carriage returns.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// What a non-terminal stderr gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainOutput {
    /// One line per [`Progress::set`] call (for a few slow steps, e.g. perplexity windows).
    EveryStep,
    /// Nothing (for many fast steps, e.g. tensors loaded).
    Silent,
}

/// A progress report of `done`/`total` `unit`s, labelled `message`.
pub struct Progress {
    bar: Option<ProgressBar>,
    message: String,
    unit: String,
    plain: PlainOutput,
}

impl Progress {
    /// A bar on a terminal stderr, else `plain` output.
    pub fn new(message: &str, unit: &str, plain: PlainOutput) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = format!("{{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}");
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(&template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_message(message.to_string());
            bar
        });
        Progress {
            bar,
            message: message.to_string(),
            unit: unit.to_string(),
            plain,
        }
    }

    /// Reports that `done` of `total` steps are finished.
    pub fn set(&self, done: usize, total: usize) {
        match &self.bar {
            Some(bar) => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
            None if self.plain == PlainOutput::EveryStep => {
                eprintln!("{}", plain_line(&self.message, done, total, &self.unit));
            }
            None => {}
        }
    }

    /// Removes the bar (plain output needs no ending). Dropping does the same, so an error
    /// message is not printed after a stale bar.
    pub fn finish(self) {}
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The line a non-terminal gets for one step: "perplexity 2/8 windows".
pub fn plain_line(message: &str, done: usize, total: usize, unit: &str) -> String {
    format!("{message} {done}/{total} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_line_perplexity_2_of_8_windows() {
        assert_eq!(
            plain_line("perplexity", 2, 8, "windows"),
            "perplexity 2/8 windows"
        );
    }
}
