//! What the Kubernetes API server refuses that a schema check passes, as rules over plain
//! values with the API server's wording (kubernetes `pkg/apis/core/validation/validation.go`:
//! `ValidateResourceRequirements`, `validateTolerations`, `ValidatePersistentVolumeClaimSpec`;
//! apimachinery's `ValidateAnnotationsSize`). One set of rules, two reporters: the app's
//! validation names the `hvdctl.yaml` line, the rendered-object check (`backend::admission`)
//! the object and its field path.

use quantity::Quantity;
use std::collections::BTreeMap;

/// The API server's limit on all annotations of one object together (keys and values).
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// One refusal: where (relative to the rule's subject) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The map (`requests` or `limits`) and resource it is about, when it is about one.
    pub key: Option<(&'static str, String)>,
    /// The API server's field path below the subject (`requests`, `limits[example.com/x]`,
    /// `""` for the subject itself).
    pub field: String,
    /// The API server's message: `Invalid value: "2": must be equal to …`.
    pub message: String,
}

/// `hugepages-<size>`.
fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Resources whose request may be below the limit: the native ones (no domain, or a
/// `kubernetes.io` domain) except hugepages (`helper.IsOvercommitAllowed`).
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !is_hugepages(name)
}

/// Extended resources (a vendor's domain) are counted in whole units
/// (`helper.IsIntegerResourceName`).
fn integer_only(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// A container's `resources` as the API server checks them. Unparsable quantities and bad
/// names are left to the callers' own checks.
pub fn resource_requirements(
    requests: &BTreeMap<String, String>,
    limits: &BTreeMap<String, String>,
) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut cpu_or_memory = false;
    let mut hugepages = false;
    for (list, map) in [("limits", limits), ("requests", requests)] {
        for (name, q) in map {
            cpu_or_memory |= name == "cpu" || name == "memory";
            hugepages |= is_hugepages(name);
            let Ok(v) = Quantity::parse(q) else { continue };
            // `MilliValue() % 1000 != 0` (validateResourceQuantityValue)
            if integer_only(name) && v.milli_value() % 1000 != 0 {
                out.push(Refusal {
                    key: Some((list, name.clone())),
                    field: format!("{list}[{name}]"),
                    message: format!("Invalid value: \"{q}\": must be an integer"),
                });
            }
        }
    }
    for (name, q) in requests {
        let Ok(v) = Quantity::parse(q) else { continue };
        match limits.get(name).map(|l| (l, Quantity::parse(l).ok())) {
            Some((l, Some(lv))) if !overcommit_allowed(name) && v != lv => out.push(Refusal {
                key: Some(("requests", name.clone())),
                field: "requests".into(),
                message: format!("Invalid value: \"{q}\": must be equal to {name} limit of {l}"),
            }),
            Some((l, Some(lv))) if v > lv => out.push(Refusal {
                key: Some(("requests", name.clone())),
                field: "requests".into(),
                message: format!(
                    "Invalid value: \"{q}\": must be less than or equal to {name} limit of {l}"
                ),
            }),
            None if !overcommit_allowed(name) => out.push(Refusal {
                key: Some(("requests", name.clone())),
                field: "limits".into(),
                message: "Required value: Limit must be set for non overcommitable resources"
                    .into(),
            }),
            _ => {}
        }
    }
    if hugepages && !cpu_or_memory {
        out.push(Refusal {
            key: None,
            field: String::new(),
            message: "Forbidden: HugePages require cpu or memory".into(),
        });
    }
    out
}

/// Why a toleration's `value` (operator `Equal`) is not a label value, in the API server's
/// words (it reports it at the toleration's `operator`).
pub fn toleration_value(value: &str) -> Option<String> {
    let label_like = value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let bad_chars = !value.is_empty() && !label_like;
    let mut why = Vec::new();
    if value.len() > 63 {
        why.push("must be no more than 63 characters");
    }
    if bad_chars {
        why.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
    }
    (!why.is_empty()).then(|| format!("Invalid value: \"{value}\": {}", why.join("; ")))
}

