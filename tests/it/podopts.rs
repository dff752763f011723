//! The pods' options of hvdctl.yaml executed in real containers on the fake cluster's
//! Docker kubelet: files from a Secret and a ConfigMap read by rank 0, `/dev/shm` of the
//! size `shm` asks, sshd and ssh on `mpi.sshPort` (native: hvdctl's scripts; mpijob: the
//! operator's sshd and Open MPI's ssh), `imagePullPolicy: Never` with a missing image,
//! `storage:` claims that keep their data across runs, a non-root run without `fsGroup`,
//! and pods stuck on a missing Secret, ConfigMap or claim, or on the sandbox's image.

use crate::util::*;
use fake_cluster::{KubeletMode, Options};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// A waiting command ends this soon after the reason that no retry can fix.
const WITHIN: Duration = Duration::from_secs(5);

fn deploy(e: &Cluster, dir: &Path, args: &[&str], sets: &[&str]) -> Out {
    let mut c = e.hv(dir);
    c.arg("deploy").args(args).arg("--no-push");
    for s in sets {
        c.args(["--set", s]);
    }
    c.timeout(Duration::from_secs(300));
    run(c)
}

fn undeploy(e: &Cluster, dir: &Path, id: &str) {
    let mut c = e.hv(dir);
    c.args(["undeploy", id]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// The Secret `creds` (key `token`) and ConfigMap `settings` (key `mode`) of the tests.
fn secret_and_config_map(e: &Cluster) {
    e.fc.create(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        // "hello-secret"
        "data": {"token": "aGVsbG8tc2VjcmV0"}}))
        .unwrap();
    e.fc.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
        "data": {"mode": "fast"}}))
        .unwrap();
}

const FILES: [&str; 2] = [
    "volumes[0]={name: creds, mountPath: /creds, secret: {secretName: creds, items: [{key: token, path: token.txt}], defaultMode: 0440}}",
    "volumes[1]={name: cfg, mountPath: /cfg, configMap: {name: settings}}",
];

/// Rank 0 prints the Secret's and the ConfigMap's files and the size of its `/dev/shm`.
const READ: &str = "command=[bash, -c, 'echo secret=$(cat /creds/token.txt) config=$(cat /cfg/mode); df -k /dev/shm | tail -1']";

/// The 1K-blocks `df -k` shows for a 96Mi tmpfs.
const SHM_96MI_KB: &str = "98304";

fn pod_spec_of(e: &Cluster, selector: &str) -> Vec<Value> {
    e.fc.list("pods", Some("default"), selector)
        .into_iter()
        .map(|p| p["spec"].clone())
        .collect()
}

