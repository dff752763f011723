//! Patches: JSON merge patch (also used for strategic merge patch), JSON patch, and a
//! simplified server-side apply with `metadata.managedFields`.
//!
//! The SSA simplification: maps merge deeply, lists (and scalars) are atomic and replaced
//! whole; field ownership is tracked per leaf path; a field another manager owns with a
//! different value is a conflict unless `force`; fields this manager applied before and no
//! longer applies are removed unless someone else owns them.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

type Path = Vec<String>;

/// RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test).
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for op in ops {
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or("operation has no \"op\"")?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("operation has no \"path\"")?;
        match kind {
            "add" | "replace" => {
                let v = op.get("value").ok_or("operation has no \"value\"")?.clone();
                if kind == "replace" && target.pointer(path).is_none() {
                    return Err(format!(
                        "replace operation does not apply: doc is missing key: {path}"
                    ));
                }
                set_pointer(target, path, v, kind == "add")?;
            }
            "remove" => {
                remove_pointer(target, path).ok_or_else(|| {
                    format!("remove operation does not apply: doc is missing path: {path}")
                })?;
            }
            "move" | "copy" => {
                let from = op
                    .get("from")
                    .and_then(Value::as_str)
                    .ok_or("operation has no \"from\"")?;
                let v = if kind == "move" {
                    remove_pointer(target, from)
                } else {
                    target.pointer(from).cloned()
                };
                set_pointer(
                    target,
                    path,
                    v.ok_or_else(|| format!("missing path {from}"))?,
                    true,
                )?;
            }
            "test" => {
                if target.pointer(path) != op.get("value") {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unexpected kind of operation: {other}")),
        }
    }
    Ok(())
}

fn unescape(seg: &str) -> String {
    seg.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    let i = path
        .rfind('/')
        .ok_or_else(|| format!("invalid path {path:?}"))?;
    Ok((path[..i].to_string(), unescape(&path[i + 1..])))
}

fn set_pointer(target: &mut Value, path: &str, v: Value, insert: bool) -> Result<(), String> {
    if path.is_empty() {
        *target = v;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            if last == "-" {
                a.push(v);
                return Ok(());
            }
            let i: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last}"))?;
            if insert && i <= a.len() {
                a.insert(i, v);
            } else if !insert && i < a.len() {
                a[i] = v;
            } else {
                return Err(format!("array index {i} out of bounds"));
            }
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: {path}"
        )),
    }
}

fn remove_pointer(target: &mut Value, path: &str) -> Option<Value> {
    let (parent, last) = split_pointer(path).ok()?;
    match target.pointer_mut(&parent)? {
        Value::Object(m) => m.remove(&last),
        Value::Array(a) => {
            let i: usize = last.parse().ok()?;
            (i < a.len()).then(|| a.remove(i))
        }
        _ => None,
    }
}

/// Metadata fields nobody owns.
fn ignored(path: &[String]) -> bool {
    match path {
        [k] => k == "apiVersion" || k == "kind",
        [m, k, ..] if m == "metadata" => matches!(
            k.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "creationTimestamp"
                | "managedFields"
                | "generation"
                | "deletionTimestamp"
                | "selfLink"
        ),
        _ => false,
    }
}

/// Leaf paths of an applied configuration.
fn leaves(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                prefix.push(k.clone());
                if !ignored(prefix) {
                    leaves(x, prefix, out);
                }
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

/// `fieldsV1` tree from leaf paths.
pub fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let e = cur.entry(format!("f:{k}")).or_insert_with(|| json!({}));
            cur = e.as_object_mut().expect("object");
        }
    }
    Value::Object(root)
}

fn paths_of_fields(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, x) in m {
                if let Some(name) = k.strip_prefix("f:") {
                    prefix.push(name.to_string());
                    paths_of_fields(x, prefix, out);
                    prefix.pop();
                }
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

fn get_path<'a>(v: &'a Value, p: &[String]) -> Option<&'a Value> {
    p.iter().try_fold(v, |cur, k| cur.get(k))
}

