//! Helpers shared by the integration tests: run the real binary, make apps, start clusters.
#![allow(dead_code)]

use assert_cmd::Command;
use std::path::{Path, PathBuf};

pub const TEMPLATES: &[&str] = &[
    "horovod",
    "horovod-tensorflow",
    "horovod-elastic",
    "mpi-hello",
];
pub const BACKENDS: &[&str] = &["mpijob", "native"];

/// The hvdctl binary with a clean, non-interactive environment.
pub fn hvdctl() -> Command {
    let mut c = Command::cargo_bin("hvdctl").expect("binary built");
    c.env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .env("CI", "true")
        .env("HOME", std::env::temp_dir());
    c
}

/// Output of a finished command.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(mut c: Command) -> Out {
    let o = c.output().expect("hvdctl runs");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `hvdctl init DIR --template T --no-input`, asserting success.
pub fn init_app(parent: &Path, name: &str, template: &str) -> PathBuf {
    let dir = parent.join(name);
    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", template, "--no-input"]);
    let o = run(c);
    assert_eq!(o.code, 0, "init failed: {}", o.stderr);
    dir
}

/// Every file below `dir` (relative paths), sorted.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(root).unwrap().display().to_string());
                if p.is_dir() {
                    walk(root, &p, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
