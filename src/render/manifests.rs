//! Rendered YAML → typed [`Object`]s, rejecting anything the types do not know (round-trip
//! check), then hvdctl's labels and namespace injected in code.

use crate::error::{Error, Result};
use crate::kinds::Object;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Labels hvdctl puts on everything it creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_APP: &str = "hvdctl.io/app";
pub const LABEL_RUN: &str = "hvdctl.io/run";
pub const LABEL_ROLE: &str = "hvdctl.io/role";
pub const MANAGER: &str = "hvdctl";

/// Parses every YAML document of `text` (rendered from `source`) into a typed object.
pub fn parse(source: &str, text: &str) -> Result<Vec<Object>> {
    let mut objects = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let n = i + 1;
        let value = Value::deserialize(doc).map_err(|e| {
            // The rendered text can hold secrets: say where, never what.
            Error::input(format!("{source}: rendered document {n} is not valid YAML: {}", yaml_error_position(&e)))
                .hint("a template must produce YAML; values must be written with {{value}} or {{json value}}")
        })?;
        if value.is_null() {
            continue; // empty document, e.g. a trailing `---`
        }
        let what = describe(&value, n);
        let object = Object::from_value(&value)
            .map_err(|e| Error::input(format!("{source}: {what}: {e}")))?;
        let unknown = unknown_fields(&value, &object.to_value());
        if !unknown.is_empty() {
            return Err(Error::input(format!(
                "{source}: {what}: unknown field{} {} (not in the Kubernetes 1.36 / MPIJob v2beta1 schema)",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", ")
            )));
        }
        objects.push(object);
    }
    if objects.is_empty() {
        return Err(Error::input(format!(
            "{source}: the template rendered no objects"
        )));
    }
    Ok(objects)
}

fn yaml_error_position(e: &serde_norway::Error) -> String {
    match e.location() {
        Some(l) => format!("line {} column {}", l.line(), l.column()),
        None => {
            // Without a position, the message is safe only when it carries no text of the input.
            let m = e.to_string();
            m.split(':').next().unwrap_or("parse error").to_string()
        }
    }
}

fn describe(v: &Value, n: usize) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("object");
    match v.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{kind} {name:?} (document {n})"),
        None => format!("{kind} (document {n})"),
    }
}

/// Paths present (and not null) in `orig` that the typed round trip dropped or changed.
pub fn unknown_fields(orig: &Value, back: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(&mut Vec::new(), orig, back, &mut out);
    out
}

/// One step of the path being compared (kept as borrowed pieces: paths are only formatted
/// for the rare mismatch).
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn show(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn diff<'a>(path: &mut Vec<Step<'a>>, a: &'a Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Null, _) => {}
        (Value::Object(ma), Value::Object(mb)) => {
            for (k, va) in ma {
                path.push(Step::Key(k));
                match mb.get(k) {
                    Some(vb) => diff(path, va, vb, out),
                    None if va.is_null() => {}
                    None => out.push(format!("`{}`", show(path))),
                }
                path.pop();
            }
        }
        (Value::Array(xa), Value::Array(xb)) if xa.len() == xb.len() => {
            for (i, (va, vb)) in xa.iter().zip(xb).enumerate() {
                path.push(Step::Index(i));
                diff(path, va, vb, out);
                path.pop();
            }
        }
        (a, b) if a == b => {}
        // Numbers may come back in another representation (1.0 vs 1); compare as f64.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ => out.push(format!("`{}` (its value does not fit the field's type)", show(path))),
    }
}

/// Objects as a YAML stream, `---` before each document (what `deploy --dry-run` prints).
pub fn to_yaml_stream(objects: &[Object]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        super::yaml_out::write_document(&mut out, &o.to_value());
    }
    out
}

/// Objects as a JSON `v1 List`, like `kubectl get -o json`.
pub fn to_json_list(objects: &[Object]) -> String {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": objects.iter().map(Object::to_value).collect::<Vec<_>>(),
    });
    let mut s = serde_json::to_string_pretty(&list).unwrap_or_default();
    s.push('\n');
    s
}

/// Identity of a run, stamped on every object.
#[derive(Debug, Clone)]
pub struct Stamp<'a> {
    pub app: &'a str,
    pub run_id: &'a str,
    pub namespace: &'a str,
}

/// Adds hvdctl's labels to every object and pod template and sets the namespace. Labels are
/// applied last, so a template cannot remove or change them.
pub fn stamp(objects: &mut [Object], s: &Stamp) {
    let ours = |labels: &mut Option<BTreeMap<String, String>>| {
        let l = labels.get_or_insert_with(Default::default);
        l.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
        l.insert(LABEL_APP.into(), s.app.into());
        l.insert(LABEL_RUN.into(), s.run_id.into());
    };
    for o in objects.iter_mut() {
        let meta = o.meta_mut();
        meta.namespace = Some(s.namespace.to_string());
        ours(&mut meta.labels);
        o.for_each_pod_meta(|role, m| {
            ours(&mut m.labels);
            m.labels
                .get_or_insert_with(Default::default)
                .insert(LABEL_ROLE.into(), role.into());
        });
    }
}

/// Creation order: what others refer to first (accounts, secrets, config, services), the
/// job last, so a launcher never starts without its workers' objects.
pub fn apply_order(o: &Object) -> u8 {
    match o {
        Object::ServiceAccount(_) => 0,
        Object::Secret(_) => 1,
        Object::ConfigMap(_) => 2,
        Object::Service(_) => 3,
        Object::Pod(_) | Object::StatefulSet(_) => 4,
        Object::Job(_) => 5,
        Object::MpiJob(_) => 6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_found_deep() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    imagePullPolicyy: Always\n  hostNetwrk: true\n";
        let e = parse("t", text).unwrap_err();
        assert!(
            e.message.contains("`spec.containers[0].imagePullPolicyy`"),
            "{}",
            e.message
        );
        assert!(e.message.contains("`spec.hostNetwrk`"), "{}", e.message);
    }

    #[test]
    fn known_kinds_round_trip_and_get_stamped() {
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: {hvdctl.io/run: fake}}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: i}]\n---\n";
        let mut objs = parse("t", text).unwrap();
        stamp(
            &mut objs,
            &Stamp {
                app: "a",
                run_id: "r1",
                namespace: "ns",
            },
        );
        let v = objs[0].to_value();
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(v["metadata"]["labels"]["hvdctl.io/run"], "r1");
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"]["hvdctl.io/role"],
            "launcher"
        );
    }

    #[test]
    fn unknown_kinds_and_type_errors_are_rejected() {
        assert!(
            parse("t", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
                .unwrap_err()
                .message
                .contains("does not create v1 Node")
        );
        let e = parse("t", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {backoffLimit: many, template: {}}\n").unwrap_err();
        assert!(e.message.contains("spec.backoffLimit"), "{}", e.message);
    }
}
