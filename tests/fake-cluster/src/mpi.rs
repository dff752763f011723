//! What the MPI Operator (v0.8.x, `kubeflow.org/v2beta1`) makes for an MPIJob, as pure
//! functions of the MPIJob: the ssh Secret, the hostfile ConfigMap, the headless Service, the
//! worker pods and the launcher's pod template. `controllers.rs` creates and updates them.
//!
//! Names and shapes follow the operator's controller: Service `<job>` selecting every pod of
//! the job (launcher included), pods' `hostname` = their name and `subdomain` = `<job>`,
//! hostfile lines `<pod>.<job>.<ns>.svc slots=N` (Open MPI) or `<pod>.<job>.<ns>.svc:N`
//! (Intel MPI, MPICH), `discover_hosts.sh` listing only Running workers, the ssh Secret
//! mounted on the first container at `sshAuthMountPath` with items `id_rsa`, `id_rsa.pub`,
//! `authorized_keys` (`defaultMode` 0600 only for `/root/.ssh`), the ConfigMap at `/etc/mpi`
//! on the launcher only (`hostfile` 0444, `discover_hosts.sh` 0555).

use serde_json::{Value, json};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};
use std::sync::Arc;

use crate::controllers::{
    Controllers, Operator, all, apply_restart_policy, cond_true, deleting, is_ready, owned_by,
    owner_ref, phase, set_condition,
};
use crate::error::{ApiError, ApiResult};
use crate::objects::validate_pod_spec;
use crate::resources::{self, CONFIGMAPS, JOBS, PODS, ResourceDef, SECRETS, SERVICES};
use crate::util::{self, fmt_time, name_of, ns_of, s, uid_of};

/// `kubeflow.org/v2beta1` MPIJob, as the operator's CRD serves it.
pub static MPIJOB: ResourceDef = ResourceDef {
    group: "kubeflow.org",
    version: "v2beta1",
    kind: "MPIJob",
    plural: "mpijobs",
    singular: "mpijob",
    namespaced: true,
    short_names: &[],
    status_sub: true,
    custom: true,
    categories: &["all", "kubeflow"],
    validate: Some(validate),
};

/// What the CRD's schema and the operator's webhook refuse.
fn validate(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    let specs = obj.pointer("/spec/mpiReplicaSpecs");
    if !specs.is_some_and(Value::is_object) {
        return Err(ApiError::invalid(
            def,
            name,
            "spec.mpiReplicaSpecs",
            "FieldValueRequired",
            "Required value",
        ));
    }
    for role in ["Launcher", "Worker"] {
        if let Some(rs) = specs.and_then(|s| s.get(role)) {
            validate_pod_spec(
                def,
                name,
                rs.pointer("/template/spec"),
                &format!("spec.mpiReplicaSpecs[{role}].template.spec"),
            )?;
        }
    }
    if specs.and_then(|s| s.get("Launcher")).is_none() {
        return Err(ApiError::invalid(
            def,
            name,
            "spec.mpiReplicaSpecs[Launcher]",
            "FieldValueRequired",
            "Required value: must have Launcher replica spec",
        ));
    }
    Ok(())
}

/// The MPI Operator (v0.8.x): for each MPIJob, the Service, hostfile ConfigMap, ssh Secret,
/// worker pods and launcher Job, and the MPIJob's status from them (the operator's
/// `pkg/controller/mpi_job_controller.go`).
#[derive(Debug)]
pub struct MpiOperator;

