//! `hvdctl logs -f` under faults: 16 pods × 20,000 numbered lines, streams cut every few
//! hundred lines (alternately a clean end of body and a mid-line error), 5% of log requests
//! failing, two containers restarting, four workers created after `logs -f` started. Every
//! line must appear exactly once and the exit code must be the job's. `kubectl logs -f -l`
//! (`--tail=-1`: with a selector kubectl otherwise prints only the last 10 lines per pod)
//! runs against the same scenario; its losses are printed (and recorded in
//! docs/benchmarks.md), not asserted.
//!
//! Lines are written at 500/s per container and streams are cut every 1,000 lines (2 s of
//! lines): a reconnect from `sinceTime` floored to the second re-reads at most one second of
//! lines, so every reconnect makes progress, clearly inside the API's limit (a stream cut more
//! often than one second's worth of lines could never advance from second-precision
//! `sinceTime`; `fault_outside_the_apis_limit_is_named_not_hidden` shows what hvdctl does
//! then).

use super::*;
use fake_cluster::Faults;
use std::time::Duration;

const LINES: u64 = 20_000;
const RATE: u64 = 500;

fn faults() -> Faults {
    Faults {
        cut_logs_every: 1000,
        log_fail_rate: 0.05,
        ..Faults::default()
    }
}

fn worker() -> Plan {
    Plan {
        lines: LINES,
        rate: RATE,
        exit: 0,
        restarts: 0,
    }
}

/// Restarts once: two instances of half the lines each.
fn restarting() -> Plan {
    Plan {
        lines: LINES / 2,
        rate: RATE,
        exit: 0,
        restarts: 1,
    }
}

/// The launcher writes slower so the job ends after the last worker line: 53 s against a
/// late restarting worker's 2 × 20 s + 1.5 s back-off, started a few seconds after it. (As
/// in a real run, where mpirun ends after its ranks: `logs -f` stops following when the job
/// has ended.)
fn launcher(exit: i32) -> Plan {
    Plan {
        lines: LINES,
        rate: RATE * 3 / 4,
        exit,
        restarts: 0,
    }
}

fn check(name: &str, out: &str, expected: &Expected) -> Tally {
    let t = tally(out, expected);
    eprintln!("{name}: {t}");
    if !t.incomplete.is_empty() {
        eprintln!(
            "{name}: incomplete: {:?}",
            &t.incomplete[..t.incomplete.len().min(20)]
        );
    }
    t
}

