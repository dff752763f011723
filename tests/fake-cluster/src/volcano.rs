//! Volcano (`--volcano`): PodGroups and Queues (`scheduling.volcano.sh/v1beta1`) served, the
//! Queue `default` made at start, and Volcano's gang scheduling of the pods that name
//! `schedulerName: volcano` (no other scheduler or kubelet binds those).
//!
//! Read from volcano-sh/volcano v1.15.1: a pod joins PodGroup `<g>` with the annotation
//! `scheduling.k8s.io/group-name: <g>` (`KubeGroupNameAnnotationKey`); a group is placed only
//! whole: once `minMember` of its pods can all be bound at once (the gang plugin's
//! `JobReady`), against the fake's Node objects (`Options::nodes`: capacity minus what bound
//! pods request, the default scheduler's filters); with no Node objects every group fits.
//! Phases as `pkg/scheduler/framework/session.go:getPodGroupPhase`: `Pending`, `Inqueue` when
//! placed (the enqueue and allocate actions), `Running` once `minMember` pods are bound,
//! `Completed` when every bound pod has finished. A group that cannot be placed (too few pods,
//! or not enough room) stays Pending with condition `Unschedulable` True, reason
//! `NotEnoughResources`, message as the gang plugin's `OnSessionClose` and
//! `pkg/scheduler/api/job_info.go:FitError` write it (`3/3 tasks in gang unschedulable: pod
//! group is not ready, 3 Pending, 3 minAvailable; Pending: 3 Unschedulable`), a Warning event
//! `Unschedulable` on the PodGroup, and `PodScheduled` False `Unschedulable` on its pods.
//! A test makes a group not fit by starting the cluster with nodes smaller than the group
//! (`Options::nodes`, `--nodes 1 --node-cpu 2`) or giving it fewer pods than `minMember`.
//!
//! Not modelled: queue capacity, weights, reclaim and preemption; `minResources` and
//! `minTaskMember` checks; PodGroups for pods that name none (Volcano's PodGroup controller
//! would make `podgroup-<uid>`: here such a pod stays Pending); network topology.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::controllers::{Controllers, Operator, all, deleting};
use crate::error::ApiResult;
use crate::kueue::jobs::event_once;
use crate::resources::{self, NODES, PODS, ResId, ResourceDef, res};
use crate::scheduler::{misfit, node_usage, pod_requests, scheduling_gated};
use crate::store::{Store, WriteOpts};
use crate::util::{fmt_time, name_of, ns_of, s, uid_of};

pub const GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
pub const QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
pub const SCHEDULER: &str = "volcano";

pub static PODGROUPS: ResourceDef = ResourceDef {
    group: "scheduling.volcano.sh",
    version: "v1beta1",
    kind: "PodGroup",
    plural: "podgroups",
    singular: "podgroup",
    namespaced: true,
    short_names: &["pg", "podgroup-v1beta1"],
    status_sub: true,
    custom: true,
    categories: &[],
    validate: None,
};

pub static QUEUES: ResourceDef = ResourceDef {
    group: "scheduling.volcano.sh",
    version: "v1beta1",
    kind: "Queue",
    plural: "queues",
    singular: "queue",
    namespaced: false,
    short_names: &["q", "queue-v1beta1"],
    status_sub: true,
    custom: true,
    categories: &[],
    validate: None,
};

/// Whether a cluster serves PodGroups (runs Volcano).
pub fn served(store: &Store) -> bool {
    store.serves(resources::register(&PODGROUPS))
}

/// Volcano's scheduler (and its Queue `default`).
#[derive(Debug)]
pub struct Volcano;

impl Operator for Volcano {
    fn name(&self) -> &'static str {
        "volcano"
    }

    fn resources(&self) -> Vec<&'static ResourceDef> {
        vec![&PODGROUPS, &QUEUES]
    }

    fn start(&self, store: &Store) {
        let q = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": "default"},
            "spec": {"weight": 1, "reclaimable": true},
            "status": {"state": "Open"}});
        let id = resources::register(&QUEUES);
        if store.create(id, "", q, &WriteOpts::default()).is_ok() {
            store.mutate(id, "", "default", |o| {
                o["status"] = json!({"state": "Open"})
            });
        }
    }

    /// The CRD's default: `spec.queue` is `default`.
    fn admit(&self, _store: &Store, res_id: ResId, _ns: &str, obj: &mut Value) -> ApiResult<()> {
        if std::ptr::eq(res(res_id), &PODGROUPS) && s(obj, "/spec/queue").is_none_or(str::is_empty)
        {
            obj["spec"]["queue"] = json!("default");
        }
        Ok(())
    }

    fn reconcile(&self, ctl: &Controllers, now: i64) {
        session(&ctl.store, now);
    }
}

fn terminal(p: &Value) -> bool {
    matches!(s(p, "/status/phase"), Some("Succeeded" | "Failed"))
}

fn bound(p: &Value) -> bool {
    s(p, "/spec/nodeName").is_some_and(|n| !n.is_empty())
}

