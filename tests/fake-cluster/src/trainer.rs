//! Kubeflow Trainer v2.3.0 (`trainer.kubeflow.org/v1alpha1`) and JobSet
//! (`jobset.x-k8s.io/v1alpha2`), as far as an MPI TrainJob goes: `fake-cluster --trainer`.
//!
//! The Trainer ([`TrainerOperator`]) turns a TrainJob and its runtime into a JobSet named like
//! the TrainJob, the ssh Secret `<job>-mpi-ssh-auth` and the hostfile ConfigMap
//! `<job>-mpi-hostfile`, and copies the JobSet's Completed/Failed conditions onto the TrainJob
//! as Complete/Failed, besides its own Suspended. What it does, read from the Trainer's
//! v2.3.0 source:
//! - `pkg/runtime/framework/plugins/mpi/mpi.go` (`EnforceMLPolicy`, `Build`): node count
//!   (numNodes, less one when the launcher runs as a node), the Secret volume `mpi-ssh-auth`
//!   (items `id_rsa` 0640, `id_rsa.pub` and `authorized_keys` 0644, defaultMode 0400) mounted
//!   at `sshAuthMountPath` on containers named `node`, the ConfigMap volume `mpi-hostfile`
//!   (`hostfile` 0444) at `/etc/mpi` and the `OMPI_MCA_*` environment on the launcher's
//!   `node` container; hostfile lines `<endpoint> slots=<numProcPerNode>`; only OpenMPI.
//! - `pkg/runtime/framework/plugins/jobset/jobset.go` (`IdentifyPodNetwork`, `Build`,
//!   `Status`) and `builder.go` (`Trainer`): endpoints `<job>-<rjob>-<jobIdx>-<podIdx>.<job>`;
//!   spec.trainer's image, command, args and env go to the `node` container of every job
//!   labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer`; a JobSet is built once
//!   (updated only while suspended).
//! - `pkg/runtime/core/trainingruntime.go` (`newRuntimeInfo`): spec.trainer.resourcesPerNode
//!   merged over those containers' resources; such a job's pod count is the runtime's
//!   `mlPolicy.numNodes` (the `node` job's is the MPI plugin's).
//! - `manifests/overlays/manager/kustomization.yaml`: the ConfigMap
//!   `kubeflow-system/kubeflow-trainer-public` with `kubeflow_trainer_version`.
//! - `pkg/controller/trainjob_controller.go`: the Suspended condition (Suspended / Resumed).
//!
//! JobSet ([`JobSetOperator`]), from kubernetes-sigs/jobset's
//! `pkg/controllers/jobset_controller.go`: a headless Service named by the subdomain (the
//! JobSet's name) selecting its pods; Jobs `<jobset>-<rjob>-<idx>` (Indexed, so pods are
//! hostnamed `<job>-<index>` under that subdomain) labelled and annotated with
//! `jobset.sigs.k8s.io/{jobset-name,replicatedjob-name,job-index,...}`, a replicated job
//! started only once those it `dependsOn` are Ready; Completed when the success policy's jobs
//! complete, Failed at the first failed Job; active Jobs deleted once it is finished.
//!
//! The ssh key is ed25519 (the Trainer makes an ECDSA P-521 one; OpenSSH treats both alike).

use serde_json::{Value, json};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};
use std::sync::Arc;

use crate::controllers::{Controllers, Operator, all, deleting, owned_by, owner_ref};
use crate::error::{ApiError, ApiResult};
use crate::resources::{self, CONFIGMAPS, JOBS, ResourceDef, SECRETS, SERVICES};
use crate::util::{self, fmt_time, name_of, ns_of, s, uid_of};

const fn def(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    status_sub: bool,
    validate: Option<crate::resources::Validator>,
) -> ResourceDef {
    ResourceDef {
        group: "trainer.kubeflow.org",
        version: "v1alpha1",
        kind,
        plural,
        singular,
        namespaced,
        short_names: &[],
        status_sub,
        custom: true,
        categories: &[],
        validate,
    }
}

pub static TRAINJOBS: ResourceDef = ResourceDef {
    categories: &["all", "kubeflow"],
    ..def(
        "TrainJob",
        "trainjobs",
        "trainjob",
        true,
        true,
        Some(validate_trainjob),
    )
};

pub static TRAININGRUNTIMES: ResourceDef = def(
    "TrainingRuntime",
    "trainingruntimes",
    "trainingruntime",
    true,
    false,
    Some(validate_runtime),
);

pub static CLUSTERTRAININGRUNTIMES: ResourceDef = def(
    "ClusterTrainingRuntime",
    "clustertrainingruntimes",
    "clustertrainingruntime",
    false,
    false,
    Some(validate_runtime),
);

pub static JOBSETS: ResourceDef = ResourceDef {
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    kind: "JobSet",
    plural: "jobsets",
    singular: "jobset",
    namespaced: true,
    short_names: &[],
    status_sub: true,
    custom: true,
    categories: &["all"],
    validate: None,
};

