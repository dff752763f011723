//! Image names and the default tag.
//!
//! The default tag names the source: the short commit of the context's git `HEAD`
//! (`abc1234`) when the context is clean; with local changes (or outside git) a hash of the
//! files the build would send is added (`abc1234-d3f0a9c2`, or `src-d3f0a9c2`), so the same
//! source always gives the same tag and a different source a different one.

use std::process::Command;

use super::context::BuildContext;
use super::reference::{ImageRef, check_tag};
use crate::error::{Error, Result};

/// Length of the content-hash part of a tag.
pub const HASH_LEN: usize = 8;

/// A tag given to `build`/`push` (`--tag`, or the app's image), as input.
pub fn validate_tag(tag: &str) -> Result<()> {
    check_tag(tag).map_err(|e| Error::input(e.to_string()).caused_by(e))
}

/// A repository given to `build`/`push` (`[registry[:port]/]path`), as input: an image
/// reference without tag or digest.
pub fn validate_repo(repo: &str) -> Result<()> {
    let bad = |why: String| Error::input(format!("invalid image repository {repo:?}: {why}"));
    let r = ImageRef::parse(repo).map_err(|e| bad(e.to_string()).caused_by(e))?;
    if r.tag().is_some() || r.digest().is_some() {
        return Err(bad("give the repository without a tag or digest".into()));
    }
    Ok(())
}

/// The state of the git work tree holding a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitState {
    /// Not inside a git work tree, or no commit yet.
    NotARepo,
    /// `HEAD`'s short commit, and whether the context directory has uncommitted changes
    /// (untracked files count).
    Commit { short_sha: String, dirty: bool },
}

/// Asks git about the work tree containing `dir`.
pub fn git_state(dir: &std::path::Path) -> GitState {
    let git = |args: &[&str]| {
        crate::program::output(
            Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(args)
                .env_remove("GIT_DIR")
                .env_remove("GIT_WORK_TREE")
                .env_remove("GIT_INDEX_FILE"),
            None,
            crate::program::GIT_TIMEOUT,
        )
        .ok()
        .filter(|o| o.status.success())
    };
    let Some(head) = git(&["rev-parse", "--short=7", "--verify", "-q", "HEAD"]) else {
        return GitState::NotARepo;
    };
    let short_sha = String::from_utf8_lossy(&head.stdout).trim().to_string();
    if short_sha.is_empty() {
        return GitState::NotARepo;
    }
    let dirty = match git(&[
        "status",
        "--porcelain",
        "--untracked-files=normal",
        "--",
        ".",
    ]) {
        Some(out) => !out.stdout.is_empty(),
        None => true,
    };
    GitState::Commit { short_sha, dirty }
}

/// The default tag for a build of `ctx`; see the module docs.
pub fn default_tag(ctx: &BuildContext) -> Result<String> {
    let hash = || -> Result<String> { Ok(ctx.content_hash()?[..HASH_LEN].to_string()) };
    Ok(match git_state(ctx.root()) {
        GitState::Commit {
            short_sha,
            dirty: false,
        } => short_sha,
        GitState::Commit {
            short_sha,
            dirty: true,
        } => format!("{short_sha}-{}", hash()?),
        GitState::NotARepo => format!("src-{}", hash()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        for ok in ["latest", "abc1234", "abc1234-d3f0a9c2", "v1.2.3", "_x"] {
            assert!(validate_tag(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", ".x", "a b", "a/b", &"x".repeat(129)] {
            assert!(validate_tag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn repos() {
        for ok in [
            "app",
            "team/app",
            "127.0.0.1:5000/team/app",
            "localhost/a",
            "ghcr.io/a-b/c__d.e",
            "[::1]:5000/x",
        ] {
            assert!(validate_repo(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "App",
            "team/app:tag",
            "a//b",
            "a/-b",
            "x@sha256:00",
            "/a",
        ] {
            assert!(validate_repo(bad).is_err(), "{bad}");
        }
    }
}
