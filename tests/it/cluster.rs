//! deploy → status → events → undeploy with the real binary against fake-cluster, for both
//! backends, plus the bad situations, faults and interruptions.

use crate::util::*;
use fake_cluster::Faults;
use std::time::{Duration, Instant};

fn env(mpi_operator: bool) -> Cluster {
    Cluster::synthetic(mpi_operator)
}

#[test]
fn lifecycle_on_both_backends() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, id) in [("mpijob", "m1"), ("native", "n1")] {
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--backend",
            backend,
            "--run-id",
            id,
            "--set",
            "env.FAKE_KUBELET_LINES=3",
            "--set",
            "env.FAKE_KUBELET_RATE=20",
        ]);
        if backend == "mpijob" {
            // The operator's workers run sshd until the end (kept here, to be counted).
            c.args(["--set", "env.FAKE_KUBELET_ONLY=launcher"]);
            c.args(["--set", "runPolicy.cleanPodPolicy=None"]);
        }
        let o = run(c);
        assert_eq!(o.code, 0, "{backend}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!("Deployed demo-{id}")),
            "{}",
            o.stderr
        );
        let sel = format!("hvdctl.io/run={id}");
        assert!(!e.ours(&sel).is_empty());

        // status -o json has the documented keys.
        let mut c = e.hv(&dir);
        c.args(["status", id, "-o", "json"]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        for k in ["run", "job", "namespace", "backend", "state", "pods"] {
            assert!(v.get(k).is_some(), "status lacks {k}: {v}");
        }
        assert_eq!(v["backend"], backend);
        assert_eq!(v["job"], format!("demo-{id}"));

        // --wait follows it to the end.
        let mut c = e.hv(&dir);
        c.args(["status", id, "--wait", "-o", "json"]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["state"], "Succeeded");
        let pods = v["pods"].as_array().unwrap();
        assert_eq!(pods.len(), 3, "launcher + 2 workers: {v}");
        for p in pods {
            for k in ["name", "role", "phase", "restarts"] {
                assert!(p.get(k).is_some(), "pod row lacks {k}");
            }
        }
        assert_eq!(pods[0]["role"], "launcher");

        // events of the run's pods, oldest first.
        let mut c = e.hv(&dir);
        c.args(["events", id]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout.contains("Scheduled") && o.stdout.contains(&format!("Pod/demo-{id}-worker-0")),
            "{}",
            o.stdout
        );

        // kubectl reads what hvdctl created.
        let kind = if backend == "mpijob" {
            "mpijobs"
        } else {
            "jobs"
        };
        if let Some(out) = e.kubectl(&["get", kind, "-l", &sel, "-o", "name"]) {
            assert!(out.contains(&format!("demo-{id}")), "{out}");
        }

        let mut c = e.hv(&dir);
        c.args(["undeploy", id]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(e.ours(&sel).is_empty(), "left behind: {:?}", e.ours(&sel));
        let op = format!("training.kubeflow.org/job-name=demo-{id}");
        assert!(
            e.ours(&op).is_empty(),
            "operator objects left: {:?}",
            e.ours(&op)
        );
        // Idempotent.
        let mut c = e.hv(&dir);
        c.args(["undeploy", id]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stderr.contains("Nothing to delete"), "{}", o.stderr);
    }
}

#[test]
fn failed_job_is_reported() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--run-id",
        "f1",
        "--set",
        "env.FAKE_KUBELET_LINES=2",
        "--set",
        "env.FAKE_KUBELET_EXIT=3",
        // The operator's workers run sshd; the launcher's mpirun is what fails.
        "--set",
        "env.FAKE_KUBELET_ONLY=launcher",
    ]);
    assert_eq!(run(c).code, 0);
    let mut c = e.hv(&dir);
    c.args(["status", "--wait"]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(o.stdout.contains("State:      Failed"), "{}", o.stdout);
    assert!(o.stdout.contains("Error (exit 3)"), "{}", o.stdout);
}

