//! `hvdctl cp [RUN] SRC DEST`: one side `launcher:PATH` or `worker-I:PATH`, the other local.

use super::block_on;
use crate::cli::{CpArgs, Global};
use crate::engine::Env;
use crate::error::Result;
use crate::image::human_bytes;
use crate::remote::path::{self, Copy};
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: CpArgs) -> Result<u8> {
    let (run_arg, copy) = path::parse_args(&a.args)?;
    let env = Env::new(g, ui)?;
    block_on(async {
        // A recorded run's files went with its containers: `run` says so, and what reads
        // its record.
        let run = env.run(run_arg.as_deref()).await?;
        let copied = run.copy(&copy, ui).await?;
        let (from, to) = match &copy {
            Copy::From {
                which,
                remote,
                local,
            } => (format!("{which}:{remote}"), local.display().to_string()),
            Copy::To {
                local,
                which,
                remote,
            } => (local.display().to_string(), format!("{which}:{remote}")),
        };
        let entries = match copied.entries {
            1 => "1 entry".to_string(),
            n => format!("{n} entries"),
        };
        ui.note(format!(
            "Copied {from} to {to} ({entries}, {}) in {}",
            human_bytes(copied.bytes),
            run.info().job
        ));
        Ok(0)
    })
}