/// Native and mpijob on the Docker kubelet: rank 0 reads a file of a Secret and one of a
/// ConfigMap, `/dev/shm` has the size `shm` asks (a memory emptyDir), the workers' sshd
/// listens on 2200 alone and the launcher's ssh reaches it there; every container carries
/// the pull policy.
#[test]
fn secret_config_map_shm_and_ssh_port_in_real_containers() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = Cluster::docker_kubelet(true);
    let dir = init_app(&e.root, "opts", "mpi-hello");
    secret_and_config_map(&e);
    for backend in ["native", "mpijob"] {
        let id = run_id(&backend[..1]);
        let sets = [
            "workers=1",
            "mpi.sshPort=2200",
            "shm=96Mi",
            "imagePullPolicy=IfNotPresent",
            FILES[0],
            FILES[1],
            READ,
        ];
        let o = deploy(
            &e,
            &dir,
            &[
                "--backend",
                backend,
                "--run-id",
                &id,
                "--image",
                &img,
                "--logs",
            ],
            &sets,
        );
        assert_eq!(o.code, 0, "{backend}: {}\n{}", o.stdout, o.stderr);
        assert!(
            o.stdout.contains("secret=hello-secret config=fast"),
            "{backend}: rank 0 reads the Secret's and the ConfigMap's files: {}",
            o.stdout
        );
        let shm = o
            .stdout
            .lines()
            .find(|l| l.trim_end().ends_with("/dev/shm"))
            .unwrap_or_else(|| panic!("{backend}: no df line: {}", o.stdout));
        assert!(
            shm.split_whitespace().any(|w| w == SHM_96MI_KB),
            "{backend}: /dev/shm is 96Mi: {shm}"
        );
        // sshd on 2200: hvdctl's worker script says so; under the operator its command has it.
        let specs = pod_spec_of(&e, &format!("hvdctl.io/run={id}"));
        assert!(
            !specs.is_empty(),
            "{backend}: the launcher's pod at least remains"
        );
        for s in &specs {
            for c in s["containers"].as_array().unwrap() {
                assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{backend}: {c:#}");
            }
            let shm_vol = s["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "hvdctl-shm")
                .unwrap_or_else(|| panic!("{backend}: {s:#}"));
            assert_eq!(
                shm_vol["emptyDir"],
                json!({"medium": "Memory", "sizeLimit": "96Mi"})
            );
        }
        let mut c = e.hv(&dir);
        c.args(["logs", &id, "--role", "worker"]);
        let logs = run(c);
        if backend == "native" {
            assert!(
                logs.stdout.contains("sshd started on port 2200"),
                "{}",
                logs.stdout
            );
        } else {
            // The operator may have deleted the workers already (cleanPodPolicy Running):
            // their command is read from the MPIJob.
            let job =
                e.fc.get("mpijobs", "default", &format!("opts-{id}"))
                    .unwrap();
            let worker =
                &job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
            let cmd = worker["command"].to_string();
            assert!(cmd.contains("sshd -De -o LogLevel=ERROR -p 2200"), "{cmd}");
            assert_eq!(worker["imagePullPolicy"], "IfNotPresent", "{worker:#}");
        }
        undeploy(&e, &dir, &id);
    }
}

/// `imagePullPolicy: Never` and an image the node does not have: the Docker kubelet does not
/// pull it, and `deploy --wait` ends with exit 1 and `ErrImageNeverPull` as the reason.
#[test]
fn pull_policy_never_with_a_missing_image_is_err_image_never_pull() {
    let Some(_docker) = docker() else { return };
    let e = Cluster::docker_kubelet(false);
    let dir = init_app(&e.root, "never", "mpi-hello");
    let id = run_id("n");
    let missing = "127.0.0.1:5000/hvdctl-test/never-pulled:1";
    let t = Instant::now();
    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            missing,
            "--wait",
            "--skip-checks",
        ],
        &["imagePullPolicy=Never"],
    );
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("Reason: ") && o.stderr.contains("ErrImageNeverPull"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("is not present with pull policy of Never"),
        "{}",
        o.stderr
    );
    eprintln!(
        "imagePullPolicy Never: deploy --wait exit 1 after {:.1?}",
        t.elapsed()
    );
    for s in pod_spec_of(&e, &format!("hvdctl.io/run={id}")) {
        assert_eq!(s["containers"][0]["imagePullPolicy"], "Never");
    }
    undeploy(&e, &dir, &id);
}

