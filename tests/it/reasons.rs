//! Why a run failed, said by `status` (text and JSON, the run and each pod), `logs -f` and
//! `deploy --wait/--logs` (exit 1 within 5 s of the failure): out of memory, an image that
//! cannot be pulled, a crash loop, a failed launcher and the first rank that failed, no node
//! that fits, workers whose sshd the launcher waits for. On the fake cluster's synthetic
//! kubelet (its `FAKE_KUBELET_*` faults) for the mpijob and native backends, and for real on
//! its Docker kubelet and the local backend.

use crate::util::*;
use fake_cluster::Options;
use fake_cluster::scheduler::NodeSpec;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// The 5 s of the issue: a waiting command ends this soon after the failure.
const WITHIN: Duration = Duration::from_secs(5);

fn deploy(e: &Cluster, dir: &Path, backend: &str, id: &str, sets: &[&str], extra: &[&str]) -> Out {
    let mut c = e.hv(dir);
    c.args(["deploy", "--backend", backend, "--run-id", id]);
    for s in sets {
        c.args(["--set", s]);
    }
    c.args(extra);
    run(c)
}

fn status_json(e: &Cluster, dir: &Path, id: &str) -> Value {
    let mut c = e.hv(dir);
    c.args(["status", id, "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

/// Polls `status -o json` until `ok` holds (two minutes at most: a bound on a hang, not a timing).
fn status_until(e: &Cluster, dir: &Path, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = status_json(e, dir, id);
        if ok(&v) || start.elapsed() > Duration::from_secs(120) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod_reason<'a>(v: &'a Value, name: &str) -> &'a str {
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["reason"].as_str())
        .unwrap_or_else(|| panic!("{name} has no reason: {v:#}"))
}

fn run_reason(v: &Value) -> &str {
    v["reason"].as_str().unwrap_or_default()
}

/// The pod (or container) reason starting `OOMKilled` that the run's reason names.
fn oom_named_by_run(v: &Value) -> String {
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["reason"].as_str())
        .find(|r| r.starts_with("OOMKilled") && run_reason(v).contains(r))
        .unwrap_or_else(|| panic!("no pod or container says OOMKilled: {v:#}"))
        .to_string()
}

/// A timed hvdctl run: its output and how long it took.
fn timed(mut c: assert_cmd::Command) -> (Out, Duration) {
    let t = Instant::now();
    c.timeout(Duration::from_secs(60));
    let o = run(c);
    (o, t.elapsed())
}

#[test]
fn out_of_memory_names_pod_container_limit_and_exit() {
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, id) in [("mpijob", "o1"), ("native", "o2")] {
        let o = deploy(
            &e,
            &dir,
            backend,
            id,
            &[
                "env.FAKE_KUBELET_OOM=worker-1",
                "resources.worker.requests.memory=64Mi",
                "resources.worker.limits.memory=64Mi",
            ],
            &[],
        );
        assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
        let (o, took) = timed({
            let mut c = e.hv(&dir);
            c.args(["logs", "-f", id]);
            c
        });
        let pod = format!("demo-{id}-worker-1");
        let want = format!(
            "OOMKilled: container worker of {pod} exceeded its memory limit 64Mi (exit 137)"
        );
        assert_eq!(o.code, 1, "{backend}: {}", o.stderr);
        assert!(o.stderr.contains(&want), "{backend}: {}", o.stderr);
        assert!(took < WITHIN, "{backend}: logs -f took {took:?}");
        let v = status_json(&e, &dir, id);
        assert!(
            v["reason"].as_str().is_some_and(|r| r.contains(&want)),
            "{backend}: {v:#}"
        );
        assert_eq!(pod_reason(&v, &pod), want, "{backend}");
        let mut c = e.hv(&dir);
        c.args(["status", id]);
        let text = run(c).stdout;
        assert!(text.contains("Reason:     "), "{text}");
        assert!(text.contains(&format!("reason: {want}")), "{text}");
        eprintln!("{backend}: OOMKilled → logs -f exit 1 after {took:.1?}");
    }
}

