//! The `local` backend end to end, against the real Docker engine: the `mpi-hello` app's image
//! (Open MPI, sshd, mpi4py) built by hvdctl from the locally made Debian base, deployed as 2
//! workers × 2 slots, its logs, status, events, and undeploy leaving nothing behind; a
//! failing command, a worker killed mid-run, an interrupted deploy; no private key anywhere
//! it should not be.
//!
//! Needs `scripts/dev-services.sh start` (dockerd and `hvdctl-test/debian:bookworm`). Without
//! them each test fails, saying what is missing.

use crate::util::*;
use hvdctl::image::docker::DockerClient;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A fresh `mpi-hello` app in a temp dir.
fn new_app(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), name, "mpi-hello");
    (tmp, dir)
}

/// The `mpi-hello` app's image, built once per content, so reruns reuse it.
fn image(docker: &DockerClient) -> String {
    template_image(docker, "mpi-hello", &debian_image())
}

/// hvdctl run from `dir` to its end; it never prints a private key.
fn run_in(dir: &Path, args: &[&str]) -> Out {
    let mut c = hvdctl_in(dir);
    c.args(args);
    let out = run(c);
    for s in [&out.stdout, &out.stderr] {
        assert!(
            !s.contains("PRIVATE KEY"),
            "a private key was printed by hvdctl {args:?}"
        );
    }
    out
}

/// What of run `id` exists on the engine and on disk: (containers, networks, private dirs).
pub(crate) fn leftovers(docker: &DockerClient, job: &str, id: &str) -> (usize, usize, usize) {
    let rt = rt();
    let filters = HashMap::from([("label".to_string(), vec![format!("hvdctl.io/run={id}")])]);
    let cs = rt
        .block_on(docker.bollard().list_containers(Some(
            bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            },
        )))
        .unwrap();
    let nets = rt
        .block_on(docker.bollard().list_networks(Some(
            bollard::query_parameters::ListNetworksOptions {
                filters: Some(HashMap::from([(
                    "name".to_string(),
                    vec![format!("hvdctl-{job}")],
                )])),
            },
        )))
        .unwrap();
    let dirs = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("hvdctl-local-{job}."))
        })
        .count();
    (cs.len(), nets.len(), dirs)
}

fn private_dir(job: &str) -> Option<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("hvdctl-local-{job}."))
        })
        .map(|e| e.path())
}

/// Lines of the workers in a `logs` output that are not hvdctl's own: none when the
/// workers' sshd logs only errors (no accepted key, no disconnect, no readiness probe),
/// though every rank was started over ssh.
pub(crate) fn sshd_noise(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("worker-"))
        .filter(|l| !l.contains(" | hvdctl: "))
        .collect()
}

/// Whether the events table has a row (TIME TYPE REASON OBJECT MESSAGE) with these columns.
fn has_event(table: &str, type_: &str, reason: &str, object: &str) -> bool {
    table.lines().any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() >= 4 && cols[1] == type_ && cols[2] == reason && cols[3] == object
    })
}

fn undeploy_and_check(docker: &DockerClient, dir: &Path, id: &str) {
    let job = format!("hello-{id}");
    let u = run_in(dir, &["undeploy", id]);
    assert_eq!(u.code, 0, "undeploy: {}", u.stderr);
    assert_eq!(
        leftovers(docker, &job, id),
        (0, 0, 0),
        "undeploy left something behind"
    );
    // Gone from Docker, but these tests have no kubeconfig: nobody can say the run is not
    // on a cluster, so a second undeploy does not claim success.
    let again = run_in(dir, &["undeploy", id]);
    assert_eq!(again.code, 1, "second undeploy: {}", again.stderr);
    assert!(
        again.stderr.contains(&format!(
            "run `{id}` not found: looked in the Docker engine"
        )) && again
            .stderr
            .contains("Kubernetes could not be asked: no kubeconfig"),
        "{}",
        again.stderr
    );
}

