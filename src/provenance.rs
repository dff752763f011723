//! Where a run came from, stamped at deploy where its engine keeps it: annotations on every
//! object and pod template of a Kubernetes run, labels on a local run's containers. One set
//! of keys for both engines ([`Provenance::to_map`] / [`Provenance::from_map`]).
//!
//! What is recorded: the image reference and its digest (the registry's digest when the local
//! engine knows one for that repository — after a push —, else the local image ID), the app
//! directory's git commit and a hash of its uncommitted changes, hvdctl's version, the run's
//! size, and the `--set` keys (with values, except `env.*`: an env value never leaves the
//! machine through provenance).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use tokio::process::Command;

pub const ANN_IMAGE: &str = "hvdctl.io/image";
pub const ANN_IMAGE_DIGEST: &str = "hvdctl.io/image-digest";
pub const ANN_GIT_COMMIT: &str = "hvdctl.io/git-commit";
pub const ANN_GIT_DIRTY: &str = "hvdctl.io/git-dirty";
pub const ANN_VERSION: &str = "hvdctl.io/version";
/// JSON array of the `--set` flags: `key=value`, or `key` alone for `env.*`.
pub const ANN_SET: &str = "hvdctl.io/set";
pub const ANN_WORKERS: &str = "hvdctl.io/workers";
pub const ANN_SLOTS: &str = "hvdctl.io/slots-per-worker";

/// A run's provenance (what `status -o json` shows under `provenance`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    pub image: String,
    /// `sha256:…`, null when the engine did not know the image.
    pub image_digest: Option<String>,
    /// Null outside a git repository.
    pub git_commit: Option<String>,
    /// `sha256:…` of the uncommitted changes; null when there are none (or outside git);
    /// [`DIRTY_UNKNOWN`] when git could not tell.
    pub git_dirty: Option<String>,
    pub hvdctl_version: String,
    pub set: Vec<String>,
    pub workers: u32,
    pub slots_per_worker: u32,
}

/// `gitDirty` of a run whose uncommitted changes git could not list (never taken for clean).
pub const DIRTY_UNKNOWN: &str = "unknown";

impl Provenance {
    /// Everything but the digest (the engine resolves it), read from the app directory; git
    /// runs as a child process of the runtime, untracked files are read on its blocking pool.
    /// What git could not tell is `warn`ed about and recorded as [`DIRTY_UNKNOWN`].
    pub async fn collect(
        app: &crate::app::App,
        dir: &Path,
        image: &str,
        sets: &[String],
        warn: &dyn Fn(String),
    ) -> Provenance {
        let (git_commit, git_dirty) = match git(dir).await {
            Ok(found) => found,
            Err((commit, why)) => {
                warn(format!(
                    "cannot tell whether {} has uncommitted changes ({why}): the run records them as {DIRTY_UNKNOWN}",
                    dir.display()
                ));
                (Some(commit), Some(DIRTY_UNKNOWN.to_string()))
            }
        };
        Provenance {
            image: image.to_string(),
            image_digest: None,
            git_commit,
            git_dirty,
            hvdctl_version: env!("CARGO_PKG_VERSION").to_string(),
            set: sets.iter().map(|s| set_entry(s)).collect(),
            workers: app.workers,
            slots_per_worker: app.slots_per_worker,
        }
    }

    /// The keys and values stamped on the run (absent values are left out).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert(ANN_IMAGE.into(), self.image.clone());
        let mut opt = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v.clone());
            }
        };
        opt(ANN_IMAGE_DIGEST, &self.image_digest);
        opt(ANN_GIT_COMMIT, &self.git_commit);
        opt(ANN_GIT_DIRTY, &self.git_dirty);
        m.insert(ANN_VERSION.into(), self.hvdctl_version.clone());
        m.insert(
            ANN_SET.into(),
            serde_json::to_string(&self.set).unwrap_or_default(),
        );
        m.insert(ANN_WORKERS.into(), self.workers.to_string());
        m.insert(ANN_SLOTS.into(), self.slots_per_worker.to_string());
        m
    }

    /// Reads what [`Provenance::to_map`] stamped; `None` for a run deployed without it.
    pub fn from_map(get: impl Fn(&str) -> Option<String>) -> Option<Provenance> {
        let version = get(ANN_VERSION)?;
        Some(Provenance {
            image: get(ANN_IMAGE).unwrap_or_default(),
            image_digest: get(ANN_IMAGE_DIGEST),
            git_commit: get(ANN_GIT_COMMIT),
            git_dirty: get(ANN_GIT_DIRTY),
            hvdctl_version: version,
            set: get(ANN_SET)
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default(),
            workers: get(ANN_WORKERS).and_then(|s| s.parse().ok()).unwrap_or(0),
            slots_per_worker: get(ANN_SLOTS).and_then(|s| s.parse().ok()).unwrap_or(0),
        })
    }
}

