//! Kueue's queueing and admission for the fake's queues:
//! - the workload controller's queue blockers (`pkg/controller/core/workload_controller.go`:
//!   `getQueueBlocker`, `resolveLegacyUnadmittedQuotaReservedCondition`): `QuotaReserved`
//!   False, reason `Inadmissible`, `LocalQueue <lq> doesn't exist` (or `is inactive`, or the
//!   ClusterQueue's);
//! - the scheduler (`pkg/scheduler/scheduler.go`, `flavorassigner/flavorassigner.go`): each
//!   ClusterQueue's pending Workloads by priority, then creation, then uid
//!   (`pkg/cache/queue/cluster_queue.go`); usage = per pod (container requests, limits where
//!   a request is missing: `UseLimitsAsMissingRequestsInPod`) × count, accumulated over the
//!   pod sets in order; a resource no resource group covers blocks (`BlockUndeclared`);
//!   BestEffortFIFO lets a later Workload that fits pass one that does not, StrictFIFO stops at
//!   the first that does not fit;
//! - admitted: `QuotaReserved` and `Admitted` True with `status.admission` in one write, events
//!   `QuotaReserved` and `Admitted`; not fitting: `QuotaReserved` False, reason `Pending`, the
//!   assignment's message, `status.resourceRequests`, a Warning event `Pending`;
//! - LocalQueue and ClusterQueue status (counts, usage, `Active`).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::jobs::{event_once, stamp_generation};
use super::{
    CLUSTERQUEUES, COMPONENT, LOCALQUEUES, RESOURCEFLAVORS, WORKLOADS, fmt_amount, resource_list,
};
use crate::controllers::{all, cond_true, deleting, set_meta_condition};
use crate::resources::{self, NAMESPACES};
use crate::scheduler::{amount, pod_requests};
use crate::store::Store;
use crate::util::{fmt_time, name_of, ns_of, parse_time, s, uid_of};

/// Usage per (flavor, resource).
type Usage = BTreeMap<(String, String), i64>;

fn reserved(wl: &Value) -> bool {
    cond_true(wl, "QuotaReserved")
}

fn live(wl: &Value) -> bool {
    !deleting(wl) && !cond_true(wl, "Finished")
}

/// A Workload's pod sets with their total requests (per pod × count), in order.
pub fn podset_requests(wl: &Value) -> Vec<(String, i64, BTreeMap<String, i64>)> {
    wl.pointer("/spec/podSets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|ps| {
            let count = ps.get("count").and_then(Value::as_i64).unwrap_or(1);
            let per = pod_requests(&ps["template"]);
            let total = per.into_iter().map(|(k, v)| (k, v * count)).collect();
            (s(ps, "/name").unwrap_or_default().to_string(), count, total)
        })
        .collect()
}

/// Order in a ClusterQueue: higher priority, then older, then uid.
pub fn queue_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    let prio = |w: &Value| {
        w.pointer("/spec/priority")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let created = |w: &Value| {
        s(w, "/metadata/creationTimestamp")
            .and_then(parse_time)
            .unwrap_or(0)
    };
    prio(b)
        .cmp(&prio(a))
        .then(created(a).cmp(&created(b)))
        .then(uid_of(a).cmp(uid_of(b)))
}

/// Why a Workload cannot be queued at all (its LocalQueue or ClusterQueue), else its
/// ClusterQueue's name.
pub fn queue_blocker(store: &Store, wl: &Value) -> Result<String, String> {
    let lq_name = s(wl, "/spec/queueName").unwrap_or_default();
    let lq = store
        .get(resources::register(&LOCALQUEUES), ns_of(wl), lq_name)
        .ok_or_else(|| format!("LocalQueue {lq_name} doesn't exist"))?;
    if s(&lq, "/spec/stopPolicy").is_some_and(|p| p != "None") {
        return Err(format!("LocalQueue {lq_name} is inactive"));
    }
    let cq_name = s(&lq, "/spec/clusterQueue").unwrap_or_default().to_string();
    let cq = store
        .get(resources::register(&CLUSTERQUEUES), "", &cq_name)
        .ok_or_else(|| format!("ClusterQueue {cq_name} doesn't exist"))?;
    if !cq_active(store, &cq) {
        return Err(format!("ClusterQueue {cq_name} is inactive"));
    }
    Ok(cq_name)
}