/// The CRD: `spec.runtimeRef.name` is required.
fn validate_trainjob(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    if s(obj, "/spec/runtimeRef/name").is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            def,
            name,
            "spec.runtimeRef.name",
            "FieldValueRequired",
            "Required value",
        ));
    }
    Ok(())
}

/// The CRD's enum: `mlPolicy.mpi.mpiImplementation` is OpenMPI (its default) only.
fn validate_runtime(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    match s(obj, "/spec/mlPolicy/mpi/mpiImplementation") {
        None | Some("OpenMPI") => Ok(()),
        Some(other) => Err(ApiError::invalid(
            def,
            name,
            "spec.mlPolicy.mpi.mpiImplementation",
            "FieldValueNotSupported",
            &format!("Unsupported value: \"{other}\": supported values: \"OpenMPI\""),
        )),
    }
}

const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const LAUNCHER: &str = "launcher";
const NODE: &str = "node";
const HOSTFILE_DIR: &str = "/etc/mpi";

use crate::controllers::set_meta_condition as set_cond;

fn cond<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| s(c, "/type") == Some(t))
}

fn cond_true(v: &Value, t: &str) -> bool {
    cond(v, t).is_some_and(|c| s(c, "/status") == Some("True"))
}

/// Appends `item` to the array `key` of `obj`, replacing an entry with the same name (the
/// Trainer's `apply.Upsert*`).
fn upsert(obj: &mut Value, key: &str, item: Value) {
    if !obj[key].is_array() {
        obj[key] = json!([]);
    }
    let list = obj[key].as_array_mut().expect("array");
    match list.iter_mut().find(|x| x.get("name") == item.get("name")) {
        Some(x) => *x = item,
        None => list.push(item),
    }
}

/// Merges the string map at `from` into the one at `into` (made a map if it is none).
fn merge_map(into: &mut Value, from: Option<&Value>) {
    if !into.is_object() {
        *into = json!({});
    }
    let Some(m) = from.and_then(Value::as_object) else {
        return;
    };
    for (k, v) in m {
        into[k] = v.clone();
    }
}

/// The Trainer: TrainJobs and their runtimes.
#[derive(Debug)]
pub struct TrainerOperator;

/// JobSet's controller.
#[derive(Debug)]
pub struct JobSetOperator;

/// The operators `fake-cluster --trainer` runs.
pub fn operators() -> Vec<Arc<dyn Operator>> {
    vec![Arc::new(TrainerOperator), Arc::new(JobSetOperator)]
}

/// The MPI policy after the Trainer's defaults and the TrainJob's overrides.
pub(crate) struct Mpi {
    nodes: i64,
    slots: i64,
    ssh_path: String,
    launcher_as_node: bool,
}

impl Mpi {
    pub(crate) fn of(tj: &Value, rt: &Value) -> Mpi {
        let int = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_i64);
        let num_nodes = int(tj, "/spec/trainer/numNodes")
            .or(int(rt, "/spec/mlPolicy/numNodes"))
            .unwrap_or(1);
        let launcher_as_node = rt
            .pointer("/spec/mlPolicy/mpi/runLauncherAsNode")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Mpi {
            nodes: if launcher_as_node {
                (num_nodes - 1).max(1)
            } else {
                num_nodes
            },
            slots: int(tj, "/spec/trainer/numProcPerNode")
                .or(int(rt, "/spec/mlPolicy/mpi/numProcPerNode"))
                .unwrap_or(1),
            ssh_path: s(rt, "/spec/mlPolicy/mpi/sshAuthMountPath")
                .unwrap_or("/root/.ssh")
                .to_string(),
            launcher_as_node,
        }
    }
}

/// Where the Trainer is installed, and its public ConfigMap there: what clients read of the
/// installation (the Kubeflow SDK its `kubeflow_trainer_version`). From v2.3.0's
/// `manifests/overlays/manager/kustomization.yaml` (namespace, `configMapGenerator`) and
/// `manifests/base/rbac/public_configmap_role*.yaml` (readable by every authenticated user).
pub const SYSTEM_NAMESPACE: &str = "kubeflow-system";
pub const PUBLIC_CONFIGMAP: &str = "kubeflow-trainer-public";
pub const VERSION: &str = "v2.3.0";