#[test]
fn mpi_hello_runs_two_workers_by_two_slots_and_leaves_nothing_behind() {
    let Some(docker) = docker() else { return };
    let image = image(&docker);
    let (_tmp, dir) = new_app("hello");
    let id = run_id("a");
    let job = format!("hello-{id}");
    let t = Instant::now();
    let d = run_in(
        &dir,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "workers=2",
            "--set",
            "slotsPerWorker=2",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    eprintln!("deploy took {:.1?}", t.elapsed());

    // While it exists: the private directory is 0700, its key 0600, and only the launcher's
    // ssh directory holds the private key.
    use std::os::unix::fs::PermissionsExt;
    let pdir = private_dir(&job).expect("the run's private directory exists");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&pdir), 0o700);
    assert_eq!(mode(&pdir.join("ssh-launcher/ssh-privatekey")), 0o600);
    assert!(!pdir.join("ssh-worker/ssh-privatekey").exists());

    let t = Instant::now();
    let logs = run_in(&dir, &["logs", "-f", &id]);
    eprintln!("logs -f took {:.1?}", t.elapsed());
    assert_eq!(logs.code, 0, "logs -f: {}\n{}", logs.stdout, logs.stderr);
    for r in 0..4 {
        assert!(
            logs.stdout
                .contains(&format!("rank {r} of 4 on {job}-worker-")),
            "rank {r} missing:\n{}",
            logs.stdout
        );
    }
    assert!(
        logs.stdout
            .contains("launcher r0 | sum of ranks 0..3 = 6 (expected 6) OK"),
        "{}",
        logs.stdout
    );
    assert!(
        logs.stdout.lines().any(|l| l.starts_with("worker-0 | ")),
        "{}",
        logs.stdout
    );
    assert_eq!(
        sshd_noise(&logs.stdout),
        Vec::<&str>::new(),
        "{}",
        logs.stdout
    );
    assert!(
        logs.stdout.lines().any(|l| l.starts_with("worker-1 | ")),
        "{}",
        logs.stdout
    );
    // The sum line is printed before the launcher's end, and the end is the last launcher line.
    let last_launcher = logs
        .stdout
        .lines()
        .rfind(|l| l.starts_with("launcher | "))
        .unwrap();
    assert_eq!(
        last_launcher,
        "launcher | hvdctl: training command exited with code 0"
    );

    // JSON logs: one object per line with the keys of Kubernetes runs' lines.
    let j = run_in(&dir, &["logs", &id, "-o", "json", "--role", "launcher"]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let first: Value = serde_json::from_str(j.stdout.lines().next().unwrap()).unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "time",
            "engine",
            "pod",
            "container",
            "role",
            "index",
            "rank",
            "message"
        ]
    );
    assert_eq!(first["engine"], "docker");
    assert_eq!(first["pod"], format!("{job}-launcher"));
    assert_eq!(first["role"], "launcher");
    assert_eq!(first["index"], Value::Null);
    assert_eq!(first["rank"], Value::Null);
    let w = run_in(&dir, &["logs", &id, "-o", "json", "--role", "worker"]);
    assert_eq!(w.code, 0, "{}", w.stderr);
    for l in w.stdout.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let i = v["index"].as_u64().expect("a worker's line has its index");
        assert_eq!(v["pod"], format!("{job}-worker-{i}"));
        assert_eq!(v["container"], "worker");
    }

    let s = run_in(&dir, &["status", &id, "-o", "json"]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["run"], id.as_str());
    assert_eq!(v["job"], job.as_str());
    assert_eq!(v["engine"], "docker");
    assert_eq!(v["namespace"], Value::Null);
    assert_eq!(v["context"], Value::Null);
    assert_eq!(v["backend"], "local");
    assert_eq!(v["state"], "Succeeded");
    let pods = v["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 3);
    assert_eq!(pods[0]["name"], format!("{job}-launcher"));
    assert_eq!(pods[0]["role"], "launcher");
    for p in pods {
        assert_eq!(p["phase"], "Succeeded", "{p}");
        assert_eq!(p["restarts"], 0);
    }
    let w = run_in(&dir, &["status", "--wait", &id]);
    assert_eq!(w.code, 0);
    assert!(w.stdout.contains("State:      Succeeded"), "{}", w.stdout);

    let e = run_in(&dir, &["events", &id]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    assert!(
        has_event(
            &e.stdout,
            "Normal",
            "Created",
            &format!("Network/hvdctl-{job}")
        ),
        "{}",
        e.stdout
    );
    assert!(
        has_event(
            &e.stdout,
            "Normal",
            "Started",
            &format!("Container/{job}-worker-1")
        ),
        "{}",
        e.stdout
    );
    assert!(
        has_event(
            &e.stdout,
            "Normal",
            "Completed",
            &format!("Container/{job}-launcher")
        ),
        "{}",
        e.stdout
    );

    // The key is in no image layer or config.
    let rt = rt();
    let hist = rt.block_on(docker.bollard().image_history(&image)).unwrap();
    assert!(
        hist.iter()
            .all(|h| !h.created_by.contains("PRIVATE KEY")
                && !h.created_by.contains("ssh-privatekey"))
    );
    let info = rt.block_on(docker.bollard().inspect_image(&image)).unwrap();
    assert!(
        !serde_json::to_string(&info)
            .unwrap()
            .contains("PRIVATE KEY")
    );
    // …nor in any container's configuration (env, labels, command).
    for c in ["launcher", "worker-0", "worker-1"] {
        let i = rt
            .block_on(
                docker
                    .bollard()
                    .inspect_container(&format!("{job}-{c}"), None),
            )
            .unwrap();
        assert!(
            !serde_json::to_string(&i).unwrap().contains("PRIVATE KEY"),
            "{c}"
        );
    }

    undeploy_and_check(&docker, &dir, &id);
    assert!(!pdir.exists(), "the private directory survived undeploy");
    let runs = std::fs::read_to_string(dir.join(".hvdctl/runs.json")).unwrap_or_default();
    assert!(!runs.contains(&id), "undeploy forgets the run: {runs}");
}

#[test]
fn a_failing_command_fails_logs_and_status_with_exit_code_1() {
    let Some(docker) = docker() else { return };
    let image = image(&docker);
    let (_tmp, dir) = new_app("hello");
    let id = run_id("f");
    let d = run_in(
        &dir,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "command=[python3, -c, 'import sys; print(\"bye\"); sys.exit(3)']",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    let logs = run_in(&dir, &["logs", "-f", &id]);
    assert_eq!(
        logs.code, 1,
        "logs -f of a failed job: {}\n{}",
        logs.stdout, logs.stderr
    );
    // The first rank to exit makes mpirun abort the other, which may not have printed yet.
    assert!(
        logs.stdout.contains("launcher r0 | bye") || logs.stdout.contains("launcher r1 | bye"),
        "{}",
        logs.stdout
    );
    assert!(
        logs.stdout
            .contains("launcher | hvdctl: training command exited with code"),
        "{}",
        logs.stdout
    );
    let s = run_in(&dir, &["status", "--wait", &id, "-o", "json"]);
    assert_eq!(s.code, 1, "{}", s.stderr);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["state"], "Failed");
    assert_eq!(v["pods"][0]["phase"], "Failed");
    undeploy_and_check(&docker, &dir, &id);
}

/// The workers' sshd logs only errors, yet an ssh failure still shows: with `HOME` pointing
/// elsewhere, the run's key is installed where sshd does not look (root's home comes from
/// /etc/passwd), so every login is refused. The launcher's line says so (`Permission denied
/// (publickey)`), `logs -f` and `status --wait` exit 1, and the run's reason names it.
#[test]
fn an_ssh_failure_reaches_the_logs_and_the_reason() {
    let Some(docker) = docker() else { return };
    let image = image(&docker);
    let (_tmp, dir) = new_app("hello");
    let id = run_id("h");
    let job = format!("hello-{id}");
    let d = run_in(
        &dir,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "workers=2",
            "--set",
            "env.HOME=/tmp/not-roots-home",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    let logs = run_in(&dir, &["logs", "-f", &id]);
    assert_eq!(logs.code, 1, "logs -f: {}\n{}", logs.stdout, logs.stderr);
    assert!(
        logs.stdout.lines().any(|l| l.starts_with("launcher | ")
            && l.contains(&format!("@{job}-worker-"))
            && l.contains("Permission denied (publickey")),
        "{}",
        logs.stdout
    );
    let w = run_in(&dir, &["status", "--wait", &id, "-o", "json"]);
    assert_eq!(w.code, 1, "status --wait: {}", w.stderr);
    let v: Value = serde_json::from_str(&w.stdout).unwrap();
    assert_eq!(v["state"], "Failed", "{v}");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("launcher {job}-launcher failed"))
            && reason.contains("ssh to a worker: ")
            && reason.contains("Permission denied (publickey"),
        "{reason}"
    );
    undeploy_and_check(&docker, &dir, &id);
}

