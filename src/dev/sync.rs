//! Copies saved files into every pod/container of a run at `dev.syncTo`, all at once:
//! each file to each pod through [`Run::copy`] (a tar over exec or the archive API).

use crate::engine::Run;
use crate::error::{Error, Result};
use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::logs::target::Target;
use crate::remote::Which;
use crate::remote::path::Copy;
use crate::ui::Ui;
use std::path::Path;

/// The launcher and every worker among `targets`, each once.
pub fn places(targets: &[Target]) -> Vec<Which> {
    let mut places: Vec<Which> = targets
        .iter()
        .filter_map(|t| match (t.role.as_str(), t.index) {
            (ROLE_LAUNCHER, _) => Some(Which::Launcher),
            (ROLE_WORKER, Some(i)) => Some(Which::Worker(i)),
            _ => None,
        })
        .collect();
    places.sort_by_key(|w| match w {
        Which::Launcher => None,
        Which::Worker(i) => Some(*i),
    });
    places.dedup();
    places
}

/// Copies `files` (relative to `root`, `/`-separated; a file that no longer exists is left
/// alone) to `sync_to` in every one of `places`. Every copy is tried; the first error is
/// returned after all ended. How many files were copied to each place.
pub async fn sync(
    run: &Run,
    places: &[Which],
    root: &Path,
    files: &[String],
    sync_to: &str,
    ui: &Ui,
) -> Result<usize> {
    let files: Vec<&String> = files.iter().filter(|f| root.join(f).is_file()).collect();
    let quiet = Ui {
        progress: false,
        ..ui.clone()
    };
    let copies = places.iter().flat_map(|which| {
        files.iter().map(|f| Copy::To {
            local: root.join(f),
            which: *which,
            remote: format!("{}/{f}", sync_to.trim_end_matches('/')),
        })
    });
    let results =
        futures::future::join_all(copies.map(|c| async { (run.copy(&c, &quiet).await, c) })).await;
    let mut first: Option<Error> = None;
    for (r, c) in results {
        if let (Err(e), Copy::To { local, which, .. }) = (r, &c) {
            ui.note(format!(
                "warning: copying {} to {which}: {e}",
                local.display()
            ));
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(files.len()),
    }
}
