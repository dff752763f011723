//! The resource types served, and the discovery documents describing them. Built-in kinds
//! are [`RESOURCES`]; an operator's custom resources are [`register`]ed (by the cluster that
//! runs the operator, see [`crate::controllers::Operator`]) and served only by the clusters
//! that run it.

use serde_json::{Value, json};
use std::sync::RwLock;

use crate::error::ApiResult;

/// One served resource type.
#[derive(Debug)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Has a `/status` subresource (status is ignored on writes of the main resource).
    pub status_sub: bool,
    /// A custom resource: served only where its operator runs.
    pub custom: bool,
    /// `kubectl get CATEGORY` names it (`all`).
    pub categories: &'static [&'static str],
    /// Checks beyond metadata on create and update (a CRD's schema).
    pub validate: Option<Validator>,
}

/// A custom resource's check of an object (its definition, the object's name, the object).
pub type Validator = fn(&ResourceDef, &str, &Value) -> ApiResult<()>;

impl ResourceDef {
    /// `pods`, `jobs.batch`, `mpijobs.kubeflow.org`: how the apiserver names it in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub static RESOURCES: &[ResourceDef] = &[
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        namespaced: false,
        short_names: &["ns"],
        status_sub: true,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        namespaced: true,
        short_names: &["po"],
        status_sub: true,
        custom: false,
        categories: &["all"],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        singular: "service",
        namespaced: true,
        short_names: &["svc"],
        status_sub: true,
        custom: false,
        categories: &["all"],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        namespaced: true,
        short_names: &["cm"],
        status_sub: false,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        namespaced: true,
        short_names: &[],
        status_sub: false,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        namespaced: true,
        short_names: &["ev"],
        status_sub: false,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        namespaced: true,
        short_names: &["sa"],
        status_sub: false,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        singular: "job",
        namespaced: true,
        short_names: &[],
        status_sub: true,
        custom: false,
        categories: &["all"],
        validate: None,
    },
    ResourceDef {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
        singular: "statefulset",
        namespaced: true,
        short_names: &["sts"],
        status_sub: true,
        custom: false,
        categories: &["all"],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        namespaced: true,
        short_names: &["pvc"],
        status_sub: true,
        custom: false,
        categories: &[],
        validate: None,
    },
    ResourceDef {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        singular: "node",
        namespaced: false,
        short_names: &["no"],
        status_sub: true,
        custom: false,
        categories: &[],
        validate: None,
    },
    // No quota controller: a test writes `status.hard`/`status.used` itself (hence no
    // status subresource).
    ResourceDef {
        group: "",
        version: "v1",
        kind: "ResourceQuota",
        plural: "resourcequotas",
        singular: "resourcequota",
        namespaced: true,
        short_names: &["quota"],
        status_sub: false,
        custom: false,
        categories: &[],
        validate: None,
    },
];

/// Index of a resource in the registry ([`res`]): the built-in ones first, in the order of
/// [`RESOURCES`], then registered custom resources.
pub type ResId = usize;

/// Custom resources registered so far (after the built-in ones).
static REGISTERED: RwLock<Vec<&'static ResourceDef>> = RwLock::new(Vec::new());

fn registered() -> std::sync::RwLockReadGuard<'static, Vec<&'static ResourceDef>> {
    REGISTERED.read().unwrap_or_else(|p| p.into_inner())
}

/// Adds a custom resource to the registry (once: the same group, version and plural get the
/// same id) and returns its id.
pub fn register(def: &'static ResourceDef) -> ResId {
    let mut reg = REGISTERED.write().unwrap_or_else(|p| p.into_inner());
    let same = |r: &ResourceDef| {
        r.group == def.group && r.version == def.version && r.plural == def.plural
    };
    if let Some(i) = RESOURCES.iter().position(same) {
        return i;
    }
    if let Some(i) = reg.iter().position(|r| same(r)) {
        return RESOURCES.len() + i;
    }
    reg.push(def);
    RESOURCES.len() + reg.len() - 1
}

/// How many resources the registry holds.
pub fn count() -> usize {
    RESOURCES.len() + registered().len()
}

pub fn res(id: ResId) -> &'static ResourceDef {
    match id.checked_sub(RESOURCES.len()) {
        None => &RESOURCES[id],
        Some(i) => registered()[i],
    }
}