#[test]
fn a_worker_killed_mid_run_is_reported() {
    let Some(docker) = docker() else { return };
    let image = image(&docker);
    let (_tmp, dir) = new_app("hello");
    let id = run_id("k");
    let job = format!("hello-{id}");
    let d = run_in(
        &dir,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "parameters.rounds=600",
            "--set",
            "parameters.interval-seconds=0.1",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    // Wait until the ranks are at work, then kill worker 1.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let l = run_in(&dir, &["logs", &id, "--role", "launcher"]);
        if l.stdout.contains("round 3 of 600") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job never got going:\n{}\n{}",
            l.stdout,
            l.stderr
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let rt = rt();
    rt.block_on(
        docker
            .bollard()
            .kill_container(&format!("{job}-worker-1"), None),
    )
    .unwrap();
    let logs = run_in(&dir, &["logs", "-f", &id]);
    assert_eq!(logs.code, 1, "logs -f after a worker died: {}", logs.stderr);
    // The dead worker's last lines are there.
    assert!(
        logs.stdout.lines().any(|l| l.starts_with("worker-1 | ")),
        "{}",
        logs.stdout
    );
    let s = run_in(&dir, &["status", &id, "-o", "json"]);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["state"], "Failed");
    let w1 = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == format!("{job}-worker-1"))
        .unwrap()
        .clone();
    assert_eq!(w1["phase"], "Failed", "{w1}");
    assert_eq!(w1["lastTermination"], "Error (exit 137)", "{w1}");
    let text = run_in(&dir, &["status", &id]);
    assert!(text.stdout.contains("Error (exit 137)"), "{}", text.stdout);
    let e = run_in(&dir, &["events", &id]);
    assert!(
        has_event(
            &e.stdout,
            "Warning",
            "Failed",
            &format!("Container/{job}-worker-1")
        ),
        "{}",
        e.stdout
    );
    undeploy_and_check(&docker, &dir, &id);
}

