//! Backends turn a validated [`App`] and a run identity into what gets created: the template
//! values, the launcher command line, and (for Kubernetes) the typed objects of the run.
//!
//! Kubernetes backends are one module each, answering the questions of [`KubeBackend`] — the
//! kinds they are made of and need served, their RBAC, how their objects are rendered, how
//! their state is read, which labels say a pod's role and index, how they scale, who
//! launches —, and one line in [`BUILTIN`] (or a [`register`] call):
//! - [`mpijob`]: one MPIJob; the MPI Operator makes the launcher Job, workers, ssh Secret, hostfile.
//! - [`native`]: hvdctl makes them itself (see `templates/k8s/native.yaml.hbs`).
//! - [`trainjob`]: one TrainJob for Kubeflow Trainer v2, with a TrainingRuntime hvdctl
//!   makes for the app (shared by its runs) unless the app names one.
//!
//! The `local` backend is not a Kubernetes backend: it is the Docker engine's (see
//! `crate::local`), and [`Backend::Local`] names it.

pub mod admission;
pub mod elastic;
pub mod mpijob;
pub mod native;
pub mod queue;
pub mod rbac;
pub mod ssh;
pub mod trainjob;
pub mod values;

use crate::kinds::{ApiKind, JobCondition, KindDef};
use crate::types::{Identity, JobState};
use k8s_openapi::api::core::v1::Pod;
use std::sync::RwLock;

use crate::app::{App, BackendName};
use crate::error::{Context, Error, Result};
use crate::kinds::Object;
use crate::render::{self, manifests};
use rand::Rng;
use std::path::Path;

pub use rbac::Permission;
pub use ssh::SshKeys;

/// An API the cluster must serve for a backend (an operator's custom resource).
#[derive(Debug, Clone, Copy)]
pub struct Requirement {
    pub kind: ApiKind,
    /// What is missing, for people ("the MPI Operator").
    pub provider: &'static str,
    /// What to do about it.
    pub hint: &'static str,
}

/// An object that must exist before a run can be deployed (a runtime the app names).
#[derive(Debug, Clone)]
pub struct Prerequisite {
    pub kind: ApiKind,
    pub name: String,
    /// In the run's namespace (else cluster-scoped).
    pub namespaced: bool,
    /// The `hvdctl.yaml` key that names it (`trainjob.runtime`).
    pub what: &'static str,
    /// What to do when it is missing.
    pub hint: &'static str,
    /// What it must also have, if anything.
    pub needs: Option<Need>,
}

/// A field a prerequisite must have (e.g. a Trainer runtime's `podGroupPolicy.volcano` for
/// a run on Volcano).
#[derive(Debug, Clone)]
pub struct Need {
    /// A JSON pointer into the object (`/spec/podGroupPolicy/volcano`).
    pub pointer: &'static str,
    /// Why, for people: "has no spec.podGroupPolicy.volcano: ...".
    pub missing: String,
    /// What to do about it.
    pub hint: &'static str,
}

/// Where a run's Kueue Workload is found ([`KubeBackend::kueue_workload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KueueWorkload {
    /// The Workload labelled `kueue.x-k8s.io/job-uid: <the job object's uid>`.
    OfJobObject,
    /// The Workload of this name (Kueue's pod groups).
    Named(String),
}

/// Who starts the workers' sshd and writes the hostfile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// hvdctl's launcher/worker scripts (`templates/scripts/`), mounted from the run's
    /// ConfigMap: they set up ssh, wait for the workers and run the launch command.
    Scripts,
    /// An operator did it: the launcher runs the launch command directly.
    Operator {
        /// Where the operator writes the hostfile.
        hostfile: &'static str,
        /// The workers' command, when it is not sshd in the foreground as the MPI
        /// Operator's and the Trainer's pods expect ([`values::operator_worker_command`]).
        worker_command: Option<&'static [&'static str]>,
    },
}

/// How `hvdctl scale` changes the number of workers of a running (elastic) run.
#[derive(Debug, Clone, Copy)]
pub enum Scaling {
    /// A merge patch of the job object (the operator adds or removes worker pods), from
    /// the number of workers.
    Patch(fn(u32) -> serde_json::Value),
    /// hvdctl's own worker pods: a new worker is a copy of a live one named `name(job,
    /// index)`; scaling down deletes the newest.
    WorkerPods { name: fn(&str, u32) -> String },
    /// The backend's runs cannot be scaled in place.
    Unsupported,
}

