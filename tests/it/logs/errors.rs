//! `hvdctl logs` in bad situations: each gives a clear message and a non-zero exit, quickly;
//! none hangs silently.

use super::*;
use fake_cluster::Faults;
use std::time::Duration;

fn run(env: &Cluster, args: &[&str], timeout: Duration) -> (Option<i32>, String, String, Duration) {
    let mut r = spawn(
        env.hvdctl_process(args),
        env.dir.path(),
        &args.join("_").replace('/', "_"),
    );
    let (code, took) = r.wait(timeout);
    (code, r.stdout(), r.stderr(), took)
}

fn quick() -> Plan {
    Plan {
        lines: 3,
        rate: 100,
        exit: 0,
        restarts: 0,
    }
}

#[test]
fn run_with_no_pods_yet() {
    let env = start(Faults::default());
    // A suspended launcher Job: the run exists, its pods do not.
    env.fc
        .create(launcher_job("mnist", "nopod", quick(), true))
        .unwrap();
    let (code, out, err, _) = run(&env, &["logs", "nopod"], Duration::from_secs(30));
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("run mnist-nopod in namespace default has no pods yet (job state: Pending)"),
        "{err}"
    );
    assert!(
        err.contains("hvdctl logs -f"),
        "the hint says how to wait: {err}"
    );

    // Following: says what it waits for, at once, and Ctrl-C ends it with 130.
    let mut r = spawn(
        env.hvdctl_process(&["logs", "nopod", "-f"]),
        env.dir.path(),
        "follow",
    );
    r.until_stderr(
        "waiting for the pods of mnist-nopod to be created",
        Duration::from_secs(60),
    );
    assert!(r.child.try_wait().unwrap().is_none(), "still waiting");
    r.interrupt();
    let (code, took) = r.wait(Duration::from_secs(10));
    assert_eq!(code, Some(130), "{}", r.stderr());
    assert!(took < Duration::from_secs(10));

    // Once the Job runs, the waiting ends with its lines and exit 0.
    let mut r = spawn(
        env.hvdctl_process(&["logs", "nopod", "-f"]),
        env.dir.path(),
        "follow2",
    );
    r.until_stderr(
        "waiting for the pods of mnist-nopod to be created",
        Duration::from_secs(30),
    );
    env.fc
        .mutate("jobs", "default", "mnist-nopod-launcher", |j| {
            j["spec"]["suspend"] = serde_json::json!(false)
        })
        .unwrap();
    let (code, _) = r.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", r.stderr());
    let lines: Vec<String> = r.stdout().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("launcher | pod=mnist-nopod-launcher-"),
        "{lines:?}"
    );
    assert!(lines[2].ends_with("line 3"), "{lines:?}");
}

#[test]
fn namespace_that_does_not_exist() {
    let env = start(Faults::default());
    let (code, _, err, took) = run(
        &env,
        &["logs", "abcde", "-n", "nowhere"],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1), "not found: {err}");
    assert!(err.contains("namespace nowhere does not exist"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn unknown_run_id() {
    let env = start(Faults::default());
    env.fc
        .create(launcher_job("mnist", "there", quick(), false))
        .unwrap();
    let (code, _, err, _) = run(&env, &["logs", "zzzzz", "-f"], Duration::from_secs(30));
    assert_eq!(code, Some(1), "not found: {err}");
    assert!(
        err.contains("run `zzzzz` not found: looked in namespace default"),
        "{err}"
    );
    assert!(
        err.contains("mnist-there"),
        "the hint names the runs that exist: {err}"
    );
}

#[test]
fn unreachable_server() {
    let env = start(Faults::default());
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &env.kubeconfig,
        fake_cluster::kubeconfig_yaml(&format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let (code, _, err, took) = run(&env, &["logs", "abcde", "-f"], Duration::from_secs(60));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cannot reach the API server at http://127.0.0.1:{port}"
        )),
        "{err}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn snapshot_without_follow_and_filters() {
    // 5 lines a second, cut every 7 lines: each reconnect from the floored second advances.
    let env = start(Faults {
        cut_logs_every: 7,
        log_fail_rate: 0.1,
        ..Faults::default()
    });
    let p = Plan {
        lines: 20,
        rate: 5,
        exit: 0,
        restarts: 0,
    };
    env.fc
        .create(launcher_job("mnist", "snap", p, false))
        .unwrap();
    for i in 0..3 {
        env.fc
            .create(worker_pod(
                "mnist",
                "snap",
                i,
                &[("worker", p), ("sidecar", p)],
            ))
            .unwrap();
    }
    let done = env.fc.wait_for(
        "jobs",
        "default",
        "mnist-snap-launcher",
        Duration::from_secs(120),
        |j| j.and_then(|j| j["status"]["succeeded"].as_i64()) == Some(1),
    );
    assert!(done.is_ok(), "job done");
    // Every pod ended too (the workers started a little after the launcher).
    for i in 0..3 {
        let pod = format!("mnist-snap-worker-{i}");
        let ended = env
            .fc
            .wait_for("pods", "default", &pod, Duration::from_secs(120), |p| {
                p.and_then(|p| p["status"]["phase"].as_str()) == Some("Succeeded")
            });
        assert!(ended.is_ok(), "{pod} ended");
    }
    let (code, out, err, _) = run(&env, &["logs", "snap"], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    let mut expected = Expected::new();
    let lp = env.fc.list(
        "pods",
        Some("default"),
        "hvdctl.io/run=snap,hvdctl.io/role=launcher",
    );
    expect(
        &mut expected,
        lp[0]["metadata"]["name"].as_str().unwrap(),
        "launcher",
        p,
    );
    for i in 0..3 {
        for c in ["worker", "sidecar"] {
            expect(&mut expected, &format!("mnist-snap-worker-{i}"), c, p);
        }
    }
    let t = tally(&out, &expected);
    assert_eq!(
        (t.printed, t.missing, t.duplicated, t.garbled),
        (140, 0, 0, 0),
        "{t}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("worker-2/sidecar | ")),
        "prefix with container"
    );

    // --role, --pod, -c, --no-prefix, --tail.
    let (code, out, err, _) = run(
        &env,
        &[
            "logs",
            "snap",
            "--role",
            "worker",
            "--pod",
            "worker-1$",
            "-c",
            "sidecar",
            "--tail",
            "5",
            "--no-prefix",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{err}");
    let want: Vec<String> = (16..=20)
        .map(|i| format!("pod=mnist-snap-worker-1 container=sidecar restart=0 line {i}"))
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    let (code, _, err, _) = run(
        &env,
        &["logs", "snap", "-c", "nothere"],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("matches --role/--pod/--container"), "{err}");
}