#[test]
fn an_image_that_cannot_be_pulled_ends_deploy_wait_and_logs() {
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, id, flag) in [
        ("mpijob", "p1", "--wait"),
        ("native", "p2", "--wait"),
        ("mpijob", "p3", "--logs"),
        ("native", "p4", "--logs"),
    ] {
        let t = Instant::now();
        let o = deploy(
            &e,
            &dir,
            backend,
            id,
            &["env.FAKE_KUBELET_PULL=fail:worker-0"],
            &[flag],
        );
        let took = t.elapsed();
        assert_eq!(o.code, 1, "{backend} {flag}: {}", o.stderr);
        let pod = format!("demo-{id}-worker-0");
        assert!(
            o.stderr.contains(&format!("Reason: {pod}: "))
                && (o.stderr.contains("ErrImagePull: image")
                    || o.stderr.contains("ImagePullBackOff: image"))
                && o.stderr.contains("not found"),
            "{backend} {flag}: {}",
            o.stderr
        );
        // The pull fails ~0.1 s after the pod is created: the whole deploy stays in 5 s.
        assert!(took < WITHIN, "{backend} {flag}: deploy took {took:?}");
        eprintln!("{backend}: ErrImagePull → deploy {flag} exit 1 after {took:.1?}");
        let v = status_until(&e, &dir, id, |v| {
            v["reason"]
                .as_str()
                .is_some_and(|r| r.contains("ImagePullBackOff"))
        });
        let r = pod_reason(&v, &pod);
        assert!(r.starts_with("ImagePullBackOff: image \""), "{r}");
        assert!(
            r.contains("of container worker: Back-off pulling image"),
            "{r}"
        );
    }
}

