//! The typed `hvdctl.yaml`. Field names are camelCase in YAML; unknown keys are rejected.
//! Everything downstream trusts an [`App`] that passed [`super::validate`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A closed set of string values in `hvdctl.yaml`: what the file may say, what error messages
/// list and what templates see all come from the one list in the enum's definition.
pub trait ClosedSet: Copy + Sized + 'static {
    /// Every value, in documentation order.
    const ALL: &'static [Self];
    /// The spelling in `hvdctl.yaml` and in template values.
    fn as_str(self) -> &'static str;

    /// `a, b, c`: every spelling, for messages and docs.
    fn one_of() -> String {
        Self::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The value spelled `s`, or a message listing every value (and the likely typo).
    fn parse(s: &str) -> crate::Result<Self> {
        if let Some(v) = Self::ALL.iter().find(|v| v.as_str() == s) {
            return Ok(*v);
        }
        let names: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
        let mut msg = format!("`{s}` is not one of {}", Self::one_of());
        if let Some(m) = crate::text::did_you_mean(s, &names) {
            msg.push_str(&format!(" (did you mean `{m}`?)"));
        }
        Err(crate::Error::input(msg))
    }
}

/// Reads a [`ClosedSet`] from a string; anything else is "expected a string", which the
/// loader answers by retyping a plain scalar to its source text.
struct ClosedSetVisitor<T>(std::marker::PhantomData<T>);

impl<T: ClosedSet> serde::de::Visitor<'_> for ClosedSetVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a string, one of {}", T::one_of())
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        T::parse(v).map_err(E::custom)
    }
}

fn deserialize_closed<'de, D: serde::Deserializer<'de>, T: ClosedSet>(d: D) -> Result<T, D::Error> {
    d.deserialize_str(ClosedSetVisitor(std::marker::PhantomData))
}

/// An optional [`ClosedSet`] where an empty string means "not set" (Kubernetes' own default).
fn empty_is_none<'de, D: serde::Deserializer<'de>, T: ClosedSet>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => T::parse(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Defines a [`ClosedSet`] enum: `Variant = "spelling"`, serde and `Display` included.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl ClosedSet for $name {
            const ALL: &'static [$name] = &[$($name::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                ClosedSet::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> crate::Result<Self> {
                <$name as ClosedSet>::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                deserialize_closed(d)
            }
        }
    };
}

/// `backend:`: which backend runs the app, by name (`mpijob`, `native`, `trainjob`, `local`,
/// or one a library user registered). An app names its backend and does not hold it:
/// `crate::backend::Backend::of` looks the name up, and loading refuses a name nothing
/// answers to (so the app's types need no backend's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BackendName(pub String);

