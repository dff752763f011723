//! hvdctl's entry point: parse flags, run the command, map errors to exit codes.

use clap::{CommandFactory, FromArgMatches};
use hvdctl::cli::{Cli, Invoked};
use std::process::ExitCode;

fn main() -> ExitCode {
    let invoked = Invoked::now();
    if invoked == Invoked::KubectlCompleter {
        // kubectl asks for the completions of `kubectl hvd …`.
        let args = std::env::args_os().skip(1).collect();
        return match hvdctl::cli::complete_for_kubectl(args, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    // `COMPLETE=bash hvdctl ...`: the shell asks for completions (see `hvdctl completions`).
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let mut matches = hvdctl::cli::command(invoked).get_matches();
    let cli = match Cli::from_arg_matches_mut(&mut matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut hvdctl::cli::command(invoked)).exit(),
    };
    let verbose = cli.common.verbose > 0;
    match hvdctl::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            hvdctl::errln!("error: {e}");
            if verbose {
                for cause in hvdctl::error::cause_lines(&e) {
                    hvdctl::errln!("  caused by: {cause}");
                }
            }
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
