//! Kueue v0.19 (`kueue.x-k8s.io/v1beta2`), as `fake-cluster --kueue [--kueue-quota Q]` plays
//! it: ResourceFlavors, ClusterQueues, LocalQueues and Workloads served; at start the
//! ResourceFlavor `default-flavor`, the ClusterQueue `gpu` holding the quota, and a LocalQueue
//! `team-a` (→ `gpu`) in every namespace, existing or created later; the webhooks' effects on
//! create ([`webhook`]); the job integrations (MPIJob, TrainJob, batch/v1 Job, pod groups and
//! single pods: [`jobs`]); the scheduler's admission in BestEffortFIFO order against the quota
//! with Kueue's conditions, messages and events ([`admission`]); the visibility API's pending
//! workloads ([`visibility`]).
//!
//! Read from kubernetes-sigs/kueue v0.19.2 with its default configuration and feature gates
//! (so the legacy reasons `Pending` and `Inadmissible`, `UnadmittedWorkloadsObservability`
//! being off). Not modelled: cohorts and borrowing, preemption, admission checks,
//! topology-aware scheduling (the `kueue.x-k8s.io/topology` gate is added and removed with the
//! admission gate, as without a topology assignment), partial admission, waitForPodsReady,
//! PriorityClass lookups (the fake serves no PriorityClass: every Workload's priority is 0),
//! ResourceFlavor node labels and tolerations are copied into the pods as Kueue does.

pub mod admission;
pub mod jobs;
pub mod visibility;
pub mod webhook;

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use crate::controllers::{Controllers, Operator};
use crate::error::ApiResult;
use crate::resources::{self, NAMESPACES, ResId, ResourceDef};
use crate::store::{Store, WriteOpts};
use crate::util::{name_of, uid_of};

pub const GROUP: &str = "kueue.x-k8s.io";
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
pub const MANAGED_LABEL: &str = "kueue.x-k8s.io/managed";
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";
pub const PODSET_LABEL: &str = "kueue.x-k8s.io/podset";
pub const LQ_LABEL: &str = "kueue.x-k8s.io/local-queue-name";
pub const CQ_LABEL: &str = "kueue.x-k8s.io/cluster-queue-name";
pub const GROUP_NAME: &str = "kueue.x-k8s.io/pod-group-name";
pub const GROUP_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";
pub const RETRIABLE: &str = "kueue.x-k8s.io/retriable-in-group";
pub const IS_GROUP: &str = "kueue.x-k8s.io/is-group-workload";
pub const ROLE_HASH: &str = "kueue.x-k8s.io/role-hash";
pub const ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";
pub const TOPOLOGY_GATE: &str = "kueue.x-k8s.io/topology";
pub const POD_FINALIZER: &str = "kueue.x-k8s.io/managed";
pub const WL_FINALIZER: &str = "kueue.x-k8s.io/resource-in-use";
pub const FLAVOR: &str = "default-flavor";
pub const CLUSTER_QUEUE: &str = "gpu";
pub const LOCAL_QUEUE: &str = "team-a";
/// The source of Kueue's events.
pub const COMPONENT: &str = "kueue-admission";

const fn def(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> ResourceDef {
    ResourceDef {
        group: GROUP,
        version: "v1beta2",
        kind,
        plural,
        singular,
        namespaced,
        short_names,
        status_sub: true,
        custom: true,
        categories: &[],
        validate: None,
    }
}

pub static RESOURCEFLAVORS: ResourceDef = ResourceDef {
    status_sub: false,
    ..def(
        "ResourceFlavor",
        "resourceflavors",
        "resourceflavor",
        false,
        &["flavor", "flavors", "rf"],
    )
};
pub static CLUSTERQUEUES: ResourceDef = def(
    "ClusterQueue",
    "clusterqueues",
    "clusterqueue",
    false,
    &["cq"],
);
pub static LOCALQUEUES: ResourceDef = def(
    "LocalQueue",
    "localqueues",
    "localqueue",
    true,
    &["queue", "queues", "lq"],
);
pub static WORKLOADS: ResourceDef = def(
    "Workload",
    "workloads",
    "workload",
    true,
    &["kwl", "kueueworkload", "kueueworkloads"],
);

/// The ClusterQueue's nominal quota per resource (`--kueue-quota cpu=8,nvidia.com/gpu=4`), in
/// the fake scheduler's units ([`crate::scheduler::amount`]: cpu in millicores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// Resource name → quantity as given.
    pub resources: BTreeMap<String, String>,
}

impl Default for Quota {
    fn default() -> Self {
        Quota {
            resources: BTreeMap::from([("cpu".to_string(), "8".to_string())]),
        }
    }
}

