//! Elastic Horovod for real: the `horovod-elastic` template on the local backend (real
//! containers, the Horovod base image) losing a worker between epochs, falling below
//! minWorkers, and `hvdctl scale` up and down — plus bad `scale` input, which changes nothing;
//! and through Kubernetes manifests on the Docker kubelet (`mpijob`, `native`): a worker pod
//! deleted between epochs, `scale` of a running run.
//!
//! The template's `PAUSE_AFTER_EPOCH`/`PAUSE_SECONDS` give each test a window "between epochs
//! 1 and 2": rank 0 prints `pausing ...` and the test acts on that line, not on a guess.

use crate::util::{
    Cluster, docker, horovod_base, hvdctl_in, init_app, one_training_at_a_time, run_id,
    template_image,
};
use hvdctl::image::docker::DockerClient;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// The elastic app (on the Horovod base) and its image, (the test fails when it cannot be made).
fn elastic_app(tmp: &Path) -> Option<(DockerClient, PathBuf, String)> {
    let docker = docker()?;
    let base = horovod_base(&docker)?;
    let image = template_image(&docker, "horovod-elastic", &base);
    let dir = init_app(tmp, "ela", "horovod-elastic");
    Some((docker, dir, image))
}

/// `--set` pairs of a small, quick elastic run.
fn small(workers: u32, min: u32, max: u32, epochs: u32) -> Vec<String> {
    [
        format!("workers={workers}"),
        format!("elastic.minWorkers={min}"),
        format!("elastic.maxWorkers={max}"),
        format!("parameters.epochs={epochs}"),
        "parameters.batches-per-commit=5".into(),
        "env.SYNTHETIC_SAMPLES=2000".into(),
        "env.OMP_NUM_THREADS=1".into(),
        "env.PAUSE_AFTER_EPOCH=1".into(),
        "env.PAUSE_SECONDS=10".into(),
    ]
    .into_iter()
    .flat_map(|s| ["--set".to_string(), s])
    .collect()
}

/// Where a test's run goes: the local backend, or a backend of a fake cluster (its kubeconfig).
#[derive(Clone, Copy)]
struct On<'a> {
    backend: &'a str,
    kubeconfig: Option<&'a Path>,
}

const LOCAL: On = On {
    backend: "local",
    kubeconfig: None,
};

impl On<'_> {
    /// `hvdctl` in `dir`, talking to this place's cluster.
    fn hv(&self, dir: &Path) -> assert_cmd::Command {
        let mut c = hvdctl_in(dir);
        if let Some(kc) = self.kubeconfig {
            c.env("KUBECONFIG", kc);
        }
        c
    }
}

