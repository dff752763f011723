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

/// A run as `deploy` recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: String,
    pub app: String,
    pub job: String,
    pub namespace: String,
    /// Kube context, or `local` for Docker runs.
    pub context: String,
    pub image: String,
    pub backend: String,
    /// RFC 3339.
    pub created: String,
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

fn read<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<Option<T>> {
    match std::fs::read(p) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            Error::input(format!("{}: {e}", p.display()))
                .hint(format!("delete {} to start afresh", p.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::failure(format!("cannot read {}: {e}", p.display()))),
    }
}

/// Writes atomically (temp file + rename) so an interrupted write never leaves half a file.
fn write<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let dir = p.parent().expect("state files live in .hvdctl/");
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::failure(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = p.with_extension("json.tmp");
    let data = serde_json::to_vec_pretty(v).expect("state serializes");
    std::fs::write(&tmp, data)
        .and_then(|_| std::fs::rename(&tmp, p))
        .map_err(|e| Error::failure(format!("cannot write {}: {e}", p.display())))
}

/// All recorded runs, oldest first.
pub fn runs(app_dir: &Path) -> Result<Vec<RunRecord>> {
    Ok(read(&path(app_dir, RUNS))?.unwrap_or_default())
}

pub fn record_run(app_dir: &Path, r: &RunRecord) -> Result<()> {
    let mut all = runs(app_dir)?;
    all.retain(|x| x.run_id != r.run_id);
    all.push(r.clone());
    let skip = all.len().saturating_sub(KEEP);
    write(&path(app_dir, RUNS), &all[skip..].to_vec())
}

pub fn forget_run(app_dir: &Path, run_id: &str) -> Result<()> {
    let mut all = runs(app_dir)?;
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
    use super::*;

    #[test]
    fn runs_round_trip_and_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..(KEEP + 3) {
            let r = RunRecord {
                run_id: format!("r{i}"),
                app: "a".into(),
                job: format!("a-r{i}"),
                namespace: "default".into(),
                context: "c".into(),
                image: "i".into(),
                backend: "native".into(),
                created: now(),
            };
            record_run(d.path(), &r).unwrap();
        }
        let all = runs(d.path()).unwrap();
        assert_eq!(all.len(), KEEP);
        assert_eq!(all.last().unwrap().run_id, format!("r{}", KEEP + 2));
        forget_run(d.path(), "r10").unwrap();
        assert!(runs(d.path()).unwrap().iter().all(|r| r.run_id != "r10"));
    }
}
