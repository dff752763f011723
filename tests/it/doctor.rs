//! `hvdctl doctor` against the fake cluster (and a second Docker daemon on a small tmpfs for
//! `disk`), one fixture per check that makes it fail (or warn, where warning is all it
//! does), and `deploy`'s checks: a run no node can hold, a quota without room, an image its
//! registry answers 404 for are refused with nothing created; `--skip-checks` deploys anyway.

use crate::util::*;
use fake_cluster::scheduler::NodeSpec;
use fake_cluster::{Faults, Options};
use serde_json::{Value, json};
use std::path::Path;

fn cluster(mpi_operator: bool) -> Cluster {
    Cluster::start(Options {
        mpi_operator,
        nodes: NodeSpec {
            count: 2,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// `doctor -o json` with `args`: the exit code and the checks by name.
fn doctor(e: &Cluster, dir: &Path, args: &[&str]) -> (i32, Vec<Value>, String) {
    let mut c = e.hv(dir);
    c.args(["doctor", "-o", "json"]).args(args);
    let o = run(c);
    let v: Value = serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", o.stdout, o.stderr));
    (o.code, v.as_array().unwrap().clone(), o.stderr)
}

fn find<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:#?}"))
}

fn status(checks: &[Value], name: &str) -> String {
    find(checks, name)["status"].as_str().unwrap().to_string()
}

fn message(checks: &[Value], name: &str) -> String {
    find(checks, name)["message"].as_str().unwrap().to_string()
}

#[test]
fn a_healthy_cluster_passes_and_the_json_has_the_documented_keys() {
    let e = cluster(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let (code, checks, err) = doctor(&e, &dir, &[]);
    for c in &checks {
        for k in ["check", "status", "message", "hint"] {
            assert!(c.get(k).is_some(), "{k} missing: {c}");
        }
        assert!(
            ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
    }
    for name in [
        "cluster",
        "kinds",
        "rbac",
        "nodes",
        "image",
        "pull-secrets",
        "istio",
        "quota",
        "gpus",
        "np",
        "docker",
    ] {
        find(&checks, name);
    }
    for name in [
        "cluster",
        "kinds",
        "rbac",
        "nodes",
        "pull-secrets",
        "istio",
        "quota",
        "gpus",
        "np",
    ] {
        assert_eq!(status(&checks, name), "ok", "{name}: {checks:#?}");
    }
    assert!(
        message(&checks, "cluster").contains("Kubernetes v"),
        "{checks:#?}"
    );
    assert!(
        message(&checks, "kinds").contains("MPIJob served: kubeflow.org/v2beta1"),
        "{checks:#?}"
    );
    assert!(
        message(&checks, "nodes").starts_with("2 of 2 node(s) can hold one worker"),
        "{checks:#?}"
    );
    // No image registry reachable for `demo` here: a warning, never a failure.
    assert_ne!(status(&checks, "image"), "fail", "{checks:#?}");
    assert_eq!(code, 0, "{checks:#?}\n{err}");
    // Text: one line per check (and a hint line under each warning).
    let mut c = e.hv(&dir);
    c.args(["doctor"]);
    let o = run(c);
    assert!(
        o.stdout.lines().any(|l| l.starts_with("ok    rbac ")),
        "{}",
        o.stdout
    );
}

#[test]
fn a_missing_rbac_verb_is_named() {
    let e = cluster(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    e.fc.set_faults(Faults {
        forbid: vec!["get:pods/log".into(), "list:nodes".into()],
        ..Default::default()
    });
    let (code, checks, _) = doctor(&e, &dir, &[]);
    assert_eq!(code, 1);
    assert_eq!(status(&checks, "rbac"), "fail");
    let m = message(&checks, "rbac");
    assert!(
        m.starts_with("not allowed in namespace default: get pods/log; also missing: list nodes"),
        "{m}"
    );
    // Nodes cannot be listed: the node check cannot tell (a warning).
    assert_eq!(status(&checks, "nodes"), "warn");
    // Only the cluster-scoped read missing: a warning.
    e.fc.set_faults(Faults {
        forbid: vec!["list:nodes".into()],
        ..Default::default()
    });
    let (code, checks, _) = doctor(&e, &dir, &[]);
    assert_eq!(status(&checks, "rbac"), "warn", "{checks:#?}");
    assert!(
        message(&checks, "rbac").contains("not allowed: list nodes"),
        "{checks:#?}"
    );
    assert_eq!(code, 0, "{checks:#?}");
    // The role to ask for.
    let mut c = e.hv(&dir);
    c.args(["doctor", "--print-role"]);
    let o = run(c);
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.contains("kind: Role\n") && o.stdout.contains("kind: ClusterRole\n"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("resources: [\"pods/log\"]\n  verbs: [\"get\"]"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("resources: [\"mpijobs\"]"),
        "{}",
        o.stdout
    );
    for doc in o.stdout.split("---\n") {
        let v: serde_json::Value =
            serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
        assert!(
            v["rules"].as_array().is_some_and(|r| !r.is_empty()),
            "{doc}"
        );
    }
}

#[test]
fn a_gpu_request_no_node_fits_is_named_with_the_numbers() {
    let e = cluster(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let (code, checks, _) = doctor(
        &e,
        &dir,
        &["--set", "gpusPerWorker=1", "--set", "slotsPerWorker=1"],
    );
    assert_eq!(code, 1);
    assert_eq!(status(&checks, "nodes"), "fail");
    assert_eq!(
        message(&checks, "nodes"),
        "0 of 2 node(s) can hold one worker (cpu 250m, memory 256Mi, nvidia.com/gpu 1): fake-node-0: nvidia.com/gpu 0 allocatable < 1 requested; fake-node-1: nvidia.com/gpu 0 allocatable < 1 requested"
    );
}

#[test]
fn each_other_check_has_a_fixture_that_fails_it() {
    let e = cluster(false);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    // kinds: no MPI Operator for the mpijob backend.
    let (_, checks, _) = doctor(&e, &dir, &[]);
    assert_eq!(status(&checks, "kinds"), "fail");
    assert!(
        message(&checks, "kinds").contains("kubeflow.org/v2beta1 MPIJob is not served"),
        "{checks:#?}"
    );
    let native = ["--backend", "native"];
    // pull-secrets.
    let (_, checks, _) = doctor(
        &e,
        &dir,
        &[&native[..], &["--set", "imagePullSecrets=[regcred]"]].concat(),
    );
    assert_eq!(status(&checks, "pull-secrets"), "fail");
    assert!(message(&checks, "pull-secrets").contains("regcred"));
    // np and GPUs per rank.
    let (_, checks, _) = doctor(
        &e,
        &dir,
        &[
            &native[..],
            &[
                "--set",
                "mpi.extraArgs=[-np, \"7\"]",
                "--set",
                "gpusPerWorker=1",
                "--set",
                "slotsPerWorker=2",
            ],
        ]
        .concat(),
    );
    assert_eq!(status(&checks, "np"), "fail");
    assert_eq!(
        message(&checks, "np"),
        "-np 7 in the app's arguments, but workers × slotsPerWorker = 2 × 2 = 4"
    );
    assert_eq!(status(&checks, "gpus"), "fail");
    // istio: a namespace with injection on, pods that do not opt out.
    e.fc.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mesh", "labels": {"istio-injection": "enabled"}}})).unwrap();
    let (_, checks, _) = doctor(
        &e,
        &dir,
        &[&native[..], &["-n", "mesh", "--set", "annotations={}"]].concat(),
    );
    assert_eq!(status(&checks, "istio"), "fail", "{checks:#?}");
    let (_, checks, _) = doctor(&e, &dir, &[&native[..], &["-n", "mesh"]].concat());
    assert_eq!(
        status(&checks, "istio"),
        "ok",
        "the template opts out: {checks:#?}"
    );
    // quota: little room left.
    e.fc.create(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team", "namespace": "default"},
        "spec": {"hard": {"requests.memory": "1Gi", "pods": "10"}},
        "status": {"hard": {"requests.memory": "1Gi", "pods": "10"}, "used": {"requests.memory": "512Mi", "pods": "9"}}})).unwrap();
    let (code, checks, _) = doctor(&e, &dir, &native);
    assert_eq!(code, 1);
    assert_eq!(status(&checks, "quota"), "fail");
    assert_eq!(
        message(&checks, "quota"),
        "pods: the run needs 3, quota team has 1 left of 10; requests.memory: the run needs 640Mi, quota team has 512Mi left of 1Gi"
    );
    // cluster: nothing answers.
    let kc = e.root.join("dead-kubeconfig");
    std::fs::write(
        &kc,
        std::fs::read_to_string(&e.kubeconfig)
            .unwrap()
            .replace(e.fc.url(), "http://127.0.0.1:9"),
    )
    .unwrap();
    let mut c = hvdctl_in(&dir);
    c.env("KUBECONFIG", &kc).args(["doctor", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 1);
    let checks: Vec<Value> = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(status(&checks, "cluster"), "fail", "{checks:#?}");
    // docker: no daemon, for the local backend.
    let mut c = hvdctl_in(&dir);
    c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["doctor", "-o", "json", "--backend", "local"]);
    let o = run(c);
    assert_eq!(o.code, 1);
    let checks: Vec<Value> = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(status(&checks, "docker"), "fail", "{checks:#?}");
    assert_eq!(status(&checks, "image"), "fail", "{checks:#?}");
}

/// The image in the test registry (htpasswd auth, the user's Docker credentials): present,
/// missing (404: a failure), and for the local backend in the daemon or not.
#[test]
fn a_missing_image_is_named_from_the_registry_and_the_daemon() {
    let rt = rt();
    let Some(svc) = rt.block_on(services()) else {
        return;
    };
    let e = cluster(false);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let cfg = docker_config_with_auth(&svc.registry, &svc.user, &svc.password);
    let cfg_path = cfg.path().to_str().unwrap().to_string();
    let present = format!("{}/hvdctl-doctor/busybox:1", svc.registry);
    docker_cli(&svc.docker_host, &["tag", &busybox_image(), &present], &[]);
    docker_cli(
        &svc.docker_host,
        &["push", &present],
        &[("DOCKER_CONFIG", &cfg_path)],
    );
    let missing = format!("{}/hvdctl-doctor/nope:1", svc.registry);
    let with = |image: &str, backend: &str| {
        let mut c = e.hv(&dir);
        c.env("DOCKER_CONFIG", &cfg_path)
            .env("DOCKER_HOST", &svc.docker_host)
            .args([
                "doctor",
                "-o",
                "json",
                "--backend",
                backend,
                "--image",
                image,
            ]);
        let o = run(c);
        let checks: Vec<Value> = serde_json::from_str(&o.stdout).unwrap();
        (o.code, checks)
    };
    let (_, checks) = with(&present, "native");
    assert_eq!(status(&checks, "image"), "ok", "{checks:#?}");
    let (code, checks) = with(&missing, "native");
    assert_eq!(code, 1);
    assert_eq!(status(&checks, "image"), "fail");
    assert_eq!(
        message(&checks, "image"),
        format!(
            "{missing} is not in its registry: {} answered 404 for hvdctl-doctor/nope:1 (asked as {})",
            svc.registry, svc.user
        )
    );
    // Wrong credentials: cannot tell, a warning.
    let bad = docker_config_with_auth(&svc.registry, &svc.user, "wrong");
    let mut c = e.hv(&dir);
    c.env("DOCKER_CONFIG", bad.path()).args([
        "doctor",
        "-o",
        "json",
        "--backend",
        "native",
        "--image",
        &missing,
    ]);
    let checks: Vec<Value> = serde_json::from_str(&run(c).stdout).unwrap();
    assert_eq!(status(&checks, "image"), "warn", "{checks:#?}");
    // The local backend looks in the daemon.
    let (code, checks) = with(&busybox_image(), "local");
    assert_eq!(status(&checks, "image"), "ok", "{checks:#?}");
    assert_eq!(status(&checks, "docker"), "ok", "{checks:#?}");
    assert!(message(&checks, "docker").contains("(API "), "{checks:#?}");
    let _ = code;
    let (code, checks) = with("hvdctl-doctor/not-built:1", "local");
    assert_eq!(code, 1);
    assert_eq!(status(&checks, "image"), "fail");

    // deploy refuses an image its registry does not have, creating nothing.
    let mut c = e.hv(&dir);
    c.env("DOCKER_CONFIG", &cfg_path).args([
        "deploy",
        "--backend",
        "native",
        "--run-id",
        "nope",
        "--image",
        &missing,
        "--no-push",
    ]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("refusing to deploy") && o.stderr.contains("answered 404"),
        "{}",
        o.stderr
    );
    assert!(e.ours("hvdctl.io/run=nope").is_empty());
    // An image only in the local daemon (a local cluster may have it loaded): a warning.
    let local_only = format!("{}/hvdctl-doctor/local-only:1", svc.registry);
    docker_cli(
        &svc.docker_host,
        &["tag", &busybox_image(), &local_only],
        &[],
    );
    let mut c = e.hv(&dir);
    c.env("DOCKER_CONFIG", &cfg_path)
        .env("DOCKER_HOST", &svc.docker_host)
        .args([
            "deploy",
            "--backend",
            "native",
            "--run-id",
            "lo",
            "--image",
            &local_only,
            "--no-push",
        ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains(&format!("warning: {local_only} is not in its registry"))
            && o.stderr.contains("it is in the local Docker daemon"),
        "{}",
        o.stderr
    );
    // An unreachable registry is a warning only.
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "native",
        "--run-id",
        "unr",
        "--image",
        "127.0.0.1:9/x/y:1",
        "--no-push",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("warning: cannot check that 127.0.0.1:9/x/y:1 is in its registry"),
        "{}",
        o.stderr
    );
}

#[test]
fn deploy_refuses_a_run_that_fits_nowhere_and_leaves_nothing_behind() {
    let e = cluster(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for backend in ["mpijob", "native"] {
        let id = format!("g{}", &backend[..1]);
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--backend",
            backend,
            "--run-id",
            &id,
            "--set",
            "gpusPerWorker=1",
        ]);
        let o = run(c);
        assert_eq!(o.code, 1, "{}", o.stderr);
        assert!(
            o.stderr.contains("refusing to deploy to namespace default (nothing was created): 0 of 2 node(s) can hold one worker (cpu 250m, memory 256Mi, nvidia.com/gpu 1)"),
            "{}",
            o.stderr
        );
        assert!(
            e.ours(&format!("hvdctl.io/run={id}")).is_empty(),
            "{backend}"
        );
        assert!(
            !std::fs::read_to_string(dir.join(".hvdctl/runs.json"))
                .unwrap_or_default()
                .contains(&format!("\"{id}\"")),
            "{backend}: recorded"
        );
        // --skip-checks deploys it anyway (and it stays Pending: the scheduler says why).
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--backend",
            backend,
            "--run-id",
            &id,
            "--set",
            "gpusPerWorker=1",
            "--skip-checks",
        ]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(!e.ours(&format!("hvdctl.io/run={id}")).is_empty());
    }
    // Refused before anything else happens: an image built here and never pushed is not
    // pushed first (its registry does not even answer), a namespace asked for is not made.
    let image_json = dir.join(".hvdctl/image.json");
    std::fs::write(
        &image_json,
        r#"{"image": "127.0.0.1:1/demo:unpushed", "pushed": false, "built": "2026-11-22T00:00:00Z"}"#,
    )
    .unwrap();
    let mut c = e.hv(&dir);
    c.args(["-n", "team-z", "deploy", "--create-namespace"])
        .args(["--backend", "native", "--set", "gpusPerWorker=1"]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("refusing to deploy to namespace team-z (nothing was created): 0 of 2"),
        "{}",
        o.stderr
    );
    assert!(e.fc.get("namespaces", "", "team-z").is_none());
    std::fs::remove_file(&image_json).unwrap();
    // A quota without room.
    e.fc.create(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "small", "namespace": "default"},
        "spec": {"hard": {"pods": "2"}}, "status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}})).unwrap();
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "q1"]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("pods: the run needs 3, quota small has 2 left of 2"),
        "{}",
        o.stderr
    );
    assert!(e.ours("hvdctl.io/run=q1").is_empty());
}

/// A second, throwaway Docker daemon whose data root is a 256 MiB tmpfs: the `disk` check's
/// fixture (free space in the data root of a daemon on this machine). It gets a bridge of
/// its own: with `--bridge none` dockerd deletes `docker0`, which the main daemon's
/// containers need. Stopped, unmounted and its bridge deleted on drop.
struct SmallDaemon {
    dir: std::path::PathBuf,
    bridge: String,
    child: std::process::Child,
}

impl SmallDaemon {
    fn start() -> Option<SmallDaemon> {
        let dir = tempfile::Builder::new()
            .prefix("hvdctl-small-daemon")
            .tempdir()
            .unwrap()
            .keep();
        let sh = |cmd: &str, args: &[&str]| {
            std::process::Command::new(cmd)
                .args(args)
                .output()
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    if o.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&o.stderr).into_owned())
                    }
                })
        };
        let d = dir.to_str().unwrap();
        if let Err(e) = sh("mount", &["-t", "tmpfs", "-o", "size=256m", "tmpfs", d]) {
            let _ = std::fs::remove_dir(&dir);
            return optional(
                "doctor disk check",
                "a tmpfs for a second Docker daemon (needs root)",
                e,
            );
        }
        let bridge = format!("hvdsm{}", std::process::id() % 100_000);
        if let Err(e) = sh("ip", &["link", "add", &bridge, "type", "bridge"]) {
            let _ = sh("umount", &[d]);
            let _ = std::fs::remove_dir(&dir);
            return optional(
                "doctor disk check",
                "a bridge for a second Docker daemon (needs root)",
                e,
            );
        }
        let sock = dir.join("d.sock");
        let log =
            std::fs::File::create(std::env::temp_dir().join("hvdctl-small-daemon.log")).unwrap();
        let child = std::process::Command::new("dockerd")
            .args(["--data-root", &format!("{d}/root")])
            .args(["--exec-root", &format!("{d}/exec")])
            .args(["--pidfile", &format!("{d}/pid")])
            .args(["--host", &format!("unix://{}", sock.display())])
            .args(["--bridge", &bridge, "--iptables=false", "--ip6tables=false"])
            .args(["--storage-driver", "vfs"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn();
        let daemon = match child {
            Ok(child) => SmallDaemon { dir, bridge, child },
            Err(e) => {
                let _ = sh("ip", &["link", "del", &bridge]);
                let _ = sh("umount", &[d]);
                return unavailable("dockerd", e);
            }
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !sock.exists() {
            if std::time::Instant::now() > deadline {
                return unavailable(
                    "a second Docker daemon",
                    "its socket did not appear in 30 s",
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(daemon)
    }

    fn host(&self) -> String {
        format!("unix://{}", self.dir.join("d.sock").display())
    }
}

impl Drop for SmallDaemon {
    fn drop(&mut self) {
        // SIGTERM, so dockerd stops its containerd and unmounts what it mounted.
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

#[test]
fn disk_warns_when_the_daemons_data_root_is_nearly_full() {
    let Some(daemon) = SmallDaemon::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "demo", "mpi-hello");
    let mut c = hvdctl_in(&dir);
    c.env("DOCKER_HOST", daemon.host())
        .args(["doctor", "--backend", "local", "-o", "json"]);
    let o = run(c);
    let checks: Vec<Value> = serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", o.stdout, o.stderr));
    assert_eq!(status(&checks, "docker"), "ok", "{checks:#?}");
    assert_eq!(status(&checks, "disk"), "warn", "{checks:#?}");
    let m = message(&checks, "disk");
    assert!(
        m.contains("free in the Docker data root")
            && m.contains(&daemon.dir.join("root").display().to_string())
            && m.contains("(less than 5Gi)"),
        "{m}"
    );
    // The image is in the main daemon, not in this one: a local run would not find it.
    assert_eq!(status(&checks, "image"), "fail", "{checks:#?}");
    assert_eq!(o.code, 1, "{checks:#?}");
}
