//! Nodes and the scheduler (`--nodes N`): Node objects with a fixed capacity, and a
//! scheduler that binds each pending pod to a node that fits it or leaves it Pending with
//! the real scheduler's `Unschedulable` condition and `FailedScheduling` event.
//!
//! Per node, the filters run in the default profile's order and the first one that fails
//! gives that node's reasons: taints (`NoSchedule`/`NoExecute` without a matching
//! toleration), `nodeSelector`, then resources (pod count, then every requested resource:
//! sum of the containers' requests, or the largest init container's if more, against
//! allocatable minus what the node's bound, unfinished pods request). Among the nodes that
//! fit, the least allocated (mean of cpu and memory fractions) wins, lowest index on ties.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::docker::spec::{parse_bytes, parse_nano_cpus};
use crate::resources::PODS;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Store, WriteOpts};
use crate::util::{fmt_time, name_of, now_ns, ns_of, s, uid_of};

pub const GPU: &str = "nvidia.com/gpu";
const MAX_PODS: i64 = 110;

/// The nodes to create (`--nodes` and friends).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub count: usize,
    /// A CPU quantity (`8`, `3500m`).
    pub cpu: String,
    /// A memory quantity (`32Gi`).
    pub memory: String,
    pub gpus: u32,
    /// `key=value:Effect` or `key:Effect`.
    pub taints: Vec<String>,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            count: 0,
            cpu: "8".into(),
            memory: "32Gi".into(),
            gpus: 0,
            taints: Vec::new(),
        }
    }
}

/// `key=value:Effect` / `key:Effect` → a Node taint.
pub fn parse_taint(t: &str) -> Result<Value, String> {
    let (kv, effect) = t
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {t:?}: expected key=value:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "taint {t:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("taint {t:?}: empty key"));
    }
    let mut taint = json!({"key": key, "effect": effect});
    if !value.is_empty() {
        taint["value"] = json!(value);
    }
    Ok(taint)
}

impl NodeSpec {
    pub fn validate(&self) -> Result<(), String> {
        parse_nano_cpus(&self.cpu)
            .filter(|c| *c > 0)
            .ok_or_else(|| format!("invalid node cpu {:?}", self.cpu))?;
        parse_bytes(&self.memory)
            .filter(|m| *m > 0)
            .ok_or_else(|| format!("invalid node memory {:?}", self.memory))?;
        for t in &self.taints {
            parse_taint(t)?;
        }
        Ok(())
    }

    /// Node `fake-node-<i>`, Ready, with this capacity (allocatable = capacity).
    pub fn node(&self, i: usize) -> Value {
        let name = format!("fake-node-{i}");
        let mut capacity = json!({
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": MAX_PODS.to_string(),
            "ephemeral-storage": "100Gi",
        });
        if self.gpus > 0 {
            capacity[GPU] = json!(self.gpus.to_string());
        }
        let taints: Vec<Value> = self
            .taints
            .iter()
            .filter_map(|t| parse_taint(t).ok())
            .collect();
        let now = fmt_time(now_ns());
        let cond = |t: &str, st: &str, reason: &str, msg: &str| {
            json!({"type": t, "status": st, "reason": reason, "message": msg,
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let ip = format!("172.18.0.{}", 2 + i);
        let mut spec = json!({"podCIDR": format!("10.244.{i}.0/24"), "podCIDRs": [format!("10.244.{i}.0/24")]});
        if !taints.is_empty() {
            spec["taints"] = json!(taints);
        }
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            }},
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                ],
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"), "bootID": format!("{i:032x}"),
                    "kernelVersion": "6.1.0-fake", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.0-fake",
                    "kubeletVersion": "v1.32.0-fake", "kubeProxyVersion": "v1.32.0-fake",
                    "operatingSystem": "linux", "architecture": "amd64",
                },
            },
        })
    }
}

/// A resource amount in the scheduler's units: cpu in millicores, everything else whole
/// (memory and storage in bytes).
pub fn amount(resource: &str, q: &Value) -> i64 {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return 0,
    };
    if resource == "cpu" {
        parse_nano_cpus(&text).map_or(0, |n| (n + 999_999) / 1_000_000)
    } else {
        parse_bytes(&text).unwrap_or(0)
    }
}

