//! `hvdctl port-forward [RUN] [--role R] [--index I] LOCAL:REMOTE`: until Ctrl-C (exit 0).

use super::runtime;
use crate::cli::{Global, PortForwardArgs};
use crate::engine::Env;
use crate::error::Result;
use crate::remote::Pick;
use crate::remote::forward::{self, Ports};
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: PortForwardArgs) -> Result<u8> {
    let (run_arg, ports) = match a.args.as_slice() {
        [ports] => (None, ports),
        [run, ports] => (Some(run.as_str()), ports),
        _ => unreachable!("clap takes 1 or 2 arguments"),
    };
    let ports: Ports = ports.parse()?;
    let pick = Pick::from_flags(a.target.role, a.target.index, a.target.container)?;
    let env = Env::new(g, ui)?;
    runtime(true)?.block_on(async {
        let run = env.run(run_arg).await?;
        let listener = forward::listen(ports.local).await?;
        tokio::select! {
            r = run.port_forward(&pick, listener, ports.remote) => r.map(|()| 0),
            // Ctrl-C is how a port-forward ends.
            _ = tokio::signal::ctrl_c() => Ok(0),
        }
    })
}
