//! The permissions a backend's runs use (what `doctor` asks with SelfSubjectAccessReview and
//! `doctor --print-role` writes as a Role): what every backend needs, plus the verbs hvdctl
//! uses on each kind the backend's runs are made of ([`super::KubeBackend::kinds`]).

use crate::kinds::KindDef;

/// One permission hvdctl uses: verb, API group, resource (`pods/log` with a subresource),
/// whether the run needs it, and whether it is cluster-scoped (read-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// The run (deploy, status, logs, undeploy) cannot do without it.
    pub needed: bool,
    pub cluster_scoped: bool,
}

const fn p(verb: &'static str, group: &'static str, resource: &'static str) -> Permission {
    Permission {
        verb,
        group,
        resource,
        needed: true,
        cluster_scoped: false,
    }
}

const fn optional(mut x: Permission) -> Permission {
    x.needed = false;
    x
}

const fn cluster(mut x: Permission) -> Permission {
    x.needed = false;
    x.cluster_scoped = true;
    x
}

/// What every Kubernetes backend needs: pods (status, logs, undeploy), events; exec and
/// port-forward only for `exec`/`cp`/`port-forward`/`tensorboard`; claims only for
/// `storage:`; nodes and namespaces
/// read at the cluster scope (doctor, deploy's checks, `--create-namespace`).
pub const COMMON: &[Permission] = &[
    p("get", "", "pods"),
    p("list", "", "pods"),
    p("watch", "", "pods"),
    p("delete", "", "pods"),
    p("get", "", "pods/log"),
    p("list", "", "events"),
    p("watch", "", "events"),
    optional(p("create", "", "pods/exec")),
    optional(p("create", "", "pods/portforward")),
    optional(p("list", "", "resourcequotas")),
    optional(p("get", "", "secrets")),
    // `volumes:` sources doctor looks for, and the claims `storage:` makes and lists.
    optional(p("get", "", "configmaps")),
    optional(p("get", "", "persistentvolumeclaims")),
    optional(p("list", "", "persistentvolumeclaims")),
    optional(p("create", "", "persistentvolumeclaims")),
    optional(p("delete", "", "persistentvolumeclaims")),
    cluster(p("list", "", "nodes")),
    cluster(p("get", "", "namespaces")),
    // `queue:` (Kueue): the run's Workload, its LocalQueue and ClusterQueue, its position.
    optional(p("list", "kueue.x-k8s.io", "workloads")),
    optional(p("get", "kueue.x-k8s.io", "workloads")),
    optional(p("get", "kueue.x-k8s.io", "localqueues")),
    optional(p(
        "get",
        "visibility.kueue.x-k8s.io",
        "localqueues/pendingworkloads",
    )),
    cluster(p("get", "kueue.x-k8s.io", "clusterqueues")),
    // `scheduling.volcano`: the run's PodGroup (the native backend makes it: its kinds).
    optional(p("get", "scheduling.volcano.sh", "podgroups")),
];

/// [`COMMON`] plus what hvdctl does to the objects of `kinds` (applied server-side, read,
/// listed, deleted by label).
pub fn permissions_for(kinds: &[KindDef]) -> Vec<Permission> {
    let mut out = COMMON.to_vec();
    for k in kinds {
        for verb in ["create", "get", "list", "patch", "delete"] {
            let x = p(verb, k.api.group(), k.api.plural);
            // A kind of the backend's own makes an optional entry of COMMON required.
            match out
                .iter()
                .position(|y| (y.verb, y.group, y.resource) == (x.verb, x.group, x.resource))
            {
                Some(i) => out[i] = x,
                None => out.push(x),
            }
        }
    }
    out
}

fn qualified(x: &Permission) -> String {
    if x.group.is_empty() {
        x.resource.to_string()
    } else {
        let (r, sub) = x.resource.split_once('/').unwrap_or((x.resource, ""));
        let sub = if sub.is_empty() {
            String::new()
        } else {
            format!("/{sub}")
        };
        format!("{r}.{}{sub}", x.group)
    }
}

/// `get pods/log`.
pub fn describe(x: &Permission) -> String {
    format!("{} {}", x.verb, qualified(x))
}
