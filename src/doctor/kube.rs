//! The Kubernetes side of `doctor`: the context answers (server version), the backend's
//! kinds are served, hvdctl may do what it needs (SelfSubjectAccessReview per verb and
//! resource), some node can hold a worker, the image pull secrets exist, no Istio sidecar is
//! injected into MPI pods, the namespace's quotas have room.

use super::{Check, fit};
use crate::app::App;
use crate::backend::KubeBackend;
use crate::cluster::Cluster;
use crate::cluster::client::{ATTEMPTS, retry, status_code};
use futures::future::join_all;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Node, ResourceQuota, Secret};
use kube::api::{Api, ListParams, PostParams};

pub use crate::backend::rbac::{Permission, describe};

/// A namespaced Role with every namespaced permission, and a ClusterRole with the
/// cluster-scoped reads (`doctor --print-role`).
pub fn role_yaml(backend: &dyn KubeBackend, namespace: &str) -> String {
    use std::collections::BTreeMap;
    let perms = backend.permissions();
    let backend = backend.name();
    let rules = |cluster: bool| {
        let mut by: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for x in perms.iter().filter(|x| x.cluster_scoped == cluster) {
            by.entry((x.group, x.resource)).or_default().push(x.verb);
        }
        let mut s = String::new();
        for ((group, resource), verbs) in by {
            s.push_str(&format!(
                "- apiGroups: [{group:?}]\n  resources: [{resource:?}]\n  verbs: [{}]\n",
                verbs
                    .iter()
                    .map(|v| format!("{v:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        s
    };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: hvdctl-{backend}\n  namespace: {namespace:?}\nrules:\n{}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: hvdctl-read\nrules:\n{}",
        rules(false),
        rules(true)
    )
}

pub async fn server(c: &Cluster) -> Result<Check, Check> {
    match c.client.apiserver_version().await {
        Ok(v) => Ok(Check::ok(
            "cluster",
            format!(
                "context {} ({}) answers: Kubernetes {}",
                c.context, c.server, v.git_version
            ),
        )),
        Err(e) => {
            let e = c.error("get /version", &e);
            let check = format!(
                "check the context with `kubectl --context {} version`",
                c.context
            );
            let hint = match &e.hint {
                Some(h) => format!("{h}; {check}"),
                None => check,
            };
            Err(Check {
                causes: crate::error::cause_lines(&e),
                ..Check::fail("cluster", e.message, hint)
            })
        }
    }
}

/// The backend's kinds and the versions of their group that are served.
pub async fn kinds(c: &Cluster, backend: &'static dyn KubeBackend) -> Check {
    let reqs = backend.requires();
    if reqs.is_empty() {
        return Check::ok(
            "kinds",
            format!("the {} backend needs only built-in kinds", backend.name()),
        );
    }
    let served = match c.client.list_api_groups().await {
        Ok(gs) => gs,
        Err(e) => return Check::fail("kinds", c.error("list API groups", &e).to_string(), ""),
    };
    let (mut ok, mut missing, mut hints) = (Vec::new(), Vec::new(), Vec::new());
    for req in reqs {
        let group = req.kind.group();
        let mut versions = Vec::new();
        for grp in served.groups.iter().filter(|g| g.name == group) {
            for gv in &grp.versions {
                let res = match c.client.list_api_group_resources(&gv.group_version).await {
                    Ok(r) => r,
                    Err(e) => {
                        let what = format!("discover {}", gv.group_version);
                        return Check::fail("kinds", c.error(&what, &e).to_string(), "");
                    }
                };
                if res.resources.iter().any(|r| r.name == req.kind.plural) {
                    versions.push(gv.group_version.clone());
                }
            }
        }
        if versions.iter().any(|v| v == req.kind.api_version) {
            ok.push(format!("{} served: {}", req.kind.kind, versions.join(", ")));
        } else {
            let also = if versions.is_empty() {
                String::new()
            } else {
                format!(" (served: {})", versions.join(", "))
            };
            missing.push(format!(
                "{} {} is not served: {} is not installed{also}",
                req.kind.api_version, req.kind.kind, req.provider
            ));
            if !hints.contains(&req.hint) {
                hints.push(req.hint);
            }
        }
    }
    if missing.is_empty() {
        Check::ok("kinds", ok.join("; "))
    } else {
        Check::fail("kinds", missing.join("; "), hints.join("; "))
    }
}

async fn allowed(c: &Cluster, namespace: &str, x: &Permission) -> crate::Result<bool> {
    let (resource, sub) = x.resource.split_once('/').unwrap_or((x.resource, ""));
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(x.verb.into()),
                group: Some(x.group.into()),
                resource: Some(resource.into()),
                subresource: (!sub.is_empty()).then(|| sub.to_string()),
                namespace: (!x.cluster_scoped).then(|| namespace.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(c.client.clone());
    let pp = PostParams::default();
    let r = retry(ATTEMPTS, || api.create(&pp, &review))
        .await
        .map_err(|e| c.error("create a SelfSubjectAccessReview", &e))?;
    Ok(r.status.is_some_and(|s| s.allowed))
}

/// Every permission asked at once.
pub async fn rbac(c: &Cluster, namespace: &str, backend: &dyn KubeBackend) -> Check {
    let perms = backend.permissions();
    let backend = backend.name();
    let answers = join_all(perms.iter().map(|x| allowed(c, namespace, x))).await;
    let mut missing_needed = Vec::new();
    let mut missing_other = Vec::new();
    for (x, a) in perms.iter().zip(answers) {
        match a {
            Ok(true) => {}
            Ok(false) if x.needed => missing_needed.push(describe(x)),
            Ok(false) => missing_other.push(describe(x)),
            Err(e) => {
                return Check {
                    causes: crate::error::cause_lines(&e),
                    ..Check::warn(
                        "rbac",
                        format!("cannot ask what is allowed: {e}"),
                        "the API server must serve authorization.k8s.io/v1 SelfSubjectAccessReview",
                    )
                };
            }
        }
    }
    let hint = format!(
        "ask an admin to bind the rules of `hvdctl doctor --backend {backend} --print-role` in namespace {namespace}"
    );
    if !missing_needed.is_empty() {
        let also = if missing_other.is_empty() {
            String::new()
        } else {
            format!("; also missing: {}", missing_other.join(", "))
        };
        return Check::fail(
            "rbac",
            format!(
                "not allowed in namespace {namespace}: {}{also}",
                missing_needed.join(", ")
            ),
            hint,
        );
    }
    if !missing_other.is_empty() {
        return Check::warn(
            "rbac",
            format!(
                "runs work; not allowed: {} (doctor, deploy's checks, exec/cp/port-forward use them)",
                missing_other.join(", ")
            ),
            hint,
        );
    }
    Check::ok(
        "rbac",
        format!(
            "all {} verbs × resources hvdctl uses are allowed in namespace {namespace}",
            perms.len()
        ),
    )
}

pub use crate::cluster::nodes;

pub fn nodes_check(nodes: crate::Result<Vec<Node>>, app: &App) -> Check {
    let nodes = match nodes {
        Ok(n) => n,
        Err(e) => {
            return Check::warn(
                "nodes",
                format!("cannot tell: {e}"),
                "doctor needs `list nodes` at the cluster scope",
            );
        }
    };
    if nodes.is_empty() {
        return Check::warn("nodes", "the cluster lists no nodes", "");
    }
    let (fit, msg) = fit::nodes_for_worker(&nodes, app);
    if fit == 0 {
        Check::fail(
            "nodes",
            msg,
            "lower resources.worker / gpusPerWorker, or fix nodeSelector and tolerations",
        )
    } else {
        Check::ok("nodes", msg)
    }
}

/// What a prerequisite lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Exists,
    Missing,
    /// It exists but lacks what the run needs: why.
    Lacks(String),
    /// It could not be looked up: why.
    Unknown(String),
}

/// The objects the app names that must exist (a backend's `prerequisites`, e.g. the Trainer
/// runtime in `trainjob.runtime`): each one found, missing or lacking (the errors deploy
/// refuses with), or not looked up.
pub async fn prerequisite_errors(
    c: &Cluster,
    namespace: &str,
    app: &App,
    backend: &dyn KubeBackend,
) -> Vec<(crate::backend::Prerequisite, Found)> {
    let mut out = Vec::new();
    for p in backend.prerequisites(app) {
        let api = if p.namespaced {
            crate::cluster::apply::dynamic_api(c, namespace, p.kind)
        } else {
            crate::cluster::apply::dynamic_api_all(c, p.kind)
        };
        let found = match retry(ATTEMPTS, || api.get_opt(&p.name)).await {
            Ok(Some(o)) => match &p.needs {
                Some(n) => {
                    let v = serde_json::to_value(&o).unwrap_or_default();
                    if v.pointer(n.pointer).is_some() {
                        Found::Exists
                    } else {
                        Found::Lacks(n.missing.clone())
                    }
                }
                None => Found::Exists,
            },
            Ok(None) => Found::Missing,
            // A kind that is not served: the kinds check says so.
            Err(e) if status_code(&e) == Some(404) => Found::Missing,
            Err(e) => Found::Unknown(
                c.error(&format!("get {} {}", p.kind.kind, p.name), &e)
                    .to_string(),
            ),
        };
        out.push((p, found));
    }
    out
}

/// Where a prerequisite is looked for, for messages.
pub fn prerequisite_place(p: &crate::backend::Prerequisite, namespace: &str) -> String {
    if p.namespaced {
        format!("{} {} in namespace {namespace}", p.kind.kind, p.name)
    } else {
        format!("{} {}", p.kind.kind, p.name)
    }
}

/// One check per prerequisite of the backend (none when it has none).
pub async fn prerequisites(
    c: &Cluster,
    namespace: &str,
    app: &App,
    backend: &dyn KubeBackend,
) -> Vec<Check> {
    prerequisite_errors(c, namespace, app, backend)
        .await
        .into_iter()
        .map(|(p, found)| {
            let place = prerequisite_place(&p, namespace);
            match found {
                Found::Exists => Check::ok(p.what, format!("{place} exists")),
                Found::Missing => Check::fail(
                    p.what,
                    format!("{place} (named in {}) does not exist", p.what),
                    p.hint,
                ),
                Found::Lacks(why) => Check::fail(
                    p.what,
                    format!("{place} (named in {}) {why}", p.what),
                    p.needs.as_ref().map_or("", |n| n.hint),
                ),
                Found::Unknown(e) => Check::warn(p.what, e, ""),
            }
        })
        .collect()
}

/// The queue the app's runs wait in (`queue`, `scheduling.volcano`): its system's kinds
/// served, and for Kueue the LocalQueue in the namespace and the ClusterQueue it points at;
/// for Volcano its Queue. `None` for an app without a queue.
pub async fn queue(c: &Cluster, namespace: &str, app: &App) -> Option<Check> {
    use crate::backend::queue::{System, kinds};
    let (system, name) = crate::backend::queue::of(app)?;
    let needed: &[crate::kinds::ApiKind] = match system {
        System::Kueue => &[kinds::WORKLOAD, kinds::LOCAL_QUEUE, kinds::CLUSTER_QUEUE],
        System::Volcano => &[kinds::POD_GROUP, kinds::VOLCANO_QUEUE],
    };
    let (what, key, install) = match system {
        System::Kueue => (
            "Kueue",
            "queue",
            "install Kueue (v0.19, https://kueue.sigs.k8s.io), or remove `queue`",
        ),
        System::Volcano => (
            "Volcano",
            "scheduling.volcano",
            "install Volcano (https://volcano.sh), or remove `scheduling.volcano`",
        ),
    };
    let mut missing = Vec::new();
    for k in needed {
        match c.serves(*k).await {
            Ok(true) => {}
            Ok(false) => missing.push(k.to_string()),
            Err(e) => return Some(Check::warn("queue", e.message, "")),
        }
    }
    if !missing.is_empty() {
        return Some(Check::fail(
            "queue",
            format!(
                "{key}: {what} is not installed: {} not served",
                missing.join(", ")
            ),
            install,
        ));
    }
    let get = |kind, name: String, namespaced: bool| async move {
        let api = if namespaced {
            crate::cluster::apply::dynamic_api(c, namespace, kind)
        } else {
            crate::cluster::apply::dynamic_api_all(c, kind)
        };
        retry(ATTEMPTS, || api.get_opt(&name)).await.map_err(|e| {
            c.error(&format!("get {} {name}", kind.kind), &e)
                .to_string()
        })
    };
    Some(match system {
        System::Kueue => {
            let lq = match get(kinds::LOCAL_QUEUE, name.clone(), true).await {
                Ok(Some(lq)) => lq,
                Ok(None) => {
                    return Some(Check::fail(
                        "queue",
                        format!(
                            "LocalQueue {name} (named in queue) does not exist in namespace {namespace}: Kueue would never admit the runs"
                        ),
                        "name an existing LocalQueue (`kubectl get localqueues`), or ask an admin to create it",
                    ));
                }
                Err(e) => return Some(Check::warn("queue", e, "")),
            };
            let Some(cq) = lq
                .data
                .pointer("/spec/clusterQueue")
                .and_then(serde_json::Value::as_str)
                .map(String::from)
            else {
                return Some(Check::fail(
                    "queue",
                    format!("LocalQueue {name} in namespace {namespace} names no ClusterQueue"),
                    "ask an admin to fix the LocalQueue's spec.clusterQueue",
                ));
            };
            match get(kinds::CLUSTER_QUEUE, cq.clone(), false).await {
                Ok(Some(_)) => Check::ok(
                    "queue",
                    format!(
                        "Kueue: LocalQueue {name} in namespace {namespace} → ClusterQueue {cq}"
                    ),
                ),
                Ok(None) => Check::fail(
                    "queue",
                    format!(
                        "LocalQueue {name} points at ClusterQueue {cq}, which does not exist: Kueue would never admit the runs"
                    ),
                    "ask an admin to create the ClusterQueue, or name another LocalQueue in `queue`",
                ),
                Err(e) => Check::warn("queue", e, ""),
            }
        }
        System::Volcano => match get(kinds::VOLCANO_QUEUE, name.clone(), false).await {
            Ok(Some(_)) => Check::ok("queue", format!("Volcano: queue {name} exists")),
            Ok(None) => Check::fail(
                "queue",
                format!("Volcano queue {name} (scheduling.volcano.queue) does not exist"),
                "name an existing Volcano queue (`kubectl get queues.scheduling.volcano.sh`), or leave it unset for `default`",
            ),
            Err(e) => Check::warn("queue", e, ""),
        },
    })
}

pub async fn pull_secrets(c: &Cluster, namespace: &str, app: &App) -> Check {
    if app.image_pull_secrets.is_empty() {
        return Check::ok("pull-secrets", "no imagePullSecrets configured");
    }
    let api: Api<Secret> = Api::namespaced(c.client.clone(), namespace);
    let mut missing = Vec::new();
    for name in &app.image_pull_secrets {
        match retry(ATTEMPTS, || api.get_opt(name)).await {
            Ok(Some(_)) => {}
            Ok(None) => missing.push(name.clone()),
            Err(e) => {
                return Check::warn(
                    "pull-secrets",
                    c.error(&format!("get secret {name}"), &e).to_string(),
                    "",
                );
            }
        }
    }
    if missing.is_empty() {
        Check::ok(
            "pull-secrets",
            format!(
                "{} exist in namespace {namespace}",
                app.image_pull_secrets.join(", ")
            ),
        )
    } else {
        Check::fail(
            "pull-secrets",
            format!(
                "imagePullSecrets not in namespace {namespace}: {}",
                missing.join(", ")
            ),
            format!(
                "kubectl -n {namespace} create secret docker-registry NAME --docker-server=… --docker-username=… --docker-password=…"
            ),
        )
    }
}

/// The Secrets, ConfigMaps and claims `volumes:` names exist in the namespace (claims of
/// `storage:` are made by deploy; an `optional` Secret or ConfigMap may be missing). A pod
/// mounting one that does not exist waits for it forever.
pub async fn volume_sources(c: &Cluster, namespace: &str, app: &App) -> Check {
    const CHECK: &str = "volume-sources";
    let mut named: Vec<(&str, String, bool)> = Vec::new();
    for v in &app.volumes {
        if let Some(sec) = &v.secret {
            named.push((
                "secret",
                sec.secret_name.clone(),
                sec.optional == Some(true),
            ));
        }
        if let Some(cm) = &v.config_map {
            named.push(("configmap", cm.name.clone(), cm.optional == Some(true)));
        }
        // A claim `storage:` makes is made by deploy: not looked for.
        if let Some(p) = &v.pvc
            && !app
                .storage
                .iter()
                .any(|st| crate::backend::values::claim_name(app, &st.name) == p.claim_name)
        {
            named.push(("persistentvolumeclaim", p.claim_name.clone(), false));
        }
    }
    if named.is_empty() {
        return Check::ok(CHECK, "no Secret, ConfigMap or claim volumes");
    }
    let mut missing = Vec::new();
    for (kind, name, optional) in &named {
        match crate::cluster::reason::object_exists(c, namespace, kind, name).await {
            Some(true) => {}
            Some(false) if *optional => {}
            Some(false) => missing.push(format!("{kind} {name}")),
            None => {
                return Check::warn(
                    CHECK,
                    format!("could not ask whether {kind} {name} exists in namespace {namespace}"),
                    "",
                );
            }
        }
    }
    let all: Vec<String> = named.iter().map(|(k, n, _)| format!("{k} {n}")).collect();
    if missing.is_empty() {
        Check::ok(
            CHECK,
            format!("{} exist in namespace {namespace}", all.join(", ")),
        )
    } else {
        Check::fail(
            CHECK,
            format!(
                "volumes name what is not in namespace {namespace}: {} (its pods would wait for it forever)",
                missing.join(", ")
            ),
            format!(
                "create them first (kubectl -n {namespace} create secret generic NAME --from-file=…, kubectl -n {namespace} create configmap NAME --from-file=…), or let hvdctl make a claim with `storage:`"
            ),
        )
    }
}

/// Istio's sidecar breaks MPI's ssh and keeps pods running after the job: a namespace with
/// injection on is a failure unless the app's pods opt out.
pub async fn istio(c: &Cluster, namespace: &str, app: &App) -> Check {
    let api: Api<Namespace> = Api::all(c.client.clone());
    let ns = match retry(ATTEMPTS, || api.get_opt(namespace)).await {
        Ok(Some(ns)) => ns,
        Ok(None) => {
            return Check::warn(
                "istio",
                format!("namespace {namespace} does not exist"),
                "deploy --create-namespace creates it",
            );
        }
        Err(e) if status_code(&e) == Some(403) => {
            return Check::warn(
                "istio",
                format!("cannot read namespace {namespace} (403)"),
                "",
            );
        }
        Err(e) => return Check::warn("istio", c.error("get namespace", &e).to_string(), ""),
    };
    let labels = ns.metadata.labels.unwrap_or_default();
    let on = labels.get("istio-injection").map(String::as_str) == Some("enabled")
        || labels.contains_key("istio.io/rev");
    let opted_out = app
        .annotations
        .get("sidecar.istio.io/inject")
        .is_some_and(|v| v == "false");
    match (on, opted_out) {
        (false, _) => Check::ok(
            "istio",
            format!("no sidecar injection in namespace {namespace}"),
        ),
        (true, true) => Check::ok(
            "istio",
            format!(
                "namespace {namespace} injects Istio sidecars; the app's pods opt out (sidecar.istio.io/inject: \"false\")"
            ),
        ),
        (true, false) => Check::fail(
            "istio",
            format!(
                "namespace {namespace} injects Istio sidecars into the run's pods: they break MPI's ssh and keep workers running after the job"
            ),
            "set annotations[\"sidecar.istio.io/inject\"]=\"false\" in hvdctl.yaml",
        ),
    }
}

pub async fn quotas(c: &Cluster, namespace: &str) -> crate::Result<Vec<ResourceQuota>> {
    let api: Api<ResourceQuota> = Api::namespaced(c.client.clone(), namespace);
    let lp = ListParams::default();
    retry(ATTEMPTS, || api.list(&lp))
        .await
        .map(|l| l.items)
        .map_err(|e| c.error(&format!("list resourcequotas in namespace {namespace}"), &e))
}

pub fn quota_check(namespace: &str, quotas: crate::Result<Vec<ResourceQuota>>, app: &App) -> Check {
    let quotas = match quotas {
        Ok(q) => q,
        Err(e) => return Check::warn("quota", format!("cannot tell: {e}"), ""),
    };
    if quotas.is_empty() {
        return Check::ok(
            "quota",
            format!("no ResourceQuota in namespace {namespace}"),
        );
    }
    let totals = fit::run_totals(app);
    let short: Vec<String> = quotas
        .iter()
        .flat_map(|q| fit::quota_short(q, &totals))
        .collect();
    if short.is_empty() {
        Check::ok(
            "quota",
            format!(
                "{} ResourceQuota(s) in namespace {namespace} have room for the run",
                quotas.len()
            ),
        )
    } else {
        Check::fail(
            "quota",
            short.join("; "),
            "lower workers or resources, or free room in the namespace",
        )
    }
}
