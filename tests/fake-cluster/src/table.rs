//! `meta.k8s.io/v1` Table output (what `kubectl get` asks for), with kubectl's usual columns.

use serde_json::{Value, json};

use crate::resources::ResourceDef;
use crate::util::{age, name_of, now_ns, parse_time, s};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn col(name: &str, typ: &str, priority: u8) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": typ, "format": format, "description": name, "priority": priority})
}

pub fn columns(def: &ResourceDef) -> Vec<Value> {
    let names: &[(&str, &str, u8)] = match def.plural {
        "pods" => &[
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
        ],
        "jobs" => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            ("Age", "date", 0),
        ],
        "namespaces" => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Age", "string", 0),
        ],
        "services" => &[
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            ("Age", "string", 0),
        ],
        "configmaps" => &[
            ("Name", "string", 0),
            ("Data", "integer", 0),
            ("Age", "string", 0),
        ],
        "secrets" => &[
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Data", "string", 0),
            ("Age", "string", 0),
        ],
        "statefulsets" => &[
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Age", "string", 0),
        ],
        "events" => &[
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ],
        // The CRDs' additionalPrinterColumns.
        "workloads" if def.custom => &[
            ("Name", "string", 0),
            ("Queue", "string", 0),
            ("Reserved in", "string", 0),
            ("Admitted", "string", 0),
            ("Finished", "string", 0),
            ("Age", "date", 0),
        ],
        "localqueues" if def.custom => &[
            ("Name", "string", 0),
            ("ClusterQueue", "string", 0),
            ("Pending Workloads", "integer", 0),
            ("Admitted Workloads", "integer", 0),
        ],
        "clusterqueues" if def.custom => &[
            ("Name", "string", 0),
            ("Cohort", "string", 0),
            ("Strategy", "string", 1),
            ("Pending Workloads", "integer", 0),
            ("Admitted Workloads", "integer", 1),
        ],
        "podgroups" if def.custom => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("minMember", "integer", 0),
            ("RUNNINGS", "integer", 0),
            ("Age", "date", 0),
            ("QUEUE", "string", 1),
        ],
        _ if def.custom => &[("Name", "string", 0), ("Age", "date", 0)],
        "nodes" => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        _ => &[("Name", "string", 0), ("Age", "string", 0)],
    };
    names.iter().map(|(n, t, p)| col(n, t, *p)).collect()
}

fn obj_age(o: &Value, now: i64) -> String {
    s(o, "/metadata/creationTimestamp")
        .and_then(parse_time)
        .map(|t| age(t, now))
        .unwrap_or_else(|| "<unknown>".into())
}

/// kubectl's pod STATUS column.
pub fn pod_reason(p: &Value) -> String {
    if p.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let mut reason = s(p, "/status/phase").unwrap_or("Pending").to_string();
    for cs in p
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = s(cs, "/state/waiting/reason") {
            reason = r.to_string();
        } else if let Some(r) = s(cs, "/state/terminated/reason") {
            reason = r.to_string();
        }
    }
    reason
}