/// Waits (on the fake cluster's store) for a Warning event `reason` of a pod of run `id`.
fn wait_event(e: &Cluster, id: &str, reason: &str) -> Value {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let found =
            e.fc.list("events", Some("default"), "")
                .into_iter()
                .find(|ev| {
                    ev["reason"] == reason
                        && ev["involvedObject"]["name"]
                            .as_str()
                            .is_some_and(|n| n.contains(id))
                });
        if let Some(ev) = found {
            return ev;
        }
        assert!(Instant::now() < end, "no {reason} event for run {id}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Secret, a ConfigMap and a claim that do not exist (and that nothing of the run
/// creates): the pods wait with the kubelet's FailedMount, `status` names it and the object,
/// and `status --wait` and `logs -f` end with exit 1 within 5 s. doctor says so beforehand.
#[test]
fn missing_secret_config_map_or_claim_ends_the_waiting_commands() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = Cluster::docker_kubelet(false);
    let dir = init_app(&e.root, "stuck", "mpi-hello");
    for (set, object) in [
        (
            "volumes[0]={name: creds, mountPath: /creds, secret: {secretName: nowhere}}",
            "secret \"nowhere\" not found",
        ),
        (
            "volumes[0]={name: cfg, mountPath: /cfg, configMap: {name: nowhere-cm}}",
            "configmap \"nowhere-cm\" not found",
        ),
        (
            "volumes[0]={name: data, mountPath: /data, pvc: {claimName: nowhere-pvc}}",
            "persistentvolumeclaim \"nowhere-pvc\" not found",
        ),
    ] {
        // doctor names it first.
        let mut c = e.hv(&dir);
        c.args(["doctor", "--backend", "native", "-o", "json", "--set", set]);
        let d = run(c);
        let checks: Value =
            serde_json::from_str(&d.stdout).unwrap_or_else(|_| panic!("{}", d.stderr));
        let check = checks
            .as_array()
            .or_else(|| checks["checks"].as_array())
            .unwrap()
            .iter()
            .find(|c| c["check"] == "volume-sources")
            .cloned()
            .unwrap_or_else(|| panic!("{checks:#}"));
        assert_eq!(check["status"], "fail", "{check:#}");

        let id = run_id("s");
        let o = deploy(
            &e,
            &dir,
            &[
                "--backend",
                "native",
                "--run-id",
                &id,
                "--image",
                &img,
                "--skip-checks",
            ],
            &["workers=1", set],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let ev = wait_event(&e, &id, "FailedMount");
        assert!(ev["message"].as_str().unwrap().contains(object), "{ev:#}");
        for args in [
            vec!["status", id.as_str(), "--wait"],
            vec!["logs", "-f", id.as_str()],
        ] {
            let t = Instant::now();
            let mut c = e.hv(&dir);
            c.args(&args).timeout(Duration::from_secs(60));
            let o = run(c);
            let took = t.elapsed();
            assert_eq!(o.code, 1, "{args:?}: {}\n{}", o.stdout, o.stderr);
            // status prints its report (with the reason) on stdout, logs says it on stderr.
            let said = format!("{}{}", o.stdout, o.stderr);
            let line = said
                .lines()
                .find(|l| l.trim_start().starts_with("Reason: "))
                .unwrap_or_else(|| panic!("{args:?}: no reason: {said}"));
            assert!(
                line.contains("FailedMount")
                    && line.contains(object)
                    && line.contains("nothing of this run creates it"),
                "{args:?}: {line}"
            );
            // The pods were stuck before it started: it ends at its first look, plus the
            // pods' age threshold at most.
            assert!(took < WITHIN, "{args:?} took {took:?}");
            eprintln!("{object}: {} exit 1 after {took:.1?}", args[0]);
        }
        undeploy(&e, &dir, &id);
    }
}

/// The sandbox's image is missing: the pods wait with FailedCreatePodSandBox, which `status`
/// shows as their reason (a retry may fix it: waiting commands go on).
#[test]
fn a_missing_sandbox_image_is_the_waiting_pods_reason() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = Cluster::start(Options {
        kubelet: KubeletMode::Docker,
        pause_image: Some("127.0.0.1:5000/hvdctl-test/no-pause:1".into()),
        ..Default::default()
    });
    let dir = init_app(&e.root, "sandbox", "mpi-hello");
    let id = run_id("p");
    let o = deploy(
        &e,
        &dir,
        &["--backend", "native", "--run-id", &id, "--image", &img],
        &["workers=1"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    wait_event(&e, &id, "FailedCreatePodSandBox");
    let t = Instant::now();
    loop {
        let mut c = e.hv(&dir);
        c.args(["status", &id, "-o", "json"]);
        let s = run(c);
        assert_eq!(s.code, 0, "{}", s.stderr);
        let v: Value = serde_json::from_str(&s.stdout).unwrap();
        let reasons: Vec<&str> = v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["reason"].as_str())
            .collect();
        if !reasons.is_empty() {
            assert!(
                reasons.iter().all(|r| r
                    .starts_with("FailedCreatePodSandBox: Failed to create pod sandbox")
                    && r.contains("no-pause")),
                "{v:#}"
            );
            assert!(
                v["reason"]
                    .as_str()
                    .unwrap()
                    .contains("FailedCreatePodSandBox"),
                "{v:#}"
            );
            break;
        }
        assert!(t.elapsed() < WITHIN, "no reason within 5 s: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    undeploy(&e, &dir, &id);
}

/// `storage:` on the Docker kubelet: run 1 writes to the claim, run 2 reads it back; the
/// claim outlives both runs (status shows it Bound) and goes only with `undeploy --all
/// --volumes`.
#[test]
fn storage_claims_keep_data_across_runs_until_undeploy_volumes() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = Cluster::docker_kubelet(false);
    let dir = init_app(&e.root, "keep", "mpi-hello");
    let storage = "storage[0]={name: data, size: 1Gi, mountPath: /data}";
    let id1 = run_id("w");
    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            "native",
            "--run-id",
            &id1,
            "--image",
            &img,
            "--logs",
        ],
        &[
            "workers=1",
            storage,
            "command=[bash, -c, 'echo written-by-$HVDCTL_RUN > /data/note; echo wrote']",
        ],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("Created PersistentVolumeClaim keep-data"),
        "{}",
        o.stderr
    );
    let claim =
        e.fc.get("persistentvolumeclaims", "default", "keep-data")
            .unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert!(
        claim["metadata"]["labels"].get("hvdctl.io/run").is_none(),
        "{claim:#}"
    );
    let mut c = e.hv(&dir);
    c.args(["status", &id1]);
    let s = run(c);
    assert!(
        s.stdout.contains("Storage:    keep-data Bound (1Gi)"),
        "{}",
        s.stdout
    );
    undeploy(&e, &dir, &id1);
    assert!(
        e.fc.get("persistentvolumeclaims", "default", "keep-data")
            .is_some()
    );

    let id2 = run_id("r");
    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            "native",
            "--run-id",
            &id2,
            "--image",
            &img,
            "--logs",
        ],
        &[
            "workers=1",
            storage,
            "command=[bash, -c, 'echo read=$(cat /data/note)']",
        ],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(&format!("read=written-by-{id1}")),
        "run 2 reads what run 1 wrote: {}",
        o.stdout
    );
    assert!(
        !o.stderr.contains("Created PersistentVolumeClaim"),
        "{}",
        o.stderr
    );
    undeploy(&e, &dir, &id2);
    assert!(
        e.fc.get("persistentvolumeclaims", "default", "keep-data")
            .is_some()
    );

    let mut c = e.hv(&dir);
    c.args(["undeploy", "--volumes"]);
    let o = run(c);
    assert_eq!(o.code, 2, "--volumes needs --all: {}", o.stderr);
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--volumes", "--yes"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("keep-data"), "{}", o.stderr);
    assert!(
        e.fc.get("persistentvolumeclaims", "default", "keep-data")
            .is_none()
    );
}