#[test]
fn an_interrupted_deploy_leaves_nothing_running() {
    let Some(docker) = docker() else { return };
    let image = image(&docker);
    let (_tmp, dir) = new_app("hello");
    let mut interrupted = 0;
    // Interrupted at a point of the deploy however slow the machine: once its network exists
    // (k = 0), or its k-th container — the Ctrl-C handler listens from the network on
    // (src/local/deploy.rs: `create` runs under `select!` with `ctrl_c`).
    for (n, k) in [0usize, 1, 2, 3].into_iter().enumerate() {
        let id = run_id(&format!("i{n}"))[..5].to_string();
        let job = format!("hello-{id}");
        let mut child = hvdctl_process()
            .current_dir(&dir)
            .args([
                "deploy",
                "--backend",
                "local",
                "--image",
                &image,
                "--run-id",
                &id,
                "--set",
                "workers=4",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let (containers, networks, _) = leftovers(&docker, &job, &id);
            let reached = if k == 0 {
                networks > 0
            } else {
                containers >= k
            };
            if reached || child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "k={k}: no network and {containers} containers after 120 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("PRIVATE KEY"));
        let code = out.status.code();
        // Interrupted (130), or — when the signal came after the end — deployed (0).
        assert!(
            code == Some(130) || code == Some(0),
            "k={k}: {code:?} {stderr}"
        );
        if code == Some(130) {
            interrupted += 1;
            assert_eq!(leftovers(&docker, &job, &id), (0, 0, 0), "k={k}: {stderr}");
            let runs = std::fs::read_to_string(dir.join(".hvdctl/runs.json")).unwrap_or_default();
            assert!(
                !runs.contains(&format!("\"{id}\"")),
                "an interrupted deploy is forgotten"
            );
        } else {
            undeploy_and_check(&docker, &dir, &id);
        }
    }
    assert!(
        interrupted > 0,
        "no deploy was interrupted mid-way: the test did not test anything"
    );
}

#[test]
fn pvc_volumes_are_refused_before_anything_is_created() {
    let (_tmp, dir) = new_app("hello");
    let out = run_in(
        &dir,
        &[
            "deploy",
            "--backend",
            "local",
            "--run-id",
            "pvc1",
            "--set",
            "volumes=[{name: scratch, mountPath: /scratch, pvc: {claimName: scratch}}]",
        ],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("volume `scratch`") && out.stderr.contains("hostPath"),
        "{}",
        out.stderr
    );
    assert!(private_dir("hello-pvc1").is_none());
    assert!(!dir.join(".hvdctl/runs.json").exists());
}

/// Containers the Docker kubelet still has for pods of job `job`.
/// Waits up to 15 s for the Docker kubelet to remove the containers of deleted pods (it does
/// so after the API objects are gone, as a kubelet does), then returns what is left.
pub(crate) fn kubelet_leftovers(
    docker: &DockerClient,
    fc: &fake_cluster::FakeCluster,
    job: &str,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = kubelet_containers(docker, fc, job);
        if left.is_empty() || Instant::now() > deadline {
            return left.into_iter().map(|(pod, _)| pod).collect();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The containers the Docker kubelet has for pods of job `job`, running or not: (pod as
/// `namespace/name`, container id).
pub(crate) fn kubelet_containers(
    docker: &DockerClient,
    fc: &fake_cluster::FakeCluster,
    job: &str,
) -> Vec<(String, String)> {
    let id = fc.docker_id().expect("docker kubelet");
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("io.hvdctl.fake-cluster.id={id}")],
    )]);
    let cs = rt()
        .block_on(docker.bollard().list_containers(Some(
            bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            },
        )))
        .unwrap();
    cs.into_iter()
        .filter_map(|c| {
            let pod = c
                .labels
                .as_ref()?
                .get("io.hvdctl.fake-cluster.pod")?
                .clone();
            Some((pod, c.id?))
        })
        .filter(|(pod, _)| pod.starts_with(&format!("default/{job}-")))
        .collect()
}