#[test]
fn bad_situations_say_what_and_where() {
    // No operator.
    let e = env(false);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy"]);
    let o = run(c);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("MPI Operator is not installed") && o.stderr.contains("--backend native"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("fake-cluster"),
        "names the context: {}",
        o.stderr
    );
    assert!(e.ours("app.kubernetes.io/managed-by=hvdctl").is_empty());

    // Missing namespace, then created on request.
    let mut c = e.hv(&dir);
    c.args(["-n", "team-x", "deploy", "--backend", "native"]);
    let o = run(c);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("namespace team-x does not exist")
            && o.stderr.contains("--create-namespace"),
        "{}",
        o.stderr
    );
    let mut c = e.hv(&dir);
    c.args([
        "-n",
        "team-x",
        "deploy",
        "--backend",
        "native",
        "--create-namespace",
        "--run-id",
        "ns1",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !e.fc
            .list("pods", Some("team-x"), "hvdctl.io/run=ns1")
            .is_empty()
    );

    // A namespace that does not exist is named as such by every run command.
    let mut c = e.hv(&dir);
    c.args(["-n", "nowhere", "status", "abcde"]);
    let o = run(c);
    assert_eq!(o.code, 1, "not found: {}", o.stderr);
    assert!(
        o.stderr.contains("namespace nowhere does not exist"),
        "{}",
        o.stderr
    );
    let mut c = e.hv(&dir);
    c.args(["-n", "nowhere", "undeploy", "abcde"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("Nothing to delete"), "{}", o.stderr);

    // Unknown run id, nothing to undeploy.
    let mut c = e.hv(&dir);
    c.args(["status", "zzzzz"]);
    let o = run(c);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains(
            "run `zzzzz` not found: looked in namespace default (context `fake-cluster`)"
        ),
        "{}",
        o.stderr
    );
    let mut c = e.hv(&dir);
    c.args(["undeploy", "zzzzz"]);
    let o = run(c);
    assert_eq!(o.code, 0);
    assert!(o.stderr.contains("Nothing to delete"), "{}", o.stderr);

    // 403 on creating Jobs: the error names verb and resource; nothing is left half-made.
    e.fc.set_faults(Faults {
        forbid: vec!["patch:jobs".into()],
        ..Default::default()
    });
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "fb1"]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("403") && o.stderr.contains("cannot patch resource \"jobs\""),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("apply Job demo-fb1-launcher"),
        "{}",
        o.stderr
    );
    assert!(
        e.ours("hvdctl.io/run=fb1").is_empty(),
        "orphans: {:?}",
        e.ours("hvdctl.io/run=fb1")
    );
    e.fc.set_faults(Faults::default());

    // Server dry run persists nothing.
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "native",
        "--run-id",
        "sd1",
        "--server-dry-run",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(e.ours("hvdctl.io/run=sd1").is_empty());

    // Unreachable API server.
    let bad = e.root.join("bad-kubeconfig");
    std::fs::write(
        &bad,
        e.fc.kubeconfig().replace(e.fc.url(), "http://127.0.0.1:1"),
    )
    .unwrap();
    let mut c = hvdctl();
    c.env("KUBECONFIG", &bad)
        .arg("-C")
        .arg(&dir)
        .args(["status", "abcde"]);
    let o = run(c);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr
            .contains("cannot reach the API server at http://127.0.0.1:1"),
        "{}",
        o.stderr
    );
}

