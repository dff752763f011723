//! `hvdctl cp`'s arguments and where a copy lands.
//!
//! A remote side is written `launcher:PATH` or `worker-I:PATH`; every other argument is a
//! local path (`./a:b` and `/x/launcher:y` included). A remote PATH is absolute; a relative
//! one is taken from `/`, as `docker cp` does. Exactly one side is remote.
//!
//! Where a copy lands follows `docker cp`: when the destination is an existing directory the
//! source goes into it under its own name; otherwise the destination is the copy's name (an
//! existing file is replaced), in a parent directory that must exist.

use super::Which;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    Local(PathBuf),
    Remote(Which, String),
}

/// A copy's direction and both ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copy {
    /// From a pod/container to this machine.
    From {
        which: Which,
        remote: String,
        local: PathBuf,
    },
    /// From this machine to a pod/container.
    To {
        local: PathBuf,
        which: Which,
        remote: String,
    },
}

impl Copy {
    pub fn which(&self) -> Which {
        match self {
            Copy::From { which, .. } | Copy::To { which, .. } => *which,
        }
    }
}

/// `[RUN] SRC DEST` → the run argument (if any) and the copy.
pub fn parse_args(args: &[String]) -> Result<(Option<String>, Copy)> {
    let (run, src, dest) = match args {
        [src, dest] => (None, src, dest),
        [run, src, dest] => (Some(run.clone()), src, dest),
        _ => {
            return Err(Error::input(format!(
                "cp takes [RUN] SRC DEST, got {} arguments",
                args.len()
            )));
        }
    };
    let copy = match (parse(src)?, parse(dest)?) {
        (Side::Remote(which, remote), Side::Local(local)) => Copy::From {
            which,
            remote,
            local,
        },
        (Side::Local(local), Side::Remote(which, remote)) => Copy::To {
            local,
            which,
            remote,
        },
        (Side::Local(_), Side::Local(_)) => {
            return Err(
                Error::input(format!("neither {src:?} nor {dest:?} is in the run"))
                    .hint("write the run's side as launcher:PATH or worker-I:PATH"),
            );
        }
        (Side::Remote(..), Side::Remote(..)) => {
            return Err(Error::input(format!(
                "{src:?} and {dest:?} are both in the run: one side must be a local path"
            )));
        }
    };
    Ok((run, copy))
}

/// One argument: `launcher:PATH`, `worker-I:PATH`, or a local path. `worker:PATH` and
/// `worker-x:PATH` are bad input (a remote side with no valid index), not local paths.
pub fn parse(arg: &str) -> Result<Side> {
    let Some((head, path)) = arg.split_once(':') else {
        return Ok(Side::Local(PathBuf::from(arg)));
    };
    let which = if head == "launcher" {
        Which::Launcher
    } else if head == "worker" || head.starts_with("worker-") {
        let i = head
            .strip_prefix("worker-")
            .and_then(|i| i.parse::<u32>().ok())
            .ok_or_else(|| {
                Error::input(format!(
                    "{arg:?}: {head:?} is not a worker of a run; write worker-I:PATH with I its index (worker-0:/tmp)"
                ))
            })?;
        Which::Worker(i)
    } else {
        return Ok(Side::Local(PathBuf::from(arg)));
    };
    if path.is_empty() {
        return Err(Error::input(format!(
            "{arg:?}: no path after `{head}:` (e.g. {head}:/tmp)"
        )));
    }
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(Side::Remote(which, path))
}

/// A remote path as (parent directory, last name): `/a/b/` → (`/a`, `b`). `/` alone has no
/// name and is bad input.
pub fn split_remote(path: &str) -> Result<(String, String)> {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((dir, name)) if !name.is_empty() && name != "." && name != ".." => {
            let dir = if dir.is_empty() { "/" } else { dir };
            Ok((dir.to_string(), name.to_string()))
        }
        _ => Err(Error::input(format!(
            "{path}: name a file or directory below /, not the root itself"
        ))),
    }
}

