//! The Kubernetes kinds hvdctl creates, as typed objects: k8s-openapi types for built-in kinds
//! and [`MpiJob`] for the MPI Operator's custom resource. Rendered manifests are parsed into
//! [`Object`], so a misspelt field is caught before anything reaches a cluster.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Pod, PodTemplateSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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

/// `spec.containers[0].name` for a serde_ignored path.
fn show_path(p: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", show_path(parent)),
        P::Map { parent, key } => {
            let head = show_path(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            show_path(parent)
        }
    }
}

/// Role of a pod within a run.
pub const ROLE_LAUNCHER: &str = "launcher";
pub const ROLE_WORKER: &str = "worker";

/// One object of a run, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    ServiceAccount(ServiceAccount),
    Secret(Secret),
    ConfigMap(ConfigMap),
    Service(Service),
    Pod(Pod),
    StatefulSet(StatefulSet),
    Job(Job),
    MpiJob(MpiJob),
}

macro_rules! each_kind {
    ($self:ident, $o:ident => $e:expr) => {
        match $self {
            Object::ServiceAccount($o) => $e,
            Object::Secret($o) => $e,
            Object::ConfigMap($o) => $e,
            Object::Service($o) => $e,
            Object::Pod($o) => $e,
            Object::StatefulSet($o) => $e,
            Object::Job($o) => $e,
            Object::MpiJob($o) => $e,
        }
    };
}

/// A kind as the API serves it: what discovery, list, delete and messages need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// The plural resource name (`pods`, `mpijobs`).
    pub plural: &'static str,
}

impl ApiKind {
    /// The kind of a k8s-openapi type (or [`MpiJob`]): group, version and plural come from the type.
    pub const fn of<K: k8s_openapi::Resource>() -> ApiKind {
        ApiKind {
            api_version: K::API_VERSION,
            kind: K::KIND,
            plural: K::URL_PATH_SEGMENT,
        }
    }

    /// (group, version): `("", "v1")`, `("batch", "v1")`.
    pub fn group_version(&self) -> (&'static str, &'static str) {
        self.api_version
            .rsplit_once('/')
            .unwrap_or(("", self.api_version))
    }
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// Every kind hvdctl creates, the one list: owners first (the order deletion uses).
pub const KINDS: &[ApiKind] = &[
    ApiKind::of::<MpiJob>(),
    ApiKind::of::<Job>(),
    ApiKind::of::<StatefulSet>(),
    ApiKind::of::<Pod>(),
    ApiKind::of::<Service>(),
    ApiKind::of::<ConfigMap>(),
    ApiKind::of::<Secret>(),
    ApiKind::of::<ServiceAccount>(),
];

/// The kinds that only exist where an operator serves them (found by discovery).
pub fn is_custom(k: &ApiKind) -> bool {
    k.api_version.contains('.')
}

impl Object {
    /// Parses a manifest of a known kind. Fields the types do not know are collected in
    /// `unknown` (as paths like `spec.containers.0.imagePullPolicyy`), not dropped silently.
    pub fn from_value(v: &Value, unknown: &mut Vec<String>) -> Result<Object, String> {
        let field = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or_default();
        /// Fast path first; only a failure pays for finding the path of the bad field.
        fn typed<T: serde::de::DeserializeOwned>(
            v: &Value,
            unknown: &mut Vec<String>,
        ) -> Result<T, String> {
            serde_ignored::deserialize(v, |path| {
                let p = show_path(&path);
                // MpiJob's type has no apiVersion/kind fields; every other kind reads them.
                if p != "apiVersion" && p != "kind" {
                    unknown.push(p);
                }
            })
            .or_else(|_| {
                serde_path_to_error::deserialize(v).map_err(|e| {
                    let path = e.path().to_string();
                    format!("{path}: {}", e.into_inner())
                })
            })
        }
        Ok(match (field("apiVersion"), field("kind")) {
            ("v1", "ServiceAccount") => Object::ServiceAccount(typed(v, unknown)?),
            ("v1", "Secret") => Object::Secret(typed(v, unknown)?),
            ("v1", "ConfigMap") => Object::ConfigMap(typed(v, unknown)?),
            ("v1", "Service") => Object::Service(typed(v, unknown)?),
            ("v1", "Pod") => Object::Pod(typed(v, unknown)?),
            ("apps/v1", "StatefulSet") => Object::StatefulSet(typed(v, unknown)?),
            ("batch/v1", "Job") => Object::Job(typed(v, unknown)?),
            ("kubeflow.org/v2beta1", "MPIJob") => Object::MpiJob(typed(v, unknown)?),
            ("", _) | (_, "") => return Err("every document needs apiVersion and kind".into()),
            (a, k) => {
                let known: Vec<String> = KINDS.iter().map(ApiKind::to_string).collect();
                return Err(format!(
                    "hvdctl does not create {a} {k}; known kinds: {}",
                    known.join(", ")
                ));
            }
        })
    }

