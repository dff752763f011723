//! Image names and the default tag.
//!
//! The default tag names the source: the short commit of the context's git `HEAD`
//! (`abc1234`) when the context is clean; with local changes (or outside git) a hash of the
//! files the build would send is added (`abc1234-d3f0a9c2`, or `src-d3f0a9c2`), so the same
//! source always gives the same tag and a different source a different one.

use std::process::Command;
use std::sync::LazyLock;

use regex::Regex;

use super::context::BuildContext;
use crate::error::{Error, Result};

/// Length of the content-hash part of a tag.
pub const HASH_LEN: usize = 8;

static TAG_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$").expect("valid regex"));
static PATH_COMPONENT_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$").expect("valid regex"));
static DOMAIN_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?$")
        .expect("valid regex")
});

/// Checks an image tag the way Docker does (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`).
pub fn validate_tag(tag: &str) -> Result<()> {
    if TAG_RE.is_match(tag) {
        Ok(())
    } else {
        Err(Error::input(format!(
            "invalid image tag {tag:?}: use letters, digits, '_', '.' and '-' (not first), at most 128 characters"
        )))
    }
}

/// Checks an image repository name (`[registry[:port]/]path`, lowercase path components).
pub fn validate_repo(repo: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::input(format!(
            "invalid image repository {repo:?}: {why}"
        )))
    };
    if repo.is_empty() {
        return bad("it is empty");
    }
    if repo.len() > 255 {
        return bad("longer than 255 characters");
    }
    if repo.contains('@')
        || repo
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
    {
        return bad("give the repository without a tag or digest");
    }
    let mut parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 1 {
        let first = parts[0];
        if first.contains('.') || first.contains(':') || first == "localhost" {
            if !DOMAIN_RE.is_match(first) {
                return bad(&format!("{first:?} is not a valid registry host"));
            }
            parts.remove(0);
        }
    }
    for p in parts {
        if !PATH_COMPONENT_RE.is_match(p) {
            return bad(&format!(
                "{p:?}: path components are lowercase letters and digits, separated by '.', '_', '__' or '-'"
            ));
        }
    }
    Ok(())
}

/// Splits `repo:tag` (a registry port is not a tag). `None` tag if there is none.
pub fn split_reference(reference: &str) -> (&str, Option<&str>) {
    match reference.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
        _ => (reference, None),
    }
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

    #[test]
    fn references() {
        assert_eq!(
            split_reference("127.0.0.1:5000/a:t"),
            ("127.0.0.1:5000/a", Some("t"))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/a"),
            ("127.0.0.1:5000/a", None)
        );
        assert_eq!(split_reference("a"), ("a", None));
    }
}