fn deploy(on: On, dir: &Path, id: &str, image: &str, sets: &[String]) {
    let o = on
        .hv(dir)
        .args([
            "deploy",
            "--backend",
            on.backend,
            "--run-id",
            id,
            "--image",
            image,
            "--no-push",
        ])
        .args(sets)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `hvdctl logs -f RUN`, its lines arriving on a channel.
struct Follow {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Follow {
    fn start(on: On, dir: &Path, id: &str) -> Follow {
        let mut c = crate::util::hvdctl_process();
        if let Some(kc) = on.kubeconfig {
            c.env("KUBECONFIG", kc);
        }
        let mut child = c
            .current_dir(dir)
            .args(["logs", "-f", id])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Follow {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `what` (panics with everything seen after `secs`).
    fn until(&mut self, what: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no line with {what:?} in {secs}s:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for `logs -f` to end: its exit code and all it printed.
    fn end(mut self, secs: u64) -> (i32, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
                    self.seen.push(l);
                }
                return (st.code().unwrap_or(-1), self.seen.join("\n"));
            }
            while let Ok(l) = self.lines.try_recv() {
                self.seen.push(l);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("logs -f did not end in {secs}s:\n{}", self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn status(on: On, dir: &Path, id: &str) -> Value {
    let o = on
        .hv(dir)
        .args(["status", id, "-o", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `status` until `done` holds of it, for at most `secs` seconds: the last one seen.
fn status_until(on: On, dir: &Path, id: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(on, dir, id);
        if done(&s) || Instant::now() >= end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn undeploy(on: On, dir: &Path, id: &str) {
    let o = on.hv(dir).args(["undeploy", id]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `hvdctl scale RUN --workers N`: its exit code and stderr.
fn scale(on: On, dir: &Path, run: &str, n: &str) -> (i32, String) {
    let o = on
        .hv(dir)
        .args(["scale", run, "--workers", n])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn kill(docker: &DockerClient, name: &str) {
    crate::util::rt()
        .block_on(docker.bollard().kill_container(
            name,
            None::<bollard::query_parameters::KillContainerOptions>,
        ))
        .unwrap_or_else(|e| panic!("killing {name}: {e}"));
}

fn pod<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {s}"))
}

/// 3 workers (min 2, max 3), 4 epochs; the worker of rank 0 (horovodrun's choice, read from
/// the `rank 0 of 3 ... on <host>` line) is killed while the ranks pause after the first epoch. The remaining 2 ranks go on from the last commit through every
/// epoch to "done": `logs -f` follows it all and exits 0, `status` says Succeeded and shows
/// that worker lost with its exit. Horovod re-ranks the survivors but tags their lines with
/// their start ranks: every tagged line says `launcher sN |` (start rank N), none `rN`, and
/// rank 0's lines after the reset come from a process that started as another rank (`-o json`:
/// `startRank`, no `rank`). The workers' sshd wrote nothing (no logins, no probes).
#[test]
fn local_worker_killed_between_epochs_training_goes_on_to_done() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((docker, dir, image)) = elastic_app(tmp.path()) else {
        return;
    };
    let _training = one_training_at_a_time();
    let id = run_id("k");
    let started = Instant::now();
    deploy(LOCAL, &dir, &id, &image, &small(3, 2, 3, 4));
    let mut logs = Follow::start(LOCAL, &dir, &id);
    let rank0 = logs.until("| rank 0 of 3 ", 240);
    let rank0_worker = rank0
        .rsplit_once(" on ")
        .and_then(|(_, rest)| rest.split_once(','))
        .map(|(host, _)| host.to_string())
        .unwrap_or_else(|| panic!("no host in {rank0:?}"));
    assert!(rank0.starts_with("launcher s0 | "), "{rank0}");
    logs.until("epoch 1/4: ranks=3", 240);
    logs.until("pausing", 60);
    kill(&docker, &rank0_worker);
    let during = status(LOCAL, &dir, &id);
    let (code, out) = logs.end(300);
    eprintln!(
        "elastic kill, 3 -> 2 ranks, 4 epochs: {:.1?}",
        started.elapsed()
    );
    let after = status(LOCAL, &dir, &id);
    let json = on_json(LOCAL, &dir, &id);
    undeploy(LOCAL, &dir, &id);
    assert_eq!(code, 0, "{out}");
    assert_eq!(during["state"], "Running", "{during}");
    assert!(out.contains("workers changed: now 2 ranks"), "{out}");
    for e in 2..=4 {
        assert!(
            out.contains(&format!("epoch {e}/4: ranks=2")),
            "epoch {e}: {out}"
        );
    }
    assert!(out.lines().any(is_done), "{out}");
    assert!(out.contains("training command exited with code 0"), "{out}");
    assert_eq!(after["state"], "Succeeded", "{after}");
    let lost = pod(&after, &rank0_worker);
    assert_eq!(lost["phase"], "Lost", "{after}");
    assert_eq!(lost["lastTermination"], "Error (exit 137)", "{after}");
    assert_eq!(after["elastic"]["minWorkers"], 2, "{after}");
    // Start ranks, said as such: no `launcher rN |` line at all.
    assert!(
        !out.lines().any(|l| l.starts_with("launcher r")),
        "a tagged line claims a current rank:\n{out}"
    );
    let tagged = |what: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("launcher s") && l.contains(what))
            .map(|l| l.split(" | ").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(tagged("epoch 1/4: ranks=3"), ["launcher s0"], "{out}");
    // Rank 0 after the reset is a process that started as rank 1 or 2.
    for e in 2..=4 {
        let who = tagged(&format!("epoch {e}/4: ranks=2"));
        assert!(
            who == ["launcher s1"] || who == ["launcher s2"],
            "epoch {e} from {who:?}:\n{out}"
        );
    }
    let launcher_lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let epoch_2 = launcher_lines
        .iter()
        .find(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("epoch 2/4"))
        })
        .unwrap_or_else(|| panic!("{json}"));
    assert!(epoch_2.get("rank").is_none(), "{epoch_2}");
    assert!(
        matches!(epoch_2["startRank"].as_u64(), Some(1 | 2)),
        "{epoch_2}"
    );
    // horovodrun runs discover_hosts.sh every second and ssh-es into every worker; sshd,
    // logging only errors, wrote none of it.
    let noise = crate::local::sshd_noise(&out);
    assert!(noise.is_empty(), "{noise:?}\n{out}");
}

/// `hvdctl logs RUN --role launcher -o json`.
fn on_json(on: On, dir: &Path, id: &str) -> String {
    let o = on
        .hv(dir)
        .args(["logs", id, "--role", "launcher", "-o", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// 2 workers with minWorkers 2: losing one leaves too few. horovodrun waits its elastic
/// timeout (10 s here) and fails; `logs -f` exits 1 and `status` says Failed, naming why.
#[test]
fn local_run_below_min_workers_fails_loudly() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((docker, dir, image)) = elastic_app(tmp.path()) else {
        return;
    };
    let _training = one_training_at_a_time();
    let id = run_id("m");
    let mut sets = small(2, 2, 3, 4);
    sets.extend([
        "--set".into(),
        "mpi.extraArgs=[--elastic-timeout, \"10\"]".into(),
    ]);
    deploy(LOCAL, &dir, &id, &image, &sets);
    let mut logs = Follow::start(LOCAL, &dir, &id);
    logs.until("pausing", 240);
    kill(&docker, &format!("ela-{id}-worker-1"));
    let (code, out) = logs.end(300);
    let after = status(LOCAL, &dir, &id);
    undeploy(LOCAL, &dir, &id);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("epoch 4/4"), "{out}");
    assert_eq!(after["state"], "Failed", "{after}");
    let failed = after["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap_or_else(|| panic!("{after}"));
    assert_eq!(failed["reason"], "BelowMinWorkers", "{after}");
    let msg = failed["message"].as_str().unwrap();
    assert!(msg.contains("fewer than minWorkers 2"), "{msg}");
    assert!(msg.contains("worker-1 Error (exit 137)"), "{msg}");
}

/// A running 2-worker run (min 2, max 3) scaled up to 3 while it pauses after epoch 1, then
/// down to 2: same run id, the new worker's log is followed, the ranks re-form each time,
/// and training ends "done". Bad input to `scale` (outside the bounds, unknown run, a run
/// that is not elastic) gets its exit code and changes nothing.
#[test]
fn scale_a_running_local_run_up_and_down_and_refuse_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_docker, dir, image)) = elastic_app(tmp.path()) else {
        return;
    };
    let _training = one_training_at_a_time();
    let id = run_id("s");
    deploy(LOCAL, &dir, &id, &image, &small(2, 2, 3, 6));
    let mut logs = Follow::start(LOCAL, &dir, &id);
    logs.until("pausing", 240);

    let scale = |run: &str, n: &str| scale(LOCAL, &dir, run, n);
    let names = |s: &Value| -> Vec<String> {
        s["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| format!("{} {}", p["name"], p["phase"]))
            .collect()
    };
    let before = status(LOCAL, &dir, &id);
    for (run, n, want, says) in [
        (id.as_str(), "4", 2, "outside the elastic bounds"),
        (id.as_str(), "1", 2, "outside the elastic bounds"),
        // Refused by the command line, before the run is looked up.
        (
            id.as_str(),
            "0",
            2,
            "invalid value '0' for '--workers <N>': must be at least 1",
        ),
        ("zzzz9", "2", 1, "zzzz9"),
    ] {
        let (code, err) = scale(run, n);
        assert_eq!(code, want, "scale {run} --workers {n}: {err}");
        assert!(err.contains(says), "scale {run} --workers {n}: {err}");
        assert_eq!(
            names(&status(LOCAL, &dir, &id)),
            names(&before),
            "scale {run} --workers {n} changed something"
        );
    }

    let (code, err) = scale(&id, "3");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("from 2 to 3 workers"), "{err}");
    logs.until("workers changed: now 3 ranks", 120);
    let up = status(LOCAL, &dir, &id);
    assert_eq!(up["run"], id.as_str());
    assert_eq!(up["workers"], 3, "{up}");
    let (code, err) = scale(&id, "2");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("from 3 to 2 workers"), "{err}");
    logs.until("workers changed: now 2 ranks", 120);
    let (code, out) = logs.end(300);
    let after = status(LOCAL, &dir, &id);
    undeploy(LOCAL, &dir, &id);
    assert_eq!(code, 0, "{out}");
    // Its sshd logs only errors; hvdctl's worker script says it started.
    assert!(
        out.contains("worker-2 | hvdctl: sshd started on port 22"),
        "the new worker's log is followed: {out}"
    );
    assert!(out.lines().any(is_done), "{out}");
    assert_eq!(after["state"], "Succeeded", "{after}");

    // A run of fixed size is not scaled.
    let fixed = run_id("f");
    std::fs::write(
        dir.join("hvdctl.yaml"),
        std::fs::read_to_string(dir.join("hvdctl.yaml"))
            .unwrap()
            .replace("elastic:\n  minWorkers: 1\n  maxWorkers: 4\n", ""),
    )
    .unwrap();
    deploy(
        LOCAL,
        &dir,
        &fixed,
        &image,
        &[
            "--set".into(),
            "workers=2".into(),
            "--set".into(),
            "command=[sleep, \"120\"]".into(),
        ],
    );
    let before = status(LOCAL, &dir, &fixed);
    let (code, err) = scale(&fixed, "3");
    let after = status(LOCAL, &dir, &fixed);
    undeploy(LOCAL, &dir, &fixed);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not an elastic run"), "{err}");
    assert_eq!(names(&after), names(&before));
}

/// 3 workers (min 2, max 3) of `backend` on the Docker kubelet, 4 epochs; worker-2's pod is
/// deleted through the API (graceful, as `kubectl delete pod` does) while the ranks pause
/// after the first epoch. Gives `logs -f`'s exit and output, and `status` once the pod is
/// gone or replaced and after the end.
struct Deleted {
    code: i32,
    /// Whether a new worker-2 pod took the deleted one's place.
    replaced: bool,
    out: String,
    during: Value,
    after: Value,
}

/// Rank 0's "done". Its tag is the rank the process started with (horovodrun tags by start
/// rank, which hvdctl shows as `sN`): when the worker that held rank 0 is the one lost, the
/// new rank 0 carries another tag.
fn is_done(line: &str) -> bool {
    line.strip_prefix("launcher s")
        .and_then(|rest| rest.split_once(" | "))
        .is_some_and(|(rank, text)| text == "done" && rank.parse::<u32>().is_ok())
}

fn worker_pod_deleted_between_epochs(backend: &str) -> Option<Deleted> {
    let tmp = tempfile::tempdir().unwrap();
    let (_docker, dir, image) = elastic_app(tmp.path())?;
    let _training = one_training_at_a_time();
    let cluster = Cluster::docker_kubelet(backend == "mpijob");
    let on = On {
        backend,
        kubeconfig: Some(&cluster.kubeconfig),
    };
    let id = run_id("d");
    let started = Instant::now();
    deploy(on, &dir, &id, &image, &small(3, 2, 3, 4));
    let mut logs = Follow::start(on, &dir, &id);
    logs.until("epoch 1/4: ranks=3", 300);
    logs.until("pausing", 60);
    let name = format!("ela-{id}-worker-2");
    let uid = |fc: &fake_cluster::FakeCluster| {
        fc.get("pods", "default", &name).map(|p| {
            p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    };
    let old = uid(&cluster.fc);
    cluster
        .fc
        .delete("pods", "default", &name, None)
        .unwrap_or_else(|e| panic!("deleting {name}: {e:?}"));
    // Until the pod is gone (native) or replaced by a new one (the MPI Operator's: a pod
    // that is gone is not yet replaced — under load the operator's next pass can come later).
    let settled = |now: &Option<String>| match backend {
        "mpijob" => now.is_some() && *now != old,
        _ => now.is_none(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !settled(&uid(&cluster.fc)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let replaced = uid(&cluster.fc).is_some();
    // The MPI Operator's new worker-2 still has to start on the Docker kubelet: `status`
    // counts it once it runs (or the run moved on, which the assertions then show).
    let during = status_until(on, &dir, &id, 60, |s| {
        backend != "mpijob" || s["workers"] == 3 || s["state"] != "Running"
    });
    let (code, out) = logs.end(300);
    eprintln!(
        "elastic {backend} pod deleted, 3 -> 2 ranks, 4 epochs: {:.1?}",
        started.elapsed()
    );
    // The operator deletes the workers when the launcher succeeded (cleanPodPolicy Running);
    // a deleted pod runs until its container stopped, and `logs -f` ended before that.
    let after = status_until(on, &dir, &id, 60, |s| {
        backend != "mpijob" || s["state"] != "Succeeded" || s["workers"] == 0
    });
    undeploy(on, &dir, &id);
    Some(Deleted {
        code,
        replaced,
        out,
        during,
        after,
    })
}

/// What every backend shows when a worker pod is deleted between epochs: training goes on
/// from the last commit on 2 ranks to "done", `logs -f` exits 0, the run is Succeeded.
fn goes_on_to_done(d: &Deleted) {
    let (out, during, after) = (&d.out, &d.during, &d.after);
    assert_eq!(d.code, 0, "{out}");
    assert_eq!(during["state"], "Running", "{during}");
    assert!(out.contains("workers changed: now 2 ranks"), "{out}");
    for e in 2..=4 {
        assert!(
            out.contains(&format!("epoch {e}/4: ranks=2")),
            "epoch {e}: {out}"
        );
    }
    assert!(out.lines().any(is_done), "{out}");
    assert_eq!(after["state"], "Succeeded", "{after}");
    assert_eq!(after["elastic"]["minWorkers"], 2, "{after}");
}

/// The MPI Operator (the fake one, like a real one for its replicas) puts a new worker-2 pod
/// in the deleted one's place; Horovod has blacklisted that host (its rank exited with 255)
/// and finishes on 2 ranks: the new pod runs sshd and nothing else. `status` shows it
/// Running, the run's 3 workers; the operator removes the workers at the end
/// (cleanPodPolicy Running).
#[test]
fn mpijob_worker_pod_deleted_between_epochs_training_goes_on_to_done() {
    let Some(d) = worker_pod_deleted_between_epochs("mpijob") else {
        return;
    };
    goes_on_to_done(&d);
    assert!(d.replaced, "the operator replaces a deleted worker pod");
    assert_eq!(d.during["workers"], 3, "{}", d.during);
    let after_loss = &d.out[d.out.find("now 2 ranks").unwrap()..];
    assert!(!after_loss.contains("now 3 ranks"), "{}", d.out);
    assert!(d.out.contains("exit with status code 255"), "{}", d.out);
    assert_eq!(d.after["workers"], 0, "{}", d.after);
}

/// A running 2-worker run of `backend` (min 2, max 3) on the Docker kubelet scaled to 3
/// while it pauses after epoch 1, then back to 2: worker-2 comes and goes, the ranks
/// re-form each time (in the log), same run id, `status` counts the workers, and training
/// ends "done". Outside the bounds is exit 2.
fn scale_a_running_kubernetes_run_up_and_down(backend: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_docker, dir, image)) = elastic_app(tmp.path()) else {
        return;
    };
    let _training = one_training_at_a_time();
    let cluster = Cluster::docker_kubelet(backend == "mpijob");
    let on = On {
        backend,
        kubeconfig: Some(&cluster.kubeconfig),
    };
    let id = run_id("u");
    deploy(on, &dir, &id, &image, &small(2, 2, 3, 6));
    let mut logs = Follow::start(on, &dir, &id);
    logs.until("pausing", 300);
    let (code, err) = scale(on, &dir, &id, "4");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("outside the elastic bounds"), "{err}");
    let (code, err) = scale(on, &dir, &id, "3");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("from 2 to 3 workers"), "{err}");
    logs.until("workers changed: now 3 ranks", 120);
    let up = status(on, &dir, &id);
    let (code, err) = scale(on, &dir, &id, "2");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("from 3 to 2 workers"), "{err}");
    logs.until("workers changed: now 2 ranks", 120);
    let (code, out) = logs.end(300);
    let after = status(on, &dir, &id);
    undeploy(on, &dir, &id);
    assert_eq!(up["run"], id.as_str());
    assert_eq!(up["workers"], 3, "{up}");
    assert_eq!(code, 0, "{out}");
    // Its sshd logs only errors; the worker's command says once that it starts sshd.
    assert!(
        out.contains("worker-2 | hvdctl: "),
        "the new worker's log is followed: {out}"
    );
    assert!(out.lines().any(is_done), "{out}");
    assert_eq!(after["state"], "Succeeded", "{after}");
    assert_eq!(after["run"], id.as_str());
}

/// mpijob: the MPIJob's Worker replicas change; the operator adds and removes worker-2.
#[test]
fn scale_a_running_mpijob_run_up_and_down() {
    scale_a_running_kubernetes_run_up_and_down("mpijob");
}

/// native: hvdctl creates worker-2's pod (a copy of a live worker's) and deletes it again.
#[test]
fn scale_a_running_native_run_up_and_down() {
    scale_a_running_kubernetes_run_up_and_down("native");
}

/// native: nothing replaces a deleted worker pod; the run goes on with 2 workers, which
/// `status` counts while it runs.
#[test]
fn native_worker_pod_deleted_between_epochs_training_goes_on_to_done() {
    let Some(d) = worker_pod_deleted_between_epochs("native") else {
        return;
    };
    goes_on_to_done(&d);
    assert!(!d.replaced, "nothing replaces a native worker pod");
    assert_eq!(d.during["workers"], 2, "{}", d.during);
    assert!(!d.out.contains("now 3 ranks"), "{}", d.out);
}
