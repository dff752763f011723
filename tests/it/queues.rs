//! Queued runs (issue 20 item 2) against `fake-cluster --kueue` and `--volcano`, which play
//! Kueue v0.19.2 and Volcano as the real ones do: two runs against a quota that holds one —
//! the second is Queued with Kueue's message and position 1 within 5 s of its deploy, then
//! admitted and successful after the first, with its `admitted` phase in `runs` (mpijob on the
//! Docker kubelet, where the MPI Operator starts a resumed job's launcher with its workers —
//! kubeflow/mpi-operator#615 — and the launcher's own wait makes the run train; native and
//! trainjob on the synthetic kubelet); an unknown LocalQueue fails `status --wait` and
//! `logs -f` within 5 s naming it; Volcano renders for every backend and a PodGroup that does
//! not fit shows its Unschedulable message; undeploy leaves nothing behind.

use crate::util::*;
use fake_cluster::{KubeletMode, Options};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The most a queue's word may take to show, from the end of the deploy.
const WITHIN: Duration = Duration::from_secs(5);

fn kueue_cluster(kubelet: KubeletMode, quota: &str) -> Cluster {
    Cluster::start(Options {
        mpi_operator: true,
        trainer: true,
        kueue: Some(fake_cluster::kueue::Quota::parse(quota).expect("quota")),
        pause_image: (kubelet == KubeletMode::Docker).then(busybox_image),
        kubelet,
        ..Default::default()
    })
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn status(e: &Cluster, dir: &std::path::Path, id: &str) -> Value {
    let mut c = e.hv(dir);
    c.args(["status", id, "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    json(&o.stdout)
}

/// Reads the run's status until `pred` holds (each read is one answer of the API server);
/// panics after `limit`, naming the last status.
fn status_until(
    e: &Cluster,
    dir: &std::path::Path,
    id: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let v = status(e, dir, id);
        if pred(&v) {
            return (v, start.elapsed());
        }
        assert!(start.elapsed() < limit, "after {limit:?}: {v}");
    }
}

fn deploy(e: &Cluster, dir: &std::path::Path, args: &[&str]) -> Out {
    let mut c = e.hv(dir);
    c.args(["deploy", "--skip-checks", "--no-push"]).args(args);
    run(c)
}

/// `--set` pairs: each value after its own `--set`.
fn sets<'a>(kv: &[&'a str]) -> Vec<&'a str> {
    kv.iter().flat_map(|s| ["--set", *s]).collect()
}