impl BackendName {
    /// The backend of an app that names none: the MPI Operator's.
    pub const DEFAULT: &'static str = "mpijob";
    /// The Docker engine's backend (no cluster).
    pub const LOCAL: &'static str = "local";

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for BackendName {
    fn default() -> BackendName {
        BackendName(BackendName::DEFAULT.into())
    }
}

impl std::fmt::Display for BackendName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

closed_set! {
    /// `mpi.implementation`: the MPI Operator's `mpiImplementation`; decides mpirun's flags.
    #[derive(Default)]
    pub enum MpiImplementation {
        #[default]
        OpenMpi = "OpenMPI",
        Intel = "Intel",
        Mpich = "MPICH",
    }
}

closed_set! {
    /// `mpi.launcher`: the program the launcher runs.
    #[derive(Default)]
    pub enum Launcher {
        #[default]
        Mpirun = "mpirun",
        Horovodrun = "horovodrun",
    }
}

closed_set! {
    /// `runPolicy.cleanPodPolicy`: which pods are deleted when the job ends.
    #[derive(Default)]
    pub enum CleanPodPolicy {
        #[default]
        Running = "Running",
        All = "All",
        None = "None",
    }
}

closed_set! {
    /// `tolerations[].operator`.
    pub enum TolerationOperator {
        Equal = "Equal",
        Exists = "Exists",
    }
}

closed_set! {
    /// `tolerations[].effect` (empty or absent: every effect).
    pub enum TaintEffect {
        NoSchedule = "NoSchedule",
        PreferNoSchedule = "PreferNoSchedule",
        NoExecute = "NoExecute",
    }
}

closed_set! {
    /// `volumes[].hostPath.type` (empty or absent: no check before mounting).
    pub enum HostPathType {
        DirectoryOrCreate = "DirectoryOrCreate",
        Directory = "Directory",
        FileOrCreate = "FileOrCreate",
        File = "File",
        Socket = "Socket",
        CharDevice = "CharDevice",
        BlockDevice = "BlockDevice",
    }
}

closed_set! {
    /// `imagePullPolicy` of every container hvdctl makes (unset: Kubernetes' default).
    pub enum PullPolicy {
        Always = "Always",
        IfNotPresent = "IfNotPresent",
        Never = "Never",
    }
}

closed_set! {
    /// `volumes[].emptyDir.medium` (empty or absent: the node's disk).
    pub enum StorageMedium {
        Memory = "Memory",
        HugePages = "HugePages",
    }
}

closed_set! {
    /// `storage[].accessModes[]`.
    pub enum AccessMode {
        ReadWriteOnce = "ReadWriteOnce",
        ReadOnlyMany = "ReadOnlyMany",
        ReadWriteMany = "ReadWriteMany",
        ReadWriteOncePod = "ReadWriteOncePod",
    }
}

/// A file mode (`defaultMode`, `items[].mode`): `0400` and `0o400` are octal as Kubernetes'
/// YAML reads them, `256` is decimal. Read from the scalar's source text, so the YAML 1.2
/// reading of `0400` (decimal 400) never applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMode(pub u32);

impl FileMode {
    /// The mode spelled `s`, or a message saying what a mode is.
    pub fn parse(s: &str) -> crate::Result<FileMode> {
        let t = s.trim();
        let parsed = if let Some(o) = t.strip_prefix("0o").or_else(|| t.strip_prefix("0O")) {
            u32::from_str_radix(o, 8).ok()
        } else if t.len() > 1 && t.starts_with('0') {
            u32::from_str_radix(&t[1..], 8).ok()
        } else {
            t.parse::<u32>().ok()
        };
        match parsed {
            Some(m) if m <= 0o777 => Ok(FileMode(m)),
            _ => Err(crate::Error::input(format!(
                "`{s}` is not a file mode between 0000 and 0777 (octal, e.g. 0400 or 0o644)"
            ))),
        }
    }
}

impl Serialize for FileMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("0{:o}", self.0))
    }
}

struct FileModeVisitor;

impl serde::de::Visitor<'_> for FileModeVisitor {
    type Value = FileMode;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string, a file mode such as 0400")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FileMode, E> {
        FileMode::parse(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FileMode, D::Error> {
        d.deserialize_str(FileModeVisitor)
    }
}

