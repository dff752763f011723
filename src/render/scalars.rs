//! Whole scalars, not quoted fragments: `name: {{job.name}}-data` renders as
//! `name: "mnist-ab12c-data"`.
//!
//! While a YAML template renders, every `{{value}}` is written as a placeholder
//! (`U+E000 <n> U+E001`: private-use characters that a YAML plain scalar may hold, that
//! [`super::quote`] always escapes and that templates may not contain). The rendered text is
//! then parsed as YAML, so its structure comes from the template alone. Every scalar holding a
//! placeholder — plain, single- or double-quoted, literal or folded block, key or value — is
//! replaced as a whole by one double-quoted scalar: the scalar's own text as YAML reads it, with
//! each placeholder replaced by its value. A value therefore never adds a key, an item or a
//! document, whatever it holds. A placeholder in a comment is written quoted; anywhere else
//! (a tag, an anchor) it is an error.

use super::quote;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

pub use super::quote::{CLOSE, OPEN};

/// The placeholder of value number `i`.
pub fn placeholder(i: usize) -> String {
    format!("{OPEN}{i}{CLOSE}")
}

/// A problem with the rendered text, placed by its rendered line and column (1-based). It
/// never quotes a value: values may be secrets.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// One parser event: where it starts, and for a scalar its style and parsed text.
struct Ev {
    mark: Marker,
    scalar: Option<(TScalarStyle, String)>,
}

#[derive(Default)]
struct Collect {
    events: Vec<Ev>,
}

impl MarkedEventReceiver for Collect {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let scalar = match ev {
            Event::Scalar(text, style, _, _) => Some((style, text)),
            _ => None,
        };
        self.events.push(Ev { mark, scalar });
    }
}

/// Replaces every placeholder of `text` (rendered with [`placeholder`]s for `values`) as the
/// module documentation says.
pub fn merge(text: &str, values: &[String]) -> Result<String, MergeError> {
    if !text.contains(OPEN) {
        return Ok(text.to_string());
    }
    let mut collect = Collect::default();
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut collect, true) {
        let m = e.marker();
        return Err(MergeError {
            line: m.line(),
            col: m.col() + 1,
            message: format!("not valid YAML: {}", e.info()),
        });
    }
    // Markers are placed by line and column (characters): the parser's own index counts some
    // multi-byte characters as one and some (in block scalars) as several.
    let line_starts: Vec<usize> = [0]
        .into_iter()
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let byte_at = |m: &Marker| {
        let Some(&begin) = line_starts.get(m.line().saturating_sub(1)) else {
            return text.len();
        };
        let line = &text[begin..];
        begin
            + line
                .char_indices()
                .nth(m.col())
                .map_or(line.len(), |(i, _)| i)
    };
    // Where an event's node starts in the text: past its properties, and for a block scalar
    // (which the parser marks at its content) at its header.
    let start_of = |ev: &Ev| match &ev.scalar {
        Some((TScalarStyle::Literal | TScalarStyle::Folded, _)) => {
            block_header(text, byte_at(&ev.mark))
        }
        _ => Some(skip_properties(text, byte_at(&ev.mark))),
    };
    let at = |m: &Marker| MergeError {
        line: m.line(),
        col: m.col() + 1,
        message: String::new(),
    };

    // (start, end, replacement), in text order.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for (i, ev) in collect.events.iter().enumerate() {
        let Some((style, parsed)) = &ev.scalar else {
            continue;
        };
        if !parsed.contains(OPEN) {
            continue;
        }
        let start = start_of(ev).ok_or_else(|| MergeError {
            message: "cannot find the header (`|` or `>`) of the block scalar that holds a value"
                .into(),
            ..at(&ev.mark)
        })?;
        let end = match style {
            TScalarStyle::Plain => plain_end(text, start, parsed),
            TScalarStyle::SingleQuoted => quoted_end(text, start, b'\''),
            TScalarStyle::DoubleQuoted => quoted_end(text, start, b'"'),
            TScalarStyle::Literal | TScalarStyle::Folded => collect
                .events
                .get(i + 1)
                .and_then(start_of)
                .map(|next| line_start(text, next).max(start)),
        };
        let Some(end) = end else {
            return Err(MergeError {
                message: "cannot find the end of the scalar that holds a value".into(),
                ..at(&ev.mark)
            });
        };
        let source = &text[start..end];
        if !source.contains(OPEN) {
            // Written by `{{json}}` (escaped as `\ue000`): data, not a placeholder.
            continue;
        }
        let whole = match style {
            // The only style with escapes: decoded piece by piece around the placeholders,
            // so an escaped U+E000 stays a character of the data.
            TScalarStyle::DoubleQuoted => decode_double(&source[1..source.len() - 1], values),
            _ => substitute(parsed, values),
        };
        let whole = whole.ok_or_else(|| MergeError {
            message: "a placeholder of hvdctl's is damaged".into(),
            ..at(&ev.mark)
        })?;
        let mut replacement = quote::quote(&whole);
        if matches!(style, TScalarStyle::Literal | TScalarStyle::Folded)
            && text[start..end].ends_with('\n')
        {
            // A block scalar ends at a line break; the next line starts after it.
            replacement.push('\n');
        }
        if edits.last().is_some_and(|(_, e, _)| *e > start) {
            return Err(MergeError {
                message: "overlapping scalars".into(),
                ..at(&ev.mark)
            });
        }
        edits.push((start, end, replacement));
    }

    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (start, end, replacement) in &edits {
        out.push_str(&outside_scalars(text, pos, *start, values)?);
        out.push_str(replacement);
        pos = *end;
    }
    out.push_str(&outside_scalars(text, pos, text.len(), values)?);
    Ok(out)
}