#[test]
fn native_run_that_succeeds_every_line_once_exit_0() {
    let env = start(faults());
    let (app, run) = ("mnist", "ok1");
    let mut expected = Expected::new();
    // Suspended until the late workers exist: the launcher's 53 s count from then.
    env.fc
        .create(launcher_job(app, run, launcher(0), true))
        .unwrap();
    // 11 workers now, worker-1 and worker-2's sidecar restart once.
    for i in 0..11 {
        let pod = format!("{app}-{run}-worker-{i}");
        let containers: Vec<(&str, Plan)> = match i {
            1 => vec![("worker", restarting())],
            2 => vec![("worker", worker()), ("sidecar", restarting())],
            _ => vec![("worker", worker())],
        };
        for (c, p) in &containers {
            expect(&mut expected, &pod, c, *p);
        }
        env.fc.create(worker_pod(app, run, i, &containers)).unwrap();
    }
    let ours = spawn(
        env.hvdctl_process(&["logs", run, "-f"]),
        env.dir.path(),
        "hvdctl",
    );
    let theirs = kubectl_available().then(|| {
        let sel = selector(run);
        spawn(
            env.kubectl_process(&[
                "logs",
                "-f",
                "-l",
                &sel,
                "--prefix",
                "--max-log-requests=64",
                "--tail=-1",
            ]),
            env.dir.path(),
            "kubectl",
        )
    });
    // Four late workers, after `logs -f` started.
    std::thread::sleep(Duration::from_millis(1500));
    for i in 11..15 {
        let pod = format!("{app}-{run}-worker-{i}");
        expect(&mut expected, &pod, "worker", worker());
        env.fc
            .create(worker_pod(app, run, i, &[("worker", worker())]))
            .unwrap();
    }
    env.fc
        .mutate("jobs", "default", &format!("{app}-{run}-launcher"), |j| {
            j["spec"]["suspend"] = serde_json::json!(false)
        })
        .expect("the launcher Job");
    let mut ours = ours;
    let (code, took) = ours.wait(Duration::from_secs(180));
    let launcher_pod = env.fc.list(
        "pods",
        Some("default"),
        &format!("hvdctl.io/run={run},hvdctl.io/role=launcher"),
    );
    assert_eq!(launcher_pod.len(), 1);
    let lp = launcher_pod[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    expect(&mut expected, &lp, "launcher", launcher(0));
    let err = ours.stderr();
    eprintln!("hvdctl: exit {code:?} after {took:?}; stderr:\n{err}");
    let t = check("hvdctl", &ours.stdout(), &expected);
    assert_eq!(code, Some(0), "exit code of a succeeded job");
    assert_eq!(
        t.expected,
        16 * LINES + LINES,
        "16 pods, one with a second container"
    );
    assert_eq!((t.missing, t.duplicated, t.garbled), (0, 0, 0), "{t}");
    assert_eq!(t.printed, t.expected);
    let counts = env.fc.request_counts();
    eprintln!(
        "hvdctl+kubectl log requests: {:?}",
        counts.get("get pods/log")
    );
    if let Some(mut k) = theirs {
        let (kcode, ktook) = k.wait(Duration::from_secs(5));
        let kt = check("kubectl", &k.stdout(), &expected);
        let kerr = k.stderr();
        eprintln!(
            "kubectl: exit {kcode:?} after {ktook:?}; stderr: {}",
            kerr.lines().take(5).collect::<Vec<_>>().join(" / ")
        );
        eprintln!("RESULT kubectl-under-faults: {kt}; exit {kcode:?}");
    }
    eprintln!("RESULT hvdctl-under-faults: {t}; exit {code:?}; {took:?}");
}

#[test]
fn mpijob_run_that_fails_every_line_once_exit_1() {
    let env = start(faults());
    let (app, run) = ("mnist", "bad1");
    let job = format!("{app}-{run}");
    env.fc
        .create(mpijob(app, run, launcher(1), 11, worker()))
        .unwrap();
    let mut expected = Expected::new();
    for i in 0..11 {
        expect(
            &mut expected,
            &format!("{job}-worker-{i}"),
            "worker",
            worker(),
        );
    }
    let mut ours = spawn(
        env.hvdctl_process(&["logs", &job, "-f", "-o", "json"]),
        env.dir.path(),
        "hvdctl",
    );
    let theirs = kubectl_available().then(|| {
        let sel = selector(run);
        spawn(
            env.kubectl_process(&[
                "logs",
                "-f",
                "-l",
                &sel,
                "--prefix",
                "--max-log-requests=64",
                "--tail=-1",
            ]),
            env.dir.path(),
            "kubectl",
        )
    });
    std::thread::sleep(Duration::from_millis(1500));
    // Four late workers (elastic scale-up), two of them restarting once.
    for i in 11..15 {
        let p = if i < 13 { restarting() } else { worker() };
        expect(&mut expected, &format!("{job}-worker-{i}"), "worker", p);
        env.fc
            .create(worker_pod(app, run, i, &[("worker", p)]))
            .unwrap();
    }
    let (code, took) = ours.wait(Duration::from_secs(180));
    let lp = env.fc.list(
        "pods",
        Some("default"),
        &format!("hvdctl.io/run={run},hvdctl.io/role=launcher"),
    );
    assert_eq!(lp.len(), 1, "one launcher pod");
    expect(
        &mut expected,
        lp[0]["metadata"]["name"].as_str().unwrap(),
        "launcher",
        launcher(1),
    );
    eprintln!(
        "hvdctl: exit {code:?} after {took:?}; stderr:\n{}",
        ours.stderr()
    );
    // JSON: one object per line; the message is the numbered line.
    let out = ours.stdout();
    let mut messages = String::with_capacity(out.len());
    for line in out.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        for k in ["time", "pod", "container", "role", "message"] {
            assert!(v[k].is_string(), "{k} missing in {line}");
        }
        assert_eq!(v["engine"], "kubernetes", "{line}");
        assert!(v["rank"].is_null(), "{line}");
        if v["role"] == "worker" {
            let i = v["index"]
                .as_u64()
                .unwrap_or_else(|| panic!("no index: {line}"));
            assert!(
                v["pod"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("-worker-{i}")),
                "{line}"
            );
        } else {
            assert!(v["index"].is_null(), "{line}");
        }
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "pod={} container={}",
                v["pod"].as_str().unwrap(),
                v["container"].as_str().unwrap()
            )),
            "{line}"
        );
        messages.push_str(msg);
        messages.push('\n');
    }
    let t = check("hvdctl", &messages, &expected);
    assert_eq!(code, Some(1), "exit code of a failed job");
    assert_eq!(t.expected, 16 * LINES, "16 pods");
    assert_eq!((t.missing, t.duplicated, t.garbled), (0, 0, 0), "{t}");
    if let Some(mut k) = theirs {
        let (kcode, _) = k.wait(Duration::from_secs(5));
        let kt = check("kubectl", &k.stdout(), &expected);
        eprintln!(
            "RESULT kubectl-under-faults: {kt}; exit {kcode:?}; stderr: {}",
            k.stderr().lines().last().unwrap_or_default()
        );
    }
    eprintln!("RESULT hvdctl-under-faults: {t}; exit {code:?}; {took:?}");
}