/// Missing ResourceFlavors of a ClusterQueue.
fn missing_flavors(store: &Store, cq: &Value) -> Vec<String> {
    let rf = resources::register(&RESOURCEFLAVORS);
    let mut out: Vec<String> = groups(cq)
        .iter()
        .flat_map(|g| g.flavors.iter().map(|f| f.0.clone()))
        .filter(|f| store.get(rf, "", f).is_none())
        .collect();
    out.dedup();
    out
}

fn cq_active(store: &Store, cq: &Value) -> bool {
    s(cq, "/spec/stopPolicy").is_none_or(|p| p == "None") && missing_flavors(store, cq).is_empty()
}

/// A resource group: covered resources, and per flavor its nominal quotas.
struct Group {
    covered: Vec<String>,
    flavors: Vec<(String, BTreeMap<String, i64>)>,
}

fn groups(cq: &Value) -> Vec<Group> {
    cq.pointer("/spec/resourceGroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| Group {
            covered: g["coveredResources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            flavors: g["flavors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| {
                    let quotas = f["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            let n = s(r, "/name").unwrap_or_default().to_string();
                            let q = amount(&n, &r["nominalQuota"]);
                            (n, q)
                        })
                        .collect();
                    (s(f, "/name").unwrap_or_default().to_string(), quotas)
                })
                .collect(),
        })
        .collect()
}

/// One pod set's assignment: flavor per resource, usage, count.
struct PsAssignment {
    name: String,
    count: i64,
    flavors: BTreeMap<String, String>,
    usage: BTreeMap<String, i64>,
}

/// `assignFlavors`: the pod sets in order, each resource group's first flavor where every
/// requested resource of the group fits; the first pod set that does not fit ends it with
/// `couldn't assign flavors to pod set <ps>: <reasons sorted, joined by ", ">`.
fn assign(cq: &Value, used: &Usage, wl: &Value) -> Result<Vec<PsAssignment>, String> {
    let groups = groups(cq);
    let covers_pods = groups.iter().any(|g| g.covered.iter().any(|r| r == "pods"));
    let mut considered: Usage = BTreeMap::new();
    let mut out = Vec::new();
    for (name, count, mut req) in podset_requests(wl) {
        if covers_pods {
            req.insert("pods".into(), count);
        }
        let mut flavors = BTreeMap::new();
        for (res, _) in req.iter().filter(|(_, q)| **q > 0) {
            if flavors.contains_key(res) {
                continue;
            }
            let Some(g) = groups.iter().find(|g| g.covered.contains(res)) else {
                return Err(format!(
                    "couldn't assign flavors to pod set {name}: resource {res} unavailable in ClusterQueue"
                ));
            };
            let wanted: Vec<(&String, i64)> = req
                .iter()
                .filter(|(r, q)| g.covered.contains(r) && **q > 0)
                .map(|(r, q)| (r, *q))
                .collect();
            let mut reasons = Vec::new();
            let mut chosen = None;
            for (flavor, quotas) in &g.flavors {
                let mut fits = true;
                for (r, q) in &wanted {
                    let key = (flavor.clone(), (*r).clone());
                    let nominal = quotas.get(*r).copied().unwrap_or(0);
                    let assumed = considered.get(&key).copied().unwrap_or(0);
                    let available = nominal - used.get(&key).copied().unwrap_or(0);
                    let val = assumed + q;
                    if val > nominal {
                        reasons.push(format!(
                            "insufficient quota for {r} in flavor {flavor}, previously considered podsets requests ({}) + current podset request ({}) > maximum capacity ({})",
                            fmt_amount(r, assumed), fmt_amount(r, *q), fmt_amount(r, nominal)
                        ));
                        fits = false;
                    } else if val > available {
                        reasons.push(format!(
                            "insufficient unused quota for {r} in flavor {flavor}, {} more needed",
                            fmt_amount(r, val - available)
                        ));
                        fits = false;
                    }
                }
                if fits {
                    chosen = Some(flavor.clone());
                    break;
                }
            }
            let Some(flavor) = chosen else {
                reasons.sort();
                return Err(format!(
                    "couldn't assign flavors to pod set {name}: {}",
                    reasons.join(", ")
                ));
            };
            for (r, q) in wanted {
                flavors.insert(r.clone(), flavor.clone());
                *considered.entry((flavor.clone(), r.clone())).or_default() += q;
            }
        }
        req.retain(|_, q| *q > 0);
        out.push(PsAssignment {
            name,
            count,
            flavors,
            usage: req,
        });
    }
    Ok(out)
}

