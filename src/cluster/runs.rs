//! Finding runs: a `RUN` argument (run id or job name), the last recorded run, or the newest
//! run of the app in the cluster — always confirmed against the cluster's labels.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use crate::app::Backend;
use crate::backend::job_name;
use crate::error::{Error, Result};
use crate::kinds::MpiJob;
use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
use crate::state::{self, RunRecord};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::path::Path;

/// A run located in a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRef {
    pub run_id: String,
    pub app: String,
    /// `<app>-<run id>`.
    pub job: String,
    pub namespace: String,
    pub backend: Backend,
}

impl RunRef {
    /// Label selector matching every object and pod of this run (and nothing else).
    pub fn selector(&self) -> String {
        format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_RUN}={}", self.run_id)
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    /// `RUN` argument: run id or job name.
    pub arg: Option<&'a str>,
    /// App name, when an hvdctl.yaml is at hand.
    pub app: Option<&'a str>,
    /// Namespace resolved from flags/app/context.
    pub namespace: String,
    /// The app directory (for `.hvdctl/` records).
    pub app_dir: &'a Path,
    /// `-n` was given explicitly (then records from other namespaces are not used).
    pub namespace_flag: bool,
}

/// Whether MPIJobs are served by this cluster (the MPI Operator is installed).
pub async fn mpijob_served(c: &Cluster) -> Result<bool> {
    match retry(ATTEMPTS, || {
        c.client.list_api_group_resources("kubeflow.org/v2beta1")
    })
    .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == "mpijobs")),
        Err(e) if status_code(&e) == Some(404) => Ok(false),
        Err(e) => Err(c.error("discover kubeflow.org/v2beta1", &e)),
    }
}

/// Splits `mnist-abcde` into (`mnist`, `abcde`); a bare id gives (None, id).
fn split_arg(arg: &str) -> (Option<&str>, &str) {
    match arg.rsplit_once('-') {
        Some((app, id)) if crate::backend::check_run_id(id).is_ok() => (Some(app), id),
        _ => (None, arg),
    }
}

/// One run seen in the cluster, from labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub run: RunRef,
    /// Newest creation time among its objects (RFC 3339).
    pub created: String,
}

/// Every hvdctl run in the namespace (optionally of one app, or one run id), from labels.
pub async fn list(
    c: &Cluster,
    namespace: &str,
    app: Option<&str>,
    run_id: Option<&str>,
) -> Result<Vec<Seen>> {
    let mut sel = format!("{LABEL_MANAGED_BY}={MANAGER}");
    if let Some(a) = app {
        sel.push_str(&format!(",{LABEL_APP}={a}"));
    }
    if let Some(r) = run_id {
        sel.push_str(&format!(",{LABEL_RUN}={r}"));
    }
    let lp = ListParams::default().labels(&sel);
    let mut runs: BTreeMap<String, Seen> = BTreeMap::new();
    let mut note = |labels: Option<&BTreeMap<String, String>>,
                    created: Option<String>,
                    backend: Option<Backend>| {
        let Some(l) = labels else { return };
        let (Some(id), Some(app)) = (l.get(LABEL_RUN), l.get(LABEL_APP)) else {
            return;
        };
        let e = runs.entry(id.clone()).or_insert_with(|| Seen {
            run: RunRef {
                run_id: id.clone(),
                app: app.clone(),
                job: job_name(app, id),
                namespace: namespace.to_string(),
                backend: Backend::Native,
            },
            created: String::new(),
        });
        if let Some(b) = backend {
            e.run.backend = b;
        }
        if let Some(t) = created
            && t > e.created
        {
            e.created = t;
        }
    };
    let ts = |m: &kube::api::ObjectMeta| m.creation_timestamp.as_ref().map(|t| t.0.to_string());
    if mpijob_served(c).await? {
        let api: Api<MpiJob> = Api::namespaced(c.client.clone(), namespace);
        let l = retry(ATTEMPTS, || api.list(&lp))
            .await
            .map_err(|e| c.error(&format!("list MPIJobs in namespace {namespace}"), &e))?;
        for m in &l.items {
            note(
                m.metadata.labels.as_ref(),
                ts(&m.metadata),
                Some(Backend::Mpijob),
            );
        }
    }
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), namespace);
    let l = retry(ATTEMPTS, || jobs.list(&lp))
        .await
        .map_err(|e| c.error(&format!("list Jobs in namespace {namespace}"), &e))?;
    for j in &l.items {
        note(j.metadata.labels.as_ref(), ts(&j.metadata), None);
    }
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), namespace);
    let l = retry(ATTEMPTS, || pods.list(&lp))
        .await
        .map_err(|e| c.error(&format!("list Pods in namespace {namespace}"), &e))?;
    for p in &l.items {
        note(p.metadata.labels.as_ref(), ts(&p.metadata), None);
    }
    let mut out: Vec<Seen> = runs.into_values().collect();
    out.sort_by(|a, b| a.created.cmp(&b.created));
    Ok(out)
}

