//! Copies saved files into every pod/container of a run at `dev.syncTo`, all at once:
//! first one exec per pod removes what was deleted here and makes the directories the
//! files go to, then each file goes to each pod through [`Run::copy`] (a tar over exec or
//! the archive API).

use crate::engine::Run;
use crate::error::{Error, Result};
use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::logs::target::Target;
use crate::remote::path::Copy;
use crate::remote::stdio::{ExecRequest, Output};
use crate::remote::{Pick, Which};
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

/// Removes `gone` and makes `dirs` (both relative to `$1`) in one place.
const PREPARE: &str = r#"root=$1; shift
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do rm -rf -- "$root/$1" || exit 1; shift; done
[ "$#" -gt 0 ] && shift
for d in "$@"; do mkdir -p -- "$root/$d" || exit 1; done"#;

/// What a batch of changed paths asks of every place: paths deleted here (removed there, a
/// directory with what it holds), the files to copy, and the directories they go to.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan<'a> {
    gone: Vec<&'a str>,
    files: Vec<&'a str>,
    dirs: Vec<&'a str>,
}

impl<'a> Plan<'a> {
    /// `changed` are relative to `root`, `/`-separated; anything that is not a plain
    /// relative path inside it (empty, absolute, `..`) is left alone.
    fn of(root: &Path, changed: &'a [String]) -> Plan<'a> {
        let mut plan = Plan::default();
        let inside = |p: &str| {
            !p.is_empty() && !p.starts_with('/') && p.split('/').all(|c| c != ".." && !c.is_empty())
        };
        for p in changed.iter().map(String::as_str).filter(|p| inside(p)) {
            match root.join(p).symlink_metadata() {
                Err(_) => plan.gone.push(p),
                Ok(m) if m.is_file() => {
                    plan.files.push(p);
                    if let Some((dir, _)) = p.rsplit_once('/') {
                        plan.dirs.push(dir);
                    }
                }
                Ok(_) => {}
            }
        }
        plan.dirs.sort_unstable();
        plan.dirs.dedup();
        plan
    }
}

/// Runs [`PREPARE`] in `which`: its exit code and what it wrote.
async fn prepare(run: &Run, which: Which, sync_to: &str, plan: &Plan<'_>) -> Result<()> {
    let mut command: Vec<String> = ["/bin/sh", "-c", PREPARE, "sync", sync_to]
        .map(String::from)
        .into();
    command.extend(plan.gone.iter().map(|p| p.to_string()));
    command.push("--".into());
    command.extend(plan.dirs.iter().map(|p| p.to_string()));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let said = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(chunk) = rx.recv().await {
            all.extend(chunk);
        }
        String::from_utf8_lossy(&all).trim().to_string()
    });
    let req = ExecRequest {
        command,
        stdin: false,
        tty: false,
        output: Output::Channel(tx),
    };
    let pick = Pick::pod(which);
    let code = run.exec(&pick, &req).await;
    // The request holds the channel's sender: what was said ends when it is dropped.
    drop(req);
    let said = said.await.unwrap_or_default();
    match code? {
        0 => Ok(()),
        c => Err(Error::failure(format!(
            "removing deleted paths and making directories under {sync_to} exited with code {c}: {said}"
        ))),
    }
}

/// Mirrors `changed` (relative to `root`, `/`-separated) at `sync_to` in every one of
/// `places`: paths gone here are removed there, files are copied (their directories made
/// first). Every place and copy is tried; the first error is returned after all ended. How
/// many files were copied to each place.
pub async fn sync(
    run: &Run,
    places: &[Which],
    root: &Path,
    changed: &[String],
    sync_to: &str,
    ui: &Ui,
) -> Result<usize> {
    let plan = Plan::of(root, changed);
    let files = &plan.files;
    let quiet = Ui {
        progress: false,
        ..ui.clone()
    };
    let mut first: Option<Error> = None;
    if !plan.gone.is_empty() || !plan.dirs.is_empty() {
        let done = futures::future::join_all(
            places
                .iter()
                .map(|w| async { (prepare(run, *w, sync_to, &plan).await, *w) }),
        )
        .await;
        for (r, which) in done {
            if let Err(e) = r {
                ui.note(format!("warning: {which}: {e}"));
                first.get_or_insert(e);
            }
        }
    }
    let copies = places.iter().flat_map(|which| {
        files.iter().map(|f| Copy::To {
            local: root.join(f),
            which: *which,
            remote: format!("{}/{f}", sync_to.trim_end_matches('/')),
        })
    });
    let results =
        futures::future::join_all(copies.map(|c| async { (run.copy(&c, &quiet).await, c) })).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_split_into_removals_copies_and_directories() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("pkg/sub")).unwrap();
        std::fs::write(d.path().join("train.py"), "").unwrap();
        std::fs::write(d.path().join("pkg/sub/a.py"), "").unwrap();
        std::fs::write(d.path().join("pkg/b.py"), "").unwrap();
        let changed: Vec<String> = [
            "train.py",
            "pkg",
            "pkg/sub",
            "pkg/sub/a.py",
            "pkg/b.py",
            "old.py",
            "../x",
            "/etc/x",
            "a//b",
            "",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            Plan::of(d.path(), &changed),
            Plan {
                gone: vec!["old.py"],
                files: vec!["train.py", "pkg/sub/a.py", "pkg/b.py"],
                dirs: vec!["pkg", "pkg/sub"],
            }
        );
    }
}