impl Operator for MpiOperator {
    fn name(&self) -> &'static str {
        "mpi-job-controller"
    }

    fn resources(&self) -> Vec<&'static ResourceDef> {
        vec![&MPIJOB]
    }

    fn reconcile(&self, ctl: &Controllers, now: i64) {
        let id = resources::register(&MPIJOB);
        let (ls, fs) = all();
        let (jobs, _) = ctl.store.list(id, None, &ls, &fs);
        if jobs.is_empty() {
            return;
        }
        let (pods, _) = ctl.store.list(PODS, None, &ls, &fs);
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
            let mut job = JobSpec::of(&mj);
            // On a cluster running Volcano the operator runs with `--gang-scheduling=volcano`.
            job.volcano = crate::volcano::served(&ctl.store);
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
                if ctl.store.get(SERVICES, &ns, &name).is_none() {
                    ctl.create(SERVICES, &ns, job.service(owner_ref(&mj)), &mj, "service");
                }
                let running: Vec<&str> = mine
                    .iter()
                    .filter(|p| is_worker(p) && phase(p) == "Running" && !deleting(p))
                    .map(|p| name_of(p))
                    .collect();
                let cm_data = json!({"hostfile": job.hostfile(), "discover_hosts.sh": job.discover_hosts(&running)});
                let cm_name = format!("{name}-config");
                match ctl.store.get(CONFIGMAPS, &ns, &cm_name) {
                    None => {
                        let cm = job.config_map(owner_ref(&mj), cm_data);
                        ctl.create(CONFIGMAPS, &ns, cm, &mj, "configmap");
                    }
                    Some(cm) if cm.get("data") != Some(&cm_data) => {
                        ctl.store
                            .mutate(CONFIGMAPS, &ns, &cm_name, |c| c["data"] = cm_data.clone());
                    }
                    Some(_) => {}
                }
                if ctl
                    .store
                    .get(SECRETS, &ns, &format!("{name}-ssh"))
                    .is_none()
                {
                    match job.ssh_secret(owner_ref(&mj)) {
                        Ok(secret) => ctl.create(SECRETS, &ns, secret, &mj, "secret"),
                        Err(e) => ctl.store.record_event(
                            &mj,
                            "Warning",
                            "FailedCreate",
                            &e,
                            "mpi-job-controller",
                        ),
                    }
                }
            }

            // `runPolicy.suspend` (Kueue sets it): no workers while suspended, and the launcher
            // Job made at once but suspended, whatever the creation policy — the operator's
            // `syncHandler` in v0.8.x (kubeflow/mpi-operator#615): `worker` stays empty while
            // suspended, so "every worker ready" holds.
            let suspended = mj
                .pointer("/spec/runPolicy/suspend")
                .and_then(Value::as_bool)
                == Some(true);
            let launcher_template = || {
                let mut template = launcher_spec
                    .get("template")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                apply_restart_policy(&mut template, &launcher_spec, "OnFailure");
                job.launcher_template(&template)
            };
            if !finished && suspended {
                // cleanUpWorkerPods (workers and PodGroup).
                for p in mine.iter().filter(|p| is_worker(p) && !deleting(p)) {
                    ctl.store.remove(PODS, &ns, name_of(p), "Background");
                }
                if job.volcano {
                    let pg = resources::register(&crate::volcano::PODGROUPS);
                    ctl.store.remove(pg, &ns, &name, "Background");
                }
            }
            if !finished && !suspended && job.volcano {
                // `getOrCreatePodGroups`, before the workers (`pkg/controller/podgroup.go`).
                let spec = job.pod_group_spec(&mj);
                crate::volcano::ensure_pod_group(ctl, &mj, &name, spec);
            }
            if !finished && !suspended {
                if let Some(ws) = &worker_spec {
                    let mut template = ws.get("template").cloned().unwrap_or_else(|| json!({}));
                    apply_restart_policy(&mut template, ws, "Never");
                    for i in 0..workers {
                        let pod_name = job.worker_name(i);
                        if mine.iter().any(|p| name_of(p) == pod_name) {
                            continue;
                        }
                        let pod = job.worker_pod(&template, i, owner_ref(&mj));
                        ctl.create(PODS, &ns, pod, &mj, "worker pod");
                    }
                }
                for p in &mine {
                    let idx = s(p, "/metadata/labels/training.kubeflow.org~1replica-index")
                        .and_then(|i| i.parse::<i64>().ok());
                    let idx = idx.map(|i| if job.launcher_as_worker { i - 1 } else { i });
                    if is_worker(p) && idx.is_some_and(|i| i >= workers) {
                        ctl.store.remove(PODS, &ns, name_of(p), "Background");
                    }
                }
            }
            if !finished {
                let launcher_name = job.launcher_name();
                let workers_ready = suspended
                    || mine
                        .iter()
                        .filter(|p| is_worker(p) && !deleting(p) && is_ready(p))
                        .count() as i64
                        >= workers;
                if ctl.store.get(JOBS, &ns, &launcher_name).is_none()
                    && (!job.wait_for_workers || workers_ready)
                {
                    if s(&launcher_spec, "/template/spec/restartPolicy")
                        .is_some_and(|p| !p.is_empty())
                    {
                        ctl.store.record_event(
                            &mj,
                            "Warning",
                            "SetPodTemplateRestartPolicy",
                            "Restart policy in pod template overridden by restart policy in replica spec",
                            "mpi-job-controller",
                        );
                    }
                    let mut spec =
                        json!({"template": launcher_template(), "podReplacementPolicy": "Failed"});
                    if suspended {
                        spec["suspend"] = json!(true);
                    }
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
                    ctl.create(JOBS, &ns, launcher_job, &mj, "launcher job");
                } else if let Some(l) = ctl.store.get(JOBS, &ns, &launcher_name) {
                    let l_suspended =
                        l.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
                    if !suspended && l_suspended {
                        // Resume: startTime cleared, the mutable scheduling directives
                        // synced from the current launcher template (what Kueue injected),
                        // unsuspended, in the same step as the workers were created: the
                        // launcher does not wait for them (#615).
                        let desired = launcher_template();
                        ctl.store.mutate(JOBS, &ns, &launcher_name, |j| {
                            if let Some(st) = j["status"].as_object_mut() {
                                st.remove("startTime");
                            }
                            let t = &mut j["spec"]["template"];
                            for k in ["labels", "annotations"] {
                                if let Some(m) = desired["metadata"][k].as_object() {
                                    if !t["metadata"][k].is_object() {
                                        t["metadata"][k] = json!({});
                                    }
                                    for (a, b) in m {
                                        t["metadata"][k][a] = b.clone();
                                    }
                                }
                            }
                            for k in ["nodeSelector", "tolerations", "schedulingGates"] {
                                match desired["spec"].get(k) {
                                    Some(v) => t["spec"][k] = v.clone(),
                                    None => {
                                        if let Some(m) = t["spec"].as_object_mut() {
                                            m.remove(k);
                                        }
                                    }
                                }
                            }
                            j["spec"]["suspend"] = json!(false);
                        });
                    } else if suspended && !l_suspended {
                        ctl.store.mutate(JOBS, &ns, &launcher_name, |j| {
                            j["spec"]["suspend"] = json!(true)
                        });
                    }
                }
            }
            // Status.
            let launcher = ctl.store.get(JOBS, &ns, &format!("{name}-launcher"));
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
                ctl.store.record_event(
                    &mj,
                    "Normal",
                    "MPIJobCreated",
                    &format!("MPIJob {full} is created."),
                    "mpi-job-controller",
                );
            }
            // Suspended / resumed (`updateMPIJobStatus`).
            if suspended {
                if !cond_true(&mj, "Suspended") {
                    set_condition(
                        &mut status,
                        "Suspended",
                        "True",
                        "MPIJobSuspended",
                        "MPIJob suspended",
                        &now_s,
                    );
                    ctl.store.record_event(
                        &mj,
                        "Normal",
                        "MPIJobSuspended",
                        "MPIJob suspended",
                        "mpi-job-controller",
                    );
                }
                set_condition(
                    &mut status,
                    "Running",
                    "False",
                    "MPIJobSuspended",
                    &format!("MPIJob {full} is suspended."),
                    &now_s,
                );
            } else if cond_true(&mj, "Suspended") {
                set_condition(
                    &mut status,
                    "Suspended",
                    "False",
                    "MPIJobResumed",
                    "MPIJob resumed",
                    &now_s,
                );
                ctl.store.record_event(
                    &mj,
                    "Normal",
                    "MPIJobResumed",
                    "MPIJob resumed",
                    "mpi-job-controller",
                );
                status["startTime"] = json!(now_s);
            }
            if status.get("startTime").is_none() && !suspended {
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
                        ctl.store
                            .record_event(&mj, etype, ereason, &msg, "mpi-job-controller");
                        for p in &worker_pods {
                            let kill = match clean.as_str() {
                                "All" => true,
                                "None" => false,
                                _ => matches!(phase(p), "Running" | "Pending"),
                            };
                            if kill {
                                ctl.store.remove(PODS, &ns, name_of(p), "Background");
                            }
                        }
                    }
                    None if launcher_running && workers_running => {
                        if !cond_true(&mj, "Running") {
                            ctl.store.record_event(
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
                ctl.store
                    .mutate(id, &ns, &name, |o| o["status"] = status.clone());
            }
        }
    }
}

