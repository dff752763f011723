//! Kueue's pod integration (`pkg/controller/jobs/pod/pod_controller.go`): a pod group
//! (`kueue.x-k8s.io/pod-group-name` and `pod-group-total-count`) becomes one Workload named
//! after the group once that many pods exist (`ConstructComposableWorkload`,
//! `constructGroupPodSets`: one pod set per role hash, every pod an owner); a single pod,
//! `pod-<name>-<hash5>`. On admission its pods' scheduling gates are removed and the pod-set
//! information merged (`Pod.Run`); the group is finished when every pod succeeded, or when none
//! is active and one says `retriable-in-group: "false"` (`Pod.Finished`), and its pods lose
//! Kueue's finalizer then (`Finalize`).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::jobs::{
    COMPONENT, controller_uid, event_once, finish, merge_into, new_workload, podset, podset_infos,
    terminal, workload_name,
};
use super::{
    ADMISSION_GATE, GROUP_NAME, GROUP_TOTAL, IS_GROUP, JOB_UID_LABEL, MANAGED_LABEL, POD_FINALIZER,
    RETRIABLE, ROLE_HASH, TOPOLOGY_GATE, queue_name,
};
use crate::controllers::{all, cond_true, deleting};
use crate::resources::{PODS, ResId};
use crate::store::{Store, WriteOpts};
use crate::util::{name_of, ns_of, s, uid_of};

/// The group a pod belongs to (annotation first: `WorkloadIdentifierAnnotations` is on).
pub fn group_of(p: &Value) -> Option<&str> {
    p.pointer("/metadata/annotations")
        .and_then(|a| a.get(GROUP_NAME))
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
        .or_else(|| {
            p.pointer("/metadata/labels")
                .and_then(|a| a.get(GROUP_NAME))
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
        })
}

pub(super) fn managed_pod(p: &Value) -> bool {
    s(
        p,
        &format!("/metadata/labels/{}", MANAGED_LABEL.replace('/', "~1")),
    ) == Some("true")
}

/// Pod groups and single pods.
pub(super) fn sync(store: &Store, wl_id: ResId, wls: &[Arc<Value>]) {
    let (ls, fs) = all();
    let (pods, _) = store.list(PODS, None, &ls, &fs);
    let managed: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| managed_pod(p) && queue_name(p).is_some())
        .collect();
    // A deleted pod keeps Kueue's finalizer while its Workload is live (it counts as
    // terminated there, and is let go when the Workload finishes); without one, at once.
    for p in managed.iter().filter(|p| deleting(p)) {
        let held = wls.iter().any(|w| {
            !deleting(w)
                && !cond_true(w, "Finished")
                && ns_of(w) == ns_of(p)
                && match group_of(p) {
                    Some(g) => name_of(w) == g,
                    None => w
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|r| r.iter().any(|r| s(r, "/uid") == Some(uid_of(p)))),
                }
        });
        if !held {
            store.drop_finalizer(PODS, ns_of(p), name_of(p), POD_FINALIZER);
        }
    }
    let mut groups: BTreeMap<(String, String), Vec<&Arc<Value>>> = BTreeMap::new();
    for p in managed.iter().filter(|p| !deleting(p)) {
        match group_of(p) {
            Some(g) => groups
                .entry((ns_of(p).to_string(), g.to_string()))
                .or_default()
                .push(p),
            None => {
                let exists = wls.iter().any(|w| {
                    w.pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|r| r.iter().any(|r| s(r, "/uid") == Some(uid_of(p))))
                });
                if exists || terminal(p) {
                    continue;
                }
                let name = workload_name("Pod", "", name_of(p), uid_of(p));
                let set = podset("main", 1, &pod_template(p));
                let owner = json!({"apiVersion": "v1", "kind": "Pod", "name": name_of(p), "uid": uid_of(p),
                    "controller": true, "blockOwnerDeletion": true});
                let wl = new_workload(
                    &name,
                    ns_of(p),
                    queue_name(p).unwrap_or_default(),
                    vec![set],
                    vec![owner],
                    json!({JOB_UID_LABEL: uid_of(p)}),
                    json!({}),
                );
                let _ = store.create(wl_id, ns_of(p), wl, &WriteOpts::default());
            }
        }
    }
    for ((ns, group), members) in groups {
        if wls.iter().any(|w| ns_of(w) == ns && name_of(w) == group) {
            continue;
        }
        let total: i64 = members
            .iter()
            .find_map(|p| {
                p.pointer("/metadata/annotations")
                    .and_then(|a| a.get(GROUP_TOTAL))
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse().ok())
            })
            .unwrap_or(0);
        let runnable: Vec<&&Arc<Value>> = members
            .iter()
            .filter(|p| s(p, "/status/phase") != Some("Failed"))
            .collect();
        if (runnable.len() as i64) < total || total <= 0 {
            for p in &runnable {
                event_once(
                    store,
                    p,
                    "Warning",
                    "ErrWorkloadCompose",
                    &format!("'{group}' group has fewer runnable pods than expected"),
                    "pod-kueue-controller",
                );
            }
            continue;
        }
        // One pod set per role hash, sorted by name (`constructGroupPodSets`).
        let mut by_hash: BTreeMap<String, (i64, Value)> = BTreeMap::new();
        for p in &runnable {
            let h = p
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(ROLE_HASH))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_lowercase();
            by_hash.entry(h).or_insert_with(|| (0, pod_template(p))).0 += 1;
        }
        let sets = by_hash.iter().map(|(h, (n, t))| podset(h, *n, t)).collect();
        let owners = runnable
            .iter()
            .map(|p| json!({"apiVersion": "v1", "kind": "Pod", "name": name_of(p), "uid": uid_of(p)}))
            .collect();
        let queue = queue_name(runnable[0]).unwrap_or_default();
        let wl = new_workload(
            &group,
            &ns,
            queue,
            sets,
            owners,
            json!({}),
            json!({IS_GROUP: "true"}),
        );
        let _ = store.create(wl_id, &ns, wl, &WriteOpts::default());
    }
}