impl Operator for TrainerOperator {
    fn name(&self) -> &'static str {
        "trainjob-controller"
    }

    fn start(&self, store: &crate::store::Store) {
        let opts = crate::store::WriteOpts::default();
        let _ = store.create(
            resources::NAMESPACES,
            "",
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": SYSTEM_NAMESPACE}}),
            &opts,
        );
        let _ = store.create(
            CONFIGMAPS,
            SYSTEM_NAMESPACE,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": PUBLIC_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
                "data": {"kubeflow_trainer_version": VERSION}}),
            &opts,
        );
    }

    fn resources(&self) -> Vec<&'static ResourceDef> {
        vec![&TRAINJOBS, &TRAININGRUNTIMES, &CLUSTERTRAININGRUNTIMES]
    }

    fn reconcile(&self, ctl: &Controllers, now: i64) {
        let id = resources::register(&TRAINJOBS);
        let (ls, fs) = all();
        let (tjs, _) = ctl.store.list(id, None, &ls, &fs);
        let now_s = fmt_time(now);
        for tj in tjs {
            if deleting(&tj) {
                continue;
            }
            let (ns, name) = (ns_of(&tj).to_string(), name_of(&tj).to_string());
            let rt_name = s(&tj, "/spec/runtimeRef/name").unwrap_or_default();
            let runtime = runtime_of(&ctl.store, &tj);
            let mut status = tj
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            let suspend = tj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            if suspend {
                set_cond(
                    &mut status,
                    "Suspended",
                    "True",
                    "Suspended",
                    "TrainJob is suspended",
                    &now_s,
                );
            } else if cond_true(&tj, "Suspended") {
                set_cond(
                    &mut status,
                    "Suspended",
                    "False",
                    "Resumed",
                    "TrainJob is resumed",
                    &now_s,
                );
            }
            let finished = cond_true(&tj, "Complete") || cond_true(&tj, "Failed");
            match &runtime {
                None if !finished => {
                    let kind = s(&tj, "/spec/runtimeRef/kind").unwrap_or("ClusterTrainingRuntime");
                    ctl.store.record_event(
                        &tj,
                        "Warning",
                        "TrainJobResourcesCreationFailed",
                        &format!("{kind} {rt_name} is not found"),
                        "trainjob-controller",
                    );
                }
                Some(rt) if !finished => build(ctl, &tj, rt, suspend),
                _ => {}
            }
            let js = ctl.store.get(resources::register(&JOBSETS), &ns, &name);
            if let Some(js) = &js {
                for (from, to) in [("Completed", "Complete"), ("Failed", "Failed")] {
                    if let Some(c) = cond(js, from).filter(|c| s(c, "/status") == Some("True")) {
                        set_cond(
                            &mut status,
                            to,
                            "True",
                            s(c, "/reason").unwrap_or_default(),
                            s(c, "/message").unwrap_or_default(),
                            s(c, "/lastTransitionTime").unwrap_or(&now_s),
                        );
                    }
                }
                if let Some(rjs) = js.pointer("/status/replicatedJobsStatus") {
                    status["jobsStatus"] = rjs.clone();
                }
            }
            if tj.get("status") != Some(&status) {
                if !cond_true(&tj, "Complete") && status_true(&status, "Complete") {
                    ctl.store.record_event(
                        &tj,
                        "Normal",
                        "Completed",
                        &format!("TrainJob {ns}/{name} is completed"),
                        "trainjob-controller",
                    );
                }
                ctl.store
                    .mutate(id, &ns, &name, |o| o["status"] = status.clone());
            }
        }
    }
}

/// The runtime a TrainJob names (`spec.runtimeRef`: a ClusterTrainingRuntime unless the kind
/// says TrainingRuntime, in the TrainJob's namespace).
pub(crate) fn runtime_of(store: &crate::store::Store, tj: &Value) -> Option<Arc<Value>> {
    let rt_name = s(tj, "/spec/runtimeRef/name").unwrap_or_default();
    match s(tj, "/spec/runtimeRef/kind") {
        Some("TrainingRuntime") => {
            store.get(resources::register(&TRAININGRUNTIMES), ns_of(tj), rt_name)
        }
        _ => store.get(resources::register(&CLUSTERTRAININGRUNTIMES), "", rt_name),
    }
}

fn status_true(status: &Value, t: &str) -> bool {
    status["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| s(c, "/type") == Some(t) && s(c, "/status") == Some("True"))
    })
}

