//! The `trainjob` backend: Kubeflow Trainer v2 (v2.3.0, `trainer.kubeflow.org/v1alpha1`).
//! A run is one TrainJob; its runtime is either one the admin installed (`trainjob.runtime`,
//! a ClusterTrainingRuntime or TrainingRuntime) or a namespaced TrainingRuntime hvdctl makes
//! for the app from its pod settings (`mlPolicy.mpi`: launcher and node replicated jobs),
//! shared by the app's runs and removed with its last one. The Trainer turns the TrainJob into
//! a JobSet (replicated jobs `launcher` and `node`), the ssh Secret `<job>-mpi-ssh-auth` and
//! the hostfile ConfigMap `<job>-mpi-hostfile`; JobSet makes the Jobs and they the pods.
//!
//! What the Trainer does, as read from its v2.3.0 source:
//! - `pkg/runtime/framework/plugins/mpi/mpi.go`: only OpenMPI is accepted (the CRD's enum,
//!   and `EnforceMLPolicy` errors on anything else; kubeflow/trainer#3712 asks for MPICH and
//!   Intel MPI); the ssh Secret and hostfile are mounted on containers named `node` only; the
//!   private key is mounted with mode 0640 — which OpenSSH refuses when its owner is the user
//!   (root: the Secret's files are root's) — see [`App::runs_as_root`] for what hvdctl does.
//! - `pkg/runtime/framework/plugins/jobset/builder.go` (`Trainer`): `spec.trainer`'s image,
//!   command, args and env reach the `node` container of every replicated job labelled
//!   `trainer.kubeflow.org/trainjob-ancestor-step: trainer` (env also the `node` job's when
//!   the launcher runs as a node); `pkg/runtime/core/trainingruntime.go` (`newRuntimeInfo`):
//!   `spec.trainer.resourcesPerNode` is merged over those containers' resources, and such a
//!   job's pod count is the runtime's `mlPolicy.numNodes`, except the `node` job's, which the
//!   MPI plugin sets to `spec.trainer.numNodes`. A runtime patch cannot set a `node`
//!   container's image, command, env or resources (`trainjob_types.go`, `ContainerPatch`;
//!   `jobset.go`'s `Validate`). So hvdctl's runtime labels both replicated jobs: the run's
//!   image, env and sizing reach the launcher and the nodes from `spec.trainer`, and one
//!   command ([`DISPATCH`]) starts the role its container's `HVDCTL_ROLE` names.
//!   The Trainer's own runtimes also carry `trainer.kubeflow.org/framework`, which the
//!   Kubeflow SDK requires of a runtime (`mpi` here).
//! - `pkg/runtime/framework/plugins/jobset/jobset.go`: hosts are
//!   `<trainjob>-<rjob>-<jobIdx>-<podIdx>.<trainjob>`; a JobSet is built once and not updated
//!   while the TrainJob is not suspended (a runtime changed by a later deploy leaves running
//!   runs as they are); the TrainJob's `Complete`/`Failed` conditions are the JobSet's.
//! - `pkg/controller/trainjob_controller.go`: besides those, only `Suspended`.