/// Every resource a cluster serving the custom resources `custom` serves, with its id.
pub fn served(custom: &[ResId]) -> Vec<(ResId, &'static ResourceDef)> {
    let mut out: Vec<(ResId, &'static ResourceDef)> = RESOURCES.iter().enumerate().collect();
    out.extend(custom.iter().map(|&id| (id, res(id))));
    out
}

pub fn find(group: &str, version: &str, plural: &str, custom: &[ResId]) -> Option<ResId> {
    served(custom)
        .into_iter()
        .find(|(_, r)| r.group == group && r.version == version && r.plural == plural)
        .map(|(id, _)| id)
}

pub fn find_kind(api_version: &str, kind: &str, custom: &[ResId]) -> Option<ResId> {
    served(custom)
        .into_iter()
        .find(|(_, r)| r.api_version() == api_version && r.kind == kind)
        .map(|(id, _)| id)
}

/// Whether any cluster could serve `kind` of `api_version` (built-in or registered).
pub fn known_kind(api_version: &str, kind: &str) -> bool {
    (0..count()).any(|id| {
        let r = res(id);
        r.api_version() == api_version && r.kind == kind
    })
}

pub fn by_plural(plural: &str) -> ResId {
    RESOURCES
        .iter()
        .position(|r| r.plural == plural)
        .expect("known resource")
}

pub const NAMESPACES: ResId = 0;
pub const PODS: ResId = 1;
pub const SERVICES: ResId = 2;
pub const CONFIGMAPS: ResId = 3;
pub const SECRETS: ResId = 4;
pub const EVENTS: ResId = 5;
pub const JOBS: ResId = 7;
pub const STATEFULSETS: ResId = 8;
pub const PVCS: ResId = 9;
pub const NODES: ResId = 10;
pub const RESOURCEQUOTAS: ResId = 11;

/// `/version`
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.4",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn groups(custom: &[ResId]) -> Vec<(&'static str, &'static str)> {
    let mut g = vec![("apps", "v1"), ("batch", "v1")];
    for &id in custom {
        let r = res(id);
        if !g.contains(&(r.group, r.version)) {
            g.push((r.group, r.version));
        }
    }
    g
}

pub fn group_served(group: &str, version: &str, custom: &[ResId]) -> bool {
    (group.is_empty() && version == "v1")
        || groups(custom)
            .iter()
            .any(|&(g, v)| g == group && v == version)
}

fn group_json(g: &str, v: &str) -> Value {
    let gv = format!("{g}/{v}");
    json!({
        "name": g,
        "versions": [{"groupVersion": gv, "version": v}],
        "preferredVersion": {"groupVersion": gv, "version": v}
    })
}

/// `/apis`
pub fn api_group_list(custom: &[ResId]) -> Value {
    let groups: Vec<Value> = groups(custom)
        .into_iter()
        .map(|(g, v)| group_json(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`
pub fn api_group(group: &str, custom: &[ResId]) -> Option<Value> {
    groups(custom)
        .into_iter()
        .find(|(g, _)| *g == group)
        .map(|(g, v)| {
            let mut j = group_json(g, v);
            j["kind"] = json!("APIGroup");
            j["apiVersion"] = json!("v1");
            j
        })
}

/// `/api/v1` or `/apis/<group>/<version>`
pub fn api_resource_list(group: &str, version: &str, custom: &[ResId]) -> Value {
    let mut resources = Vec::new();
    for (_, r) in served(custom)
        .into_iter()
        .filter(|(_, r)| r.group == group && r.version == version)
    {
        let mut main = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ALL_VERBS,
        });
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            main["categories"] = json!(r.categories);
        }
        resources.push(main);
        if r.status_sub {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.plural == "pods" {
            resources.push(json!({
                "name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group/version.
pub fn openapi_v3_root(custom: &[ResId]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs = vec![("", "v1")];
    gvs.extend(groups(custom));
    for (g, v) in gvs {
        let p = gv_path(g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=FAKE{}", p.len())}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<gv>`: a minimal OpenAPI 3 document. It declares, per kind, the PATCH
/// operation with its query parameters (kubectl looks there to learn that the server
/// supports `fieldValidation`); schemas are left open.
pub fn openapi_v3_gv(group: &str, version: &str, custom: &[ResId]) -> Option<Value> {
    if !group_served(group, version, custom) {
        return None;
    }
    let mut paths = serde_json::Map::new();
    for (_, r) in served(custom)
        .into_iter()
        .filter(|(_, r)| r.group == group && r.version == version)
    {
        let base = if r.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                r.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), r.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let params: Vec<Value> = ["dryRun", "fieldManager", "fieldValidation", "force"]
            .iter()
            .map(|n| json!({"name": n, "in": "query", "schema": {"type": if *n == "force" { "boolean" } else { "string" }, "uniqueItems": true}}))
            .collect();
        let op = |action: &str| {
            json!({
                "operationId": format!("{action}{}", r.kind),
                "parameters": params,
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        paths.insert(format!("{base}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
        paths.insert(base, json!({"get": op("list"), "post": op("post")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-fake"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
