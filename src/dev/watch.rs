//! What changed in the app directory: a `notify` watcher on the build context, its events
//! gathered into batches (a save is often several writes: temporary file, rename, chmod), and
//! what a batch asks for — a sync of the files the image would hold, or a rebuild.

use crate::error::{Error, Result};
use crate::image::BuildContext;
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// File names whose change needs a new image: the app's Dockerfile (by its path) and these.
fn needs_rebuild(rel: &str, dockerfile: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel == dockerfile
        || (name.starts_with("requirements") && name.ends_with(".txt"))
        || matches!(name, "pyproject.toml" | "setup.py" | "environment.yml")
}

/// What one batch of changes asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batch {
    /// Copy these files (relative to the context, `/`-separated) into the run.
    Sync(Vec<String>),
    /// Deploy the run again from hvdctl.yaml read again, after building a new image when
    /// `rebuild` (`why`: the file that asked for it).
    Redeploy { why: String, rebuild: bool },
}

/// Classifies changed paths (relative, `/`-separated): those the context excludes (the image
/// would not hold them: `.dockerignore`'s and hvdctl's own `.hvdctl/`) are dropped; `None`
/// when nothing is left.
/// `app_file`: where hvdctl.yaml is, relative to the context, if it is inside it.
pub fn classify(changed: &[String], ctx: &BuildContext, app_file: Option<&str>) -> Option<Batch> {
    let kept: Vec<String> = changed
        .iter()
        .filter(|p| !ctx.matcher().is_excluded(p))
        .cloned()
        .collect();
    if let Some(p) = kept.iter().find(|p| needs_rebuild(p, ctx.dockerfile())) {
        return Some(Batch::Redeploy {
            why: p.clone(),
            rebuild: true,
        });
    }
    // hvdctl.yaml says what runs (command, workers, env): whether or not the image holds it.
    if let Some(f) = app_file.filter(|f| changed.iter().any(|p| p == f)) {
        return Some(Batch::Redeploy {
            why: f.to_string(),
            rebuild: false,
        });
    }
    (!kept.is_empty()).then_some(Batch::Sync(kept))
}

/// The watcher and the paths it reports.
pub struct Changes {
    root: PathBuf,
    /// A changed path, and whether it was created.
    rx: mpsc::UnboundedReceiver<(PathBuf, bool)>,
    /// Reports of the batch being gathered: kept here, not in [`Changes::next`]'s future, so
    /// a `next` dropped unfinished (a `select!` whose other branch won) loses none of them.
    pending: Vec<(PathBuf, bool)>,
    debounce: Duration,
    _watcher: RecommendedWatcher,
}

/// Starts watching `root` (recursively).
pub fn watch(root: &Path, debounce: Duration) -> Result<Changes> {
    let root = root
        .canonicalize()
        .map_err(|e| Error::input(format!("app directory {}: {e}", root.display())))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if matches!(
            ev.kind,
            EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
        ) {
            let created = matches!(ev.kind, EventKind::Create(_));
            for p in ev.paths {
                let _ = tx.send((p, created));
            }
        }
    })
    .map_err(|e| Error::failure(format!("watching {}: {e}", root.display())))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| Error::failure(format!("watching {}: {e}", root.display())))?;
    Ok(Changes {
        root,
        rx,
        pending: Vec::new(),
        debounce,
        _watcher: watcher,
    })
}

impl Changes {
    /// The directory watched (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The next batch of changed paths: everything reported until `debounce` passes without
    /// a report; relative to the root, `/`-separated, sorted, each once. A directory that
    /// appeared brings every file under it as the batch closes: files written into it before
    /// the watcher added its watch raise no event of their own. Cancel-safe: dropped before
    /// it returns, the reports it gathered go into the next call's batch.
    pub async fn next(&mut self) -> Option<Vec<String>> {
        if self.pending.is_empty() {
            let first = self.rx.recv().await?;
            self.pending.push(first);
        }
        while let Ok(Some(e)) = tokio::time::timeout(self.debounce, self.rx.recv()).await {
            self.pending.push(e);
        }
        let mut all = Vec::new();
        for (p, created) in std::mem::take(&mut self.pending) {
            if created && p.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                files_under(&p, &mut all);
            }
            all.push(p);
        }
        let mut rel: Vec<String> = all
            .iter()
            .filter_map(|p| p.strip_prefix(&self.root).ok())
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .filter(|p| !p.is_empty())
            .collect();
        rel.sort();
        rel.dedup();
        Some(rel)
    }
}