/// The second of two runs waits in Kueue while the first holds the quota, with Kueue's
/// reason and its place; it runs and succeeds after the first; `runs` shows it admitted.
/// The first run is held until the test lets it go (a file its ranks wait for), so nothing
/// here depends on how long anything takes.
fn second_run_waits_its_turn(kubelet: KubeletMode, backend: &str, image: Option<String>) {
    // mpi-hello asks 100m cpu + 128Mi for the launcher and 250m + 256Mi per worker: two
    // workers are 600m and 640Mi, which this quota holds once.
    let e = kueue_cluster(kubelet, "cpu=1,memory=1Gi");
    let dir = init_app(&e.root, "qq", "mpi-hello");
    let mut common = vec!["--backend", backend];
    if let Some(img) = &image {
        common.extend(["--image", img.as_str()]);
    }
    let first_args = |id: &'static str| -> Vec<String> {
        let mut a: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        a.extend(["--run-id", id].map(String::from));
        a.extend(["--set", "queue=team-a"].map(String::from));
        a
    };
    // Run 1 holds the quota until the test lets it go: on the Docker kubelet its ranks wait
    // for /tmp/go in their worker; on the synthetic kubelet its containers run silently
    // until it is undeployed.
    let hold: Vec<String> = match kubelet {
        KubeletMode::Docker => vec![
            "command=[sh, -c, 'until [ -e /tmp/go ]; do sleep 0.2; done; exec python3 /app/hello.py']".to_string(),
        ],
        _ => Vec::new(),
    };
    let mut a1 = first_args("q1");
    for h in &hold {
        a1.extend(["--set".to_string(), h.clone()]);
    }
    let a1: Vec<&str> = a1.iter().map(String::as_str).collect();
    let o = deploy(&e, &dir, &a1);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Admitted: it holds the quota.
    let (v, _) = status_until(&e, &dir, "q1", Duration::from_secs(120), |v| {
        v["phases"]["admitted"].is_string()
    });
    assert_eq!(v["queue"]["system"], "kueue", "{v}");
    assert_eq!(v["queue"]["name"], "team-a", "{v}");
    assert_eq!(v["queue"]["clusterQueue"], "gpu", "{v}");

    // Run 2: Queued within 5 s, with Kueue's message and position 1 (Kueue's 0).
    let mut a2 = first_args("q2");
    if kubelet != KubeletMode::Docker {
        a2.extend(
            [
                "--set",
                "env.FAKE_KUBELET_ONLY=launcher",
                "--set",
                "env.FAKE_KUBELET_LINES=3",
            ]
            .map(String::from),
        );
    }
    let a2: Vec<&str> = a2.iter().map(String::as_str).collect();
    let o = deploy(&e, &dir, &a2);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let (v, took) = status_until(&e, &dir, "q2", Duration::from_secs(60), |v| {
        v["state"] == "Queued" && v["queue"]["position"] == 1
    });
    eprintln!("{backend}: Queued with position 1 {took:.1?} after its deploy");
    assert!(
        took <= WITHIN,
        "Queued with its position after {took:?}: {v}"
    );
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("couldn't assign flavors to pod set ")
            && reason.contains("insufficient unused quota for cpu in flavor default-flavor"),
        "{v}"
    );
    assert_eq!(v["queue"]["clusterQueue"], "gpu", "{v}");
    assert!(v["phases"]["admitted"].is_null(), "{v}");
    let mut c = e.hv(&dir);
    c.args(["status", "q2"]);
    let text = run(c).stdout;
    assert!(
        text.contains(
            "State:      Queued (Kueue: LocalQueue team-a → ClusterQueue gpu; position 1)"
        ),
        "{text}"
    );
    assert!(text.contains(&format!("Reason:     {reason}")), "{text}");
    // `runs` says Queued too.
    let mut c = e.hv(&dir);
    c.args(["runs", "-o", "json"]);
    let o = run(c);
    let rows = json(&o.stdout);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "q2")
        .expect("q2 in runs")
        .clone();
    assert_eq!(row["state"], "Queued", "{row}");
    assert_eq!(row["queue"]["name"], "team-a", "{row}");

    // Let run 1 finish; run 2 is admitted and succeeds (`status --wait` waits through
    // Queued).
    match kubelet {
        KubeletMode::Docker => {
            // Its workers' containers run (the ranks in them wait for the file).
            status_until(&e, &dir, "q1", Duration::from_secs(240), |v| {
                let workers: Vec<&Value> = v["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["role"] == "worker")
                    .collect();
                workers.len() == 2 && workers.iter().all(|p| p["phase"] == "Running")
            });
            for i in ["0", "1"] {
                let mut c = e.hv(&dir);
                c.args(["exec", "q1", "--index", i, "--", "touch", "/tmp/go"]);
                let o = run(c);
                assert_eq!(o.code, 0, "{}", o.stderr);
            }
        }
        _ => {
            // Run 1's end (its Workload goes with it) frees the quota.
            let mut c = e.hv(&dir);
            c.args(["undeploy", "q1"]);
            let o = run(c);
            assert_eq!(o.code, 0, "{}", o.stderr);
        }
    }
    let mut c = e.hv(&dir);
    c.args(["status", "q2", "--wait", "-o", "json"]);
    c.timeout(Duration::from_secs(300));
    let o = run(c);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["state"], "Succeeded", "{v}");
    let mut c = e.hv(&dir);
    c.args(["runs", "-o", "json"]);
    let rows = json(&run(c).stdout);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "q2")
        .unwrap()
        .clone();
    let admitted = row["phases"]["admitted"].as_str().expect("admitted phase");
    let created = row["phases"]["created"].as_str().unwrap();
    assert!(admitted >= created, "{row}");
    assert!(row["queue"]["position"].is_null(), "{row}");
    if kubelet == KubeletMode::Docker {
        // Both runs trained: every rank of each, although run 2's launcher started with
        // its workers (MPI Operator v0.8 with a suspended job).
        for id in ["q1", "q2"] {
            let mut c = e.hv(&dir);
            c.args(["logs", id]);
            let out = run(c).stdout;
            assert!(out.contains("= 1 (expected 1) OK"), "{id}: {out}");
            if id == "q2" {
                assert!(out.contains("hvdctl: worker "), "{id}: {out}");
            }
        }
    }
    // Undeploy leaves nothing: no Workload, no PodGroup, no pod.
    for id in ["q1", "q2"] {
        let mut c = e.hv(&dir);
        c.args(["undeploy", id]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    // Undeploy waits until the run's objects are gone; a pod group's Workload (owned by its
    // pods, no run label) goes with the garbage collector's next pass after the last pod.
    workloads_gone(&e.fc);
    let pods = e.fc.list("pods", Some("default"), "");
    assert!(pods.is_empty(), "{pods:?}");
}

#[test]
fn kueue_queues_the_second_mpijob_run_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    second_run_waits_its_turn(KubeletMode::Docker, "mpijob", Some(img));
}