/// `text[from..to]`, which holds no scalar with a placeholder: a placeholder there must be in
/// a comment (written quoted, on its one line); anywhere else it is an error.
fn outside_scalars(
    text: &str,
    from: usize,
    to: usize,
    values: &[String],
) -> Result<String, MergeError> {
    let part = &text[from..to];
    if !part.contains(OPEN) {
        return Ok(part.to_string());
    }
    let mut out = String::with_capacity(part.len());
    let mut rest = from;
    while let Some(i) = text[rest..to].find(OPEN) {
        let p = rest + i;
        let line_begin = line_start(text, p).max(from);
        let in_comment = text[line_begin..p]
            .char_indices()
            .any(|(j, c)| c == '#' && (j == 0 || text[..line_begin + j].ends_with([' ', '\t'])));
        let line = text[..p].matches('\n').count() + 1;
        let col = text[line_start(text, p)..p].chars().count() + 1;
        let close = text[p..to].find(CLOSE).map(|j| p + j);
        let value = close.and_then(|c| {
            let n: usize = text[p + OPEN.len_utf8()..c].parse().ok()?;
            values.get(n)
        });
        match (in_comment, close, value) {
            (true, Some(c), Some(v)) => {
                out.push_str(&text[rest..p]);
                out.push_str(&quote::quote(v));
                rest = c + CLOSE.len_utf8();
            }
            _ => {
                return Err(MergeError {
                    line,
                    col,
                    message: "a {{value}} is used outside a YAML scalar (in a tag or an anchor?); values may be keys, values and list items, or parts of them".into(),
                });
            }
        }
    }
    out.push_str(&text[rest..to]);
    Ok(out)
}

/// `parsed` with each placeholder replaced by its value; `None` if one is malformed.
fn substitute(parsed: &str, values: &[String]) -> Option<String> {
    let mut out = String::with_capacity(parsed.len());
    let mut rest = parsed;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len_utf8()..];
        let end = after.find(CLOSE)?;
        let n: usize = after[..end].parse().ok()?;
        out.push_str(values.get(n)?);
        rest = &after[end + CLOSE.len_utf8()..];
    }
    if rest.contains(CLOSE) {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

/// The text of a double-quoted scalar whose source between the quotes is `inner`: the pieces
/// between placeholders decoded as YAML reads them, the placeholders replaced by their values.
fn decode_double(inner: &str, values: &[String]) -> Option<String> {
    let decode = |piece: &str| -> Option<String> {
        if piece.is_empty() {
            return Some(String::new());
        }
        // Indented continuation lines: a `---` at the start of one is text, not a document
        // marker (leading blanks of continuation lines are not part of the value).
        let doc = format!("\"{}\"", piece.replace('\n', "\n "));
        match crate::yaml::parse_value(&doc).ok()? {
            serde_json::Value::String(s) => Some(s),
            _ => None,
        }
    };
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&decode(&rest[..i])?);
        let after = &rest[i + OPEN.len_utf8()..];
        let end = after.find(CLOSE)?;
        let n: usize = after[..end].parse().ok()?;
        out.push_str(values.get(n)?);
        rest = &after[end + CLOSE.len_utf8()..];
    }
    out.push_str(&decode(rest)?);
    Some(out)
}