/// The issue's non-root run: runAsUser and runAsGroup 1000, no fsGroup, on the Docker
/// kubelet. hvdctl gives it fsGroup 1000 (said once on stderr), so the launcher can read the
/// ssh key Secret and the run succeeds, every rank as uid 1000 — with hvdctl's scripts
/// (native), the MPI Operator's sshd and hostfile (mpijob) and the Trainer's (trainjob).
fn non_root_without_fs_group_runs(backend: &str, cluster: Cluster) {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = cluster;
    let dir = init_app(&e.root, "nonroot", "mpi-hello");
    let id = run_id("u");
    // The dry run says it as the deploy does, once.
    let mut c = e.hv(&dir);
    c.args(["deploy", "--dry-run", "--backend", backend])
        .args(["--set", "securityContext.runAsUser=1000"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stderr
            .matches("securityContext.fsGroup set to 1000")
            .count(),
        1,
        "{}",
        o.stderr
    );
    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            backend,
            "--run-id",
            &id,
            "--image",
            &img,
            "--logs",
        ],
        &[
            "securityContext.runAsUser=1000",
            "securityContext.runAsGroup=1000",
            "command=[bash, -c, 'echo uid=$(id -u)']",
        ],
    );
    assert_eq!(o.code, 0, "{backend}:\n{}\n{}", o.stdout, o.stderr);
    assert_eq!(
        o.stderr
            .matches("securityContext.fsGroup set to 1000")
            .count(),
        1,
        "{}",
        o.stderr
    );
    assert_eq!(o.stdout.matches("uid=1000").count(), 2, "{}", o.stdout);
    for s in pod_spec_of(&e, &format!("hvdctl.io/run={id}")) {
        assert_eq!(s["securityContext"]["fsGroup"], 1000, "{s:#}");
    }
    undeploy(&e, &dir, &id);
}

#[test]
fn non_root_without_fs_group_runs_native_on_the_docker_kubelet() {
    non_root_without_fs_group_runs("native", Cluster::docker_kubelet(false));
}

#[test]
fn non_root_without_fs_group_runs_mpijob_on_the_docker_kubelet() {
    non_root_without_fs_group_runs("mpijob", Cluster::docker_kubelet(true));
}