#[test]
fn kueue_queues_the_second_native_run() {
    second_run_waits_its_turn(KubeletMode::Synthetic, "native", None);
}

#[test]
fn kueue_queues_the_second_trainjob_run() {
    second_run_waits_its_turn(KubeletMode::Synthetic, "trainjob", None);
}

/// A LocalQueue that does not exist: Kueue calls the Workload Inadmissible; `status --wait`
/// and `logs -f` end with exit 1 within 5 s, naming the queue.
fn an_unknown_local_queue_fails(backend: &str) {
    let e = kueue_cluster(KubeletMode::Synthetic, "cpu=8");
    let dir = init_app(&e.root, "qx", "mpi-hello");
    let id = "x1";
    let o = deploy(
        &e,
        &dir,
        &[
            &["--backend", backend, "--run-id", id][..],
            &sets(&["queue=team-x"]),
        ]
        .concat(),
    );
    assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
    for what in [&["status", id, "--wait"][..], &["logs", "-f", id]] {
        let start = Instant::now();
        let mut c = e.hv(&dir);
        c.args(what);
        c.timeout(Duration::from_secs(60));
        let o = run(c);
        let took = start.elapsed();
        assert_eq!(o.code, 1, "{backend} {what:?}: {}\n{}", o.stdout, o.stderr);
        // `status --wait` says it in its report, `logs -f` as its `Reason:` line.
        assert!(
            format!("{}{}", o.stdout, o.stderr).contains("LocalQueue team-x doesn't exist"),
            "{backend} {what:?}: {}\n{}",
            o.stdout,
            o.stderr
        );
        eprintln!("{backend} {what:?}: exit 1 after {took:.1?}");
        assert!(took <= WITHIN, "{backend} {what:?}: {took:?}");
    }
    let v = status(&e, &dir, id);
    assert_eq!(v["state"], "Queued", "{v}");
    assert_eq!(v["queue"]["position"], Value::Null, "{v}");
    // `deploy --wait` too.
    let o = deploy(
        &e,
        &dir,
        &[
            &["--backend", backend, "--run-id", "x2", "--wait"][..],
            &sets(&["queue=team-x"]),
        ]
        .concat(),
    );
    assert_eq!(o.code, 1, "{backend} deploy --wait: {}", o.stderr);
    assert!(
        o.stderr.contains("LocalQueue team-x doesn't exist"),
        "{backend} deploy --wait: {}",
        o.stderr
    );
    for id in [id, "x2"] {
        let mut c = e.hv(&dir);
        c.args(["undeploy", id]);
        assert_eq!(run(c).code, 0);
    }
    workloads_gone(&e.fc);
}

