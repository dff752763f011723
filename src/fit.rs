//! The arithmetic of "will it fit", contacting nothing: what one pod of the run requests,
//! which nodes could hold one worker by allocatable capacity (resources, `nodeSelector`,
//! taints and tolerations), and whether a namespace's ResourceQuotas have room for the run.
//! `doctor` reports it; `deploy` refuses a run that fits nowhere.

use crate::app::App;
use crate::app::spec::{ResourceSpec, TaintEffect, Toleration, TolerationOperator};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota, Taint};
use quantity::Quantity;
use std::collections::BTreeMap;

pub const GPU: &str = "nvidia.com/gpu";

/// Resource name → amount (cores, bytes, devices).
pub type Amounts = BTreeMap<String, Quantity>;

/// A quantity hvdctl reads from the app, an object or a node (`None`: not one).
fn amount(q: &str) -> Option<Quantity> {
    Quantity::parse(q).ok()
}

/// What one pod requests: each resource's request, or its limit when only that is set (as
/// Kubernetes defaults it), and `gpus` of `nvidia.com/gpu`.
pub fn requests(spec: &ResourceSpec, gpus: u32) -> Amounts {
    let mut out = Amounts::new();
    for (k, q) in spec.limits.iter().chain(spec.requests.iter()) {
        if let Some(v) = amount(q) {
            out.insert(k.clone(), v);
        }
    }
    if gpus > 0 {
        out.insert(GPU.into(), Quantity::from_units(gpus.into()));
    }
    out
}

/// What one pod may use at most: limits, else requests.
fn limits(spec: &ResourceSpec, gpus: u32) -> Amounts {
    let mut out = Amounts::new();
    for (k, q) in spec.requests.iter().chain(spec.limits.iter()) {
        if let Some(v) = amount(q) {
            out.insert(k.clone(), v);
        }
    }
    if gpus > 0 {
        out.insert(GPU.into(), Quantity::from_units(gpus.into()));
    }
    out
}

/// One worker's requests.
pub fn worker(app: &App) -> Amounts {
    requests(&app.resources.worker, app.gpus_per_worker)
}

/// `250m`, `2`, `512Mi`, `1.5Gi`, `1`: an amount as people write it.
pub fn show(resource: &str, q: Quantity) -> String {
    let v = q.as_f64();
    if resource.ends_with("cpu") {
        if v.fract() == 0.0 {
            format!("{v}")
        } else {
            format!("{}m", (v * 1000.0).round())
        }
    } else if resource.ends_with("memory") || resource.contains("storage") {
        let (gi, mi) = (v / (1u64 << 30) as f64, v / (1u64 << 20) as f64);
        if gi >= 1.0 {
            format!("{}Gi", (gi * 100.0).round() / 100.0)
        } else {
            format!("{}Mi", (mi * 100.0).round() / 100.0)
        }
    } else {
        format!("{v}")
    }
}

/// A byte count as [`show`] writes memory.
pub fn show_bytes(bytes: u64) -> String {
    show(
        "memory",
        Quantity::from_units(i64::try_from(bytes).unwrap_or(i64::MAX)),
    )
}

