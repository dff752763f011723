//! Runs in a cluster, from labels: every object and pod hvdctl creates carries
//! `app.kubernetes.io/managed-by=hvdctl`, `hvdctl.io/app`, `hvdctl.io/run` and
//! `hvdctl.io/backend`, so runs are found without any local record.

use super::client::{ATTEMPTS, Cluster, retry};
use crate::backend::{KubeBackend, job_name, kube_backends};
use crate::error::{Error, Result};
use crate::kinds::ApiKind;
use crate::render::manifests::{LABEL_APP, LABEL_BACKEND, LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use std::collections::BTreeMap;

/// A run located in a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRef {
    pub run_id: String,
    pub app: String,
    /// `<app>-<run id>`.
    pub job: String,
    pub namespace: String,
    pub backend: &'static dyn KubeBackend,
}

impl RunRef {
    /// Label selector matching every object and pod of this run (and nothing else).
    pub fn selector(&self) -> String {
        format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_RUN}={}", self.run_id)
    }
}

/// One run seen in the cluster, from labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub run: RunRef,
    /// Newest creation time among its objects (RFC 3339).
    pub created: String,
}

/// The runs a list found: those hvdctl can read, and one error per run it cannot (its
/// backend unknown to this hvdctl), each naming the run — one such run hides no other.
#[derive(Debug, Default)]
pub struct Listed {
    pub seen: Vec<Seen>,
    pub unreadable: Vec<Error>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// One namespace, or every namespace (`None`).
    pub namespace: Option<&'a str>,
    pub app: Option<&'a str>,
    pub run_id: Option<&'a str>,
}

impl Filter<'_> {
    fn selector(&self) -> String {
        let mut sel = format!("{LABEL_MANAGED_BY}={MANAGER}");
        if let Some(a) = self.app {
            sel.push_str(&format!(",{LABEL_APP}={a}"));
        }
        if let Some(r) = self.run_id {
            sel.push_str(&format!(",{LABEL_RUN}={r}"));
        }
        sel
    }
}

/// The kinds that tell a run exists: every backend's job kind (where served) and pods.
async fn run_kinds(c: &Cluster) -> Result<Vec<(ApiKind, Option<&'static dyn KubeBackend>)>> {
    let mut out: Vec<(ApiKind, Option<&'static dyn KubeBackend>)> = Vec::new();
    for b in kube_backends() {
        let (k, _) = b.job_object("x");
        if out.iter().any(|(o, _)| *o == k) || !c.serves(k).await? {
            continue;
        }
        // A kind only one backend uses tells the backend of an unlabelled (older) run.
        let alone = kube_backends()
            .iter()
            .filter(|o| o.job_object("x").0 == k)
            .count()
            == 1;
        out.push((k, alone.then_some(b)));
    }
    out.push((ApiKind::of::<Pod>(), None));
    Ok(out)
}

/// Every hvdctl run matching `f`, from labels, oldest first. A run whose backend this hvdctl
/// does not know (labelled by a newer one, or unlabelled and of no backend's kind) is not
/// read as some other backend's: it is an error of its own in [`Listed::unreadable`].
pub async fn list(c: &Cluster, f: &Filter<'_>) -> Result<Listed> {
    let lp = ListParams::default().labels(&f.selector());
    let mut runs: BTreeMap<(String, String), (Option<Seen>, Option<String>)> = BTreeMap::new();
    for (kind, kind_backend) in run_kinds(c).await? {
        let api: Api<DynamicObject> = match f.namespace {
            Some(ns) => super::apply::dynamic_api(c, ns, kind),
            None => super::apply::dynamic_api_all(c, kind),
        };
        let where_ = f
            .namespace
            .map_or("every namespace".to_string(), |n| format!("namespace {n}"));
        let l = retry(ATTEMPTS, || api.list(&lp))
            .await
            .map_err(|e| c.error(&format!("list {} in {where_}", kind.plural), &e))?;
        for o in &l.items {
            let m = &o.metadata;
            let Some(l) = m.labels.as_ref() else { continue };
            let (Some(id), Some(app)) = (l.get(LABEL_RUN), l.get(LABEL_APP)) else {
                continue;
            };
            let ns = m.namespace.clone().unwrap_or_default();
            let label = l.get(LABEL_BACKEND);
            let labelled = label.and_then(|n| kube_backends().into_iter().find(|b| b.name() == n));
            let (seen, unknown) = runs.entry((ns.clone(), id.clone())).or_default();
            if let (Some(n), None) = (label, labelled) {
                *unknown = Some(n.clone());
            }
            let Some(b) = labelled.or(kind_backend) else {
                continue;
            };
            let e = seen.get_or_insert_with(|| Seen {
                run: RunRef {
                    run_id: id.clone(),
                    app: app.clone(),
                    job: job_name(app, id),
                    namespace: ns,
                    backend: b,
                },
                created: String::new(),
            });
            e.run.backend = b;
            if let Some(t) = m.creation_timestamp.as_ref().map(|t| t.0.to_string())
                && t > e.created
            {
                e.created = t;
            }
        }
    }
    let mut out = Listed::default();
    for ((ns, id), (seen, unknown)) in runs {
        match (seen, unknown) {
            (Some(s), _) => out.seen.push(s),
            (None, Some(name)) => out.unreadable.push(
                Error::failure(format!(
                    "run {id} in namespace {ns} is of backend `{name}` ({LABEL_BACKEND}), which this hvdctl does not know (it knows {})",
                    crate::backend::names().join(", ")
                ))
                .hint("use the hvdctl that deployed it (its hvdctl.io/version annotation says which version)"),
            ),
            (None, None) => out.unreadable.push(
                Error::failure(format!(
                    "run {id} in namespace {ns} has no {LABEL_BACKEND} label and none of its objects is a backend's job kind: its backend is not known"
                ))
                .hint(format!("remove it with `kubectl delete all -n {ns} -l {LABEL_RUN}={id}`")),
            ),
        }
    }
    out.seen.sort_by(|a, b| a.created.cmp(&b.created));
    Ok(out)
}