/// What admitted Workloads of `cq` use.
fn usage_of(wls: &[Arc<Value>], cq: &str) -> Usage {
    let mut u = Usage::new();
    for w in wls.iter().filter(|w| live(w) && reserved(w)) {
        if s(w, "/status/admission/clusterQueue") != Some(cq) {
            continue;
        }
        for a in w
            .pointer("/status/admission/podSetAssignments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for (r, f) in a["flavors"].as_object().into_iter().flatten() {
                let q = a["resourceUsage"].get(r).map_or(0, |q| amount(r, q));
                *u.entry((f.as_str().unwrap_or_default().to_string(), r.clone()))
                    .or_default() += q;
            }
        }
    }
    u
}

fn write_status(store: &Store, wl: &Value, f: impl FnOnce(&mut Value)) {
    let uid = uid_of(wl).to_string();
    let generation = wl
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    store.mutate(
        resources::register(&WORKLOADS),
        ns_of(wl),
        name_of(wl),
        |w| {
            if uid_of(w) != uid {
                return;
            }
            if !w["status"].is_object() {
                w["status"] = json!({});
            }
            f(&mut w["status"]);
            stamp_generation(&mut w["status"], generation);
        },
    );
}

fn set_unadmitted(store: &Store, wl: &Value, reason: &str, msg: &str, now: &str) {
    let current = wl
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| s(c, "/type") == Some("QuotaReserved")));
    let same = current.is_some_and(|c| {
        s(c, "/status") == Some("False")
            && s(c, "/reason") == Some(reason)
            && s(c, "/message") == Some(msg)
    });
    let requests: Vec<Value> = podset_requests(wl)
        .into_iter()
        .map(|(n, _, r)| json!({"name": n, "resources": resource_list(&r)}))
        .collect();
    if same {
        return;
    }
    write_status(store, wl, |st| {
        set_meta_condition(st, "QuotaReserved", "False", reason, msg, now);
        if let Some(m) = st.as_object_mut() {
            m.remove("admission");
        }
        if reason == "Pending" {
            st["resourceRequests"] = json!(requests);
        }
    });
}

fn ns_matches(store: &Store, cq: &Value, ns: &str) -> bool {
    let Some(sel) = cq.pointer("/spec/namespaceSelector") else {
        return false; // nil selects no namespace
    };
    let Some(nso) = store.get(NAMESPACES, "", ns) else {
        return false;
    };
    let labels = nso
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let ok_labels = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let ok_expr = sel["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = s(e, "/key").unwrap_or_default();
            let vals: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let have = labels.get(key).and_then(Value::as_str);
            match s(e, "/operator") {
                Some("In") => have.is_some_and(|h| vals.contains(&h)),
                Some("NotIn") => have.is_none_or(|h| !vals.contains(&h)),
                Some("Exists") => have.is_some(),
                Some("DoesNotExist") => have.is_none(),
                _ => false,
            }
        });
    ok_labels && ok_expr
}

/// One scheduling pass over every ClusterQueue.
pub fn schedule(store: &Store, now: i64) {
    let wl_id = resources::register(&WORKLOADS);
    let (ls, fs) = all();
    let (wls, _) = store.list(wl_id, None, &ls, &fs);
    if wls.is_empty() {
        return;
    }
    let now_s = fmt_time(now);
    let mut queued: BTreeMap<String, Vec<Arc<Value>>> = BTreeMap::new();
    for w in wls.iter().filter(|w| live(w) && !reserved(w)) {
        if w.pointer("/spec/active").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        match queue_blocker(store, w) {
            Err(msg) => set_unadmitted(store, w, "Inadmissible", &msg, &now_s),
            Ok(cq) => queued.entry(cq).or_default().push(w.clone()),
        }
    }
    let cq_id = resources::register(&CLUSTERQUEUES);
    for (cq_name, mut pending) in queued {
        let Some(cq) = store.get(cq_id, "", &cq_name) else {
            continue;
        };
        pending.sort_by(|a, b| queue_order(a, b));
        let strict = s(&cq, "/spec/queueingStrategy") == Some("StrictFIFO");
        let mut used = usage_of(&wls, &cq_name);
        for w in pending {
            if !ns_matches(store, &cq, ns_of(&w)) {
                let msg = "workload namespace doesn't match ClusterQueue selector";
                set_unadmitted(store, &w, "Pending", msg, &now_s);
                event_once(store, &w, "Warning", "Pending", msg, COMPONENT);
                continue;
            }
            match assign(&cq, &used, &w) {
                Ok(sets) => {
                    for a in &sets {
                        for (r, f) in &a.flavors {
                            *used.entry((f.clone(), r.clone())).or_default() +=
                                a.usage.get(r).copied().unwrap_or(0);
                        }
                    }
                    admit(store, &w, &cq_name, &sets, now);
                }
                Err(msg) => {
                    set_unadmitted(store, &w, "Pending", &msg, &now_s);
                    event_once(store, &w, "Warning", "Pending", &msg, COMPONENT);
                    if strict {
                        break;
                    }
                }
            }
        }
    }
}

