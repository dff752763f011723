use crate::cli::{Cli, CompletionsArgs};
use crate::error::Result;
use clap::CommandFactory;

pub fn run(a: CompletionsArgs) -> Result<u8> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "hvdctl", &mut std::io::stdout());
    Ok(0)
}