/// What a pod requests: per resource, the sum over containers (a request, else the limit,
/// as the apiserver defaults it), or the largest init container's when that is more.
pub fn pod_requests(pod: &Value) -> BTreeMap<String, i64> {
    let of = |c: &Value| -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for ptr in ["/resources/limits", "/resources/requests"] {
            for (k, v) in c
                .pointer(ptr)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                m.insert(k.clone(), amount(k, v));
            }
        }
        m
    };
    let list = |k: &str| {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for c in list("containers") {
        for (k, v) in of(&c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in list("initContainers") {
        for (k, v) in of(&c) {
            let e = total.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    total.retain(|_, v| *v > 0);
    total
}

fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    let (tk, tv, te) = (
        s(taint, "/key").unwrap_or_default(),
        s(taint, "/value").unwrap_or_default(),
        s(taint, "/effect").unwrap_or_default(),
    );
    tolerations.iter().any(|t| {
        let effect_ok = s(t, "/effect").is_none_or(|e| e.is_empty() || e == te);
        let key = s(t, "/key").unwrap_or_default();
        let key_ok = match s(t, "/operator").unwrap_or("Equal") {
            "Exists" => key.is_empty() || key == tk,
            _ => key == tk && s(t, "/value").unwrap_or_default() == tv,
        };
        effect_ok && key_ok
    })
}

/// Why `pod` does not fit `node`; empty when it does. `used` is what the node's pods
/// request (with `pods` counted), `unresolvable` tells preemption could not help.
pub fn misfit(
    pod: &Value,
    req: &BTreeMap<String, i64>,
    node: &Value,
    used: &BTreeMap<String, i64>,
) -> (Vec<String>, bool) {
    let tolerations = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for t in node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let blocking = matches!(s(t, "/effect"), Some("NoSchedule" | "NoExecute"));
        if blocking && !tolerates(&tolerations, t) {
            return (
                vec![format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    s(t, "/key").unwrap_or_default(),
                    s(t, "/value").unwrap_or_default()
                )],
                true,
            );
        }
    }
    if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
        let labels = &node["metadata"]["labels"];
        if sel.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return (
                vec!["node(s) didn't match Pod's node affinity/selector".into()],
                true,
            );
        }
    }
    let alloc = |k: &str| {
        node.pointer("/status/allocatable")
            .and_then(|a| a.get(k))
            .map_or(0, |q| amount(k, q))
    };
    let mut why = Vec::new();
    if used.get("pods").copied().unwrap_or(0) + 1 > alloc("pods") {
        why.push("Too many pods".to_string());
    }
    // cpu, memory, ephemeral-storage, then the rest, as the resource-fit filter orders them.
    let mut keys: Vec<&String> = req.keys().collect();
    let rank = |k: &str| match k {
        "cpu" => 0,
        "memory" => 1,
        "ephemeral-storage" => 2,
        _ => 3,
    };
    keys.sort_by_key(|k| (rank(k), (*k).clone()));
    for k in keys {
        if k == "pods" {
            continue;
        }
        let have = alloc(k) - used.get(k.as_str()).copied().unwrap_or(0);
        if req[k] > have {
            why.push(format!("Insufficient {k}"));
        }
    }
    (why, false)
}

/// `0/N nodes are available: <count reason>, ... . preemption: 0/N nodes are available: ...`
/// — the real scheduler's message: each histogram entry is `"<count> <reason>"`, the
/// entries sorted as strings and joined with ", ". No pod is ever preempted here, so every
/// node failing on resources reads "No preemption victims found for incoming pod".
pub fn unschedulable_message(n: usize, per_node: &[(Vec<String>, bool)]) -> String {
    let hist = |items: Vec<String>| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in items {
            *counts.entry(r).or_default() += 1;
        }
        let mut v: Vec<String> = counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
        v.sort();
        v.join(", ")
    };
    let reasons = hist(per_node.iter().flat_map(|(r, _)| r.clone()).collect());
    let preempt = hist(
        per_node
            .iter()
            .map(|(_, unresolvable)| {
                if *unresolvable {
                    "Preemption is not helpful for scheduling".to_string()
                } else {
                    "No preemption victims found for incoming pod".to_string()
                }
            })
            .collect(),
    );
    if n == 0 {
        return "no nodes available to schedule pods".into();
    }
    format!(
        "0/{n} nodes are available: {reasons}. preemption: 0/{n} nodes are available: {preempt}."
    )
}

/// Whether `pod` still has `spec.schedulingGates`: no scheduler places it until they are
/// removed (its PodScheduled condition says `SchedulingGated`, set when it was created).
pub fn scheduling_gated(pod: &Value) -> bool {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
}

/// Whether the default scheduler may place `pod` (or, with no Node objects, the kubelet
/// that binds in its place): not gated, and no other scheduler named (a pod naming
/// `volcano` waits for Volcano, or forever where none runs, as on a real cluster).
pub fn for_default_scheduler(pod: &Value) -> bool {
    !scheduling_gated(pod)
        && s(pod, "/spec/schedulerName").is_none_or(|n| n.is_empty() || n == "default-scheduler")
}