#[test]
fn fault_outside_the_apis_limit_is_named_not_hidden() {
    // One finished pod of 20,000 lines written at 2,000/s, streams cut every 300 lines: no
    // reconnect from a whole-second `sinceTime` gets past the second it stopped in. hvdctl
    // tries the log's last 10,000 lines through `tailLines` (cut too) and says which lines may
    // be missing, by their timestamps; nothing is printed twice.
    let env = start(Faults {
        cut_logs_every: 300,
        ..Faults::default()
    });
    let (app, run) = ("mnist", "cut1");
    let fast = Plan {
        lines: LINES,
        rate: 2000,
        exit: 0,
        restarts: 0,
    };
    let quick = Plan {
        lines: 10,
        rate: 100,
        exit: 0,
        restarts: 0,
    };
    env.fc.create(launcher_job(app, run, quick, false)).unwrap();
    let pod = format!("{app}-{run}-worker-0");
    env.fc
        .create(worker_pod(app, run, 0, &[("worker", fast)]))
        .unwrap();
    let mut expected = Expected::new();
    expect(&mut expected, &pod, "worker", fast);
    // Read once the worker has ended: `logs` without -f.
    let done = env
        .fc
        .wait_for("pods", "default", &pod, Duration::from_secs(120), |p| {
            p.and_then(|p| p["status"]["phase"].as_str()) == Some("Succeeded")
        });
    assert!(done.is_ok(), "the worker pod ends");
    let mut ours = spawn(
        env.hvdctl_process(&["logs", run, "--role", "worker"]),
        env.dir.path(),
        "hvdctl",
    );
    let (code, took) = ours.wait(Duration::from_secs(120));
    let err = ours.stderr();
    eprintln!("hvdctl: exit {code:?} after {took:?}; stderr:\n{err}");
    let t = check("hvdctl", &ours.stdout(), &expected);
    assert_eq!((t.duplicated, t.garbled), (0, 0), "{t}");
    assert!(
        err.contains("worker-0: the log of container worker stopped moving")
            && err.contains("may be missing"),
        "the loss is named: {err}"
    );
    // At least 300 lines from the start (more when a slowed writer put fewer than a cut's
    // worth into a second) and 300 from 10,000 before the end; both gaps named, the second
    // also when the tail read's cut fell on a line's end (the end is then checked, not taken).
    assert!((600..LINES).contains(&t.printed), "{t}");
    assert!(err.contains(", and after "), "{err}");
}