/// The Trainer's objects for TrainJob `tj` on runtime `rt`: Secret, hostfile ConfigMap and
/// JobSet (made once; while suspended its `suspend` follows the TrainJob's).
fn build(ctl: &Controllers, tj: &Value, rt: &Value, suspend: bool) {
    let (ns, name) = (ns_of(tj).to_string(), name_of(tj).to_string());
    let mpi = Mpi::of(tj, rt);
    let secret = format!("{name}-mpi-ssh-auth");
    if ctl.store.get(SECRETS, &ns, &secret).is_none() {
        match ssh_secret(&secret, &ns, owner_ref(tj)) {
            Ok(sec) => ctl.create(SECRETS, &ns, sec, tj, "secret"),
            Err(e) => ctl.store.record_event(
                tj,
                "Warning",
                "TrainJobResourcesCreationFailed",
                &e,
                "trainjob-controller",
            ),
        }
    }
    let jobsets = resources::register(&JOBSETS);
    let spec = rt
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let rjobs: Vec<Value> = spec["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Hostfile: every node endpoint (the launcher's too when it runs as a node), in the
    // runtime's order of replicated jobs.
    let mut hostfile = String::new();
    for rj in &rjobs {
        let rname = s(rj, "/name").unwrap_or_default();
        let is_node = rname == NODE || (mpi.launcher_as_node && rname == LAUNCHER);
        if !is_node {
            continue;
        }
        let (replicas, pods) = if rname == NODE {
            (
                rj.get("replicas").and_then(Value::as_i64).unwrap_or(1),
                mpi.nodes,
            )
        } else {
            (1, 1)
        };
        for r in 0..replicas {
            for p in 0..pods {
                hostfile.push_str(&format!(
                    "{name}-{rname}-{r}-{p}.{name} slots={}\n",
                    mpi.slots
                ));
            }
        }
    }
    let cm_name = format!("{name}-mpi-hostfile");
    let data = json!({"hostfile": hostfile});
    match ctl.store.get(CONFIGMAPS, &ns, &cm_name) {
        None => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": cm_name, "namespace": ns, "ownerReferences": [owner_ref(tj)]},
                "data": data});
            ctl.create(CONFIGMAPS, &ns, cm, tj, "configmap");
        }
        Some(cm) if cm.get("data") != Some(&data) => {
            ctl.store
                .mutate(CONFIGMAPS, &ns, &cm_name, |c| c["data"] = data.clone());
        }
        Some(_) => {}
    }
    if rt.pointer("/spec/podGroupPolicy/volcano").is_some() && crate::volcano::served(&ctl.store) {
        // The volcano plugin's `Build`: once made, the PodGroup is rebuilt only while the
        // TrainJob is suspended.
        let pg = resources::register(&crate::volcano::PODGROUPS);
        if suspend || ctl.store.get(pg, &ns, &name).is_none() {
            let js = jobset(tj, rt, &mpi, spec.clone(), suspend);
            crate::volcano::ensure_pod_group(ctl, tj, &name, pod_group_spec(tj, rt, &js));
        }
    }
    if let Some(js) = ctl.store.get(jobsets, &ns, &name) {
        let was = js.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
        if was {
            // Rebuilt only while suspended (the JobSet plugin's `Build`): what Kueue wrote
            // into its runtime patch on admission reaches the pods.
            let fresh = jobset(tj, rt, &mpi, spec, suspend);
            ctl.store.mutate(jobsets, &ns, &name, |o| {
                o["spec"] = fresh["spec"].clone();
                for k in ["labels", "annotations"] {
                    if fresh["metadata"][k].is_object() {
                        o["metadata"][k] = fresh["metadata"][k].clone();
                    }
                }
            });
        } else if suspend {
            ctl.store
                .mutate(jobsets, &ns, &name, |o| o["spec"]["suspend"] = json!(true));
        }
        return;
    }
    let js = jobset(tj, rt, &mpi, spec, suspend);
    ctl.create(jobsets, &ns, js, tj, "jobset");
}

/// The PodGroup spec of the Trainer's volcano plugin (`plugins/volcano/volcano.go`):
/// `minMember` every pod of the JobSet, `minResources` their requests, `priorityClassName`
/// the last replicated job's that sets one, `queue` from the annotation
/// `scheduling.volcano.sh/queue-name` of the runtime's template or a runtime patch's (not the
/// TrainJob's own annotations; `default`, the CRD's default, without one).
fn pod_group_spec(tj: &Value, rt: &Value, js: &Value) -> Value {
    let mut min = 0;
    let mut sets = Vec::new();
    let mut prio = None;
    for rj in js["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let n = rj.get("replicas").and_then(Value::as_i64).unwrap_or(1)
            * rj.pointer("/template/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1);
        min += n;
        let pod = &rj["template"]["spec"]["template"];
        sets.push((pod, n));
        if let Some(p) = s(pod, "/spec/priorityClassName").filter(|p| !p.is_empty()) {
            prio = Some(p.to_string());
        }
    }
    let mut annotations = json!({});
    merge_map(
        &mut annotations,
        rt.pointer("/spec/template/metadata/annotations"),
    );
    for p in tj
        .pointer("/spec/runtimePatches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        merge_map(
            &mut annotations,
            p.pointer("/trainingRuntimeSpec/template/metadata/annotations"),
        );
    }
    let queue = s(
        &annotations,
        &format!("/{}", crate::volcano::QUEUE_ANNOTATION.replace('/', "~1")),
    )
    .filter(|q| !q.is_empty())
    .unwrap_or("default");
    let mut spec = json!({"minMember": min, "queue": queue});
    if let Some(p) = prio {
        spec["priorityClassName"] = json!(p);
    }
    if let Some(r) = crate::volcano::min_resources(&sets) {
        spec["minResources"] = r;
    }
    spec
}