/// A Kubernetes job backend: everything the Kubernetes engine needs to know about it. Nothing
/// outside this trait's implementations matches on a backend's name.
pub trait KubeBackend: Send + Sync + 'static {
    /// The name in `hvdctl.yaml`'s `backend`, `--backend` and the `hvdctl.io/backend` label.
    fn name(&self) -> &'static str;
    /// One line for `--help`.
    fn about(&self) -> &'static str;
    /// The kinds its runs are made of (its template may also use [`crate::kinds::BUILTIN`]):
    /// the rendered objects are typed with them, undeploy deletes them, RBAC asks for them.
    fn kinds(&self) -> Vec<KindDef>;
    /// The kinds the cluster must serve (checked by discovery before a deploy, and by doctor).
    fn requires(&self) -> Vec<Requirement> {
        Vec::new()
    }
    /// Every permission hvdctl uses for runs of this backend (doctor's RBAC check and
    /// `--print-role`): by default what every backend needs plus its [`Self::kinds`].
    fn permissions(&self) -> Vec<Permission> {
        rbac::permissions_for(&self.kinds())
    }
    /// Whether the run needs a fresh ssh key pair (rendered into its Secret).
    fn needs_ssh_keys(&self) -> bool {
        false
    }
    /// Who starts sshd and writes the hostfile.
    fn launch(&self) -> Launch {
        Launch::Scripts
    }
    /// The built-in manifest template (an app's own `k8s/<name>.yaml.hbs` wins over it).
    fn builtin_template(&self) -> std::borrow::Cow<'static, str> {
        let rel = format!("k8s/{}.yaml.hbs", self.name());
        crate::assets::text(&rel)
            .unwrap_or_else(|| panic!("backend {}: no built-in template {rel}", self.name()))
    }
    /// Refuses an app this backend cannot run (exit 2), before anything is rendered.
    fn check(&self, _app: &App) -> Result<()> {
        Ok(())
    }
    /// Values of this backend's own, seen by templates as `<backend name>.…`; `values` are
    /// the common ones already built.
    fn template_values(&self, _run: &Run, _values: &serde_json::Value) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Kinds whose objects the app's runs share: rendered without the run label, kept while
    /// a job object of the app is left, removed with the app's last run.
    fn shared_kinds(&self) -> Vec<ApiKind> {
        Vec::new()
    }
    /// Objects the app names that must exist before a deploy (checked by deploy and doctor).
    fn prerequisites(&self, _app: &App) -> Vec<Prerequisite> {
        Vec::new()
    }
    /// A last pass over the rendered objects (before labels are stamped): what the backend
    /// sets in code — e.g. where a queue's labels and annotations go on its objects.
    fn finish(&self, objects: Vec<Object>, _run: &Run) -> Vec<Object> {
        objects
    }
    /// A label selector for objects an operator makes for job `job` without hvdctl's labels
    /// (their events belong to the run).
    fn operator_selector(&self, _job: &str) -> Option<String> {
        None
    }
    /// Whether the job object owns the run's other objects (ownerReferences: deleting it —
    /// by hand, by `ttlSecondsAfterFinished` — lets the garbage collector remove the rest).
    /// It is then created first.
    fn job_owns_run(&self) -> bool {
        false
    }
    /// The object whose status decides the run's state, for job `job`.
    fn job_object(&self, job: &str) -> (ApiKind, String);
    /// The run's state from that object (`None`: it does not exist) and the run's pods; an
    /// error when the object's status cannot be read (never a guess).
    fn state(
        &self,
        job: Option<&serde_json::Value>,
        pods: &[Pod],
    ) -> Result<(JobState, Vec<JobCondition>)>;
    /// How Kueue finds the run's Workload: by the job object's uid (Kueue's job
    /// integrations label the Workload `kueue.x-k8s.io/job-uid`), or by name (a pod group's
    /// Workload is named after the group).
    fn kueue_workload(&self, _job: &str) -> KueueWorkload {
        KueueWorkload::OfJobObject
    }
    /// Which labels of its pods say their role and worker index (never their names).
    fn identity(&self) -> Identity {
        Identity::HVDCTL
    }
    /// How `scale` changes the number of workers.
    fn scaling(&self) -> Scaling {
        Scaling::Unsupported
    }
    /// Characters its pod names add to the job name `<app>-<run id>` for worker index
    /// `max_index` (the longest name must fit 63 characters).
    fn pod_name_suffix(&self, max_index: u32) -> usize {
        "-worker-".len() + max_index.to_string().len()
    }
}

