//! Plain types every layer shares, with no I/O: a run's state, the engines, a pod's or
//! container's place in its run (role and worker index, read from labels), hvdctl's labels,
//! an elastic run's bounds and what `scale` and `undeploy` report. Modules that do I/O
//! (cluster, engine, local, logs) import from here, never from each other for these.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `app.kubernetes.io/managed-by=hvdctl` on everything hvdctl creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_APP: &str = "hvdctl.io/app";
pub const LABEL_RUN: &str = "hvdctl.io/run";
/// `launcher` or `worker`, stamped on every pod template (so operator-made pods carry it).
pub const LABEL_ROLE: &str = "hvdctl.io/role";
/// A worker's index, on the pods hvdctl makes itself (operators label theirs: see
/// [`Identity`]).
pub const LABEL_INDEX: &str = "hvdctl.io/index";
pub const LABEL_BACKEND: &str = "hvdctl.io/backend";
pub const MANAGER: &str = "hvdctl";

/// Where hvdctl mounts its scripts (and, in `native` pods, the run's ssh keys).
pub const SCRIPTS_DIR: &str = "/etc/hvdctl";
/// Where the hostfile and `discover_hosts.sh` live (the MPI Operator's path, for every backend).
pub const MPI_DIR: &str = "/etc/mpi";

/// Role of a pod (or local container) within a run.
pub const ROLE_LAUNCHER: &str = "launcher";
pub const ROLE_WORKER: &str = "worker";

/// The overall state of a run's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    /// A queue system holds it: Kueue has not admitted its Workload, or Volcano's PodGroup
    /// is still Pending.
    Queued,
    Running,
    Succeeded,
    Failed,
    /// The job object is gone, or the engine cannot tell.
    Unknown,
}

impl JobState {
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed)
    }
    /// Exit code for commands that wait for the end (0 succeeded, 1 failed).
    pub fn exit_code(self) -> u8 {
        if self == JobState::Failed { 1 } else { 0 }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A condition of a run's job, in the shape Kubernetes and the operators share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// Where a status report or a row of `runs` was read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The engine has the run.
    #[default]
    Engine,
    /// The engine no longer has it: read from the flight recorder.
    Record,
}

/// The two engines runs execute on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Kubernetes,
    Docker,
}

impl EngineKind {
    /// `kubernetes` or `docker` (the `engine` key of JSON output).
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Kubernetes => "kubernetes",
            EngineKind::Docker => "docker",
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which labels say a pod's place in its run: the role label (hvdctl's, on every pod
/// template) and the label holding a worker's index — hvdctl's own on the pods it makes,
/// the operator's on the pods an operator makes (the MPI Operator's
/// `training.kubeflow.org/replica-index`, JobSet's `jobset.sigs.k8s.io/job-index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub role_label: &'static str,
    pub index_label: &'static str,
    /// Subtracted from the index label's value (the MPI Operator counts a launcher that
    /// runs as a worker as replica 0).
    pub index_offset: u32,
    /// The role label's value that means a worker (`worker`; JobSet's `node`).
    pub worker_value: &'static str,
}

impl Identity {
    /// hvdctl's own labels.
    pub const HVDCTL: Identity = Identity {
        role_label: LABEL_ROLE,
        index_label: LABEL_INDEX,
        index_offset: 0,
        worker_value: ROLE_WORKER,
    };

    /// The role and index of a pod with `labels`.
    pub fn role(&self, labels: Option<&BTreeMap<String, String>>) -> Role {
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        let role = match get(self.role_label).unwrap_or_default() {
            v if v == self.worker_value => ROLE_WORKER.to_string(),
            v => v.to_string(),
        };
        let index = (role == ROLE_WORKER)
            .then(|| get(self.index_label)?.parse::<u32>().ok())
            .flatten()
            .and_then(|i| i.checked_sub(self.index_offset));
        Role { role, index }
    }
}

/// A pod's (or local container's) place in its run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Role {
    /// `launcher`, `worker`, or "" for a pod without the role label.
    pub role: String,
    /// A worker's index; `None` for the launcher (and a worker without the label).
    pub index: Option<u32>,
}

impl Role {
    pub fn is_launcher(&self) -> bool {
        self.role == ROLE_LAUNCHER
    }
    pub fn is_worker(&self) -> bool {
        self.role == ROLE_WORKER
    }
}

/// Elastic bounds of a run, in workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    pub min_workers: u32,
    pub max_workers: u32,
}