#[test]
fn non_root_without_fs_group_runs_trainjob_on_the_docker_kubelet() {
    non_root_without_fs_group_runs(
        "trainjob",
        Cluster::start(Options {
            trainer: true,
            kubelet: KubeletMode::Docker,
            pause_image: Some(busybox_image()),
            ..Default::default()
        }),
    );
}

/// The local backend: `/dev/shm` of the size `shm` asks (Docker's ShmSize), a memory
/// emptyDir of its sizeLimit, and the workers' sshd and the launcher's ssh on port 2200.
#[test]
fn shm_empty_dir_and_ssh_port_on_the_local_backend() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "lopts", "mpi-hello");
    let id = run_id("l");
    let mut c = hvdctl_in(&dir);
    c.args([
        "deploy",
        "--backend",
        "local",
        "--run-id",
        &id,
        "--image",
        &img,
        "--logs",
    ]);
    for s in [
        "workers=1",
        "mpi.sshPort=2200",
        "shm=96Mi",
        "volumes[0]={name: fast, mountPath: /fast, emptyDir: {medium: Memory, sizeLimit: 32Mi}}",
        "command=[bash, -c, 'df -k /dev/shm /fast | tail -2']",
    ] {
        c.args(["--set", s]);
    }
    c.timeout(Duration::from_secs(300));
    let o = run(c);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let df = |mount: &str| {
        o.stdout
            .lines()
            .find(|l| l.trim_end().ends_with(mount))
            .unwrap_or_else(|| panic!("no df line for {mount}: {}", o.stdout))
            .to_string()
    };
    assert!(
        df("/dev/shm").split_whitespace().any(|w| w == SHM_96MI_KB),
        "{}",
        df("/dev/shm")
    );
    assert!(
        df("/fast").split_whitespace().any(|w| w == "32768"),
        "{}",
        df("/fast")
    );
    let mut c = hvdctl_in(&dir);
    c.args(["logs", &id, "--role", "worker"]);
    let logs = run(c);
    assert!(
        logs.stdout.contains("sshd started on port 2200"),
        "{}",
        logs.stdout
    );
    let mut c = hvdctl_in(&dir);
    c.args(["undeploy", &id]);
    assert_eq!(run(c).code, 0);
    assert_eq!(
        crate::local::leftovers(&docker, &format!("lopts-{id}"), &id),
        (0, 0, 0)
    );
}

/// horovodrun on port 2200: its own ssh check and its mpirun reach every worker's sshd
/// there (native and local: the ssh_config launcher.sh writes and `--ssh-port`; mpijob: the
/// operator's sshd `-p 2200` and `--ssh-port`).
#[test]
fn horovodrun_reaches_the_workers_on_port_2200() {
    let Some(docker) = docker() else { return };
    let Some(base) = horovod_base(&docker) else {
        return;
    };
    let img = template_image(&docker, "horovod", &base);
    let _training = one_training_at_a_time();
    let e = Cluster::docker_kubelet(true);
    let dir = init_app(&e.root, "hvd", "horovod");
    for backend in ["native", "mpijob", "local"] {
        let id = run_id(&backend[..1]);
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--backend",
            backend,
            "--run-id",
            &id,
            "--image",
            &img,
        ])
        .args(["--no-push", "--logs"]);
        for s in [
            "workers=2",
            "mpi.launcher=horovodrun",
            "mpi.sshPort=2200",
            "command=[bash, -c, 'echo hvd-rank-on-$(hostname)']",
        ] {
            c.args(["--set", s]);
        }
        c.timeout(Duration::from_secs(300));
        let o = run(c);
        assert_eq!(o.code, 0, "{backend}: {}\n{}", o.stdout, o.stderr);
        let hosts: std::collections::BTreeSet<&str> = o
            .stdout
            .lines()
            .filter_map(|l| l.split("hvd-rank-on-").nth(1))
            .collect();
        assert_eq!(
            hosts.len(),
            2,
            "{backend}: a rank on each worker: {}",
            o.stdout
        );
        let mut c = e.hv(&dir);
        c.args(["undeploy", &id]);
        assert_eq!(run(c).code, 0);
    }
}

