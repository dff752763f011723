//! A pod deleted before its log could be read to the end is a real loss, and `logs -f` says
//! so in one warning line: which pod, that it was deleted, by whom and why as far as its owner
//! tells (an MPIJob that had Succeeded, whose `cleanPodPolicy: Running` deletes the workers
//! still running), and the last line read. The worker's node stops answering for its log
//! (`Faults::logs_answered`), so what is read of it does not depend on timing: nothing, or
//! exactly the lines of its first stream, cut after `CUT` lines.

use super::*;
use fake_cluster::Faults;
use std::time::Duration;

const CUT: u64 = 50;

/// An MPIJob of one worker that writes forever (until deleted) and a launcher that succeeds
/// after ten seconds, writing fewer lines a second than a cut stream brings (`CUT`: every
/// reconnect from a whole second moves on); `cleanPodPolicy: Running`. Created suspended:
/// [`follow`] lets it go once `logs -f` watches the pods.
fn job(app: &str, run: &str) -> Value {
    let launcher = Plan {
        lines: 200,
        rate: 20,
        exit: 0,
        restarts: 0,
    };
    let worker = Plan {
        lines: 1_000_000,
        rate: 100,
        exit: 0,
        restarts: 0,
    };
    let mut mj = mpijob(app, run, launcher, 1, worker);
    mj["spec"]["runPolicy"]["cleanPodPolicy"] = json!("Running");
    mj["spec"]["runPolicy"]["suspend"] = json!(true);
    mj
}

/// `logs -f -o json` of the job to its end: exit 0, and the one warning line it printed. The
/// job is let go once `logs -f` watches the pods, so it sees the worker from its start.
fn follow(env: &Cluster, job: &str) -> (String, String) {
    let watches = requests(&env.fc, "watch pods");
    let mut ours = spawn(
        env.hvdctl_process(&["logs", job, "-f", "-o", "json"]),
        env.dir.path(),
        "hvdctl",
    );
    wait_requests(&env.fc, "watch pods", watches, 1, Duration::from_secs(60));
    env.fc
        .mutate("mpijobs", "default", job, |j| {
            j["spec"]["runPolicy"]["suspend"] = json!(false)
        })
        .expect("the MPIJob");
    let (code, took) = ours.wait(Duration::from_secs(120));
    let err = ours.stderr();
    eprintln!("hvdctl: exit {code:?} after {took:?}; stderr:\n{err}");
    assert_eq!(code, Some(0), "the job succeeded: {err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "one warning, for the lost worker: {err}");
    (warnings[0].to_string(), ours.stdout())
}

/// What the warning says of the deletion: the pod, its owner, the owner's state and policy.
fn names_the_deletion(w: &str, job: &str) {
    let pod = format!("{job}-worker-0");
    assert!(
        w.contains(&format!("warning: worker-0: pod {pod} was deleted")),
        "{w}"
    );
    assert!(
        w.contains(&format!(
            "by its owner MPIJob {job}'s operator once the job had Succeeded"
        )) && w.contains("runPolicy.cleanPodPolicy: Running"),
        "{w}"
    );
    assert!(
        w.contains("before the log of container worker was read to its end"),
        "{w}"
    );
}

#[test]
fn a_worker_deleted_before_any_line_was_read_is_named_with_who_and_why() {
    let (app, run) = ("mnist", "gone1");
    let job_name = format!("{app}-{run}");
    let env = start(Faults {
        logs_answered: vec![(format!("{job_name}-worker-0"), 0)],
        ..Faults::default()
    });
    env.fc.create(job(app, run)).unwrap();
    let (w, out) = follow(&env, &job_name);
    names_the_deletion(&w, &job_name);
    assert!(w.ends_with("none of its lines could be read"), "{w}");
    assert!(out.contains("\"container\":\"launcher\""), "{out}");
    assert!(!out.contains("\"container\":\"worker\""), "{out}");
}

#[test]
fn a_worker_deleted_after_its_stream_was_cut_names_the_last_line_read() {
    let (app, run) = ("mnist", "gone2");
    let job_name = format!("{app}-{run}");
    // Its first stream brings `CUT` lines, then no request for its log is answered.
    let env = start(Faults {
        logs_answered: vec![(format!("{job_name}-worker-0"), 1)],
        cut_logs_every: CUT,
        ..Faults::default()
    });
    env.fc.create(job(app, run)).unwrap();
    let (w, out) = follow(&env, &job_name);
    names_the_deletion(&w, &job_name);
    let times: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|v| v["container"] == "worker")
        .map(|v| v["time"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(times.len() as u64, CUT, "the first stream's lines: {out}");
    let last: jiff::Timestamp = times.last().unwrap().parse().unwrap();
    let said = format!(
        "lines after {} (the last one read) are missing",
        hvdctl::logs::tail::user_time(last)
    );
    assert!(w.ends_with(&said), "{w}\nwanted: {said}");
}
