//! The private directory of a local run: the ssh key pair, the hostfile, `discover_hosts.sh`
//! and the launcher/worker scripts, bind-mounted read-only into the containers.
//!
//! It is `<tmp>/hvdctl-local-<job>.<random>`, created 0700 (atomically: creating fails if the
//! name exists), every file 0600 (`discover_hosts.sh` 0700). The private key is written
//! only here, only into the launcher's ssh directory; workers get the public key alone. The
//! directory is never part of an image and is removed by `undeploy` (and by a failed or
//! interrupted deploy).

use crate::backend::SshKeys;
use crate::error::{Error, Result};
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Prefix of every run directory's name.
pub const PREFIX: &str = "hvdctl-local-";

/// The files a run directory holds (all text; the key is zeroized when `SshKeys` drops).
pub struct Contents<'a> {
    pub keys: &'a SshKeys,
    pub hostfile: String,
    pub discover_hosts: String,
    /// The workers `discover_hosts.sh` probes, one name a line (`hvdctl scale` rewrites it).
    pub workers: String,
    pub launcher_sh: String,
    pub worker_sh: String,
    /// Owner to give the files (`runAsUser`, `runAsGroup`) when the containers do not run as
    /// root; best effort (needs hvdctl to run as root).
    pub owner: Option<(Option<u32>, Option<u32>)>,
}

/// A run directory (existing or planned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The directory at `root` (no check).
    pub fn at(root: PathBuf) -> RunDir {
        RunDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `ssh-privatekey` and `ssh-publickey`, mounted in the launcher.
    pub fn launcher_ssh(&self) -> PathBuf {
        self.root.join("ssh-launcher")
    }
    /// `ssh-publickey` only, mounted in the workers.
    pub fn worker_ssh(&self) -> PathBuf {
        self.root.join("ssh-worker")
    }
    /// `hostfile` and `discover_hosts.sh`, mounted at `/etc/mpi`.
    pub fn mpi(&self) -> PathBuf {
        self.root.join("mpi")
    }
    pub fn script(&self, name: &str) -> PathBuf {
        self.root.join("scripts").join(name)
    }

    /// Creates a fresh directory for `job` under the temp dir and writes `c` into it. On
    /// failure nothing is left behind.
    pub fn create(job: &str, c: &Contents) -> Result<RunDir> {
        let base = std::env::temp_dir();
        let mut last_err = None;
        for _ in 0..8 {
            let suffix: String = {
                use rand::Rng;
                const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
                let mut rng = rand::rng();
                (0..10)
                    .map(|_| A[rng.random_range(0..A.len())] as char)
                    .collect()
            };
            let root = base.join(format!("{PREFIX}{job}.{suffix}"));
            match DirBuilder::new().mode(0o700).create(&root) {
                Ok(()) => {
                    let dir = RunDir { root };
                    return match dir.fill(c) {
                        Ok(()) => Ok(dir),
                        Err(e) => {
                            let _ = fs::remove_dir_all(&dir.root);
                            Err(e)
                        }
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => {
                    return Err(Error::failure(format!(
                        "cannot create the run's private directory in {}: {e}",
                        base.display()
                    )));
                }
            }
        }
        Err(Error::failure(format!(
            "cannot create the run's private directory in {}: {}",
            base.display(),
            last_err.map_or_else(String::new, |e| e.to_string())
        )))
    }

    fn fill(&self, c: &Contents) -> Result<()> {
        let dirs = [
            self.launcher_ssh(),
            self.worker_ssh(),
            self.mpi(),
            self.root.join("scripts"),
        ];
        for d in &dirs {
            DirBuilder::new()
                .mode(0o700)
                .create(d)
                .map_err(|e| io_error(d, e))?;
        }
        write(
            &self.launcher_ssh().join("ssh-privatekey"),
            c.keys.private_openssh(),
            0o600,
        )?;
        write(
            &self.launcher_ssh().join("ssh-publickey"),
            &c.keys.public,
            0o600,
        )?;
        write(
            &self.worker_ssh().join("ssh-publickey"),
            &c.keys.public,
            0o600,
        )?;
        write(&self.mpi().join("hostfile"), &c.hostfile, 0o600)?;
        write(
            &self.mpi().join("discover_hosts.sh"),
            &c.discover_hosts,
            0o700,
        )?;
        write(&self.mpi().join("workers"), &c.workers, 0o600)?;
        write(&self.script("launcher.sh"), &c.launcher_sh, 0o600)?;
        write(&self.script("worker.sh"), &c.worker_sh, 0o600)?;
        if let Some((uid, gid)) = c.owner {
            self.chown_all(uid, gid)?;
        }
        Ok(())
    }

    /// Gives every file and directory to the containers' user (they must read them).
    fn chown_all(&self, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let mut paths = vec![self.root.clone()];
        let mut i = 0;
        while i < paths.len() {
            let p = paths[i].clone();
            if p.is_dir() {
                for e in fs::read_dir(&p).map_err(|e| io_error(&p, e))? {
                    paths.push(e.map_err(|e| io_error(&p, e))?.path());
                }
            }
            i += 1;
        }
        for p in &paths {
            std::os::unix::fs::lchown(p, uid, gid).map_err(|e| {
                Error::failure(format!(
                    "cannot give {} to the containers' user ({}:{}): {e}",
                    p.display(),
                    uid.map_or("-".into(), |u| u.to_string()),
                    gid.map_or("-".into(), |g| g.to_string())
                ))
                .hint("containers that run as a non-root user (securityContext.runAsUser) need hvdctl to run as root, or as that same user, to hand them the run's ssh key")
            })?;
        }
        Ok(())
    }
}

impl RunDir {
    /// Replaces the list of workers `discover_hosts.sh` probes (a new file renamed over the
    /// old one: the launcher never reads half a list). Keeps the old file's owner.
    pub fn write_workers(&self, names: &[String]) -> Result<()> {
        let path = self.mpi().join("workers");
        let tmp = self.mpi().join(".workers.new");
        let _ = fs::remove_file(&tmp);
        let text: String = names.iter().map(|n| format!("{n}\n")).collect();
        write(&tmp, &text, 0o600)?;
        if let Ok(m) = fs::metadata(&path) {
            let _ = std::os::unix::fs::lchown(&tmp, Some(m.uid()), Some(m.gid()));
        }
        fs::rename(&tmp, &path).map_err(|e| io_error(&path, e))
    }
}

fn io_error(p: &Path, e: std::io::Error) -> Error {
    Error::failure(format!("cannot write {}: {e}", p.display()))
}

/// Creates `p` (must not exist) with `mode` from the start: the key is never readable by
/// anyone else, not even for a moment.
fn write(p: &Path, text: &str, mode: u32) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(p)
        .map_err(|e| io_error(p, e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| io_error(p, e))
}

/// Whether `p` is a run directory hvdctl made: directly in the temp dir, named
/// `hvdctl-local-<job>.<random>`, a real directory (not a symlink) owned by this user (or
/// any, for root: the files may have been given to the containers' user).
/// Only such paths are ever removed, whatever a container label says.
pub fn is_run_dir(p: &Path, job: Option<&str>) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let Some(rest) = name.strip_prefix(PREFIX) else {
        return false;
    };
    let Some((j, suffix)) = rest.rsplit_once('.') else {
        return false;
    };
    if suffix.is_empty() || job.is_some_and(|want| want != j) {
        return false;
    }
    if p.parent() != Some(std::env::temp_dir().as_path()) {
        return false;
    }
    let Ok(meta) = fs::symlink_metadata(p) else {
        return false;
    };
    meta.is_dir() && (meta.uid() == current_uid() || current_uid() == 0)
}

/// This process's effective uid (the owner of `/proc/self`).
fn current_uid() -> u32 {
    fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// The run directories of `job` present in the temp dir (a deploy killed before it labelled
/// any container still left one there).
pub fn find(job: &str) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_run_dir(p, Some(job)))
        .collect()
}