/// mpi-hello through Kubernetes manifests executed by real containers: hvdctl's native
/// backend (Service, ssh Secret, hostfile ConfigMap, worker pods, launcher Job) on the fake
/// cluster's Docker kubelet. Every rank reports, `logs -f` exits 0, status says Succeeded,
/// undeploy leaves no container.
#[test]
fn native_backend_runs_for_real_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("k");
    let job = format!("hello-{id}");
    let started = Instant::now();
    let d = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args([
            "deploy",
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--logs",
        ])
        .args(["--set", "workers=2", "--set", "slotsPerWorker=2"])
        // The app's own mapping replaces hvdctl's `-map-by slot` (Open MPI refuses two).
        .args(["--set", "mpi.extraArgs=[--map-by, node]"])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr),
    );
    eprintln!(
        "native 2x2 on the docker kubelet: {:.1?}",
        started.elapsed()
    );
    assert_eq!(d.status.code(), Some(0), "{out}\n{err}");
    for r in 0..4 {
        assert!(out.contains(&format!("rank {r} of 4")), "rank {r}: {out}");
    }
    assert!(out.contains("= 6 (expected 6) OK"), "{out}");
    assert_eq!(sshd_noise(&out), Vec::<&str>::new(), "{out}");
    // By node: ranks 0 and 2 on worker 0, 1 and 3 on worker 1.
    for (r, w) in [(0, 0), (1, 1), (2, 0), (3, 1)] {
        assert!(
            out.contains(&format!("rank {r} of 4 on {job}-worker-{w}")),
            "rank {r}: {out}"
        );
    }
    let s = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["status", &id, "-o", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["state"], "Succeeded", "{v}");
    let u = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["undeploy", &id])
        .output()
        .unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());
}

