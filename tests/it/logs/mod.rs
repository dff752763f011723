//! `hvdctl logs`: hvdctl-labelled runs made directly in a fake cluster (native-style launcher
//! Job + worker pods, or an MPIJob), the real binaries as subprocesses, and the exactly-once
//! check of numbered lines.

// Bad situations: a clear message and a non-zero exit, quickly.
mod errors;
// Every line exactly once under faults, with the job's exit code.
mod lossless;
// Plain successful runs of the templates on every backend: no warning.
mod plain;
// A pod deleted before its log was read: the loss named, with who and why.
mod deleted;

pub use crate::util::*;
use fake_cluster::{Faults, Options};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A fake cluster playing the MPI Operator, with `faults`.
pub fn start(faults: Faults) -> Cluster {
    Cluster::start(Options {
        mpi_operator: true,
        faults,
        ..Default::default()
    })
}

pub fn labels(app: &str, run: &str, role: &str) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "hvdctl",
        "hvdctl.io/app": app,
        "hvdctl.io/run": run,
        "hvdctl.io/role": role,
    })
}

pub fn selector(run: &str) -> String {
    format!("app.kubernetes.io/managed-by=hvdctl,hvdctl.io/run={run}")
}

/// What one container does (the fake kubelet's env protocol).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Lines per instance.
    pub lines: u64,
    /// Lines per second.
    pub rate: u64,
    pub exit: i32,
    /// Crashes (exit 1) before the final instance.
    pub restarts: u64,
}

pub fn container(name: &str, p: Plan) -> Value {
    json!({"name": name, "image": "hvd:test", "env": [
        {"name": "FAKE_KUBELET_LINES", "value": p.lines.to_string()},
        {"name": "FAKE_KUBELET_RATE", "value": p.rate.to_string()},
        {"name": "FAKE_KUBELET_EXIT", "value": p.exit.to_string()},
        {"name": "FAKE_KUBELET_RESTARTS", "value": p.restarts.to_string()},
    ]})
}

/// A worker pod `<job>-worker-<i>` with the given containers (restartPolicy OnFailure).
pub fn worker_pod(app: &str, run: &str, i: usize, containers: &[(&str, Plan)]) -> Value {
    let cs: Vec<Value> = containers.iter().map(|(n, p)| container(n, *p)).collect();
    // The index as each backend's pods carry it: hvdctl's label on native's, the MPI
    // Operator's on an MPIJob's (a worker's index is read from labels, never its name).
    let mut labels = labels(app, run, "worker");
    labels["hvdctl.io/index"] = json!(i.to_string());
    labels["training.kubeflow.org/replica-index"] = json!(i.to_string());
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-{run}-worker-{i}"), "namespace": "default", "labels": labels},
        "spec": {"restartPolicy": "OnFailure", "containers": cs},
    })
}

/// The native backend's launcher Job `<job>-launcher`.
pub fn launcher_job(app: &str, run: &str, p: Plan, suspend: bool) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{app}-{run}-launcher"), "namespace": "default", "labels": labels(app, run, "launcher")},
        "spec": {"backoffLimit": 0, "suspend": suspend, "template": {
            "metadata": {"labels": labels(app, run, "launcher")},
            "spec": {"restartPolicy": "Never", "containers": [container("launcher", p)]},
        }},
    })
}

/// An MPIJob `<app>-<run>` with hvdctl's labels on every template.
pub fn mpijob(app: &str, run: &str, launcher: Plan, workers: usize, worker: Plan) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": format!("{app}-{run}"), "namespace": "default", "labels": labels(app, run, "")},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": {
                    "metadata": {"labels": labels(app, run, "launcher")},
                    "spec": {"containers": [container("launcher", launcher)]}}},
                "Worker": {"replicas": workers, "template": {
                    "metadata": {"labels": labels(app, run, "worker")},
                    "spec": {"containers": [container("worker", worker)]}}},
            },
        },
    })
}

