//! What the integration tests share: the hvdctl command with a clean environment and its
//! output, apps, the fake cluster (synthetic or Docker kubelet), the Docker test services
//! with the images built once, and one rule for anything missing (daemon, registry, base
//! images, kubectl): the test fails, saying what is missing and how to start it — a test
//! never passes without testing. Only a check marked optional ([`optional`]) skips: it prints
//! `SKIPPED: why` and is counted in `skipped.txt`, which `scripts/test.sh` reports.
//!
//! The whole-process memory tests include this file with `#[path]`.
#![allow(dead_code)]

use assert_cmd::Command;
use fake_cluster::{FakeCluster, KubeletMode, Options};
use hvdctl::image::docker::{DockerClient, Endpoint};
use hvdctl::image::{BuildRequest, ProgressMode};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const TEMPLATES: &[&str] = &[
    "horovod",
    "horovod-tensorflow",
    "horovod-elastic",
    "mpi-hello",
];

// --- Missing prerequisites -----------------------------------------------------------------

/// `what` is not available: the test fails (the caller's early return is never reached).
pub fn unavailable<T>(what: &str, why: impl std::fmt::Display) -> Option<T> {
    panic!("{what} is not available: {why}");
}

/// Where optional checks that could not run are listed, one line each (`scripts/test.sh`
/// prints it after the tests).
pub fn skipped_list() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt")
}

/// An optional check cannot run here (`what` is missing): prints `SKIPPED: …`, records it in
/// [`skipped_list`] and gives `None`; the test returns early. Only for checks that need what a
/// developer's machine may lack and CI has (root for a tmpfs or a network bridge).
pub fn optional<T>(test: &str, what: &str, why: impl std::fmt::Display) -> Option<T> {
    let line = format!("{test}: {what} is not available: {why}");
    eprintln!("SKIPPED: {line}");
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skipped_list())
    {
        let _ = writeln!(f, "{line}");
    }
    None
}

// --- The binary ----------------------------------------------------------------------------

/// An empty home directory: no `~/.kube/config`, no `~/.docker/config.json`.
fn empty_home() -> PathBuf {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
    std::fs::create_dir_all(&home).expect("home directory");
    home
}

/// The hvdctl binary with a clean, non-interactive environment: no kubeconfig, no colour,
/// `CI` set, an empty home. For tests that spawn it (interrupt it, read it while it runs).
pub fn hvdctl_process() -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("hvdctl"));
    c.env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .env("CI", "true")
        .env("HOME", empty_home());
    c
}

/// [`hvdctl_process`] for tests that run it to the end.
pub fn hvdctl() -> Command {
    Command::from_std(hvdctl_process())
}

/// [`hvdctl`] run from `dir`.
pub fn hvdctl_in(dir: &Path) -> Command {
    let mut c = hvdctl();
    c.current_dir(dir);
    c
}

/// Output of a finished command.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `c` to its end (killed after 5 minutes: a hang is a failure, not a stuck suite).
pub fn run(c: Command) -> Out {
    run_for(c, Duration::from_secs(300))
}

