//! Per-kind validation and the defaulting the apiserver does on create.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::{self, ResourceDef};
use crate::util::{self, s};

/// Validates an object about to be stored (create or update).
pub fn validate(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    let name = util::name_of(obj);
    if !obj.is_object() || !obj.get("metadata").is_none_or(Value::is_object) {
        return Err(ApiError::bad_request(
            "the body of the request must be an object with object metadata",
        ));
    }
    if name.is_empty() {
        return Err(ApiError::invalid(
            def,
            "",
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        ));
    }
    let label_like = matches!(def.plural, "namespaces" | "services");
    let ok = if label_like {
        util::is_dns_label(name)
    } else {
        util::is_dns_subdomain(name)
    };
    if !ok {
        let msg = if label_like {
            util::DNS1123_LABEL_MSG
        } else {
            util::DNS1123_SUBDOMAIN_MSG
        };
        return Err(ApiError::invalid(
            def,
            name,
            "metadata.name",
            "FieldValueInvalid",
            &format!("Invalid value: {name:?}: {msg}"),
        ));
    }
    if let Some(labels) = obj.pointer("/metadata/labels") {
        let Some(map) = labels.as_object() else {
            return Err(ApiError::bad_request(
                "metadata.labels must be a map of strings",
            ));
        };
        for (k, v) in map {
            let Some(v) = v.as_str() else {
                return Err(ApiError::bad_request(format!(
                    "metadata.labels[{k}] must be a string"
                )));
            };
            if !util::is_label_value(v) {
                return Err(ApiError::invalid(
                    def,
                    name,
                    "metadata.labels",
                    "FieldValueInvalid",
                    &format!("Invalid value: {v:?}: {}", util::LABEL_VALUE_MSG),
                ));
            }
            let key_name = k.rsplit('/').next().unwrap_or_default();
            if key_name.is_empty() || key_name.len() > 63 || k.matches('/').count() > 1 {
                return Err(ApiError::invalid(
                    def,
                    name,
                    "metadata.labels",
                    "FieldValueInvalid",
                    &format!("Invalid value: {k:?}: name part must be no more than 63 characters"),
                ));
            }
        }
    }
    annotations_size(
        def,
        name,
        obj.pointer("/metadata/annotations"),
        "metadata.annotations",
    )?;
    match def.plural {
        "pods" => validate_pod_spec(def, name, obj.get("spec"), "spec")?,
        "persistentvolumeclaims" => validate_claim_spec(def, name, obj.get("spec"))?,
        "jobs" => {
            validate_pod_spec(
                def,
                name,
                obj.pointer("/spec/template/spec"),
                "spec.template.spec",
            )?;
            let rp = s(obj, "/spec/template/spec/restartPolicy").unwrap_or("Always");
            if rp != "Never" && rp != "OnFailure" {
                return Err(ApiError::invalid(
                    def,
                    name,
                    "spec.template.spec.restartPolicy",
                    "FieldValueNotSupported",
                    &format!(
                        "Unsupported value: {rp:?}: supported values: \"OnFailure\", \"Never\""
                    ),
                ));
            }
        }
        "statefulsets" => validate_pod_spec(
            def,
            name,
            obj.pointer("/spec/template/spec"),
            "spec.template.spec",
        )?,
        _ => {}
    }
    if let Some(custom) = def.validate {
        custom(def, name, obj)?;
    }
    Ok(())
}