use super::{KubeBackend, Launch, Requirement, Run, conditions, is_true, queue};
use crate::app::App;
use crate::app::spec::{MpiImplementation, RuntimeKind};
use crate::error::{Error, Result};
use crate::kinds::Object;
use crate::kinds::{ApiKind, JobCondition, Kind, KindDef, ROLE_LAUNCHER, ROLE_WORKER};
use crate::types::{Identity, JobState};
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::{EnvVar, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub struct TrainJobBackend;

/// The Trainer's API group and version.
const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
const GROUP: &str = "trainer.kubeflow.org";
/// JobSet's label naming a pod's replicated job (`launcher` or `node`).
pub const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// The Job controller's completion index: the `node` replicated job is one Indexed Job whose
/// pods are the nodes.
pub const COMPLETION_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";
/// The Trainer's label marking a replicated job as the trainer's (`constants.LabelTrainJobAncestor`).
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The replicated jobs of an MPI runtime (the Trainer's `constants.Launcher`, `constants.Node`).
pub const LAUNCHER_JOB: &str = "launcher";
pub const NODE_JOB: &str = "node";
/// Where the Trainer mounts the hostfile.
const HOSTFILE: &str = "/etc/mpi/hostfile";
/// Where the ssh Secret is mounted for a root run (see [`App::runs_as_root`]).
const SSH_STAGING: &str = "/etc/hvdctl/mpi-ssh";
/// The runtimePatches entry hvdctl owns.
const PATCH_MANAGER: &str = "hvdctl.io/hvdctl";
/// The Trainer's runtime label naming the framework (the Kubeflow SDK lists only runtimes
/// that have it) and hvdctl's value.
pub const FRAMEWORK_LABEL: &str = "trainer.kubeflow.org/framework";
const FRAMEWORK: &str = "mpi";
/// The variable of hvdctl's runtime that tells the run's one command which role its container
/// has (`launcher` or `node`): static, so the runtime stays the same for every run.
const ROLE_ENV: &str = "HVDCTL_ROLE";

/// The command of a run on hvdctl's runtime, for both replicated jobs (the Trainer gives both
/// `spec.trainer.command`): `$1` is how many of the next arguments are the launcher's
/// command; the rest are the node's. The role is [`ROLE_ENV`], the launcher's when unset.
/// POSIX sh: the `for` list is expanded once, so the kept arguments are appended to `$@`
/// while the originals are shifted off.
const DISPATCH: &str = "n=$1; shift; i=0; role=${HVDCTL_ROLE:-launcher}; \
for a in \"$@\"; do shift; i=$((i+1)); \
if [ \"$role\" = launcher ]; then if [ \"$i\" -le \"$n\" ]; then set -- \"$@\" \"$a\"; fi; \
elif [ \"$i\" -gt \"$n\" ]; then set -- \"$@\" \"$a\"; fi; done; exec \"$@\"";

/// The one command of a run on hvdctl's runtime: [`DISPATCH`] with both roles' commands.
fn dispatch(launcher: &[String], node: &[String]) -> Vec<String> {
    let mut out: Vec<String> = ["/bin/sh", "-c", DISPATCH, "hvdctl"]
        .map(String::from)
        .to_vec();
    out.push(launcher.len().to_string());
    out.extend(launcher.iter().cloned());
    out.extend(node.iter().cloned());
    out
}

/// The TrainingRuntime hvdctl makes for `app` (unless it names one).
pub fn runtime_name(app: &str) -> String {
    format!("hvdctl-{app}")
}

/// The Trainer v2.3.0 mounts the private key with mode 0640 (kubeflow/trainer#3649, made for
/// its runtimes that run as user 1000 with the key's group). The files of a Secret volume
/// are root's, so for root the key is its own and group-readable: ssh refuses it ("bad
/// permissions") and mpirun cannot reach a node. A root run therefore has the Secret mounted
/// aside ([`SSH_STAGING`]) and each container copies it into `~/.ssh` with 0600 before its
/// command; a non-root run gets it where `mpi.sshAuthMountPath` says (the key must then be
/// readable through `securityContext.fsGroup`, as in the Trainer's own runtimes).
///
/// What a root run's containers do before their command (see [`App::runs_as_root`]).
const STAGE_SSH: &str = "d=\"$HOME/.ssh\"; s=/etc/hvdctl/mpi-ssh; \
mkdir -p \"$d\" && chmod 700 \"$d\" && \
cp \"$s/id_rsa\" \"$d/id_rsa\" && chmod 600 \"$d/id_rsa\" && \
cp \"$s/id_rsa.pub\" \"$d/id_rsa.pub\" && cp \"$s/authorized_keys\" \"$d/authorized_keys\" && \
chmod 600 \"$d/authorized_keys\" || { echo 'hvdctl: cannot copy the ssh keys into ~/.ssh' >&2; exit 1; }; \
exec \"$@\"";

/// `command` run after the ssh keys are staged (root runs), or as it is.
fn wrapped(app: &App, command: &[String]) -> Vec<String> {
    if !app.runs_as_root() {
        return command.to_vec();
    }
    let mut out: Vec<String> = ["/bin/sh", "-c", STAGE_SSH, "hvdctl-ssh"]
        .map(String::from)
        .to_vec();
    out.extend(command.iter().cloned());
    out
}

impl KubeBackend for TrainJobBackend {
    fn name(&self) -> &'static str {
        "trainjob"
    }

    fn about(&self) -> &'static str {
        "trainer.kubeflow.org/v1alpha1 TrainJob for Kubeflow Trainer v2 (MPI runtime)"
    }

    fn kinds(&self) -> Vec<KindDef> {
        vec![KindDef::of::<TrainingRuntime>(), KindDef::of::<TrainJob>()]
    }

    fn requires(&self) -> Vec<Requirement> {
        let hint = "install Kubeflow Trainer v2.3 (https://github.com/kubeflow/trainer) with JobSet, or deploy without it: `hvdctl deploy --backend native`";
        vec![
            Requirement {
                kind: ApiKind::of::<TrainJob>(),
                provider: "Kubeflow Trainer",
                hint,
            },
            Requirement {
                kind: ApiKind::of::<TrainingRuntime>(),
                provider: "Kubeflow Trainer",
                hint,
            },
        ]
    }

    fn permissions(&self) -> Vec<super::Permission> {
        let mut p = super::rbac::permissions_for(&self.kinds());
        // A runtime the admin installed is only read.
        p.push(super::Permission {
            verb: "get",
            group: GROUP,
            resource: "clustertrainingruntimes",
            needed: false,
            cluster_scoped: true,
        });
        p
    }

    fn launch(&self) -> Launch {
        Launch::Operator {
            hostfile: HOSTFILE,
            worker_command: None,
        }
    }

    fn check(&self, app: &App) -> Result<()> {
        if let Some(v) = queue::volcano(app) {
            // The Trainer's Volcano plugin (`pkg/runtime/framework/plugins/volcano`) makes the
            // PodGroup itself: every pod a member, the priority from the pods' templates.
            if let Some(m) = v.min_available.filter(|m| *m != app.workers + 1) {
                return Err(Error::input(format!(
                    "scheduling.volcano.minAvailable: {m}: under the trainjob backend Kubeflow Trainer v2.3 makes the PodGroup with every pod a member ({} here); it has no setting for fewer",
                    app.workers + 1
                ))
                .hint("remove `scheduling.volcano.minAvailable`, or deploy this app with `--backend mpijob` or `--backend native`")
                .at_key(&["scheduling", "volcano", "minAvailable"]));
            }
            if let (Some(p), Some(r)) = (&v.priority_class, &app.trainjob.runtime) {
                return Err(Error::input(format!(
                    "scheduling.volcano.priorityClass: {p}: the PodGroup's priority comes from the pod templates of runtime `{r}`, which a TrainJob cannot change"
                ))
                .hint("set priorityClassName in that runtime's pod templates, or leave `trainjob.runtime` unset for hvdctl to make a runtime with this priority")
                .at_key(&["scheduling", "volcano", "priorityClass"]));
            }
        }
        if app.elastic.is_some() {
            // Elastic horovodrun re-discovers hosts through a script the Trainer does not
            // write, and a TrainJob's JobSet is not resized while it runs (jobset.go).
            return Err(Error::input(
                "elastic: the trainjob backend cannot run elastic Horovod: Kubeflow Trainer v2.3 writes no host discovery script and does not resize a running TrainJob",
            )
            .hint("remove `elastic`, or deploy this app with `--backend mpijob` or `--backend native`")
            .at_key(&["elastic"]));
        }
        match app.mpi.implementation {
            MpiImplementation::OpenMpi => Ok(()),
            other => Err(Error::input(format!(
                "mpi.implementation: {other}: the trainjob backend runs only OpenMPI (Kubeflow Trainer v2.3 accepts no other mpiImplementation; MPICH and Intel MPI are asked for in kubeflow/trainer#3712)"
            ))
            .hint("use `mpi.implementation: OpenMPI` with an Open MPI image, or deploy this app with `--backend mpijob` or `--backend native`")
            .at_key(&["mpi", "implementation"])),
        }
    }

    fn template_values(&self, run: &Run, values: &Value) -> Value {
        let app = run.app;
        let (name, kind, create) = match &app.trainjob.runtime {
            Some(n) => (n.clone(), app.trainjob.runtime_kind.as_str(), false),
            None => (
                runtime_name(&app.name),
                RuntimeKind::TrainingRuntime.as_str(),
                true,
            ),
        };
        let command =
            |v: &Value| -> Vec<String> { serde_json::from_value(v.clone()).unwrap_or_default() };
        let launcher = wrapped(app, &command(&values["launcher"]["command"]));
        let node = wrapped(app, &command(&values["worker"]["command"]));
        let ssh_path = if app.runs_as_root() {
            SSH_STAGING.to_string()
        } else {
            app.ssh_auth_mount_path()
        };
        // The runtime is shared by the app's runs and holds nothing a run changes: the
        // run's image, command, env and sizing are the TrainJob's `spec.trainer`, which the
        // Trainer gives both replicated jobs of hvdctl's runtime (see the module's notes). A
        // runtime the app names gets them on its trainer job only (the launcher in the
        // Trainer's MPI runtimes), as before.
        let trainer_command = if create {
            dispatch(&launcher, &node)
        } else {
            launcher.clone()
        };
        // The image the runtime names: the app's repository (the Kubeflow SDK reads a
        // runtime's image); every hvdctl run replaces it with its own.
        // `runtimeEnv`: the app's env, which the runtime's containers held before runs set
        // theirs through spec.trainer; still given, so an app's own `k8s/trainjob.yaml.hbs`
        // written by an earlier `hvdctl init` renders as it did.
        let mut runtime_env: Vec<Value> = Vec::new();
        for (k, v) in &app.env {
            runtime_env.push(json!({"name": k, "value": v}));
        }
        for (k, v) in &app.parameters {
            runtime_env.push(json!({"name": crate::app::validate::param_env_name(k), "value": v}));
        }
        runtime_env.push(json!({"name": "HVDCTL_APP", "value": app.name}));
        json!({
            "runtimeEnv": runtime_env,
            "runtime": {"name": name, "kind": kind, "create": create},
            "patchManager": PATCH_MANAGER,
            "framework": FRAMEWORK,
            "frameworkLabel": FRAMEWORK_LABEL,
            "ancestorLabel": ANCESTOR_LABEL,
            "runtimeImage": app.image,
            "numNodes": app.workers,
            "sshAuthMountPath": ssh_path,
            "command": trainer_command,
            "launcherCommand": launcher,
            "nodeCommand": node,
            "roleEnv": ROLE_ENV,
            // The launcher is sized like a node (resourcesPerNode reaches both); its own
            // resources fill in what the nodes' do not name.
            "resourcesPerNode": if create { values["worker"]["resources"].clone() } else { Value::Null },
            // The Job controller's default, as the MPI Operator's for its launcher.
            "launcherBackoffLimit": app.run_policy.backoff_limit.unwrap_or(6),
            "launcherJob": LAUNCHER_JOB,
            "nodeJob": NODE_JOB,
        })
    }

    /// Queues. Kueue: its label on the TrainJob and the job created suspended (Kueue's
    /// TrainJob integration, `pkg/controller/jobs/trainjob`). Volcano: hvdctl's runtime gets
    /// `podGroupPolicy.volcano` (the Trainer then makes the PodGroup named after the
    /// TrainJob, every pod a member) and `schedulerName: volcano` on its pod templates (the
    /// Trainer sets no scheduler name); the queue reaches the Trainer as the JobSet template's
    /// `scheduling.volcano.sh/queue-name` annotation in hvdctl's runtime patch — the Trainer
    /// reads it from the runtime's template and the patches, not from the TrainJob's own
    /// annotations (`pkg/runtime/core/trainingruntime.go`, `newRuntimeInfo`).
    fn finish(&self, objects: Vec<Object>, run: &Run) -> Vec<Object> {
        let app = run.app;
        let mut objects = objects;
        let volcano = queue::volcano(app);
        for o in &mut objects {
            if let Some(rt) = o.get_mut::<TrainingRuntime>() {
                if let Some(v) = volcano {
                    rt.spec.pod_group_policy = Some(json!({"volcano": {}}));
                    for rj in &mut rt.spec.template.spec.replicated_jobs {
                        if let Some(ps) = rj
                            .template
                            .spec
                            .as_mut()
                            .and_then(|j| j.template.spec.as_mut())
                        {
                            ps.scheduler_name = Some(queue::VOLCANO_SCHEDULER.into());
                            if let Some(p) = &v.priority_class {
                                ps.priority_class_name = Some(p.clone());
                            }
                        }
                    }
                }
            } else if let Some(tj) = o.get_mut::<TrainJob>() {
                queue::mark(&mut tj.metadata, app);
                if let Some(q) = &app.queue {
                    queue::put(&mut tj.metadata.labels, queue::KUEUE_QUEUE_LABEL, q.clone());
                    tj.spec.suspend = Some(true);
                }
                if let Some(v) = volcano
                    && let Some(p) = tj
                        .spec
                        .runtime_patches
                        .iter_mut()
                        .find(|p| p.manager == PATCH_MANAGER)
                {
                    let t = p
                        .training_runtime_spec
                        .get_or_insert_with(Default::default)
                        .template
                        .get_or_insert_with(Default::default);
                    let meta = t.metadata.get_or_insert_with(Default::default);
                    queue::put(
                        &mut meta.annotations,
                        queue::VOLCANO_QUEUE_ANNOTATION,
                        v.queue(),
                    );
                }
            }
        }
        objects
    }

    fn shared_kinds(&self) -> Vec<ApiKind> {
        vec![ApiKind::of::<TrainingRuntime>()]
    }

    fn prerequisites(&self, app: &App) -> Vec<super::Prerequisite> {
        let Some(name) = &app.trainjob.runtime else {
            return Vec::new();
        };
        let (kind, namespaced) = match app.trainjob.runtime_kind {
            RuntimeKind::ClusterTrainingRuntime => (ApiKind::of::<ClusterTrainingRuntime>(), false),
            RuntimeKind::TrainingRuntime => (ApiKind::of::<TrainingRuntime>(), true),
        };
        vec![super::Prerequisite {
            kind,
            name: name.clone(),
            namespaced,
            what: "trainjob.runtime",
            hint: "install that runtime, name another one in `trainjob.runtime` (and `trainjob.runtimeKind`), or leave `trainjob.runtime` unset for hvdctl to make one for the app",
            // The Trainer makes a PodGroup only for a runtime with this policy.
            needs: queue::volcano(app).map(|_| super::Need {
                pointer: "/spec/podGroupPolicy/volcano",
                missing: format!(
                    "has no spec.podGroupPolicy.volcano: Kubeflow Trainer makes no Volcano PodGroup for its TrainJobs, so `scheduling.volcano` (queue `{}`) would not apply",
                    queue::volcano(app).map_or("", |v| v.queue())
                ),
                hint: "use a runtime with `podGroupPolicy: {volcano: {}}` and `schedulerName: volcano` in its pod templates, or leave `trainjob.runtime` unset for hvdctl to make one",
            }),
        }]
    }

    fn operator_selector(&self, job: &str) -> Option<String> {
        // JobSet labels the Jobs and pods it makes with the JobSet's (= the TrainJob's) name.
        Some(format!("jobset.sigs.k8s.io/jobset-name={job}"))
    }

    fn job_object(&self, job: &str) -> (ApiKind, String) {
        (ApiKind::of::<TrainJob>(), job.to_string())
    }

    /// The TrainJob says only Suspended, Complete and Failed (`trainjob_controller.go`,
    /// `jobset.go`'s `Status`): running is read from the pods — the launcher running.
    fn state(&self, job: Option<&Value>, pods: &[Pod]) -> Result<(JobState, Vec<JobCondition>)> {
        let Some(job) = job else {
            return Ok((JobState::Unknown, vec![]));
        };
        let conds = conditions(job, "the TrainJob")?;
        let launcher_running = pods.iter().any(|p| {
            self.identity()
                .role(p.metadata.labels.as_ref())
                .is_launcher()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        let state = if is_true(&conds, "Complete") {
            JobState::Succeeded
        } else if is_true(&conds, "Failed") {
            JobState::Failed
        } else if launcher_running && !is_true(&conds, "Suspended") {
            JobState::Running
        } else {
            JobState::Pending
        };
        Ok((state, conds))
    }

    /// JobSet's replicated job names the role (`launcher`, `node`); the nodes are one Indexed
    /// Job, so a node's index is its completion index.
    fn identity(&self) -> Identity {
        Identity {
            role_label: REPLICATED_JOB_LABEL,
            index_label: COMPLETION_INDEX_LABEL,
            index_offset: 0,
            worker_value: NODE_JOB,
        }
    }

    /// Node pods are `<job>-node-0-<index>-<5 random>` (an Indexed Job's pods), their
    /// hostnames `<job>-node-0-<index>`.
    fn pod_name_suffix(&self, max_index: u32) -> usize {
        "-node-0-".len() + max_index.to_string().len() + 6
    }
}

/// `trainer.kubeflow.org/v1alpha1` TrainJob (the fields hvdctl writes and reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJob {
    pub metadata: ObjectMeta,
    pub spec: TrainJobSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    pub runtime_ref: RuntimeRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<Trainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_patches: Vec<RuntimePatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,
}

/// One `runtimePatches` entry: metadata of the JobSet, its Jobs and their pods, keyed by the
/// manager that owns it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePatch {
    pub manager: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_runtime_spec: Option<RuntimeSpecPatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSpecPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobSetTemplatePatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplatePatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSetSpecPatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpecPatch {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicated_jobs: Vec<ReplicatedJobPatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobPatch {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobTemplatePatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplatePatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpecPatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpecPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplatePatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplatePatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The few pod fields a patch may set (the CRD lists them); checked by the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
}

/// The role of the pods of replicated job `name`.
fn role_of(name: &str) -> &'static str {
    if name == LAUNCHER_JOB {
        ROLE_LAUNCHER
    } else {
        ROLE_WORKER
    }
}

impl Kind for TrainJob {
    const ORDER: u8 = 6;
    /// The pod metadata of hvdctl's runtime patch: hvdctl's labels reach the pods through it,
    /// whichever runtime the TrainJob uses.
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        self.spec
            .runtime_patches
            .iter_mut()
            .filter_map(|p| {
                p.training_runtime_spec
                    .as_mut()?
                    .template
                    .as_mut()?
                    .spec
                    .as_mut()
            })
            .flat_map(|s| s.replicated_jobs.iter_mut())
            .filter_map(|rj| {
                let role = role_of(&rj.name);
                let t = rj.template.as_mut()?.spec.as_mut()?.template.as_mut()?;
                Some((role, t.metadata.get_or_insert_with(Default::default)))
            })
            .collect()
    }
}

