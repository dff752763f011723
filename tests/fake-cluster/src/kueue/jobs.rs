//! Kueue's job integrations (`pkg/controller/jobframework/reconciler.go:ReconcileGenericJob`
//! and each integration's `PodSets`, `RunWithPodSetsInfo`, `Stop`, `Finished`):
//! - a Workload per job naming a queue (`handleJobWithNoWorkload` → `ConstructWorkload`):
//!   `<kind>-<job>-<hash5>` (`workload_names.go`), controller-owned by the job, labelled
//!   `kueue.x-k8s.io/job-uid`, finalizer `kueue.x-k8s.io/resource-in-use`, event
//!   `CreatedWorkload` on the job;
//! - MPIJob (`mpijob/mpijob_controller.go`): pod sets `launcher`, `worker`; TrainJob
//!   (`trainjob/trainjob_controller.go`): one per replicated job of the JobSet the Trainer
//!   would build, counts `replicas × min(parallelism, completions)`; batch/v1 Job
//!   (`job/job_controller.go`): `main`; pod groups (`pod/pod_controller.go`): the Workload
//!   named after the group, made once `pod-group-total-count` pods exist, one pod set per
//!   role hash; a single pod: `pod-<name>-<hash5>`, pod set `main`;
//! - on admission the pod-set information (labels `kueue.x-k8s.io/podset`,
//!   `local-queue-name`, `cluster-queue-name`, annotation `kueue.x-k8s.io/workload`, the
//!   flavor's node labels and tolerations) merged into the job's templates and the job
//!   unsuspended (`startJob`, `podset.go:FromAssignment`, `Merge`), event `Started`; pods'
//!   scheduling gates removed; a job unsuspended without admission is suspended again
//!   (`Stopped`, `Not admitted by cluster queue`);
//! - the Workload `Finished` when the job is (`finish.go`), its finalizer removed then.

use serde_json::{Value, json};
use sha1::{Digest, Sha1};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::webhook::{TRAINJOB_MANAGER, managed_ancestor, managed_namespace};
use super::{
    ADMISSION_GATE, CQ_LABEL, GROUP_NAME, GROUP_TOTAL, IS_GROUP, JOB_UID_LABEL, LQ_LABEL,
    MANAGED_LABEL, POD_FINALIZER, PODSET_LABEL, RETRIABLE, ROLE_HASH, TOPOLOGY_GATE, WL_FINALIZER,
    WORKLOADS, queue_name,
};
use crate::controllers::{Controllers, all, cond_true, deleting, set_meta_condition};
use crate::resources::{self, JOBS, PODS, ResId};
use crate::store::{Store, WriteOpts};
use crate::util::{fmt_time, name_of, ns_of, s, uid_of};

pub const COMPONENT: &str = "kueue-job-controller";

/// The kinds of jobs Kueue manages here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MpiJob,
    TrainJob,
    Job,
}

impl Kind {
    fn res(self) -> ResId {
        match self {
            Kind::MpiJob => resources::register(&crate::mpi::MPIJOB),
            Kind::TrainJob => resources::register(&crate::trainer::TRAINJOBS),
            Kind::Job => JOBS,
        }
    }

    fn of(obj: &Value) -> Option<Kind> {
        match (s(obj, "/apiVersion")?, s(obj, "/kind")?) {
            ("kubeflow.org/v2beta1", "MPIJob") => Some(Kind::MpiJob),
            ("trainer.kubeflow.org/v1alpha1", "TrainJob") => Some(Kind::TrainJob),
            ("batch/v1", "Job") => Some(Kind::Job),
            _ => None,
        }
    }

    fn suspend_ptr(self) -> &'static str {
        match self {
            Kind::MpiJob => "/spec/runPolicy/suspend",
            Kind::TrainJob | Kind::Job => "/spec/suspend",
        }
    }

    fn suspended(self, obj: &Value) -> bool {
        obj.pointer(self.suspend_ptr()).and_then(Value::as_bool) == Some(true)
    }

    /// `Finished`: (succeeded, message) once the job is done.
    fn finished(self, obj: &Value) -> Option<(bool, String)> {
        let (ok, bad) = match self {
            Kind::MpiJob => ("Succeeded", "Failed"),
            Kind::TrainJob | Kind::Job => ("Complete", "Failed"),
        };
        let msg = |t: &str| {
            obj.pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| s(c, "/type") == Some(t)))
                .and_then(|c| s(c, "/message"))
                .unwrap_or_default()
                .to_string()
        };
        if cond_true(obj, ok) {
            Some((true, msg(ok)))
        } else if cond_true(obj, bad) {
            Some((false, msg(bad)))
        } else {
            None
        }
    }
}