/// `dir/name` for remote paths.
pub fn join_remote(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Where something called `name` copied to the local `dest` lands: (directory to unpack in,
/// name to give it). Errors (exit 1) when the directory it would go in does not exist.
pub fn local_landing(dest: &Path, name: &str) -> Result<(PathBuf, String)> {
    if dest.is_dir() {
        return Ok((dest.to_path_buf(), name.to_string()));
    }
    let shown = dest.display();
    if dest.as_os_str().to_string_lossy().ends_with('/') {
        return Err(Error::not_found(format!(
            "local directory {shown} does not exist"
        )));
    }
    let file_name = dest
        .file_name()
        .ok_or_else(|| Error::input(format!("{shown}: not a file or directory name")))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(Error::not_found(format!(
            "local directory {} does not exist (the parent of {shown})",
            parent.display()
        )));
    }
    Ok((parent, file_name.to_string_lossy().into_owned()))
}

/// The name a local source keeps when copied into a directory (`./data/` → `data`; `.` or
/// `..` → the name of the directory they are).
pub fn local_name(src: &Path) -> Result<String> {
    if let Some(std::path::Component::Normal(n)) = src.components().next_back() {
        return Ok(n.to_string_lossy().into_owned());
    }
    let real = std::fs::canonicalize(src)
        .map_err(|e| Error::not_found(format!("local path {}: {e}", src.display())))?;
    real.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::input(format!("{}: name a file or directory", src.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn remote_forms_and_local_paths() {
        assert_eq!(
            parse("launcher:/tmp/x").unwrap(),
            Side::Remote(Which::Launcher, "/tmp/x".into())
        );
        assert_eq!(
            parse("worker-3:data").unwrap(),
            Side::Remote(Which::Worker(3), "/data".into())
        );
        for local in [
            "./launcher:x",
            "a:b",
            "/x/worker-1:y",
            "plain",
            "launchers:/x",
        ] {
            assert!(matches!(parse(local).unwrap(), Side::Local(_)), "{local}");
        }
        for bad in ["worker:/x", "worker-x:/x", "worker--1:/x", "launcher:"] {
            assert_eq!(parse(bad).unwrap_err().kind, Kind::Input, "{bad}");
        }
    }

    #[test]
    fn args_need_exactly_one_remote_side() {
        let (run, c) = parse_args(&s(&["ab12", "launcher:/a", "b"])).unwrap();
        assert_eq!(run.as_deref(), Some("ab12"));
        assert!(matches!(c, Copy::From { .. }));
        let (run, c) = parse_args(&s(&["b", "worker-1:/a"])).unwrap();
        assert_eq!(run, None);
        assert_eq!(c.which(), Which::Worker(1));
        for bad in [&["a", "b"][..], &["launcher:/a", "worker-0:/b"], &["x"]] {
            assert_eq!(parse_args(&s(bad)).unwrap_err().kind, Kind::Input);
        }
    }

    #[test]
    fn remote_paths_split_into_parent_and_name() {
        let sp = |p| split_remote(p).unwrap();
        assert_eq!(sp("/tmp/out/"), ("/tmp".into(), "out".into()));
        assert_eq!(sp("/out"), ("/".into(), "out".into()));
        assert!(split_remote("/a/b/.").is_err());
        assert!(split_remote("/").is_err());
        assert_eq!(join_remote("/", "x"), "/x");
        assert_eq!(join_remote("/a", "x"), "/a/x");
    }

    #[test]
    fn local_landing_follows_docker_cp() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("file"), "x").unwrap();
        assert_eq!(
            local_landing(&d.join("dir"), "out").unwrap(),
            (d.join("dir"), "out".to_string())
        );
        assert_eq!(
            local_landing(&d.join("file"), "out").unwrap(),
            (d.to_path_buf(), "file".to_string())
        );
        assert_eq!(
            local_landing(&d.join("new"), "out").unwrap(),
            (d.to_path_buf(), "new".to_string())
        );
        let e = local_landing(&d.join("no/such"), "out").unwrap_err();
        assert_eq!(e.kind, Kind::NotFound);
        assert!(e.message.contains("no"), "{e}");
        let e = local_landing(Path::new(&format!("{}/nodir/", d.display())), "o").unwrap_err();
        assert_eq!(e.kind, Kind::NotFound);
        assert_eq!(local_name(&d.join("dir/")).unwrap(), "dir");
        assert_eq!(
            local_name(&d.join("dir/..")).unwrap(),
            local_name(d).unwrap()
        );
    }
}
