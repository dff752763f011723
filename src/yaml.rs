//! YAML with positions: `hvdctl.yaml` is parsed into a `serde_json::Value` plus, for every
//! node, where it came from (file line:col, or the `--set` flag that wrote it) and, for plain
//! scalars, their exact source text. Typed deserialization then reports errors by path, and the
//! path finds the place to show the user.
//!
//! Plain scalars are resolved with the YAML 1.2 core schema (`yes` stays a string). A field that
//! wants a string gets the scalar's source text verbatim (`1.10` stays `"1.10"`), see
//! [`super::load`].

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A path like `resources.worker.limits.cpu`, `volumes[0].name` or `labels["a.b/c"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path(pub Vec<Seg>);

impl Path {
    pub fn child(&self, seg: Seg) -> Path {
        let mut p = self.0.clone();
        p.push(seg);
        Path(p)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn starts_with(&self, other: &Path) -> bool {
        self.0.starts_with(&other.0)
    }
}

fn plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{}]", serde_json::to_string(k).unwrap_or_default())?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Where a node came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// 1-based line and column in the file.
    File { line: usize, col: usize },
    /// A `--set KEY=VALUE` flag (the flag text as given).
    Flag(String),
}

/// A parsed document with positions.
#[derive(Debug, Clone, Default)]
pub struct Marked {
    pub value: Value,
    /// Origin of every node's value, and of every mapping key (under `keys`).
    pub origins: HashMap<Path, Origin>,
    pub key_origins: HashMap<Path, Origin>,
    /// Source text of plain (unquoted) scalars, for fields that want strings.
    pub plain_text: HashMap<Path, String>,
}

impl Marked {
    /// The closest recorded origin for `path` (walking up to parents).
    pub fn origin(&self, path: &Path) -> Option<&Origin> {
        let mut p = path.0.clone();
        loop {
            if let Some(o) = self.origins.get(&Path(p.clone())) {
                return Some(o);
            }
            p.pop()?;
        }
    }

    /// Drops every recorded fact about `path` and what lies below it.
    pub fn forget(&mut self, path: &Path) {
        self.origins.retain(|p, _| !p.starts_with(path));
        self.key_origins.retain(|p, _| !p.starts_with(path));
        self.plain_text.retain(|p, _| !p.starts_with(path));
    }
}

/// A parse failure with its 1-based position.
#[derive(Debug, Clone)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

fn at(m: Marker) -> Origin {
    Origin::File {
        line: m.line(),
        col: m.col() + 1,
    }
}

/// How far aliases may go. A document that expands aliases of aliases ("billion laughs")
/// is refused while it is read, before any copy is made: a few hundred bytes must not cost
/// gigabytes.
pub const MAX_ALIASES: usize = 100;
/// An alias of a value that itself holds aliases is one level; this many levels at most.
pub const MAX_ALIAS_DEPTH: usize = 3;
/// Nodes that all aliases of a document may add together.
pub const MAX_ALIAS_NODES: usize = 10_000;
/// Values that anchors (`&name`) may hold together: each anchored value is copied when it is
/// read, so anchors nested in anchors would copy the same values again and again.
pub const MAX_ANCHOR_NODES: usize = 10_000;
/// Mappings and lists nested at most this deep in a manifest (one is about 12 deep)...
pub const MAX_DEPTH: usize = 64;
/// ... and in a document read with positions (`hvdctl.yaml` is at most 4 deep), where every
/// value keeps its path.
pub const MAX_TRACKED_DEPTH: usize = 8;
/// Values in a document read with positions (`hvdctl.yaml`, a few hundred in practice):
/// every value keeps its path, so this bounds what reading it costs.
pub const MAX_TRACKED_NODES: usize = 10_000;

/// What a finished node holds: its number of nodes and how deep aliases go inside it.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    alias_depth: usize,
}

impl Size {
    fn add(&mut self, other: Size) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.alias_depth = self.alias_depth.max(other.alias_depth);
    }
}

enum Frame {
    Seq {
        path: Path,
        items: Vec<Value>,
        anchor: usize,
        size: Size,
    },
    Map {
        path: Path,
        map: Map<String, Value>,
        key: Option<(String, Marker)>,
        anchor: usize,
        size: Size,
    },
}

#[derive(Default)]
struct Builder {
    /// Record positions and source text (hvdctl.yaml); off for plain values (manifests).
    track: bool,
    /// Read `0644` as octal, as Kubernetes' YAML 1.1 reader does (manifests).
    legacy_octal: bool,
    stack: Vec<Frame>,
    done: Option<Value>,
    docs: usize,
    anchors: HashMap<usize, (Value, Size)>,
    /// Aliases met so far, and the nodes they added.
    aliases: usize,
    alias_nodes: usize,
    /// Values held by anchors so far, and values read (scalars, mappings, lists, aliases).
    anchor_nodes: usize,
    nodes: usize,
    marked: Marked,
    error: Option<ParseError>,
}

impl Builder {
    fn fail(&mut self, mark: Marker, message: String) {
        if self.error.is_none() {
            self.error = Some(ParseError {
                line: mark.line(),
                col: mark.col() + 1,
                message,
            });
        }
    }

    /// Whether the next node is a mapping key.
    fn expects_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    /// Path of the node that the next value will fill (only tracked builders keep paths).
    fn next_path(&self) -> Option<Path> {
        if !self.track {
            return None;
        }
        match self.stack.last() {
            None => Some(Path::default()),
            Some(Frame::Seq { path, items, .. }) => Some(path.child(Seg::Index(items.len()))),
            Some(Frame::Map {
                path,
                key: Some((k, _)),
                ..
            }) => Some(path.child(Seg::Key(k.clone()))),
            Some(Frame::Map { key: None, .. }) => None, // the next scalar is a key
        }
    }

    fn push_value(&mut self, v: Value, anchor: usize, size: Size, mark: Marker) {
        if anchor > 0 {
            // Checked before the copy is made.
            self.anchor_nodes = self.anchor_nodes.saturating_add(size.nodes);
            if self.anchor_nodes > MAX_ANCHOR_NODES {
                return self.fail(
                    mark,
                    format!("anchors (`&name`) hold more than {MAX_ANCHOR_NODES} values together"),
                );
            }
            self.anchors.insert(anchor, (v.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.done = Some(v),
            Some(Frame::Seq { items, size: s, .. }) => {
                s.add(size);
                items.push(v)
            }
            Some(Frame::Map {
                map,
                key,
                path,
                size: s,
                ..
            }) => match key.take() {
                Some((k, _)) => {
                    s.add(size);
                    map.insert(k, v);
                }
                None => {
                    // A value in key position: only scalars are allowed as keys.
                    let key_text = match v {
                        Value::String(s) => Some(s),
                        Value::Number(n) => Some(n.to_string()),
                        Value::Bool(b) => Some(b.to_string()),
                        _ => None,
                    };
                    match key_text {
                        Some(k) if map.contains_key(&k) => {
                            let p = path.child(Seg::Key(k.clone()));
                            self.fail(mark, format!("duplicate key `{p}`"));
                        }
                        Some(k) => {
                            if self.track {
                                let p = path.child(Seg::Key(k.clone()));
                                self.marked.key_origins.insert(p, at(mark));
                            }
                            *key = Some((k, mark));
                        }
                        None => self.fail(mark, "mapping keys must be plain strings".into()),
                    }
                }
            },
        }
    }
}

/// Resolves a plain scalar with the YAML 1.2 core schema.
pub fn resolve_plain(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let int = |digits: &str, radix: u32| i64::from_str_radix(digits, radix).ok();
    let parsed_int = if let Some(h) = s.strip_prefix("0x") {
        int(h, 16)
    } else if let Some(o) = s.strip_prefix("0o") {
        int(o, 8)
    } else if s
        .bytes()
        .enumerate()
        .all(|(i, b)| b.is_ascii_digit() || (i == 0 && (b == b'-' || b == b'+')))
        && s.bytes().any(|b| b.is_ascii_digit())
    {
        s.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(i) = parsed_int {
        return Value::from(i);
    }
    let float_re = |s: &str| {
        let b = s.strip_prefix(['-', '+']).unwrap_or(s);
        let (mant, exp) = match b.find(['e', 'E']) {
            Some(i) => (&b[..i], Some(&b[i + 1..])),
            None => (b, None),
        };
        let mant_ok = !mant.is_empty()
            && mant.bytes().filter(|&c| c == b'.').count() <= 1
            && mant.bytes().all(|c| c.is_ascii_digit() || c == b'.')
            && mant.bytes().any(|c| c.is_ascii_digit());
        let exp_ok = exp.is_none_or(|e| {
            let e = e.strip_prefix(['-', '+']).unwrap_or(e);
            !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit())
        });
        mant_ok && exp_ok
    };
    if float_re(s)
        && let Ok(f) = s.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(s.to_string())
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        if matches!(
            ev,
            Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
        ) {
            self.nodes += 1;
            if self.track && self.nodes > MAX_TRACKED_NODES {
                return self.fail(
                    mark,
                    format!(
                        "more than {MAX_TRACKED_NODES} values; an app file holds a few hundred"
                    ),
                );
            }
        }
        match ev {
            Event::DocumentStart => {
                self.docs += 1;
                if self.docs > 1 {
                    self.fail(
                        mark,
                        "expected one YAML document, found several (`---`)".into(),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let value = if tag.is_some() {
                    self.fail(mark, "YAML tags (`!tag`) are not supported here".into());
                    return;
                } else if style == TScalarStyle::Plain {
                    match legacy_octal(&text).filter(|_| self.legacy_octal) {
                        Some(n) => Value::from(n),
                        None => resolve_plain(&text),
                    }
                } else {
                    Value::String(text.clone())
                };
                if let Some(p) = self.next_path() {
                    self.marked.origins.insert(p.clone(), at(mark));
                    if style == TScalarStyle::Plain {
                        self.marked.plain_text.insert(p, text);
                    }
                }
                self.push_value(
                    value,
                    anchor,
                    Size {
                        nodes: 1,
                        alias_depth: 0,
                    },
                    mark,
                );
            }
            Event::Alias(id) => {
                let Some(size) = self.anchors.get(&id).map(|(_, s)| *s) else {
                    return self.fail(mark, "unknown alias".into());
                };
                // Checked before the copy is made.
                self.aliases += 1;
                self.alias_nodes = self.alias_nodes.saturating_add(size.nodes);
                let depth = size.alias_depth + 1;
                if self.aliases > MAX_ALIASES {
                    return self.fail(
                        mark,
                        format!("more than {MAX_ALIASES} aliases (`*name`) in one document"),
                    );
                }
                if depth > MAX_ALIAS_DEPTH {
                    return self.fail(
                        mark,
                        format!(
                            "aliases nested {depth} deep (an alias of a value holding aliases of values holding aliases…); at most {MAX_ALIAS_DEPTH} levels"
                        ),
                    );
                }
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return self.fail(
                        mark,
                        format!(
                            "aliases (`*name`) would expand to more than {MAX_ALIAS_NODES} values"
                        ),
                    );
                }
                let v = self.anchors[&id].0.clone();
                if let Some(p) = self.next_path() {
                    self.marked.origins.insert(p, at(mark));
                }
                self.push_value(
                    v,
                    0,
                    Size {
                        nodes: size.nodes,
                        alias_depth: depth,
                    },
                    mark,
                )
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.expects_key() {
                    self.fail(mark, "mapping keys must be plain strings".into());
                    return;
                }
                let most = if self.track {
                    MAX_TRACKED_DEPTH
                } else {
                    MAX_DEPTH
                };
                if self.stack.len() >= most {
                    self.fail(
                        mark,
                        format!("mappings and lists nested more than {most} deep"),
                    );
                    return;
                }
                let path = self.next_path().unwrap_or_default();
                if self.track {
                    self.marked.origins.insert(path.clone(), at(mark));
                }
                self.stack.push(if matches!(ev, Event::SequenceStart(..)) {
                    Frame::Seq {
                        path,
                        items: Vec::new(),
                        anchor,
                        size: Size::default(),
                    }
                } else {
                    Frame::Map {
                        path,
                        map: Map::new(),
                        key: None,
                        anchor,
                        size: Size::default(),
                    }
                });
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    items,
                    anchor,
                    mut size,
                    ..
                }) => {
                    size.nodes = size.nodes.saturating_add(1);
                    self.push_value(Value::Array(items), anchor, size, mark)
                }
                Some(Frame::Map {
                    map,
                    anchor,
                    mut size,
                    ..
                }) => {
                    size.nodes = size.nodes.saturating_add(1);
                    self.push_value(Value::Object(map), anchor, size, mark)
                }
                None => self.fail(mark, "unbalanced YAML".into()),
            },
            _ => {}
        }
    }
}

/// `0644`-style octal (YAML 1.1), as Kubernetes reads file modes in manifests.
fn legacy_octal(s: &str) -> Option<i64> {
    let digits = s
        .strip_prefix('0')
        .filter(|d| !d.is_empty() && d.bytes().all(|b| (b'0'..=b'7').contains(&b)))?;
    i64::from_str_radix(digits, 8).ok()
}

/// Parses one YAML document into a plain value (no positions), reading `0644` as octal the
/// way Kubernetes does: for rendered manifests.
pub fn parse_value(text: &str) -> Result<Value, ParseError> {
    let b = load(
        text,
        Builder {
            legacy_octal: true,
            ..Default::default()
        },
    )?;
    Ok(b.done.unwrap_or(Value::Null))
}

fn load(text: &str, mut b: Builder) -> Result<Builder, ParseError> {
    // A byte order mark starts the stream; it is not part of the first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser::new_from_str(text);
    // Event by event, so that reading stops at the first problem rather than going through
    // the rest of a file already refused.
    loop {
        let (ev, mark) = parser.next_token().map_err(|e| {
            let m = e.marker();
            ParseError {
                line: m.line(),
                col: m.col() + 1,
                message: e.info().to_string(),
            }
        })?;
        let end = ev == Event::StreamEnd;
        b.on_event(ev, mark);
        if end || b.error.is_some() {
            break;
        }
    }
    match b.error.take() {
        Some(e) => Err(e),
        None => Ok(b),
    }
}

/// Parses one YAML document with positions.
pub fn parse(text: &str) -> Result<Marked, ParseError> {
    let b = load(
        text,
        Builder {
            track: true,
            ..Default::default()
        },
    )?;
    let mut marked = b.marked;
    marked.value = b.done.unwrap_or(Value::Null);
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_schema_scalars() {
        assert_eq!(resolve_plain("8"), Value::from(8));
        assert_eq!(resolve_plain("-3"), Value::from(-3));
        assert_eq!(resolve_plain("0x10"), Value::from(16));
        assert_eq!(resolve_plain("1.5"), serde_json::json!(1.5));
        assert_eq!(resolve_plain("yes"), Value::from("yes"));
        assert_eq!(resolve_plain("true"), Value::from(true));
        assert_eq!(resolve_plain("~"), Value::Null);
        assert_eq!(resolve_plain("1.2.3"), Value::from("1.2.3"));
        assert_eq!(resolve_plain("500m"), Value::from("500m"));
        assert_eq!(resolve_plain("1e3"), serde_json::json!(1000.0));
    }

    #[test]
    fn positions_and_text() {
        let m = parse("name: a\nworkers: 2\nenv:\n  X: 1.10\nvolumes:\n- name: d\n").unwrap();
        let p = Path(vec![Seg::Key("env".into()), Seg::Key("X".into())]);
        assert_eq!(m.origins[&p], Origin::File { line: 4, col: 6 });
        assert_eq!(m.plain_text[&p], "1.10");
        assert_eq!(p.to_string(), "env.X");
        let v = Path(vec![
            Seg::Key("volumes".into()),
            Seg::Index(0),
            Seg::Key("name".into()),
        ]);
        assert_eq!(m.origins[&v], Origin::File { line: 6, col: 9 });
        assert_eq!(v.to_string(), "volumes[0].name");
    }

    #[test]
    fn duplicate_keys_and_multi_docs_are_errors() {
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "duplicate key `a`"));
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn manifest_values_read_octal_like_kubernetes() {
        let v = parse_value("mode: 0644\nport: 22\nname: \"0644\"\nzero: 0\n").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"mode": 420, "port": 22, "name": "0644", "zero": 0})
        );
        assert_eq!(
            parse("mode: 0644\n").unwrap().value["mode"],
            644,
            "hvdctl.yaml keeps YAML 1.2"
        );
    }

    #[test]
    fn anchors_are_copied() {
        let m = parse("a: &x {k: v}\nb: *x\n").unwrap();
        assert_eq!(m.value["b"]["k"], "v");
    }

    #[test]
    fn odd_keys_display_quoted() {
        let p = Path(vec![Seg::Key("labels".into()), Seg::Key("a.b/c".into())]);
        assert_eq!(p.to_string(), "labels[\"a.b/c\"]");
    }

    #[test]
    fn aliases_are_limited_before_they_are_copied() {
        // Depth: each level a list of aliases of the one before.
        let mut text = String::from("x0: &x0 [a, a]\n");
        for i in 1..=4 {
            text.push_str(&format!("x{i}: &x{i} [*x{p}, *x{p}]\n", p = i - 1));
        }
        let e = parse(&text).unwrap_err();
        assert_eq!((e.line, e.col), (5, 10), "{}", e.message);
        assert!(e.message.contains("nested 4 deep"), "{}", e.message);
        let three = text.lines().take(4).collect::<Vec<_>>().join("\n");
        assert!(parse(&three).is_ok(), "3 levels are fine");
        // Count.
        let many = format!("x: &x a\ny: [{}]\n", vec!["*x"; MAX_ALIASES + 1].join(", "));
        assert!(
            parse(&many)
                .unwrap_err()
                .message
                .contains("more than 100 aliases")
        );
        // Values added: 60 copies of 200 values.
        let wide = format!(
            "x: &x [{}]\ny: [{}]\n",
            vec!["a"; 199].join(", "),
            vec!["*x"; 60].join(", ")
        );
        let e = parse(&wide).unwrap_err();
        assert!(
            e.message.contains("more than 10000 values"),
            "{}",
            e.message
        );
        // Manifests are read with the same limits.
        assert!(parse_value(&wide).is_err());
    }

    #[test]
    fn nesting_is_limited_and_a_bom_is_skipped() {
        let nested = |n: usize| format!("x: {}{}\n", "[".repeat(n), "]".repeat(n));
        let e = parse(&nested(MAX_TRACKED_DEPTH)).unwrap_err();
        assert!(
            e.message.contains("nested more than 8 deep"),
            "{}",
            e.message
        );
        assert!(parse(&nested(MAX_TRACKED_DEPTH - 1)).is_ok());
        assert!(
            parse_value(&nested(MAX_DEPTH - 1)).is_ok(),
            "manifests go deeper"
        );
        assert!(parse_value(&nested(MAX_DEPTH)).is_err());
        let many = format!("x: [{}]\n", vec!["a"; MAX_TRACKED_NODES].join(", "));
        let e = parse(&many).unwrap_err();
        assert!(
            e.message.contains("more than 10000 values"),
            "{}",
            e.message
        );
        let mut anchors = String::new();
        for i in 0..20 {
            anchors.push_str(&format!("x{i}: &x{i} [{}]\n", vec!["a"; 600].join(", ")));
        }
        let e = parse_value(&anchors).unwrap_err();
        assert!(
            e.message.contains("anchors (`&name`) hold more than 10000"),
            "{}",
            e.message
        );
        let m = parse("\u{feff}name: a\n").unwrap();
        assert_eq!(m.value["name"], "a");
    }
}