/// `<lower(kind)>-<name>-<first 5 hex of sha1(kind \n group \n name \n uid)>`.
pub fn workload_name(kind: &str, group: &str, name: &str, uid: &str) -> String {
    let mut h = Sha1::new();
    h.update(format!("{kind}\n{group}\n{name}\n{uid}").as_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let prefix = format!("{}-{name}", kind.to_lowercase());
    let prefix = &prefix[..prefix.len().min(253 - 6)];
    format!("{prefix}-{}", &hex[..5])
}

fn podset(name: &str, count: i64, template: &Value) -> Value {
    let mut t = template.clone();
    if !t.is_object() {
        t = json!({});
    }
    if !t["spec"].is_object() {
        t["spec"] = json!({});
    }
    json!({"name": name, "count": count, "template": t})
}

fn int(v: &Value, p: &str) -> Option<i64> {
    v.pointer(p).and_then(Value::as_i64)
}

/// The job's pod sets, or why none can be made.
fn podsets(store: &Store, kind: Kind, obj: &Value) -> Result<Vec<Value>, String> {
    match kind {
        Kind::MpiJob => {
            let mut out = Vec::new();
            for (role, name) in [("Launcher", "launcher"), ("Worker", "worker")] {
                if let Some(rs) = obj.pointer(&format!("/spec/mpiReplicaSpecs/{role}")) {
                    let count = int(rs, "/replicas").unwrap_or(1);
                    out.push(podset(name, count, &rs["template"]));
                }
            }
            Ok(out)
        }
        Kind::Job => {
            let count = int(obj, "/spec/parallelism")
                .unwrap_or(1)
                .min(int(obj, "/spec/completions").unwrap_or(i64::MAX));
            let mut template = obj["spec"]["template"].clone();
            if let Some(l) = template["metadata"]["labels"].as_object_mut() {
                for k in [PODSET_LABEL, LQ_LABEL, CQ_LABEL] {
                    l.remove(k);
                }
            }
            Ok(vec![podset("main", count, &template)])
        }
        Kind::TrainJob => {
            let rt = crate::trainer::runtime_of(store, obj).ok_or_else(|| {
                format!(
                    "runtime '{}' not found",
                    s(obj, "/spec/runtimeRef/name").unwrap_or_default()
                )
            })?;
            let mpi = crate::trainer::Mpi::of(obj, &rt);
            let spec = rt
                .pointer("/spec/template/spec")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let js = crate::trainer::jobset(obj, &rt, &mpi, spec, true);
            Ok(js["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|rj| {
                    let per = int(rj, "/template/spec/parallelism")
                        .unwrap_or(1)
                        .min(int(rj, "/template/spec/completions").unwrap_or(i64::MAX));
                    let count = int(rj, "/replicas").unwrap_or(1) * per;
                    podset(
                        &s(rj, "/name").unwrap_or_default().to_lowercase(),
                        count,
                        &rj["template"]["spec"]["template"],
                    )
                })
                .collect())
        }
    }
}

fn new_workload(
    name: &str,
    ns: &str,
    queue: &str,
    podsets: Vec<Value>,
    owners: Vec<Value>,
    labels: Value,
    annotations: Value,
) -> Value {
    let mut meta = json!({"name": name, "namespace": ns, "ownerReferences": owners,
        "finalizers": [WL_FINALIZER]});
    if labels.as_object().is_some_and(|m| !m.is_empty()) {
        meta["labels"] = labels;
    }
    if annotations.as_object().is_some_and(|m| !m.is_empty()) {
        meta["annotations"] = annotations;
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
        "spec": {"queueName": queue, "podSets": podsets, "priority": 0, "active": true}})
}

/// Records an event unless one with this reason and message is already about `obj` (the
/// store would count repeats up, and each count is a change that runs the loop again).
pub fn event_once(store: &Store, obj: &Value, etype: &str, reason: &str, msg: &str, comp: &str) {
    let (ls, fs) = all();
    let (evs, _) = store.list(resources::EVENTS, Some(ns_of(obj)), &ls, &fs);
    let seen = evs.iter().any(|e| {
        s(e, "/involvedObject/uid") == Some(uid_of(obj))
            && s(e, "/reason") == Some(reason)
            && s(e, "/message") == Some(msg)
    });
    if !seen {
        store.record_event(obj, etype, reason, msg, comp);
    }
}