/// The byte offset where the line holding `pos` starts.
fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map_or(0, |i| i + 1)
}

/// Skips a node's properties (`&anchor`, `!tag`) and the blanks after them.
fn skip_properties(text: &str, mut pos: usize) -> usize {
    while text[pos..].starts_with(['&', '!']) {
        let rest = &text[pos..];
        pos += rest.find(char::is_whitespace).unwrap_or(rest.len());
        let rest = &text[pos..];
        pos += rest.len() - rest.trim_start().len();
    }
    pos
}

/// The block scalar header (`|`, `>`, with indentation and chomping indicators) whose content
/// starts at `content`: on the same line before it, or on the closest non-blank line above.
fn block_header(text: &str, content: usize) -> Option<usize> {
    let mut end = content;
    loop {
        let begin = line_start(text, end);
        let line = &text[begin..end];
        if !line.trim().is_empty() {
            return header_in(line).map(|i| begin + i);
        }
        if begin == 0 {
            return None;
        }
        end = begin - 1;
    }
}

/// The position in `line` of an indicator that only indicator characters, blanks and a
/// comment follow.
fn header_in(line: &str) -> Option<usize> {
    line.char_indices()
        .filter(|(_, c)| matches!(c, '|' | '>'))
        .map(|(i, _)| i)
        .find(|&i| {
            let rest = line[i + 1..]
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
            let comment = rest.trim_start_matches([' ', '\t', '\r']);
            comment.is_empty() || (comment.starts_with('#') && comment.len() < rest.len())
        })
}

