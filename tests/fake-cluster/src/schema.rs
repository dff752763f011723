//! A strict check of a JSON value against a CRD's OpenAPI v3 schema (the fixtures in
//! `tests/fixtures/crds/*.schema.json`, see their README), as `kubeconform -strict` checks:
//! a field the schema does not declare, a wrong type, a value outside an enum, a missing
//! required field, a list or string outside its bounds, a number outside its range is an
//! error. `x-kubernetes-preserve-unknown-fields` and `x-kubernetes-int-or-string` are
//! honoured; an object schema with neither properties nor additionalProperties accepts any
//! field (the root `metadata`, as the apiserver does). CEL rules (`x-kubernetes-validations`)
//! and `pattern` are not evaluated.

use serde_json::Value;

/// Errors (`path: what`) of `v` against `schema`; empty when it conforms.
pub fn errors(schema: &Value, v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, v, "", &mut out);
    out
}

/// The `openAPIV3Schema` of a fixture file's JSON (`{group, kind, version, openAPIV3Schema}`).
pub fn of_fixture(fixture: &Value) -> &Value {
    &fixture["openAPIV3Schema"]
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let at = |p: &str| {
        if p.is_empty() {
            "<root>".to_string()
        } else {
            p.to_string()
        }
    };
    let type_ok = if schema["x-kubernetes-int-or-string"] == true {
        v.is_i64() || v.is_u64() || v.is_string()
    } else {
        match schema["type"].as_str() {
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some("string") => v.is_string(),
            Some("integer") => v.is_i64() || v.is_u64(),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            _ => true,
        }
    };
    if !type_ok {
        // `nullable: true` admits null.
        if !(v.is_null() && schema["nullable"] == true) {
            out.push(format!(
                "{}: {v} is not of type {}",
                at(path),
                schema["type"]
            ));
        }
        return;
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        out.push(format!(
            "{}: {v} is not one of {}",
            at(path),
            schema["enum"]
        ));
    }
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(n) = v.as_f64()
        && (bound("minimum").is_some_and(|m| n < m) || bound("maximum").is_some_and(|m| n > m))
    {
        out.push(format!("{}: {v} is out of range", at(path)));
    }
    let len = match v {
        Value::Array(a) => Some((a.len() as f64, "Items")),
        Value::String(s) => Some((s.chars().count() as f64, "Length")),
        _ => None,
    };
    if let Some((n, what)) = len
        && (bound(&format!("min{what}")).is_some_and(|m| n < m)
            || bound(&format!("max{what}")).is_some_and(|m| n > m))
    {
        out.push(format!("{}: {n} is outside min/max{what}", at(path)));
    }
    if let (Some(items), Some(list)) = (schema.get("items"), v.as_array()) {
        for (i, x) in list.iter().enumerate() {
            check(items, x, &format!("{path}[{i}]"), out);
        }
    }
    let Some(obj) = v.as_object() else {
        return;
    };
    for r in schema["required"].as_array().into_iter().flatten() {
        if let Some(r) = r.as_str()
            && !obj.contains_key(r)
        {
            out.push(format!("{}: {r} is required", at(path)));
        }
    }
    if let Some(m) = bound("maxProperties")
        && obj.len() as f64 > m
    {
        out.push(format!("{}: more than {m} properties", at(path)));
    }
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let props = schema["properties"].as_object();
    let extra = schema.get("additionalProperties");
    for (k, x) in obj {
        let p = format!("{path}.{k}");
        match (props.and_then(|p| p.get(k)), extra) {
            (Some(s), _) => check(s, x, &p, out),
            (None, Some(a)) if a.is_object() => check(a, x, &p, out),
            (None, Some(a)) if a == true => {}
            (None, None) if props.is_none() => {}
            (None, _) => out.push(format!("{p}: not declared by the schema")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict() {
        let s = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string", "enum": ["x", "y"]},
            "n": {"type": "integer", "minimum": 0},
            "l": {"type": "array", "maxItems": 1, "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "q": {"x-kubernetes-int-or-string": true},
            "free": {"type": "object"}}});
        assert!(errors(&s, &json!({"a": "x", "n": 1, "l": [{"k": "v"}], "m": {"z": "1"}, "q": 3, "free": {"any": 1}})).is_empty());
        let e = errors(
            &s,
            &json!({"a": "z", "n": -1, "l": [{"k": 1}, {}], "m": {"z": 1}, "q": true, "other": 1}),
        );
        assert_eq!(
            e,
            [
                ".a: \"z\" is not one of [\"x\",\"y\"]",
                ".n: -1 is out of range",
                ".l: 2 is outside min/maxItems",
                ".l[0].k: 1 is not of type \"string\"",
                ".m.z: 1 is not of type \"string\"",
                ".q: true is not of type null",
                ".other: not declared by the schema",
            ]
        );
        assert_eq!(errors(&s, &json!({})), ["<root>: a is required"]);
    }
}