/// A pod's template for its pod set: its labels, annotations and spec, without what the
/// kubelet or the scheduler set.
pub(super) fn pod_template(p: &Value) -> Value {
    let mut spec = p["spec"].clone();
    if let Some(m) = spec.as_object_mut() {
        for k in ["nodeName", "schedulingGates"] {
            m.remove(k);
        }
    }
    let mut meta = json!({});
    for k in ["labels", "annotations"] {
        if let Some(v) = p["metadata"].get(k) {
            meta[k] = v.clone();
        }
    }
    json!({"metadata": meta, "spec": spec})
}

pub(super) fn wl_owner_is_pod(wl: &Value) -> bool {
    wl.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty() && r.iter().all(|r| s(r, "/kind") == Some("Pod")))
}

pub(super) fn member_pods(store: &Store, wl: &Value) -> Vec<Arc<Value>> {
    let (ls, fs) = all();
    let (pods, _) = store.list(PODS, Some(ns_of(wl)), &ls, &fs);
    let group = s(
        wl,
        &format!("/metadata/annotations/{}", IS_GROUP.replace('/', "~1")),
    ) == Some("true");
    pods.into_iter()
        .filter(|p| {
            if group {
                managed_pod(p) && group_of(p) == Some(name_of(wl))
            } else {
                controller_uid(wl) == Some(uid_of(p))
            }
        })
        .collect()
}

/// Pods of a finished Workload lose Kueue's finalizer (`Finalize`).
pub(super) fn release_group_pods(store: &Store, wl: &Value) {
    if !wl_owner_is_pod(wl) {
        return;
    }
    for p in member_pods(store, wl) {
        store.drop_finalizer(PODS, ns_of(&p), name_of(&p), POD_FINALIZER);
    }
}

/// A pod group's (or single pod's) Workload: admitted → gates removed and pod-set
/// information merged (`Pod.Run`); all done → Finished (`Pod.Finished`).
pub(super) fn pod_workload(store: &Store, wl: &Value, admitted: bool, cq: &str, now: &str) {
    let pods = member_pods(store, wl);
    let group = s(
        wl,
        &format!("/metadata/annotations/{}", IS_GROUP.replace('/', "~1")),
    ) == Some("true");
    if group {
        let total: i64 = pods
            .iter()
            .find_map(|p| {
                p.pointer("/metadata/annotations")
                    .and_then(|a| a.get(GROUP_TOTAL))
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse().ok())
            })
            .unwrap_or(0);
        let succeeded = pods
            .iter()
            .filter(|p| s(p, "/status/phase") == Some("Succeeded"))
            .count() as i64;
        // A pod being deleted is as good as terminated (its containers are stopped).
        let active = pods.iter().any(|p| !terminal(p) && !deleting(p));
        let unretriable = pods.iter().any(|p| {
            p.pointer("/metadata/annotations")
                .and_then(|a| a.get(RETRIABLE))
                .and_then(Value::as_str)
                == Some("false")
        });
        if total > 0 && (succeeded == total || (!active && unretriable && !pods.is_empty())) {
            finish(
                store,
                wl,
                true,
                &format!("Pods succeeded: {succeeded}/{total}."),
                now,
            );
            return;
        }
    } else if let Some(p) = pods.first().filter(|p| terminal(p) || deleting(p)) {
        let ok = s(p, "/status/phase") == Some("Succeeded");
        finish(
            store,
            wl,
            ok,
            s(p, "/status/message").unwrap_or_default(),
            now,
        );
        return;
    }
    if !admitted {
        return;
    }
    let infos = podset_infos(store, wl);
    for p in pods {
        let gated = p
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| g.iter().any(|g| s(g, "/name") == Some(ADMISSION_GATE)));
        if !gated || deleting(&p) {
            continue;
        }
        let set = if group {
            p.pointer("/metadata/annotations")
                .and_then(|a| a.get(ROLE_HASH))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_lowercase()
        } else {
            "main".to_string()
        };
        let info = infos.iter().find(|i| i.name == set);
        let uid = uid_of(&p).to_string();
        store.mutate(PODS, ns_of(&p), name_of(&p), |o| {
            if uid_of(o) != uid {
                return;
            }
            if let Some(info) = info {
                let mut t = json!({"metadata": o["metadata"].clone(), "spec": o["spec"].clone()});
                merge_into(&mut t, info);
                o["metadata"] = t["metadata"].take();
                o["spec"] = t["spec"].take();
            }
            if let Some(g) = o["spec"]["schedulingGates"].as_array_mut() {
                g.retain(|g| !matches!(s(g, "/name"), Some(ADMISSION_GATE | TOPOLOGY_GATE)));
                if g.is_empty() {
                    o["spec"]
                        .as_object_mut()
                        .expect("object")
                        .remove("schedulingGates");
                }
            }
        });
        store.record_event(
            &p,
            "Normal",
            "Started",
            &format!("Admitted by clusterQueue {cq}"),
            COMPONENT,
        );
    }
}