fn terminal(p: &Value) -> bool {
    matches!(s(p, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// What each node's bound, unfinished pods request (with `pods` counted), in `nodes`' order.
pub fn node_usage(nodes: &[Arc<Value>], pods: &[Arc<Value>]) -> Vec<BTreeMap<String, i64>> {
    nodes
        .iter()
        .map(|n| {
            let mut u: BTreeMap<String, i64> = BTreeMap::new();
            for p in pods
                .iter()
                .filter(|p| s(p, "/spec/nodeName") == Some(name_of(n)) && !terminal(p))
            {
                for (k, v) in pod_requests(p) {
                    *u.entry(k).or_default() += v;
                }
                *u.entry("pods".into()).or_default() += 1;
            }
            u
        })
        .collect()
}

/// A quantity as Kubernetes prints it (Kueue's `resource_formatter.go` too): cpu from
/// millicores (`500m`, `2`), memory-like resources in binary units (`1Gi`), the rest as
/// DecimalSI integers (`4`, `1k`).
pub fn fmt_amount(resource: &str, v: i64) -> String {
    fn decimal(v: i64) -> String {
        for (f, u) in [
            (1_000_000_000_000i64, "T"),
            (1_000_000_000, "G"),
            (1_000_000, "M"),
            (1_000, "k"),
        ] {
            if v != 0 && v % f == 0 {
                return format!("{}{u}", v / f);
            }
        }
        v.to_string()
    }
    if resource == "cpu" {
        if v % 1000 == 0 {
            decimal(v / 1000)
        } else {
            format!("{v}m")
        }
    } else if resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-")
    {
        const UNITS: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
        for (i, u) in UNITS.iter().enumerate() {
            let f = 1i64 << (10 * (6 - i));
            if v != 0 && v % f == 0 {
                return format!("{}{u}", v / f);
            }
        }
        v.to_string()
    } else {
        decimal(v)
    }
}

/// One scheduling pass: binds what fits, marks the rest Unschedulable (once per change of
/// message, with a `FailedScheduling` event).
pub fn schedule(store: &Store, nodes_res: usize) {
    let all = (LabelSelector::default(), FieldSelector::default());
    let (nodes, _) = store.list(nodes_res, None, &all.0, &all.1);
    let (pods, _) = store.list(PODS, None, &all.0, &all.1);
    let mut pending: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| {
            s(p, "/spec/nodeName").is_none_or(str::is_empty)
                && !terminal(p)
                && p.pointer("/metadata/deletionTimestamp").is_none()
                && for_default_scheduler(p)
        })
        .collect();
    if pending.is_empty() {
        return;
    }
    pending.sort_by(|a, b| {
        (s(a, "/metadata/creationTimestamp"), ns_of(a), name_of(a)).cmp(&(
            s(b, "/metadata/creationTimestamp"),
            ns_of(b),
            name_of(b),
        ))
    });
    let mut used = node_usage(&nodes, &pods);
    let now = fmt_time(now_ns());
    for pod in pending {
        // The volume binding check comes first, as the real scheduler's plugin: a claim that
        // does not exist, or is not bound yet, keeps the pod off every node.
        if let Some(problem) = claim_problem(store, pod) {
            let n = nodes.len();
            let msg = format!(
                "0/{n} nodes are available: {problem}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
            );
            unschedulable(store, pod, &msg, &now);
            continue;
        }
        let req = pod_requests(pod);
        let results: Vec<(Vec<String>, bool)> = nodes
            .iter()
            .zip(&used)
            .map(|(n, u)| misfit(pod, &req, n, u))
            .collect();
        let score = |i: usize| {
            let frac = |k: &str| {
                let a = nodes[i]
                    .pointer("/status/allocatable")
                    .and_then(|a| a.get(k))
                    .map_or(0, |q| amount(k, q));
                if a <= 0 {
                    0.0
                } else {
                    used[i].get(k).copied().unwrap_or(0) as f64 / a as f64
                }
            };
            (frac("cpu") + frac("memory")) / 2.0
        };
        let best = (0..nodes.len())
            .filter(|&i| results[i].0.is_empty())
            .min_by(|&a, &b| score(a).total_cmp(&score(b)).then(a.cmp(&b)));
        let (ns, name, uid) = (ns_of(pod), name_of(pod), uid_of(pod).to_string());
        match best {
            Some(i) => {
                let node = name_of(&nodes[i]).to_string();
                for (k, v) in &req {
                    *used[i].entry(k.clone()).or_default() += v;
                }
                *used[i].entry("pods".into()).or_default() += 1;
                let bound = store.mutate(PODS, ns, name, |p| {
                    if uid_of(p) == uid {
                        p["spec"]["nodeName"] = json!(node);
                        set_scheduled(p, "True", None, &now);
                    }
                });
                if bound.is_some() {
                    store.record_event(
                        pod,
                        "Normal",
                        "Scheduled",
                        &format!("Successfully assigned {ns}/{name} to {node}"),
                        "default-scheduler",
                    );
                }
            }
            None => {
                let msg = unschedulable_message(nodes.len(), &results);
                unschedulable(store, pod, &msg, &now);
            }
        }
    }
}

/// Marks `pod` unschedulable with `msg` (once per change of message, with a
/// `FailedScheduling` event).
fn unschedulable(store: &Store, pod: &Value, msg: &str, now: &str) {
    let (ns, name, uid) = (ns_of(pod), name_of(pod), uid_of(pod).to_string());
    let current = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| s(c, "/type") == Some("PodScheduled")))
        .and_then(|c| s(c, "/message"));
    if current == Some(msg) {
        return;
    }
    store.mutate(PODS, ns, name, |p| {
        if uid_of(p) == uid {
            set_scheduled(p, "False", Some(msg), now);
        }
    });
    store.record_event(pod, "Warning", "FailedScheduling", msg, "default-scheduler");
}

