//! The resource types served, and the discovery documents describing them.

use serde_json::{Value, json};

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
    /// Only served when the MPI Operator is "installed".
    pub mpi: bool,
}

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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
    },
    ResourceDef {
        group: "kubeflow.org",
        version: "v2beta1",
        kind: "MPIJob",
        plural: "mpijobs",
        singular: "mpijob",
        namespaced: true,
        short_names: &[],
        status_sub: true,
        mpi: true,
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
        mpi: false,
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
        mpi: false,
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
        mpi: false,
    },
];

/// Index of a resource in [`RESOURCES`].
pub type ResId = usize;

pub fn res(id: ResId) -> &'static ResourceDef {
    &RESOURCES[id]
}

pub fn find(group: &str, version: &str, plural: &str, mpi: bool) -> Option<ResId> {
    RESOURCES.iter().position(|r| {
        r.group == group && r.version == version && r.plural == plural && (mpi || !r.mpi)
    })
}

pub fn find_kind(api_version: &str, kind: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
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
pub const MPIJOBS: ResId = 9;
pub const PVCS: ResId = 10;
pub const NODES: ResId = 11;
pub const RESOURCEQUOTAS: ResId = 12;

fn categories(r: &ResourceDef) -> Vec<&'static str> {
    match r.plural {
        "pods" | "services" | "jobs" | "statefulsets" => vec!["all"],
        "mpijobs" => vec!["all", "kubeflow"],
        _ => vec![],
    }
}

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

fn groups(mpi: bool) -> Vec<(&'static str, &'static str)> {
    let mut g = vec![("apps", "v1"), ("batch", "v1")];
    if mpi {
        g.push(("kubeflow.org", "v2beta1"));
    }
    g
}

pub fn group_served(group: &str, version: &str, mpi: bool) -> bool {
    (group.is_empty() && version == "v1")
        || groups(mpi).iter().any(|&(g, v)| g == group && v == version)
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
pub fn api_group_list(mpi: bool) -> Value {
    let groups: Vec<Value> = groups(mpi)
        .into_iter()
        .map(|(g, v)| group_json(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`
pub fn api_group(group: &str, mpi: bool) -> Option<Value> {
    groups(mpi)
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
pub fn api_resource_list(group: &str, version: &str, mpi: bool) -> Value {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && (mpi || !r.mpi))
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
        let cats = categories(r);
        if !cats.is_empty() {
            main["categories"] = json!(cats);
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
pub fn openapi_v3_root(mpi: bool) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs = vec![("", "v1")];
    gvs.extend(groups(mpi));
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
pub fn openapi_v3_gv(group: &str, version: &str, mpi: bool) -> Option<Value> {
    if !group_served(group, version, mpi) {
        return None;
    }
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && (mpi || !r.mpi))
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