/// Removes a run directory; paths that are not run directories are left alone. Returns
/// whether something was removed.
pub fn remove(p: &Path, job: Option<&str>) -> Result<bool> {
    if !is_run_dir(p, job) {
        return Ok(false);
    }
    match fs::remove_dir_all(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::failure(format!(
            "cannot remove the run's private directory {}: {e}",
            p.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_are_private_and_removal_is_guarded() {
        let keys = SshKeys::generate("t").unwrap();
        let job = format!("rundirtest-{}", std::process::id());
        let c = Contents {
            keys: &keys,
            hostfile: "a slots=1\n".into(),
            discover_hosts: "#!/bin/bash\n".into(),
            workers: "a\n".into(),
            launcher_sh: "l".into(),
            worker_sh: "w".into(),
            owner: None,
        };
        let d = RunDir::create(&job, &c).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(d.root()), 0o700);
        assert_eq!(mode(&d.launcher_ssh().join("ssh-privatekey")), 0o600);
        assert_eq!(mode(&d.worker_ssh().join("ssh-publickey")), 0o600);
        assert!(!d.worker_ssh().join("ssh-privatekey").exists());
        assert_eq!(mode(&d.mpi().join("discover_hosts.sh")), 0o700);
        let key = fs::read_to_string(d.launcher_ssh().join("ssh-privatekey")).unwrap();
        assert!(key.contains("PRIVATE KEY"));
        d.write_workers(&["a".into(), "b".into()]).unwrap();
        assert_eq!(
            fs::read_to_string(d.mpi().join("workers")).unwrap(),
            "a\nb\n"
        );
        assert_eq!(mode(&d.mpi().join("workers")), 0o600);
        assert_eq!(find(&job), vec![d.root().to_path_buf()]);
        assert!(find(&format!("{job}x")).is_empty());
        // Not a run dir: never removed.
        let other = std::env::temp_dir().join(format!("not-hvdctl-{}", std::process::id()));
        fs::create_dir_all(&other).unwrap();
        assert!(!remove(&other, None).unwrap());
        assert!(other.exists());
        fs::remove_dir_all(&other).unwrap();
        assert!(!remove(d.root(), Some("someone-else")).unwrap());
        assert!(remove(d.root(), Some(&job)).unwrap());
        assert!(!d.root().exists());
        assert!(!remove(d.root(), Some(&job)).unwrap());
    }
}