/// A claim's size and access modes as the API server checks them: (field below `spec`,
/// message).
pub fn claim(size: &str, access_modes: &[&str]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if Quantity::parse(size).is_ok_and(|v| v <= Quantity::ZERO) {
        out.push((
            "resources.requests[storage]",
            format!("Invalid value: \"{size}\": must be greater than zero"),
        ));
    }
    if access_modes.contains(&"ReadWriteOncePod")
        && access_modes.iter().any(|m| *m != "ReadWriteOncePod")
    {
        out.push((
            "accessModes",
            "Forbidden: may not use ReadWriteOncePod with other access modes".into(),
        ));
    }
    out
}

/// The bytes all annotations take together, when over the API server's limit.
pub fn annotations_too_long<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Option<usize> {
    let total: usize = annotations
        .into_iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    (total > ANNOTATIONS_MAX_BYTES).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn messages(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Vec<String> {
        resource_requirements(&map(req), &map(lim))
            .into_iter()
            .map(|r| format!("{}: {}", r.field, r.message))
            .collect()
    }

    #[test]
    fn resources_as_the_api_server_checks_them() {
        assert!(messages(&[("cpu", "1"), ("memory", "1Gi")], &[("cpu", "2")]).is_empty());
        assert_eq!(
            messages(&[], &[("hugepages-2Mi", "4Mi")]),
            [": Forbidden: HugePages require cpu or memory"]
        );
        assert!(messages(&[], &[("hugepages-2Mi", "4Mi"), ("memory", "1Gi")]).is_empty());
        assert_eq!(
            messages(
                &[("hugepages-2Mi", "2Mi"), ("cpu", "1")],
                &[("hugepages-2Mi", "4Mi")]
            ),
            ["requests: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi"]
        );
        assert_eq!(
            messages(&[("example.com/foo", "2")], &[("example.com/foo", "1")]),
            ["requests: Invalid value: \"2\": must be equal to example.com/foo limit of 1"]
        );
        assert_eq!(
            messages(&[], &[("example.com/foo", "0.5")]),
            ["limits[example.com/foo]: Invalid value: \"0.5\": must be an integer"]
        );
        assert_eq!(
            messages(&[("example.com/fpga", "1")], &[]),
            ["limits: Required value: Limit must be set for non overcommitable resources"]
        );
        assert_eq!(
            messages(&[("cpu", "4")], &[("cpu", "2")]),
            ["requests: Invalid value: \"4\": must be less than or equal to cpu limit of 2"]
        );
        // Equal quantities written differently are equal.
        assert!(messages(&[("example.com/foo", "1000m")], &[("example.com/foo", "1")]).is_empty());
    }

    #[test]
    fn toleration_values_claims_and_annotations() {
        assert_eq!(toleration_value("ml"), None);
        assert_eq!(toleration_value(""), None);
        assert!(
            toleration_value("has space")
                .unwrap()
                .contains("a valid label must be")
        );
        assert!(
            toleration_value(&"a".repeat(64))
                .unwrap()
                .contains("no more than 63")
        );
        assert_eq!(claim("1Gi", &["ReadWriteOnce"]), []);
        assert_eq!(
            claim("0", &["ReadWriteOnce"])[0].0,
            "resources.requests[storage]"
        );
        assert_eq!(
            claim("1Gi", &["ReadWriteOncePod", "ReadWriteMany"]),
            [(
                "accessModes",
                "Forbidden: may not use ReadWriteOncePod with other access modes".to_string()
            )]
        );
        let big = map(&[("a", &"x".repeat(ANNOTATIONS_MAX_BYTES))]);
        assert_eq!(annotations_too_long(&big), Some(ANNOTATIONS_MAX_BYTES + 1));
        assert_eq!(annotations_too_long(&map(&[("a", "b")])), None);
    }
}
