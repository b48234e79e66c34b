//! `inferno`: run, chat with, inspect, convert and quantize Llama-family models on this CPU.
//! Generated text goes to stdout; progress, stats and errors to stderr. The commands are in
//! [`cli`]: `cli::args` parses, the other modules run.

mod cli;

use clap::Parser;

fn main() {
    // A bug must still end in one line on stderr and exit code 1, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error (a bug in inferno, please report it): {msg}{at}");
    }));
    let cli = cli::args::Cli::parse();
    let result =
        std::panic::catch_unwind(|| cli::run(cli)).unwrap_or_else(|_| std::process::exit(1));
    if let Err(e) = result {
        // One line, no backtrace: the chain of contexts joined.
        let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("error: {}", msg.join(": "));
        std::process::exit(1);
    }
}
