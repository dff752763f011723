//! Plain text helpers every layer may use: the closest known name for a typo, plurals, and
//! machine output (`-o json|yaml`) that fails loudly instead of printing an empty document.

use crate::error::{Error, Result};
use serde::Serialize;
use std::borrow::Cow;

/// The one redaction of addresses: every URL hvdctl prints or logs (an API server, a Docker
/// host, a registry) has its userinfo (`user:password@`) shown as `***`.
pub use docker_endpoint::redact::userinfo as redact_url;

/// Text for a terminal line: URLs' userinfo masked ([`redact_url`]) and every control
/// character but the line break and the tab shown escaped (`\x1b`, `\r`, `\u{9b}`), so text
/// from a user, a file or a server can neither clear the screen, move the cursor nor hide a
/// line. Errors, notes and warnings pass through it where they are printed.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    let text = redact_url(text);
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push('\n'),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The first `chars` characters of an identifier (a digest's hex, an image ID, a commit) for
/// people, never cutting a character in two: an ID from an annotation or a daemon's answer
/// may hold anything, and slicing bytes at a fixed length would panic on a multi-byte one.
/// A `sha256:` in front is dropped.
pub fn short_id(id: &str, chars: usize) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    match id.char_indices().nth(chars) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

/// The closest known name to `got`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(got: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = got.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// A duration in seconds the short way (`42s`, `3m`, `5h`, `2d`).
pub fn human_seconds(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A noun for `n` things: `container`/`containers`, `private directory`/`private
/// directories`, `Pod`/`Pods`, `Ingress`/`Ingresses`.
pub fn plural(noun: &str, n: usize) -> String {
    if n == 1 {
        return noun.to_string();
    }
    let vowel_before = |s: &str| {
        s.chars()
            .rev()
            .nth(1)
            .is_some_and(|c| "aeiouAEIOU".contains(c))
    };
    if let Some(stem) = noun.strip_suffix('y')
        && !vowel_before(noun)
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "ch", "sh"].iter().any(|e| noun.ends_with(e)) {
        return format!("{noun}es");
    }
    format!("{noun}s")
}

/// `v` as pretty JSON ending in a newline (`-o json`).
pub fn json<T: Serialize + ?Sized>(v: &T) -> Result<String> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| {
        Error::failure(format!("cannot write the output as JSON: {e}")).caused_by(e)
    })?;
    s.push('\n');
    Ok(s)
}

/// `v` as YAML (`-o yaml`), written as every YAML hvdctl prints is written
/// ([`crate::render::yaml_out`], kubectl's block style).
pub fn yaml<T: Serialize + ?Sized>(v: &T) -> Result<String> {
    let v = serde_json::to_value(v).map_err(|e| {
        Error::failure(format!("cannot write the output as YAML: {e}")).caused_by(e)
    })?;
    Ok(crate::render::yaml_out::to_string(&v))
}

/// An engine's timestamp (RFC 3339); empty or unreadable → `None`.
pub fn parse_time(t: &str) -> Option<jiff::Timestamp> {
    t.parse().ok()
}

/// An engine's timestamp in one form (RFC 3339, UTC); empty or unreadable → `None`.
pub fn normalize_time(t: &str) -> Option<String> {
    parse_time(t).map(|t| t.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn yaml_output_reads_back_as_the_value() {
        let v = serde_json::json!({
            "name": "a: b", "n": 3, "yes": "yes", "empty": [], "none": null,
            "rows": [{"k": "v"}, "multi\nline\n"], "deep": {"x": {}}
        });
        let text = yaml(&v).unwrap();
        let back: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(back, v, "{text}");
        assert_eq!(yaml(&Vec::<u8>::new()).unwrap(), "[]\n");
    }

    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn text_for_a_terminal_has_no_password_and_no_raw_control() {
        assert_eq!(
            for_terminal("cannot reach https://u:PASSWORD@h:6443 (x)"),
            "cannot reach https://***@h:6443 (x)"
        );
        assert_eq!(
            for_terminal("name: `\u{1b}[2J\u{1b}[H`\r\u{7}\u{0}\u{9b}x"),
            "name: `\\x1b[2J\\x1b[H`\\r\\x07\\x00\\u{9b}x"
        );
        // Line breaks and tabs are the message's own.
        assert_eq!(for_terminal("a\n  hint:\tb"), "a\n  hint:\tb");
        assert!(matches!(for_terminal("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn short_ids_never_cut_a_character() {
        assert_eq!(short_id("sha256:0123456789abcdef", 12), "0123456789ab");
        assert_eq!(short_id("abc", 12), "abc");
        assert_eq!(short_id("0123456é9abcdef", 7), "0123456");
        assert_eq!(short_id("012345é", 7), "012345é");
        assert_eq!(short_id("ééééééééééééé", 12), "éééééééééééé");
        assert_eq!(short_id("sha256:🦀🦀🦀", 2), "🦀🦀");
        assert_eq!(short_id("", 7), "");
    }

    #[test]
    fn plurals_of_what_undeploy_removes() {
        assert_eq!(plural("container", 1), "container");
        assert_eq!(plural("container", 4), "containers");
        assert_eq!(plural("network", 0), "networks");
        assert_eq!(plural("private directory", 2), "private directories");
        assert_eq!(plural("Pod", 2), "Pods");
        assert_eq!(plural("Ingress", 2), "Ingresses");
        assert_eq!(plural("MPIJob", 3), "MPIJobs");
        assert_eq!(plural("Gateway", 2), "Gateways");
    }

    #[test]
    fn output_that_cannot_be_written_is_an_error() {
        // JSON object keys must be strings: a map keyed by a list cannot be written.
        let mut m: BTreeMap<Vec<u8>, u8> = BTreeMap::new();
        m.insert(vec![1], 1);
        let e = json(&m).unwrap_err();
        assert!(
            e.message.starts_with("cannot write the output as JSON"),
            "{e}"
        );
        assert_eq!(json(&[1]).unwrap(), "[\n  1\n]\n");
    }

    #[test]
    fn typos_find_their_name() {
        assert_eq!(did_you_mean("nativ", &["mpijob", "native"]), Some("native"));
        assert_eq!(did_you_mean("zzz", &["mpijob", "native"]), None);
    }
}
