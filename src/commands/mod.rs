//! One module per subcommand: each adapts parsed flags to the library functions that do the
//! work, and returns the process exit code.

mod completions;
mod deploy;
mod init;
mod logs;
mod templates;

use crate::cli::{Cli, Command};
use crate::error::Result;
use crate::ui::Ui;

/// Runs a parsed command line; `Ok(code)` is the exit code for a run that did not fail.
pub fn run(cli: Cli) -> Result<u8> {
    let g = &cli.global;
    let ui = Ui::new(g.color, g.no_input, g.quiet, g.verbose);
    match cli.command {
        Command::Init(a) => init::run(&cli.global, &ui, a),
        Command::Templates(a) => templates::run(&ui, a),
        Command::Deploy(a) => deploy::run(&cli.global, &ui, a),
        Command::Logs(a) => logs::run(&cli.global, &ui, a),
        Command::Completions(a) => completions::run(a),
    }
}