#[test]
fn a_failed_launcher_names_the_first_rank_that_failed_and_its_last_lines() {
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    // native: every container fails, the first worker is the first rank that failed. mpijob:
    // its workers run sshd (the operator creates the launcher once they are ready), the
    // launcher fails; which rank failed is then in the MPI's summary (the Docker kubelet
    // test below runs one for real).
    for (backend, id, only) in [("mpijob", "f1", "launcher"), ("native", "f2", "1")] {
        let o = deploy(
            &e,
            &dir,
            backend,
            id,
            &[
                "env.FAKE_KUBELET_LINES=2",
                "env.FAKE_KUBELET_EXIT=3",
                &format!("env.FAKE_KUBELET_ONLY={only}"),
            ],
            &[],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let mut c = e.hv(&dir);
        c.args(["status", id, "--wait", "-o", "json"]);
        let o = run(c);
        assert_eq!(o.code, 1, "{backend}: {}", o.stdout);
        let mut v: Value = serde_json::from_str(&o.stdout).unwrap();
        // The first rank that failed (or the launcher), with its last lines as the fake
        // kubelet wrote them.
        let first = match backend {
            "native" => "; first to fail: demo-",
            _ => " failed: Failed: container launcher exited with code 3",
        };
        // Every native container fails at about the same time; on a busy machine the launcher
        // may end (and `--wait` return) before a worker has: the reason names the first
        // worker to fail once one has.
        if backend == "native" {
            v = status_until(&e, &dir, id, |v| {
                v["reason"].as_str().is_some_and(|r| r.contains(first))
            });
        }
        let r = v["reason"].as_str().unwrap_or_default();
        assert!(
            r.starts_with(&format!("launcher demo-{id}-launcher")) && r.contains(" failed"),
            "{backend}: {r}"
        );
        assert!(r.contains(first), "{backend}: {r}");
        assert!(r.contains("exited with code 3"), "{backend}: {r}");
        assert!(r.contains("; last lines: \"pod=demo-"), "{backend}: {r}");
        assert!(r.contains("line 1\""), "{backend}: {r}");
    }
}

#[test]
fn a_crash_loop_names_exit_code_restarts_and_last_lines() {
    // Containers that restart OnFailure crash again and again: native's workers. (An mpijob
    // has none: hvdctl's launcher and the operator's workers are restartPolicy Never.)
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let (id, prefix) = ("c1", "demo-c1-worker-0");
    let o = deploy(
        &e,
        &dir,
        "native",
        id,
        &[
            "env.FAKE_KUBELET_LINES=2",
            "env.FAKE_KUBELET_RESTARTS=1000",
            "runPolicy.backoffLimit=1000",
        ],
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let looping = |v: &Value| {
        v["pods"].as_array().and_then(|ps| {
            ps.iter().find_map(|p| {
                let name = p["name"].as_str()?;
                let r = p["reason"].as_str()?;
                (name.starts_with(prefix) && r.starts_with("CrashLoopBackOff"))
                    .then(|| (name.to_string(), r.to_string()))
            })
        })
    };
    let v = status_until(&e, &dir, id, |v| looping(v).is_some());
    let (pod, r) = looping(&v).unwrap_or_else(|| panic!("{v:#}"));
    assert!(
        r.starts_with("CrashLoopBackOff: container worker exited with code 1, restarted ")
            && r.contains(" time(s); last lines: "),
        "{r}"
    );
    assert!(
        r.contains(&format!("\"pod={pod} container=worker restart=")) && r.contains("line 2\""),
        "{r}"
    );
    assert!(v["reason"].as_str().is_some(), "{v:#}");
}

#[test]
fn no_node_that_fits_is_the_schedulers_message() {
    let e = Cluster::start(Options {
        mpi_operator: true,
        nodes: NodeSpec {
            count: 2,
            ..Default::default()
        },
        ..Default::default()
    });
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, id) in [("mpijob", "u1"), ("native", "u2")] {
        let t = Instant::now();
        let o = deploy(
            &e,
            &dir,
            backend,
            id,
            &["gpusPerWorker=1"],
            &["--wait", "--skip-checks"],
        );
        let took = t.elapsed();
        assert_eq!(o.code, 1, "{backend}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!("Reason: demo-{id}-worker-0: Pending: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu"))
                || o.stderr.contains(&format!("Reason: demo-{id}-worker-1: Pending: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu")),
            "{backend}: {}",
            o.stderr
        );
        assert!(took < WITHIN, "{backend}: {took:?}");
        // `--wait` may have ended on worker-1's reason; the scheduler writes worker-0's in a
        // write of its own.
        let w0 = format!("demo-{id}-worker-0");
        let v = status_until(&e, &dir, id, |v| {
            v["pods"].as_array().unwrap().iter().any(|p| {
                p["name"] == w0.as_str()
                    && p["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("Pending: 0/2 nodes are available"))
            })
        });
        let r = pod_reason(&v, &w0);
        assert!(r.starts_with("Pending: 0/2 nodes are available"), "{r}");
    }
}

/// A busy cluster: workers that fit a node once the pods there end wait (the reason says so
/// and `status --wait` goes on), and run when room is made. (mpijob: its launcher starts
/// once the workers are ready, as a real launcher would wait for them.)
#[test]
fn a_worker_waiting_for_room_is_not_a_failure() {
    let e = Cluster::start(Options {
        mpi_operator: true,
        nodes: NodeSpec {
            count: 2,
            cpu: "2".into(),
            ..Default::default()
        },
        ..Default::default()
    });
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let big = "resources.worker.requests.cpu=1500m";
    // a1's workers take 1.5 of each node's 2 cpus, and run until undeployed.
    let o = deploy(&e, &dir, "mpijob", "a1", &[big], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let b1 = [
        big,
        "env.FAKE_KUBELET_LINES=2",
        "env.FAKE_KUBELET_ONLY=launcher",
    ];
    let o = deploy(&e, &dir, "mpijob", "b1", &b1, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = status_until(&e, &dir, "b1", |v| {
        pod_reason(v, "demo-b1-worker-0").contains("Insufficient cpu")
    });
    let r = pod_reason(&v, "demo-b1-worker-0");
    assert!(
        r.starts_with("Pending: 0/2 nodes are available: 2 Insufficient cpu")
            && r.ends_with(" (waiting: 2 of 2 node(s) can hold it when pods there end)"),
        "{r}"
    );
    let spawn = |args: &[&str]| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("hvdctl"))
            .env("KUBECONFIG", &e.kubeconfig)
            .arg("-C")
            .arg(&dir)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (jobs, nodes) = (
        requests(&e.fc, "get mpijobs"),
        requests(&e.fc, "list nodes"),
    );
    let waiting = spawn(&["status", "b1", "--wait"]);
    let following = spawn(&["logs", "b1", "-f"]);
    // Not a time but looks: several reads of the job (status --wait's rounds) and of the nodes
    // (each one's explanation of the unschedulable worker) — idle, that is about 2 s.
    wait_requests(&e.fc, "get mpijobs", jobs, 6, Duration::from_secs(60));
    wait_requests(&e.fc, "list nodes", nodes, 6, Duration::from_secs(60));
    let mut both = [("status --wait", waiting), ("logs -f", following)];
    for (what, child) in &mut both {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{what} ended while b1 waited for room"
        );
    }
    let mut c = e.hv(&dir);
    c.args(["undeploy", "a1"]);
    assert_eq!(run(c).code, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    for (what, child) in &mut both {
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} of b1 did not end within 120 s of the room made for it");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let [(_, waiting), (_, following)] = both;
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Succeeded"));
    let out = following.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("restart=0 line 2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_launcher_waiting_for_sshd_names_the_workers_not_ready() {
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, id) in [("mpijob", "s1"), ("native", "s2")] {
        let o = deploy(
            &e,
            &dir,
            backend,
            id,
            &["env.FAKE_KUBELET_HANG=worker-1", "workers=3"],
            &[],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        // native's launcher waits in launcher.sh; the operator creates mpijob's launcher
        // only once every worker is ready.
        let not_ready = format!("1 worker(s) not ready: demo-{id}-worker-1");
        let ok = |v: &Value| {
            v["reason"].as_str().is_some_and(|r| match backend {
                "native" => {
                    r.starts_with(&format!("launcher demo-{id}-launcher-"))
                        && r.ends_with(&format!(" is waiting for the sshd of {not_ready}"))
                }
                _ => {
                    r == format!("the launcher is created once every worker is ready; {not_ready}")
                }
            })
        };
        let v = status_until(&e, &dir, id, ok);
        assert!(ok(&v), "{backend}: {v:#}");
    }
}

// --- For real: the Docker kubelet and the local backend ------------------------------------

/// A rank that writes 300 MiB in a worker limited to 64Mi: the kernel's OOM killer, for real.
const HOG: &str = "command=[python3, -c, \"b = b'x' * (300 << 20); print(len(b))\"]";
const LIMIT: [&str; 2] = [
    "resources.worker.requests.memory=64Mi",
    "resources.worker.limits.memory=64Mi",
];

/// On the Docker kubelet (pods are containers): a rank over its worker's memory limit, and
/// an image that does not exist, each named with the exact container, limit and exit code.
#[test]
fn real_out_of_memory_and_missing_image_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = Cluster::docker_kubelet(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let hog = |backend: &str, id: &str| {
        let mut c = e.hv(&dir);
        c.args(["deploy", "--backend", backend, "--run-id", id])
            .args(["--image", &img, "--no-push", "--logs"])
            .args(["--set", HOG, "--set", LIMIT[0], "--set", LIMIT[1]]);
        let o = run(c);
        assert_eq!(o.code, 1, "{backend}: {}\n{}", o.stdout, o.stderr);
        assert!(o.stderr.contains("Reason: "), "{backend}: {}", o.stderr);
    };
    // mpijob: the operator's workers run sshd and the rank is its child, so the worker lives
    // on; the launcher (kept: restartPolicy Never) has mpirun's word on the rank.
    let id = run_id("m");
    hog("mpijob", &id);
    let v = status_until(&e, &dir, &id, |v| v["state"] == "Failed");
    let r = v["reason"].as_str().unwrap_or_default();
    assert!(
        r.starts_with(&format!("launcher demo-{id}-launcher-")),
        "{r}"
    );
    assert!(
        r.contains("; first to fail: rank ") && r.contains("(signal 9 (Killed) on "),
        "{r}"
    );
    let mut c = e.hv(&dir);
    c.args(["undeploy", &id]);
    assert_eq!(run(c).code, 0);

    let id = run_id("o");
    let job = format!("demo-{id}");
    hog("native", &id);
    // The OOM ends following at once; the launcher's Job fails a moment later.
    let v = status_until(&e, &dir, &id, |v| v["state"] == "Failed");
    let r = v["reason"].as_str().unwrap_or_default();
    assert!(r.starts_with(&format!("launcher {job}-launcher")), "{r}");
    // mpirun's word on the first rank: killed (by the OOM killer) on a worker.
    assert!(
        r.contains("; first to fail: rank ") && r.contains("(signal 9 (Killed) on "),
        "{r}"
    );
    let oom = oom_named_by_run(&v);
    let re = regex::Regex::new(&format!(
        r"^OOMKilled: container worker of {job}-worker-[01] exceeded its memory limit 64Mi \(exit (\d+)\)$"
    ))
    .unwrap();
    let exit = re.captures(&oom).unwrap_or_else(|| panic!("{oom}"))[1].to_string();
    // The docker kubelet's own record of that container agrees on the exit code.
    let worker = oom.split(' ').nth(4).unwrap();
    let pod =
        e.fc.get("pods", "default", worker)
            .unwrap_or_else(|| panic!("{worker}"));
    let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{t:#}");
    assert_eq!(t["exitCode"].to_string(), exit, "{t:#}");
    assert!(r.contains(&oom), "the run's reason names the OOM: {r}");
    let mut c = e.hv(&dir);
    c.args(["undeploy", &id]);
    assert_eq!(run(c).code, 0);

    // An image no registry has.
    let id = run_id("i");
    let missing = "127.0.0.1:5000/hvdctl-test/does-not-exist:1";
    let t = Instant::now();
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "native",
        "--run-id",
        &id,
        "--image",
        missing,
    ])
    .args(["--no-push", "--wait"]);
    let o = run(c);
    let took = t.elapsed();
    assert_eq!(o.code, 1, "{}", o.stderr);
    // The exact pod and container, and the image, as the Docker kubelet's pull failed.
    let re = regex::Regex::new(&format!(
        r#"Reason: demo-{id}-(worker-[01]|launcher-[a-z0-9]+): (ErrImagePull|ImagePullBackOff): image "{}" of container (worker|launcher): "#,
        regex::escape(missing)
    ))
    .unwrap();
    let caps = re
        .captures(&o.stderr)
        .unwrap_or_else(|| panic!("{}", o.stderr));
    assert_eq!(
        caps[1].starts_with("worker"),
        &caps[3] == "worker",
        "{}",
        o.stderr
    );
    eprintln!("docker kubelet: missing image → deploy --wait exit 1 after {took:.1?}");
    let mut c = e.hv(&dir);
    c.args(["undeploy", &id]);
    assert_eq!(run(c).code, 0);
}

/// The local backend: the same rank over the same limit, and a rank that fails.
#[test]
fn real_out_of_memory_and_failing_rank_on_the_local_backend() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "demo", "mpi-hello");
    let id = run_id("o");
    let job = format!("demo-{id}");
    let o = hv(
        &dir,
        None,
        &[
            "deploy",
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--logs",
            "--set",
            HOG,
            "--set",
            LIMIT[0],
            "--set",
            LIMIT[1],
        ],
    );
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("Reason: launcher "), "{}", o.stderr);
    let s = hv(&dir, None, &["status", &id, "-o", "json"]);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    let oom = oom_named_by_run(&v);
    let re = regex::Regex::new(&format!(
        r"^OOMKilled: container {job}-worker-[01] exceeded its memory limit 64Mi \(exit (\d+)\)$"
    ))
    .unwrap();
    let exit: i64 = re.captures(&oom).unwrap_or_else(|| panic!("{oom}"))[1]
        .parse()
        .unwrap();
    let name = oom.split(' ').nth(2).unwrap();
    let rt = rt();
    let st = rt
        .block_on(docker.bollard().inspect_container(name, None))
        .unwrap()
        .state
        .unwrap();
    assert_eq!(st.oom_killed, Some(true));
    assert_eq!(st.exit_code, Some(exit));
    assert!(
        v["reason"].as_str().unwrap_or_default().contains(&oom),
        "{v:#}"
    );
    assert_eq!(hv(&dir, None, &["undeploy", &id]).code, 0);

    // A rank that fails: the launcher's reason with the ranks' last lines.
    let id = run_id("f");
    let o = hv(
        &dir,
        None,
        &[
            "deploy",
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--wait",
            "--set",
            // Rank 1 fails while rank 0 runs: mpirun aborts the job and names the first
            // process that failed. When the job ends before every rank started (rank 1 failing
            // at once while rank 0 is still starting, seen under load) Open MPI prints only
            // "1 process returned a non-zero exit code", naming none: rank 1 waits 5 s first.
            "command=[sh, -c, \"echo about to fail; [ $OMPI_COMM_WORLD_RANK = 1 ] && sleep 5 && exit 7; sleep 30\"]",
        ],
    );
    let _ = o;
    let s = hv(&dir, None, &["status", &id, "--wait", "-o", "json"]);
    assert_eq!(s.code, 1, "{}", s.stdout);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    let r = v["reason"].as_str().unwrap_or_default();
    assert!(
        r.starts_with(&format!(
            "launcher demo-{id}-launcher failed; first to fail: rank "
        )),
        "{r}"
    );
    assert!(
        r.contains("rank 1 (exit 7); last lines: \"about to fail\""),
        "{r}"
    );
    assert_eq!(hv(&dir, None, &["undeploy", &id]).code, 0);
}
