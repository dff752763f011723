//! `.hvdctl/` in the app directory: a convenience memory of the last runs and builds. The
//! cluster stays the source of truth; status/logs/undeploy work from labels alone too.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DIR: &str = ".hvdctl";
const RUNS: &str = "runs.json";
const IMAGE: &str = "image.json";
/// Runs remembered per app directory.
const KEEP: usize = 50;

/// A run as `deploy` recorded it, and where: the engine, and for Kubernetes the context and
/// namespace it was deployed to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    pub app: String,
    pub job: String,
    /// Absent in records written before engines were recorded: derived from `backend`.
    #[serde(default)]
    pub engine: Option<crate::types::EngineKind>,
    /// Kubernetes only.
    #[serde(default)]
    pub context: Option<String>,
    /// Kubernetes only.
    #[serde(default)]
    pub namespace: Option<String>,
    pub image: String,
    pub backend: String,
    /// RFC 3339.
    pub created: String,
}

impl RunRecord {
    /// The engine the run was deployed to.
    pub fn engine(&self) -> crate::types::EngineKind {
        use crate::types::EngineKind;
        self.engine
            .unwrap_or(if self.backend == crate::app::BackendName::LOCAL {
                EngineKind::Docker
            } else {
                EngineKind::Kubernetes
            })
    }
}

/// The last image `hvdctl build` made (and whether it was pushed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    pub image: String,
    #[serde(default)]
    pub pushed: bool,
    pub built: String,
}

fn path(dir: &Path, file: &str) -> PathBuf {
    dir.join(DIR).join(file)
}

pub(crate) fn read<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<Option<T>> {
    let afresh = || format!("delete {} to start afresh", p.display());
    match crate::files::read(p, crate::files::STATE) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| Error::input(format!("{}: {e}", p.display())).hint(afresh())),
        Err(crate::files::Refused::Missing) => Ok(None),
        Err(r) => Err(r.error(p, crate::files::STATE).hint(afresh())),
    }
}

/// Writes atomically (temp file + rename) so an interrupted write never leaves half a file.
pub(crate) fn write<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let dir = p.parent().expect("state files live in .hvdctl/");
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::failure(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = p.with_extension("json.tmp");
    let data = serde_json::to_vec_pretty(v).expect("state serializes");
    std::fs::write(&tmp, data)
        .and_then(|_| std::fs::rename(&tmp, p))
        .map_err(|e| Error::failure(format!("cannot write {}: {e}", p.display())))
}

/// All recorded runs, oldest first. The records only save typing (the engines are the
/// truth): a file that cannot be read is set aside as `runs.json.corrupt`, reported through
/// `warn`, and taken as empty.
pub fn runs(app_dir: &Path, warn: &dyn Fn(String)) -> Vec<RunRecord> {
    let p = path(app_dir, RUNS);
    match read(&p) {
        Ok(r) => r.unwrap_or_default(),
        Err(e) => {
            let aside = p.with_extension("json.corrupt");
            let moved = std::fs::rename(&p, &aside).is_ok();
            warn(format!(
                "ignoring the run records: {}{}",
                e.message,
                if moved {
                    format!(" (moved to {})", aside.display())
                } else {
                    String::new()
                }
            ));
            Vec::new()
        }
    }
}

fn runs_quiet(app_dir: &Path) -> Vec<RunRecord> {
    runs(app_dir, &|_| {})
}

pub fn record_run(app_dir: &Path, r: &RunRecord) -> Result<()> {
    let mut all = runs_quiet(app_dir);
    all.retain(|x| x.run_id != r.run_id);
    all.push(r.clone());
    let skip = all.len().saturating_sub(KEEP);
    write(&path(app_dir, RUNS), &all[skip..].to_vec())
}

pub fn forget_run(app_dir: &Path, run_id: &str) -> Result<()> {
    let mut all = runs_quiet(app_dir);
    let before = all.len();
    all.retain(|x| x.run_id != run_id);
    if all.len() != before {
        write(&path(app_dir, RUNS), &all)?;
    }
    Ok(())
}

pub fn image(app_dir: &Path) -> Result<Option<ImageRecord>> {
    read(&path(app_dir, IMAGE))
}

/// Where [`image`] reads the last build's record (named in errors about it).
pub fn image_record_path(app_dir: &Path) -> PathBuf {
    path(app_dir, IMAGE)
}

pub fn record_image(app_dir: &Path, r: &ImageRecord) -> Result<()> {
    write(&path(app_dir, IMAGE), r)
}

/// Now as RFC 3339 (UTC, seconds).
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn corrupt_records_are_set_aside_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(DIR)).unwrap();
        std::fs::write(path(d.path(), RUNS), "{not json").unwrap();
        let warned = std::cell::RefCell::new(Vec::new());
        assert!(runs(d.path(), &|w| warned.borrow_mut().push(w)).is_empty());
        assert_eq!(warned.borrow().len(), 1, "{:?}", warned.borrow());
        assert!(warned.borrow()[0].contains("runs.json"));
        assert!(path(d.path(), "runs.json.corrupt").exists());
        // Old records (no engine) read as before.
        std::fs::write(
            path(d.path(), RUNS),
            r#"[{"runId":"ab","app":"a","job":"a-ab","namespace":"local","context":"local","image":"i","backend":"local","created":"x"}]"#,
        )
        .unwrap();
        let r = runs_quiet(d.path());
        assert_eq!(r[0].engine(), crate::types::EngineKind::Docker);
    }

    use super::*;

    #[test]
    fn runs_round_trip_and_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..(KEEP + 3) {
            let r = RunRecord {
                run_id: format!("r{i}"),
                app: "a".into(),
                job: format!("a-r{i}"),
                engine: None,
                namespace: Some("default".into()),
                context: Some("c".into()),
                image: "i".into(),
                backend: "native".into(),
                created: now(),
            };
            record_run(d.path(), &r).unwrap();
        }
        let all = runs_quiet(d.path());
        assert_eq!(all.len(), KEEP);
        assert_eq!(all.last().unwrap().run_id, format!("r{}", KEEP + 2));
        forget_run(d.path(), "r10").unwrap();
        assert!(runs_quiet(d.path()).iter().all(|r| r.run_id != "r10"));
    }
}