/// The bounds on a launcher's command line (`horovodrun ... --min-np A --max-np B
/// --slots-per-host S`, written by `backend::values::launch_argv`), or `None` for a run that
/// is not elastic. Reading them back from what runs keeps the engines the source of truth.
pub fn elastic_bounds(argv: &[String]) -> Option<Bounds> {
    let value = |flag: &str| -> Option<u32> {
        argv.windows(2)
            .find(|w| w[0] == flag)
            .and_then(|w| w[1].parse().ok())
    };
    if !argv.iter().any(|a| a == "horovodrun") {
        return None;
    }
    let slots = value("--slots-per-host").unwrap_or(1).max(1);
    Some(Bounds {
        min_workers: value("--min-np")? / slots,
        max_workers: value("--max-np")? / slots,
    })
}

/// What `scale` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scaled {
    pub job: String,
    /// Live workers before.
    pub before: u32,
    /// Workers asked for.
    pub after: u32,
    pub bounds: Bounds,
}

/// What `undeploy` removed: (kind, name), e.g. `("Pod", "mnist-ab1-worker-0")`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub items: Vec<(String, String)>,
}

impl Removed {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `1 Job, 2 Pods, 1 Service`; `4 containers, 1 network`.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = Default::default();
        for (k, _) in &self.items {
            *counts.entry(k.as_str()).or_default() += 1;
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|(k, n)| format!("{n} {}", crate::text::plural(k, *n)))
            .collect();
        parts.join(", ")
    }
}

/// The variable that tells the training script (and `hvdctl tensorboard`, which reads it
/// in rank 0's container) where TensorBoard's event files go: `tensorboard.logDir`.
pub const TENSORBOARD_LOG_DIR: &str = "TENSORBOARD_LOG_DIR";

/// Where rank 0 writes Horovod's timeline with `timeline:` (in `/tmp`, which every image has
/// and every user may write; Horovod does not create directories).
pub const TIMELINE_PATH: &str = "/tmp/hvdctl-horovod-timeline.json";
/// The variables Horovod reads for its timeline: the file, and whether cycles are marked.
pub const TIMELINE_ENV: [&str; 2] = ["HOROVOD_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_and_index_come_from_labels_not_names() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let w = labels(&[(LABEL_ROLE, "worker"), (LABEL_INDEX, "3")]);
        assert_eq!(
            Identity::HVDCTL.role(Some(&w)),
            Role {
                role: "worker".into(),
                index: Some(3)
            }
        );
        // A launcher has no index, whatever its labels say.
        let l = labels(&[(LABEL_ROLE, "launcher"), (LABEL_INDEX, "0")]);
        assert_eq!(Identity::HVDCTL.role(Some(&l)).index, None);
        // An operator's index label, with its offset.
        let op = Identity {
            role_label: LABEL_ROLE,
            index_label: "training.kubeflow.org/replica-index",
            index_offset: 1,
            worker_value: ROLE_WORKER,
        };
        let w = labels(&[
            (LABEL_ROLE, "worker"),
            ("training.kubeflow.org/replica-index", "2"),
        ]);
        assert_eq!(op.role(Some(&w)).index, Some(1));
        // JobSet's replicated job name as the role: `node` is a worker.
        let js = Identity {
            role_label: "jobset.sigs.k8s.io/replicatedjob-name",
            index_label: "batch.kubernetes.io/job-completion-index",
            index_offset: 0,
            worker_value: "node",
        };
        let n = labels(&[
            ("jobset.sigs.k8s.io/replicatedjob-name", "node"),
            ("batch.kubernetes.io/job-completion-index", "1"),
        ]);
        assert_eq!(
            js.role(Some(&n)),
            Role {
                role: ROLE_WORKER.into(),
                index: Some(1)
            }
        );
        let l = labels(&[("jobset.sigs.k8s.io/replicatedjob-name", "launcher")]);
        assert!(js.role(Some(&l)).is_launcher());
        assert_eq!(Identity::HVDCTL.role(None), Role::default());
    }

    #[test]
    fn elastic_bounds_from_the_command_line() {
        let argv: Vec<String> =
            "horovodrun -np 4 --min-np 2 --max-np 8 --slots-per-host 2 python t.py"
                .split(' ')
                .map(String::from)
                .collect();
        assert_eq!(
            elastic_bounds(&argv),
            Some(Bounds {
                min_workers: 1,
                max_workers: 4
            })
        );
        assert_eq!(elastic_bounds(&["mpirun".into()]), None);
    }
}
