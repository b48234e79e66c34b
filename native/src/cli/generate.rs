//! `inferno run` and `inferno chat`: both drive core's one generation loop, `run --raw` on a
//! plain session, the rest through a `ChatSession`, and stream its pieces to stdout.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inferno_core::chat_session::{ChatSession, TurnStart};
use inferno_core::generate::{prefill, Generator, StopReason};
use inferno_core::speculative::SpeculativeStats;

use super::args::{GenerateArgs, ModelArgs};

/// Writes streamed pieces to stdout; a closed pipe ends the reply quietly, other write errors
/// are kept to be reported.
struct Stdout {
    out: std::io::StdoutLock<'static>,
    error: Option<std::io::Error>,
}

impl Stdout {
    fn new() -> Stdout {
        Stdout {
            out: std::io::stdout().lock(),
            error: None,
        }
    }

    /// False once stdout is gone.
    fn write(&mut self, piece: &str) -> bool {
        match self
            .out
            .write_all(piece.as_bytes())
            .and_then(|_| self.out.flush())
        {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    fn finish(self) -> Result<()> {
        match self.error {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(e).context("cannot write to stdout")
            }
            _ => Ok(()),
        }
    }
}

/// What `--stats` prints after a reply.
struct Stats {
    prompt_tokens: usize,
    reused: usize,
    prefilled: usize,
    prefill: Duration,
    decoded: usize,
    decode: Duration,
    stop: Option<StopReason>,
    speculative: Option<SpeculativeStats>,
}

impl Stats {
    fn print(&self, seed: u64, kernels: &str) {
        let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        eprintln!(
            "\n[prefill {} tokens ({} of {} reused) in {:.1} ms = {:.1} tok/s | decode {} tokens in {:.1} ms = {:.1} tok/s | stop: {:?} | seed {seed} | kernels {kernels}]",
            self.prefilled,
            self.reused,
            self.prompt_tokens,
            self.prefill.as_secs_f64() * 1e3,
            rate(self.prefilled, self.prefill),
            self.decoded,
            self.decode.as_secs_f64() * 1e3,
            rate(self.decoded, self.decode),
            self.stop,
        );
        if let Some(s) = self.speculative {
            eprintln!(
                "[speculative: {} attempts, {} of {} drafted tokens accepted ({:.0}%), {} tokens in {} forwards = {:.2} tokens per forward]",
                s.attempts,
                s.accepted,
                s.drafted,
                100.0 * s.acceptance(),
                s.tokens,
                s.forwards,
                s.tokens_per_forward(),
            );
        }
    }
}

/// `inferno run`: one reply to one prompt, streamed.
pub fn run(model: ModelArgs, gen: GenerateArgs, raw: bool, prompt: String) -> Result<()> {
    let options = gen.options()?;
    let engine = model.engine()?;
    let stats = if raw {
        let ids = engine.encode_prompt(&prompt)?;
        let mut session = engine.new_session();
        let t0 = Instant::now();
        let start = prefill(&mut session, &ids)?;
        let prefill_time = t0.elapsed();
        let mut generator = Generator::new(&options)?;
        let mut stdout = Stdout::new();
        let t1 = Instant::now();
        generator.run(&mut session, &mut |piece| stdout.write(piece))?;
        let decode = t1.elapsed();
        stdout.finish()?;
        Stats {
            prompt_tokens: start.prompt_tokens,
            reused: start.reused,
            prefilled: start.prefilled,
            prefill: prefill_time,
            decoded: generator.tokens().len(),
            decode,
            stop: generator.stop_reason(),
            speculative: options.speculative.enabled.then(|| generator.stats()),
        }
    } else {
        let mut chat = ChatSession::new(&engine);
        chat.set_options(options.clone())?;
        chat.set_system(gen.system.as_deref());
        chat_turn(&mut chat, &prompt)?
    };
    println!();
    if gen.stats {
        stats.print(options.sampler.seed, engine.kernels().name);
    }
    Ok(())
}

/// One turn of a chat, streamed to stdout.
fn chat_turn(chat: &mut ChatSession, user: &str) -> Result<Stats> {
    let t0 = Instant::now();
    let start: TurnStart = chat.begin_turn(user)?;
    let prefill_time = t0.elapsed();
    if start.dropped_turns > 0 {
        eprintln!(
            "(the conversation outgrew the context: the {} oldest turn{} dropped; /reset clears all)",
            start.dropped_turns,
            if start.dropped_turns == 1 { " was" } else { "s were" }
        );
    }
    let mut stdout = Stdout::new();
    let t1 = Instant::now();
    let streamed = (|| -> Result<()> {
        while let Some(piece) = chat.next_token()? {
            if !piece.is_empty() && !stdout.write(&piece) {
                chat.cancel();
            }
        }
        Ok(())
    })();
    let decode = t1.elapsed();
    let stop = chat.stop_reason();
    let decoded = chat.turn_tokens();
    let speculative = chat
        .options()
        .speculative
        .enabled
        .then(|| chat.turn_stats());
    // The turn is recorded even when it failed half-way, so the conversation stays whole.
    chat.end_turn()?;
    streamed?;
    stdout.finish()?;
    Ok(Stats {
        prompt_tokens: start.prompt_tokens,
        reused: start.reused,
        prefilled: start.prefilled,
        prefill: prefill_time,
        decoded,
        decode,
        stop,
        speculative,
    })
}

/// `inferno chat`: an interactive conversation whose cache is kept from turn to turn.
pub fn chat(model: ModelArgs, gen: GenerateArgs) -> Result<()> {
    let options = gen.options()?;
    let engine = model.engine()?;
    let mut chat = ChatSession::new(&engine);
    chat.set_options(options.clone())?;
    chat.set_system(gen.system.as_deref());
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    eprintln!(
        "chat with {} ({}). /reset, /system TEXT, /quit or Ctrl-D to leave.",
        model.path().display(),
        engine.config().architecture
    );
    loop {
        eprint!("> ");
        std::io::stderr().flush().ok();
        let Some(line) = lines.next() else {
            eprintln!();
            return Ok(());
        };
        let line = match line {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                eprintln!("error: that line is not valid UTF-8; please type it again");
                continue;
            }
            Err(e) => return Err(e).context("cannot read stdin"),
        };
        let line = line.trim_end_matches(['\r', '\n']);
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/reset" => {
                chat.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            cmd if cmd.starts_with("/system") => {
                let text = cmd["/system".len()..].trim();
                chat.set_system(Some(text));
                eprintln!(
                    "(system message {}; conversation cleared)",
                    if text.is_empty() { "removed" } else { "set" }
                );
                continue;
            }
            _ => {}
        }
        match chat_turn(&mut chat, line) {
            Ok(stats) => {
                println!();
                if gen.stats {
                    stats.print(chat.options().sampler.seed, engine.kernels().name);
                }
            }
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
}
