//! Writing JSON values as block-style YAML (the `-o yaml` of `deploy --dry-run`), the way
//! kubectl prints objects. Strings are plain only when nothing can misread them (no YAML 1.1
//! or 1.2 reading as a number, boolean or null; no indicator characters); multi-line text
//! becomes a literal block when that is lossless; everything else is double-quoted with
//! [`super::quote`]. Output is checked by reading it back in the tests.

use super::quote::quote_into;
use serde_json::Value;

/// One YAML document (without the `---` line) for `v`.
pub fn to_string(v: &Value) -> String {
    let mut out = String::with_capacity(1024);
    write_value(&mut out, v, 0);
    out
}

/// Appends `v` as a YAML document to `out`.
pub fn write_document(out: &mut String, v: &Value) {
    write_value(out, v, 0);
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Writes a value that starts a block at column `ind` (top level or after `key:\n`).
fn write_value(out: &mut String, v: &Value, ind: usize) {
    match v {
        Value::Object(m) if !m.is_empty() => write_map(out, m, ind, false),
        Value::Array(a) if !a.is_empty() => write_seq(out, a, ind),
        other => {
            indent(out, ind);
            write_scalar(out, other, ind);
            out.push('\n');
        }
    }
}

/// A mapping at column `ind`. With `first_inline`, the first key follows a `- ` already written.
fn write_map(out: &mut String, m: &serde_json::Map<String, Value>, ind: usize, first_inline: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 || !first_inline {
            indent(out, ind);
        }
        write_key(out, k);
        match v {
            Value::Object(inner) if !inner.is_empty() => {
                out.push_str(":\n");
                write_map(out, inner, ind + 2, false);
            }
            // Sequences in mappings are not indented (kubectl's style).
            Value::Array(items) if !items.is_empty() => {
                out.push_str(":\n");
                write_seq(out, items, ind);
            }
            other => {
                out.push_str(": ");
                write_scalar(out, other, ind + 2);
                out.push('\n');
            }
        }
    }
}

fn write_seq(out: &mut String, items: &[Value], ind: usize) {
    for item in items {
        indent(out, ind);
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => write_map(out, m, ind + 2, true),
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                write_seq(out, a, ind + 2);
            }
            other => {
                write_scalar(out, other, ind + 2);
                out.push('\n');
            }
        }
    }
}

fn write_key(out: &mut String, k: &str) {
    if is_plain_safe(k) {
        out.push_str(k)
    } else {
        quote_into(out, k)
    }
}

/// A scalar (or empty collection) after `key: ` or `- `; block content is indented by `ind`.
fn write_scalar(out: &mut String, v: &Value, ind: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
        Value::String(s) if is_plain_safe(s) => out.push_str(s),
        Value::String(s) if literal_block_safe(s) => write_literal(out, s, ind),
        Value::String(s) => quote_into(out, s),
    }
}

/// Plain (unquoted) only for strings made of `[A-Za-z0-9._/:=+@-]`, starting with a letter,
/// `_` or `/`, not ending with `:`, and not a word YAML 1.1 reads as a boolean or null; or
/// quantity-like words such as `512Mi` and `250m` (a digit, then letters, no `:` or `_`, and
/// not a number in any YAML version: `1e3`, `0x10`, `0o7`, `0b1` stay quoted).
fn is_plain_safe(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    if first.is_ascii_digit() {
        return b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'.')
            && b.iter().any(|c| {
                c.is_ascii_alphabetic() && !matches!(c, b'e' | b'E' | b'x' | b'o' | b'b')
            })
            && !s.starts_with(['0'])
            && crate::yaml::resolve_plain(s).is_string();
    }
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'/') || b.last() == Some(&b':') {
        return false;
    }
    if !b
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || b"._/:=+@-".contains(&c))
    {
        return false;
    }
    if s.contains(": ") || s.contains("::") {
        return false;
    }
    !matches!(
        s.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "nan" | "inf"
    )
}

/// A literal block (`|`) reproduces `s` exactly when every character is printable, no line
/// ends in white space, and the text does not start with a space or a newline.
fn literal_block_safe(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && s.chars().all(|c| {
            c == '\n'
                || !(c.is_control()
                    || matches!(
                        c,
                        '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                    ))
        })
        && s.split('\n').all(|line| !line.ends_with([' ', '\t']))
}

fn write_literal(out: &mut String, s: &str, ind: usize) {
    let trailing = s.len() - s.trim_end_matches('\n').len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    let body = s.strip_suffix('\n').unwrap_or(s);
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            indent(out, ind);
            out.push_str(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: &Value) {
        let text = to_string(v);
        let back: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, v, "\n{text}");
    }

    #[test]
    fn kubectl_style() {
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app.kubernetes.io/managed-by": "hvdctl"}},
            "spec": {"containers": [{"name": "c", "command": ["mpirun", "-np", "4"], "env": []}], "nodeSelector": {}}});
        let text = to_string(&v);
        assert!(text.starts_with("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    app.kubernetes.io/managed-by: hvdctl\n"), "{text}");
        assert!(text.contains("  containers:\n  - name: c\n    command:\n    - mpirun\n    - \"-np\"\n    - \"4\"\n    env: []\n"), "{text}");
        round_trip(&v);
    }

    #[test]
    fn tricky_strings_read_back_exactly() {
        for s in [
            "",
            "true",
            "yes",
            "No",
            "null",
            "~",
            "0755",
            "1e3",
            "1_000",
            "1:20",
            ".5",
            "-",
            "- x",
            "a: b",
            "a #b",
            "#",
            "*x",
            "&x",
            "!x",
            "%x",
            "@x",
            "`x",
            "'x'",
            "\"x\"",
            "x:",
            "{a}",
            "[a]",
            "a,b",
            "a\nb",
            "a\nb\n",
            "a\nb\n\n",
            "\na",
            " a\nb",
            "a \nb",
            "line\n  indented\n",
            "tab\there",
            "\u{85}",
            "\u{2028}",
            "\u{feff}x",
            "x\r\ny",
            "é\nü",
            "#!/bin/bash\nset -u\n",
            "a::b",
            "http://x",
            "2001:db8::1",
            "512Mi",
            "250m",
            "1e3",
            "0x10",
            "0o7",
            "0b1",
            "1_000",
            "12:30",
            "1.5",
            "2Gi",
            "1.5G",
            "3.0.1",
            "1b",
            "1E5",
            "007",
            "0",
            "4",
        ] {
            round_trip(&json!({"k": s, "l": [s], s: 1}));
        }
        round_trip(
            &json!([[1, [2, {}]], {"a": [[]], "b": {"c": [{"d": null}]}}, 1.5, -3, true, null]),
        );
    }
}