/// A whole application as written in `hvdctl.yaml` (after `--set` overrides).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct App {
    /// App name; job names are `<name>-<run id>`. DNS-1035 label.
    pub name: String,
    /// Image repository (optionally with a tag); `build` adds a tag derived from the source.
    pub image: String,
    /// Namespace to deploy to; `-n` overrides it, then the kube context's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub backend: BackendName,
    #[serde(default = "one")]
    pub workers: u32,
    #[serde(default = "one")]
    pub slots_per_worker: u32,
    #[serde(default)]
    pub gpus_per_worker: u32,
    /// The training command every rank runs (argv), e.g. `[python3, /app/train.py]`.
    pub command: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub mpi: Mpi,
    #[serde(default)]
    pub run_policy: RunPolicy,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// `imagePullPolicy` of every container hvdctl makes (`local`: `Never` means the image
    /// must be in the engine; `Always` pulls before every run).
    #[serde(default, deserialize_with = "empty_is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Size of `/dev/shm` in every container (a Kubernetes quantity, e.g. `2Gi`): a memory
    /// `emptyDir` with that `sizeLimit` (`local`: Docker's `ShmSize`).
    #[serde(default)]
    pub shm: Option<String>,
    /// PersistentVolumeClaims hvdctl creates with the app (`<app>-<name>`), kept across runs.
    #[serde(default)]
    pub storage: Vec<Storage>,
    #[serde(default)]
    pub security_context: SecurityContext,
    /// Extra labels on every pod (hvdctl's own labels always win).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations on every pod, e.g. `sidecar.istio.io/inject: "false"`.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    #[serde(default)]
    pub service_account_name: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// Environment of every container (launcher and workers).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub elastic: Option<Elastic>,
    /// The `trainjob` backend's settings (Kubeflow Trainer v2).
    #[serde(default)]
    pub trainjob: TrainJobSettings,
    /// A Kueue LocalQueue in the run's namespace: the job is created suspended and waits
    /// for its Workload's admission (Kubernetes backends only).
    #[serde(default)]
    pub queue: Option<String>,
    /// Gang scheduling by a batch scheduler (`scheduling.volcano`; Kubernetes backends only).
    #[serde(default)]
    pub scheduling: Scheduling,
    /// Where rank 0 writes TensorBoard event files (`hvdctl tensorboard` serves them).
    #[serde(default)]
    pub tensorboard: Option<Tensorboard>,
    /// Horovod's timeline, written by rank 0 (`hvdctl timeline` fetches it and says who
    /// kept the others waiting): `true`, or `{markCycles: true}`.
    #[serde(default, deserialize_with = "timeline_setting")]
    pub timeline: Option<Timeline>,
    /// `hvdctl dev`: where changed files are copied in every container.
    #[serde(default)]
    pub dev: Dev,
    /// Set by `hvdctl dev`, never read from `hvdctl.yaml`: deploy in warm mode (the launcher
    /// holds instead of running the launch command; `hvdctl dev` runs each attempt by exec).
    #[serde(skip)]
    pub warm: bool,
    #[serde(default)]
    pub build: Build,
    /// The flight recorder (`.hvdctl/runs/<run id>/`).
    #[serde(default)]
    pub recorder: Recorder,
    /// Free parameters: templates see them as `parameters.<key>`, the job as env `<KEY>`
    /// (upper case, `-` and `.` become `_`).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

impl App {
    /// Whether the containers run as root (no `securityContext.runAsUser`, or 0).
    pub fn runs_as_root(&self) -> bool {
        self.security_context.run_as_user.is_none_or(|u| u == 0)
    }

