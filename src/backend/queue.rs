//! Queues a run can wait in: a Kueue LocalQueue (`queue`) or Volcano (`scheduling.volcano`).
//! What every backend shares to render them — the keys Kueue and Volcano read, the
//! annotation that tells hvdctl's readers which queue a run went to, and Volcano's PodGroup
//! kind (the native backend makes one; the operators make their own). Each backend decides
//! in its own module where they go on its objects.
//!
//! Keys as read from their sources:
//! - Kueue v0.19.2: `kueue.x-k8s.io/queue-name` (`pkg/controller/constants/constants.go`,
//!   `QueueLabel`), the pod group keys `kueue.x-k8s.io/pod-group-name`,
//!   `kueue.x-k8s.io/pod-group-total-count`, `kueue.x-k8s.io/retriable-in-group`
//!   (`pkg/controller/jobs/pod/constants`).
//! - Volcano v1.15.1: the pod annotation `scheduling.k8s.io/group-name`
//!   (`KubeGroupNameAnnotationKey`) and `scheduling.volcano.sh/queue-name`
//!   (`QueueNameAnnotationKey`) in `staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go`;
//!   the PodGroup (`types.go`).

use crate::app::App;
use crate::app::spec::Volcano;
use crate::kinds::Kind;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The job's (or pod's) LocalQueue, for Kueue.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's pod group: the group's name (annotation: Kueue v0.19 prefers it over the label).
pub const KUEUE_POD_GROUP_NAME: &str = "kueue.x-k8s.io/pod-group-name";
/// Kueue's pod group: how many pods make the group.
pub const KUEUE_POD_GROUP_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";
/// Kueue's pod group: a failed or deleted pod is not waited for (a worker's sshd never ends
/// by itself; without it Kueue would wait for replacement pods).
pub const KUEUE_RETRIABLE: &str = "kueue.x-k8s.io/retriable-in-group";
/// The label Kueue puts on a job's Workload: the job's uid.
pub const KUEUE_JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";
/// Volcano's pod annotation naming the pod's PodGroup.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Volcano's annotation naming the queue (read by the Trainer's Volcano plugin).
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// The scheduler name Volcano answers to.
pub const VOLCANO_SCHEDULER: &str = "volcano";

/// hvdctl's annotation on a run's job object: `kueue/<LocalQueue>` or `volcano/<queue>`, so
/// status, logs and runs know where to look without the app's file.
pub const ANNOTATION_QUEUE: &str = "hvdctl.io/queue";

/// The queue system a run waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Kueue,
    Volcano,
}

impl System {
    pub fn as_str(self) -> &'static str {
        match self {
            System::Kueue => "kueue",
            System::Volcano => "volcano",
        }
    }
}

/// Where an app's runs queue: `(system, queue name)`.
pub fn of(app: &App) -> Option<(System, String)> {
    if let Some(q) = &app.queue {
        return Some((System::Kueue, q.clone()));
    }
    app.scheduling
        .volcano
        .as_ref()
        .map(|v| (System::Volcano, v.queue().to_string()))
}

/// The [`ANNOTATION_QUEUE`] value of an app's runs.
pub fn annotation_value(app: &App) -> Option<String> {
    of(app).map(|(s, q)| format!("{}/{q}", s.as_str()))
}

/// Reads an [`ANNOTATION_QUEUE`] value back.
pub fn parse_annotation(v: &str) -> Option<(System, String)> {
    let (s, q) = v.split_once('/')?;
    let system = match s {
        "kueue" => System::Kueue,
        "volcano" => System::Volcano,
        _ => return None,
    };
    (!q.is_empty()).then(|| (system, q.to_string()))
}

/// Marks the run's job object with the queue it waits in.
pub fn mark(meta: &mut ObjectMeta, app: &App) {
    if let Some(v) = annotation_value(app) {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_QUEUE.into(), v);
    }
}

/// Adds `key: value` to a label or annotation map.
pub fn put(map: &mut Option<BTreeMap<String, String>>, key: &str, value: impl Into<String>) {
    map.get_or_insert_with(Default::default)
        .insert(key.to_string(), value.into());
}

/// The app's Volcano settings, if it uses Volcano.
pub fn volcano(app: &App) -> Option<&Volcano> {
    app.scheduling.volcano.as_ref()
}

/// `scheduling.volcano.sh/v1beta1` PodGroup (Volcano v1.15.1, `types.go`): the fields hvdctl
/// writes and reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    pub metadata: ObjectMeta,
    pub spec: PodGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

impl PodGroup {
    /// The PodGroup of job `job` for `app`'s Volcano settings: named after the job (as the
    /// MPI Operator and the Trainer name theirs), every pod a member unless `minAvailable`.
    pub fn of(job: &str, app: &App, v: &Volcano) -> PodGroup {
        PodGroup {
            metadata: ObjectMeta {
                name: Some(job.to_string()),
                ..Default::default()
            },
            spec: PodGroupSpec {
                min_member: Some(v.min_member(app.workers) as i32),
                queue: Some(v.queue().to_string()),
                priority_class_name: v.priority_class.clone(),
            },
            status: None,
        }
    }
}

impl Kind for PodGroup {
    /// Before the pods that join it (Volcano schedules a pod only once its group exists).
    const ORDER: u8 = 3;
}

impl k8s_openapi::Resource for PodGroup {
    const API_VERSION: &'static str = "scheduling.volcano.sh/v1beta1";
    const GROUP: &'static str = "scheduling.volcano.sh";
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1beta1";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodGroup {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Kueue's and Volcano's kinds hvdctl reads (never creates), for discovery and RBAC.
pub mod kinds {
    use crate::kinds::ApiKind;

    pub const WORKLOAD: ApiKind = ApiKind {
        api_version: "kueue.x-k8s.io/v1beta2",
        kind: "Workload",
        plural: "workloads",
    };
    pub const LOCAL_QUEUE: ApiKind = ApiKind {
        api_version: "kueue.x-k8s.io/v1beta2",
        kind: "LocalQueue",
        plural: "localqueues",
    };
    pub const CLUSTER_QUEUE: ApiKind = ApiKind {
        api_version: "kueue.x-k8s.io/v1beta2",
        kind: "ClusterQueue",
        plural: "clusterqueues",
    };
    pub const POD_GROUP: ApiKind = ApiKind::of::<super::PodGroup>();
    pub const VOLCANO_QUEUE: ApiKind = ApiKind {
        api_version: "scheduling.volcano.sh/v1beta1",
        kind: "Queue",
        plural: "queues",
    };
}