/// Checks a pod spec (at `path` of the object) as the apiserver does; for custom resources'
/// validators too.
pub fn validate_pod_spec(
    def: &ResourceDef,
    name: &str,
    spec: Option<&Value>,
    path: &str,
) -> ApiResult<()> {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        return Err(ApiError::invalid(
            def,
            name,
            &format!("{path}.containers"),
            "FieldValueRequired",
            "Required value",
        ));
    };
    let mut seen = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let cname = s(c, "/name").unwrap_or_default();
        if !util::is_dns_label(cname) {
            return Err(ApiError::invalid(
                def,
                name,
                &format!("{path}.containers[{i}].name"),
                if cname.is_empty() {
                    "FieldValueRequired"
                } else {
                    "FieldValueInvalid"
                },
                &if cname.is_empty() {
                    "Required value".to_string()
                } else {
                    format!("Invalid value: {cname:?}: {}", util::DNS1123_LABEL_MSG)
                },
            ));
        }
        if seen.contains(&cname) {
            return Err(ApiError::invalid(
                def,
                name,
                &format!("{path}.containers[{i}].name"),
                "FieldValueDuplicate",
                &format!("Duplicate value: {cname:?}"),
            ));
        }
        seen.push(cname);
        if s(c, "/image").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                def,
                name,
                &format!("{path}.containers[{i}].image"),
                "FieldValueRequired",
                "Required value",
            ));
        }
        if let Some(env) = c.get("env") {
            let ok = env.as_array().is_some_and(|a| {
                a.iter()
                    .all(|e| s(e, "/name").is_some_and(|n| !n.is_empty()))
            });
            if !ok {
                return Err(ApiError::invalid(
                    def,
                    name,
                    &format!("{path}.containers[{i}].env"),
                    "FieldValueRequired",
                    "Required value: every env entry needs a name",
                ));
            }
        }
    }
    for (i, c) in containers.iter().enumerate() {
        validate_resources(
            def,
            name,
            c.get("resources"),
            &format!("{path}.containers[{i}].resources"),
        )?;
    }
    for (i, t) in spec
        .and_then(|s| s.get("tolerations"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        // validateTolerations: an Equal toleration's value is a label value (reported at its
        // `operator`, as the apiserver does).
        let op = s(t, "/operator").unwrap_or("");
        let value = s(t, "/value").unwrap_or("");
        if matches!(op, "" | "Equal") && !util::is_label_value(value) {
            return Err(ApiError::invalid(
                def,
                name,
                &format!("{path}.tolerations[{i}].operator"),
                "FieldValueInvalid",
                &format!("Invalid value: {value:?}: {}", util::LABEL_VALUE_MSG),
            ));
        }
    }
    if let Some(rp) = spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        return Err(ApiError::invalid(
            def,
            name,
            &format!("{path}.restartPolicy"),
            "FieldValueNotSupported",
            &format!(
                "Unsupported value: {rp:?}: supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
        ));
    }
    Ok(())
}

/// A quantity's value in thousandths, rounded up (the apiserver's `MilliValue`); `None`
/// when it does not parse (the schema check has its own word for that).
fn milli(q: &Value) -> Option<i128> {
    let q = quantity::Quantity::parse(&text(q)).ok()?;
    Some(q.milli_value())
}

