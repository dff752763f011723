//! Rendered YAML → typed [`Object`]s, rejecting any field the types do not know (every field
//! the typed deserializers skip is reported), then hvdctl's labels and namespace injected in code.

use crate::error::{Error, Result};
use crate::kinds::{KindDef, Object};
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::logs::rank::LABEL_RANK_TAGS;
/// Labels hvdctl puts on everything it creates (defined with the shared types).
pub use crate::types::{
    LABEL_APP, LABEL_BACKEND, LABEL_MANAGED_BY, LABEL_ROLE, LABEL_RUN, MANAGER,
};

/// Parses every YAML document of `text` (rendered from `source`) into a typed object.
/// Documents are independent, so they are parsed and checked on all cores.
pub fn parse(source: &str, text: &str, kinds: &[KindDef]) -> Result<Vec<Object>> {
    let docs = split_documents(text);
    let parsed = parallel_map(&docs, |(n, doc)| parse_document(source, *n, doc, kinds));
    let mut objects = Vec::with_capacity(parsed.len());
    for p in parsed {
        if let Some(o) = p? {
            objects.push(o);
        }
    }
    if objects.is_empty() {
        return Err(Error::input(format!(
            "{source}: the template rendered no objects"
        )));
    }
    Ok(objects)
}

/// Splits a YAML stream at its `---` lines into (1-based document number, text). A `---` at
/// column 0 always starts a document: block scalars are indented and quoted values are one
/// line.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        let marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if marker {
            if offset > start {
                docs.push(&text[start..offset]);
            }
            // Content after `--- ` on the same line belongs to the new document.
            start = offset + 3;
        }
        offset += line.len();
    }
    if offset > start {
        docs.push(&text[start..]);
    }
    docs.into_iter()
        .filter(|d| !d.trim().is_empty())
        .enumerate()
        .map(|(i, d)| (i + 1, d))
        .collect()
}

/// `f` over `items` on up to all cores, results in order.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len() / 32 + 1);
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

fn parse_document(source: &str, n: usize, doc: &str, kinds: &[KindDef]) -> Result<Option<Object>> {
    let value = crate::yaml::parse_value(doc).map_err(|e| {
        // The rendered text can hold secrets: say where, never what.
        Error::input(format!(
            "{source}: rendered document {n} is not valid YAML: line {} column {}: {}",
            e.line, e.col, e.message
        ))
        .hint(
            "a template must produce YAML; values must be written with {{value}} or {{json value}}",
        )
    })?;
    if value.is_null() {
        return Ok(None); // an empty document, e.g. a trailing `---`
    }
    let what = describe(&value, n);
    let mut unknown = Vec::new();
    let object = Object::from_value(&value, kinds, &mut unknown)
        .map_err(|e| Error::input(format!("{source}: {what}: {e}")))?;
    if !unknown.is_empty() {
        let unknown: Vec<String> = unknown.iter().map(|p| format!("`{p}`")).collect();
        return Err(Error::input(format!(
            "{source}: {what}: unknown field{} {} (not in the schema of {})",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", "),
            object.api_kind()
        )));
    }
    Ok(Some(object))
}

fn describe(v: &Value, n: usize) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("object");
    match v.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{kind} {name:?} (document {n})"),
        None => format!("{kind} (document {n})"),
    }
}

/// Objects as a YAML stream, `---` before each document (what `deploy --dry-run` prints).
pub fn to_yaml_stream(objects: &[Object]) -> String {
    parallel_map(objects, |o| {
        let mut out = String::from("---\n");
        super::yaml_out::write_document(&mut out, &o.to_value());
        out
    })
    .concat()
}

/// Objects as a JSON `v1 List`, like `kubectl get -o json`.
pub fn to_json_list(objects: &[Object]) -> crate::Result<String> {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": objects.iter().map(Object::to_value).collect::<Vec<_>>(),
    });
    crate::text::json(&list)
}

/// Identity of a run, stamped on every object.
#[derive(Debug, Clone)]
pub struct Stamp<'a> {
    pub app: &'a str,
    pub run_id: &'a str,
    pub namespace: &'a str,
    pub backend: &'a str,
    /// The launcher's [`LABEL_RANK_TAGS`] (launcher pod templates only).
    pub rank_tags: Option<&'a str>,
}

/// Adds hvdctl's labels to every object and pod template and sets the namespace. Labels are
/// applied last, so a template cannot remove or change them.
pub fn stamp(objects: &mut [Object], s: &Stamp) {
    let ours = |labels: &mut Option<BTreeMap<String, String>>| {
        let l = labels.get_or_insert_with(Default::default);
        l.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
        l.insert(LABEL_APP.into(), s.app.into());
        l.insert(LABEL_RUN.into(), s.run_id.into());
        l.insert(LABEL_BACKEND.into(), s.backend.into());
    };
    for o in objects.iter_mut() {
        let meta = o.meta_mut();
        meta.namespace = Some(s.namespace.to_string());
        ours(&mut meta.labels);
        o.for_each_pod_meta(|role, m| {
            ours(&mut m.labels);
            let l = m.labels.get_or_insert_with(Default::default);
            l.insert(LABEL_ROLE.into(), role.into());
            match s.rank_tags {
                Some(v) if role == crate::kinds::ROLE_LAUNCHER => {
                    l.insert(LABEL_RANK_TAGS.into(), v.into())
                }
                _ => l.remove(LABEL_RANK_TAGS),
            };
        });
    }
}

/// Adds `annotations` (the run's provenance) to every object and pod template, over what
/// the template set.
pub fn annotate(objects: &mut [Object], annotations: &BTreeMap<String, String>) {
    let add = |a: &mut Option<BTreeMap<String, String>>| {
        a.get_or_insert_with(Default::default)
            .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    };
    for o in objects.iter_mut() {
        add(&mut o.meta_mut().annotations);
        o.for_each_pod_meta(|_, m| add(&mut m.annotations));
    }
}

/// Creation order: what others refer to first (accounts, secrets, config, services), the
/// job last, so a launcher never starts without its workers' objects (each kind's
/// [`crate::kinds::Kind::ORDER`]).
pub fn apply_order(o: &Object) -> u8 {
    o.order()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_markers_only() {
        let docs = split_documents("a: 1\n---\nb: |\n  ---x\n  --- y\n--- \n---\nc: 2\n---\n");
        assert_eq!(
            docs,
            vec![
                (1, "a: 1\n"),
                (2, "\nb: |\n  ---x\n  --- y\n"),
                (3, "\nc: 2\n")
            ]
        );
    }

    #[test]
    fn unknown_fields_are_found_deep() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    imagePullPolicyy: Always\n  hostNetwrk: true\n";
        let e = parse("t", text, crate::kinds::BUILTIN).unwrap_err();
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
        let mut objs = parse("t", text, crate::kinds::BUILTIN).unwrap();
        stamp(
            &mut objs,
            &Stamp {
                app: "a",
                run_id: "r1",
                namespace: "ns",
                backend: "native",
                rank_tags: None,
            },
        );
        let v = objs[0].to_value();
        assert_eq!(v["metadata"]["labels"]["hvdctl.io/backend"], "native");
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
            parse(
                "t",
                "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
                crate::kinds::BUILTIN
            )
            .unwrap_err()
            .message
            .contains("does not create v1 Node")
        );
        let e = parse("t", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {backoffLimit: many, template: {}}\n", crate::kinds::BUILTIN).unwrap_err();
        assert!(e.message.contains("spec.backoffLimit"), "{}", e.message);
    }
}
