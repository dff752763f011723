//! Controllers: batch/v1 Job, apps/v1 StatefulSet, every [`Operator`] the cluster runs (the
//! MPI Operator, `crate::mpi`, is one), plus the garbage collector and the kubelet, all
//! driven by one loop. The helpers operators share (owner references, pods from templates,
//! conditions, creating with events) are public so an operator can live outside this crate.

use serde_json::{Value, json};
use std::sync::Arc;

use crate::error::ApiResult;
use crate::kubelet::Kubelet;
use crate::resources::{JOBS, PODS, ResId, ResourceDef, STATEFULSETS};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Store, WriteOpts};
use crate::util::{self, fmt_time, name_of, now_ns, ns_of, s, uid_of};

/// An operator: the custom resources it serves and one reconcile pass over them. A cluster
/// runs the operators of its [`crate::Options::operators`]; each pass of the control loop
/// calls every operator's [`Operator::reconcile`] (after the garbage collector, before the
/// built-in controllers and the kubelet), whenever anything changed or is due.
pub trait Operator: Send + Sync + std::fmt::Debug + 'static {
    /// The name its events carry (`mpi-job-controller`).
    fn name(&self) -> &'static str;
    /// The custom resources it serves (registered with [`crate::resources::register`]).
    fn resources(&self) -> Vec<&'static ResourceDef>;
    /// One pass: make the cluster match its objects, and their status match the cluster.
    fn reconcile(&self, ctl: &Controllers, now: i64);
    /// Objects it makes when the cluster starts (Kueue's queues).
    fn start(&self, _store: &Store) {}
    /// Mutating admission (a webhook's `Default`): may change `obj`, an object of type
    /// `res_id` being created in namespace `ns` (any client's, controllers' included), or
    /// refuse it. Runs before the apiserver's own defaults and validation, as webhooks do.
    fn admit(&self, _store: &Store, _res_id: ResId, _ns: &str, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }
    /// A GET outside the stored resources it answers (an aggregated API such as Kueue's
    /// visibility API): `path` is the request path's segments; `None` when not its path.
    fn get_path(&self, _store: &Store, _path: &[&str]) -> Option<ApiResult<Value>> {
        None
    }
}

/// Everything (`list` arguments).
pub fn all() -> (LabelSelector, FieldSelector) {
    (LabelSelector::default(), FieldSelector::default())
}

pub fn owner_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// What `owner_uid` controls: like Kubernetes' controllers, only objects whose controller
/// reference (`controller: true`) names the owner, not every object it owns.
pub fn owned_by<'a>(
    items: &'a [Arc<Value>],
    owner_uid: &'a str,
) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
    items.iter().filter(move |v| {
        v.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    s(r, "/uid") == Some(owner_uid)
                        && r.get("controller").and_then(Value::as_bool) == Some(true)
                })
            })
    })
}

pub fn phase(p: &Value) -> &str {
    s(p, "/status/phase").unwrap_or("Pending")
}

pub fn deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

pub fn is_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| s(c, "/type") == Some("Ready") && s(c, "/status") == Some("True"))
        })
}

pub fn cond_true(v: &Value, t: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| s(c, "/type") == Some(t) && s(c, "/status") == Some("True"))
        })
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    status: &mut Value,
    ctype: &str,
    cstatus: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let is_mpi = status.get("replicaStatuses").is_some();
    let conds = status["conditions"].as_array_mut().expect("array");
    if let Some(c) = conds.iter_mut().find(|c| s(c, "/type") == Some(ctype)) {
        if s(c, "/status") != Some(cstatus) {
            c["lastTransitionTime"] = json!(now);
        }
        c["status"] = json!(cstatus);
        c["reason"] = json!(reason);
        c["message"] = json!(message);
        if c.get("lastUpdateTime").is_some() && s(c, "/status") != Some(cstatus) {
            c["lastUpdateTime"] = json!(now);
        }
    } else {
        // batch/v1 JobConditions carry lastProbeTime; kubeflow's JobConditions lastUpdateTime.
        let stamp = if is_mpi {
            "lastUpdateTime"
        } else {
            "lastProbeTime"
        };
        let mut c = json!({"type": ctype, "status": cstatus, "reason": reason, "message": message, "lastTransitionTime": now});
        c[stamp] = json!(now);
        conds.push(c);
    }
}