    /// Where the run's ssh keys are mounted: `mpi.sshAuthMountPath`, else the user's `~/.ssh`
    /// (`/root/.ssh`, or `/home/mpiuser/.ssh` for a non-root run).
    pub fn ssh_auth_mount_path(&self) -> String {
        self.mpi.ssh_auth_mount_path.clone().unwrap_or_else(|| {
            if self.runs_as_root() {
                "/root/.ssh".into()
            } else {
                "/home/mpiuser/.ssh".into()
            }
        })
    }
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mpi {
    /// `OpenMPI` (default), `Intel` or `MPICH`.
    #[serde(default)]
    pub implementation: MpiImplementation,
    /// Launcher program: `mpirun` (default) or `horovodrun`.
    #[serde(default)]
    pub launcher: Launcher,
    /// Extra arguments for mpirun/horovodrun, before the training command.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Seconds the native/local launcher waits for every worker's sshd.
    #[serde(default = "sshd_timeout")]
    pub sshd_timeout_seconds: u32,
    /// Where the MPI Operator mounts the ssh keys (the home `.ssh` of the user the job runs
    /// as). Default: `/root/.ssh`, or `/home/mpiuser/.ssh` with a non-root `runAsUser`.
    #[serde(default)]
    pub ssh_auth_mount_path: Option<String>,
    /// The port of the workers' sshd and of the launcher's ssh (default 22 as root, 2222
    /// for a non-root `runAsUser`).
    #[serde(default)]
    pub ssh_port: Option<u16>,
}

fn sshd_timeout() -> u32 {
    300
}

impl Default for Mpi {
    fn default() -> Self {
        Mpi {
            implementation: MpiImplementation::default(),
            launcher: Launcher::default(),
            extra_args: Vec::new(),
            sshd_timeout_seconds: sshd_timeout(),
            ssh_auth_mount_path: None,
            ssh_port: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunPolicy {
    /// `Running` (default), `All` or `None`: which pods are deleted when the job ends.
    #[serde(default)]
    pub clean_pod_policy: CleanPodPolicy,
    /// Retries of the launcher before the job is failed.
    #[serde(default)]
    pub backoff_limit: Option<i32>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub active_deadline_seconds: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub launcher: ResourceSpec,
    #[serde(default)]
    pub worker: ResourceSpec,
}

/// Requests and limits as Kubernetes quantities keyed by resource name (`cpu`, `memory`, ...).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    /// `Equal` when absent.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub operator: Option<TolerationOperator>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default, deserialize_with = "empty_is_none")]
    pub effect: Option<TaintEffect>,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

/// One volume mounted into every container. Exactly one source: `pvc`, `nfs`, `hostPath`,
/// `secret`, `configMap` or `emptyDir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Volume {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub sub_path: Option<String>,
    #[serde(default)]
    pub pvc: Option<PvcSource>,
    #[serde(default)]
    pub nfs: Option<NfsSource>,
    #[serde(default)]
    pub host_path: Option<HostPathSource>,
    #[serde(default)]
    pub secret: Option<SecretSource>,
    #[serde(default)]
    pub config_map: Option<ConfigMapSource>,
    #[serde(default)]
    pub empty_dir: Option<EmptyDirSource>,
}

impl Volume {
    /// The sources given, by their key in `hvdctl.yaml`.
    pub fn sources(&self) -> Vec<&'static str> {
        [
            (self.pvc.is_some(), "pvc"),
            (self.nfs.is_some(), "nfs"),
            (self.host_path.is_some(), "hostPath"),
            (self.secret.is_some(), "secret"),
            (self.config_map.is_some(), "configMap"),
            (self.empty_dir.is_some(), "emptyDir"),
        ]
        .into_iter()
        .filter_map(|(set, k)| set.then_some(k))
        .collect()
    }
}

/// One key of a Secret or ConfigMap as a file (Kubernetes' `KeyToPath`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    #[serde(default)]
    pub mode: Option<FileMode>,
}

/// `volumes[].secret`: Kubernetes' `SecretVolumeSource`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSource {
    pub secret_name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<FileMode>,
    #[serde(default)]
    pub optional: Option<bool>,
}

/// `volumes[].configMap`: Kubernetes' `ConfigMapVolumeSource`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapSource {
    pub name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<FileMode>,
    #[serde(default)]
    pub optional: Option<bool>,
}

/// `volumes[].emptyDir`: Kubernetes' `EmptyDirVolumeSource`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmptyDirSource {
    #[serde(default, deserialize_with = "empty_is_none")]
    pub medium: Option<StorageMedium>,
    #[serde(default)]
    pub size_limit: Option<String>,
}

/// `storage[]`: a PersistentVolumeClaim `<app>-<name>` hvdctl creates with the app and
/// mounts in every container at `mountPath`; it outlives runs (`undeploy --volumes` deletes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Storage {
    pub name: String,
    pub size: String,
    pub mount_path: String,
    #[serde(default)]
    pub storage_class: Option<String>,
    #[serde(default = "rwo")]
    pub access_modes: Vec<AccessMode>,
}