fn remove_path(v: &mut Value, p: &[String]) {
    let Some((last, parents)) = p.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        match cur.get_mut(k) {
            Some(x) => cur = x,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

fn merge_apply(target: &mut Value, applied: &Value) {
    match (target.as_object_mut(), applied.as_object()) {
        (Some(t), Some(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    t.remove(k);
                } else if v.is_object() && t.get(k).is_some_and(Value::is_object) {
                    merge_apply(t.get_mut(k).expect("present"), v);
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        _ => *target = applied.clone(),
    }
}

/// A manager's owned fields as stored in `metadata.managedFields`.
struct Entry {
    raw: Value,
    manager: String,
    operation: String,
    paths: BTreeSet<Path>,
}

fn read_managed(obj: &Value) -> Vec<Entry> {
    let mut out = Vec::new();
    for e in obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut paths = BTreeSet::new();
        if let Some(f) = e.get("fieldsV1") {
            paths_of_fields(f, &mut Vec::new(), &mut paths);
        }
        out.push(Entry {
            raw: e.clone(),
            manager: e
                .get("manager")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            operation: e
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            paths,
        });
    }
    out
}

fn show_path(p: &Path) -> String {
    p.iter().map(|k| format!(".{k}")).collect()
}

/// Server-side apply of `applied` onto `existing` (None: create). Returns the new object
/// or the conflict message.
pub fn apply(
    existing: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    time: &str,
) -> Result<Value, String> {
    let mut new_paths = BTreeSet::new();
    leaves(applied, &mut Vec::new(), &mut new_paths);
    let mut base = existing.cloned().unwrap_or_else(|| json!({}));
    let mut entries = existing.map(read_managed).unwrap_or_default();
    let api_version = applied.get("apiVersion").cloned().unwrap_or(Value::Null);

    // Conflicts with other managers.
    let mut conflicts = Vec::new();
    for e in entries
        .iter_mut()
        .filter(|e| !(e.manager == manager && e.operation == "Apply"))
    {
        let mut lost = Vec::new();
        for p in &new_paths {
            let theirs = e
                .paths
                .iter()
                .find(|q| q.starts_with(p) || p.starts_with(q));
            if let Some(q) = theirs
                && get_path(&base, q) != get_path(applied, q)
            {
                if force {
                    lost.push(q.clone());
                } else {
                    conflicts.push(format!("conflict with \"{}\": {}", e.manager, show_path(q)));
                }
            }
        }
        for q in lost {
            e.paths.remove(&q);
        }
    }
    if !conflicts.is_empty() {
        conflicts.sort();
        conflicts.dedup();
        let n = conflicts.len();
        let head = if n == 1 {
            "Apply failed with 1 conflict".to_string()
        } else {
            format!("Apply failed with {n} conflicts")
        };
        return Err(format!("{head}: {}", conflicts.join("\n")));
    }

    // Fields this manager stops applying are removed unless someone else owns them.
    let prev: BTreeSet<Path> = entries
        .iter()
        .filter(|e| e.manager == manager && e.operation == "Apply")
        .flat_map(|e| e.paths.iter().cloned())
        .collect();
    for p in prev.difference(&new_paths) {
        let shared = entries
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.paths.contains(p));
        let still_parent = new_paths.iter().any(|q| q.starts_with(p));
        if !shared && !still_parent {
            remove_path(&mut base, p);
        }
    }
    merge_apply(&mut base, applied);

    let mut managed: Vec<Value> = Vec::new();
    let mut placed = false;
    for e in entries {
        if e.manager == manager && e.operation == "Apply" {
            if !placed {
                managed.push(apply_entry(manager, &api_version, time, &new_paths));
                placed = true;
            }
            continue;
        }
        if e.paths.is_empty() {
            continue;
        }
        let mut raw = e.raw;
        raw["fieldsV1"] = fields_v1(&e.paths);
        managed.push(raw);
    }
    if !placed {
        managed.push(apply_entry(manager, &api_version, time, &new_paths));
    }
    base["metadata"]["managedFields"] = Value::Array(managed);
    Ok(base)
}

fn apply_entry(manager: &str, api_version: &Value, time: &str, paths: &BTreeSet<Path>) -> Value {
    json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(paths),
    })
}

