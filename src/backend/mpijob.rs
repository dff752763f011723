//! The `mpijob` backend: one `kubeflow.org/v2beta1` MPIJob; the MPI Operator makes the
//! launcher Job, the worker pods, the ssh Secret and the hostfile. Its kind ([`MpiJob`]) is
//! defined here, with the backend.

use super::{KubeBackend, Launch, Requirement, Run, Scaling, conditions, is_true, queue};
use crate::error::Result;
use crate::kinds::Object;
use crate::kinds::{ApiKind, JobCondition, Kind, KindDef, ROLE_LAUNCHER, ROLE_WORKER};
use crate::types::{Identity, JobState, LABEL_ROLE};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct MpiJobBackend;

/// Where the operator writes the hostfile (and hvdctl's scripts write theirs).
const HOSTFILE: &str = "/etc/mpi/hostfile";

impl KubeBackend for MpiJobBackend {
    fn name(&self) -> &'static str {
        "mpijob"
    }

    fn about(&self) -> &'static str {
        "kubeflow.org/v2beta1 MPIJob for the MPI Operator"
    }

    fn kinds(&self) -> Vec<KindDef> {
        vec![KindDef::of::<MpiJob>()]
    }

    fn requires(&self) -> Vec<Requirement> {
        vec![Requirement {
            kind: ApiKind::of::<MpiJob>(),
            provider: "the MPI Operator",
            hint: "install the MPI Operator (v0.4 or later, https://github.com/kubeflow/mpi-operator), or deploy without it: `hvdctl deploy --backend native`",
        }]
    }

    fn launch(&self) -> Launch {
        Launch::Operator {
            hostfile: HOSTFILE,
            worker_command: None,
        }
    }

    /// Queues: Kueue's label on the MPIJob (Kueue's MPIJob integration makes its Workload)
    /// and the job created suspended (`runPolicy.suspend`, as Kueue's webhook would set it);
    /// Volcano through `runPolicy.schedulingPolicy`, which the MPI Operator (started with
    /// `--gang-scheduling=volcano`) turns into the PodGroup named after the MPIJob
    /// (`pkg/controller/podgroup.go`, `newPodGroup`).
    fn finish(&self, objects: Vec<Object>, run: &Run) -> Vec<Object> {
        let app = run.app;
        let mut objects = objects;
        for o in &mut objects {
            let Some(job) = o.get_mut::<MpiJob>() else {
                continue;
            };
            queue::mark(&mut job.metadata, app);
            let queued = app.queue.is_some();
            if let Some(q) = &app.queue {
                queue::put(
                    &mut job.metadata.labels,
                    queue::KUEUE_QUEUE_LABEL,
                    q.clone(),
                );
                job.spec
                    .run_policy
                    .get_or_insert_with(Default::default)
                    .suspend = Some(true);
            }
            if let Some(v) = queue::volcano(app) {
                let rp = job.spec.run_policy.get_or_insert_with(Default::default);
                rp.scheduling_policy = Some(SchedulingPolicy {
                    min_available: Some(v.min_member(app.workers) as i32),
                    queue: Some(v.queue().to_string()),
                    priority_class: v.priority_class.clone(),
                    ..Default::default()
                });
            }
            if queued && !app.warm {
                wait_for_workers(job, app);
            }
        }
        objects
    }

    fn operator_selector(&self, job: &str) -> Option<String> {
        // What MPI Operator v0.5+ labels its Secret, ConfigMap, Service and launcher Job with.
        Some(format!("app={job}"))
    }

    fn job_object(&self, job: &str) -> (ApiKind, String) {
        (ApiKind::of::<MpiJob>(), job.to_string())
    }

    fn state(&self, job: Option<&Value>, _pods: &[Pod]) -> Result<(JobState, Vec<JobCondition>)> {
        let Some(job) = job else {
            return Ok((JobState::Unknown, vec![]));
        };
        let conds = conditions(job, "the MPIJob")?;
        let state = if is_true(&conds, "Succeeded") {
            JobState::Succeeded
        } else if is_true(&conds, "Failed") {
            JobState::Failed
        } else if is_true(&conds, "Running") {
            JobState::Running
        } else {
            JobState::Pending
        };
        Ok((state, conds))
    }

    /// The operator labels each worker pod with its index
    /// (`training.kubeflow.org/replica-index`, mpi-operator's `newWorker` in
    /// `pkg/controller/mpi_job_controller.go`); hvdctl's role label is on the templates.
    /// hvdctl never sets `runLauncherAsWorker`, so the index is the worker's.
    fn identity(&self) -> Identity {
        Identity {
            role_label: LABEL_ROLE,
            index_label: REPLICA_INDEX_LABEL,
            index_offset: 0,
            worker_value: ROLE_WORKER,
        }
    }

    fn scaling(&self) -> Scaling {
        Scaling::Patch(
            |workers| serde_json::json!({"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": workers}}}}),
        )
    }
}

