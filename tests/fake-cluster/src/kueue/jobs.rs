//! Kueue's job integrations (`pkg/controller/jobframework/reconciler.go:ReconcileGenericJob`
//! and each integration's `PodSets`, `RunWithPodSetsInfo`, `Stop`, `Finished`):
//! - a Workload per job naming a queue (`handleJobWithNoWorkload` → `ConstructWorkload`):
//!   `<kind>-<job>-<hash5>` (`workload_names.go`), controller-owned by the job, labelled
//!   `kueue.x-k8s.io/job-uid`, finalizer `kueue.x-k8s.io/resource-in-use`, event
//!   `CreatedWorkload` on the job;
//! - MPIJob (`mpijob/mpijob_controller.go`): pod sets `launcher`, `worker`; TrainJob
//!   (`trainjob/trainjob_controller.go`): one per replicated job of the JobSet the Trainer
//!   would build, counts `replicas × min(parallelism, completions)`; batch/v1 Job
//!   (`job/job_controller.go`): `main`; pod groups and single pods: [`super::pods`];
//! - on admission the pod-set information (labels `kueue.x-k8s.io/podset`,
//!   `local-queue-name`, `cluster-queue-name`, annotation `kueue.x-k8s.io/workload`, the
//!   flavor's node labels and tolerations) merged into the job's templates and the job
//!   unsuspended (`startJob`, `podset.go:FromAssignment`, `Merge`), event `Started`; pods'
//!   scheduling gates removed; a job unsuspended without admission is suspended again
//!   (`Stopped`, `Not admitted by cluster queue`);
//! - the Workload `Finished` when the job is (`finish.go`), its finalizer removed then.

use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::webhook::{TRAINJOB_MANAGER, managed_ancestor, managed_namespace};
use super::{
    CQ_LABEL, IS_GROUP, JOB_UID_LABEL, LQ_LABEL, PODSET_LABEL, WL_FINALIZER, WORKLOADS, queue_name,
};
use crate::controllers::{Controllers, all, cond_true, deleting, set_meta_condition};
use crate::resources::{self, JOBS, ResId};
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

pub(super) fn podset(name: &str, count: i64, template: &Value) -> Value {
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

pub(super) fn new_workload(
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

pub(super) fn controller_uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| s(r, "/uid"))
}

pub(super) fn terminal(p: &Value) -> bool {
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
    super::pods::sync(store, wl_id, &wls);
}

/// Pod-set information of an admitted Workload: per pod set, the labels and annotation
/// Kueue adds and the flavors' node labels and tolerations (`getPodSetsInfoFromStatus`).
pub(super) struct PodSetInfo {
    pub(super) name: String,
    pub(super) labels: Value,
    pub(super) annotations: Value,
    pub(super) node_selector: Value,
    pub(super) tolerations: Vec<Value>,
}

pub(super) fn podset_infos(store: &Store, wl: &Value) -> Vec<PodSetInfo> {
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

pub(super) fn merge_into(template: &mut Value, info: &PodSetInfo) {
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

pub(super) fn finish(store: &Store, wl: &Value, ok: bool, msg: &str, now: &str) {
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
                super::pods::release_group_pods(store, &wl);
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
            || super::pods::wl_owner_is_pod(&wl)
        {
            super::pods::pod_workload(store, &wl, admitted, &cq, &now_s);
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