/// The JobSet of TrainJob `tj` from runtime `rt`'s template.
pub(crate) fn jobset(tj: &Value, rt: &Value, mpi: &Mpi, mut spec: Value, suspend: bool) -> Value {
    let (ns, name) = (ns_of(tj), name_of(tj));
    let mut meta = json!({"name": name, "namespace": ns, "ownerReferences": [owner_ref(tj)]});
    merge_map(
        &mut meta["labels"],
        rt.pointer("/spec/template/metadata/labels"),
    );
    merge_map(
        &mut meta["annotations"],
        rt.pointer("/spec/template/metadata/annotations"),
    );
    let patches: Vec<Value> = tj
        .pointer("/spec/runtimePatches")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let secret = format!("{name}-mpi-ssh-auth");
    let hostfile_cm = format!("{name}-mpi-hostfile");
    let rjobs = spec["replicatedJobs"].as_array_mut();
    for rj in rjobs.into_iter().flatten() {
        let rname = s(rj, "/name").unwrap_or_default().to_string();
        let trainer_job = rj
            .pointer("/template/metadata/labels")
            .and_then(|l| l.get(ANCESTOR_LABEL))
            .and_then(Value::as_str)
            == Some("trainer");
        if trainer_job {
            rj["replicas"] = json!(1);
        }
        // Pods per job (`pkg/runtime/core/trainingruntime.go`, `newRuntimeInfo`): a trainer
        // job's count is the runtime's `mlPolicy.numNodes`, the `node` job's the MPI
        // plugin's (`mpi.go`, `EnforceMLPolicy`: `spec.trainer.numNodes`); any other job
        // keeps its template's parallelism.
        let count = if rname == NODE {
            Some(mpi.nodes)
        } else if trainer_job {
            Some(
                rt.pointer("/spec/mlPolicy/numNodes")
                    .and_then(Value::as_i64)
                    .unwrap_or(1),
            )
        } else {
            None
        };
        if let Some(n) = count {
            rj["template"]["spec"]["parallelism"] = json!(n);
            rj["template"]["spec"]["completions"] = json!(n);
        }
        let pod = &mut rj["template"]["spec"]["template"];
        if rname == NODE || rname == LAUNCHER {
            let pspec = &mut pod["spec"];
            upsert(
                pspec,
                "volumes",
                json!({"name": "mpi-ssh-auth", "secret": {"secretName": secret, "defaultMode": 0o400,
                "items": [
                    {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                    {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                    {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
                ]}}),
            );
            if rname == LAUNCHER {
                upsert(
                    pspec,
                    "volumes",
                    json!({"name": "mpi-hostfile", "configMap": {"name": hostfile_cm,
                        "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}}),
                );
            }
            for c in pspec["containers"].as_array_mut().into_iter().flatten() {
                if s(c, "/name") != Some(NODE) {
                    continue;
                }
                upsert(
                    c,
                    "volumeMounts",
                    json!({"name": "mpi-ssh-auth", "mountPath": mpi.ssh_path}),
                );
                if rname == LAUNCHER {
                    upsert(
                        c,
                        "volumeMounts",
                        json!({"name": "mpi-hostfile", "mountPath": HOSTFILE_DIR}),
                    );
                    for (k, v) in [
                        (
                            "OMPI_MCA_orte_default_hostfile",
                            format!("{HOSTFILE_DIR}/hostfile"),
                        ),
                        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true".into()),
                        ("OMPI_MCA_orte_set_default_slots", mpi.slots.to_string()),
                        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10".into()),
                    ] {
                        upsert(c, "env", json!({"name": k, "value": v}));
                    }
                }
            }
        }
        // spec.trainer reaches the `node` container of every trainer job
        // (`pkg/runtime/framework/plugins/jobset/builder.go`, `Trainer`: image, command and
        // args; env there and, when the launcher runs as a node, on the `node` job too) and
        // its resourcesPerNode is merged over the same containers' resources, key by key
        // (`pkg/runtime/core/trainingruntime.go`, `newRuntimeInfo`, a strategic merge).
        if trainer_job || (mpi.launcher_as_node && rname == NODE) {
            for c in pod["spec"]["containers"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                if s(c, "/name") != Some(NODE) {
                    continue;
                }
                if trainer_job {
                    for k in ["image", "command", "args"] {
                        if let Some(v) = tj.pointer(&format!("/spec/trainer/{k}")) {
                            c[k] = v.clone();
                        }
                    }
                }
                if let Some(r) = tj
                    .pointer("/spec/trainer/resourcesPerNode")
                    .and_then(Value::as_object)
                {
                    for k in ["limits", "requests"] {
                        if r.get(k).is_some_and(Value::is_object) {
                            merge_map(&mut c["resources"][k], r.get(k));
                        }
                    }
                }
                for e in tj
                    .pointer("/spec/trainer/env")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    upsert(c, "env", e.clone());
                }
            }
        }
        // Runtime patches: metadata of the Job template and its pod template; the pod
        // fields a patch may set.
        for p in &patches {
            let Some(rp) = p
                .pointer("/trainingRuntimeSpec/template/spec/replicatedJobs")
                .and_then(Value::as_array)
                .and_then(|l| l.iter().find(|x| s(x, "/name") == Some(rname.as_str())))
            else {
                continue;
            };
            merge_map(
                &mut rj["template"]["metadata"]["labels"],
                rp.pointer("/template/metadata/labels"),
            );
            merge_map(
                &mut rj["template"]["metadata"]["annotations"],
                rp.pointer("/template/metadata/annotations"),
            );
            let pod = &mut rj["template"]["spec"]["template"];
            merge_map(
                &mut pod["metadata"]["labels"],
                rp.pointer("/template/spec/template/metadata/labels"),
            );
            merge_map(
                &mut pod["metadata"]["annotations"],
                rp.pointer("/template/spec/template/metadata/annotations"),
            );
            if let Some(ps) = rp
                .pointer("/template/spec/template/spec")
                .and_then(Value::as_object)
            {
                for (k, v) in ps {
                    if k != "containers" && k != "initContainers" {
                        pod["spec"][k] = v.clone();
                    }
                }
            }
        }
    }
    for p in &patches {
        merge_map(
            &mut meta["labels"],
            p.pointer("/trainingRuntimeSpec/template/metadata/labels"),
        );
        merge_map(
            &mut meta["annotations"],
            p.pointer("/trainingRuntimeSpec/template/metadata/annotations"),
        );
    }
    // The volcano plugin's `EnforcePodGroupPolicy`: every pod joins the TrainJob's PodGroup.
    if rt.pointer("/spec/podGroupPolicy/volcano").is_some() {
        for rj in spec["replicatedJobs"].as_array_mut().into_iter().flatten() {
            let ann = &mut rj["template"]["spec"]["template"]["metadata"]["annotations"];
            merge_map(ann, Some(&json!({crate::volcano::GROUP_ANNOTATION: name})));
        }
    }
    if suspend {
        spec["suspend"] = json!(true);
    }
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": spec})
}

/// The Secret `<job>-mpi-ssh-auth` (`kubernetes.io/ssh-auth`, immutable).
fn ssh_secret(name: &str, ns: &str, owner: Value) -> Result<Value, String> {
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
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth", "immutable": true,
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner]},
        "data": {
            "ssh-privatekey": util::base64(private.as_bytes()),
            "ssh-publickey": util::base64(format!("{public}\n").as_bytes()),
        },
    }))
}