/// `key=value`, or `key` alone for an `env` key (its value is never recorded).
fn set_entry(flag: &str) -> String {
    let (key, _) = crate::app::set::split_key(flag).unwrap_or((flag, ""));
    let is_env = key == "env" || key.starts_with("env.") || key.starts_with("env[");
    if is_env {
        key.to_string()
    } else {
        flag.to_string()
    }
}

/// The image's digest as the local Docker engine knows it: the registry digest of `image`'s
/// repository when it has one (the image was pushed or pulled), else the image ID
/// (`registry` false: the image ID always, for images that only live here). `None` when the
/// engine does not have the image.
pub async fn image_digest(
    docker: &crate::image::DockerClient,
    image: &str,
    registry: bool,
) -> Option<String> {
    let info = docker.bollard().inspect_image(image).await.ok()?;
    if registry {
        let repo = repository(image);
        let found = info
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find_map(|d| {
                let (r, digest) = d.rsplit_once('@')?;
                (r == repo).then(|| digest.to_string())
            });
        if found.is_some() {
            return found;
        }
    }
    info.id
}

/// `registry:5000/a/b` of `registry:5000/a/b:tag` or `…@sha256:…`.
fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    }
}

/// (commit, hash of uncommitted changes) of the git work tree holding `dir`; both `None`
/// outside one (or without git). Changes are `git diff HEAD` plus untracked files' names and
/// contents, `.hvdctl/` left out (hvdctl writes there itself). Inside a work tree, a git
/// command or a file read that fails is an error (the commit, and why): never "clean".
async fn git(dir: &Path) -> Result<(Option<String>, Option<String>), (String, String)> {
    let run = |args: &'static [&'static str]| async move {
        let out = crate::program::output_async(
            Command::new("git").arg("-C").arg(dir).args(args),
            crate::program::GIT_TIMEOUT,
        )
        .await;
        match out {
            Ok(o) if o.status.success() => Ok(o.stdout),
            Ok(o) => Err(crate::Error::failure(format!(
                "`git {}` failed ({}): {}",
                args[0],
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ))),
            Err(e @ crate::program::Failed::TimedOut(_)) => {
                Err(crate::Error::failure(format!("`git {}`: {e}", args[0])))
            }
            Err(e) => Err(crate::Error::failure(format!("cannot run git: {e}"))),
        }
    };
    // Outside a work tree (or without git) there is nothing to record.
    let Ok(commit) = run(&["rev-parse", "--verify", "-q", "HEAD"]).await else {
        return Ok((None, None));
    };
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    const DIFF: &[&str] = &[
        "diff",
        "HEAD",
        "--binary",
        "--",
        ".",
        ":(exclude,glob)**/.hvdctl/**",
    ];
    const UNTRACKED: &[&str] = &[
        "ls-files",
        "--others",
        "--exclude-standard",
        "-z",
        "--",
        ".",
        ":(exclude,glob)**/.hvdctl/**",
    ];
    let (diff, untracked) = match futures::try_join!(run(DIFF), run(UNTRACKED)) {
        Ok(both) => both,
        Err(why) => return Err((commit, why.message)),
    };
    if diff.is_empty() && untracked.is_empty() {
        return Ok((Some(commit), None));
    }
    let dir = dir.to_path_buf();
    let hashed = tokio::task::spawn_blocking(move || -> crate::Result<String> {
        let mut h = Sha256::new();
        h.update(&diff);
        for name in untracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let name = String::from_utf8_lossy(name);
            h.update(name.as_bytes());
            h.update([0]);
            let path = dir.join(name.as_ref());
            let unreadable = |e: std::io::Error| {
                crate::Error::failure(format!("cannot read {}: {e}", path.display())).caused_by(e)
            };
            // A symbolic link is its target's name, as git keeps it.
            if path.symlink_metadata().map_err(unreadable)?.is_symlink() {
                let target = std::fs::read_link(&path).map_err(unreadable)?;
                h.update(target.as_os_str().as_encoded_bytes());
                continue;
            }
            // A FIFO or a device among the untracked files is refused, never waited on.
            let mut f = crate::files::open(&path).map_err(|r| match r {
                crate::files::Refused::Io(e) => unreadable(e),
                r => r.error(&path, crate::files::CATALOG_FILE),
            })?;
            std::io::copy(&mut f, &mut h).map_err(unreadable)?;
        }
        Ok(format!("sha256:{:x}", h.finalize()))
    })
    .await
    .unwrap_or_else(|e| {
        Err(crate::Error::failure(format!(
            "hashing the changes stopped: {e}"
        )))
    });
    match hashed {
        Ok(h) => Ok((Some(commit), Some(h))),
        Err(why) => Err((commit, why.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_never_kept() {
        assert_eq!(set_entry("env.TOKEN=s3cret"), "env.TOKEN");
        assert_eq!(set_entry("env[\"A=B\"]=x"), "env[\"A=B\"]");
        assert_eq!(set_entry("workers=3"), "workers=3");
        assert_eq!(set_entry("environment=x"), "environment=x");
    }

    #[test]
    fn repository_of_references() {
        assert_eq!(repository("127.0.0.1:5000/a/b:1"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("a@sha256:00"), "a");
    }

    fn git(d: &Path) -> (Option<String>, Option<String>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(super::git(d)).expect("git answers")
    }

    #[test]
    fn git_commit_and_uncommitted_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        assert_eq!(git(d), (None, None), "outside a repository");
        let g = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .arg("-C")
                .arg(d)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "git {args:?}");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        g(&["init", "-q"]);
        std::fs::write(d.join("train.py"), "print(1)\n").unwrap();
        g(&["add", "."]);
        g(&["commit", "-qm", "one"]);
        let head = g(&["rev-parse", "HEAD"]);
        assert_eq!(git(d), (Some(head.clone()), None), "clean");
        // hvdctl's own directory is not a change.
        std::fs::create_dir(d.join(".hvdctl")).unwrap();
        std::fs::write(d.join(".hvdctl/runs.json"), "[]").unwrap();
        assert_eq!(git(d), (Some(head.clone()), None));
        std::fs::write(d.join("train.py"), "print(2)\n").unwrap();
        let edited = git(d).1.expect("an edit is a change");
        assert!(edited.starts_with("sha256:"), "{edited}");
        std::fs::write(d.join("new.py"), "x").unwrap();
        let untracked = git(d).1.unwrap();
        assert_ne!(untracked, edited, "an untracked file changes the hash");
        std::fs::write(d.join("new.py"), "y").unwrap();
        assert_ne!(git(d).1.unwrap(), untracked, "so does its content");
        assert_eq!(git(d).0, Some(head.clone()));
        // A work tree git cannot read is not "clean": the commit, and why.
        std::fs::write(d.join(".git/index"), "not an index").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (commit, why) = rt.block_on(super::git(d)).unwrap_err();
        assert_eq!(commit, head);
        assert!(why.starts_with("`git "), "{why}");
    }

    #[test]
    fn map_round_trip() {
        let p = Provenance {
            image: "i:1".into(),
            image_digest: Some("sha256:ab".into()),
            git_commit: None,
            git_dirty: None,
            hvdctl_version: "0.1.0".into(),
            set: vec!["workers=2".into(), "env.X".into()],
            workers: 2,
            slots_per_worker: 1,
        };
        let m = p.to_map();
        assert_eq!(Provenance::from_map(|k| m.get(k).cloned()), Some(p));
        assert_eq!(Provenance::from_map(|_| None), None);
    }
}