/// An `Arc` of the MPI Operator, for [`crate::Options::operators`].
pub fn operator() -> Arc<dyn Operator> {
    Arc::new(MpiOperator)
}

pub const OPERATOR_NAME_LABEL: &str = "training.kubeflow.org/operator-name";
pub const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
pub const JOB_ROLE_LABEL: &str = "training.kubeflow.org/job-role";
pub const REPLICA_INDEX_LABEL: &str = "training.kubeflow.org/replica-index";
pub const CONFIG_MOUNT_PATH: &str = "/etc/mpi";
const CONFIG_VOLUME: &str = "mpi-job-config";
const SSH_VOLUME: &str = "ssh-auth";
const ROOT_SSH_PATH: &str = "/root/.ssh";
const RSH_ARGS: &str = "-o ConnectionAttempts=10";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    OpenMpi,
    Intel,
    Mpich,
}

/// The MPIJob's settings after the operator's defaulting.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    pub ns: String,
    pub slots: i64,
    pub workers: i64,
    pub implementation: Implementation,
    pub ssh_path: String,
    pub launcher_as_worker: bool,
    /// `launcherCreationPolicy: WaitForWorkersReady`.
    pub wait_for_workers: bool,
    /// Gang scheduling by Volcano (`--gang-scheduling=volcano`): pods get
    /// `schedulerName: volcano` and the PodGroup annotation.
    pub volcano: bool,
}

