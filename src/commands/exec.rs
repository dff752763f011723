//! `hvdctl exec [RUN] [--role R] [--index I] [-c C] [-it] -- CMD...`: the command's exit
//! code is hvdctl's.

use super::runtime;
use crate::cli::{ExecArgs, Global};
use crate::engine::Env;
use crate::error::{Error, Result};
use crate::remote::Pick;
use crate::remote::stdio::ExecRequest;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: ExecArgs) -> Result<u8> {
    let pick = Pick::from_flags(a.target.role, a.target.index, a.target.container)?;
    let req = ExecRequest::new(a.command, a.stdin, a.tty, ui);
    let env = Env::new(g, ui)?;
    let rt = runtime(true)?;
    let code = rt.block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        // With a terminal, Ctrl-C is a key for the remote command (raw mode sends no
        // signal); without one it ends hvdctl, as it ends kubectl exec.
        tokio::select! {
            r = run.exec(&pick, &req) => r,
            _ = tokio::signal::ctrl_c(), if !req.tty => Err(Error::interrupted()),
        }
    });
    // A read of this process's stdin may still be waiting on its blocking thread.
    rt.shutdown_background();
    code
}