fn controller_uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| s(r, "/uid"))
}

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

fn managed_pod(p: &Value) -> bool {
    s(
        p,
        &format!("/metadata/labels/{}", MANAGED_LABEL.replace('/', "~1")),
    ) == Some("true")
}

fn terminal(p: &Value) -> bool {
    matches!(s(p, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// Makes the Workloads jobs and pod groups need.
pub fn sync(ctl: &Controllers, _now: i64) {
    let store = &ctl.store;
    let wl_id = resources::register(&WORKLOADS);
    let (ls, fs) = all();
    let (wls, _) = store.list(wl_id, None, &ls, &fs);
    for kind in [Kind::MpiJob, Kind::TrainJob, Kind::Job] {
        let id = kind.res();
        if !store.serves(id) {
            continue;
        }
        let (objs, _) = store.list(id, None, &ls, &fs);
        for obj in objs {
            let Some(queue) = queue_name(&obj) else {
                continue;
            };
            if deleting(&obj)
                || !managed_namespace(ns_of(&obj))
                || kind.finished(&obj).is_some()
                || wls.iter().any(|w| controller_uid(w) == Some(uid_of(&obj)))
                || (kind == Kind::Job && managed_ancestor(store, &obj))
            {
                continue;
            }
            let sets = match podsets(store, kind, &obj) {
                Ok(p) => p,
                Err(_) => continue, // retried on the next pass, as Kueue's reconciler errors
            };
            let (group, k) = {
                let av = s(&obj, "/apiVersion").unwrap_or_default();
                (
                    av.split_once('/').map_or("", |(g, _)| g).to_string(),
                    s(&obj, "/kind").unwrap_or_default().to_string(),
                )
            };
            let name = workload_name(&k, &group, name_of(&obj), uid_of(&obj));
            let wl = new_workload(
                &name,
                ns_of(&obj),
                queue,
                sets,
                vec![crate::controllers::owner_ref(&obj)],
                json!({JOB_UID_LABEL: uid_of(&obj)}),
                json!({}),
            );
            if store
                .create(wl_id, ns_of(&obj), wl, &WriteOpts::default())
                .is_ok()
            {
                store.record_event(
                    &obj,
                    "Normal",
                    "CreatedWorkload",
                    &format!("Created Workload: {}/{name}", ns_of(&obj)),
                    COMPONENT,
                );
            }
        }
    }
    pods(store, wl_id, &wls);
}

/// Pod groups and single pods.
fn pods(store: &Store, wl_id: ResId, wls: &[Arc<Value>]) {
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
fn pod_template(p: &Value) -> Value {
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

/// Pod-set information of an admitted Workload: per pod set, the labels and annotation
/// Kueue adds and the flavors' node labels and tolerations (`getPodSetsInfoFromStatus`).
struct PodSetInfo {
    name: String,
    labels: Value,
    annotations: Value,
    node_selector: Value,
    tolerations: Vec<Value>,
}

fn podset_infos(store: &Store, wl: &Value) -> Vec<PodSetInfo> {
    let cq = s(wl, "/status/admission/clusterQueue").unwrap_or_default();
    let lq = s(wl, "/spec/queueName").unwrap_or_default();
    let rf_id = resources::register(&super::RESOURCEFLAVORS);
    wl.pointer("/status/admission/podSetAssignments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            let name = s(a, "/name").unwrap_or_default().to_string();
            let mut node_selector = json!({});
            let mut tolerations = Vec::new();
            for f in a["flavors"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, f)| f.as_str())
            {
                if let Some(rf) = store.get(rf_id, "", f) {
                    for (k, v) in rf
                        .pointer("/spec/nodeLabels")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        node_selector[k] = v.clone();
                    }
                    for t in rf
                        .pointer("/spec/tolerations")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if !tolerations.contains(t) {
                            tolerations.push(t.clone());
                        }
                    }
                }
            }
            PodSetInfo {
                labels: json!({PODSET_LABEL: name, LQ_LABEL: lq, CQ_LABEL: cq}),
                annotations: json!({"kueue.x-k8s.io/workload": name_of(wl)}),
                name,
                node_selector,
                tolerations,
            }
        })
        .collect()
}

fn merge_into(template: &mut Value, info: &PodSetInfo) {
    for (k, v) in [("labels", &info.labels), ("annotations", &info.annotations)] {
        if !template["metadata"][k].is_object() {
            template["metadata"][k] = json!({});
        }
        for (a, b) in v.as_object().into_iter().flatten() {
            template["metadata"][k][a] = b.clone();
        }
    }
    if info
        .node_selector
        .as_object()
        .is_some_and(|m| !m.is_empty())
    {
        if !template["spec"]["nodeSelector"].is_object() {
            template["spec"]["nodeSelector"] = json!({});
        }
        for (a, b) in info.node_selector.as_object().into_iter().flatten() {
            template["spec"]["nodeSelector"][a] = b.clone();
        }
    }
    for t in &info.tolerations {
        if !template["spec"]["tolerations"].is_array() {
            template["spec"]["tolerations"] = json!([]);
        }
        template["spec"]["tolerations"]
            .as_array_mut()
            .expect("array")
            .push(t.clone());
    }
}

/// `RunWithPodSetsInfo`: the pod-set information into the job, and the job unsuspended.
fn run(store: &Store, kind: Kind, job: &Value, infos: &[PodSetInfo]) {
    let uid = uid_of(job).to_string();
    store.mutate(kind.res(), ns_of(job), name_of(job), |o| {
        if uid_of(o) != uid {
            return;
        }
        match kind {
            Kind::MpiJob => {
                for info in infos {
                    let role = if info.name == "launcher" {
                        "Launcher"
                    } else {
                        "Worker"
                    };
                    let t = &mut o["spec"]["mpiReplicaSpecs"][role]["template"];
                    if t.is_object() {
                        merge_into(t, info);
                    }
                }
                o["spec"]["runPolicy"]["suspend"] = json!(false);
            }
            Kind::Job => {
                if let Some(info) = infos.first() {
                    merge_into(&mut o["spec"]["template"], info);
                }
                o["spec"]["suspend"] = json!(false);
            }
            Kind::TrainJob => {
                let rjobs: Vec<Value> = infos
                    .iter()
                    .map(|i| {
                        let mut spec = json!({});
                        if i.node_selector.as_object().is_some_and(|m| !m.is_empty()) {
                            spec["nodeSelector"] = i.node_selector.clone();
                        }
                        if !i.tolerations.is_empty() {
                            spec["tolerations"] = json!(i.tolerations);
                        }
                        json!({"name": i.name, "template": {"spec": {"template": {
                            "metadata": {"labels": i.labels, "annotations": i.annotations},
                            "spec": spec}}}})
                    })
                    .collect();
                if let Some(list) = o["spec"]["runtimePatches"].as_array_mut()
                    && let Some(p) = list
                        .iter_mut()
                        .find(|p| s(p, "/manager") == Some(TRAINJOB_MANAGER))
                {
                    p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = json!(rjobs);
                }
                o["spec"]["suspend"] = json!(false);
            }
        }
    });
}

/// `Stop`: suspended again, with the pod-set information taken back out.
fn stop(store: &Store, kind: Kind, job: &Value) {
    let uid = uid_of(job).to_string();
    store.mutate(kind.res(), ns_of(job), name_of(job), |o| {
        if uid_of(o) != uid {
            return;
        }
        let strip = |t: &mut Value| {
            if let Some(l) = t["metadata"]["labels"].as_object_mut() {
                for k in [PODSET_LABEL, LQ_LABEL, CQ_LABEL] {
                    l.remove(k);
                }
            }
            if let Some(a) = t["metadata"]["annotations"].as_object_mut() {
                a.remove("kueue.x-k8s.io/workload");
            }
        };
        match kind {
            Kind::MpiJob => {
                for role in ["Launcher", "Worker"] {
                    strip(&mut o["spec"]["mpiReplicaSpecs"][role]["template"]);
                }
                o["spec"]["runPolicy"]["suspend"] = json!(true);
            }
            Kind::Job => {
                strip(&mut o["spec"]["template"]);
                o["spec"]["suspend"] = json!(true);
                if let Some(st) = o["status"].as_object_mut() {
                    st.remove("startTime");
                }
            }
            Kind::TrainJob => {
                if let Some(list) = o["spec"]["runtimePatches"].as_array_mut()
                    && let Some(p) = list
                        .iter_mut()
                        .find(|p| s(p, "/manager") == Some(TRAINJOB_MANAGER))
                {
                    p["trainingRuntimeSpec"] = json!({"template": {"spec": {}}});
                }
                o["spec"]["suspend"] = json!(true);
            }
        }
    });
}

fn finish(store: &Store, wl: &Value, ok: bool, msg: &str, now: &str) {
    let wl_id = resources::register(&WORKLOADS);
    let uid = uid_of(wl).to_string();
    let gen_ = wl
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    store.mutate(wl_id, ns_of(wl), name_of(wl), |w| {
        if uid_of(w) != uid {
            return;
        }
        if !w["status"].is_object() {
            w["status"] = json!({});
        }
        let reason = if ok { "Succeeded" } else { "Failed" };
        set_meta_condition(&mut w["status"], "Finished", "True", reason, msg, now);
        stamp_generation(&mut w["status"], gen_);
    });
}

/// `observedGeneration` on every condition (metav1.Condition), as Kueue writes them.
pub fn stamp_generation(status: &mut Value, generation: i64) {
    for c in status["conditions"].as_array_mut().into_iter().flatten() {
        c["observedGeneration"] = json!(generation);
    }
}

/// Admitted Workloads' jobs started, unadmitted running ones stopped, finished jobs'
/// Workloads finished, finalizers removed when done.
pub fn start_and_stop(ctl: &Controllers, now: i64) {
    let store = &ctl.store;
    let wl_id = resources::register(&WORKLOADS);
    let (ls, fs) = all();
    let (wls, _) = store.list(wl_id, None, &ls, &fs);
    let now_s = fmt_time(now);
    for wl in wls {
        let (ns, name) = (ns_of(&wl).to_string(), name_of(&wl).to_string());
        let finished = cond_true(&wl, "Finished");
        if deleting(&wl) || finished {
            store.drop_finalizer(wl_id, &ns, &name, WL_FINALIZER);
            if finished && !deleting(&wl) {
                release_group_pods(store, &wl);
            }
            continue;
        }
        let admitted = cond_true(&wl, "Admitted");
        let cq = s(&wl, "/status/admission/clusterQueue")
            .unwrap_or_default()
            .to_string();
        if s(
            &wl,
            &format!("/metadata/annotations/{}", IS_GROUP.replace('/', "~1")),
        ) == Some("true")
            || wl_owner_is_pod(&wl)
        {
            pod_workload(store, &wl, admitted, &cq, &now_s);
            continue;
        }
        let Some(owner_uid) = controller_uid(&wl) else {
            continue;
        };
        let Some((_, job)) = store.get_by_uid(owner_uid) else {
            continue;
        };
        let Some(kind) = Kind::of(&job) else {
            continue;
        };
        if let Some((ok, msg)) = kind.finished(&job) {
            finish(store, &wl, ok, &msg, &now_s);
            store.record_event(
                &job,
                "Normal",
                "FinishedWorkload",
                &format!("Workload '{ns}/{name}' is declared finished"),
                COMPONENT,
            );
            continue;
        }
        let suspended = kind.suspended(&job);
        if admitted && suspended {
            let infos = podset_infos(store, &wl);
            run(store, kind, &job, &infos);
            store.record_event(
                &job,
                "Normal",
                "Started",
                &format!("Admitted by clusterQueue {cq}"),
                COMPONENT,
            );
        } else if !admitted && !suspended {
            stop(store, kind, &job);
            store.record_event(
                &job,
                "Normal",
                "Stopped",
                "Not admitted by cluster queue",
                COMPONENT,
            );
        }
    }
}

fn wl_owner_is_pod(wl: &Value) -> bool {
    wl.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty() && r.iter().all(|r| s(r, "/kind") == Some("Pod")))
}

fn member_pods(store: &Store, wl: &Value) -> Vec<Arc<Value>> {
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
fn release_group_pods(store: &Store, wl: &Value) {
    if !wl_owner_is_pod(wl) {
        return;
    }
    for p in member_pods(store, wl) {
        store.drop_finalizer(PODS, ns_of(&p), name_of(&p), POD_FINALIZER);
    }
}

/// A pod group's (or single pod's) Workload: admitted → gates removed and pod-set
/// information merged (`Pod.Run`); all done → Finished (`Pod.Finished`).
fn pod_workload(store: &Store, wl: &Value, admitted: bool, cq: &str, now: &str) {
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
