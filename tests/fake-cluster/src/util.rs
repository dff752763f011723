//! Small helpers: time, identifiers, names, base64.

use rand::Rng;
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// `2026-11-22T10:00:00Z` (metav1.Time: whole seconds).
pub fn fmt_time(ns: i64) -> String {
    jiff::Timestamp::from_second(ns.div_euclid(1_000_000_000))
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// `2026-11-22T10:00:00.123456Z` (metav1.MicroTime).
pub fn fmt_micro(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let micros = ns.rem_euclid(1_000_000_000) / 1000;
    let base = fmt_time(secs * 1_000_000_000);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), micros)
}

/// Parses RFC 3339 into nanoseconds since the epoch.
pub fn parse_time(s: &str) -> Option<i64> {
    let t: jiff::Timestamp = s.parse().ok()?;
    i64::try_from(t.as_nanosecond()).ok()
}

pub fn new_uid() -> String {
    let b: [u8; 16] = rand::rng().random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// Five characters the way the apiserver fills in `generateName`.
pub fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHA[rng.random_range(0..ALPHA.len())] as char)
        .collect()
}

pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Standard base64 (padding and whitespace tolerated); `None` on an invalid character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' | b'\n' | b'\r' | b' ' | b'\t' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

pub fn s<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

pub fn name_of(v: &Value) -> &str {
    s(v, "/metadata/name").unwrap_or_default()
}

pub fn ns_of(v: &Value) -> &str {
    s(v, "/metadata/namespace").unwrap_or_default()
}

pub fn uid_of(v: &Value) -> &str {
    s(v, "/metadata/uid").unwrap_or_default()
}

pub const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
pub const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Label values: at most 63 characters, alphanumerics and `-_.`, alphanumeric at both ends.
/// What apimachinery's `IsValidLabelValue` says of a bad one.
pub const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

/// Human age like kubectl's: `5s`, `3m2s`, `4h`, `2d`.
pub fn age(ns: i64, now: i64) -> String {
    let secs = ((now - ns) / 1_000_000_000).max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 600 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else if secs < 3 * 3600 {
        format!("{}m", secs / 60)
    } else if secs < 48 * 3600 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b64() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn times() {
        assert_eq!(fmt_time(1_700_000_000_500_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(
            fmt_micro(1_700_000_000_500_000_000),
            "2023-11-14T22:13:20.500000Z"
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20.5Z"),
            Some(1_700_000_000_500_000_000)
        );
    }

    #[test]
    fn dns() {
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label("-a"));
        assert!(is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("Bad_Name"));
    }
}