/// The `FitError` message of a group whose `pending` of `tasks` pods wait.
pub fn unschedulable_message(min: i64, ready: i64, tasks: &[&Arc<Value>]) -> String {
    let mut hist: BTreeMap<String, i64> = BTreeMap::new();
    for p in tasks {
        let st = if bound(p) {
            match s(p, "/status/phase") {
                Some("Running") => "Running",
                Some("Succeeded") => "Succeeded",
                Some("Failed") => "Failed",
                _ => "Bound",
            }
        } else {
            "Pending"
        };
        *hist.entry(st.to_string()).or_default() += 1;
    }
    let pending = hist.get("Pending").copied().unwrap_or(0);
    hist.insert("minAvailable".into(), min);
    let mut parts: Vec<String> = hist.iter().map(|(k, v)| format!("{v} {k}")).collect();
    parts.sort();
    let mut msg = format!(
        "{}/{} tasks in gang unschedulable: pod group is not ready, {}",
        min - ready,
        tasks.len(),
        parts.join(", ")
    );
    if pending > 0 {
        msg.push_str(&format!("; Pending: {pending} Unschedulable"));
    }
    msg
}

/// One scheduling session over every PodGroup.
fn session(store: &Store, now: i64) {
    let pg_id = resources::register(&PODGROUPS);
    let (ls, fs) = all();
    let (groups, _) = store.list(pg_id, None, &ls, &fs);
    if groups.is_empty() {
        return;
    }
    let (pods, _) = store.list(PODS, None, &ls, &fs);
    let (nodes, _) = store.list(NODES, None, &ls, &fs);
    let mut used = node_usage(&nodes, &pods);
    let now_s = fmt_time(now);
    let queues = resources::register(&QUEUES);
    for pg in groups.iter().filter(|g| !deleting(g)) {
        let (ns, name) = (ns_of(pg), name_of(pg));
        let tasks: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| {
                ns_of(p) == ns
                    && !deleting(p)
                    && s(p, "/spec/schedulerName") == Some(SCHEDULER)
                    && p.pointer("/metadata/annotations")
                        .and_then(|a| a.get(GROUP_ANNOTATION))
                        .and_then(Value::as_str)
                        == Some(name)
            })
            .collect();
        let min = pg
            .pointer("/spec/minMember")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let queue_ok = store
            .get(queues, "", s(pg, "/spec/queue").unwrap_or("default"))
            .is_some();
        let ready = tasks.iter().filter(|p| bound(p)).count() as i64;
        let mut status = pg
            .get("status")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"phase": "Pending"}));
        let mut phase = s(&status, "/phase").unwrap_or("Pending").to_string();
        let waiting: Vec<&&Arc<Value>> = tasks
            .iter()
            .filter(|p| !bound(p) && !terminal(p) && !scheduling_gated(p))
            .collect();
        let mut newly_bound = 0;
        if queue_ok && !waiting.is_empty() {
            // Gang: place every waiting pod, or (below minMember) none.
            let mut trial = used.clone();
            let mut plan = Vec::new();
            for p in &waiting {
                let req = pod_requests(p);
                let spot = if nodes.is_empty() {
                    Some(usize::MAX)
                } else {
                    (0..nodes.len()).find(|&i| misfit(p, &req, &nodes[i], &trial[i]).0.is_empty())
                };
                let Some(i) = spot else {
                    break;
                };
                if i != usize::MAX {
                    for (k, v) in &req {
                        *trial[i].entry(k.clone()).or_default() += v;
                    }
                    *trial[i].entry("pods".into()).or_default() += 1;
                }
                plan.push((p, i));
            }
            let placed = plan.len() == waiting.len();
            if placed && ready + plan.len() as i64 >= min {
                used = trial;
                for (p, i) in plan {
                    let node = if i == usize::MAX {
                        "fake-node-0".to_string()
                    } else {
                        name_of(&nodes[i]).to_string()
                    };
                    bind(store, p, &node, &now_s);
                    newly_bound += 1;
                }
                if phase == "Pending" {
                    phase = "Inqueue".into();
                }
            }
        }
        let scheduled = ready + newly_bound;
        let count = |ph: &str| {
            tasks
                .iter()
                .filter(|p| s(p, "/status/phase") == Some(ph))
                .count()
        };
        if scheduled >= min && scheduled > 0 && ready >= min {
            let done = tasks.iter().filter(|p| bound(p)).all(|p| terminal(p));
            phase = if done { "Completed" } else { "Running" }.into();
        }
        if scheduled < min && !tasks.is_empty() && queue_ok {
            let msg = unschedulable_message(min, scheduled, &tasks);
            set_pg_condition(
                &mut status,
                "Unschedulable",
                "NotEnoughResources",
                &msg,
                &now_s,
            );
            event_once(store, pg, "Warning", "Unschedulable", &msg, SCHEDULER);
            for p in &waiting {
                mark_unschedulable(store, p, &msg, &now_s);
            }
        } else if scheduled >= min && min > 0 {
            if let Some(c) = status["conditions"].as_array_mut() {
                c.retain(|c| s(c, "/type") != Some("Unschedulable"));
            }
            set_pg_condition(
                &mut status,
                "Scheduled",
                "tasks in gang are ready to be scheduled",
                "",
                &now_s,
            );
        }
        status["phase"] = json!(phase);
        status["running"] = json!(count("Running"));
        status["succeeded"] = json!(count("Succeeded"));
        status["failed"] = json!(count("Failed"));
        for k in ["running", "succeeded", "failed"] {
            if status[k] == json!(0) {
                status.as_object_mut().expect("object").remove(k);
            }
        }
        if pg.get("status") != Some(&status) {
            let uid = uid_of(pg).to_string();
            store.mutate(pg_id, ns, name, |o| {
                if uid_of(o) == uid {
                    o["status"] = status.clone();
                }
            });
        }
    }
}

