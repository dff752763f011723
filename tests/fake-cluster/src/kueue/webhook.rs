//! Kueue's mutating webhooks, on create (`Default` of each integration's webhook):
//! - MPIJob (`pkg/controller/jobs/mpijob/mpijob_webhook.go`) and batch/v1 Job
//!   (`job/job_webhook.go`): `ApplyDefaultForSuspend` suspends a job that names a queue and has
//!   no Kueue-managed ancestor (`jobframework/defaults.go`, `utils.go:WorkloadShouldBeSuspended`);
//! - TrainJob (`trainjob/trainjob_webhook.go`): suspended the same way, and Kueue's runtime
//!   patch (manager `kueue.x-k8s.io/manager`) appended, always;
//! - Pod (`pod/pod_webhook.go`): a pod naming a queue, with no managed ancestor, is labelled
//!   `kueue.x-k8s.io/managed`, given the finalizer of that name, the scheduling gates
//!   `kueue.x-k8s.io/admission` and (topology-aware scheduling being on) `kueue.x-k8s.io/topology`,
//!   and its role hash (`pkg/util/pod/pod.go:GenerateRoleHash`).
//!
//! Namespaces: `managedJobsNamespaceSelector` leaves out `kube-system` (and Kueue's own).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{ADMISSION_GATE, MANAGED_LABEL, POD_FINALIZER, ROLE_HASH, TOPOLOGY_GATE, queue_name};
use crate::error::ApiResult;
use crate::resources::{ResId, res};
use crate::store::Store;
use crate::util::s;

/// Kueue's runtime patch manager on a TrainJob.
pub const TRAINJOB_MANAGER: &str = "kueue.x-k8s.io/manager";

pub fn managed_namespace(ns: &str) -> bool {
    ns != "kube-system" && ns != "kueue-system"
}

/// Kinds Kueue manages as jobs (they get Workloads of their own when they name a queue).
pub fn is_job_kind(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("batch/v1", "Job")
            | ("kubeflow.org/v2beta1", "MPIJob")
            | ("trainer.kubeflow.org/v1alpha1", "TrainJob")
            | ("jobset.x-k8s.io/v1alpha2", "JobSet")
    )
}

/// `FindAncestorJobManagedByKueue`: walks the controller owner references up; true when an
/// ancestor is a job kind Kueue manages that names a queue.
pub fn managed_ancestor(store: &Store, obj: &Value) -> bool {
    let mut cur = obj.clone();
    for _ in 0..8 {
        let Some(owner_uid) = cur
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            })
            .and_then(|r| s(r, "/uid"))
            .map(String::from)
        else {
            return false;
        };
        let Some((_, owner)) = store.get_by_uid(&owner_uid) else {
            return false;
        };
        let (av, kind) = (
            s(&owner, "/apiVersion").unwrap_or_default(),
            s(&owner, "/kind").unwrap_or_default(),
        );
        if is_job_kind(av, kind) && queue_name(&owner).is_some() {
            return true;
        }
        cur = (*owner).clone();
    }
    false
}

pub fn admit(store: &Store, res_id: ResId, ns: &str, obj: &mut Value) -> ApiResult<()> {
    if !managed_namespace(ns) {
        return Ok(());
    }
    let def = res(res_id);
    let queued = queue_name(obj).is_some();
    match (def.group, def.kind) {
        ("kubeflow.org", "MPIJob") if queued && !managed_ancestor(store, obj) => {
            obj["spec"]["runPolicy"]["suspend"] = json!(true);
        }
        ("trainer.kubeflow.org", "TrainJob") => {
            if queued && !managed_ancestor(store, obj) {
                obj["spec"]["suspend"] = json!(true);
            }
            let patches = &mut obj["spec"]["runtimePatches"];
            if !patches.is_array() {
                *patches = json!([]);
            }
            let list = patches.as_array_mut().expect("array");
            if !list
                .iter()
                .any(|p| s(p, "/manager") == Some(TRAINJOB_MANAGER))
            {
                list.push(json!({"manager": TRAINJOB_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}));
            }
        }
        ("batch", "Job") if queued && !managed_ancestor(store, obj) => {
            obj["spec"]["suspend"] = json!(true);
        }
        ("", "Pod") if queued && !managed_ancestor(store, obj) => {
            let hash = role_hash(&obj["spec"]);
            let meta = &mut obj["metadata"];
            if !meta["labels"].is_object() {
                meta["labels"] = json!({});
            }
            meta["labels"][MANAGED_LABEL] = json!("true");
            if !meta["annotations"].is_object() {
                meta["annotations"] = json!({});
            }
            meta["annotations"][ROLE_HASH] = json!(hash);
            push_unique(&mut meta["finalizers"], json!(POD_FINALIZER));
            for gate in [ADMISSION_GATE, TOPOLOGY_GATE] {
                push_unique(&mut obj["spec"]["schedulingGates"], json!({"name": gate}));
            }
        }
        _ => {}
    }
    Ok(())
}

fn push_unique(list: &mut Value, item: Value) {
    if !list.is_array() {
        *list = json!([]);
    }
    let l = list.as_array_mut().expect("array");
    if !l.contains(&item) {
        l.push(item);
    }
}

/// The first 8 hex digits of the SHA-256 of the pod spec's shape (`GenerateRoleHash`,
/// `SpecShape`, `ContainersShape`: per container only its requests and ports, plus the
/// scheduling fields), the keys sorted as Go's JSON encoder sorts a map's. Pods alike in
/// these share a pod set of the group's Workload.
pub fn role_hash(spec: &Value) -> String {
    let containers = |k: &str| -> Value {
        match spec.get(k).and_then(Value::as_array) {
            Some(cs) if !cs.is_empty() => Value::Array(
                cs.iter()
                    .map(|c| {
                        json!({"ports": c.get("ports").cloned().unwrap_or(Value::Null),
                            "resources": {"requests": c.pointer("/resources/requests").cloned().unwrap_or(Value::Null)}})
                    })
                    .collect(),
            ),
            _ => Value::Null,
        }
    };
    let field = |k: &str| spec.get(k).cloned().unwrap_or(Value::Null);
    let shape = json!({
        "affinity": field("affinity"),
        "containers": containers("containers"),
        "initContainers": containers("initContainers"),
        "nodeSelector": field("nodeSelector"),
        "overhead": field("overhead"),
        "priority": field("priority"),
        "resourceClaims": field("resourceClaims"),
        "runtimeClassName": field("runtimeClassName"),
        "tolerations": field("tolerations"),
        "topologySpreadConstraints": field("topologySpreadConstraints"),
    });
    let text = serde_json::to_string(&shape).unwrap_or_default();
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}
