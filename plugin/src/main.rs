//! `retrace` — the command-line face of retrace.
//!
//! It lives in the plugin crate because it is the LLDB side's helper: the
//! Python shim in `lldb-scripts/` drives the same decoder through it.

use std::process::ExitCode;

use clap::Parser;
use retrace_plugin::cli;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(error) => {
            if error.is_broken_pipe() {
                return ExitCode::SUCCESS;
            }
            eprintln!("retrace: {error}");
            ExitCode::from(1)
        }
    }
}