impl Operator for JobSetOperator {
    fn name(&self) -> &'static str {
        "jobset-controller"
    }

    fn resources(&self) -> Vec<&'static ResourceDef> {
        vec![&JOBSETS]
    }

    fn reconcile(&self, ctl: &Controllers, now: i64) {
        let id = resources::register(&JOBSETS);
        let (ls, fs) = all();
        let (sets, _) = ctl.store.list(id, None, &ls, &fs);
        if sets.is_empty() {
            return;
        }
        let (jobs, _) = ctl.store.list(JOBS, None, &ls, &fs);
        let now_s = fmt_time(now);
        for js in sets {
            if deleting(&js) {
                continue;
            }
            let (ns, name, uid) = (
                ns_of(&js).to_string(),
                name_of(&js).to_string(),
                uid_of(&js).to_string(),
            );
            let mine: Vec<&Arc<Value>> = owned_by(&jobs, &uid).filter(|j| !deleting(j)).collect();
            let finished = cond_true(&js, "Completed") || cond_true(&js, "Failed");
            if finished {
                for j in mine.iter().filter(|j| !job_done(j)) {
                    ctl.store.remove(JOBS, &ns, name_of(j), "Background");
                }
                continue;
            }
            let subdomain = s(&js, "/spec/network/subdomain")
                .unwrap_or(&name)
                .to_string();
            let dns = js
                .pointer("/spec/network/enableDNSHostnames")
                .and_then(Value::as_bool)
                != Some(false);
            if dns && ctl.store.get(SERVICES, &ns, &subdomain).is_none() {
                let publish = js
                    .pointer("/spec/network/publishNotReadyAddresses")
                    .and_then(Value::as_bool)
                    .unwrap_or(true);
                let svc = json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": subdomain, "namespace": ns, "ownerReferences": [owner_ref(&js)]},
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": publish,
                        "selector": {"jobset.sigs.k8s.io/jobset-name": name}}});
                ctl.create(SERVICES, &ns, svc, &js, "service");
            }
            let suspend = js.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            let rjobs: Vec<Value> = js
                .pointer("/spec/replicatedJobs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let of_rjob = |r: &str| -> Vec<&&Arc<Value>> {
                mine.iter()
                    .filter(|j| {
                        s(j, "/metadata/labels/jobset.sigs.k8s.io~1replicatedjob-name") == Some(r)
                    })
                    .collect()
            };
            let job_ready = |j: &Value| {
                let n = |k: &str| {
                    j.pointer(&format!("/status/{k}"))
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                };
                let want = j
                    .pointer("/spec/parallelism")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                n("ready") + n("succeeded") >= want
            };
            // A suspended JobSet suspends its Jobs; resumed, it resumes them.
            for j in mine.iter().filter(|j| !job_done(j)) {
                let js_ = j.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
                if js_ != suspend {
                    ctl.store.mutate(JOBS, &ns, name_of(j), |o| {
                        o["spec"]["suspend"] = json!(suspend)
                    });
                }
            }
            if !suspend {
                for rj in &rjobs {
                    let rname = s(rj, "/name").unwrap_or_default();
                    let deps_met = rj
                        .get("dependsOn")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .all(|d| {
                            let dj = of_rjob(s(d, "/name").unwrap_or_default());
                            let want = rjobs
                                .iter()
                                .find(|r| s(r, "/name") == s(d, "/name"))
                                .and_then(|r| r.get("replicas").and_then(Value::as_i64))
                                .unwrap_or(1) as usize;
                            dj.len() >= want
                                && dj.iter().all(|j| match s(d, "/status") {
                                    Some("Complete") => cond_true(j, "Complete"),
                                    _ => job_ready(j) || cond_true(j, "Complete"),
                                })
                        });
                    if !deps_met {
                        continue;
                    }
                    let replicas = rj.get("replicas").and_then(Value::as_i64).unwrap_or(1);
                    for idx in 0..replicas {
                        let jname = format!("{name}-{rname}-{idx}");
                        if mine.iter().any(|j| name_of(j) == jname)
                            || ctl.store.get(JOBS, &ns, &jname).is_some()
                        {
                            continue;
                        }
                        let job = child_job(&js, rj, rname, idx, replicas, &subdomain, dns);
                        ctl.create(JOBS, &ns, job, &js, "job");
                    }
                }
            }
            // Status.
            let mut status = js
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            let mut rstatus = Vec::new();
            for rj in &rjobs {
                let rname = s(rj, "/name").unwrap_or_default();
                let js_jobs = of_rjob(rname);
                let count = |f: &dyn Fn(&Value) -> bool| js_jobs.iter().filter(|j| f(j)).count();
                rstatus.push(json!({
                    "name": rname,
                    "ready": count(&|j| !job_done(j) && job_ready(j)),
                    "succeeded": count(&|j| cond_true(j, "Complete")),
                    "failed": count(&|j| cond_true(j, "Failed")),
                    "active": count(&|j| !job_done(j)),
                    "suspended": if suspend { count(&|j| !job_done(j)) } else { 0 },
                }));
            }
            status["replicatedJobsStatus"] = json!(rstatus);
            if let Some(f) = mine.iter().find(|j| cond_true(j, "Failed")) {
                let msg = format!(
                    "jobset failed due to one or more job failures (job {})",
                    name_of(f)
                );
                set_cond(&mut status, "Failed", "True", "FailedJobs", &msg, &now_s);
                ctl.store
                    .record_event(&js, "Warning", "FailedJobs", &msg, "jobset-controller");
            } else {
                let targets: Vec<String> = js
                    .pointer("/spec/successPolicy/targetReplicatedJobs")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect()
                    })
                    .filter(|l: &Vec<String>| !l.is_empty())
                    .unwrap_or_else(|| {
                        rjobs
                            .iter()
                            .filter_map(|r| s(r, "/name").map(String::from))
                            .collect()
                    });
                let done = targets.iter().all(|t| {
                    let j = of_rjob(t);
                    !j.is_empty() && j.iter().all(|j| cond_true(j, "Complete"))
                });
                if done {
                    let msg = "jobset completed successfully";
                    set_cond(
                        &mut status,
                        "Completed",
                        "True",
                        "AllJobsCompleted",
                        msg,
                        &now_s,
                    );
                    ctl.store.record_event(
                        &js,
                        "Normal",
                        "AllJobsCompleted",
                        msg,
                        "jobset-controller",
                    );
                }
            }
            if suspend {
                set_cond(
                    &mut status,
                    "Suspended",
                    "True",
                    "SuspendedJobs",
                    "jobset is suspended",
                    &now_s,
                );
            } else if cond_true(&js, "Suspended") {
                set_cond(
                    &mut status,
                    "Suspended",
                    "False",
                    "ResumeJobs",
                    "jobset is resumed",
                    &now_s,
                );
            }
            if js.get("status") != Some(&status) {
                status["restarts"] = json!(0);
                ctl.store
                    .mutate(id, &ns, &name, |o| o["status"] = status.clone());
            }
        }
    }
}