fn rwo() -> Vec<AccessMode> {
    vec![AccessMode::ReadWriteOnce]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PvcSource {
    pub claim_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NfsSource {
    pub server: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostPathSource {
    pub path: String,
    #[serde(default, rename = "type", deserialize_with = "empty_is_none")]
    pub kind: Option<HostPathType>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityContext {
    #[serde(default)]
    pub run_as_user: Option<i64>,
    #[serde(default)]
    pub run_as_group: Option<i64>,
    #[serde(default)]
    pub fs_group: Option<i64>,
    #[serde(default)]
    pub run_as_non_root: Option<bool>,
}

/// `trainjob:` — which Trainer runtime a `trainjob` run uses.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainJobSettings {
    /// An existing runtime the admin installed; unset: hvdctl makes a TrainingRuntime for
    /// the app from its pod settings.
    #[serde(default)]
    pub runtime: Option<String>,
    /// The kind of `runtime`: `ClusterTrainingRuntime` (default, as the Trainer's own
    /// default) or `TrainingRuntime` (in the run's namespace).
    #[serde(default)]
    pub runtime_kind: RuntimeKind,
}

/// `scheduling:` — which batch scheduler gangs the run's pods.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scheduling {
    /// Volcano: the run's pods are one PodGroup, scheduled by `volcano` all at once.
    #[serde(default)]
    pub volcano: Option<Volcano>,
}

/// `scheduling.volcano:` — the PodGroup's queue, minimum members and priority.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Volcano {
    /// The Volcano Queue (default `default`, as the PodGroup CRD's own default).
    #[serde(default)]
    pub queue: Option<String>,
    /// Pods that must be placed together (default every pod: workers + the launcher).
    #[serde(default)]
    pub min_available: Option<u32>,
    /// The PodGroup's PriorityClass.
    #[serde(default)]
    pub priority_class: Option<String>,
}

impl Volcano {
    /// Volcano's own default queue.
    pub const DEFAULT_QUEUE: &'static str = "default";

    pub fn queue(&self) -> &str {
        self.queue.as_deref().unwrap_or(Self::DEFAULT_QUEUE)
    }

    /// The PodGroup's `minMember` for a run of `workers` workers and one launcher.
    pub fn min_member(&self, workers: u32) -> u32 {
        self.min_available.unwrap_or(workers + 1)
    }
}

closed_set! {
    /// `trainjob.runtimeKind`.
    #[derive(Default)]
    pub enum RuntimeKind {
        #[default]
        ClusterTrainingRuntime = "ClusterTrainingRuntime",
        TrainingRuntime = "TrainingRuntime",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Elastic {
    pub min_workers: u32,
    pub max_workers: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tensorboard {
    /// Absolute directory inside rank 0's container; the job gets it as
    /// `TENSORBOARD_LOG_DIR`.
    pub log_dir: String,
}

/// Horovod's timeline (`timeline:` in hvdctl.yaml).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timeline {
    /// Also mark every cycle of Horovod's background loop (`HOROVOD_TIMELINE_MARK_CYCLES`).
    #[serde(default)]
    pub mark_cycles: bool,
}

/// `timeline: true` (the defaults), `false` (off) or a mapping of [`Timeline`]'s keys.
fn timeline_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Timeline>, D::Error> {
    struct Setting;
    impl<'de> serde::de::Visitor<'de> for Setting {
        type Value = Option<Timeline>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("true, false or a mapping such as {markCycles: true}")
        }
        fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Self::Value, E> {
            Ok(on.then(Timeline::default))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
            Timeline::deserialize(serde::de::value::MapAccessDeserializer::new(m)).map(Some)
        }
    }
    d.deserialize_any(Setting)
}

/// The flight recorder's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recorder {
    /// The most a run's recorded logs take on disk (gzip-compressed), in MiB; the oldest
    /// lines are dropped beyond it.
    #[serde(rename = "maxMB", default = "recorder_max_mb")]
    pub max_mb: u64,
}

fn recorder_max_mb() -> u64 {
    64
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            max_mb: recorder_max_mb(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dev {
    /// Absolute directory in every container that mirrors the app directory (the
    /// Dockerfile's `COPY . /app`): `hvdctl dev` copies each saved file there.
    #[serde(default = "app_dir")]
    pub sync_to: String,
}

impl Default for Dev {
    fn default() -> Dev {
        Dev { sync_to: app_dir() }
    }
}

fn app_dir() -> String {
    "/app".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Build {
    /// Dockerfile path relative to the context.
    #[serde(default = "dockerfile")]
    pub dockerfile: String,
    /// Build context relative to the app directory.
    #[serde(default = "dot")]
    pub context: String,
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// ssh agents lent to `RUN --mount=type=ssh` (BuildKit): `default` ($SSH_AUTH_SOCK)
    /// or `ID=SOCKET`, as `hvdctl build --ssh` takes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh: Vec<String>,
}

fn dockerfile() -> String {
    "Dockerfile".into()
}
fn dot() -> String {
    ".".into()
}

impl Default for Build {
    fn default() -> Self {
        Build {
            dockerfile: dockerfile(),
            context: dot(),
            args: BTreeMap::new(),
            ssh: Vec::new(),
        }
    }
}