/// Every file below `dir` (symbolic links not followed).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&e.path(), out),
            Ok(t) if t.is_file() => out.push(e.path()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(ignore: &str) -> (tempfile::TempDir, BuildContext) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(d.path().join(".dockerignore"), ignore).unwrap();
        let c = BuildContext::open(d.path(), "Dockerfile").unwrap();
        (d, c)
    }

    fn v(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ignored_files_and_hvdctl_state_are_not_synced() {
        let (_d, c) = ctx("*.log\ndata/\n");
        assert_eq!(
            classify(
                &v(&[
                    "train.py",
                    "x.log",
                    "data/a",
                    ".hvdctl/runs.json",
                    "apps/m/.hvdctl/runs.json",
                ]),
                &c,
                Some("hvdctl.yaml")
            ),
            Some(Batch::Sync(v(&["train.py"])))
        );
        assert_eq!(classify(&v(&["x.log", ".hvdctl"]), &c, None), None);
    }

    #[tokio::test]
    async fn a_new_directory_brings_the_files_written_into_it() {
        let d = tempfile::tempdir().unwrap();
        let mut changes = watch(d.path(), Duration::from_millis(200)).unwrap();
        // Written at once: the file may be there before the watcher watches `pkg/sub`.
        std::fs::create_dir_all(d.path().join("pkg/sub")).unwrap();
        std::fs::write(d.path().join("pkg/sub/data.txt"), "x").unwrap();
        let batch = changes.next().await.unwrap();
        assert!(batch.contains(&"pkg/sub/data.txt".to_string()), "{batch:?}");
    }

    /// `dev` waits on a change and on the running attempt at once: when the attempt ends
    /// while a batch is being gathered, that `next` is dropped — its changes must come with
    /// the next call, not be lost (the edit loop then waited forever for an attempt).
    #[tokio::test]
    async fn a_batch_cut_short_is_not_lost() {
        let d = tempfile::tempdir().unwrap();
        let mut changes = watch(d.path(), Duration::from_secs(5)).unwrap();
        std::fs::write(d.path().join("train.py"), "x").unwrap();
        // Dropped within the debounce: the write's report is (almost always) already taken
        // from the channel by then.
        let cut = tokio::time::timeout(Duration::from_secs(1), changes.next()).await;
        assert!(cut.is_err(), "a batch closed before its debounce: {cut:?}");
        let batch = tokio::time::timeout(Duration::from_secs(60), changes.next())
            .await
            .expect("the change of the batch cut short never came")
            .unwrap();
        assert!(batch.contains(&"train.py".to_string()), "{batch:?}");
    }

    #[test]
    fn dependency_files_and_the_dockerfile_rebuild() {
        let (_d, c) = ctx("");
        for f in [
            "Dockerfile",
            "requirements.txt",
            "requirements-dev.txt",
            "sub/pyproject.toml",
            "setup.py",
            "environment.yml",
        ] {
            assert_eq!(
                classify(&v(&["train.py", f, "hvdctl.yaml"]), &c, Some("hvdctl.yaml")),
                Some(Batch::Redeploy {
                    why: f.to_string(),
                    rebuild: true
                }),
                "{f}"
            );
        }
        assert_eq!(
            classify(&v(&["requirements.md"]), &c, Some("hvdctl.yaml")),
            Some(Batch::Sync(v(&["requirements.md"])))
        );
        // hvdctl.yaml: deployed again, even when .dockerignore leaves it out of the image.
        let (_d, c) = ctx("hvdctl.yaml\n");
        assert_eq!(
            classify(&v(&["train.py", "hvdctl.yaml"]), &c, Some("hvdctl.yaml")),
            Some(Batch::Redeploy {
                why: "hvdctl.yaml".into(),
                rebuild: false
            })
        );
    }
}