/// Records an `Update` manager owning every leaf of `obj` it changed (used when a
/// non-apply write names a `fieldManager`).
pub fn record_update(obj: &mut Value, old: Option<&Value>, manager: &str, time: &str) {
    let mut now_paths = BTreeSet::new();
    leaves(obj, &mut Vec::new(), &mut now_paths);
    let changed: BTreeSet<Path> = now_paths
        .into_iter()
        .filter(|p| p.first().is_none_or(|k| k != "status"))
        .filter(|p| old.is_none_or(|o| get_path(o, p) != get_path(obj, p)))
        .collect();
    if changed.is_empty() {
        return;
    }
    let mut entries = read_managed(obj);
    let mut found = false;
    for e in &mut entries {
        if e.manager == manager && e.operation == "Update" {
            e.paths.extend(changed.iter().cloned());
            found = true;
        } else {
            for p in &changed {
                e.paths.remove(p);
            }
        }
    }
    let av = obj.get("apiVersion").cloned().unwrap_or(Value::Null);
    let mut managed: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.paths.is_empty())
        .map(|e| {
            let mut raw = e.raw;
            raw["fieldsV1"] = fields_v1(&e.paths);
            if e.manager == manager && e.operation == "Update" {
                raw["time"] = json!(time);
            }
            raw
        })
        .collect();
    if !found {
        managed.push(json!({
            "manager": manager, "operation": "Update", "apiVersion": av, "time": time,
            "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&changed),
        }));
    }
    obj["metadata"]["managedFields"] = Value::Array(managed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": null, "b": {"c": 5}, "l": [3]}));
        assert_eq!(t, json!({"b": {"c": 5, "d": 3}, "l": [3]}));
    }

    #[test]
    fn jpatch() {
        let mut t = json!({"a": [1, 2], "b": 1});
        json_patch(&mut t, &json!([{"op": "add", "path": "/a/-", "value": 3}, {"op": "remove", "path": "/b"}, {"op": "add", "path": "/c", "value": {"x": 1}}])).unwrap();
        assert_eq!(t, json!({"a": [1, 2, 3], "c": {"x": 1}}));
        assert!(json_patch(&mut t, &json!([{"op": "test", "path": "/c/x", "value": 2}])).is_err());
        assert!(
            json_patch(
                &mut t,
                &json!([{"op": "replace", "path": "/zz", "value": 2}])
            )
            .is_err()
        );
    }

    #[test]
    fn ssa_create_merge_remove_conflict() {
        let a1 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k": "v", "old": "o"}});
        let o1 = apply(None, &a1, "m1", false, "t").unwrap();
        assert_eq!(o1["data"], json!({"k": "v", "old": "o"}));
        assert_eq!(o1["metadata"]["managedFields"][0]["manager"], "m1");
        assert_eq!(
            o1["metadata"]["managedFields"][0]["fieldsV1"]["f:data"]["f:k"],
            json!({})
        );
        // m1 stops applying data.old: removed.
        let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v2"}});
        let o2 = apply(Some(&o1), &a2, "m1", false, "t").unwrap();
        assert_eq!(o2["data"], json!({"k": "v2"}));
        assert!(o2["metadata"]["labels"].get("a").is_none());
        // m2 wants data.k with another value: conflict unless forced.
        let a3 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "other"}});
        let err = apply(Some(&o2), &a3, "m2", false, "t").unwrap_err();
        assert!(err.contains("conflict with \"m1\": .data.k"), "{err}");
        let o3 = apply(Some(&o2), &a3, "m2", true, "t").unwrap();
        assert_eq!(o3["data"]["k"], "other");
        let managers: Vec<&str> = o3["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["m2"]);
        // Same value: shared, no conflict.
        let o4 = apply(Some(&o3), &a3, "m3", false, "t").unwrap();
        assert_eq!(o4["metadata"]["managedFields"].as_array().unwrap().len(), 2);
    }
}
