//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and field selectors
//! (`path=value`, `path==value`, `path!=value` over any dotted field, e.g. `metadata.name`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        // Split on commas that are not inside parentheses.
        let mut parts = Vec::new();
        let mut depth = 0i32;
        let mut cur = String::new();
        for c in s.chars() {
            match c {
                '(' => {
                    depth += 1;
                    cur.push(c)
                }
                ')' => {
                    depth -= 1;
                    cur.push(c)
                }
                ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        if depth != 0 {
            return Err(format!(
                "unable to parse requirement: unbalanced parentheses in {s:?}"
            ));
        }
        parts.push(cur);
        for part in parts {
            let p = part.trim();
            if p.is_empty() {
                if s.trim().is_empty() {
                    continue;
                }
                return Err(format!(
                    "unable to parse requirement: found '', expected: identifier in {s:?}"
                ));
            }
            reqs.push(parse_req(p)?);
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Req::Eq(
                    k.clone(),
                    v.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => reqs.push(Req::In(key, values)),
                    Some("NotIn") => reqs.push(Req::NotIn(key, values)),
                    Some("Exists") => reqs.push(Req::Exists(key)),
                    Some("DoesNotExist") => reqs.push(Req::NotExists(key)),
                    _ => {}
                }
            }
        }
        LabelSelector(reqs)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches_labels(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_labels(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

fn parse_req(p: &str) -> Result<Req, String> {
    let bad = |why: &str| Err(format!("unable to parse requirement: {why}: {p:?}"));
    if let Some(rest) = p.strip_prefix('!') {
        let k = rest.trim();
        if !valid_key(k) {
            return bad("invalid label key");
        }
        return Ok(Req::NotExists(k.to_string()));
    }
    for (op, ctor) in [("!=", 0u8), ("==", 1), ("=", 1)] {
        if let Some(i) = p.find(op) {
            let k = p[..i].trim();
            let v = p[i + op.len()..].trim();
            if !valid_key(k) {
                return bad("invalid label key");
            }
            if !valid_value(v) {
                return bad("invalid label value");
            }
            return Ok(if ctor == 0 {
                Req::NotEq(k.into(), v.into())
            } else {
                Req::Eq(k.into(), v.into())
            });
        }
    }
    if let Some(open) = p.find('(') {
        let head = p[..open].trim();
        if !p.ends_with(')') {
            return bad("missing ')'");
        }
        let inner = &p[open + 1..p.len() - 1];
        let values: Vec<String> = inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if values.iter().any(|v| !valid_value(v)) {
            return bad("invalid label value");
        }
        let mut words = head.split_whitespace();
        let (Some(k), Some(op), None) = (words.next(), words.next(), words.next()) else {
            return bad("expected 'key in (...)' or 'key notin (...)'");
        };
        if !valid_key(k) {
            return bad("invalid label key");
        }
        return match op {
            "in" => Ok(Req::In(k.into(), values)),
            "notin" => Ok(Req::NotIn(k.into(), values)),
            _ => bad("unknown operator"),
        };
    }
    if valid_key(p) {
        return Ok(Req::Exists(p.to_string()));
    }
    bad("invalid label key")
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some(i) = part.find("!=") {
                (&part[..i], false, &part[i + 2..])
            } else if let Some(i) = part.find("==") {
                (&part[..i], true, &part[i + 2..])
            } else if let Some(i) = part.find('=') {
                (&part[..i], true, &part[i + 1..])
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let k = k.trim();
            if k.is_empty() {
                return Err(format!("invalid selector: '{s}'"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let mut cur = obj;
            let mut found = true;
            for seg in k.split('.') {
                match cur.get(seg) {
                    Some(x) => cur = x,
                    None => {
                        found = false;
                        break;
                    }
                }
            }
            let actual = if !found {
                String::new()
            } else {
                match cur {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                }
            };
            (actual == *v) == *eq
        })
    }

    /// The value of `metadata.name=` if the selector pins one name.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    #[test]
    fn label_ops() {
        let o = obj(json!({"a": "1", "b": "2"}));
        for (sel, want) in [
            ("", true),
            ("a=1", true),
            ("a==1", true),
            ("a=2", false),
            ("a!=2", true),
            ("c!=2", true),
            ("a in (1,3)", true),
            ("a in (3, 4)", false),
            ("a notin (3,4)", true),
            ("c notin (3)", true),
            ("a notin (1)", false),
            ("a", true),
            ("c", false),
            ("!c", true),
            ("!a", false),
            ("a=1,b in (2),!c", true),
            ("a=1,b=3", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a in (1").is_err());
        assert!(LabelSelector::parse("a=1,,b=2").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn fields() {
        let o =
            json!({"metadata": {"name": "x", "namespace": "d"}, "status": {"phase": "Running"}});
        assert!(FieldSelector::parse("metadata.name=x").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("metadata.name==x,status.phase!=Failed")
                .unwrap()
                .matches(&o)
        );
        assert!(!FieldSelector::parse("metadata.name=y").unwrap().matches(&o));
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&o));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