/// No Workload is left in `default` (within 60 s: the garbage collector removes a pod
/// group's Workload in a pass of its own, after its last pod).
fn workloads_gone(fc: &fake_cluster::FakeCluster) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let wls = fc.list("workloads", Some("default"), "");
        if wls.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "Workloads left after 60 s: {wls:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn an_unknown_local_queue_fails_an_mpijob_run_within_five_seconds() {
    an_unknown_local_queue_fails("mpijob");
}

#[test]
fn an_unknown_local_queue_fails_a_trainjob_run_within_five_seconds() {
    an_unknown_local_queue_fails("trainjob");
}

#[test]
fn an_unknown_local_queue_fails_a_native_run_within_five_seconds() {
    an_unknown_local_queue_fails("native");
}

/// deploy's checks refuse a queue the run would wait in for ever — an unknown LocalQueue,
/// Volcano or Kueue not installed — naming it, before anything is created or recorded;
/// `--skip-checks` deploys anyway (the tests above).
#[test]
fn deploy_refuses_a_queue_that_would_never_admit_the_run() {
    let refused = |e: &Cluster, dir: &std::path::Path, set: &str, says: &str| {
        for backend in ["mpijob", "native", "trainjob"] {
            let mut c = e.hv(dir);
            c.args([
                "deploy",
                "--no-push",
                "--backend",
                backend,
                "--run-id",
                "r1",
            ])
            .args(["--set", set]);
            let o = run(c);
            assert_eq!(o.code, 1, "{backend} {set}: {}", o.stderr);
            assert!(
                o.stderr.contains(&format!(
                    "refusing to deploy to namespace default (nothing was created): {says}"
                )),
                "{backend} {set}: {}",
                o.stderr
            );
            assert!(e.ours("hvdctl.io/run=r1").is_empty(), "{backend} {set}");
            assert!(
                !std::fs::read_to_string(dir.join(".hvdctl/runs.json"))
                    .unwrap_or_default()
                    .contains("\"r1\""),
                "{backend} {set}: recorded"
            );
        }
    };
    let e = kueue_cluster(KubeletMode::Synthetic, "cpu=8");
    let dir = init_app(&e.root, "qr", "mpi-hello");
    refused(
        &e,
        &dir,
        "queue=team-x",
        "LocalQueue team-x (named in queue) does not exist in namespace default",
    );
    refused(
        &e,
        &dir,
        "scheduling.volcano={}",
        "scheduling.volcano: Volcano is not installed",
    );
    let e = volcano_cluster();
    let dir = init_app(&e.root, "qr", "mpi-hello");
    refused(&e, &dir, "queue=team-a", "queue: Kueue is not installed");
}

/// doctor: Kueue's kinds served, the LocalQueue there and pointing at a ClusterQueue; an
/// unknown LocalQueue fails naming it; Volcano's kinds missing fail.
#[test]
fn doctor_checks_the_queue() {
    let e = kueue_cluster(KubeletMode::Synthetic, "cpu=8");
    let dir = init_app(&e.root, "qd", "mpi-hello");
    let queue_check = |sets: &[&str]| -> Value {
        let mut args = vec!["doctor", "-o", "json"];
        for s in sets {
            args.extend(["--set", s]);
        }
        let o = hv(&dir, Some(&e.kubeconfig), &args);
        let v = json(&o.stdout);
        v["checks"]
            .as_array()
            .or(v.as_array())
            .unwrap()
            .iter()
            .find(|c| c["check"] == "queue")
            .cloned()
            .unwrap_or_else(|| panic!("no queue check: {v}"))
    };
    let c = queue_check(&["queue=team-a"]);
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(
        c["message"],
        "Kueue: LocalQueue team-a in namespace default → ClusterQueue gpu"
    );
    let c = queue_check(&["queue=team-x"]);
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("LocalQueue team-x (named in queue) does not exist in namespace default"),
        "{c}"
    );
    // This cluster has no Volcano.
    let c = queue_check(&["scheduling.volcano={}"]);
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("Volcano is not installed"),
        "{c}"
    );
    // Without a queue there is no queue check.
    let o = hv(&dir, Some(&e.kubeconfig), &["doctor", "-o", "json"]);
    let v = json(&o.stdout);
    let checks = v["checks"].as_array().or(v.as_array()).unwrap();
    assert!(checks.iter().any(|c| c["check"] == "kinds"), "{v}");
    assert!(!checks.iter().any(|c| c["check"] == "queue"), "{v}");
}

