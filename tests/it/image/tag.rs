//! Default tags: git short SHA when clean, plus a hash of what would be sent when not.

use crate::util;

use std::path::Path;
use std::process::Command;

use hvdctl::image::context::BuildContext;
use hvdctl::image::tag::{GitState, default_tag, git_state};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn tag_of(dir: &Path) -> String {
    default_tag(&BuildContext::open(dir, "Dockerfile").unwrap()).unwrap()
}

fn app(dir: &Path) {
    util::write_tree(
        dir,
        &[
            ("Dockerfile", "FROM scratch\nCOPY . /\n"),
            ("train.py", "print(1)\n"),
            (".dockerignore", "*.log\n"),
        ],
    );
}

#[test]
fn outside_git_the_tag_is_a_content_hash() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    app(a.path());
    app(b.path());
    let ta = tag_of(a.path());
    assert!(ta.starts_with("src-") && ta.len() == 12, "{ta}");
    assert!(ta[4..].chars().all(|c| c.is_ascii_hexdigit()));
    // Same source, same tag (different directory, different mtimes).
    assert_eq!(tag_of(b.path()), ta);
    // A file that is not sent does not change it…
    std::fs::write(a.path().join("debug.log"), "noise").unwrap();
    assert_eq!(tag_of(a.path()), ta);
    // …one that is sent does, and so does a mode change.
    std::fs::write(b.path().join("train.py"), "print(2)\n").unwrap();
    let tb = tag_of(b.path());
    assert_ne!(tb, ta);
    std::fs::write(b.path().join("train.py"), "print(1)\n").unwrap();
    assert_eq!(tag_of(b.path()), ta);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        b.path().join("train.py"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_ne!(tag_of(b.path()), ta);
}

#[test]
fn clean_git_tree_gives_the_short_sha_and_dirty_adds_the_hash() {
    let repo = tempfile::tempdir().unwrap();
    git(repo.path(), &["init", "-q"]);
    let ctx = repo.path().join("app");
    std::fs::create_dir_all(&ctx).unwrap();
    app(&ctx);
    assert_eq!(git_state(&ctx), GitState::NotARepo, "no commit yet");
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let sha = git(repo.path(), &["rev-parse", "--short=7", "HEAD"]);
    assert_eq!(tag_of(&ctx), sha);

    // Changes outside the context directory do not make it dirty.
    std::fs::write(repo.path().join("elsewhere.txt"), "x").unwrap();
    assert_eq!(tag_of(&ctx), sha);

    // An edit makes it dirty: sha + content hash, stable while the content is.
    std::fs::write(ctx.join("train.py"), "print(42)\n").unwrap();
    let dirty = tag_of(&ctx);
    assert!(
        dirty.starts_with(&format!("{sha}-")) && dirty.len() == sha.len() + 9,
        "{dirty}"
    );
    assert_eq!(tag_of(&ctx), dirty);
    // An untracked file too.
    std::fs::write(ctx.join("train.py"), "print(1)\n").unwrap();
    assert_eq!(tag_of(&ctx), sha);
    std::fs::write(ctx.join("new.py"), "x").unwrap();
    assert!(tag_of(&ctx).starts_with(&format!("{sha}-")));
}