impl JobSpec {
    pub fn of(mj: &Value) -> JobSpec {
        let implementation = match s(mj, "/spec/mpiImplementation") {
            Some("Intel") => Implementation::Intel,
            Some("MPICH") => Implementation::Mpich,
            _ => Implementation::OpenMpi,
        };
        JobSpec {
            name: name_of(mj).to_string(),
            ns: ns_of(mj).to_string(),
            slots: mj
                .pointer("/spec/slotsPerWorker")
                .and_then(Value::as_i64)
                .unwrap_or(1),
            // The operator defaults Worker replicas to 0.
            workers: mj
                .pointer("/spec/mpiReplicaSpecs/Worker")
                .map(|w| w.get("replicas").and_then(Value::as_i64).unwrap_or(0))
                .unwrap_or(0)
                .max(0),
            implementation,
            ssh_path: s(mj, "/spec/sshAuthMountPath")
                .filter(|p| !p.is_empty())
                .unwrap_or(ROOT_SSH_PATH)
                .to_string(),
            launcher_as_worker: mj
                .pointer("/spec/runLauncherAsWorker")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            wait_for_workers: s(mj, "/spec/launcherCreationPolicy") == Some("WaitForWorkersReady"),
            volcano: false,
        }
    }

    /// The PodGroup's spec (`pkg/controller/podgroup.go:VolcanoCtrl.newPodGroup`):
    /// `minMember` = `schedulingPolicy.minAvailable`, else workers + 1; `queue` =
    /// `schedulingPolicy.queue`, else the MPIJob's `scheduling.volcano.sh/queue-name`
    /// annotation; `priorityClassName` = `schedulingPolicy.priorityClass`, else the launcher's,
    /// else the worker's; `minResources` = `schedulingPolicy.minResources`, else the launcher's
    /// and (minMember − 1, at most every) workers' requests, limits where missing
    /// (`calPGMinResource`).
    pub fn pod_group_spec(&self, mj: &Value) -> Value {
        let sp = mj
            .pointer("/spec/runPolicy/schedulingPolicy")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let min = sp
            .get("minAvailable")
            .and_then(Value::as_i64)
            .unwrap_or(self.workers + 1);
        let queue = s(&sp, "/queue")
            .filter(|q| !q.is_empty())
            .or(mj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::volcano::QUEUE_ANNOTATION))
                .and_then(Value::as_str))
            .unwrap_or("default");
        let tmpl = |role: &str| {
            mj.pointer(&format!("/spec/mpiReplicaSpecs/{role}/template"))
                .cloned()
                .unwrap_or_else(|| json!({}))
        };
        let (lt, wt) = (tmpl("Launcher"), tmpl("Worker"));
        let prio = s(&sp, "/priorityClass")
            .or(s(&lt, "/spec/priorityClassName"))
            .or(s(&wt, "/spec/priorityClassName"))
            .filter(|p| !p.is_empty());
        let mut spec = json!({"minMember": min, "queue": queue});
        if let Some(p) = prio {
            spec["priorityClassName"] = json!(p);
        }
        let min_res = match sp.get("minResources") {
            Some(r) => Some(r.clone()),
            None if min > 0 => {
                let workers = self.workers.min((min - 1).max(0));
                crate::volcano::min_resources(&[(&lt, 1), (&wt, workers)])
            }
            None => None,
        };
        if let Some(r) = min_res {
            spec["minResources"] = r;
        }
        spec
    }

    /// `decoratePodTemplateSpec`: Volcano schedules the pod, as a member of the job's group.
    fn gang(&self, meta: &mut Value, spec: &mut Value) {
        if !self.volcano {
            return;
        }
        spec["schedulerName"] = json!(crate::volcano::SCHEDULER);
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        meta["annotations"][crate::volcano::GROUP_ANNOTATION] = json!(self.name);
    }

    /// `<pod>.<job>.<ns>.svc`: what the operator writes for each host.
    pub fn fqdn(&self, pod: &str) -> String {
        format!("{pod}.{}.{}.svc", self.name, self.ns)
    }

    pub fn worker_name(&self, i: i64) -> String {
        format!("{}-worker-{i}", self.name)
    }

    pub fn launcher_name(&self) -> String {
        format!("{}-launcher", self.name)
    }

    /// One line per host: the launcher first when it runs as a worker, then every worker
    /// replica (whether or not its pod exists yet).
    pub fn hostfile(&self) -> String {
        let launcher = self
            .launcher_as_worker
            .then(|| self.launcher_name())
            .into_iter();
        launcher
            .chain((0..self.workers).map(|i| self.worker_name(i)))
            .map(|h| match self.implementation {
                Implementation::OpenMpi => format!("{} slots={}\n", self.fqdn(&h), self.slots),
                Implementation::Intel | Implementation::Mpich => {
                    format!("{}:{}\n", self.fqdn(&h), self.slots)
                }
            })
            .collect()
    }

    /// `discover_hosts.sh`: `echo <fqdn>` for the launcher (when it runs as a worker) and for
    /// each Running worker pod, sorted by pod name. No slot counts, as the operator writes it.
    pub fn discover_hosts(&self, running_workers: &[&str]) -> String {
        let mut names: Vec<&str> = running_workers.to_vec();
        names.sort_unstable();
        let mut out = String::from("#!/bin/sh\n");
        if self.launcher_as_worker {
            out.push_str(&format!("echo {}\n", self.fqdn(&self.launcher_name())));
        }
        for n in names {
            out.push_str(&format!("echo {}\n", self.fqdn(n)));
        }
        out
    }

    pub fn labels(&self, role: &str) -> Value {
        json!({
            OPERATOR_NAME_LABEL: "mpi-operator",
            JOB_NAME_LABEL: self.name,
            JOB_ROLE_LABEL: role,
        })
    }

    /// The headless Service `<job>`, selecting every pod of the job.
    pub fn service(&self, owner: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "spec": {
                "clusterIP": "None",
                "selector": {OPERATOR_NAME_LABEL: "mpi-operator", JOB_NAME_LABEL: self.name},
                "publishNotReadyAddresses": self.launcher_as_worker,
            },
        })
    }

    /// The Secret `<job>-ssh` with a fresh ed25519 key pair (the operator makes an ECDSA P-521
    /// one; OpenSSH treats both alike).
    pub fn ssh_secret(&self, owner: Value) -> Result<Value, String> {
        let key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
            .map_err(|e| format!("generating an ssh key: {e}"))?;
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| format!("encoding the ssh key: {e}"))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| format!("encoding the ssh public key: {e}"))?;
        Ok(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
            "metadata": {"name": format!("{}-ssh", self.name), "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "data": {
                "ssh-privatekey": util::base64(private.as_bytes()),
                "ssh-publickey": util::base64(format!("{public}\n").as_bytes()),
            },
        }))
    }

    pub fn config_map(&self, owner: Value, data: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-config", self.name), "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "data": data,
        })
    }

    /// The ssh Secret volume on the pod and its mount on the first container.
    fn setup_ssh(&self, spec: &mut Value) {
        let mut secret = json!({
            "secretName": format!("{}-ssh", self.name),
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
        });
        if self.ssh_path == ROOT_SSH_PATH {
            secret["defaultMode"] = json!(0o600);
        }
        push(
            spec,
            "volumes",
            json!({"name": SSH_VOLUME, "secret": secret}),
        );
        if let Some(c) = first_container(spec) {
            push(
                c,
                "volumeMounts",
                json!({"name": SSH_VOLUME, "mountPath": self.ssh_path}),
            );
        }
    }

    /// Worker pod `i` from the Worker template (restartPolicy already applied).
    pub fn worker_pod(&self, template: &Value, i: i64, owner: Value) -> Value {
        let name = self.worker_name(i);
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        merge(&mut labels, &self.labels("worker"));
        let index = if self.launcher_as_worker { i + 1 } else { i };
        labels[REPLICA_INDEX_LABEL] = json!(index.to_string());
        let mut spec = template
            .get("spec")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        spec["hostname"] = json!(name);
        spec["subdomain"] = json!(self.name);
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
        }
        let search = format!("{}.{}.svc.cluster.local", self.name, self.ns);
        if !spec["dnsConfig"].is_object() {
            spec["dnsConfig"] = json!({});
        }
        push(&mut spec["dnsConfig"], "searches", json!(search));
        if let Some(c) = first_container(&mut spec) {
            let no_cmd = |k: &str| c.get(k).and_then(Value::as_array).is_none_or(Vec::is_empty);
            if no_cmd("command") && no_cmd("args") {
                c["command"] = json!(["/usr/sbin/sshd", "-De"]);
            }
            push(
                c,
                "env",
                json!({"name": "K_MPI_JOB_ROLE", "value": "worker"}),
            );
        }
        self.setup_ssh(&mut spec);
        let mut meta = json!({"name": name, "namespace": self.ns, "labels": labels, "ownerReferences": [owner]});
        if let Some(a) = template.pointer("/metadata/annotations") {
            meta["annotations"] = a.clone();
        }
        self.gang(&mut meta, &mut spec);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    }

    /// The launcher Job's pod template from the Launcher template (restartPolicy applied).
    pub fn launcher_template(&self, template: &Value) -> Value {
        let mut t = template.clone();
        if !t.is_object() {
            t = json!({});
        }
        let mut labels = t
            .pointer("/metadata/labels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        merge(&mut labels, &self.labels("launcher"));
        if self.launcher_as_worker {
            labels[REPLICA_INDEX_LABEL] = json!("0");
        }
        if !t["metadata"].is_object() {
            t["metadata"] = json!({});
        }
        t["metadata"]["labels"] = labels;
        if !t["spec"].is_object() {
            t["spec"] = json!({});
        }
        let spec = &mut t["spec"];
        spec["hostname"] = json!(self.launcher_name());
        spec["subdomain"] = json!(self.name);
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
        }
        let hostfile = format!("{CONFIG_MOUNT_PATH}/hostfile");
        let slots = self.slots.to_string();
        let mut env: Vec<(&str, &str)> = vec![("K_MPI_JOB_ROLE", "launcher")];
        match self.implementation {
            Implementation::OpenMpi => env.extend([
                ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", hostfile.as_str()),
                ("OMPI_MCA_plm_rsh_args", RSH_ARGS),
                ("OMPI_MCA_orte_set_default_slots", slots.as_str()),
            ]),
            Implementation::Intel => env.extend([
                ("I_MPI_HYDRA_HOST_FILE", hostfile.as_str()),
                ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", RSH_ARGS),
                ("I_MPI_PERHOST", slots.as_str()),
            ]),
            Implementation::Mpich => env.extend([
                ("HYDRA_HOST_FILE", hostfile.as_str()),
                ("HYDRA_LAUNCH_EXTRA_ARGS", RSH_ARGS),
            ]),
        }
        if !self.launcher_as_worker {
            // Empty values: the launcher must not use GPUs.
            env.extend([
                ("NVIDIA_VISIBLE_DEVICES", ""),
                ("NVIDIA_DRIVER_CAPABILITIES", ""),
            ]);
        }
        if let Some(c) = first_container(spec) {
            for (k, v) in env {
                push(c, "env", json!({"name": k, "value": v}));
            }
        }
        self.setup_ssh(spec);
        push(
            spec,
            "volumes",
            json!({"name": CONFIG_VOLUME, "configMap": {
                "name": format!("{}-config", self.name),
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            }}),
        );
        if let Some(c) = first_container(spec) {
            push(
                c,
                "volumeMounts",
                json!({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH}),
            );
        }
        let (mut meta, mut spec) = (t["metadata"].take(), t["spec"].take());
        self.gang(&mut meta, &mut spec);
        t["metadata"] = meta;
        t["spec"] = spec;
        t
    }
}