fn admit(store: &Store, wl: &Value, cq: &str, sets: &[PsAssignment], now: i64) {
    let now_s = fmt_time(now);
    let assignments: Vec<Value> = sets
        .iter()
        .map(|a| {
            json!({"name": a.name, "flavors": a.flavors, "resourceUsage": resource_list(&a.usage), "count": a.count})
        })
        .collect();
    write_status(store, wl, |st| {
        st["admission"] = json!({"clusterQueue": cq, "podSetAssignments": assignments});
        set_meta_condition(
            st,
            "QuotaReserved",
            "True",
            "QuotaReserved",
            &format!("Quota reserved in ClusterQueue {cq}"),
            &now_s,
        );
        set_meta_condition(
            st,
            "Admitted",
            "True",
            "Admitted",
            "The workload is admitted",
            &now_s,
        );
        for c in st["conditions"].as_array_mut().into_iter().flatten() {
            let t = s(c, "/type").unwrap_or_default().to_string();
            if matches!(t.as_str(), "Evicted" | "Preempted") && s(c, "/status") == Some("True") {
                let m = s(c, "/message").unwrap_or_default().to_string();
                c["status"] = json!("False");
                c["message"] = json!(format!("Previously: {m}"));
                c["lastTransitionTime"] = json!(now_s);
            }
        }
    });
    let waited = s(wl, "/metadata/creationTimestamp")
        .and_then(parse_time)
        .map_or(0.0, |t| (now - t).max(0) as f64 / 1e9);
    store.record_event(
        wl,
        "Normal",
        "QuotaReserved",
        &format!("Quota reserved in ClusterQueue {cq}, wait time since queued was {waited:.0}s"),
        COMPONENT,
    );
    store.record_event(
        wl,
        "Normal",
        "Admitted",
        &format!("Admitted by ClusterQueue {cq}, wait time since reservation was 0s"),
        COMPONENT,
    );
}

