//! `hvdctl completions SHELL`: the shell code that asks hvdctl for completions as you type
//! (commands, flags, template names, and the run ids recorded in `.hvdctl/`).

use crate::cli::CompletionsArgs;
use crate::error::{Error, Result};

pub fn run(a: CompletionsArgs) -> Result<u8> {
    let name = a.shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let shell = shells
        .completer(&name)
        .ok_or_else(|| Error::input(format!("no completions for shell {name}")))?;
    let mut out = std::io::stdout();
    shell
        .write_registration("COMPLETE", "hvdctl", "hvdctl", "hvdctl", &mut out)
        .map_err(|e| Error::failure(format!("writing the completion script: {e}")))?;
    Ok(0)
}
