//! hvdctl's entry point: parse flags, run the command, map errors to exit codes.

use clap::{CommandFactory, Parser};
use std::process::ExitCode;

fn main() -> ExitCode {
    // `COMPLETE=bash hvdctl ...`: the shell asks for completions (see `hvdctl completions`).
    clap_complete::CompleteEnv::with_factory(hvdctl::cli::Cli::command).complete();
    let cli = hvdctl::cli::Cli::parse();
    match hvdctl::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            hvdctl::errln!("error: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