/// What keeps `pod` off every node because of its claims: one that does not exist, or one
/// not bound yet.
fn claim_problem(store: &Store, pod: &Value) -> Option<String> {
    let ns = ns_of(pod);
    let mut unbound = false;
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(claim) = v
            .pointer("/persistentVolumeClaim/claimName")
            .and_then(Value::as_str)
        else {
            continue;
        };
        match store.get(crate::resources::PVCS, ns, claim) {
            None => return Some(format!("persistentvolumeclaim \"{claim}\" not found")),
            Some(c) if s(&c, "/status/phase") != Some("Bound") => unbound = true,
            Some(_) => {}
        }
    }
    unbound.then(|| "pod has unbound immediate PersistentVolumeClaims".to_string())
}

fn set_scheduled(p: &mut Value, status: &str, msg: Option<&str>, now: &str) {
    if !p["status"].is_object() {
        p["status"] = json!({"phase": "Pending"});
    }
    if !p["status"]["conditions"].is_array() {
        p["status"]["conditions"] = json!([]);
    }
    let conds = p["status"]["conditions"].as_array_mut().expect("array");
    conds.retain(|c| s(c, "/type") != Some("PodScheduled"));
    let mut c = json!({"type": "PodScheduled", "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(m) = msg {
        c["reason"] = json!("Unschedulable");
        c["message"] = json!(m);
    }
    conds.push(c);
}

/// Creates the Node objects (and their `RegisteredNode`-style events are not modelled).
pub fn create_nodes(store: &Store, nodes_res: usize, spec: &NodeSpec) {
    for i in 0..spec.count {
        let _ = store.create(nodes_res, "", spec.node(i), &WriteOpts::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_shape_and_order() {
        let r = |v: &[&str], u: bool| (v.iter().map(|s| s.to_string()).collect(), u);
        assert_eq!(
            unschedulable_message(
                2,
                &[
                    r(&["Insufficient nvidia.com/gpu"], false),
                    r(&["Insufficient nvidia.com/gpu"], false)
                ]
            ),
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        );
        assert_eq!(
            unschedulable_message(
                3,
                &[
                    r(&["Insufficient cpu", "Insufficient memory"], false),
                    r(&["Insufficient cpu"], false),
                    r(&["node(s) had untolerated taint {gpu: yes}"], true)
                ]
            ),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint {gpu: yes}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn requests_taints_selectors() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"limits": {"cpu": "1", GPU: 1}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        }});
        let req = pod_requests(&pod);
        assert_eq!(req["cpu"], 2000);
        assert_eq!(req["memory"], 1 << 30);
        assert_eq!(req[GPU], 1);
        let spec = NodeSpec {
            count: 1,
            cpu: "4".into(),
            memory: "8Gi".into(),
            gpus: 0,
            taints: vec!["dedicated=ml:NoSchedule".into()],
        };
        let node = spec.node(0);
        let used = BTreeMap::new();
        assert_eq!(
            misfit(&pod, &req, &node, &used).0,
            ["node(s) had untolerated taint {dedicated: ml}"]
        );
        let mut tolerant = pod.clone();
        tolerant["spec"]["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
        assert_eq!(
            misfit(&tolerant, &req, &node, &used).0,
            ["Insufficient nvidia.com/gpu"]
        );
        tolerant["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "fake-node-9"});
        assert_eq!(
            misfit(&tolerant, &req, &node, &used).0,
            ["node(s) didn't match Pod's node affinity/selector"]
        );
        assert!(parse_taint("k=v:Sometimes").is_err());
        assert_eq!(
            parse_taint("k:NoExecute").unwrap(),
            json!({"key": "k", "effect": "NoExecute"})
        );
    }
}