/// Sets a metav1.Condition (type, status, reason, message, lastTransitionTime) in `status`,
/// keeping the transition time when the status stays.
pub fn set_meta_condition(
    status: &mut Value,
    ctype: &str,
    cstatus: &str,
    reason: &str,
    msg: &str,
    now: &str,
) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let conds = status["conditions"].as_array_mut().expect("array");
    match conds.iter_mut().find(|c| s(c, "/type") == Some(ctype)) {
        Some(c) => {
            if s(c, "/status") != Some(cstatus) {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(cstatus);
            c["reason"] = json!(reason);
            c["message"] = json!(msg);
        }
        None => conds.push(json!({"type": ctype, "status": cstatus, "reason": reason, "message": msg, "lastTransitionTime": now})),
    }
}

/// A pod from a template, owned by `owner`.
pub fn pod_from_template(
    template: &Value,
    name: &str,
    ns: &str,
    extra_labels: &[(&str, String)],
    owner: &Value,
) -> Value {
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    let mut meta = json!({"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner_ref(owner)]});
    if let Some(a) = template.pointer("/metadata/annotations") {
        meta["annotations"] = a.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec").cloned().unwrap_or_else(|| json!({}))})
}

pub struct Controllers {
    pub store: Arc<Store>,
    pub kubelet: Arc<Kubelet>,
    /// Run the synthetic kubelet (off when the Docker kubelet runs pods).
    pub synthetic: bool,
    /// The operators of custom resources.
    pub operators: Vec<Arc<dyn Operator>>,
}

impl Controllers {
    /// One pass of everything. Returns the next instant a time-driven change is due.
    pub fn pass(&self) -> Option<i64> {
        let now = now_ns();
        let mut next: Option<i64> = None;
        let mut soon = |t: Option<i64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: i64| n.min(t)));
            }
        };
        for _ in 0..8 {
            if !self.store.gc_pass() {
                break;
            }
        }
        for op in &self.operators {
            op.reconcile(self, now);
        }
        soon(self.jobs(now));
        self.statefulsets();
        self.claims();
        if self
            .store
            .scheduler
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            crate::scheduler::schedule(&self.store, crate::resources::NODES);
        }
        if self.synthetic {
            soon(self.kubelet.sync(&self.store, now));
        }
        next
    }

    /// PersistentVolumeClaims of the default class (no `storageClassName`, or an empty one)
    /// are bound at once (no provisioner, no PersistentVolumes). The cluster serves no
    /// StorageClass, so a claim naming one stays Pending with the provisioning controller's
    /// `ProvisioningFailed` event, as on a cluster without that class.
    fn claims(&self) {
        let (ls, fs) = all();
        let (claims, _) = self.store.list(crate::resources::PVCS, None, &ls, &fs);
        for c in claims {
            if s(&c, "/status/phase") == Some("Bound") {
                continue;
            }
            if let Some(class) = s(&c, "/spec/storageClassName").filter(|x| !x.is_empty()) {
                if s(&c, "/status/phase") != Some("Pending") {
                    let msg = format!("storageclass.storage.k8s.io \"{class}\" not found");
                    let uid = crate::util::uid_of(&c).to_string();
                    self.store.mutate(
                        crate::resources::PVCS,
                        crate::util::ns_of(&c),
                        name_of(&c),
                        |p| {
                            if crate::util::uid_of(p) == uid {
                                p["status"] = json!({"phase": "Pending"});
                            }
                        },
                    );
                    self.store.record_event(
                        &c,
                        "Warning",
                        "ProvisioningFailed",
                        &msg,
                        "persistentvolume-controller",
                    );
                }
                continue;
            }
            let uid = crate::util::uid_of(&c).to_string();
            self.store
                .mutate(crate::resources::PVCS, crate::util::ns_of(&c), name_of(&c), |p| {
                    let storage = p
                        .pointer("/spec/resources/requests/storage")
                        .cloned()
                        .unwrap_or_else(|| json!("1Gi"));
                    let modes = p
                        .pointer("/spec/accessModes")
                        .cloned()
                        .unwrap_or_else(|| json!(["ReadWriteOnce"]));
                    p["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
                    p["status"] = json!({"phase": "Bound", "accessModes": modes, "capacity": {"storage": storage}});
                });
        }
    }

    /// The controller of objects like `owner` (the source of the events it records).
    fn controller_name(&self, owner: &Value) -> &'static str {
        let (api_version, kind) = (s(owner, "/apiVersion"), s(owner, "/kind"));
        match kind {
            Some("Job") => "job-controller",
            Some("StatefulSet") => "statefulset-controller",
            _ => self
                .operators
                .iter()
                .find(|o| {
                    o.resources().iter().any(|r| {
                        Some(r.kind) == kind && Some(r.api_version().as_str()) == api_version
                    })
                })
                .map_or("controller", |o| o.name()),
        }
    }

    /// Creates `obj` for `owner`, recording the event its controller would (`what`: the
    /// object's description in the event, `worker pod`).
    pub fn create(&self, res_id: usize, ns: &str, obj: Value, owner: &Value, what: &str) {
        let name = name_of(&obj).to_string();
        match self.store.create(res_id, ns, obj, &WriteOpts::default()) {
            Ok(_) => self.store.record_event(
                owner,
                "Normal",
                "SuccessfulCreate",
                &format!("Created {what}: {name}"),
                self.controller_name(owner),
            ),
            Err(e) if e.code == 409 => {}
            Err(e) => self.store.record_event(
                owner,
                "Warning",
                "FailedCreate",
                &format!("Error creating {what}: {}", e.message),
                self.controller_name(owner),
            ),
        }
    }

    fn jobs(&self, now: i64) -> Option<i64> {
        let (ls, fs) = all();
        let (jobs, _) = self.store.list(JOBS, None, &ls, &fs);
        let (pods, _) = self.store.list(PODS, None, &ls, &fs);
        let mut next = None;
        let now_s = fmt_time(now);
        for job in jobs {
            if deleting(&job) {
                continue;
            }
            let (ns, name, uid) = (
                ns_of(&job).to_string(),
                name_of(&job).to_string(),
                uid_of(&job).to_string(),
            );
            let finished = cond_true(&job, "Complete") || cond_true(&job, "Failed");
            if finished {
                if let (Some(ttl), Some(done)) = (
                    job.pointer("/spec/ttlSecondsAfterFinished")
                        .and_then(Value::as_i64),
                    s(&job, "/status/completionTime").and_then(util::parse_time),
                ) {
                    let due = done + ttl * 1_000_000_000;
                    if now >= due {
                        self.store.remove(JOBS, &ns, &name, "Background");
                    } else {
                        next = Some(next.map_or(due, |n: i64| n.min(due)));
                    }
                }
                continue;
            }
            let mine: Vec<&Arc<Value>> = owned_by(&pods, &uid).collect();
            let active: Vec<&&Arc<Value>> = mine
                .iter()
                .filter(|p| !matches!(phase(p), "Succeeded" | "Failed") && !deleting(p))
                .collect();
            // Indexed Jobs (the Job controller's `completionMode: Indexed`): one pod per
            // index, done when every index has succeeded once.
            let indexed = s(&job, "/spec/completionMode") == Some("Indexed");
            let index_of = |p: &Value| -> Option<i64> {
                s(
                    p,
                    "/metadata/labels/batch.kubernetes.io~1job-completion-index",
                )?
                .parse()
                .ok()
            };
            let succeeded = if indexed {
                let mut done: Vec<i64> = mine
                    .iter()
                    .filter(|p| phase(p) == "Succeeded")
                    .filter_map(|p| index_of(p))
                    .collect();
                done.sort_unstable();
                done.dedup();
                done.len() as i64
            } else {
                mine.iter().filter(|p| phase(p) == "Succeeded").count() as i64
            };
            let mut failed = mine.iter().filter(|p| phase(p) == "Failed").count() as i64;
            let on_failure = s(&job, "/spec/template/spec/restartPolicy") == Some("OnFailure");
            let restarts: i64 = if on_failure {
                active
                    .iter()
                    .flat_map(|p| {
                        p.pointer("/status/containerStatuses")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                    })
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum()
            } else {
                0
            };
            failed += restarts;
            let completions = job
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let parallelism = job
                .pointer("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let backoff_limit = job
                .pointer("/spec/backoffLimit")
                .and_then(Value::as_i64)
                .unwrap_or(6);
            let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            let start = s(&job, "/status/startTime")
                .and_then(util::parse_time)
                .unwrap_or(now);
            let deadline = job
                .pointer("/spec/activeDeadlineSeconds")
                .and_then(Value::as_i64)
                .filter(|_| !suspended)
                .map(|d| start + d * 1_000_000_000);
            let mut status = job
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            // Suspend and resume, as the Job controller's syncJob: a suspended Job has no
            // active pods and no startTime set by it; resuming sets startTime anew.
            if suspended && !cond_true(&job, "Suspended") {
                set_condition(
                    &mut status,
                    "Suspended",
                    "True",
                    "JobSuspended",
                    "Job suspended",
                    &now_s,
                );
                self.store.record_event(
                    &job,
                    "Normal",
                    "Suspended",
                    "Job suspended",
                    "job-controller",
                );
            } else if !suspended && cond_true(&job, "Suspended") {
                set_condition(
                    &mut status,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    &now_s,
                );
                status["startTime"] = json!(now_s);
                self.store
                    .record_event(&job, "Normal", "Resumed", "Job resumed", "job-controller");
            }
            if status.get("startTime").is_none() && !suspended {
                status["startTime"] = json!(fmt_time(now));
            }
            let mut outcome: Option<(&str, &str, &str)> = None;
            if failed > backoff_limit {
                outcome = Some((
                    "Failed",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if deadline.is_some_and(|d| now >= d) {
                outcome = Some((
                    "Failed",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ));
            } else if succeeded >= completions {
                outcome = Some((
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
            }
            if let Some(d) = deadline
                && outcome.is_none()
            {
                next = Some(next.map_or(d, |n: i64| n.min(d)));
            }
            let mut active_n = active.len() as i64;
            if let Some((ctype, reason, message)) = outcome {
                for p in &active {
                    self.store.remove(PODS, &ns, name_of(p), "Background");
                }
                active_n = 0;
                if ctype == "Complete" {
                    set_condition(
                        &mut status,
                        "SuccessCriteriaMet",
                        "True",
                        reason,
                        message,
                        &now_s,
                    );
                    set_condition(&mut status, "Complete", "True", reason, message, &now_s);
                    status["completionTime"] = json!(now_s);
                    self.store.record_event(
                        &job,
                        "Normal",
                        "Completed",
                        "Job completed",
                        "job-controller",
                    );
                } else {
                    set_condition(
                        &mut status,
                        "FailureTarget",
                        "True",
                        reason,
                        message,
                        &now_s,
                    );
                    set_condition(&mut status, "Failed", "True", reason, message, &now_s);
                    self.store
                        .record_event(&job, "Warning", reason, message, "job-controller");
                }
            } else if suspended {
                for p in &active {
                    self.store.remove(PODS, &ns, name_of(p), "Background");
                }
                active_n = 0;
            } else {
                let want = parallelism.min(completions - succeeded);
                let template = job
                    .pointer("/spec/template")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if indexed {
                    // Each index without a running or succeeded pod gets one, named
                    // `<job>-<index>-<random>` and hostnamed `<job>-<index>` as the Job
                    // controller does (`pkg/controller/job/indexed_job_utils.go`).
                    let busy: Vec<i64> = mine
                        .iter()
                        .filter(|p| !deleting(p) && phase(p) != "Failed")
                        .filter_map(|p| index_of(p))
                        .collect();
                    for i in 0..completions {
                        if active_n >= parallelism {
                            break;
                        }
                        if busy.contains(&i) {
                            continue;
                        }
                        let base = format!("{}-{i}", trim_name(&name, 50));
                        let pod_name = format!("{base}-{}", util::random_suffix());
                        let extra = [("batch.kubernetes.io/job-completion-index", i.to_string())];
                        let mut pod = pod_from_template(&template, &pod_name, &ns, &extra, &job);
                        pod["metadata"]["generateName"] = json!(format!("{base}-"));
                        pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] =
                            json!(i.to_string());
                        pod["spec"]["hostname"] = json!(base);
                        self.create(PODS, &ns, pod, &job, "pod");
                        active_n += 1;
                    }
                } else {
                    while active_n < want {
                        let pod_name =
                            format!("{}-{}", trim_name(&name, 57), util::random_suffix());
                        let mut pod = pod_from_template(&template, &pod_name, &ns, &[], &job);
                        pod["metadata"]["generateName"] = json!(format!("{name}-"));
                        self.create(PODS, &ns, pod, &job, "pod");
                        active_n += 1;
                    }
                }
            }
            status["active"] = json!(active_n);
            status["succeeded"] = json!(succeeded);
            status["failed"] = json!(
                mine.iter().filter(|p| phase(p) == "Failed").count()
                    + if on_failure { restarts as usize } else { 0 }
            );
            status["ready"] = json!(active.iter().filter(|p| is_ready(p)).count());
            status["terminating"] = json!(0);
            status["uncountedTerminatedPods"] = json!({});
            for k in ["active", "succeeded", "failed"] {
                if status[k] == json!(0) {
                    status.as_object_mut().expect("object").remove(k);
                }
            }
            if job.get("status") != Some(&status) {
                self.store
                    .mutate(JOBS, &ns, &name, |j| j["status"] = status.clone());
            }
        }
        next
    }

    fn statefulsets(&self) {
        let (ls, fs) = all();
        let (sets, _) = self.store.list(STATEFULSETS, None, &ls, &fs);
        let (pods, _) = self.store.list(PODS, None, &ls, &fs);
        for sts in sets {
            if deleting(&sts) {
                continue;
            }
            let (ns, name, uid) = (
                ns_of(&sts).to_string(),
                name_of(&sts).to_string(),
                uid_of(&sts).to_string(),
            );
            let replicas = sts
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                .max(0);
            let ordered = s(&sts, "/spec/podManagementPolicy") != Some("Parallel");
            let mine: Vec<&Arc<Value>> = owned_by(&pods, &uid).collect();
            let template = sts
                .pointer("/spec/template")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let service = s(&sts, "/spec/serviceName").unwrap_or_default().to_string();
            for p in &mine {
                let idx = name_of(p)
                    .rsplit('-')
                    .next()
                    .and_then(|i| i.parse::<i64>().ok())
                    .unwrap_or(-1);
                if idx >= replicas || matches!(phase(p), "Failed" | "Succeeded") {
                    self.store.remove(PODS, &ns, name_of(p), "Background");
                }
            }
            for i in 0..replicas {
                let pod_name = format!("{name}-{i}");
                match mine.iter().find(|p| name_of(p) == pod_name) {
                    Some(p) if matches!(phase(p), "Failed" | "Succeeded") => break,
                    Some(p) => {
                        if ordered && !is_ready(p) {
                            break;
                        }
                    }
                    None => {
                        let extra = [
                            ("statefulset.kubernetes.io/pod-name", pod_name.clone()),
                            ("apps.kubernetes.io/pod-index", i.to_string()),
                        ];
                        let mut pod = pod_from_template(&template, &pod_name, &ns, &extra, &sts);
                        pod["spec"]["hostname"] = json!(pod_name);
                        if !service.is_empty() {
                            pod["spec"]["subdomain"] = json!(service);
                        }
                        self.create(PODS, &ns, pod, &sts, "Pod");
                        if ordered {
                            break;
                        }
                    }
                }
            }
            let live: Vec<&&Arc<Value>> = mine.iter().filter(|p| !deleting(p)).collect();
            let ready = live.iter().filter(|p| is_ready(p)).count();
            let status = json!({
                "observedGeneration": sts.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                "replicas": live.len(),
                "readyReplicas": ready,
                "currentReplicas": live.len(),
                "updatedReplicas": live.len(),
                "availableReplicas": ready,
                "collisionCount": 0,
            });
            if sts.get("status") != Some(&status) {
                self.store
                    .mutate(STATEFULSETS, &ns, &name, |o| o["status"] = status.clone());
            }
        }
    }
}

fn trim_name(name: &str, max: usize) -> &str {
    if name.len() <= max {
        name
    } else {
        &name[..max]
    }
}

/// The operator's rule: the replica spec's restartPolicy (defaulted to `default`; `ExitCode`
/// means Never) replaces whatever the template says.
pub fn apply_restart_policy(template: &mut Value, replica_spec: &Value, default: &str) {
    let policy = match s(replica_spec, "/restartPolicy").filter(|p| !p.is_empty()) {
        Some("ExitCode") => "Never",
        Some(p) => p,
        None => default,
    };
    if template["spec"].is_object() {
        template["spec"]["restartPolicy"] = json!(policy);
    }
}