/// `cpu 250m, memory 256Mi, nvidia.com/gpu 1`.
pub fn show_all(a: &Amounts) -> String {
    if a.is_empty() {
        return "no requests".into();
    }
    a.iter()
        .map(|(k, v)| format!("{k} {}", show(k, *v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn tolerates(ts: &[Toleration], taint: &Taint) -> bool {
    ts.iter().any(|t| {
        let effect_ok = t.effect.is_none_or(|e| e.as_str() == taint.effect);
        let key_ok = match (&t.key, t.operator) {
            (None, Some(TolerationOperator::Exists)) => true,
            (Some(k), Some(TolerationOperator::Exists)) => *k == taint.key,
            (Some(k), _) => *k == taint.key && t.value.as_deref() == taint.value.as_deref(),
            (None, _) => false,
        };
        effect_ok && key_ok
    })
}

/// What one pod asks of a node: resources (requests), `nodeSelector` and tolerations.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    pub need: Amounts,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

impl Shape {
    /// One worker of `app`.
    pub fn worker(app: &App) -> Shape {
        Shape {
            need: worker(app),
            node_selector: app.node_selector.clone(),
            tolerations: app.tolerations.clone(),
        }
    }

    /// A pod as created: its containers' requests summed (a limit stands for a request left
    /// out, as Kubernetes defaults it), its `nodeSelector` and tolerations.
    pub fn of_pod(pod: &Pod) -> Shape {
        let spec = pod.spec.clone().unwrap_or_default();
        let mut need = Amounts::new();
        for c in &spec.containers {
            let r = c.resources.clone().unwrap_or_default();
            let mut one = Amounts::new();
            for (k, q) in r.limits.iter().flatten().chain(r.requests.iter().flatten()) {
                if let Some(v) = amount(&q.0) {
                    one.insert(k.clone(), v);
                }
            }
            for (k, v) in one {
                let sum = need.entry(k).or_default();
                *sum = sum.saturating_add(v);
            }
        }
        // The same fields in the same words: a toleration the app's form cannot read
        // tolerates nothing here.
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| serde_json::from_value(serde_json::to_value(t).ok()?).ok())
            .collect();
        Shape {
            need,
            node_selector: spec.node_selector.unwrap_or_default(),
            tolerations,
        }
    }
}

/// Why `node` cannot hold a pod of `shape` even when nothing else runs there (None: it can).
pub fn misfit(node: &Node, shape: &Shape) -> Option<String> {
    let spec = node.spec.clone().unwrap_or_default();
    if spec.unschedulable == Some(true) {
        return Some("cordoned (unschedulable)".into());
    }
    for t in spec.taints.iter().flatten() {
        let hard = t.effect == TaintEffect::NoSchedule.as_str()
            || t.effect == TaintEffect::NoExecute.as_str();
        if hard && !tolerates(&shape.tolerations, t) {
            let v = t
                .value
                .as_deref()
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            return Some(format!("taint {}{v}:{} not tolerated", t.key, t.effect));
        }
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (k, v) in &shape.node_selector {
        if labels.get(k) != Some(v) {
            return Some(format!("nodeSelector {k}={v} does not match"));
        }
    }
    let alloc = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    let short: Vec<String> = shape
        .need
        .iter()
        .filter(|(_, n)| **n > Quantity::ZERO)
        .filter_map(|(k, n)| {
            let have = alloc.get(k).and_then(|q| amount(&q.0)).unwrap_or_default();
            (have < *n).then(|| {
                format!(
                    "{k} {} allocatable < {} requested",
                    show(k, have),
                    show(k, *n)
                )
            })
        })
        .collect();
    (!short.is_empty()).then(|| short.join(", "))
}

/// How many of `nodes` could hold one worker, and the message that says so (each node that
/// cannot, and why, when none can).
pub fn nodes_for_worker(nodes: &[Node], app: &App) -> (usize, String) {
    let shape = Shape::worker(app);
    let why: Vec<(String, Option<String>)> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                misfit(n, &shape),
            )
        })
        .collect();
    let fit = why.iter().filter(|(_, w)| w.is_none()).count();
    let mut msg = format!(
        "{fit} of {} node(s) can hold one worker ({})",
        nodes.len(),
        show_all(&shape.need)
    );
    if fit == 0 && !why.is_empty() {
        let each: Vec<String> = why
            .iter()
            .take(5)
            .map(|(n, w)| format!("{n}: {}", w.clone().unwrap_or_default()))
            .collect();
        msg.push_str(&format!(": {}", each.join("; ")));
        if why.len() > 5 {
            msg.push_str(&format!("; and {} more", why.len() - 5));
        }
    }
    (fit, msg)
}

/// The run's totals as a quota counts them: `pods`, `requests.*` (also bare `cpu`,
/// `memory`) and `limits.*`, for every worker and the launcher.
pub fn run_totals(app: &App) -> Amounts {
    let mut out = Amounts::new();
    let workers = i64::from(app.workers);
    let mut add = |prefix: &str, a: Amounts, times: i64| {
        for (k, v) in a {
            let sum = out.entry(format!("{prefix}{k}")).or_default();
            *sum = sum.saturating_add(v.saturating_mul(times));
        }
    };
    add(
        "requests.",
        requests(&app.resources.worker, app.gpus_per_worker),
        workers,
    );
    add("requests.", requests(&app.resources.launcher, 0), 1);
    add(
        "limits.",
        limits(&app.resources.worker, app.gpus_per_worker),
        workers,
    );
    add("limits.", limits(&app.resources.launcher, 0), 1);
    out.insert("pods".into(), Quantity::from_units(workers + 1));
    out
}

/// What the run needs that `quota` has no room for (hard − used), one phrase each.
pub fn quota_short(quota: &ResourceQuota, totals: &Amounts) -> Vec<String> {
    let name = quota.metadata.name.clone().unwrap_or_default();
    let status = quota.status.clone().unwrap_or_default();
    let hard = status
        .hard
        .or_else(|| quota.spec.as_ref().and_then(|s| s.hard.clone()))
        .unwrap_or_default();
    let used = status.used.unwrap_or_default();
    let mut out = Vec::new();
    for (k, q) in &hard {
        let key = match k.as_str() {
            "cpu" | "memory" => format!("requests.{k}"),
            _ => k.clone(),
        };
        let Some(need) = totals.get(&key).copied().filter(|n| *n > Quantity::ZERO) else {
            continue;
        };
        let Some(h) = amount(&q.0) else {
            continue;
        };
        let u = used.get(k).and_then(|q| amount(&q.0)).unwrap_or_default();
        let room = h.saturating_sub(u).max(Quantity::ZERO);
        if need > room {
            out.push(format!(
                "{k}: the run needs {}, quota {name} has {} left of {}",
                show(&key, need),
                show(&key, room),
                show(&key, h)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(yaml: &str) -> App {
        crate::app::load::from_text(
            &format!("command: [python3, x.py]\n{yaml}"),
            "hvdctl.yaml",
            &[],
        )
        .unwrap()
    }

    fn node(name: &str, alloc: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints},
            "status": {"allocatable": alloc},
        }))
        .unwrap()
    }

    #[test]
    fn a_pods_shape_sums_its_containers_and_reads_its_tolerations() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1500m"}, "limits": {"memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                ],
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }))
        .unwrap();
        let shape = Shape::of_pod(&pod);
        assert_eq!(show_all(&shape.need), "cpu 2, memory 2Gi");
        let tainted = node(
            "n0",
            json!({"cpu": "2", "memory": "4Gi"}),
            json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
        );
        assert_eq!(
            misfit(&tainted, &shape).as_deref(),
            Some("nodeSelector pool=gpu does not match")
        );
        let mut labelled = tainted.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("pool".into(), "gpu".into());
        assert_eq!(misfit(&labelled, &shape), None);
        let small = node("n1", json!({"cpu": "1", "memory": "4Gi"}), json!([]));
        let mut shape = shape;
        shape.node_selector.clear();
        assert_eq!(
            misfit(&small, &shape).as_deref(),
            Some("cpu 1 allocatable < 2 requested")
        );
    }

    #[test]
    fn a_gpu_request_no_node_has_is_named_with_the_numbers() {
        let a = app(
            "name: a\nimage: i\ngpusPerWorker: 1\nresources: {worker: {requests: {cpu: 500m, memory: 1Gi}}}\n",
        );
        let nodes = [
            node("n0", json!({"cpu": "8", "memory": "32Gi"}), json!([])),
            node(
                "n1",
                json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}),
                json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            ),
        ];
        let (fit, msg) = nodes_for_worker(&nodes, &a);
        assert_eq!(fit, 0);
        assert_eq!(
            msg,
            "0 of 2 node(s) can hold one worker (cpu 500m, memory 1Gi, nvidia.com/gpu 1): n0: nvidia.com/gpu 0 allocatable < 1 requested; n1: taint gpu=yes:NoSchedule not tolerated"
        );
        let tolerant = app(
            "name: a\nimage: i\ngpusPerWorker: 1\ntolerations: [{key: gpu, operator: Exists}]\n",
        );
        assert_eq!(nodes_for_worker(&nodes, &tolerant).0, 1);
    }

    #[test]
    fn quota_room() {
        let a = app(
            "name: a\nimage: i\nworkers: 2\nresources: {worker: {requests: {memory: 1Gi}}, launcher: {requests: {memory: 512Mi}}}\n",
        );
        let q: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "team"},
            "spec": {"hard": {"requests.memory": "4Gi", "pods": "10"}},
            "status": {"hard": {"requests.memory": "4Gi", "pods": "10"}, "used": {"requests.memory": "2Gi", "pods": "8"}},
        }))
        .unwrap();
        assert_eq!(
            quota_short(&q, &run_totals(&a)),
            vec![
                "pods: the run needs 3, quota team has 2 left of 10".to_string(),
                "requests.memory: the run needs 2.5Gi, quota team has 2Gi left of 4Gi".to_string(),
            ]
        );
    }
}