fn first_container(spec: &mut Value) -> Option<&mut Value> {
    spec.pointer_mut("/containers/0").filter(|c| c.is_object())
}

/// Appends to the array `key` of `obj` (created when absent), as the operator's `append`.
fn push(obj: &mut Value, key: &str, item: Value) {
    if !obj[key].is_array() {
        obj[key] = json!([]);
    }
    obj[key].as_array_mut().expect("array").push(item);
}

fn merge(into: &mut Value, from: &Value) {
    if let Some(m) = from.as_object() {
        for (k, v) in m {
            into[k] = v.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: Value) -> JobSpec {
        let mut mj = json!({"metadata": {"name": "pi", "namespace": "ns1"},
            "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": {"Worker": {"replicas": 2}}}});
        merge(&mut mj["spec"], &extra);
        JobSpec::of(&mj)
    }

    #[test]
    fn hostfile_forms() {
        assert_eq!(
            job(json!({})).hostfile(),
            "pi-worker-0.pi.ns1.svc slots=2\npi-worker-1.pi.ns1.svc slots=2\n"
        );
        assert_eq!(
            job(json!({"mpiImplementation": "MPICH", "runLauncherAsWorker": true})).hostfile(),
            "pi-launcher.pi.ns1.svc:2\npi-worker-0.pi.ns1.svc:2\npi-worker-1.pi.ns1.svc:2\n"
        );
        assert_eq!(
            job(json!({})).discover_hosts(&["pi-worker-1", "pi-worker-0"]),
            "#!/bin/sh\necho pi-worker-0.pi.ns1.svc\necho pi-worker-1.pi.ns1.svc\n"
        );
        assert_eq!(job(json!({})).discover_hosts(&[]), "#!/bin/sh\n");
    }

    #[test]
    fn ssh_modes_and_worker_defaults() {
        let t = json!({"spec": {"containers": [{"name": "w", "image": "i"}, {"name": "side", "image": "i"}]}});
        let p = job(json!({})).worker_pod(&t, 1, json!({}));
        assert_eq!(p["spec"]["volumes"][0]["secret"]["defaultMode"], 0o600);
        assert_eq!(
            p["spec"]["containers"][0]["command"],
            json!(["/usr/sbin/sshd", "-De"])
        );
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/root/.ssh"
        );
        assert!(p["spec"]["containers"][1].get("volumeMounts").is_none());
        assert_eq!(p["metadata"]["labels"][REPLICA_INDEX_LABEL], "1");
        let p = job(json!({"sshAuthMountPath": "/home/u/.ssh"})).worker_pod(&t, 0, json!({}));
        assert!(
            p["spec"]["volumes"][0]["secret"]
                .get("defaultMode")
                .is_none()
        );
        let l = job(json!({"mpiImplementation": "Intel"})).launcher_template(&t);
        let env = &l["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "I_MPI_PERHOST" && e["value"] == "2")
        );
        assert_eq!(
            l["spec"]["volumes"][1]["configMap"]["items"][1]["mode"],
            0o555
        );
    }
}