/// [`run`], killed after `limit` (a hang then fails the test: exit -1).
pub fn run_for(mut c: Command, limit: Duration) -> Out {
    let o = c.timeout(limit).output().expect("hvdctl runs");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

// --- Apps and files ------------------------------------------------------------------------

/// hvdctl in `dir` (against `kubeconfig` when given) to its end.
pub fn hv(dir: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Out {
    let mut c = hvdctl_in(dir);
    if let Some(kc) = kubeconfig {
        c.env("KUBECONFIG", kc);
    }
    c.args(args);
    run(c)
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

/// A fresh run id for a real run: a letter naming the test and 4 random characters (run
/// ids are at most 5 characters), so runs of parallel tests and reruns never collide.
pub fn run_id(prefix: &str) -> String {
    // Run ids are at most 5 characters: a letter for the test and 4 random ones.
    const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize
        ^ (std::process::id() as usize).wrapping_mul(2_654_435_761);
    let mut s = prefix.to_string();
    let mut x = n;
    for _ in 0..4 {
        s.push(A[x % A.len()] as char);
        x /= A.len();
    }
    s
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

// --- The fake cluster ----------------------------------------------------------------------

/// A fake cluster, a temp directory and a kubeconfig for it in that directory.
pub struct Cluster {
    pub fc: FakeCluster,
    pub dir: tempfile::TempDir,
    /// `dir`'s path: where apps are made.
    pub root: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub fn start(options: Options) -> Cluster {
        let fc = FakeCluster::start(options).expect("the fake cluster starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        fc.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let root = dir.path().to_path_buf();
        Cluster {
            fc,
            dir,
            root,
            kubeconfig,
        }
    }

    /// With the synthetic kubelet (pods move through their phases, nothing runs).
    pub fn synthetic(mpi_operator: bool) -> Cluster {
        Cluster::start(Options {
            mpi_operator,
            ..Default::default()
        })
    }

    /// With the Docker kubelet: pods are real containers on the test daemon.
    pub fn docker_kubelet(mpi_operator: bool) -> Cluster {
        Cluster::start(Options {
            kubelet: KubeletMode::Docker,
            pause_image: Some(busybox_image()),
            mpi_operator,
            ..Default::default()
        })
    }

    /// hvdctl against this cluster on the app in `dir` (`-C dir`).
    pub fn hv(&self, dir: &Path) -> Command {
        let mut c = hvdctl();
        c.env("KUBECONFIG", &self.kubeconfig).arg("-C").arg(dir);
        c
    }

    /// hvdctl against this cluster, spawned from its directory (no hvdctl.yaml there).
    pub fn hvdctl_process(&self, args: &[&str]) -> std::process::Command {
        let mut c = hvdctl_process();
        c.args(args)
            .current_dir(self.dir.path())
            .env("KUBECONFIG", &self.kubeconfig);
        c
    }

    /// kubectl against this cluster, for tests that spawn it (see [`kubectl_available`]).
    pub fn kubectl_process(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("kubectl");
        c.args(args).env("KUBECONFIG", &self.kubeconfig);
        c
    }

    /// kubectl's stdout, asserting success; `None` when kubectl is not installed (SKIPPED,
    /// a failure under CI).
    pub fn kubectl(&self, args: &[&str]) -> Option<String> {
        if !kubectl_available() {
            return None;
        }
        let o = self
            .kubectl_process(args)
            .arg("--cache-dir")
            .arg(self.root.join("kube-cache"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `kind/name` of every object hvdctl may create that matches `selector`.
    pub fn ours(&self, selector: &str) -> Vec<String> {
        let mut names = Vec::new();
        for r in [
            "mpijobs",
            "jobs",
            "pods",
            "services",
            "configmaps",
            "secrets",
        ] {
            for o in self.fc.list(r, None, selector) {
                names.push(format!(
                    "{r}/{}",
                    o["metadata"]["name"].as_str().unwrap_or_default()
                ));
            }
        }
        names
    }
}

/// Whether kubectl can be run: when not, the kubectl cross-checks are SKIPPED (a failure
/// under CI).
pub fn kubectl_available() -> bool {
    let found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output();
    match found {
        Ok(o) if o.status.success() => true,
        Ok(o) => unavailable::<()>(
            "kubectl",
            format!(
                "`kubectl version --client` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
        )
        .is_some(),
        Err(e) => unavailable::<()>("kubectl", format!("{e} (install kubectl)")).is_some(),
    }
}

// --- Docker --------------------------------------------------------------------------------

/// What `scripts/dev-services.sh` started.
#[derive(Debug, Clone)]
pub struct Services {
    pub docker: DockerClient,
    pub registry: String,
    pub user: String,
    pub password: String,
    pub docker_host: String,
}

/// The services' env file, overridden by the same variables in the environment.
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

pub fn busybox_image() -> String {
    std::env::var("HVDCTL_TEST_BUSYBOX_IMAGE")
        .unwrap_or_else(|_| "hvdctl-test/busybox:latest".into())
}

pub fn debian_image() -> String {
    std::env::var("HVDCTL_TEST_DEBIAN_IMAGE")
        .unwrap_or_else(|_| "hvdctl-test/debian:bookworm".into())
}

/// A runtime for the synchronous tests' Docker calls.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const START_SERVICES: &str = "start them with scripts/dev-services.sh";

/// The test daemon holding `image`, or `None` (SKIPPED; a failure under CI).
pub async fn docker_with(image: &str) -> Option<(DockerClient, String)> {
    let host = services_env()
        .remove("DOCKER_HOST")
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let what = "the Docker test services";
    let docker = match Endpoint::parse(&host) {
        Ok(h) => match DockerClient::connect_to(&h).await {
            Ok(d) => d,
            Err(e) => return unavailable(what, format!("{e} ({START_SERVICES})")),
        },
        Err(e) => return unavailable(what, format!("DOCKER_HOST {host}: {e}")),
    };
    if docker.bollard().inspect_image(image).await.is_err() {
        return unavailable(
            what,
            format!("the base image {image} is missing ({START_SERVICES})"),
        );
    }
    Some((docker, host))
}

/// The daemon with the Debian base image, for the tests that run hvdctl's local backend or
/// the Docker kubelet (or `None`: SKIPPED; a failure under CI).
pub fn docker() -> Option<DockerClient> {
    rt().block_on(docker_with(&debian_image())).map(|(d, _)| d)
}

/// The daemon with the busybox image and the registry (or `None`: SKIPPED; a failure under CI).
pub async fn services() -> Option<Services> {
    let (docker, docker_host) = docker_with(&busybox_image()).await?;
    let env = services_env();
    let (Some(registry), Some(user), Some(password)) = (
        env.get("HVDCTL_TEST_REGISTRY"),
        env.get("HVDCTL_TEST_REGISTRY_USER"),
        env.get("HVDCTL_TEST_REGISTRY_PASSWORD"),
    ) else {
        return unavailable(
            "the Docker test services",
            format!(
                "no registry settings (HVDCTL_TEST_REGISTRY…) in the services env file ({START_SERVICES})"
            ),
        );
    };
    Some(Services {
        docker,
        registry: registry.clone(),
        user: user.clone(),
        password: password.clone(),
        docker_host,
    })
}

/// An image built from `dir` with `BASE_IMAGE` = the Debian base image, tagged with a hash
/// of `inputs` and the base image's id: built once per content, reused by later runs.
/// Callers keep the reference in a `OnceLock` so one test process asks once.
pub fn image_built_once(docker: &DockerClient, repo: &str, dir: &Path, inputs: &[&[u8]]) -> String {
    image_built_once_on(docker, repo, dir, inputs, &debian_image())
}

/// `image_built_once` on another base image (`BASE_IMAGE` build argument).
pub fn image_built_once_on(
    docker: &DockerClient,
    repo: &str,
    dir: &Path,
    inputs: &[&[u8]],
    base: &str,
) -> String {
    let mut h = Sha256::new();
    for i in inputs {
        h.update(i);
    }
    let rt = rt();
    let base_id = rt
        .block_on(docker.bollard().inspect_image(base))
        .unwrap_or_else(|e| panic!("base image {base}: {e}"))
        .id;
    h.update(base_id.unwrap_or_default().as_bytes());
    let tag = format!("{:x}", h.finalize())[..16].to_string();
    let reference = format!("{repo}:{tag}");
    if rt
        .block_on(docker.bollard().inspect_image(&reference))
        .is_ok()
    {
        eprintln!("using cached {reference}");
        return reference;
    }
    let started = Instant::now();
    let mut req = BuildRequest::new(dir, repo, &tag);
    req.build_args.insert("BASE_IMAGE".into(), base.to_string());
    req.progress = ProgressMode::Plain;
    let mut log: Vec<u8> = Vec::new();
    if let Err(e) = rt.block_on(hvdctl::image::build(docker, &req, &mut log)) {
        panic!(
            "building {reference} failed: {e}\n{}",
            String::from_utf8_lossy(&log)
        );
    }
    eprintln!("built {reference} in {:.0?}", started.elapsed());
    reference
}

/// Runs the docker CLI against the test daemon; returns stdout, panics with stderr on failure.
pub fn docker_cli(host: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    // Debian's docker.io client first (what dev-services installs), then whatever is on PATH.
    let debian = Path::new("/usr/bin/docker");
    let bin = if debian.exists() {
        debian
    } else {
        Path::new("docker")
    };
    let mut cmd = std::process::Command::new(bin);
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

/// The Horovod (PyTorch) base made by `scripts/dev-services.sh horovod`, or None (SKIPPED) —
/// a failure under CI, where `scripts/test.sh` makes it.
pub fn horovod_base(docker: &DockerClient) -> Option<String> {
    base_image(
        docker,
        "HVDCTL_TEST_HOROVOD_IMAGE",
        "hvdctl-test/horovod:0.28.1-cpu",
        "horovod",
    )
}

/// The Horovod TensorFlow base made by `scripts/dev-services.sh horovod-tensorflow`, or None
/// (SKIPPED) — a failure under CI.
pub fn horovod_tensorflow_base(docker: &DockerClient) -> Option<String> {
    base_image(
        docker,
        "HVDCTL_TEST_HOROVOD_TENSORFLOW_IMAGE",
        "hvdctl-test/horovod-tensorflow:0.28.1-cpu",
        "horovod-tensorflow",
    )
}

/// The image `var` names (else `default`) if the daemon has it; `made_by` is the argument of
/// `scripts/dev-services.sh` that makes it.
fn base_image(docker: &DockerClient, var: &str, default: &str, made_by: &str) -> Option<String> {
    let base = std::env::var(var).unwrap_or_else(|_| default.into());
    if rt().block_on(docker.bollard().inspect_image(&base)).is_ok() {
        return Some(base);
    }
    unavailable(
        "a Horovod base image",
        format!("{base} is missing (make it with scripts/dev-services.sh {made_by})"),
    )
}

/// The directory of TensorBoard's wheels that `scripts/dev-services.sh horovod` downloads
/// (`HVDCTL_TEST_TENSORBOARD_WHEELS`), or None (SKIPPED) — a failure under CI.
pub fn tensorboard_wheels() -> Option<PathBuf> {
    let var = "HVDCTL_TEST_TENSORBOARD_WHEELS";
    let dir = std::env::var(var)
        .ok()
        .or_else(|| services_env().remove(var))
        .map(PathBuf::from);
    match dir {
        Some(d) if d.join(".complete").is_file() => Some(d),
        Some(d) => unavailable(
            "TensorBoard's wheels",
            format!("{} holds no complete download", d.display()),
        ),
        None => unavailable(
            "TensorBoard's wheels",
            format!("no {var} (download them with scripts/dev-services.sh horovod)"),
        ),
    }
}

/// The pinned Kubeflow SDK (`TrainerClient`) the SDK test runs; `scripts/dev-services.sh`
/// installs the same.
pub const KUBEFLOW_SDK_REQUIREMENT: &str = "kubeflow==0.5.0";

/// The python of a venv holding [`KUBEFLOW_SDK_REQUIREMENT`]: `HVDCTL_TEST_KUBEFLOW_SDK`, else
/// `<services dir>/kubeflow-sdk`, made there once per machine when missing (pip from the
/// package index, into a directory beside it that is then moved into place, so a half-made
/// venv is never used and two test processes do not share one being made).
pub fn kubeflow_sdk() -> Option<PathBuf> {
    static MADE: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = made.as_ref() {
        return Some(p.clone());
    }
    let var = "HVDCTL_TEST_KUBEFLOW_SDK";
    if let Some(p) = std::env::var(var)
        .ok()
        .or_else(|| services_env().remove(var))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
    {
        *made = Some(p.clone());
        return Some(p);
    }
    let dir = PathBuf::from(
        std::env::var("HVDCTL_SERVICES_DIR").unwrap_or_else(|_| "/tmp/hvdctl-services".into()),
    )
    .join("kubeflow-sdk");
    let python = dir.join("bin/python");
    let complete = |d: &Path| {
        std::fs::read_to_string(d.join(".complete")).ok().as_deref()
            == Some(KUBEFLOW_SDK_REQUIREMENT)
    };
    if !complete(&dir) {
        let tmp = dir.with_file_name(format!("kubeflow-sdk.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let step = |c: &mut std::process::Command| -> Result<(), String> {
            let o = c
                .env("PIP_NO_INPUT", "1")
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("{c:?}: {e}"))?;
            if o.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{c:?}: {}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
        };
        let made_now = step(
            std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(&tmp),
        )
        .and_then(|()| {
            step(std::process::Command::new(tmp.join("bin/python")).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                KUBEFLOW_SDK_REQUIREMENT,
            ]))
        })
        .and_then(|()| {
            std::fs::write(tmp.join(".complete"), KUBEFLOW_SDK_REQUIREMENT)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = made_now {
            let _ = std::fs::remove_dir_all(&tmp);
            return unavailable(
                "the Kubeflow SDK",
                format!(
                    "cannot make a venv with {KUBEFLOW_SDK_REQUIREMENT}: {e} (or run scripts/dev-services.sh)"
                ),
            );
        }
        // Another process may have made it meanwhile: its venv is as good.
        if !complete(&dir) {
            let _ = std::fs::remove_dir_all(&dir);
            if std::fs::rename(&tmp, &dir).is_err() && !complete(&dir) {
                return unavailable(
                    "the Kubeflow SDK",
                    format!("cannot move its venv to {}", dir.display()),
                );
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
    *made = Some(python.clone());
    Some(python)
}

/// The image of a built-in template's app (`hvdctl init NAME --template TEMPLATE`) on `base`,
/// tagged `hvdctl-test/app-TEMPLATE:<hash of the app's files and the base>`: built once per
/// content and machine, and once per test process (tests asking at the same time wait for
/// one build).
pub fn template_image(docker: &DockerClient, template: &str, base: &str) -> String {
    static BUILT: std::sync::Mutex<BTreeMap<(String, String), String>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let key = (template.to_string(), base.to_string());
    if let Some(image) = built.get(&key) {
        return image.clone();
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "app", template);
    let files: Vec<(String, Vec<u8>)> = tree(&dir)
        .into_iter()
        .map(|f| {
            let content = std::fs::read(dir.join(&f)).unwrap_or_default();
            (f, content)
        })
        .collect();
    let inputs: Vec<&[u8]> = files
        .iter()
        .flat_map(|(f, content)| [f.as_bytes(), content.as_slice()])
        .collect();
    let image = image_built_once_on(
        docker,
        &format!("hvdctl-test/app-{template}"),
        &dir,
        &inputs,
        base,
    );
    built.insert(key, image.clone());
    image
}

/// Held by every test that trains with Horovod (several containers busy for tens of seconds):
/// those run one at a time, so that on a small machine one training does not starve another
/// into its timeouts. Lighter tests still run beside them.
pub fn one_training_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// --- Waiting on events ---------------------------------------------------------------------

/// Waits until the fake cluster has answered `more` further requests counted as `key`
/// (`"list pods"`, `"watch events"`, …) since `from` (a count read before): proof that the
/// processes under test looked again, where a sleep would only hope they did. Panics after
/// `timeout` naming the count reached.
pub fn wait_requests(fc: &FakeCluster, key: &str, from: u64, more: u64, timeout: Duration) {
    let end = Instant::now() + timeout;
    loop {
        let n = fc.request_counts().get(key).copied().unwrap_or(0);
        if n >= from + more {
            return;
        }
        assert!(
            Instant::now() < end,
            "{more} more {key:?} requests expected within {timeout:?}; {} came",
            n - from.min(n)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many requests the fake cluster has answered as `key` so far.
pub fn requests(fc: &FakeCluster, key: &str) -> u64 {
    fc.request_counts().get(key).copied().unwrap_or(0)
}