    /// The object as JSON, with apiVersion and kind first.
    pub fn to_value(&self) -> Value {
        let (api_version, kind) = self.type_meta();
        let body = each_kind!(self, o => serde_json::to_value(o)).unwrap_or(Value::Null);
        let mut out = serde_json::Map::new();
        out.insert("apiVersion".into(), api_version.into());
        out.insert("kind".into(), kind.into());
        if let Value::Object(m) = body {
            out.extend(m);
        }
        Value::Object(out)
    }

    /// The object's kind (apiVersion, kind, plural).
    pub fn api_kind(&self) -> ApiKind {
        fn of<K: k8s_openapi::Resource>(_: &K) -> ApiKind {
            ApiKind::of::<K>()
        }
        each_kind!(self, o => of(o))
    }

    pub fn type_meta(&self) -> (&'static str, &'static str) {
        let k = self.api_kind();
        (k.api_version, k.kind)
    }

    pub fn kind(&self) -> &'static str {
        self.api_kind().kind
    }

    /// The plural resource name (`pods`, `mpijobs`).
    pub fn plural(&self) -> &'static str {
        self.api_kind().plural
    }

    pub fn meta(&self) -> &ObjectMeta {
        each_kind!(self, o => &o.metadata)
    }

    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        each_kind!(self, o => &mut o.metadata)
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// Calls `f` with the metadata of every pod template (or pod) this object makes, and the
    /// role of those pods.
    pub fn for_each_pod_meta(&mut self, mut f: impl FnMut(&'static str, &mut ObjectMeta)) {
        let mut tmpl = |role, t: &mut PodTemplateSpec| {
            f(role, t.metadata.get_or_insert_with(Default::default))
        };
        match self {
            Object::Pod(p) => {
                // A bare pod is its own template: wrap its metadata for the same treatment.
                let mut t = PodTemplateSpec {
                    metadata: Some(std::mem::take(&mut p.metadata)),
                    spec: None,
                };
                tmpl(ROLE_WORKER, &mut t);
                p.metadata = t.metadata.unwrap_or_default();
            }
            Object::StatefulSet(s) => {
                if let Some(spec) = s.spec.as_mut() {
                    tmpl(ROLE_WORKER, &mut spec.template);
                }
            }
            Object::Job(j) => {
                if let Some(spec) = j.spec.as_mut() {
                    tmpl(ROLE_LAUNCHER, &mut spec.template);
                }
            }
            Object::MpiJob(m) => {
                for (replica, spec) in m.spec.mpi_replica_specs.iter_mut() {
                    let role = if replica == "Launcher" {
                        ROLE_LAUNCHER
                    } else {
                        ROLE_WORKER
                    };
                    tmpl(role, &mut spec.template);
                }
            }
            Object::ServiceAccount(_)
            | Object::Secret(_)
            | Object::ConfigMap(_)
            | Object::Service(_) => {}
        }
    }
}
