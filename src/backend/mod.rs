//! Backends turn a validated [`App`] and a run identity into what gets created: the template
//! values, the launcher command line, and (for Kubernetes) the typed objects of the run.
//!
//! Kubernetes backends are one module each, answering the questions of [`KubeBackend`], and
//! one line in [`BUILTIN`]:
//! - [`mpijob`]: one MPIJob; the MPI Operator makes the launcher Job, workers, ssh Secret, hostfile.
//! - [`native`]: hvdctl makes them itself (see `templates/k8s/native.yaml.hbs`).
//!
//! The `local` backend is not a Kubernetes backend: it is the Docker engine's (see
//! `crate::local`), and [`Backend::Local`] names it.

pub mod elastic;
pub mod mpijob;
pub mod native;
pub mod ssh;
pub mod values;

use crate::cluster::status::JobState;
use crate::kinds::{ApiKind, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use std::sync::RwLock;

use crate::app::{App, Backend};
use crate::error::{Context, Result};
use crate::kinds::Object;
use crate::render::{self, manifests};
use rand::Rng;
use std::path::Path;

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

/// A Kubernetes job backend: everything the Kubernetes engine needs to know about it.
pub trait KubeBackend: Send + Sync + 'static {
    /// The name in `hvdctl.yaml`'s `backend`, `--backend` and the `hvdctl.io/backend` label.
    fn name(&self) -> &'static str;
    /// One line for `--help`.
    fn about(&self) -> &'static str;
    /// The kind the cluster must serve (checked by discovery before a deploy).
    fn requires(&self) -> Option<Requirement> {
        None
    }
    /// Whether the run needs a fresh ssh key pair (rendered into its Secret).
    fn needs_ssh_keys(&self) -> bool {
        false
    }
    /// Whether an operator starts sshd and writes the hostfile (then the launcher runs the
    /// launch command directly); otherwise hvdctl's launcher/worker scripts do it.
    fn operator_launch(&self) -> bool {
        false
    }
    /// The built-in manifest template (an app's own `k8s/<name>.yaml.hbs` wins over it).
    fn builtin_template(&self) -> std::borrow::Cow<'static, str> {
        let rel = format!("k8s/{}.yaml.hbs", self.name());
        crate::assets::text(&rel)
            .unwrap_or_else(|| panic!("backend {}: no built-in template {rel}", self.name()))
    }
    /// A last pass over the rendered objects (before labels are stamped).
    fn finish(&self, objects: Vec<Object>, _app: &App) -> Vec<Object> {
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
    /// The run's state from that object (`None`: it does not exist) and the run's pods.
    fn state(&self, job: Option<&serde_json::Value>, pods: &[Pod])
    -> (JobState, Vec<JobCondition>);
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
pub static BUILTIN: &[&dyn KubeBackend] = &[&mpijob::MpiJobBackend, &native::NativeBackend];

/// Backends added at run time ([`register`]), e.g. by tests.
static REGISTERED: RwLock<Vec<&'static dyn KubeBackend>> = RwLock::new(Vec::new());

/// Adds a Kubernetes backend (for `--backend NAME` and `backend: NAME`). A name already taken
/// is refused.
pub fn register(b: &'static dyn KubeBackend) -> std::result::Result<(), String> {
    if lookup(b.name()).is_some() {
        return Err(format!("backend `{}` is already registered", b.name()));
    }
    REGISTERED.write().expect("backend registry").push(b);
    Ok(())
}

/// Every Kubernetes backend: built-in, then registered.
pub fn kube_backends() -> Vec<&'static dyn KubeBackend> {
    let mut all = BUILTIN.to_vec();
    all.extend(REGISTERED.read().expect("backend registry").iter());
    all
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
pub fn check_run_id(id: &str) -> std::result::Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= crate::app::validate::RUN_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{id}` is not a run id: 1-5 lowercase letters or digits"
        ))
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
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path.display().to_string(), text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((
            format!("(built-in) {rel}"),
            kb.builtin_template().into_owned(),
        )),
        Err(e) => Err(e).input_with(|| format!("cannot read {}", path.display())),
    }
}

/// Renders the run's objects: template → YAML → typed objects → hvdctl's labels and namespace,
/// in apply order. `ssh` is `None` for a dry run (the Secret then shows a placeholder).
pub fn objects(run: &Run, app_dir: &Path, ssh: Option<&SshKeys>) -> Result<Vec<Object>> {
    let (name, template) = manifest_template(app_dir, run.backend)?;
    let Backend::Kubernetes(kb) = run.backend else {
        unreachable!("manifest_template refuses the local backend")
    };
    let values = values::values(run, ssh);
    let text = render::render(&name, &template, &values)?;
    let mut objs = kb.finish(manifests::parse(&name, &text)?, run.app);
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
    objs.sort_by_key(manifests::apply_order);
    Ok(objs)
}
