//! Backends turn a validated [`App`] and a run identity into what gets created: the template
//! values, the launcher command line, and (for Kubernetes) the typed objects of the run.
//!
//! - `mpijob`: one MPIJob; the MPI Operator makes the launcher Job, workers, ssh Secret, hostfile.
//! - `native`: hvdctl makes them itself (see `templates/k8s/native.yaml.hbs`).

pub mod ssh;
pub mod values;

use crate::app::{App, Backend};
use crate::assets;
use crate::error::{Context, Result};
use crate::kinds::Object;
use crate::render::{self, manifests};
use rand::Rng;
use std::path::Path;

pub use ssh::SshKeys;

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
    let rel = format!("k8s/{}.yaml.hbs", backend.as_str());
    let path = app_dir.join(&rel);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path.display().to_string(), text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = assets::text(&rel).expect("built-in manifest templates are embedded");
            Ok((format!("(built-in) {rel}"), text.into_owned()))
        }
        Err(e) => Err(e).input_with(|| format!("cannot read {}", path.display())),
    }
}

/// Renders the run's objects: template → YAML → typed objects → hvdctl's labels and namespace,
/// in apply order. `ssh` is `None` for a dry run (the Secret then shows a placeholder).
pub fn objects(run: &Run, app_dir: &Path, ssh: Option<&SshKeys>) -> Result<Vec<Object>> {
    if !run.backend.is_kubernetes() {
        return Err(crate::Error::input(
            "the local backend runs Docker containers and has no Kubernetes manifests",
        ));
    }
    let (name, template) = manifest_template(app_dir, run.backend)?;
    let values = values::values(run, ssh);
    let text = render::render(&name, &template, &values)?;
    let mut objs = manifests::parse(&name, &text)?;
    if run.backend == Backend::Native {
        objs = replicate_workers(objs, run.app.workers);
    }
    manifests::stamp(
        &mut objs,
        &manifests::Stamp {
            app: &run.app.name,
            run_id: &run.run_id,
            namespace: &run.namespace,
        },
    );
    objs.sort_by_key(manifests::apply_order);
    Ok(objs)
}

/// The native template holds one worker Pod; a run has `workers` of them, `<name>-<i>`, each
/// its own hostname (so `<name>-<i>.<job>.<ns>.svc` resolves through the headless Service).
/// Rendering and checking one copy instead of thousands keeps large runs fast.
fn replicate_workers(objects: Vec<Object>, workers: u32) -> Vec<Object> {
    let mut out = Vec::with_capacity(objects.len() + workers as usize);
    for o in objects {
        let Object::Pod(pod) = o else {
            out.push(o);
            continue;
        };
        let base = pod.metadata.name.clone().unwrap_or_default();
        for i in 0..workers {
            let mut p = pod.clone();
            let name = format!("{base}-{i}");
            p.metadata.name = Some(name.clone());
            p.spec.get_or_insert_with(Default::default).hostname = Some(name);
            out.push(Object::Pod(p));
        }
    }
    out
}