fn cells(def: &ResourceDef, o: &Value, now: i64) -> Vec<Value> {
    let name = json!(name_of(o));
    match def.plural {
        "pods" => {
            let cs: Vec<&Value> = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .collect();
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = cs
                .iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            let restarts: i64 = cs
                .iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum();
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_reason(o)),
                json!(restarts.to_string()),
                json!(obj_age(o, now)),
                json!(s(o, "/status/podIP").unwrap_or("<none>")),
                json!(s(o, "/spec/nodeName").unwrap_or("<none>")),
            ]
        }
        "jobs" => {
            let conds = |t: &str| {
                o.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| s(c, "/type") == Some(t) && s(c, "/status") == Some("True"))
                    })
            };
            let status = if conds("Complete") {
                "Complete"
            } else if conds("Failed") {
                "Failed"
            } else {
                "Running"
            };
            let completions = o
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let succeeded = o
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let start = s(o, "/status/startTime").and_then(parse_time);
            let end = s(o, "/status/completionTime")
                .and_then(parse_time)
                .unwrap_or(now);
            let duration = start.map(|st| age(st, end)).unwrap_or_default();
            vec![
                name,
                json!(status),
                json!(format!("{succeeded}/{completions}")),
                json!(duration),
                json!(obj_age(o, now)),
            ]
        }
        "namespaces" => vec![
            name,
            json!(s(o, "/status/phase").unwrap_or("Active")),
            json!(obj_age(o, now)),
        ],
        "services" => {
            let ports: Vec<String> = o
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                        s(p, "/protocol").unwrap_or("TCP")
                    )
                })
                .collect();
            let ports = if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            };
            vec![
                name,
                json!(s(o, "/spec/type").unwrap_or("ClusterIP")),
                json!(s(o, "/spec/clusterIP").unwrap_or("<none>")),
                json!("<none>"),
                json!(ports),
                json!(obj_age(o, now)),
            ]
        }
        "configmaps" => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + o.get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            vec![name, json!(n), json!(obj_age(o, now))]
        }
        "secrets" => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            vec![
                name,
                json!(s(o, "/type").unwrap_or("Opaque")),
                json!(n.to_string()),
                json!(obj_age(o, now)),
            ]
        }
        "statefulsets" => {
            let ready = o
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            vec![
                name,
                json!(format!("{ready}/{want}")),
                json!(obj_age(o, now)),
            ]
        }
        "events" => {
            let last = s(o, "/lastTimestamp")
                .and_then(parse_time)
                .map(|t| age(t, now))
                .unwrap_or_else(|| "<unknown>".into());
            let kind = s(o, "/involvedObject/kind")
                .unwrap_or_default()
                .to_lowercase();
            let obj = format!(
                "{kind}/{}",
                s(o, "/involvedObject/name").unwrap_or_default()
            );
            vec![
                json!(last),
                json!(s(o, "/type").unwrap_or_default()),
                json!(s(o, "/reason").unwrap_or_default()),
                json!(obj),
                json!(s(o, "/message").unwrap_or_default()),
            ]
        }
        "nodes" => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| s(c, "/type") == Some("Ready")))
                .map_or("Unknown", |c| {
                    if s(c, "/status") == Some("True") {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                });
            let status = if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true)
            {
                format!("{ready},SchedulingDisabled")
            } else {
                ready.to_string()
            };
            let addr = |t: &str| {
                o.pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|a| s(a, "/type") == Some(t)))
                    .and_then(|a| s(a, "/address"))
                    .unwrap_or("<none>")
                    .to_string()
            };
            let info = |k: &str| {
                s(o, &format!("/status/nodeInfo/{k}"))
                    .unwrap_or("")
                    .to_string()
            };
            vec![
                name,
                json!(status),
                json!("<none>"),
                json!(obj_age(o, now)),
                json!(info("kubeletVersion")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(info("osImage")),
                json!(info("kernelVersion")),
                json!(info("containerRuntimeVersion")),
            ]
        }
        "workloads" if def.custom => {
            let cond = |t: &str| {
                o.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|c| c.iter().find(|c| s(c, "/type") == Some(t)))
                    .and_then(|c| s(c, "/status"))
                    .unwrap_or("")
                    .to_string()
            };
            vec![
                name,
                json!(s(o, "/spec/queueName").unwrap_or("")),
                json!(s(o, "/status/admission/clusterQueue").unwrap_or("")),
                json!(cond("Admitted")),
                json!(cond("Finished")),
                json!(obj_age(o, now)),
            ]
        }
        "localqueues" if def.custom => vec![
            name,
            json!(s(o, "/spec/clusterQueue").unwrap_or("")),
            o.pointer("/status/pendingWorkloads")
                .cloned()
                .unwrap_or(Value::Null),
            o.pointer("/status/admittedWorkloads")
                .cloned()
                .unwrap_or(Value::Null),
        ],
        "clusterqueues" if def.custom => vec![
            name,
            json!(s(o, "/spec/cohortName").unwrap_or("")),
            json!(s(o, "/spec/queueingStrategy").unwrap_or("")),
            o.pointer("/status/pendingWorkloads")
                .cloned()
                .unwrap_or(Value::Null),
            o.pointer("/status/admittedWorkloads")
                .cloned()
                .unwrap_or(Value::Null),
        ],
        "podgroups" if def.custom => vec![
            name,
            json!(s(o, "/status/phase").unwrap_or("")),
            o.pointer("/spec/minMember").cloned().unwrap_or(Value::Null),
            o.pointer("/status/running").cloned().unwrap_or(Value::Null),
            json!(obj_age(o, now)),
            json!(s(o, "/spec/queue").unwrap_or("")),
        ],
        _ => vec![name, json!(obj_age(o, now))],
    }
}

fn row(def: &ResourceDef, o: &Value, inc: IncludeObject, now: i64) -> Value {
    let mut r = json!({"cells": cells(def, o, now)});
    match inc {
        IncludeObject::None => {}
        IncludeObject::Object => r["object"] = o.clone(),
        IncludeObject::Metadata => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))})
        }
    }
    r
}

pub fn table<'a>(
    def: &ResourceDef,
    items: impl IntoIterator<Item = &'a Value>,
    rv: u64,
    inc: IncludeObject,
    with_columns: bool,
) -> Value {
    let now = now_ns();
    let rows: Vec<Value> = items.into_iter().map(|o| row(def, o, inc, now)).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": if with_columns { Value::Array(columns(def)) } else { json!([]) },
        "rows": rows,
    })
}