/// End of the quoted scalar starting at `start` (its opening quote).
fn quoted_end(text: &str, start: usize, quote: u8) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(start) != Some(&quote) {
        return None;
    }
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if quote == b'"' => i += 2,
            c if c == quote => {
                if quote == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    i += 2;
                } else {
                    return Some(i + 1);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// End of the plain scalar starting at `start` whose parsed text is `parsed`: its source is
/// the text itself on one line, or (folded over lines) the same words with any run of blanks
/// and line breaks between them.
fn plain_end(text: &str, start: usize, parsed: &str) -> Option<usize> {
    let src = &text[start..];
    if src.starts_with(parsed) {
        return Some(start + parsed.len());
    }
    let mut s = src.char_indices().peekable();
    let mut end = 0;
    let mut want = parsed.chars().peekable();
    while let Some(c) = want.next() {
        if c.is_whitespace() {
            while want.peek().is_some_and(|c| c.is_whitespace()) {
                want.next();
            }
            let mut blanks = 0;
            while s.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                s.next();
                blanks += 1;
            }
            if blanks == 0 {
                return None;
            }
        } else {
            let (i, got) = s.next()?;
            if got != c {
                return None;
            }
            end = i + got.len_utf8();
        }
    }
    Some(start + end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `template` where `$0`, `$1`, ... stand for the placeholders of `values`.
    fn merged(template: &str, values: &[&str]) -> Result<String, MergeError> {
        let mut text = template.to_string();
        for i in (0..values.len()).rev() {
            text = text.replace(&format!("${i}"), &placeholder(i));
        }
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        merge(&text, &values)
    }

    fn ok(template: &str, values: &[&str]) -> String {
        merged(template, values).unwrap_or_else(|e| panic!("{template:?}: {e:?}"))
    }

    #[test]
    fn a_scalar_made_of_values_and_text_is_quoted_whole() {
        assert_eq!(
            ok("name: $0-data\n", &["mnist-ab12c"]),
            "name: \"mnist-ab12c-data\"\n"
        );
        assert_eq!(ok("name: $0\n", &["x"]), "name: \"x\"\n");
        assert_eq!(
            ok("a: pre-$0-$1.x # c\n", &["1", "2"]),
            "a: \"pre-1-2.x\" # c\n"
        );
        assert_eq!(
            ok("- --flag=$0\n- $1\n", &["v", "w"]),
            "- \"--flag=v\"\n- \"w\"\n"
        );
        assert_eq!(
            ok("$0/key: v\n", &["example.com"]),
            "\"example.com/key\": v\n"
        );
        assert_eq!(
            ok("c: [a, $0-b, {k: $1}]\n", &["x", "y"]),
            "c: [a, \"x-b\", {k: \"y\"}]\n"
        );
        // Quoted by the author: the scalar's text as YAML reads it, requoted.
        assert_eq!(ok("a: \"$0-data\"\n", &["v"]), "a: \"v-data\"\n");
        assert_eq!(ok("a: 'it''s $0'\n", &["v"]), "a: \"it's v\"\n");
        assert_eq!(ok("a: \"t\\t$0\"\n", &["v"]), "a: \"t\\tv\"\n");
        assert_eq!(
            ok("a: \"one  $0\n  --- two\\\n  three\"\n", &["v"]),
            "a: \"one  v --- twothree\"\n"
        );
        // An escaped U+E000 (as `{{json}}` writes one) is data, never a placeholder.
        assert_eq!(
            ok(
                "a: [\"\\ue0000\\ue001\", $0]\nb: \"\\ue0000\\ue001$0\"\n",
                &["v"]
            ),
            "a: [\"\\ue0000\\ue001\", \"v\"]\nb: \"\\ue0000\\ue001v\"\n"
        );
        // Untouched elsewhere.
        assert_eq!(ok("a: 1\nb: 'x'\n", &[]), "a: 1\nb: 'x'\n");
    }

    #[test]
    fn values_stay_data() {
        for v in [
            "a\nhostNetwork: true",
            "\"\nb: 1",
            "x' \n- y",
            "#",
            "a: b",
            "{",
            "*alias",
            "\n---\nkind: Pod",
            "\u{2028}z",
        ] {
            let out = ok("k: $0-data\nl: [$0]\n", &[v]);
            let parsed: serde_json::Value = serde_norway::from_str(&out).unwrap();
            assert_eq!(
                parsed,
                serde_json::json!({"k": format!("{v}-data"), "l": [v]}),
                "{v:?}: {out}"
            );
        }
    }

    #[test]
    fn block_scalars_become_one_quoted_scalar() {
        let out = ok(
            "a:\n  script: |\n    echo $0\n    done\n  next: 1\nb: 2\n",
            &["hi\nthere"],
        );
        assert_eq!(
            out,
            "a:\n  script: \"echo hi\\nthere\\ndone\\n\"\n  next: 1\nb: 2\n"
        );
        let out = ok("- >-\n  folded $0\n  text\n- last\n", &["v"]);
        assert_eq!(out, "- \"folded v text\"\n- last\n");
        let out = ok("k: |\n  $0\n", &["end"]);
        assert_eq!(out, "k: \"end\\n\"\n");
        // Headers with indicators and comments, blank lines before the content.
        let out = ok("\"a|b\": |2- # x | y\n\n    $0\nc: 1\n", &["v"]);
        assert_eq!(out, "\"a|b\": \"\\n  v\"\nc: 1\n");
        let out = ok("k: |\n  !x &y $0\n", &["v"]);
        assert_eq!(out, "k: \"!x &y v\\n\"\n");
        let out = ok("- |\n  $0\n- >+\n  $1\n\n", &["v", "w"]);
        assert_eq!(out, "- \"v\\n\"\n- \"w\\n\\n\"\n");
    }

    #[test]
    fn multi_line_plain_scalars_and_documents() {
        let out = ok("a: one $0\n  two\nb: x\n---\nc: $1\n", &["v", "w"]);
        assert_eq!(out, "a: \"one v two\"\nb: x\n---\nc: \"w\"\n");
    }

    #[test]
    fn comments_get_quoted_values_and_other_places_are_errors() {
        assert_eq!(
            ok("a: 1 # for $0\n", &["x\ny: 2"]),
            "a: 1 # for \"x\\ny: 2\"\n"
        );
        let e = merged("a: &$0 x\n", &["t"]).unwrap_err();
        assert_eq!((e.line, e.col), (1, 5), "{e:?}");
        assert!(e.message.contains("outside a YAML scalar"), "{e:?}");
        assert!(merged("a: !$0 x\n", &["t"]).is_err());
        let e = merged("a: $0\nb: [x\n", &["secret"]).unwrap_err();
        assert!(e.message.starts_with("not valid YAML"), "{e:?}");
        assert!(!e.message.contains("secret"));
    }
}