fn job_key(ns: &str, job: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{ns}/{job}").hash(&mut h);
    format!("{:016x}", h.finish())
}

fn job_done(j: &Value) -> bool {
    cond_true(j, "Complete") || cond_true(j, "Failed")
}

/// Job `<jobset>-<rjob>-<idx>` with JobSet's labels and annotations on it and its pods.
fn child_job(
    js: &Value,
    rj: &Value,
    rname: &str,
    idx: i64,
    replicas: i64,
    subdomain: &str,
    dns: bool,
) -> Value {
    let (ns, name) = (ns_of(js), name_of(js));
    let jname = format!("{name}-{rname}-{idx}");
    let mut template = rj.get("template").cloned().unwrap_or_else(|| json!({}));
    let ours = json!({
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": uid_of(js),
        "jobset.sigs.k8s.io/replicatedjob-name": rname,
        "jobset.sigs.k8s.io/replicatedjob-replicas": replicas.to_string(),
        "jobset.sigs.k8s.io/job-index": idx.to_string(),
        // JobSet's is the SHA-1 of `<ns>/<job>`; any stable hex digest serves here.
        "jobset.sigs.k8s.io/job-key": job_key(ns, &jname),
        "jobset.sigs.k8s.io/restart-attempt": "0",
    });
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    merge_map(&mut labels, Some(&ours));
    let mut annotations = template
        .pointer("/metadata/annotations")
        .cloned()
        .unwrap_or_else(|| json!({}));
    merge_map(&mut annotations, Some(&ours));
    let mut spec = template
        .get_mut("spec")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    // JobSet's webhook makes every child Job Indexed.
    if spec.get("completionMode").is_none() {
        spec["completionMode"] = json!("Indexed");
    }
    let pod = &mut spec["template"];
    merge_map(&mut pod["metadata"]["labels"], Some(&ours));
    merge_map(&mut pod["metadata"]["annotations"], Some(&ours));
    if dns {
        pod["spec"]["subdomain"] = json!(subdomain);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": jname, "namespace": ns, "labels": labels, "annotations": annotations,
            "ownerReferences": [owner_ref(js)]},
        "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobset_from_runtime() {
        let rt = json!({"spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "sshAuthMountPath": "/root/.ssh"}},
        "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "rt"}]}}}}},
            {"name": "launcher", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "rt"}, {"name": "side", "image": "s"}]}}}}},
        ]}}}});
        let tj = json!({"metadata": {"name": "t", "namespace": "ns", "uid": "u"},
            "spec": {"trainer": {"image": "img", "numNodes": 3, "numProcPerNode": 2, "env": [{"name": "A", "value": "1"}]},
                "runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                    {"name": "node", "template": {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}}]}}}}]}});
        let mpi = Mpi::of(&tj, &rt);
        assert_eq!((mpi.nodes, mpi.slots), (3, 2));
        let js = jobset(
            &tj,
            &rt,
            &mpi,
            rt["spec"]["template"]["spec"].clone(),
            false,
        );
        let node = &js["spec"]["replicatedJobs"][0]["template"];
        assert_eq!(node["spec"]["parallelism"], 3);
        assert_eq!(node["spec"]["template"]["metadata"]["labels"]["x"], "y");
        let nc = &node["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(nc["image"], "rt");
        assert!(nc.get("env").is_none());
        assert_eq!(nc["volumeMounts"][0]["mountPath"], "/root/.ssh");
        let l = &js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"];
        assert_eq!(l["containers"][0]["image"], "img");
        assert_eq!(l["volumes"][0]["secret"]["items"][0]["mode"], 0o640);
        let env = l["containers"][0]["env"].as_array().unwrap();
        assert!(
            env.iter()
                .any(|e| e["name"] == "OMPI_MCA_orte_default_hostfile"
                    && e["value"] == "/etc/mpi/hostfile")
        );
        assert!(env.iter().any(|e| e["name"] == "A"));
        assert!(l["containers"][1].get("volumeMounts").is_none());
    }

    /// Both jobs labelled as the trainer's (hvdctl's runtime): spec.trainer's image, command
    /// and env reach both `node` containers, resourcesPerNode is merged over each one's
    /// resources key by key, the launcher's count is the runtime's numNodes and the nodes'
    /// the TrainJob's.
    #[test]
    fn spec_trainer_reaches_every_trainer_job() {
        let trainer = json!({"labels": {ANCESTOR_LABEL: "trainer"}});
        let rt = json!({"spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1}},
        "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"metadata": trainer, "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "rt", "env": [{"name": "HVDCTL_ROLE", "value": "node"}]}]}}}}},
            {"name": "launcher", "template": {"metadata": trainer, "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "rt", "resources": {"requests": {"cpu": "100m", "ephemeral-storage": "1Gi"}}}]}}}}},
        ]}}}});
        let tj = json!({"metadata": {"name": "t", "namespace": "ns", "uid": "u"},
            "spec": {"trainer": {"image": "img", "command": ["c"], "numNodes": 2,
                "env": [{"name": "A", "value": "1"}],
                "resourcesPerNode": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}}});
        let mpi = Mpi::of(&tj, &rt);
        let js = jobset(
            &tj,
            &rt,
            &mpi,
            rt["spec"]["template"]["spec"].clone(),
            false,
        );
        let rjs = &js["spec"]["replicatedJobs"];
        assert_eq!(rjs[0]["template"]["spec"]["parallelism"], 2);
        assert_eq!(rjs[1]["template"]["spec"]["parallelism"], 1);
        for (i, role) in [(0, "node"), (1, "launcher")] {
            let c = &rjs[i]["template"]["spec"]["template"]["spec"]["containers"][0];
            assert_eq!(c["image"], "img", "{role}");
            assert_eq!(c["command"], json!(["c"]), "{role}");
            assert_eq!(c["resources"]["limits"]["cpu"], "2", "{role}");
            assert_eq!(c["resources"]["requests"]["cpu"], "1", "{role}");
            let env = c["env"].as_array().unwrap();
            assert!(env.iter().any(|e| e["name"] == "A"), "{role}");
        }
        let nc = &rjs[0]["template"]["spec"]["template"]["spec"]["containers"][0];
        assert!(
            nc["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "HVDCTL_ROLE")
        );
        let lc = &rjs[1]["template"]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(lc["resources"]["requests"]["ephemeral-storage"], "1Gi");
    }
}
