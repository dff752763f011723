//! `hvdctl completions SHELL`: the shell code that asks hvdctl for completions as you type
//! (commands, flags, template names, and the run ids recorded in `.hvdctl/`). As kubectl's
//! plugin, `kubectl hvd` completes through kubectl's own completion, which asks
//! `kubectl_complete-hvd` on `PATH`: the script says how to install that name.

use crate::cli::{CompletionsArgs, Invoked, PLUGIN_COMPLETER_FILE, PLUGIN_FILE};
use crate::error::{Error, Result};

pub fn run(a: CompletionsArgs) -> Result<u8> {
    if Invoked::now() == Invoked::KubectlPlugin {
        let shell = a.shell;
        let script = format!(
            "# `kubectl hvd` completes through kubectl's own completion (kubectl 1.26+), which asks\n\
             # an executable named {PLUGIN_COMPLETER_FILE} on PATH. Link it to hvdctl next to {PLUGIN_FILE}:\n\
             #   ln -s \"$(command -v {PLUGIN_FILE})\" \"$(dirname \"$(command -v {PLUGIN_FILE})\")/{PLUGIN_COMPLETER_FILE}\"\n\
             # and load kubectl's completion for {shell}:\n\
             #   source <(kubectl completion {shell})\n"
        );
        use std::io::Write;
        std::io::stdout()
            .write_all(script.as_bytes())
            .map_err(|e| Error::failure(format!("writing the completion script: {e}")))?;
        return Ok(0);
    }
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