/// Status of LocalQueues and ClusterQueues: pending, reserving and admitted counts, usage,
/// and the `Active` condition (`localqueue_controller.go`, `clusterqueue.go:inactiveReason`).
pub fn queue_status(store: &Store, now: i64) {
    let (ls, fs) = all();
    let (wls, _) = store.list(resources::register(&WORKLOADS), None, &ls, &fs);
    let lq_id = resources::register(&LOCALQUEUES);
    let cq_id = resources::register(&CLUSTERQUEUES);
    let (lqs, _) = store.list(lq_id, None, &ls, &fs);
    let (cqs, _) = store.list(cq_id, None, &ls, &fs);
    let now_s = fmt_time(now);
    let counts = |ws: &mut dyn Iterator<Item = &Arc<Value>>| {
        let (mut p, mut r, mut a) = (0, 0, 0);
        for w in ws.filter(|w| live(w)) {
            if reserved(w) {
                r += 1;
                if cond_true(w, "Admitted") {
                    a += 1;
                }
            } else {
                p += 1;
            }
        }
        (p, r, a)
    };
    let flavor_usage = |u: &Usage, cq: Option<&Value>| -> Value {
        let mut by: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        if let Some(cq) = cq {
            for g in groups(cq) {
                for (f, _) in &g.flavors {
                    for r in &g.covered {
                        let q = u.get(&(f.clone(), r.clone())).copied().unwrap_or(0);
                        by.entry(f.clone())
                            .or_default()
                            .push(json!({"name": r, "total": fmt_amount(r, q), "borrowed": "0"}));
                    }
                }
            }
        }
        json!(
            by.into_iter()
                .map(|(f, rs)| json!({"name": f, "resources": rs}))
                .collect::<Vec<_>>()
        )
    };
    for cq in &cqs {
        let name = name_of(cq);
        let mine = |w: &&Arc<Value>| match queue_blocker(store, w) {
            Ok(c) => c == name,
            Err(_) => s(w, "/status/admission/clusterQueue") == Some(name),
        };
        let (p, r, a) = counts(&mut wls.iter().filter(mine));
        let u = usage_of(&wls, name);
        let mut st = cq
            .get("status")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        st["pendingWorkloads"] = json!(p);
        st["reservingWorkloads"] = json!(r);
        st["admittedWorkloads"] = json!(a);
        st["flavorsReservation"] = flavor_usage(&u, Some(cq));
        st["flavorsUsage"] = flavor_usage(&u, Some(cq));
        let missing = missing_flavors(store, cq);
        if s(cq, "/spec/stopPolicy").is_some_and(|p| p != "None") {
            set_meta_condition(
                &mut st,
                "Active",
                "False",
                "Stopped",
                "Can't admit new workloads: is stopped.",
                &now_s,
            );
        } else if !missing.is_empty() {
            let msg = format!(
                "Can't admit new workloads: references missing ResourceFlavor(s): {}.",
                missing.join(",")
            );
            set_meta_condition(&mut st, "Active", "False", "FlavorNotFound", &msg, &now_s);
        } else {
            set_meta_condition(
                &mut st,
                "Active",
                "True",
                "Ready",
                "Can admit new workloads",
                &now_s,
            );
        }
        if cq.get("status") != Some(&st) {
            store.mutate(cq_id, "", name, |o| o["status"] = st.clone());
        }
    }
    for lq in &lqs {
        let (ns, name) = (ns_of(lq), name_of(lq));
        let (p, r, a) = counts(
            &mut wls
                .iter()
                .filter(|w| ns_of(w) == ns && s(w, "/spec/queueName") == Some(name)),
        );
        let cq_name = s(lq, "/spec/clusterQueue").unwrap_or_default();
        let cq = store.get(cq_id, "", cq_name);
        let mut u = Usage::new();
        for w in wls
            .iter()
            .filter(|w| ns_of(w) == ns && s(w, "/spec/queueName") == Some(name))
        {
            let one = [w.clone()];
            for (k, v) in usage_of(&one, cq_name) {
                *u.entry(k).or_default() += v;
            }
        }
        let mut st = lq
            .get("status")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        st["pendingWorkloads"] = json!(p);
        st["reservingWorkloads"] = json!(r);
        st["admittedWorkloads"] = json!(a);
        let fu = flavor_usage(&u, cq.as_deref());
        let strip = |v: &Value| -> Value {
            json!(v.as_array().into_iter().flatten().map(|f| json!({"name": f["name"], "resources":
                f["resources"].as_array().into_iter().flatten().map(|r| json!({"name": r["name"], "total": r["total"]})).collect::<Vec<_>>()})).collect::<Vec<_>>())
        };
        st["flavorsReservation"] = strip(&fu);
        st["flavorsUsage"] = strip(&fu);
        match &cq {
            _ if s(lq, "/spec/stopPolicy").is_some_and(|p| p != "None") => set_meta_condition(
                &mut st,
                "Active",
                "False",
                "Stopped",
                "LocalQueue is stopped",
                &now_s,
            ),
            None => set_meta_condition(
                &mut st,
                "Active",
                "False",
                "ClusterQueueDoesNotExist",
                "Can't submit new workloads to clusterQueue",
                &now_s,
            ),
            Some(c) if !cq_active(store, c) => set_meta_condition(
                &mut st,
                "Active",
                "False",
                "ClusterQueueIsInactive",
                "Can't submit new workloads to clusterQueue",
                &now_s,
            ),
            Some(_) => set_meta_condition(
                &mut st,
                "Active",
                "True",
                "Ready",
                "Can submit new workloads to localQueue",
                &now_s,
            ),
        }
        if lq.get("status") != Some(&st) {
            store.mutate(lq_id, ns, name, |o| o["status"] = st.clone());
        }
    }
}