/// `trainer.kubeflow.org/v1alpha1` TrainingRuntime: an MPI policy and a JobSet template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntime {
    pub metadata: ObjectMeta,
    pub spec: TrainingRuntimeSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MlPolicy>,
    /// `podGroupPolicy` (`volcano: {}` for a run on Volcano).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<Value>,
    pub template: JobSetTemplate,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_implementation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_launcher_as_node: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    pub spec: JobSetSpec,
}

/// `jobset.x-k8s.io/v1alpha2` JobSetSpec, the parts an MPI runtime uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<JobSetNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<Value>,
    pub replicated_jobs: Vec<ReplicatedJob>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetNetwork {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_dns_hostnames: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_replicated_jobs: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<DependsOn>,
    pub template: JobTemplateSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    pub name: String,
    pub status: String,
}

impl Kind for TrainingRuntime {
    /// Before the TrainJob that names it (the Trainer's webhook looks it up).
    const ORDER: u8 = 5;
    // No pod templates: the runtime is shared by the app's runs, so it carries no run's
    // labels; they reach the pods through each TrainJob's runtime patch.
}

/// `trainer.kubeflow.org/v1alpha1` ClusterTrainingRuntime: only looked up (doctor, deploy),
/// never created.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTrainingRuntime {
    pub metadata: ObjectMeta,
    pub spec: Value,
}

