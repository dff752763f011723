//! Helpers shared by the `image_*` tests (included with `#[path]`; as a test target of its
//! own it has no tests).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hvdctl::image::docker::{DockerClient, DockerHost};

/// What `scripts/dev-services.sh` started.
#[derive(Debug, Clone)]
pub struct Services {
    pub docker: DockerClient,
    pub registry: String,
    pub user: String,
    pub password: String,
    pub docker_host: String,
}

fn services_env() -> BTreeMap<String, String> {
    let dir =
        std::env::var("HVDCTL_SERVICES_DIR").unwrap_or_else(|_| "/tmp/hvdctl-services".into());
    let mut env = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(Path::new(&dir).join("env")) {
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                env.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    for k in [
        "DOCKER_HOST",
        "HVDCTL_TEST_REGISTRY",
        "HVDCTL_TEST_REGISTRY_USER",
        "HVDCTL_TEST_REGISTRY_PASSWORD",
    ] {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.to_string(), v);
        }
    }
    env
}

/// The running daemon and registry, or `None` (test skipped, reason printed) when they are not
/// there. Under `CI` their absence fails the test: CI starts them.
pub async fn services() -> Option<Services> {
    let env = services_env();
    let host = env
        .get("DOCKER_HOST")
        .cloned()
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let unavailable = |why: String| -> Option<Services> {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but the Docker test services are not available: {why}\n(run scripts/dev-services.sh)"
            );
        }
        eprintln!(
            "SKIPPED: Docker test services not available: {why} (start them with scripts/dev-services.sh)"
        );
        None
    };
    let docker = match DockerClient::connect_to(&DockerHost::parse(&host).ok()?).await {
        Ok(d) => d,
        Err(e) => return unavailable(e.to_string()),
    };
    let (Some(registry), Some(user), Some(password)) = (
        env.get("HVDCTL_TEST_REGISTRY"),
        env.get("HVDCTL_TEST_REGISTRY_USER"),
        env.get("HVDCTL_TEST_REGISTRY_PASSWORD"),
    ) else {
        return unavailable(
            "no registry settings (HVDCTL_TEST_REGISTRY…) in the services env file".into(),
        );
    };
    if docker
        .bollard()
        .inspect_image("hvdctl-test/busybox:latest")
        .await
        .is_err()
    {
        return unavailable("the base image hvdctl-test/busybox:latest is missing".into());
    }
    Some(Services {
        docker,
        registry: registry.clone(),
        user: user.clone(),
        password: password.clone(),
        docker_host: host,
    })
}

/// Writes `files` (path → content) under `root`, creating directories.
pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
}

/// A unique suffix for image names.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), rand::random::<u32>())
}

/// Runs the docker CLI against the test daemon; returns stdout, panics with stderr on failure.
pub fn docker_cli(host: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(docker_binary());
    cmd.args(args).env("DOCKER_HOST", host);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running docker");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn docker_binary() -> PathBuf {
    // Debian's docker.io client first (what dev-services installs), then whatever is on PATH.
    let debian = PathBuf::from("/usr/bin/docker");
    if debian.exists() {
        debian
    } else {
        PathBuf::from("docker")
    }
}

/// A Docker config dir holding `auths` for `registry`.
pub fn docker_config_with_auth(registry: &str, user: &str, password: &str) -> tempfile::TempDir {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = serde_json::json!({ "auths": { registry: { "auth": auth } } });
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

/// Removes a test image but not its untagged parents: a concurrent test building the same
/// steps may be using them as its build cache at this very moment.
pub async fn remove_image(svc: &Services, reference: &str) {
    let options = bollard::query_parameters::RemoveImageOptions {
        noprune: true,
        ..Default::default()
    };
    let _ = svc
        .docker
        .bollard()
        .remove_image(reference, Some(options), None)
        .await;
}
