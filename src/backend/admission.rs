//! The API server's own checks over the rendered objects, before anything is sent: what a
//! strict schema check passes and a real cluster still refuses (`app::apirules`), for every
//! pod spec wherever it sits (a Pod, a Job's template, an MPIJob's replica specs, a JobSet's
//! or a runtime's nested templates), every claim and every object's annotations — and two
//! objects of one kind and name in one template, which an apply would silently merge. The
//! app's own values were checked with their `hvdctl.yaml` lines already; this catches what a
//! user's edited `k8s/*.yaml.hbs` adds.

use crate::app::apirules;
use crate::error::{Error, Result};
use crate::kinds::Object;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Refuses the objects rendered from `source` that the API server would refuse, naming each
/// object and field as the API server would.
pub fn check(source: &str, objects: &[Object]) -> Result<()> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    // Each object is serialized and walked: on all cores (a run of 1,024 workers has as many
    // pods), in order.
    let found = crate::render::manifests::parallel_map(objects, |o| {
        let mut found = Vec::new();
        walk(&o.to_value(), &mut String::new(), &mut found);
        found
    });
    for (o, found) in objects.iter().zip(found) {
        let (kind, name) = (o.kind(), o.name());
        if !seen.insert((kind, name.to_string())) {
            problems.push(format!(
                "{kind} {name}: the template makes two objects of this kind and name (the second would silently replace the first)"
            ));
        }
        problems.extend(found.into_iter().map(|p| format!("{kind} {name}: {p}")));
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::input(format!(
        "{source}: the rendered objects cannot be applied as they are:\n  {}",
        problems.join("\n  ")
    )))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn strings(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every object metadata, pod spec and claim spec below `v` (at `path`, which is put back
/// as it was: one buffer for the whole walk, a field's path written out only when refused).
fn walk(v: &Value, path: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(meta) = m.get("metadata")
                && let Some(total) =
                    apirules::annotations_too_long(&strings(meta.get("annotations")))
            {
                out.push(format!(
                    "{}: Too long: must have at most {} bytes ({total} bytes)",
                    join(path, "metadata.annotations"),
                    apirules::ANNOTATIONS_MAX_BYTES
                ));
            }
            if let Some(Value::Array(cs)) = m.get("containers") {
                pod_spec(v, cs, path, out);
            }
            if m.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim") {
                claim(m.get("spec"), &join(path, "spec"), out);
            }
            for (k, child) in m {
                if !matches!(child, Value::Object(_) | Value::Array(_)) {
                    continue;
                }
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(k);
                if k == "volumeClaimTemplates"
                    && let Value::Array(items) = child
                {
                    for (i, t) in items.iter().enumerate() {
                        claim(t.get("spec"), &format!("{path}[{i}].spec"), out);
                    }
                }
                walk(child, path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                if !matches!(child, Value::Object(_) | Value::Array(_)) {
                    continue;
                }
                let len = path.len();
                use std::fmt::Write;
                let _ = write!(path, "[{i}]");
                walk(child, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn pod_spec(spec: &Value, containers: &[Value], path: &str, out: &mut Vec<String>) {
    for (list, cs) in [
        ("containers", Some(containers)),
        (
            "initContainers",
            spec.get("initContainers")
                .and_then(Value::as_array)
                .map(|v| &v[..]),
        ),
    ] {
        for (i, c) in cs.unwrap_or_default().iter().enumerate() {
            let Some(r) = c.get("resources") else {
                continue;
            };
            let refusals = apirules::resource_requirements(
                &strings(r.get("requests")),
                &strings(r.get("limits")),
            );
            if refusals.is_empty() {
                continue;
            }
            let at = join(path, &format!("{list}[{i}].resources"));
            for refusal in refusals {
                let field = if refusal.field.is_empty() {
                    at.clone()
                } else {
                    format!("{at}.{}", refusal.field)
                };
                out.push(format!("{field}: {}", refusal.message));
            }
        }
    }
    for (i, t) in spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(|v| &v[..])
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
        if (op == "Equal" || op.is_empty())
            && let Some(why) = t
                .get("value")
                .and_then(Value::as_str)
                .and_then(apirules::toleration_value)
        {
            out.push(format!(
                "{}: {why}",
                join(path, &format!("tolerations[{i}].operator"))
            ));
        }
    }
}

fn claim(spec: Option<&Value>, path: &str, out: &mut Vec<String>) {
    let Some(spec) = spec else { return };
    let size = spec
        .pointer("/resources/requests/storage")
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    let modes: Vec<&str> = spec
        .get("accessModes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (field, why) in apirules::claim(&size, &modes) {
        out.push(format!("{}: {why}", join(path, field)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        let mut out = Vec::new();
        walk(&v, &mut String::new(), &mut out);
        out
    }

    #[test]
    fn pod_specs_anywhere_claims_and_annotations() {
        let c = |res: Value| json!({"name": "c", "image": "i", "resources": res});
        // An MPIJob's worker template, two levels down.
        let mj = json!({"kind": "MPIJob", "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": {
            "containers": [c(json!({"limits": {"hugepages-2Mi": "4Mi"}}))],
            "tolerations": [{"key": "k", "value": "not a label"}]}}}}}});
        let p = problems(mj);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert_eq!(
            p[0],
            "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources: Forbidden: HugePages require cpu or memory"
        );
        assert!(p[1].starts_with("spec.mpiReplicaSpecs.Worker.template.spec.tolerations[0].operator: Invalid value: \"not a label\""), "{p:#?}");
        let pvc = json!({"kind": "PersistentVolumeClaim", "spec": {"accessModes": ["ReadWriteOncePod", "ReadWriteOnce"], "resources": {"requests": {"storage": "0"}}}});
        assert_eq!(
            problems(pvc),
            [
                "spec.resources.requests[storage]: Invalid value: \"0\": must be greater than zero",
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"
            ]
        );
        let big = json!({"metadata": {"annotations": {"a": "x".repeat(apirules::ANNOTATIONS_MAX_BYTES)}}});
        assert_eq!(
            problems(big),
            ["metadata.annotations: Too long: must have at most 262144 bytes (262145 bytes)"]
        );
        let fine = json!({"spec": {"template": {"spec": {"containers": [c(json!({"requests": {"cpu": "1", "example.com/foo": "1"}, "limits": {"example.com/foo": "1"}}))]}}}});
        assert_eq!(problems(fine), Vec::<String>::new());
    }
}