macro_rules! trainer_kind {
    ($t:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $t {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1alpha1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $t {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

trainer_kind!(TrainJob, "TrainJob", "trainjobs", NamespaceResourceScope);
trainer_kind!(
    TrainingRuntime,
    "TrainingRuntime",
    "trainingruntimes",
    NamespaceResourceScope
);
trainer_kind!(
    ClusterTrainingRuntime,
    "ClusterTrainingRuntime",
    "clustertrainingruntimes",
    ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;

    /// [`DISPATCH`] under POSIX sh runs the launcher's argv or the node's, by `HVDCTL_ROLE`
    /// (the launcher's when unset), every argument as it was — spaces, quotes, `$`, empty.
    #[test]
    fn dispatch_runs_the_roles_command_with_its_arguments_intact() {
        let launcher: Vec<String> = ["printf", "[%s]", "a b", "'q'\"", "$HOME", ""]
            .map(String::from)
            .to_vec();
        let node: Vec<String> = ["printf", "<%s>", "n", "-x"].map(String::from).to_vec();
        let cmd = dispatch(&launcher, &node);
        let run = |role: Option<&str>| {
            let mut c = std::process::Command::new(&cmd[0]);
            c.args(&cmd[1..]).env_remove(ROLE_ENV);
            if let Some(r) = role {
                c.env(ROLE_ENV, r);
            }
            let o = c.output().unwrap();
            assert!(o.status.success(), "{o:?}");
            String::from_utf8(o.stdout).unwrap()
        };
        assert_eq!(run(Some("launcher")), "[a b]['q'\"][$HOME][]");
        assert_eq!(run(None), "[a b]['q'\"][$HOME][]");
        assert_eq!(run(Some("node")), "<n><-x>");
    }
}