/// The same as non-root (`securityContext.runAsUser: 1000`, group 1000, fsGroup 1000): the
/// workers' sshd runs as the user on port 2222, and every rank runs as uid 1000.
#[test]
fn native_backend_runs_non_root_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("u");
    let job = format!("hello-{id}");
    let d = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args([
            "deploy",
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--logs",
        ])
        .args([
            "--set",
            "securityContext.runAsUser=1000",
            "--set",
            "securityContext.runAsGroup=1000",
        ])
        .args([
            "--set",
            "securityContext.fsGroup=1000",
            "--set",
            "command=[bash,-c,id -u; python3 /app/hello.py]",
        ])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr),
    );
    assert_eq!(d.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("= 1 (expected 1) OK"), "{out}");
    let ids: Vec<&str> = out.lines().filter(|l| l.ends_with("| 1000")).collect();
    assert_eq!(ids.len(), 2, "every rank runs as uid 1000: {out}");
    assert!(
        out.contains("port 2222"),
        "sshd as the user on its own port: {out}"
    );
    let u = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["undeploy", &id])
        .output()
        .unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());
}

/// The local backend as non-root (`runAsUser: 1000`): sshd as the user on port 2222, every
/// rank as uid 1000.
#[test]
fn local_backend_runs_non_root() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("n");
    let job = format!("hello-{id}");
    let d = hvdctl_in(&dir)
        .args([
            "deploy",
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--logs",
        ])
        .args([
            "--set",
            "securityContext.runAsUser=1000",
            "--set",
            "securityContext.runAsGroup=1000",
        ])
        .args(["--set", "command=[bash,-c,id -u; python3 /app/hello.py]"])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr),
    );
    assert_eq!(d.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("= 1 (expected 1) OK"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with("| 1000")).count(),
        2,
        "{out}"
    );
    undeploy_and_check(&docker, &dir, &id);
    let _ = job;
}

/// A launcher pod deleted mid-run (as `kubectl delete pod` does: TERM, then the grace
/// period) stops its command and the workers: they end within the grace period + 5 s.
#[test]
fn a_deleted_native_launcher_stops_the_workers() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("t");
    let job = format!("hello-{id}");
    let d = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args([
            "deploy",
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--wait",
        ])
        .args(["--set", "command=[bash,-c,echo started; sleep 600]"])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    assert_eq!(
        d.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&d.stderr)
    );
    let pods = |role: &str| {
        fc.list(
            "pods",
            Some("default"),
            &format!("hvdctl.io/run={id},hvdctl.io/role={role}"),
        )
    };
    // The command runs on every worker before the launcher goes.
    let t0 = Instant::now();
    loop {
        let l = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args(["logs", &id, "--role", "launcher"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&l.stdout)
            .matches("started")
            .count()
            >= 2
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let launcher = pods("launcher")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let grace = pods("launcher")[0]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    let deleted = Instant::now();
    fc.delete("pods", "default", &launcher, None).unwrap();
    let limit = Duration::from_secs(grace as u64 + 5);
    loop {
        let running: Vec<String> = pods("worker")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running" || p["status"]["phase"] == "Pending")
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        if running.is_empty() {
            break;
        }
        assert!(
            deleted.elapsed() < limit,
            "workers still running {:?} after {:?}: {running:?}",
            limit,
            deleted.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "workers ended {:.1?} after the launcher pod was deleted (grace {grace}s)",
        deleted.elapsed()
    );
    let u = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["undeploy", &id])
        .output()
        .unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());
}