/// The conditions in `job`'s `/status/conditions` (none when it has no status yet); an error
/// naming `what` when they are there but cannot be read.
pub fn conditions(job: &serde_json::Value, what: &str) -> Result<Vec<JobCondition>> {
    match job.pointer("/status/conditions") {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(c) => serde_json::from_value(c.clone())
            .fail_with(|| format!("the status conditions of {what} cannot be read")),
    }
}

/// Whether condition `t` is `True`.
pub fn is_true(conds: &[JobCondition], t: &str) -> bool {
    conds.iter().any(|c| c.type_ == t && c.status == "True")
}

impl std::fmt::Debug for dyn KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for dyn KubeBackend {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

/// The Kubernetes backends hvdctl ships; the first is the default.
pub static BUILTIN: &[&dyn KubeBackend] = &[
    &mpijob::MpiJobBackend,
    &native::NativeBackend,
    &trainjob::TrainJobBackend,
];

/// Backends added at run time ([`register`]), e.g. by tests.
static REGISTERED: RwLock<Vec<&'static dyn KubeBackend>> = RwLock::new(Vec::new());

/// Adds a Kubernetes backend (for `--backend NAME` and `backend: NAME`). A name already taken
/// is refused.
pub fn register(b: &'static dyn KubeBackend) -> crate::Result<()> {
    if lookup(b.name()).is_some() {
        return Err(crate::Error::input(format!(
            "backend `{}` is already registered",
            b.name()
        )));
    }
    REGISTERED
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .push(b);
    Ok(())
}

/// Every Kubernetes backend: built-in, then registered.
pub fn kube_backends() -> Vec<&'static dyn KubeBackend> {
    let mut all = BUILTIN.to_vec();
    all.extend(REGISTERED.read().unwrap_or_else(|p| p.into_inner()).iter());
    all
}

/// Every kind a run may be made of — the built-in ones and every backend's — once each,
/// owners first (the order deletion uses).
pub fn all_kinds() -> Vec<KindDef> {
    let mut out: Vec<KindDef> = crate::kinds::BUILTIN.to_vec();
    for b in kube_backends() {
        for k in b.kinds() {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out.sort_by_key(|k| std::cmp::Reverse(k.order));
    out
}

/// Where and how a run's job is made: a Kubernetes backend (`mpijob`, `native`, `trainjob`,
/// or one registered through [`register`]) or `local` (Docker on this machine). An app names
/// its backend ([`BackendName`]); this is what the name stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backend {
    Kubernetes(&'static dyn KubeBackend),
    /// No cluster: launcher and worker containers on a private network of the local Docker engine.
    Local,
}

impl Backend {
    /// The name of the Docker engine's backend.
    pub const LOCAL: &'static str = BackendName::LOCAL;

    /// The backend `app` names (loading has refused a name nothing answers to; an app made
    /// in code may still name one).
    pub fn of(app: &App) -> Result<Backend> {
        app.backend
            .as_str()
            .parse()
            .map_err(|e: Error| e.context("backend"))
    }

    /// Whether runs of this backend live in a Kubernetes cluster.
    pub fn is_kubernetes(self) -> bool {
        matches!(self, Backend::Kubernetes(_))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Kubernetes(b) => b.name(),
            Backend::Local => Backend::LOCAL,
        }
    }

    /// Who starts sshd and writes the hostfile (see [`KubeBackend::launch`]; the local
    /// backend's scripts do).
    pub fn launch(self) -> Launch {
        match self {
            Backend::Kubernetes(b) => b.launch(),
            Backend::Local => Launch::Scripts,
        }
    }

    /// The longest app name whose pod names still fit a label (63) with the run id and this
    /// backend's suffix for a worker index up to `max_worker_index`.
    pub fn max_app_name_len(self, max_worker_index: u32) -> usize {
        use crate::app::validate::{MAX_LABEL, RUN_ID_LEN, max_name_len};
        match self {
            Backend::Kubernetes(b) => {
                MAX_LABEL.saturating_sub(1 + RUN_ID_LEN + b.pod_name_suffix(max_worker_index))
            }
            Backend::Local => max_name_len(max_worker_index),
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Backend> {
        lookup(s).ok_or_else(|| {
            let names = names();
            let mut msg = format!("`{s}` is not one of {}", names.join(", "));
            if let Some(m) = crate::text::did_you_mean(s, &names) {
                msg.push_str(&format!(" (did you mean `{m}`?)"));
            }
            Error::input(msg)
        })
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The backend called `name`.
pub fn lookup(name: &str) -> Option<Backend> {
    if name == Backend::LOCAL {
        return Some(Backend::Local);
    }
    kube_backends()
        .into_iter()
        .find(|b| b.name() == name)
        .map(Backend::Kubernetes)
}

/// Every backend name, in help order (Kubernetes backends, then `local`).
pub fn names() -> Vec<&'static str> {
    let mut n: Vec<&'static str> = kube_backends().iter().map(|b| b.name()).collect();
    n.push(Backend::LOCAL);
    n
}

/// One run of an app: the unit deploy/status/logs/undeploy work on.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    pub app: &'a App,
    pub backend: Backend,
    pub run_id: String,
    pub namespace: String,
    /// Full image reference (with tag) the pods run.
    pub image: String,
}

impl Run<'_> {
    /// `<app>-<run id>`: the MPIJob / Service / ConfigMap name and the worker name prefix.
    pub fn job_name(&self) -> String {
        job_name(&self.app.name, &self.run_id)
    }
}

pub fn job_name(app: &str, run_id: &str) -> String {
    format!("{app}-{run_id}")
}

/// A fresh run id: short, random, DNS-safe (like Kubernetes' generateName suffixes).
pub fn new_run_id() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..crate::app::validate::RUN_ID_LEN)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Checks a user-supplied run id (`--run-id`).
pub fn check_run_id(id: &str) -> crate::Result<()> {
    let ok = !id.is_empty()
        && id.len() <= crate::app::validate::RUN_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(crate::Error::input(format!(
            "`{id}` is not a run id: 1-5 lowercase letters or digits"
        )))
    }
}