/// A cluster whose scheduler checks claims (two nodes, the synthetic kubelet): a pod whose
/// claim does not exist is kept off every node with `FailedScheduling`, which ends `deploy
/// --wait` with exit 1 within 5 s naming the claim; with the claim made by `storage:` the
/// same pods are scheduled and run.
#[test]
fn the_scheduler_keeps_pods_of_a_missing_claim_off_every_node() {
    let e = Cluster::start(Options {
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 2,
            ..Default::default()
        },
        ..Default::default()
    });
    let dir = init_app(&e.root, "sched", "mpi-hello");
    let t = Instant::now();
    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            "native",
            "--run-id",
            "c1",
            "--wait",
            "--skip-checks",
        ],
        &["volumes[0]={name: data, mountPath: /data, pvc: {claimName: nowhere}}"],
    );
    let took = t.elapsed();
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("Reason: "))
        .unwrap_or_else(|| panic!("{}", o.stderr));
    assert!(
        line.contains(
            "Pending: 0/2 nodes are available: persistentvolumeclaim \"nowhere\" not found"
        ) && line.contains(
            "(PersistentVolumeClaim nowhere does not exist and nothing of this run creates it)"
        ),
        "{line}"
    );
    // The pods are stuck from their creation: the 2 s before events are asked, then one look.
    assert!(took < WITHIN + Duration::from_secs(3), "{took:?}");
    eprintln!("missing claim (scheduler): deploy --wait exit 1 after {took:.1?}");
    undeploy(&e, &dir, "c1");

    let o = deploy(
        &e,
        &dir,
        &[
            "--backend",
            "native",
            "--run-id",
            "c2",
            "--wait",
            "--skip-checks",
        ],
        &["storage[0]={name: data, size: 1Gi, mountPath: /data}"],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let pods = e.fc.list("pods", Some("default"), "hvdctl.io/run=c2");
    assert!(!pods.is_empty());
    for p in &pods {
        assert!(
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "{p:#}"
        );
    }
    undeploy(&e, &dir, "c2");
}

/// A `storage:` claim of a class the cluster does not have stays Pending: `status` shows its
/// phase with the provisioner's event, and the pods' reason is the scheduler's unbound claim,
/// which waits (a class may be added) rather than failing.
#[test]
fn a_pending_claim_shows_the_provisioners_event() {
    let e = Cluster::start(Options {
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 1,
            ..Default::default()
        },
        ..Default::default()
    });
    let dir = init_app(&e.root, "pend", "mpi-hello");
    let o = deploy(
        &e,
        &dir,
        &["--backend", "native", "--run-id", "p1", "--skip-checks"],
        &["storage[0]={name: data, size: 5Gi, mountPath: /data, storageClass: fast}"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    e.fc.wait_for(
        "persistentvolumeclaims",
        "default",
        "pend-data",
        Duration::from_secs(30),
        |c| c.is_some_and(|c| c["status"]["phase"] == "Pending"),
    )
    .unwrap_or_else(|c| panic!("{c:#?}"));
    let t = Instant::now();
    loop {
        let mut c = e.hv(&dir);
        c.args(["status", "p1", "-o", "json"]);
        let s = run(c);
        assert_eq!(s.code, 0, "{}", s.stderr);
        let v: Value = serde_json::from_str(&s.stdout).unwrap();
        let reason = v["reason"].as_str().unwrap_or_default();
        if reason.contains("unbound immediate PersistentVolumeClaims") {
            assert_eq!(
                v["storage"],
                json!([{"name": "pend-data", "phase": "Pending", "size": "5Gi",
                    "message": "ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found"}]),
                "{v:#}"
            );
            break;
        }
        assert!(t.elapsed() < WITHIN, "{v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = e.hv(&dir);
    c.args(["status", "p1"]);
    let s = run(c);
    assert!(
        s.stdout.contains("Storage:    pend-data Pending (5Gi): ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found"),
        "{}",
        s.stdout
    );
    // Waiting, not failing: `status --wait` does not end on it.
    let mut c = e.hv(&dir);
    c.args(["status", "p1", "--wait"])
        .timeout(Duration::from_secs(4));
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), None, "still waiting when stopped: {o:?}");
    undeploy(&e, &dir, "p1");
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--volumes", "--yes"]);
    assert_eq!(run(c).code, 0);
    assert!(
        e.fc.get("persistentvolumeclaims", "default", "pend-data")
            .is_none()
    );
}