#[test]
fn undeploy_deletes_exactly_the_run() {
    let e = env(true);
    // An app name no other test uses: `undeploy --all` takes every run of the app on every
    // engine, other tests' local runs on this machine's Docker engine included.
    let dir = init_app(&e.root, "clu", "mpi-hello");
    for id in ["a1", "a2"] {
        let mut c = e.hv(&dir);
        c.args(["deploy", "--backend", "native", "--run-id", id]);
        assert_eq!(run(c).code, 0);
    }
    // Same name prefix, no labels: not ours.
    e.fc.create(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "clu-a1-worker-9"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}})).unwrap();
    let mut c = e.hv(&dir);
    c.args(["undeploy", "a1"]);
    assert_eq!(run(c).code, 0);
    assert!(e.ours("hvdctl.io/run=a1").is_empty());
    assert!(
        !e.ours("hvdctl.io/run=a2").is_empty(),
        "the other run survives"
    );
    assert!(
        e.fc.get("pods", "default", "clu-a1-worker-9").is_some(),
        "an unlabelled pod with the same prefix survives"
    );
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--yes"]);
    assert_eq!(run(c).code, 0);
    assert!(e.ours("app.kubernetes.io/managed-by=hvdctl").is_empty());
}

#[test]
fn faults_do_not_break_the_lifecycle() {
    let e = env(true);
    // An app name no other test uses: `undeploy --all` takes every run of the app on every
    // engine, other tests' local runs on this machine's Docker engine included.
    let dir = init_app(&e.root, "clu", "mpi-hello");
    e.fc.set_faults(Faults {
        fail_rate: 0.1,
        watch_expire_secs: 1.0,
        ..Default::default()
    });
    for (i, backend) in ["native", "mpijob", "native", "mpijob"].iter().enumerate() {
        let id = format!("ft{i}");
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--backend",
            backend,
            "--run-id",
            &id,
            "--set",
            "workers=4",
        ]);
        let o = run(c);
        assert_eq!(o.code, 0, "deploy {id}: {}", o.stderr);
        let mut c = e.hv(&dir);
        c.args(["status", &id, "-o", "json"]);
        let o = run(c);
        assert_eq!(o.code, 0, "status {id}: {}", o.stderr);
    }
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--yes"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    e.fc.set_faults(Faults::default());
    assert!(e.ours("app.kubernetes.io/managed-by=hvdctl").is_empty());
}