/// The manifest template of a backend: the app's own `k8s/<backend>.yaml.hbs` if it has one
/// (users may edit it), else the built-in one. Returns (display name, text).
pub fn manifest_template(app_dir: &Path, backend: Backend) -> Result<(String, String)> {
    let Backend::Kubernetes(kb) = backend else {
        return Err(crate::Error::input(
            "the local backend runs Docker containers and has no Kubernetes manifests",
        ));
    };
    let rel = format!("k8s/{}.yaml.hbs", kb.name());
    let path = app_dir.join(&rel);
    match crate::files::read_text(&path, crate::files::TEMPLATE) {
        Ok(text) => Ok((path.display().to_string(), text)),
        Err(crate::files::Refused::Missing) => Ok((
            format!("(built-in) {rel}"),
            kb.builtin_template().into_owned(),
        )),
        Err(r) => Err(r.input_error(&path, crate::files::TEMPLATE)),
    }
}

/// Renders the run's objects: template → YAML → typed objects → hvdctl's labels and namespace,
/// in apply order. `ssh` is `None` for a dry run (the Secret then shows a placeholder).
pub fn objects(run: &Run, app_dir: &Path, ssh: Option<&SshKeys>) -> Result<Vec<Object>> {
    let (name, template) = manifest_template(app_dir, run.backend)?;
    let Backend::Kubernetes(kb) = run.backend else {
        return Err(Error::input(
            "the local backend has no Kubernetes manifests",
        ));
    };
    kb.check(run.app)?;
    values::check(run)?;
    let values = values::values(run, ssh);
    let text = render::render(&name, &template, &values)?;
    let mut kinds = crate::kinds::BUILTIN.to_vec();
    kinds.extend(kb.kinds());
    let parsed = manifests::parse(&name, &text, &kinds)?;
    // What the template made, before hvdctl's own additions: the native backend's one worker
    // Pod becomes a pod per worker in `finish`, copies a real API server would judge alike.
    admission::check(&name, &parsed)?;
    let mut objs = kb.finish(parsed, run);
    manifests::stamp(
        &mut objs,
        &manifests::Stamp {
            app: &run.app.name,
            run_id: &run.run_id,
            namespace: &run.namespace,
            backend: kb.name(),
            rank_tags: values::rank_tags(run.app).label(),
        },
    );
    // Shared objects belong to no one run.
    let shared = kb.shared_kinds();
    for o in objs.iter_mut().filter(|o| shared.contains(&o.api_kind())) {
        if let Some(l) = o.meta_mut().labels.as_mut() {
            l.remove(manifests::LABEL_RUN);
        }
    }
    objs.sort_by_key(manifests::apply_order);
    Ok(objs)
}
