//! Controllers: batch/v1 Job, apps/v1 StatefulSet, the MPI Operator (kubeflow.org/v2beta1
//! MPIJob), plus the garbage collector and the kubelet, all driven by one loop.

use serde_json::{Value, json};
use std::sync::Arc;

use crate::kubelet::Kubelet;
use crate::resources::{CONFIGMAPS, JOBS, MPIJOBS, PODS, SECRETS, SERVICES, STATEFULSETS};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Store, WriteOpts};
use crate::util::{self, fmt_time, name_of, now_ns, ns_of, s, uid_of};

fn all() -> (LabelSelector, FieldSelector) {
    (LabelSelector::default(), FieldSelector::default())
}

fn owner_ref(owner: &Value) -> Value {
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
fn owned_by<'a>(
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

fn phase(p: &Value) -> &str {
    s(p, "/status/phase").unwrap_or("Pending")
}

fn deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

fn is_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| s(c, "/type") == Some("Ready") && s(c, "/status") == Some("True"))
        })
}

fn cond_true(v: &Value, t: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| s(c, "/type") == Some(t) && s(c, "/status") == Some("True"))
        })
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change.
fn set_condition(
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

/// A pod from a template, owned by `owner`.
fn pod_from_template(
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
        if self.store.mpi {
            self.mpijobs(now);
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

    /// PersistentVolumeClaims are bound at once (no provisioner, no PersistentVolumes).
    fn claims(&self) {
        let (ls, fs) = all();
        let (claims, _) = self.store.list(crate::resources::PVCS, None, &ls, &fs);
        for c in claims {
            if s(&c, "/status/phase") == Some("Bound") {
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

    fn create(&self, res_id: usize, ns: &str, obj: Value, owner: &Value, what: &str) {
        let name = name_of(&obj).to_string();
        match self.store.create(res_id, ns, obj, &WriteOpts::default()) {
            Ok(_) => self.store.record_event(
                owner,
                "Normal",
                "SuccessfulCreate",
                &format!("Created {what}: {name}"),
                controller_name(owner),
            ),
            Err(e) if e.code == 409 => {}
            Err(e) => self.store.record_event(
                owner,
                "Warning",
                "FailedCreate",
                &format!("Error creating {what}: {}", e.message),
                controller_name(owner),
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
            let succeeded = mine.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
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
            let start = s(&job, "/status/startTime")
                .and_then(util::parse_time)
                .unwrap_or(now);
            let deadline = job
                .pointer("/spec/activeDeadlineSeconds")
                .and_then(Value::as_i64)
                .map(|d| start + d * 1_000_000_000);
            let mut status = job
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            if status.get("startTime").is_none() {
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
            let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
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
            } else if !suspended {
                let want = parallelism.min(completions - succeeded);
                let template = job
                    .pointer("/spec/template")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                while active_n < want {
                    let pod_name = format!("{}-{}", trim_name(&name, 57), util::random_suffix());
                    let mut pod = pod_from_template(&template, &pod_name, &ns, &[], &job);
                    pod["metadata"]["generateName"] = json!(format!("{name}-"));
                    self.create(PODS, &ns, pod, &job, "pod");
                    active_n += 1;
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

    fn mpijobs(&self, now: i64) {
        let (ls, fs) = all();
        let (jobs, _) = self.store.list(MPIJOBS, None, &ls, &fs);
        if jobs.is_empty() {
            return;
        }
        let (pods, _) = self.store.list(PODS, None, &ls, &fs);
        let now_s = fmt_time(now);
        for mj in jobs {
            if deleting(&mj) {
                continue;
            }
            let (ns, name, uid) = (
                ns_of(&mj).to_string(),
                name_of(&mj).to_string(),
                uid_of(&mj).to_string(),
            );
            let specs = mj
                .pointer("/spec/mpiReplicaSpecs")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let worker_spec = specs.get("Worker").cloned();
            let launcher_spec = specs.get("Launcher").cloned().unwrap_or_else(|| json!({}));
            let job = crate::mpi::JobSpec::of(&mj);
            let workers = job.workers;
            // The operator defaults runPolicy.cleanPodPolicy to None.
            let clean = s(&mj, "/spec/runPolicy/cleanPodPolicy")
                .or(s(&mj, "/spec/cleanPodPolicy"))
                .unwrap_or("None")
                .to_string();
            let finished = cond_true(&mj, "Succeeded") || cond_true(&mj, "Failed");
            let mine: Vec<&Arc<Value>> = owned_by(&pods, &uid).collect();
            let is_worker = |p: &Value| {
                s(p, "/metadata/labels/training.kubeflow.org~1job-role") == Some("worker")
            };

            // Headless Service, hostfile ConfigMap, ssh Secret (the operator's order).
            if !finished {
                if self.store.get(SERVICES, &ns, &name).is_none() {
                    self.create(SERVICES, &ns, job.service(owner_ref(&mj)), &mj, "service");
                }
                let running: Vec<&str> = mine
                    .iter()
                    .filter(|p| is_worker(p) && phase(p) == "Running" && !deleting(p))
                    .map(|p| name_of(p))
                    .collect();
                let cm_data = json!({"hostfile": job.hostfile(), "discover_hosts.sh": job.discover_hosts(&running)});
                let cm_name = format!("{name}-config");
                match self.store.get(CONFIGMAPS, &ns, &cm_name) {
                    None => {
                        let cm = job.config_map(owner_ref(&mj), cm_data);
                        self.create(CONFIGMAPS, &ns, cm, &mj, "configmap");
                    }
                    Some(cm) if cm.get("data") != Some(&cm_data) => {
                        self.store
                            .mutate(CONFIGMAPS, &ns, &cm_name, |c| c["data"] = cm_data.clone());
                    }
                    Some(_) => {}
                }
                if self
                    .store
                    .get(SECRETS, &ns, &format!("{name}-ssh"))
                    .is_none()
                {
                    match job.ssh_secret(owner_ref(&mj)) {
                        Ok(secret) => self.create(SECRETS, &ns, secret, &mj, "secret"),
                        Err(e) => self.store.record_event(
                            &mj,
                            "Warning",
                            "FailedCreate",
                            &e,
                            "mpi-job-controller",
                        ),
                    }
                }
            }

            if !finished {
                if let Some(ws) = &worker_spec {
                    let mut template = ws.get("template").cloned().unwrap_or_else(|| json!({}));
                    apply_restart_policy(&mut template, ws, "Never");
                    for i in 0..workers {
                        let pod_name = job.worker_name(i);
                        if mine.iter().any(|p| name_of(p) == pod_name) {
                            continue;
                        }
                        let pod = job.worker_pod(&template, i, owner_ref(&mj));
                        self.create(PODS, &ns, pod, &mj, "worker pod");
                    }
                }
                for p in &mine {
                    let idx = s(p, "/metadata/labels/training.kubeflow.org~1replica-index")
                        .and_then(|i| i.parse::<i64>().ok());
                    let idx = idx.map(|i| if job.launcher_as_worker { i - 1 } else { i });
                    if is_worker(p) && idx.is_some_and(|i| i >= workers) {
                        self.store.remove(PODS, &ns, name_of(p), "Background");
                    }
                }
                let launcher_name = job.launcher_name();
                let workers_ready = mine
                    .iter()
                    .filter(|p| is_worker(p) && !deleting(p) && is_ready(p))
                    .count() as i64
                    >= workers;
                if self.store.get(JOBS, &ns, &launcher_name).is_none()
                    && (!job.wait_for_workers || workers_ready)
                {
                    let mut template = launcher_spec
                        .get("template")
                        .cloned()
                        .unwrap_or_else(|| json!({}));
                    if s(&template, "/spec/restartPolicy").is_some_and(|p| !p.is_empty()) {
                        self.store.record_event(
                            &mj,
                            "Warning",
                            "SetPodTemplateRestartPolicy",
                            "Restart policy in pod template overridden by restart policy in replica spec",
                            "mpi-job-controller",
                        );
                    }
                    apply_restart_policy(&mut template, &launcher_spec, "OnFailure");
                    let template = job.launcher_template(&template);
                    let mut spec = json!({"template": template, "podReplacementPolicy": "Failed"});
                    for k in [
                        "backoffLimit",
                        "ttlSecondsAfterFinished",
                        "activeDeadlineSeconds",
                    ] {
                        if let Some(v) = mj.pointer(&format!("/spec/runPolicy/{k}")) {
                            spec[k] = v.clone();
                        }
                    }
                    if spec.get("backoffLimit").is_none() {
                        spec["backoffLimit"] = json!(6);
                    }
                    let launcher_job = json!({
                        "apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": launcher_name, "namespace": ns, "labels": {"app": name}, "ownerReferences": [owner_ref(&mj)]},
                        "spec": spec,
                    });
                    self.create(JOBS, &ns, launcher_job, &mj, "launcher job");
                }
            }
            // Status.
            let launcher = self.store.get(JOBS, &ns, &format!("{name}-launcher"));
            let worker_pods: Vec<&&Arc<Value>> = mine
                .iter()
                .filter(|p| {
                    s(p, "/metadata/labels/training.kubeflow.org~1job-role") == Some("worker")
                })
                .collect();
            let count = |ph: &[&str]| {
                worker_pods
                    .iter()
                    .filter(|p| ph.contains(&phase(p)) && !deleting(p))
                    .count()
            };
            let mut status = mj
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            let full = format!("{ns}/{name}");
            if status.get("replicaStatuses").is_none() {
                status["replicaStatuses"] = json!({});
            }
            if !cond_true(&mj, "Created") {
                set_condition(
                    &mut status,
                    "Created",
                    "True",
                    "MPIJobCreated",
                    &format!("MPIJob {full} is created."),
                    &now_s,
                );
                self.store.record_event(
                    &mj,
                    "Normal",
                    "MPIJobCreated",
                    &format!("MPIJob {full} is created."),
                    "mpi-job-controller",
                );
            }
            if status.get("startTime").is_none() {
                status["startTime"] = json!(now_s);
            }
            let lget = |k: &str| {
                launcher
                    .as_ref()
                    .and_then(|l| l.pointer(&format!("/status/{k}")))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            status["replicaStatuses"] = json!({
                "Launcher": {"active": lget("active"), "succeeded": lget("succeeded"), "failed": lget("failed")},
                "Worker": {"active": count(&["Running", "Pending"]), "succeeded": count(&["Succeeded"]), "failed": count(&["Failed"])},
            });
            if !finished {
                let launcher_running = launcher.as_ref().is_some_and(|l| {
                    let luid = uid_of(l);
                    owned_by(&pods, luid).any(|p| phase(p) == "Running")
                });
                let workers_running = count(&["Running"]) as i64 == workers;
                let done = launcher.as_ref().and_then(|l| {
                    if cond_true(l, "Complete") {
                        Some(true)
                    } else if cond_true(l, "Failed") {
                        Some(false)
                    } else {
                        None
                    }
                });
                match done {
                    Some(ok) => {
                        let (ctype, reason, msg) = if ok {
                            (
                                "Succeeded",
                                "MPIJobSucceeded",
                                format!("MPIJob {full} successfully completed."),
                            )
                        } else {
                            let why = launcher.as_ref().and_then(|l| {
                                l.pointer("/status/conditions")
                                    .and_then(Value::as_array)
                                    .and_then(|c| {
                                        c.iter().find(|c| s(c, "/type") == Some("Failed"))
                                    })
                                    .and_then(|c| s(c, "/message"))
                                    .map(String::from)
                            });
                            (
                                "Failed",
                                "MPIJobFailed",
                                format!(
                                    "MPIJob {full} has failed: {}",
                                    why.unwrap_or_else(|| "launcher failed".into())
                                ),
                            )
                        };
                        set_condition(&mut status, "Running", "False", reason, &msg, &now_s);
                        set_condition(&mut status, ctype, "True", reason, &msg, &now_s);
                        status["completionTime"] = json!(now_s);
                        let (etype, ereason) = if ok {
                            ("Normal", "Completed")
                        } else {
                            ("Warning", "MPIJobFailed")
                        };
                        self.store
                            .record_event(&mj, etype, ereason, &msg, "mpi-job-controller");
                        for p in &worker_pods {
                            let kill = match clean.as_str() {
                                "All" => true,
                                "None" => false,
                                _ => matches!(phase(p), "Running" | "Pending"),
                            };
                            if kill {
                                self.store.remove(PODS, &ns, name_of(p), "Background");
                            }
                        }
                    }
                    None if launcher_running && workers_running => {
                        if !cond_true(&mj, "Running") {
                            self.store.record_event(
                                &mj,
                                "Normal",
                                "MPIJobRunning",
                                &format!("MPIJob {full} is running."),
                                "mpi-job-controller",
                            );
                        }
                        set_condition(
                            &mut status,
                            "Running",
                            "True",
                            "MPIJobRunning",
                            &format!("MPIJob {full} is running."),
                            &now_s,
                        );
                    }
                    None => {}
                }
            }
            if mj.get("status") != Some(&status) {
                status["lastReconcileTime"] = json!(now_s);
                self.store
                    .mutate(MPIJOBS, &ns, &name, |o| o["status"] = status.clone());
            }
        }
    }
}

fn controller_name(owner: &Value) -> &'static str {
    match s(owner, "/kind") {
        Some("Job") => "job-controller",
        Some("StatefulSet") => "statefulset-controller",
        Some("MPIJob") => "mpi-job-controller",
        _ => "controller",
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
fn apply_restart_policy(template: &mut Value, replica_spec: &Value, default: &str) {
    let policy = match s(replica_spec, "/restartPolicy").filter(|p| !p.is_empty()) {
        Some("ExitCode") => "Never",
        Some(p) => p,
        None => default,
    };
    if template["spec"].is_object() {
        template["spec"]["restartPolicy"] = json!(policy);
    }
}