/// Lines expected from one container: `(pod, container)` → lines per instance (index = restart).
pub type Expected = BTreeMap<(String, String), Vec<u64>>;

pub fn expect(e: &mut Expected, pod: &str, container: &str, p: Plan) {
    e.insert(
        (pod.to_string(), container.to_string()),
        vec![p.lines; p.restarts as usize + 1],
    );
}

/// How a client's output compares with the lines the containers wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub expected: u64,
    pub printed: u64,
    pub missing: u64,
    pub duplicated: u64,
    /// Lines that are not one of the numbered lines (partial, mangled).
    pub garbled: u64,
    /// Containers with at least one line missing.
    pub incomplete: Vec<String>,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} lines printed: {} missing, {} duplicated, {} garbled",
            self.printed, self.expected, self.missing, self.duplicated, self.garbled
        )
    }
}

/// Checks every numbered line (`pod=P container=C restart=K line I`) appears exactly once.
pub fn tally(out: &str, expected: &Expected) -> Tally {
    let mut seen: BTreeMap<(String, String, u64), Vec<u8>> = BTreeMap::new();
    for ((pod, c), instances) in expected {
        for (k, n) in instances.iter().enumerate() {
            seen.insert((pod.clone(), c.clone(), k as u64), vec![0; *n as usize + 1]);
        }
    }
    let mut t = Tally {
        expected: expected.values().flatten().sum(),
        ..Tally::default()
    };
    for line in out.lines() {
        t.printed += 1;
        let Some(parsed) = parse_line(line) else {
            t.garbled += 1;
            continue;
        };
        let (pod, c, k, i) = parsed;
        match seen.get_mut(&(pod, c, k)) {
            Some(v) if (i as usize) < v.len() && i > 0 => {
                v[i as usize] = v[i as usize].saturating_add(1)
            }
            _ => t.garbled += 1,
        }
    }
    for ((pod, c, k), v) in &seen {
        let mut lost = 0;
        for &n in &v[1..] {
            match n {
                0 => lost += 1,
                1 => {}
                n => t.duplicated += u64::from(n - 1),
            }
        }
        if lost > 0 {
            t.incomplete.push(format!("{pod}/{c}#{k}: {lost} lost"));
        }
        t.missing += lost;
    }
    t
}

/// `... pod=P container=C restart=K line I` anywhere in the line (after any prefix).
fn parse_line(line: &str) -> Option<(String, String, u64, u64)> {
    let at = line.find("pod=")?;
    let mut it = line[at..].split(' ');
    let pod = it.next()?.strip_prefix("pod=")?;
    let c = it.next()?.strip_prefix("container=")?;
    let k = it.next()?.strip_prefix("restart=")?.parse().ok()?;
    if it.next()? != "line" {
        return None;
    }
    let i = it.next()?.parse().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((pod.to_string(), c.to_string(), k, i))
}

/// A child process with its stdout collected to a file.
pub struct Running {
    pub child: Child,
    pub out: PathBuf,
    pub err: PathBuf,
    pub started: Instant,
}

pub fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Running {
    let out = dir.join(format!("{name}.out"));
    let err = dir.join(format!("{name}.err"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("out file"))
        .stderr(std::fs::File::create(&err).expect("err file"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    Running {
        child,
        out,
        err,
        started: Instant::now(),
    }
}

impl Running {
    /// Waits until the process has written `text` on stderr; panics after `within`.
    pub fn until_stderr(&self, text: &str, within: Duration) {
        let t0 = Instant::now();
        while !self.stderr().contains(text) {
            assert!(
                t0.elapsed() < within,
                "no {text:?} within {within:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout`; kills the process when it is over. Returns the exit code (None:
    /// killed by the timeout or a signal) and how long it ran.
    pub fn wait(&mut self, timeout: Duration) -> (Option<i32>, Duration) {
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return (st.code(), self.started.elapsed());
            }
            if self.started.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (None, self.started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Sends SIGINT (Ctrl-C).
    pub fn interrupt(&self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
    }
}
