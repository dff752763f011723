//! Kueue's visibility API (`visibility.kueue.x-k8s.io/v1beta2`, an aggregated API in Kueue;
//! `pkg/visibility/storage/pending_workloads_{cq,lq}.go`, `utils.go:newPendingWorkload`):
//! `GET /apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/<cq>/pendingworkloads` and
//! `.../namespaces/<ns>/localqueues/<lq>/pendingworkloads` answer a `PendingWorkloadsSummary`
//! of the Workloads not yet holding quota, in queue order, with 0-based
//! `positionInClusterQueue` and `positionInLocalQueue`; an unknown queue is a NotFound.
//! `?limit=` and `?offset=` are not read (Kueue's default limit is 1000).

use serde_json::{Value, json};
use std::sync::Arc;

use super::admission::{queue_blocker, queue_order};
use super::{CLUSTERQUEUES, LOCALQUEUES, WORKLOADS};
use crate::controllers::{all, cond_true, deleting};
use crate::error::{ApiError, ApiResult};
use crate::resources;
use crate::store::Store;
use crate::util::{name_of, ns_of, s};

pub const GROUP: &str = "visibility.kueue.x-k8s.io";

fn not_found(kind: &str, name: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("{kind}.{GROUP} \"{name}\" not found"),
    )
    .with_details(json!({"name": name, "group": GROUP, "kind": kind}))
}

/// The pending Workloads of ClusterQueue `cq`, in queue order.
fn pending_in(store: &Store, cq: &str) -> Vec<Arc<Value>> {
    let (ls, fs) = all();
    let (wls, _) = store.list(resources::register(&WORKLOADS), None, &ls, &fs);
    let mut out: Vec<Arc<Value>> = wls
        .into_iter()
        .filter(|w| !deleting(w) && !cond_true(w, "Finished") && !cond_true(w, "QuotaReserved"))
        .filter(|w| queue_blocker(store, w).is_ok_and(|c| c == cq))
        .collect();
    out.sort_by(|a, b| queue_order(a, b));
    out
}

fn item(w: &Value, pos_cq: usize, pos_lq: usize) -> Value {
    let owners: Vec<Value> = w
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| json!({"apiVersion": r["apiVersion"], "kind": r["kind"], "name": r["name"], "uid": r["uid"]}))
        .collect();
    let mut meta = json!({"name": name_of(w), "namespace": ns_of(w),
        "creationTimestamp": w.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null)});
    if !owners.is_empty() {
        meta["ownerReferences"] = json!(owners);
    }
    json!({"metadata": meta,
        "priority": w.pointer("/spec/priority").and_then(Value::as_i64).unwrap_or(0),
        "localQueueName": s(w, "/spec/queueName").unwrap_or_default(),
        "positionInClusterQueue": pos_cq, "positionInLocalQueue": pos_lq})
}

fn summary(items: Vec<Value>) -> Value {
    json!({"kind": "PendingWorkloadsSummary", "apiVersion": format!("{GROUP}/v1beta2"),
        "metadata": {"creationTimestamp": null}, "items": items})
}

pub fn get(store: &Store, path: &[&str]) -> Option<ApiResult<Value>> {
    match path {
        ["apis", GROUP, "v1beta2"] => Some(Ok(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/v1beta2"),
        "resources": [
            {"name": "clusterqueues", "singularName": "clusterqueue", "namespaced": false, "kind": "ClusterQueue", "verbs": ["get"]},
            {"name": "clusterqueues/pendingworkloads", "singularName": "", "namespaced": false, "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
            {"name": "localqueues", "singularName": "localqueue", "namespaced": true, "kind": "LocalQueue", "verbs": ["get"]},
            {"name": "localqueues/pendingworkloads", "singularName": "", "namespaced": true, "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
        ]}))),
        [
            "apis",
            GROUP,
            "v1beta2",
            "clusterqueues",
            cq,
            "pendingworkloads",
        ] => {
            if store
                .get(resources::register(&CLUSTERQUEUES), "", cq)
                .is_none()
            {
                return Some(Err(not_found("clusterqueue", cq)));
            }
            let pending = pending_in(store, cq);
            let items = pending
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let lq_pos = pending[..i]
                        .iter()
                        .filter(|o| {
                            ns_of(o) == ns_of(w)
                                && s(o, "/spec/queueName") == s(w, "/spec/queueName")
                        })
                        .count();
                    item(w, i, lq_pos)
                })
                .collect();
            Some(Ok(summary(items)))
        }
        [
            "apis",
            GROUP,
            "v1beta2",
            "namespaces",
            ns,
            "localqueues",
            lq,
            "pendingworkloads",
        ] => {
            let Some(q) = store.get(resources::register(&LOCALQUEUES), ns, lq) else {
                return Some(Err(not_found("localqueue", lq)));
            };
            let cq = s(&q, "/spec/clusterQueue").unwrap_or_default();
            let pending = pending_in(store, cq);
            let items = pending
                .iter()
                .enumerate()
                .filter(|(_, w)| ns_of(w) == *ns && s(w, "/spec/queueName") == Some(lq))
                .enumerate()
                .map(|(lq_pos, (cq_pos, w))| item(w, cq_pos, lq_pos))
                .collect();
            Some(Ok(summary(items)))
        }
        _ => None,
    }
}
