//! Values as data: every value that reaches a manifest template is written as a JSON literal
//! (valid YAML flow syntax) in which anything YAML could read as syntax or mangle is escaped.
//!
//! `serde_json::to_string` is not enough: YAML forbids raw C0/C1 controls, DEL, U+FEFF and
//! U+FFFE/U+FFFF inside quoted scalars, and treats U+2028/U+2029 as line breaks. All of them are
//! written as `\uXXXX`, so the parsed value is exactly the input.

use serde_json::Value;
use std::fmt::Write;

/// Starts a placeholder of `super::scalars` (a private-use character a value never holds
/// raw: [`quote`] escapes it).
pub const OPEN: char = '\u{e000}';
/// Ends a placeholder.
pub const CLOSE: char = '\u{e001}';

/// True for characters that must be escaped in a YAML double-quoted scalar.
fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '"' | '\\' | '\u{7f}'..='\u{9f}' |
        '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' |
        // hvdctl's placeholders (see `super::scalars`): never raw in rendered text.
        OPEN | CLOSE)
}

/// Writes `s` as a double-quoted JSON/YAML string.
pub fn quote_into(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !needs_escape(c) {
            out.push(c);
            continue;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
        }
    }
    out.push('"');
}

/// `s` as a double-quoted JSON/YAML string.
pub fn quote(s: &str) -> String {
    let mut out = String::new();
    quote_into(&mut out, s);
    out
}

/// Any JSON value as a one-line YAML flow literal (`{"a": [1, "x"]}`), strings quoted as above.
pub fn flow(v: &Value) -> String {
    let mut out = String::new();
    flow_into(&mut out, v);
    out
}

fn flow_into(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => quote_into(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow_into(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                quote_into(out, k);
                out.push_str(": ");
                flow_into(out, item);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_yaml_would_misread() {
        assert_eq!(quote("a\nb"), r#""a\nb""#);
        assert_eq!(
            quote("\u{7f}\u{85}\u{2028}\u{2029}\u{feff}"),
            r#""\u007f\u0085\u2028\u2029\ufeff""#
        );
        assert_eq!(quote("é ✓ 😀"), "\"é ✓ 😀\"");
        assert_eq!(quote(r#"say "hi" \o/"#), r#""say \"hi\" \\o/""#);
    }

    #[test]
    fn flow_is_yaml_that_reads_back_the_same() {
        let v = serde_json::json!({"a": [1, "x\u{2028}", null, true], "b: c": {"#": "*alias"}});
        let back: Value = serde_norway::from_str(&flow(&v)).unwrap();
        assert_eq!(back, v);
    }
}