fn text(q: &Value) -> String {
    match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `ValidateResourceRequirements` (pkg/apis/core/validation/validation.go): extended resources
/// in whole units; hugepages and extended resources requested exactly at their limit (they
/// cannot be overcommitted), a request without a limit refused; no request above its limit;
/// hugepages only beside cpu or memory.
fn validate_resources(
    def: &ResourceDef,
    name: &str,
    r: Option<&Value>,
    path: &str,
) -> ApiResult<()> {
    let empty = serde_json::Map::new();
    let list = |k: &str| {
        r.and_then(|r| r.get(k))
            .and_then(Value::as_object)
            .unwrap_or(&empty)
    };
    let (limits, requests) = (list("limits"), list("requests"));
    let extended = |n: &str| n.contains('/') && !n.contains("kubernetes.io/");
    let hugepages = |n: &str| n.starts_with("hugepages-");
    for (l, map) in [("limits", limits), ("requests", requests)] {
        for (n, q) in map {
            if extended(n) && milli(q).is_some_and(|m| m % 1000 != 0) {
                return Err(ApiError::invalid(
                    def,
                    name,
                    &format!("{path}.{l}[{n}]"),
                    "FieldValueInvalid",
                    &format!("Invalid value: \"{}\": must be an integer", text(q)),
                ));
            }
        }
    }
    for (n, q) in requests {
        let overcommit = !extended(n) && !hugepages(n);
        match limits.get(n) {
            Some(l) if milli(q).is_some() && milli(l).is_some() => {
                let (mq, ml) = (milli(q), milli(l));
                let detail = if !overcommit && mq != ml {
                    "must be equal to"
                } else if mq > ml {
                    "must be less than or equal to"
                } else {
                    continue;
                };
                return Err(ApiError::invalid(
                    def,
                    name,
                    &format!("{path}.requests"),
                    "FieldValueInvalid",
                    &format!(
                        "Invalid value: \"{}\": {detail} {n} limit of {}",
                        text(q),
                        text(l)
                    ),
                ));
            }
            None if !overcommit => {
                return Err(ApiError::invalid(
                    def,
                    name,
                    &format!("{path}.limits"),
                    "FieldValueRequired",
                    "Required value: Limit must be set for non overcommitable resources",
                ));
            }
            _ => {}
        }
    }
    let any = |p: &dyn Fn(&str) -> bool| limits.keys().chain(requests.keys()).any(|k| p(k));
    if any(&|k| hugepages(k)) && !any(&|k| k == "cpu" || k == "memory") {
        return Err(ApiError::invalid(
            def,
            name,
            path,
            "FieldValueForbidden",
            "Forbidden: HugePages require cpu or memory",
        ));
    }
    Ok(())
}

/// apimachinery's `ValidateAnnotationsSize`: 256 KiB of keys and values together.
fn annotations_size(def: &ResourceDef, name: &str, a: Option<&Value>, path: &str) -> ApiResult<()> {
    const MAX: usize = 256 * 1024;
    let total: usize = a
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if total > MAX {
        return Err(ApiError::invalid(
            def,
            name,
            path,
            "FieldValueTooLong",
            &format!("Too long: must have at most {MAX} bytes"),
        ));
    }
    Ok(())
}

/// `ValidatePersistentVolumeClaimSpec`: a positive storage request; ReadWriteOncePod alone.
fn validate_claim_spec(def: &ResourceDef, name: &str, spec: Option<&Value>) -> ApiResult<()> {
    if let Some(q) = spec.and_then(|s| s.pointer("/resources/requests/storage"))
        && milli(q).is_some_and(|m| m <= 0)
    {
        return Err(ApiError::invalid(
            def,
            name,
            "spec.resources.requests[storage]",
            "FieldValueInvalid",
            &format!("Invalid value: \"{}\": must be greater than zero", text(q)),
        ));
    }
    let modes: Vec<&str> = spec
        .and_then(|s| s.get("accessModes"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if modes.contains(&"ReadWriteOncePod") && modes.iter().any(|m| *m != "ReadWriteOncePod") {
        return Err(ApiError::invalid(
            def,
            name,
            "spec.accessModes",
            "FieldValueForbidden",
            "Forbidden: may not use ReadWriteOncePod with other access modes",
        ));
    }
    Ok(())
}

/// Fills in what the apiserver defaults on create (besides common metadata).
pub fn default_on_create(def: &ResourceDef, obj: &mut Value, uid: &str) {
    match def.plural {
        "namespaces" => {
            let name = util::name_of(obj).to_string();
            obj["metadata"]["labels"]
                .as_object_mut()
                .map(|l| l.insert("kubernetes.io/metadata.name".into(), json!(name.clone())))
                .unwrap_or_else(|| {
                    obj["metadata"]["labels"] = json!({"kubernetes.io/metadata.name": name});
                    None
                });
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        "pods" => {
            default_pod_spec(&mut obj["spec"]);
            default_requests(&mut obj["spec"]);
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            // The pod strategy's PrepareForCreate (`applySchedulingGatedCondition`).
            if crate::scheduler::scheduling_gated(obj) {
                obj["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": null, "lastTransitionTime": util::fmt_time(util::now_ns())}]);
            }
        }
        "services" => {
            let spec = &mut obj["spec"];
            if !spec.is_object() {
                *spec = json!({});
            }
            if spec.get("type").is_none() {
                spec["type"] = json!("ClusterIP");
            }
            if spec.get("clusterIP").is_none() {
                let n: u16 = rand::random();
                spec["clusterIP"] = json!(format!("10.96.{}.{}", n >> 8, (n & 0xff).max(2)));
            }
            let ip = spec["clusterIP"].clone();
            spec["clusterIPs"] = json!([ip]);
            if spec.get("sessionAffinity").is_none() {
                spec["sessionAffinity"] = json!("None");
            }
            obj["status"] = json!({"loadBalancer": {}});
        }
        "secrets" => {
            if obj.get("type").is_none() {
                obj["type"] = json!("Opaque");
            }
            if let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                if !obj["data"].is_object() {
                    obj["data"] = json!({});
                }
                for (k, v) in sd {
                    obj["data"][k.as_str()] =
                        json!(util::base64(v.as_str().unwrap_or_default().as_bytes()));
                }
            }
        }
        "jobs" => {
            let spec = &mut obj["spec"];
            for (k, d) in [("backoffLimit", 6), ("completions", 1), ("parallelism", 1)] {
                if spec.get(k).is_none() {
                    spec[k] = json!(d);
                }
            }
            if spec.get("completionMode").is_none() {
                spec["completionMode"] = json!("NonIndexed");
            }
            if spec.get("suspend").is_none() {
                spec["suspend"] = json!(false);
            }
            if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
                spec["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
                let job_name = util::name_of(obj).to_string();
                let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
                if !labels.is_object() {
                    *labels = json!({});
                }
                for (k, v) in [
                    ("batch.kubernetes.io/controller-uid", uid),
                    ("controller-uid", uid),
                    ("batch.kubernetes.io/job-name", job_name.as_str()),
                    ("job-name", job_name.as_str()),
                ] {
                    labels[k] = json!(v);
                }
            }
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
            obj["status"] = json!({});
        }
        "statefulsets" => {
            let spec = &mut obj["spec"];
            if spec.get("replicas").is_none() {
                spec["replicas"] = json!(1);
            }
            if spec.get("podManagementPolicy").is_none() {
                spec["podManagementPolicy"] = json!("OrderedReady");
            }
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
            obj["status"] = json!({"replicas": 0, "availableReplicas": 0});
        }
        // A custom resource's status is its operator's (the CRD's status subresource).
        _ if def.custom && def.status_sub && obj.get("status").is_some() => {
            obj["status"] = json!({})
        }
        _ => {}
    }
}

/// Defaults that also apply on update (an apply that replaces a list must not lose them).
pub fn default_on_update(def: &ResourceDef, obj: &mut Value) {
    match def.plural {
        "pods" => {
            default_pod_spec(&mut obj["spec"]);
            default_requests(&mut obj["spec"]);
        }
        "jobs" | "statefulsets" => default_pod_spec(&mut obj["spec"]["template"]["spec"]),
        _ => {}
    }
}

/// Fields the real apiserver refuses to change.
pub fn check_immutable(def: &ResourceDef, old: &Value, new: &Value) -> ApiResult<()> {
    let name = util::name_of(old);
    let immutable: &[&str] = match def.plural {
        "jobs" => &["/spec/selector", "/spec/template", "/spec/completionMode"],
        "statefulsets" => &[
            "/spec/selector",
            "/spec/serviceName",
            "/spec/podManagementPolicy",
        ],
        "services" => &["/spec/clusterIP"],
        _ => &[],
    };
    for p in immutable {
        if old.pointer(p) != new.pointer(p)
            && !(def.plural == "services" && new.pointer(p).is_none())
        {
            let field = p.trim_start_matches('/').replace('/', ".");
            return Err(ApiError::invalid(
                def,
                name,
                &field,
                "FieldValueInvalid",
                "field is immutable",
            ));
        }
    }
    if def.plural == "pods" {
        let strip = |v: &Value| {
            let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
            for list in ["containers", "initContainers"] {
                if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        if let Some(m) = c.as_object_mut() {
                            m.remove("image");
                        }
                    }
                }
            }
            if let Some(m) = spec.as_object_mut() {
                for k in [
                    "activeDeadlineSeconds",
                    "tolerations",
                    "terminationGracePeriodSeconds",
                    "schedulingGates",
                ] {
                    m.remove(k);
                }
                // A gated pod's scheduling directives may still change (KEP-3838).
                if crate::scheduler::scheduling_gated(old) {
                    m.remove("nodeSelector");
                }
            }
            spec
        };
        // Scheduling gates may only be removed, never added.
        let gates = |v: &Value| -> Vec<Value> {
            v.pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        if gates(new).iter().any(|g| !gates(old).contains(g)) {
            return Err(ApiError::invalid(
                def,
                name,
                "spec.schedulingGates",
                "FieldValueForbidden",
                "Forbidden: only deletion is allowed, but found new scheduling gate",
            ));
        }
        if strip(old) != strip(new) {
            return Err(ApiError::invalid(
                def,
                name,
                "spec",
                "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    }
    Ok(())
}

/// The apiserver defaults each unset container request to its limit (pods only).
fn default_requests(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(limits) = c
                .pointer("/resources/limits")
                .and_then(Value::as_object)
                .cloned()
            else {
                continue;
            };
            if !c["resources"]["requests"].is_object() {
                c["resources"]["requests"] = json!({});
            }
            for (k, v) in limits {
                if c["resources"]["requests"].get(&k).is_none() {
                    c["resources"]["requests"][k] = v;
                }
            }
        }
    }
}

fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for (k, d) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("serviceAccountName", json!("default")),
        ("securityContext", json!({})),
    ] {
        if spec.get(k).is_none() {
            spec[k] = d;
        }
    }
    if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for c in cs {
            if c.get("imagePullPolicy").is_none() {
                let latest =
                    s(c, "/image").is_some_and(|i| !i.contains(':') || i.ends_with(":latest"));
                c["imagePullPolicy"] = json!(if latest { "Always" } else { "IfNotPresent" });
            }
            if c.get("terminationMessagePath").is_none() {
                c["terminationMessagePath"] = json!("/dev/termination-log");
                c["terminationMessagePolicy"] = json!("File");
            }
            if c.get("resources").is_none() {
                c["resources"] = json!({});
            }
        }
    }
}

/// Does this resource type carry `metadata.generation`?
pub fn has_generation(def: &ResourceDef) -> bool {
    // Custom resources always do (the apiserver sets it for every CRD).
    def.custom || matches!(def.plural, "jobs" | "statefulsets" | "services")
}

/// The default propagation policy when a DELETE names none (batch/v1 Jobs orphan, like the real apiserver).
pub fn default_propagation(def: &ResourceDef) -> &'static str {
    if def.plural == "jobs" {
        "Orphan"
    } else {
        "Background"
    }
}

/// Checks `apiVersion`/`kind` of a request body against the URL's resource; fills them in when absent.
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> ApiResult<()> {
    let want_av = def.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(def.kind),
        Some(k) if k != def.kind => {
            // The real server decodes into the URL's kind and fails on a mismatch.
            let other = if resources::known_kind(&want_av, k) {
                ""
            } else {
                " (unknown kind)"
            };
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}{other}) does not match the expected kind ({})",
                def.kind
            )));
        }
        _ => {}
    }
    Ok(())
}