/// A test image with Debian's MPICH and a C hello built with `mpicc.mpich`, sshd set up as in
/// the app templates (built once per content).
pub(crate) fn mpich_image(docker: &DockerClient) -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let hello = r#"#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0; char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    printf("mpich rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("mpich sum %d (expected %d)\n", sum, size * (size - 1) / 2);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
"#;
            let dockerfile = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n\
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mpich libmpich-dev gcc libc6-dev openssh-server openssh-client bash && rm -rf /var/lib/apt/lists/*\n\
RUN mkdir -p /run/sshd && ssh-keygen -A && printf 'PermitRootLogin prohibit-password\\nStrictModes no\\n' >> /etc/ssh/sshd_config\n\
RUN id -u mpiuser >/dev/null 2>&1 || useradd --create-home --uid 1000 --user-group --shell /bin/bash mpiuser\n\
COPY hello.c /app/hello.c\n\
RUN mpicc.mpich -o /app/hello /app/hello.c\n";
            std::fs::write(dir.path().join("hello.c"), hello).unwrap();
            std::fs::write(dir.path().join("Dockerfile"), dockerfile).unwrap();
            image_built_once(
                docker,
                "hvdctl-test/mpich-hello",
                dir.path(),
                &[hello.as_bytes(), dockerfile.as_bytes()],
            )
        })
        .clone()
}

/// `mpi.implementation: MPICH` through the native backend on the Docker kubelet: Hydra's
/// `mpirun -f` reads the `host:N` hostfile and starts every rank over ssh.
#[test]
fn mpich_runs_with_its_hostfile_form_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = mpich_image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("m");
    let job = format!("hello-{id}");
    let d = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args([
            "deploy",
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            &img,
        ])
        .args(["--no-push", "--set", "mpi.implementation=MPICH"])
        .args(["--set", "workers=3", "--set", "command=[/app/hello]"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(
        d.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&d.stderr)
    );
    let cm = fc
        .get("configmaps", "default", &format!("{job}-config"))
        .unwrap();
    let hosts = cm["data"]["hostfile"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(hosts.lines().count(), 3, "{hosts}");
    assert!(
        hosts.lines().all(|l| l.ends_with(":1")),
        "Hydra's form: {hosts}"
    );
    // Every rank starts over ssh from that hostfile and the allreduce completes. The job's
    // end is not awaited: Debian's MPICH 4.0.2 leaves a rank spinning in MPI_Finalize in
    // about 1 run of 4 here (with any libfabric provider, one or two ranks per container),
    // after everything below has been printed.
    let t0 = Instant::now();
    let out = loop {
        let l = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args(["logs", &id, "--role", "launcher"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&l.stdout).to_string();
        // Every rank's line and the sum (each rank's output comes through its own proxy).
        let whole = out.contains("mpich sum")
            && (0..3).all(|r| out.contains(&format!("mpich rank {r} of 3")));
        if whole || t0.elapsed() > Duration::from_secs(90) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for r in 0..3 {
        assert!(
            out.contains(&format!("mpich rank {r} of 3 on {job}-worker-{r}")),
            "rank {r}: {out}"
        );
    }
    assert!(out.contains("mpich sum 3 (expected 3)"), "{out}");
    let u = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["undeploy", &id])
        .output()
        .unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());
}

/// cleanPodPolicy on the native backend, at run time: `Running` (the default) stops the
/// workers when the command ends; `None` keeps them up until undeploy.
#[test]
fn clean_pod_policy_decides_whether_native_workers_stay() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let (_app_tmp, dir) = new_app("hello");
    for (policy, stays) in [("None", true), ("Running", false)] {
        let id = run_id(if stays { "p" } else { "q" });
        let d = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args([
                "deploy",
                "--backend",
                "native",
                "--run-id",
                &id,
                "--image",
                &img,
                "--no-push",
                "--logs",
            ])
            .args(["--set", &format!("runPolicy.cleanPodPolicy={policy}")])
            .timeout(Duration::from_secs(300))
            .output()
            .unwrap();
        assert_eq!(
            d.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&d.stderr)
        );
        // The launcher has ended: it told the workers to stop (a file in each) or it did not.
        let phases = || -> Vec<String> {
            fc.list(
                "pods",
                Some("default"),
                &format!("hvdctl.io/run={id},hvdctl.io/role=worker"),
            )
            .iter()
            .map(|p| {
                p["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
        };
        if stays {
            for i in ["0", "1"] {
                let told = hvdctl_in(&dir)
                    .env("KUBECONFIG", &kc)
                    .args([
                        "exec",
                        &id,
                        "--index",
                        i,
                        "--",
                        "test",
                        "-e",
                        "/tmp/hvdctl-done",
                    ])
                    .output()
                    .unwrap();
                assert_eq!(
                    told.status.code(),
                    Some(1),
                    "{policy}: worker {i} was told to stop"
                );
            }
            let p = phases();
            assert!(
                p.len() == 2 && p.iter().all(|p| p == "Running"),
                "{policy}: {p:?}"
            );
        } else {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let p = phases();
                if p.len() == 2 && p.iter().all(|p| p == "Succeeded") {
                    break;
                }
                assert!(Instant::now() < deadline, "{policy}: {p:?} after 60 s");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let u = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args(["undeploy", &id])
            .output()
            .unwrap();
        assert_eq!(
            u.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&u.stderr)
        );
    }
}

/// mpi-hello through the mpijob backend: the fake MPI Operator makes the launcher Job, the
/// workers, the ssh Secret and /etc/mpi as MPI Operator v0.8 does, and the Docker kubelet
/// runs them: every rank reports over real ssh, `logs -f` exits 0, status says Succeeded.
#[test]
fn mpijob_backend_runs_for_real_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(true);
    let (_app_tmp, dir) = new_app("hello");
    let id = run_id("j");
    let job = format!("hello-{id}");
    let started = Instant::now();
    let d = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args([
            "deploy",
            "--backend",
            "mpijob",
            "--run-id",
            &id,
            "--image",
            &img,
        ])
        .args([
            "--no-push",
            "--logs",
            "--set",
            "workers=2",
            "--set",
            "slotsPerWorker=2",
        ])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr),
    );
    eprintln!(
        "mpijob 2x2 on the docker kubelet: {:.1?}",
        started.elapsed()
    );
    assert_eq!(d.status.code(), Some(0), "{out}\n{err}");
    for r in 0..4 {
        assert!(out.contains(&format!("rank {r} of 4")), "rank {r}: {out}");
    }
    assert!(out.contains("= 6 (expected 6) OK"), "{out}");
    // mpirun forwards LD_LIBRARY_PATH; defined before it runs, Open MPI has nothing to warn.
    assert!(!out.contains("LD_LIBRARY_PATH"), "{out}");
    assert_eq!(sshd_noise(&out), Vec::<&str>::new(), "{out}");
    let s = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["status", &id, "-o", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["state"], "Succeeded", "{v}");
    let u = hvdctl_in(&dir)
        .env("KUBECONFIG", &kc)
        .args(["undeploy", &id])
        .output()
        .unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());
}

/// A machine with Docker and no kubeconfig (a local-only user): `undeploy --all --volumes`
/// has nothing to delete and says so, exit 0 — the missing cluster is not an error, as a
/// missing Docker engine is not for a cluster user; `--context` asking for one still is.
#[test]
fn undeploy_all_volumes_without_a_kubeconfig_is_nothing_to_delete() {
    let (_tmp, dir) = new_app("solo");
    let o = run_in(&dir, &["undeploy", "--all", "--volumes", "--yes"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("Nothing to delete: no runs of app solo"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("No storage claims of app solo to delete: it names no storage, and there is no kubeconfig"),
        "{}",
        o.stderr
    );
    let o = run_in(&dir, &["undeploy", "--all", "--yes", "--context", "x"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("context `x`"), "{}", o.stderr);
}