#[test]
fn interrupted_deploys_leave_no_orphans() {
    let e = env(true);
    // An app name no other test uses: `undeploy --all` takes every run of the app on every
    // engine, other tests' local runs on this machine's Docker engine included.
    let dir = init_app(&e.root, "clu", "mpi-hello");
    // Slow the server a little so interruptions land at every stage.
    e.fc.set_faults(Faults {
        delay_ms: 3,
        ..Default::default()
    });
    let total = |fc: &fake_cluster::FakeCluster| fc.request_counts().values().sum::<u64>();
    let mut interrupted = 0;
    for i in 0..50u64 {
        let backend = if i % 2 == 0 { "native" } else { "mpijob" };
        let sent = total(&e.fc);
        let mut child = hvdctl_process()
            .env("KUBECONFIG", &e.kubeconfig)
            .arg("-C")
            .arg(&dir)
            .args(["-q", "deploy", "--backend", backend, "--set", "workers=6"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Interrupted after its k-th request reached the server (k pseudo-random, 1-30): a
        // point within the deploy however slow the machine, with its Ctrl-C handler already
        // listening (the handler is polled with the first step that sends a request).
        let k = 1 + (i * 7) % 30;
        loop {
            if child.try_wait().unwrap().is_some() || total(&e.fc) >= sent + k {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        if status.code() == Some(130) {
            interrupted += 1;
        }
    }
    assert!(
        interrupted > 0,
        "no deploy was interrupted: the test did not test anything"
    );
    e.fc.set_faults(Faults::default());
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--yes"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        e.ours("app.kubernetes.io/managed-by=hvdctl").is_empty(),
        "orphans: {:?}",
        e.ours("app.kubernetes.io/managed-by=hvdctl")
    );
    assert!(
        e.ours("training.kubeflow.org/operator-name=mpi-operator")
            .is_empty()
    );
}

#[test]
fn deploy_logs_follows_to_the_job_result() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    for (backend, exit, want) in [("mpijob", "0", 0), ("native", "0", 0), ("mpijob", "2", 1)] {
        let mut c = e.hv(&dir);
        c.args([
            "deploy",
            "--logs",
            "--backend",
            backend,
            "--set",
            "env.FAKE_KUBELET_LINES=5",
            "--set",
            "env.FAKE_KUBELET_RATE=50",
        ]);
        c.args(["--set", &format!("env.FAKE_KUBELET_EXIT={exit}")]);
        // The operator's workers run sshd (silent here) until the launcher ends.
        let only = if backend == "mpijob" { "launcher" } else { "1" };
        c.args(["--set", &format!("env.FAKE_KUBELET_ONLY={only}")]);
        let o = run(c);
        assert_eq!(o.code, want, "{backend} exit {exit}: {}", o.stderr);
        for prefix in ["launcher", "worker-0", "worker-1"] {
            let lines = o
                .stdout
                .lines()
                .filter(|l| l.starts_with(prefix) && l.contains(" line "))
                .count();
            let want = if prefix == "launcher" || backend == "native" {
                5
            } else {
                0
            };
            assert_eq!(lines, want, "{backend}: {prefix} lines in:\n{}", o.stdout);
        }
    }
}

#[test]
fn an_unpushed_local_image_is_refused_for_a_remote_cluster() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    std::fs::create_dir_all(dir.join(".hvdctl")).unwrap();
    std::fs::write(
        dir.join(".hvdctl/image.json"),
        r#"{"image": "demo:abc1234", "pushed": false, "built": "2026-11-22T00:00:00Z"}"#,
    )
    .unwrap();
    let remote = e.root.join("remote-kubeconfig");
    std::fs::write(
        &remote,
        e.fc.kubeconfig()
            .replace(e.fc.url(), "https://k8s.example.invalid:6443"),
    )
    .unwrap();
    let mut c = hvdctl();
    c.env("KUBECONFIG", &remote)
        .arg("-C")
        .arg(&dir)
        .args(["deploy", "--no-push"]);
    let o = run(c);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("demo:abc1234 was built on this machine and never pushed")
            && o.stderr.contains("hvdctl push"),
        "{}",
        o.stderr
    );
    // The local fake cluster can use it as it is.
    let mut c = e.hv(&dir);
    c.args(["deploy", "--no-push", "--run-id", "lp1", "-o", "yaml"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mj = e.fc.get("mpijobs", "default", "demo-lp1").unwrap();
    assert_eq!(
        mj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["image"],
        "demo:abc1234"
    );
}

/// Every bad RUN and kubeconfig case: its exit code (0 ok, 1 failure or not found, 2 bad
/// input) and a message naming what and where. All cases run; failures are listed together.
#[test]
fn bad_runs_and_kubeconfigs_exit_as_documented() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "ok1"]);
    c.args(["--set", "env.FAKE_KUBELET_LINES=2"]);
    assert_eq!(run(c).code, 0);
    let kc = e.kubeconfig.display().to_string();
    let bad_yaml = e.root.join("bad.yaml");
    std::fs::write(&bad_yaml, "apiVersion: v1\nclusters: [\n").unwrap();
    // Two contexts: the current one points at a dead server, `fake-cluster` at the fake.
    let two = e.root.join("two-contexts");
    let text = e.fc.kubeconfig();
    let dead = text
        .replace(e.fc.url(), "http://127.0.0.1:1")
        .replace("fake-cluster", "dead");
    let merged = e.root.join("merged");
    std::fs::write(&two, &dead).unwrap();
    let missing = e.root.join("no-such-file");
    let list = format!("{}:{}", missing.display(), e.kubeconfig.display());
    std::fs::write(&merged, &text).unwrap();
    let two_list = format!("{}:{}", two.display(), merged.display());
    let dead_docker = format!("unix://{}", e.root.join("no.sock").display());
    struct Case<'a> {
        what: &'a str,
        env: Vec<(&'a str, String)>,
        args: Vec<&'a str>,
        code: i32,
        says: Vec<&'a str>,
    }
    let case =
        |what, env: &[(&'static str, &str)], args: &[&'static str], code, says: &[&'static str]| {
            Case {
                what,
                env: env.iter().map(|(k, v)| (*k, v.to_string())).collect(),
                args: args.to_vec(),
                code,
                says: says.to_vec(),
            }
        };
    let cases = vec![
        case(
            "empty RUN",
            &[("KUBECONFIG", &kc)],
            &["status", ""],
            2,
            &["`` is not a run id or job name"],
        ),
        case(
            "RUN with a bad character",
            &[("KUBECONFIG", &kc)],
            &["logs", "demo_x"],
            2,
            &["`demo_x` is not a run id or job name"],
        ),
        case(
            "run id too long",
            &[("KUBECONFIG", &kc)],
            &["events", "abcdef"],
            2,
            &["`abcdef` is not a run id"],
        ),
        case(
            "unknown run",
            &[("KUBECONFIG", &kc)],
            &["status", "zzzzz"],
            1,
            &[
                "run `zzzzz` not found",
                "namespace default (context `fake-cluster`)",
                "runs there: demo-ok1",
            ],
        ),
        case(
            "job name found from labels",
            &[("KUBECONFIG", &kc)],
            &["status", "demo-ok1"],
            0,
            &[],
        ),
        case(
            "job name of another app",
            &[("KUBECONFIG", &kc)],
            &["status", "other-ok1"],
            1,
            &["run `other-ok1` not found"],
        ),
        case(
            "undeploy of an unknown run, every engine asked",
            &[("KUBECONFIG", &kc)],
            &["undeploy", "zzzzz"],
            0,
            &[
                "Nothing to delete",
                "namespace default (context `fake-cluster`)",
            ],
        ),
        case(
            "undeploy with no kubeconfig",
            &[],
            &["undeploy", "zzzzz"],
            1,
            &[
                "Kubernetes could not be asked: no kubeconfig",
                "KUBECONFIG is not set",
            ],
        ),
        case(
            "undeploy with an unreachable Docker engine",
            &[("KUBECONFIG", &kc), ("DOCKER_HOST", &dead_docker)],
            &["undeploy", "zzzzz"],
            1,
            &[
                "could not be asked",
                "cannot connect to the Docker daemon",
                "no.sock",
            ],
        ),
        case(
            "--kubeconfig that does not exist",
            &[],
            &["--kubeconfig", "/nonexistent/kc", "status", "abc"],
            2,
            &["--kubeconfig /nonexistent/kc: no such file"],
        ),
        case(
            "malformed kubeconfig",
            &[("KUBECONFIG", &bad_yaml.display().to_string())],
            &["status", "abc"],
            2,
            &["bad.yaml: not a valid kubeconfig", "line 2 column 11"],
        ),
        case(
            "KUBECONFIG list skips a missing file",
            &[("KUBECONFIG", &list)],
            &["status", "ok1"],
            0,
            &[],
        ),
        case(
            "KUBECONFIG of missing files only",
            &[("KUBECONFIG", &missing.display().to_string())],
            &["undeploy", "zzzzz"],
            1,
            &["none of the KUBECONFIG files exists"],
        ),
        case(
            "unknown --context",
            &[("KUBECONFIG", &kc)],
            &["status", "--context", "nope", "abc"],
            2,
            &["context `nope` is not in the kubeconfig", "fake-cluster"],
        ),
        case(
            "a recorded run uses its own context, not the current one",
            &[("KUBECONFIG", &two_list)],
            &["status", "ok1"],
            0,
            &["context fake-cluster"],
        ),
        case(
            "the current context is used for unrecorded runs",
            &[("KUBECONFIG", &two_list)],
            &["status", "zzzzz"],
            1,
            &["context `dead`", "http://127.0.0.1:1"],
        ),
    ];
    let mut failures = Vec::new();
    for c in &cases {
        let mut cmd = hvdctl();
        cmd.arg("-C").arg(&dir);
        for (k, v) in &c.env {
            cmd.env(k, v);
        }
        cmd.args(&c.args);
        let o = run(cmd);
        let all = format!("{}{}", o.stdout, o.stderr);
        if o.code != c.code {
            failures.push(format!(
                "{}: exit {} (want {}): {}",
                c.what, o.code, c.code, o.stderr
            ));
        }
        for s in &c.says {
            if !all.contains(s) {
                failures.push(format!("{}: does not say {s:?}: {all}", c.what));
            }
        }
        if all.contains("panicked") || all.contains("Some(") {
            failures.push(format!("{}: not for people: {all}", c.what));
        }
    }
    // A corrupt record file is reported and set aside; the run is still found from labels.
    std::fs::write(dir.join(".hvdctl/runs.json"), "{broken").unwrap();
    let mut c = e.hv(&dir);
    c.args(["status", "ok1"]);
    let o = run(c);
    if o.code != 0 || !o.stderr.contains("ignoring the run records") {
        failures.push(format!("corrupt runs.json: exit {}: {}", o.code, o.stderr));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// kubectl's forms and the command line's help, completion and version.
#[test]
fn kubectl_forms_help_completion_and_version() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let hv = |args: &[&str]| {
        let mut c = e.hv(&dir);
        c.args(args);
        run(c)
    };
    // --dry-run is --dry-run=client; --dry-run=server persists nothing.
    let a = hv(&["deploy", "--dry-run", "--run-id", "dr1"]);
    let b = hv(&["deploy", "--dry-run=client", "--run-id", "dr1"]);
    assert_eq!((a.code, b.code), (0, 0), "{}{}", a.stderr, b.stderr);
    assert_eq!(a.stdout, b.stdout);
    assert!(a.stdout.contains("kind: MPIJob"), "{}", a.stdout);
    let s = hv(&[
        "deploy",
        "--dry-run=server",
        "--backend",
        "native",
        "--run-id",
        "dr2",
    ]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert!(s.stderr.contains("Server dry run"), "{}", s.stderr);
    assert!(e.ours("hvdctl.io/run=dr2").is_empty());
    assert_eq!(hv(&["deploy", "--dry-run=sever"]).code, 2);

    let d = hv(&[
        "deploy",
        "--backend",
        "native",
        "--run-id",
        "ok1",
        "--set",
        "env.FAKE_KUBELET_LINES=3",
        "--wait",
    ]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    // --tail=-1 is every line, like kubectl's; below -1 is refused.
    let l = hv(&["logs", "ok1", "--tail=-1"]);
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert_eq!(hv(&["logs", "ok1", "--tail=-2"]).code, 2);
    // -v: every API request with its status and time.
    let v = hv(&["-v", "status", "ok1"]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(
        v.stderr
            .lines()
            .any(|l| l.starts_with("GET /api/v1/namespaces/default/pods")
                && l.contains(" 200 ")
                && l.ends_with(" ms")),
        "{}",
        v.stderr
    );
    // version: client, commit, server and the MPIJob versions served.
    let ver = hv(&["version", "-o", "json"]);
    assert_eq!(ver.code, 0, "{}", ver.stderr);
    let j: serde_json::Value = serde_json::from_str(&ver.stdout).unwrap();
    assert_eq!(j["client"], env!("CARGO_PKG_VERSION"));
    assert!(
        j["server"].as_str().unwrap_or_default().starts_with("v1."),
        "{j}"
    );
    assert_eq!(j["mpiJobVersions"], serde_json::json!(["v2beta1"]));
    let mut c = hvdctl();
    c.args(["version", "--client"]);
    let o = run(c);
    assert!(
        o.code == 0 && o.stdout.starts_with("Client: hvdctl") && !o.stdout.contains("Server"),
        "{}",
        o.stdout
    );
    // Help: cluster flags only where they mean something, global options apart, -o described.
    let h = hv(&["init", "--help"]);
    assert!(
        !h.stdout.contains("--context") && h.stdout.contains("Global options"),
        "{}",
        h.stdout
    );
    let h = hv(&["status", "--help"]);
    assert!(
        h.stdout.contains("Cluster options") && h.stdout.contains("--context"),
        "{}",
        h.stdout
    );
    assert!(
        h.stdout.contains("-o, --output <OUTPUT>  Output format"),
        "{}",
        h.stdout
    );
    let t = hv(&["templates"]);
    assert!(
        t.stdout
            .lines()
            .any(|l| l.starts_with("horovod ") && l.ends_with("(default)")),
        "{}",
        t.stdout
    );
    // Dynamic completion: recorded run ids and template names.
    let complete = |words: &[&str]| {
        let mut c = e.hv(&dir);
        c.current_dir(&dir)
            .env("COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
            .env("_CLAP_COMPLETE_COMP_TYPE", "9")
            .env("_CLAP_COMPLETE_SPACE", "false")
            .arg("--")
            .args(words);
        let o = run(c);
        o.stdout.replace('\u{b}', "\n")
    };
    let runs = complete(&["hvdctl", "status", "o"]);
    assert!(runs.lines().any(|l| l == "ok1"), "{runs}");
    let tpl = complete(&["hvdctl", "init", "-t", "mpi"]);
    assert!(tpl.lines().any(|l| l == "mpi-hello"), "{tpl}");
    let script = hv(&["completions", "bash"]);
    assert!(
        script.stdout.contains("COMPLETE=\"bash\"") || script.stdout.contains("COMPLETE"),
        "{}",
        script.stdout
    );
}

/// `events -f` goes on across dropped and expired watches.
#[test]
fn events_follow_survives_dropped_watches() {
    let e = env(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "ev1", "--wait"]);
    assert_eq!(run(c).code, 0);
    e.fc.set_faults(Faults {
        watch_expire_secs: 1.0,
        ..Default::default()
    });
    let watches = requests(&e.fc, "watch events");
    let mut child = hvdctl_process()
        .env("KUBECONFIG", &e.kubeconfig)
        .args(["-C", &dir.display().to_string(), "events", "-f", "ev1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Several watch lifetimes later (the first watch and three made again after expiring), a
    // new event about one of the run's pods.
    wait_requests(&e.fc, "watch events", watches, 4, Duration::from_secs(60));
    e.fc.create(serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "late-event", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "demo-ev1-worker-1", "namespace": "default"},
        "reason": "LateNews", "message": "after three expired watches", "type": "Normal",
        "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1
    }))
    .unwrap();
    let mut out = String::new();
    let end = Instant::now() + Duration::from_secs(60);
    while !out.contains("LateNews") {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                out.push_str(&line);
                out.push('\n');
            }
            Err(_) => break,
        }
    }
    let alive = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(
        out.contains("LateNews"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        alive,
        "events -f ended: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Native: the launcher Job owns the run's Service, Secret, ConfigMap and worker pods, so
/// deleting the Job (by hand, or its TTL) lets the garbage collector remove the rest.
#[test]
fn native_launcher_job_owns_the_run() {
    let e = env(false);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "ow1"]);
    assert_eq!(run(c).code, 0);
    let job =
        e.fc.get("jobs", "default", "demo-ow1-launcher")
            .expect("launcher job");
    let uid = job["metadata"]["uid"].as_str().unwrap().to_string();
    for r in ["services", "secrets", "configmaps", "pods"] {
        for o in e.fc.list(r, Some("default"), "hvdctl.io/run=ow1") {
            let owners = o["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                owners
                    .iter()
                    .any(|w| w["kind"] == "Job" && w["uid"] == uid.as_str()),
                "{r}/{} is not owned by the launcher Job: {owners:?}",
                o["metadata"]["name"]
            );
        }
    }
    e.fc.delete("jobs", "default", "demo-ow1-launcher", Some("Background"))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !e.ours("hvdctl.io/run=ow1").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "left after the Job went: {:?}",
            e.ours("hvdctl.io/run=ow1")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