/// What a queued run's launcher does before its command: wait until every host of the
/// operator's hostfile accepts ssh. MPI Operator v0.8.x creates a suspended MPIJob's
/// launcher Job at once and, when Kueue resumes the job, unsuspends it in the same step
/// that creates the workers, whatever `launcherCreationPolicy` says
/// (`pkg/controller/mpi_job_controller.go`, `syncHandler`; kubeflow/mpi-operator#615): the
/// launcher may start before any worker's name resolves, and mpirun would fail at once.
/// POSIX sh (the image's `/bin/sh` may not be bash); the port is `mpi.sshPort`'s. Its lines
/// start with `hvdctl: ` so the run's `firstLog` phase skips them.
const WAIT_FOR_WORKERS: &str = r#"hostfile=${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}
timeout=${HVDCTL_SSHD_TIMEOUT:-300}
port="$1"; shift
hosts=$(awk -F'[ :]' 'NF && $1 !~ /^#/ {print $1}' "$hostfile")
start=$(date +%s)
for h in $hosts; do
  until ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5 ${port:+-p "$port"} "$h" true 2>/dev/null; do
    if [ $(( $(date +%s) - start )) -ge "$timeout" ]; then
      echo "hvdctl: worker $h did not accept ssh within ${timeout}s; giving up" >&2
      exit 1
    fi
    sleep 1
  done
  echo "hvdctl: worker $h is ready"
done
exec "$@""#;

/// Wraps the launcher's command in [`WAIT_FOR_WORKERS`].
fn wait_for_workers(job: &mut MpiJob, app: &crate::app::App) {
    let Some(launcher) = job.spec.mpi_replica_specs.get_mut("Launcher") else {
        return;
    };
    let Some(spec) = launcher.template.spec.as_mut() else {
        return;
    };
    for c in spec.containers.iter_mut().take(1) {
        let mut argv: Vec<String> = ["/bin/sh", "-c", WAIT_FOR_WORKERS, "hvdctl-wait"]
            .map(String::from)
            .to_vec();
        argv.push(app.mpi.ssh_port.map(|p| p.to_string()).unwrap_or_default());
        argv.extend(c.command.take().unwrap_or_default());
        argv.extend(c.args.take().unwrap_or_default());
        c.command = Some(argv);
        let env = c.env.get_or_insert_with(Default::default);
        env.push(k8s_openapi::api::core::v1::EnvVar {
            name: "HVDCTL_SSHD_TIMEOUT".into(),
            value: Some(app.mpi.sshd_timeout_seconds.to_string()),
            ..Default::default()
        });
    }
}

/// The MPI Operator's worker index label.
pub const REPLICA_INDEX_LABEL: &str = "training.kubeflow.org/replica-index";

impl Kind for MpiJob {
    const ORDER: u8 = 6;
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        self.spec
            .mpi_replica_specs
            .iter_mut()
            .map(|(replica, spec)| {
                let role = if replica == "Launcher" {
                    ROLE_LAUNCHER
                } else {
                    ROLE_WORKER
                };
                (
                    role,
                    spec.template.metadata.get_or_insert_with(Default::default),
                )
            })
            .collect()
    }
}

/// `kubeflow.org/v2beta1` MPIJob (MPI Operator v0.4+), fields as in the operator's CRD.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJob {
    pub metadata: ObjectMeta,
    pub spec: MpiJobSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MpiJobStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_per_worker: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_launcher_as_worker: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_creation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_implementation: Option<String>,
    pub mpi_replica_specs: BTreeMap<String, ReplicaSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources:
        Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(default)]
    pub template: PodTemplateSpec,
}

/// What hvdctl reads of an MPIJob's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_statuses: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
}

impl k8s_openapi::Resource for MpiJob {
    const API_VERSION: &'static str = "kubeflow.org/v2beta1";
    const GROUP: &'static str = "kubeflow.org";
    const KIND: &'static str = "MPIJob";
    const VERSION: &'static str = "v2beta1";
    const URL_PATH_SEGMENT: &'static str = "mpijobs";
    type Scope = NamespaceResourceScope;
}

impl k8s_openapi::Metadata for MpiJob {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