impl Quota {
    /// `name=quantity[,name=quantity]...`
    pub fn parse(text: &str) -> Result<Quota, String> {
        let mut resources = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("quota {part:?}: expected RESOURCE=QUANTITY"))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || !crate::util::is_dns_subdomain(k.rsplit('/').next().unwrap_or(k)) {
                return Err(format!("quota {part:?}: invalid resource name {k:?}"));
            }
            let ok = if k == "cpu" {
                crate::docker::spec::parse_nano_cpus(v).is_some()
            } else {
                crate::docker::spec::parse_bytes(v).is_some()
            };
            if !ok {
                return Err(format!("quota {part:?}: invalid quantity {v:?}"));
            }
            if resources.insert(k.to_string(), v.to_string()).is_some() {
                return Err(format!("quota: {k} given twice"));
            }
        }
        if resources.is_empty() {
            return Err("quota: no resource given".into());
        }
        Ok(Quota { resources })
    }
}

/// Kueue's controllers, scheduler and webhooks.
#[derive(Debug)]
pub struct Kueue {
    quota: Quota,
    /// Namespaces (by uid) already given their LocalQueue `team-a`: one deleted later stays
    /// deleted.
    seen_ns: Mutex<HashSet<String>>,
}

impl Kueue {
    pub fn new(quota: Quota) -> Kueue {
        Kueue {
            quota,
            seen_ns: Mutex::new(HashSet::new()),
        }
    }

    fn local_queues(&self, store: &Store) {
        let (nss, _) = store.list(NAMESPACES, None, &Default::default(), &Default::default());
        let lq = resources::register(&LOCALQUEUES);
        for n in nss {
            let fresh = self
                .seen_ns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid_of(&n).to_string());
            if fresh && n.pointer("/metadata/deletionTimestamp").is_none() {
                let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": LOCAL_QUEUE, "namespace": name_of(&n)},
                    "spec": {"clusterQueue": CLUSTER_QUEUE}});
                let _ = store.create(lq, name_of(&n), obj, &WriteOpts::default());
            }
        }
    }
}

impl Operator for Kueue {
    fn name(&self) -> &'static str {
        "kueue-controller-manager"
    }

    fn resources(&self) -> Vec<&'static ResourceDef> {
        vec![&RESOURCEFLAVORS, &CLUSTERQUEUES, &LOCALQUEUES, &WORKLOADS]
    }

    fn start(&self, store: &Store) {
        let rf = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR}, "spec": {}});
        let _ = store.create(
            resources::register(&RESOURCEFLAVORS),
            "",
            rf,
            &WriteOpts::default(),
        );
        let names: Vec<&String> = self.quota.resources.keys().collect();
        let quotas: Vec<Value> = self
            .quota
            .resources
            .iter()
            .map(|(k, v)| json!({"name": k, "nominalQuota": v}))
            .collect();
        let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "stopPolicy": "None",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "preemption": {"borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
            "resourceGroups": [{"coveredResources": names, "flavors": [{"name": FLAVOR, "resources": quotas}]}],
        }});
        let _ = store.create(
            resources::register(&CLUSTERQUEUES),
            "",
            cq,
            &WriteOpts::default(),
        );
        self.local_queues(store);
    }

    fn admit(&self, store: &Store, res_id: ResId, ns: &str, obj: &mut Value) -> ApiResult<()> {
        webhook::admit(store, res_id, ns, obj)
    }

    fn reconcile(&self, ctl: &Controllers, now: i64) {
        self.local_queues(&ctl.store);
        jobs::sync(ctl, now);
        admission::schedule(&ctl.store, now);
        jobs::start_and_stop(ctl, now);
        admission::queue_status(&ctl.store, now);
    }

    fn get_path(&self, store: &Store, path: &[&str]) -> Option<ApiResult<Value>> {
        visibility::get(store, path)
    }
}

/// The queue a job names (its `kueue.x-k8s.io/queue-name` label), when not empty.
pub fn queue_name(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(QUEUE_LABEL))
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
}

pub use crate::scheduler::fmt_amount;

/// A map of resource → quantity string.
pub fn resource_list(m: &BTreeMap<String, i64>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), json!(fmt_amount(k, *v))))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_and_amounts() {
        let q = Quota::parse("cpu=8,nvidia.com/gpu=4").unwrap();
        assert_eq!(q.resources["nvidia.com/gpu"], "4");
        assert_eq!(Quota::default().resources["cpu"], "8");
        assert!(Quota::parse("cpu").is_err());
        assert!(Quota::parse("cpu=lots").is_err());
        assert!(Quota::parse("").is_err());
        assert_eq!(fmt_amount("cpu", 500), "500m");
        assert_eq!(fmt_amount("cpu", 4000), "4");
        assert_eq!(fmt_amount("memory", 1 << 30), "1Gi");
        assert_eq!(fmt_amount("memory", 1536 << 20), "1536Mi");
        assert_eq!(fmt_amount("nvidia.com/gpu", 2), "2");
    }
}