/// A PodGroup condition (`type`, `status`, `transitionID`, `lastTransitionTime`, `reason`,
/// `message`), replaced when the message changes.
fn set_pg_condition(status: &mut Value, ctype: &str, reason: &str, msg: &str, now: &str) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let conds = status["conditions"].as_array_mut().expect("array");
    if conds.iter().any(|c| {
        s(c, "/type") == Some(ctype)
            && s(c, "/reason") == Some(reason)
            && s(c, "/message") == Some(msg)
    }) {
        return;
    }
    conds.retain(|c| s(c, "/type") != Some(ctype));
    conds.push(
        json!({"type": ctype, "status": "True", "transitionID": crate::util::new_uid(),
        "lastTransitionTime": now, "reason": reason, "message": msg}),
    );
}

fn bind(store: &Store, pod: &Value, node: &str, now: &str) {
    let uid = uid_of(pod).to_string();
    let bound = store.mutate(PODS, ns_of(pod), name_of(pod), |p| {
        if uid_of(p) != uid {
            return;
        }
        p["spec"]["nodeName"] = json!(node);
        if !p["status"]["conditions"].is_array() {
            p["status"]["conditions"] = json!([]);
        }
        let c = p["status"]["conditions"].as_array_mut().expect("array");
        c.retain(|c| s(c, "/type") != Some("PodScheduled"));
        c.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
    });
    if bound.is_some() {
        store.record_event(
            pod,
            "Normal",
            "Scheduled",
            &format!(
                "Successfully assigned {}/{} to {node}",
                ns_of(pod),
                name_of(pod)
            ),
            SCHEDULER,
        );
    }
}

fn mark_unschedulable(store: &Store, pod: &Value, msg: &str, now: &str) {
    let current = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| s(c, "/type") == Some("PodScheduled")))
        .and_then(|c| s(c, "/message"));
    if current == Some(msg) {
        return;
    }
    let uid = uid_of(pod).to_string();
    store.mutate(PODS, ns_of(pod), name_of(pod), |p| {
        if uid_of(p) != uid {
            return;
        }
        if !p["status"]["conditions"].is_array() {
            p["status"]["conditions"] = json!([]);
        }
        let c = p["status"]["conditions"].as_array_mut().expect("array");
        c.retain(|c| s(c, "/type") != Some("PodScheduled"));
        c.push(
            json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": msg, "lastProbeTime": null, "lastTransitionTime": now}),
        );
    });
    store.record_event(pod, "Warning", "FailedScheduling", msg, SCHEDULER);
}

/// The PodGroup an operator makes for a job (`owner`), made or brought up to date with
/// `spec` (the MPI Operator's `getOrCreatePodGroups`, the Trainer's volcano plugin).
pub fn ensure_pod_group(ctl: &Controllers, owner: &Value, name: &str, spec: Value) {
    let id = resources::register(&PODGROUPS);
    let ns = ns_of(owner);
    match ctl.store.get(id, ns, name) {
        None => {
            let pg = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": ns, "ownerReferences": [crate::controllers::owner_ref(owner)]},
                "spec": spec});
            ctl.create(id, ns, pg, owner, "podgroup");
        }
        Some(pg) => {
            let mut want = spec;
            if s(&want, "/queue").is_none_or(str::is_empty) {
                want["queue"] = json!("default");
            }
            if pg.get("spec") != Some(&want) {
                ctl.store.mutate(id, ns, name, |o| o["spec"] = want.clone());
            }
        }
    }
}

/// Σ requests (limits where missing) × count of `(template, count)`, as a ResourceList.
pub fn min_resources(sets: &[(&Value, i64)]) -> Option<Value> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for (t, n) in sets {
        for (k, v) in pod_requests(t) {
            *total.entry(k).or_default() += v * n;
        }
    }
    (!total.is_empty()).then(|| {
        Value::Object(
            total
                .iter()
                .map(|(k, v)| (k.clone(), json!(crate::scheduler::fmt_amount(k, *v))))
                .collect(),
        )
    })
}