/// Finds the run a command is about, or says clearly why none matches.
pub async fn resolve(c: &Cluster, q: &Query<'_>) -> Result<RunRef> {
    let records = state::runs(q.app_dir)?;
    let recorded = |pred: &dyn Fn(&RunRecord) -> bool| -> Option<RunRecord> {
        records
            .iter()
            .rev()
            .find(|r| pred(r) && (!q.namespace_flag || r.namespace == q.namespace))
            .cloned()
    };
    let (want_app, want_id, namespace) = match q.arg {
        Some(arg) => {
            if let Some(r) = recorded(&|r: &RunRecord| r.run_id == arg || r.job == arg) {
                (Some(r.app), r.run_id, r.namespace)
            } else {
                let (app, id) = split_arg(arg);
                if crate::backend::check_run_id(id).is_err() {
                    return Err(Error::input(format!(
                        "`{arg}` is not a run id or job name (e.g. `abcde` or `mnist-abcde`)"
                    )));
                }
                (
                    app.map(str::to_owned).or(q.app.map(str::to_owned)),
                    id.to_string(),
                    q.namespace.clone(),
                )
            }
        }
        None => {
            let last = q
                .app
                .and_then(|a| recorded(&|r: &RunRecord| r.app == a && r.context != "local"));
            match last {
                Some(r) => (Some(r.app), r.run_id, r.namespace),
                None => {
                    let Some(app) = q.app else {
                        return Err(Error::input(
                            "which run? pass a RUN (run id or job name), or run this in an app directory",
                        ));
                    };
                    let seen = list(c, &q.namespace, Some(app), None).await?;
                    match seen.last() {
                        Some(s) => return Ok(s.run.clone()),
                        None => {
                            return Err(Error::input(format!(
                                "no runs of app `{app}` in namespace {} (context `{}`)",
                                q.namespace, c.context
                            ))
                            .hint(
                                "start one with `hvdctl deploy`, or pick the namespace with -n",
                            ));
                        }
                    }
                }
            }
        }
    };
    let seen = list(c, &namespace, None, Some(&want_id)).await?;
    match seen
        .into_iter()
        .find(|s| want_app.as_deref().is_none_or(|a| a == s.run.app))
    {
        Some(s) => Ok(s.run),
        None => {
            let mut e = Error::input(format!(
                "run `{want_id}` not found in namespace {namespace} (context `{}`)",
                c.context
            ));
            let others = list(c, &namespace, want_app.as_deref(), None)
                .await
                .unwrap_or_default();
            e = if others.is_empty() {
                e.hint("it may have been undeployed; `hvdctl status --all` lists the runs in a namespace")
            } else {
                let ids: Vec<String> = others
                    .iter()
                    .rev()
                    .take(5)
                    .map(|s| s.run.job.clone())
                    .collect();
                e.hint(format!("runs here: {}", ids.join(", ")))
            };
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_args() {
        assert_eq!(split_arg("mnist-abcde"), (Some("mnist"), "abcde"));
        assert_eq!(split_arg("my-app-x2z9q"), (Some("my-app"), "x2z9q"));
        assert_eq!(split_arg("abcde"), (None, "abcde"));
    }
}