/// One node of 2 CPUs: a gang of two 1-CPU workers and a launcher does not fit.
fn volcano_cluster() -> Cluster {
    Cluster::start(Options {
        mpi_operator: true,
        trainer: true,
        volcano: true,
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 1,
            cpu: "2".into(),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The schema of a CRD fixture (`tests/fixtures/crds/<name>.schema.json`).
fn crd_schema(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/crds")
        .join(format!("{name}.schema.json"));
    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    fake_cluster::schema::of_fixture(&v).clone()
}

/// Every rendered object of a kind with a CRD fixture validates strictly against it.
fn validate(items: &[Value]) -> usize {
    let mut checked = 0;
    for o in items {
        let fixture = match o["kind"].as_str() {
            Some("PodGroup") => "volcano-v1.15.1-podgroups",
            Some("TrainJob") => "trainer-v2.3.0-trainjobs",
            Some("TrainingRuntime") => "trainer-v2.3.0-trainingruntimes",
            _ => continue,
        };
        let errors = fake_cluster::schema::errors(&crd_schema(fixture), o);
        assert_eq!(errors, Vec::<String>::new(), "{o}");
        checked += 1;
    }
    checked
}

/// What each backend renders for Volcano: the MPIJob's schedulingPolicy, native's PodGroup
/// and pods, the TrainJob's queue in hvdctl's runtime patch and the runtime's policy.
#[test]
fn volcano_renders_for_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "vr", "mpi-hello");
    let render = |backend: &str| -> Vec<Value> {
        let mut c = hvdctl();
        c.arg("-C").arg(&dir).args([
            "deploy",
            "--dry-run",
            "-o",
            "json",
            "--backend",
            backend,
            "--run-id",
            "r1",
            "--set",
            "scheduling.volcano={queue: q1, priorityClass: high}",
        ]);
        let o = run(c);
        assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
        json(&o.stdout)["items"].as_array().unwrap().clone()
    };
    let kind = |items: &[Value], k: &str| -> Vec<Value> {
        items.iter().filter(|o| o["kind"] == k).cloned().collect()
    };
    // The PodGroup and the Trainer's objects against their CRDs.
    assert_eq!(validate(&render("native")), 1);
    assert_eq!(validate(&render("trainjob")), 2);
    let items = render("mpijob");
    let job = &kind(&items, "MPIJob")[0];
    assert_eq!(
        job["spec"]["runPolicy"]["schedulingPolicy"],
        serde_json::json!({"minAvailable": 3, "queue": "q1", "priorityClass": "high"})
    );
    assert_eq!(
        job["metadata"]["annotations"]["hvdctl.io/queue"],
        "volcano/q1"
    );
    assert!(job["spec"]["runPolicy"]["suspend"].is_null(), "{job}");

    let items = render("native");
    let pg = &kind(&items, "PodGroup")[0];
    assert_eq!(pg["apiVersion"], "scheduling.volcano.sh/v1beta1");
    assert_eq!(pg["metadata"]["name"], "vr-r1");
    assert_eq!(pg["metadata"]["labels"]["hvdctl.io/run"], "r1");
    assert_eq!(
        pg["spec"],
        serde_json::json!({"minMember": 3, "queue": "q1", "priorityClassName": "high"})
    );
    let pods = kind(&items, "Pod");
    assert_eq!(pods.len(), 2);
    for p in &pods {
        assert_eq!(p["spec"]["schedulerName"], "volcano", "{p}");
        assert_eq!(
            p["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
            "vr-r1"
        );
    }
    let launcher = &kind(&items, "Job")[0];
    let t = &launcher["spec"]["template"];
    assert_eq!(t["spec"]["schedulerName"], "volcano");
    assert_eq!(
        t["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "vr-r1"
    );
    assert_eq!(
        launcher["metadata"]["annotations"]["hvdctl.io/queue"],
        "volcano/q1"
    );

    let items = render("trainjob");
    let rt = &kind(&items, "TrainingRuntime")[0];
    assert_eq!(
        rt["spec"]["podGroupPolicy"],
        serde_json::json!({"volcano": {}})
    );
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
    {
        let ps = &rj["template"]["spec"]["template"]["spec"];
        assert_eq!(ps["schedulerName"], "volcano", "{rj}");
        assert_eq!(ps["priorityClassName"], "high", "{rj}");
    }
    let tj = &kind(&items, "TrainJob")[0];
    let patch = tj["spec"]["runtimePatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["manager"] == "hvdctl.io/hvdctl")
        .unwrap();
    assert_eq!(
        patch["trainingRuntimeSpec"]["template"]["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"],
        "q1"
    );
    // The queue is not in the TrainJob's own annotations (the Trainer does not read them).
    assert!(
        tj["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"].is_null(),
        "{tj}"
    );
}

/// What each backend renders for Kueue: the label and a suspended job (mpijob, trainjob),
/// and native's pod group on every pod but not on the launcher Job.
#[test]
fn kueue_renders_for_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "kr", "mpi-hello");
    let render = |backend: &str| -> Vec<Value> {
        let mut c = hvdctl();
        c.arg("-C").arg(&dir).args([
            "deploy",
            "--dry-run",
            "-o",
            "json",
            "--backend",
            backend,
            "--run-id",
            "r1",
            "--set",
            "queue=team-a",
        ]);
        let o = run(c);
        assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
        json(&o.stdout)["items"].as_array().unwrap().clone()
    };
    let kind = |items: &[Value], k: &str| -> Vec<Value> {
        items.iter().filter(|o| o["kind"] == k).cloned().collect()
    };
    let q = "kueue.x-k8s.io/queue-name";
    let items = render("mpijob");
    let job = &kind(&items, "MPIJob")[0];
    assert_eq!(job["metadata"]["labels"][q], "team-a");
    assert_eq!(job["spec"]["runPolicy"]["suspend"], true);
    // The launcher waits for every worker itself (kubeflow/mpi-operator#615).
    let cmd =
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
            .as_array()
            .unwrap();
    assert!(
        cmd[2].as_str().unwrap().contains("did not accept ssh"),
        "{cmd:?}"
    );

    let items = render("trainjob");
    assert_eq!(validate(&items), 2);
    let tj = &kind(&items, "TrainJob")[0];
    assert_eq!(tj["metadata"]["labels"][q], "team-a");
    assert_eq!(tj["spec"]["suspend"], true);

    let items = render("native");
    let launcher = &kind(&items, "Job")[0];
    assert!(launcher["metadata"]["labels"][q].is_null(), "{launcher}");
    let t = &launcher["spec"]["template"]["metadata"];
    assert_eq!(t["labels"][q], "team-a");
    assert_eq!(t["annotations"]["kueue.x-k8s.io/pod-group-name"], "kr-r1");
    assert_eq!(
        t["annotations"]["kueue.x-k8s.io/pod-group-total-count"],
        "3"
    );
    for p in kind(&items, "Pod") {
        let m = &p["metadata"];
        assert_eq!(m["labels"][q], "team-a");
        assert_eq!(m["annotations"]["kueue.x-k8s.io/pod-group-name"], "kr-r1");
        assert_eq!(
            m["annotations"]["kueue.x-k8s.io/pod-group-total-count"],
            "3"
        );
        assert_eq!(
            m["annotations"]["kueue.x-k8s.io/retriable-in-group"],
            "false"
        );
    }
}

/// A gang that does not fit the cluster's nodes: the PodGroup stays Pending and the run is
/// Queued with Volcano's Unschedulable message; undeploy removes the PodGroup too.
#[test]
fn a_volcano_gang_that_does_not_fit_shows_its_pending_message() {
    let e = volcano_cluster();
    let dir = init_app(&e.root, "vg", "mpi-hello");
    for (i, backend) in ["native", "mpijob", "trainjob"].iter().enumerate() {
        let id = format!("g{i}");
        let o = deploy(
            &e,
            &dir,
            &[
                &["--backend", backend, "--run-id", &id][..],
                &sets(&["scheduling.volcano={}", "resources.worker.requests.cpu=1"]),
            ]
            .concat(),
        );
        assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
        let (v, _) = status_until(&e, &dir, &id, Duration::from_secs(60), |v| {
            v["state"] == "Queued"
                && v["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("tasks in gang unschedulable"))
        });
        assert_eq!(v["queue"]["system"], "volcano", "{backend}: {v}");
        assert_eq!(v["queue"]["name"], "default", "{backend}: {v}");
        let mut c = e.hv(&dir);
        c.args(["status", &id]);
        let text = run(c).stdout;
        assert!(
            text.contains("State:      Queued (Volcano: queue default)"),
            "{text}"
        );
        let mut c = e.hv(&dir);
        c.args(["undeploy", &id]);
        assert_eq!(run(c).code, 0);
        assert!(
            e.fc.get("podgroups", "default", &format!("vg-{id}"))
                .is_none()
        );
    }
}

/// Under Volcano a runtime the app names must make PodGroups (`podGroupPolicy.volcano`):
/// deploy refuses one without it, naming it, and creates nothing; doctor fails it; with the
/// policy the run deploys.
#[test]
fn a_named_runtime_without_volcano_policy_is_refused() {
    let e = volcano_cluster();
    let dir = init_app(&e.root, "vn", "mpi-hello");
    // The admin's runtime: hvdctl's own, as a ClusterTrainingRuntime without the policy.
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "trainjob",
        "--run-id",
        "x",
        "--dry-run",
        "-o",
        "json",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut rt = json(&o.stdout)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "TrainingRuntime")
        .unwrap()
        .clone();
    rt["kind"] = "ClusterTrainingRuntime".into();
    rt["metadata"] = serde_json::json!({"name": "team-mpi"});
    e.fc.create(rt.clone())
        .expect("ClusterTrainingRuntime created");
    let args = [
        "--backend",
        "trainjob",
        "--run-id",
        "n1",
        "--set",
        "trainjob.runtime=team-mpi",
        "--set",
        "scheduling.volcano={queue: default}",
    ];
    let o = deploy(&e, &dir, &args);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "ClusterTrainingRuntime team-mpi (named in trainjob.runtime) has no spec.podGroupPolicy.volcano"
        ),
        "{}",
        o.stderr
    );
    assert!(e.fc.list("trainjobs", None, "").is_empty());
    let mut c = e.hv(&dir);
    c.args(["doctor", "-o", "json"])
        .args(&args[..2])
        .args(&args[4..]);
    let v = json(&run(c).stdout);
    let check = v["checks"]
        .as_array()
        .or(v.as_array())
        .unwrap()
        .iter()
        .find(|c| c["check"] == "trainjob.runtime")
        .cloned()
        .unwrap();
    assert_eq!(check["status"], "fail", "{check}");
    // With the policy it deploys.
    e.fc.mutate("clustertrainingruntimes", "", "team-mpi", |o| {
        o["spec"]["podGroupPolicy"] = serde_json::json!({"volcano": {}});
    })
    .expect("runtime");
    let o = deploy(&e, &dir, &args);
    assert_eq!(o.code, 0, "{}", o.stderr);
}
