//! `hvdctl scale [RUN] --workers N`: more or fewer workers for a running elastic run.

use super::block_on;
use crate::cli::{Global, ScaleArgs};
use crate::engine::Env;
use crate::error::Result;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: ScaleArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        let s = run.scale(a.workers).await?;
        ui.note(format!(
            "Scaled {} from {} to {} workers (elastic: {} to {}); `hvdctl logs -f {}` shows the ranks re-form",
            s.job,
            s.before,
            s.after,
            s.bounds.min_workers,
            s.bounds.max_workers,
            run.info().run_id
        ));
        Ok(0)
    })
}
