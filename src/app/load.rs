//! Loading `hvdctl.yaml` + `--set` into a validated [`App`], with every error pointing at
//! `file:line:col` or at the flag that caused it.

use super::set::{self, SetFlag};
use super::spec::App;
use super::validate;
use crate::error::{Error, Result};
use crate::yaml::{self, Marked, Origin, Path, Seg};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path as FsPath, PathBuf};

/// The app file's name inside an app directory.
pub const APP_FILE: &str = "hvdctl.yaml";

/// A loaded, validated app and where it lives.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub app: App,
    /// The app directory (`-C`), as given.
    pub dir: PathBuf,
    /// Where each key came from (its line in the file, or a `--set` flag): for the errors
    /// found after loading, by [`Loaded::locate`].
    places: Marked,
    /// The app file's name as errors give it.
    file: String,
}

impl Loaded {
    /// `e` with its place first when it is about one of the app's keys
    /// ([`Error::at_key`]): `hvdctl.yaml:LINE:COL: …` or `--set FLAG: …`, and where the
    /// backend that refused it was chosen (`--backend`, the file's `backend:` or the default).
    /// Any other error is returned as it is.
    pub fn locate(&self, mut e: Error, backend_flag: Option<crate::backend::Backend>) -> Error {
        let Some(key) = e.key.take() else {
            return e;
        };
        let (at, _) = locate(&self.places, &self.file, &key, false);
        let backend = match backend_flag {
            Some(b) => format!("backend {b}, from --backend"),
            None => {
                let name = self.app.backend.as_str();
                let path = Path(vec![Seg::Key("backend".into())]);
                if self.places.origins.contains_key(&path) {
                    let (at, _) = locate(&self.places, &self.file, &path, false);
                    format!("backend {name}, from {at}")
                } else {
                    format!("backend {name}, the default")
                }
            }
        };
        e.message = format!("{at}: {} ({backend})", e.message);
        e
    }
}

/// Reads `<dir>/hvdctl.yaml`, applies `--set` flags, checks types and values. Every problem
/// is reported (not only the first), each with its place.
pub fn load(dir: &FsPath, sets: &[String]) -> Result<Loaded> {
    let file = dir.join(APP_FILE);
    let bytes = read_app_file(dir, &file)?;
    let name = file.display().to_string();
    let (app, mut places) = from_bytes(&bytes, &name, sets)?;
    places.value = Value::Null;
    places.plain_text = HashMap::new();
    Ok(Loaded {
        app,
        dir: dir.to_path_buf(),
        places,
        file: name,
    })
}

/// The app file's bytes (named `file` in errors) with the `--set` flags as given: the app and
/// where each of its keys came from. [`load`] after reading the file; a fuzz target's entry.
pub fn from_bytes(bytes: &[u8], file: &str, sets: &[String]) -> Result<(App, Marked)> {
    let text = as_text(bytes, file)?;
    let mut found = Vec::new();
    let mut flags = Vec::new();
    for s in sets {
        match set::parse(s) {
            Ok(f) => flags.push(f),
            Err(e) => found.push(Found::flag(s, format!("--set {s}: {e}"))),
        }
    }
    check_text(text, file, &flags, sets, found)
}

/// The largest app file read. A real one is a few KiB; anything near this is not an app file
/// (or is an attempt to make the reader spend memory), refused before it is parsed.
pub const MAX_APP_FILE: u64 = crate::files::APP_FILE.max;

/// The bytes of the app file, refused when missing, not a regular file, or larger than
/// [`MAX_APP_FILE`] (read no further than that), through [`crate::files`].
fn read_app_file(dir: &FsPath, file: &FsPath) -> Result<Vec<u8>> {
    if !dir.as_os_str().is_empty() && !dir.is_dir() {
        return Err(missing_dir(dir));
    }
    match crate::files::read(file, crate::files::APP_FILE) {
        Ok(bytes) => Ok(bytes),
        Err(crate::files::Refused::Missing) => Err(Error::input(format!(
            "no {APP_FILE} in {}",
            display_dir(dir)
        ))
        .hint("run `hvdctl init` to create an app, or pass -C DIR to point at one")),
        Err(r) => Err(r.input_error(file, crate::files::APP_FILE)),
    }
}

/// The error for an app directory (`-C`) that is not there.
pub fn missing_dir(dir: &FsPath) -> Error {
    if dir.exists() {
        Error::input(format!("-C {}: not a directory", dir.display()))
    } else {
        Error::input(format!("-C {}: no such directory", dir.display()))
            .hint("pass the directory holding hvdctl.yaml (or create one with `hvdctl init DIR`)")
    }
}

/// Whether YAML allows `c` in a document (its `c-printable` set: tab, line breaks and the
/// printable characters; no other control character).
fn yaml_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

/// `bytes` as YAML text: UTF-8 without control characters. A file that is not names the
/// first offending byte (offset, line and column).
pub fn as_text<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str> {
    let place = |offset: usize| {
        let before = &bytes[..offset];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let col = offset
            - before
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        format!("byte {offset} (line {line}, column {col})")
    };
    let hint = "an app file is UTF-8 YAML text; see docs/config.md for the format";
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        Error::input(format!(
            "{file}: not text (YAML): {} is 0x{:02x}, not UTF-8",
            place(at),
            bytes[at]
        ))
        .hint(hint)
    })?;
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| !yaml_printable(c)) {
        let what = if c.is_control() {
            format!("0x{:02x}, a control character", c as u32)
        } else {
            format!("U+{:04X}, a character YAML does not allow", c as u32)
        };
        return Err(
            Error::input(format!("{file}: not text (YAML): {} is {what}", place(at))).hint(hint),
        );
    }
    Ok(text)
}

fn display_dir(dir: &FsPath) -> String {
    if dir.as_os_str().is_empty() || dir == FsPath::new(".") {
        "the current directory".into()
    } else {
        dir.display().to_string()
    }
}

/// At most this many problems are listed; a file with more is not worth reading further.
const MAX_PROBLEMS: usize = 50;

/// Where a problem is, for listing problems in order: the file's in file order, then the
/// flags' in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    File(usize, usize),
    Flag(String),
}

/// One problem, with its place first in `message` (`file:line:col: ...` or `--set FLAG: ...`).
struct Found {
    place: Place,
    message: String,
    hint: Option<String>,
}

impl Found {
    fn flag(flag: &str, message: String) -> Found {
        Found {
            place: Place::Flag(flag.to_string()),
            message,
            hint: None,
        }
    }
}

/// One error holding every problem: a single one keeps its hint apart, several are listed one
/// per line, each followed by its own hint. `sets` (the flags as given) orders flag problems.
fn combine(mut found: Vec<Found>, sets: &[String]) -> Error {
    // Each flag's place looked up once (10,000 flags: no scan of the list per problem).
    let mut order: HashMap<&str, usize> = HashMap::with_capacity(sets.len());
    for (i, s) in sets.iter().enumerate() {
        order.entry(s.as_str()).or_insert(i);
    }
    found.sort_by_key(|f| match &f.place {
        Place::File(line, col) => (0, *line, *col),
        Place::Flag(flag) => (1, order.get(flag.as_str()).copied().unwrap_or(0), 0),
    });
    found.truncate(MAX_PROBLEMS);
    if found.len() == 1 {
        let f = found.remove(0);
        let e = Error::input(f.message);
        return match f.hint {
            Some(h) => e.hint(h),
            None => e,
        };
    }
    let lines: Vec<String> = found
        .into_iter()
        .map(|f| match f.hint {
            Some(h) => format!("{}\n  hint: {h}", f.message),
            None => f.message,
        })
        .collect();
    Error::input(lines.join("\n"))
}

/// Parses, overrides, deserializes and validates an app from text. `file` names it in errors.
pub fn from_text(text: &str, file: &str, flags: &[SetFlag]) -> Result<App> {
    let sets: Vec<String> = flags.iter().map(|f| f.flag.clone()).collect();
    check_text(text, file, flags, &sets, Vec::new()).map(|(app, _)| app)
}

/// `sets` are all `--set` flags as given (some may have failed to parse), for ordering.
fn check_text(
    text: &str,
    file: &str,
    flags: &[SetFlag],
    sets: &[String],
    mut found: Vec<Found>,
) -> Result<(App, Marked)> {
    let mut marked = match yaml::parse(text) {
        Ok(m) => m,
        Err(e) => {
            found.push(Found {
                place: Place::File(e.line, e.col),
                message: format!("{file}:{}:{}: invalid YAML: {}", e.line, e.col, e.message),
                hint: None,
            });
            return Err(combine(found, sets));
        }
    };
    if !marked.value.is_object() {
        let what = if marked.value.is_null() {
            "is empty"
        } else {
            "must be a mapping of keys to values"
        };
        found.push(Found {
            place: Place::File(0, 0),
            message: format!("{file}: the app file {what}"),
            hint: Some("see `hvdctl init --help` or docs/config.md for the format".into()),
        });
        return Err(combine(found, sets));
    }
    for f in flags {
        // A flag that cannot be applied leaves the document as it was (it is checked before
        // anything is written): the nodes it made on the way would otherwise be reported as
        // problems of the file. Each flag costs the length of its path and the size of what
        // it replaces, never the document's size: 10,000 flags are linear.
        if let Err(e) = apply_set(&mut marked, f) {
            found.push(Found::flag(&f.flag, e.message));
        }
    }
    let mut repaired = Vec::new();
    let app = deserialize(&mut marked, file, &mut found, &mut repaired);
    if let Some(app) = &app {
        // A repaired node holds a default now: what is checked against it would mislead.
        let overlaps = |p: &Path| {
            repaired
                .iter()
                .any(|r| p.starts_with(r) || r.starts_with(p))
        };
        let mut problems = validate::check(app);
        problems.extend(backend_problems(app));
        for p in problems {
            if !overlaps(&p.path) {
                let (at, place) = locate(&marked, file, &p.path, false);
                found.push(Found {
                    place,
                    message: format!("{at}: {}: {}", p.path, p.message),
                    hint: p.hint,
                });
            }
        }
    }
    match app {
        Some(app) if found.is_empty() => Ok((app, marked)),
        _ => {
            found.truncate(MAX_PROBLEMS);
            Err(combine(found, sets))
        }
    }
}

/// What only the backend the app names can tell: whether the name answers to one, and how
/// long the app's name may be for that backend's pod names. (Loading sits above the backends;
/// the app's own checks do not know them.)
fn backend_problems(app: &App) -> Vec<validate::Problem> {
    match app.backend.as_str().parse::<crate::backend::Backend>() {
        Ok(b) => {
            let limit = b.max_app_name_len(validate::max_worker_index(app));
            validate::name_length_problem(app, limit)
                .into_iter()
                .collect()
        }
        Err(e) => vec![validate::Problem {
            path: Path(vec![Seg::Key("backend".into())]),
            message: e.message,
            hint: None,
        }],
    }
}

/// Where `path` came from, as `file:line:col` or `--set FLAG`, and as a [`Place`].
fn locate(marked: &Marked, file: &str, path: &Path, key: bool) -> (String, Place) {
    let origin = if key {
        marked.key_origins.get(path).or_else(|| marked.origin(path))
    } else {
        marked.origin(path)
    };
    match origin {
        Some(Origin::File { line, col }) => {
            (format!("{file}:{line}:{col}"), Place::File(*line, *col))
        }
        Some(Origin::Flag(flag)) => (format!("--set {flag}"), Place::Flag(flag.clone())),
        None => (file.to_string(), Place::File(0, 0)),
    }
}

/// Whether `--set` flag `f` can be written: the same walk as [`apply_set`], reading only.
fn check_set(value: &Value, f: &SetFlag) -> crate::Result<()> {
    let err = |m: String| crate::Error::input(format!("--set {}: {m}", f.flag));
    // `None`: a node the flag would create (null until then).
    let mut node = Some(value);
    let mut walked = Path::default();
    for seg in &f.path.0 {
        walked = walked.child(seg.clone());
        node = match (seg, node) {
            (Seg::Key(k), Some(Value::Object(map))) => map.get(k),
            (Seg::Key(_), None | Some(Value::Null)) => None,
            (Seg::Index(i), Some(Value::Array(items))) => {
                let len = items.len();
                if *i > len {
                    return Err(err(format!(
                        "`{walked}` is past the end of the list ({len} items; use [{len}] to append)"
                    )));
                }
                items.get(*i)
            }
            (Seg::Index(i), None | Some(Value::Null)) if *i > 0 => {
                return Err(err(format!(
                    "`{walked}` is past the end of the list (0 items; use [0] to append)"
                )));
            }
            (Seg::Index(_), None | Some(Value::Null)) => None,
            (Seg::Key(_), _) => {
                return Err(err(format!("`{walked}`: its parent is not a mapping")));
            }
            (Seg::Index(_), _) => return Err(err(format!("`{walked}`: its parent is not a list"))),
        };
    }
    Ok(())
}

/// Writes a `--set` value (as text) at its path, creating mappings on the way. Every node the
/// flag creates is attributed to it, so problems found below it name the flag. A flag that
/// cannot be written ([`check_set`]) changes nothing.
fn apply_set(marked: &mut Marked, f: &SetFlag) -> crate::Result<()> {
    check_set(&marked.value, f)?;
    let mut node = &mut marked.value;
    let mut walked = Path::default();
    let mut created = Vec::new();
    for seg in &f.path.0 {
        walked = walked.child(seg.clone());
        node = match (seg, node) {
            (Seg::Key(k), Value::Object(map)) => {
                if !map.contains_key(k) {
                    created.push(walked.clone());
                }
                map.entry(k.clone()).or_insert(Value::Null)
            }
            (Seg::Key(k), n @ Value::Null) => {
                created.push(walked.clone());
                *n = Value::Object(Default::default());
                n.as_object_mut()
                    .expect("just made")
                    .entry(k.clone())
                    .or_insert(Value::Null)
            }
            (Seg::Index(i), Value::Array(items)) => {
                if *i == items.len() {
                    created.push(walked.clone());
                    items.push(Value::Null);
                }
                &mut items[*i]
            }
            (Seg::Index(_), n @ Value::Null) => {
                created.push(walked.clone());
                *n = Value::Array(vec![Value::Null]);
                &mut n.as_array_mut().expect("just made")[0]
            }
            _ => unreachable!("check_set refuses this walk"),
        };
    }
    let replaced = std::mem::replace(node, Value::String(f.value.clone()));
    forget_below(marked, &f.path, &replaced);
    for p in created {
        marked
            .origins
            .entry(p)
            .or_insert_with(|| Origin::Flag(f.flag.clone()));
    }
    marked
        .origins
        .insert(f.path.clone(), Origin::Flag(f.flag.clone()));
    Ok(())
}

/// Drops what was recorded about `path` and every node of `old`, the value that was there:
/// the cost of what is replaced, not of the document ([`Marked::forget`] looks at every
/// node).
fn forget_below(marked: &mut Marked, path: &Path, old: &Value) {
    marked.origins.remove(path);
    marked.key_origins.remove(path);
    marked.plain_text.remove(path);
    match old {
        Value::Object(map) => {
            for (k, v) in map {
                forget_below(marked, &path.child(Seg::Key(k.clone())), v);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                forget_below(marked, &path.child(Seg::Index(i)), v);
            }
        }
        _ => {}
    }
}

fn node_at<'a>(v: &'a mut Value, path: &Path) -> Option<&'a mut Value> {
    let mut node = v;
    for seg in &path.0 {
        node = match seg {
            Seg::Key(k) => node.get_mut(k.as_str())?,
            Seg::Index(i) => node.get_mut(*i)?,
        };
    }
    Some(node)
}

fn to_path(p: &serde_path_to_error::Path) -> Path {
    use serde_path_to_error::Segment;
    Path(
        p.iter()
            .filter_map(|s| match s {
                Segment::Seq { index } => Some(Seg::Index(*index)),
                Segment::Map { key } => Some(Seg::Key(key.clone())),
                Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
                Segment::Unknown => None,
            })
            .collect(),
    )
}

/// The field named by serde's "unknown field `x`" or "missing field `x`".
fn field_in(msg: &str, prefix: &str) -> Option<String> {
    let rest = msg.strip_prefix(prefix)?;
    Some(rest.split('`').next().unwrap_or_default().to_string())
}

/// The path of the unknown key `field` reported at `path` (which may or may not end with it).
fn unknown_key_path(path: &Path, field: &str) -> Path {
    if path.0.last() == Some(&Seg::Key(field.to_string())) {
        path.clone()
    } else {
        path.child(Seg::Key(field.to_string()))
    }
}

/// Removes the offending key so deserialization can go on and find the next problem (the
/// field's default takes its place). Returns the removed path, or `None` when there is
/// nothing sensible to remove (a missing key, an item of a list).
fn repair(marked: &mut Marked, path: &Path, msg: &str) -> Option<Path> {
    if msg.starts_with("missing field `") {
        return None;
    }
    let target = match field_in(msg, "unknown field `") {
        Some(field) => unknown_key_path(path, &field),
        None => path.clone(),
    };
    let (last, parent) = target.0.split_last()?;
    let Seg::Key(k) = last else { return None };
    let parent = node_at(&mut marked.value, &Path(parent.to_vec()))?;
    parent.as_object_mut()?.remove(k)?;
    Some(target)
}

/// Typed deserialization. Scalars take the type of the field that receives them: a plain
/// scalar in a string field becomes its source text; a `--set` text in a number/bool/list
/// field is parsed as YAML. Each node is retyped at most once. A problem is recorded and its
/// key removed, and deserialization goes on, so every problem is found in one pass; `None`
/// when any was found that left no usable app.
fn deserialize(
    marked: &mut Marked,
    file: &str,
    found: &mut Vec<Found>,
    repaired: &mut Vec<Path>,
) -> Option<App> {
    let mut retyped: HashSet<Path> = HashSet::new();
    loop {
        let result: Result<App, _> = serde_path_to_error::deserialize(&marked.value);
        let err = match result {
            Ok(app) => return Some(app),
            Err(e) => e,
        };
        let path = to_path(err.path());
        let msg = err.inner().to_string();
        if !retyped.contains(&path) {
            let wants_string = msg.contains("expected a string");
            let from_flag = matches!(marked.origins.get(&path), Some(Origin::Flag(_)));
            let replacement = if wants_string {
                marked.plain_text.get(&path).cloned().map(Value::String)
            } else if from_flag && msg.starts_with("invalid type: string") {
                let text =
                    node_at(&mut marked.value, &path).and_then(|v| v.as_str().map(str::to_owned));
                match text.map(|t| yaml::parse(&t)) {
                    Some(Ok(m)) => {
                        // Nested plain scalars keep their text for string fields, and every
                        // node of the parsed value is attributed to the flag.
                        let flag = marked.origins.get(&path).cloned();
                        for (p, t) in m.plain_text {
                            let full = Path([path.0.clone(), p.0].concat());
                            if let Some(f) = &flag {
                                marked.origins.insert(full.clone(), f.clone());
                            }
                            marked.plain_text.insert(full, t);
                        }
                        Some(m.value)
                    }
                    Some(Err(e)) => {
                        let (at, place) = locate(marked, file, &path, false);
                        found.push(Found {
                            place,
                            message: format!(
                                "{at}: {path}: cannot read the value as YAML: {}",
                                e.message
                            ),
                            hint: None,
                        });
                        retyped.insert(path.clone());
                        match repair(marked, &path, "") {
                            Some(p) => {
                                repaired.push(p);
                                continue;
                            }
                            None => return None,
                        }
                    }
                    None => None,
                }
            } else {
                None
            };
            if let Some(v) = replacement
                && let Some(node) = node_at(&mut marked.value, &path)
            {
                *node = v;
                retyped.insert(path);
                continue;
            }
        }
        // A key removed to go on is not missing a second time.
        if let Some(field) = field_in(&msg, "missing field `")
            && repaired.contains(&path.child(Seg::Key(field)))
        {
            return None;
        }
        found.push(type_error(marked, file, &path, &msg));
        if found.len() >= MAX_PROBLEMS {
            return None;
        }
        match repair(marked, &path, &msg) {
            Some(p) => repaired.push(p),
            None => return None,
        }
    }
}

/// Turns a serde message into one for people, with the place and a "did you mean".
fn type_error(marked: &Marked, file: &str, path: &Path, msg: &str) -> Found {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default().to_string();
        let expected: Vec<&str> = rest
            .split('`')
            .skip(2)
            .step_by(2)
            .filter(|s| !s.is_empty())
            .collect();
        let key_path = unknown_key_path(path, &field);
        let parent = Path(key_path.0[..key_path.0.len() - 1].to_vec());
        let (at, place) = locate(marked, file, &key_path, true);
        let within = if parent.is_empty() {
            String::new()
        } else {
            format!(" in `{parent}`")
        };
        let hint = if let Some(s) = did_you_mean(&field, &expected) {
            Some(format!("did you mean `{s}`?"))
        } else if !expected.is_empty() {
            Some(format!("known keys here: {}", expected.join(", ")))
        } else {
            None
        };
        return Found {
            place,
            message: format!("{at}: unknown key `{field}`{within}"),
            hint,
        };
    }
    if let Some(field) = field_in(msg, "missing field `") {
        // A key that is not there has no line: the file as a whole lacks it, or the mapping
        // named by its key (a list item: where the item starts).
        let (at, place, within) = if path.is_empty() {
            (file.to_string(), Place::File(0, 0), "the app".to_string())
        } else {
            let (at, place) = match first_key(marked, path) {
                Some(key) if !marked.key_origins.contains_key(path) => {
                    locate(marked, file, &key, true)
                }
                _ => locate(marked, file, path, true),
            };
            (at, place, format!("`{path}`"))
        };
        return Found {
            place,
            message: format!("{at}: {within} needs the key `{field}`"),
            hint: None,
        };
    }
    let (at, place) = locate(marked, file, path, false);
    if let Some(m) = out_of_range(marked, path, msg) {
        return Found {
            place,
            message: format!("{at}: {path}: {m}"),
            hint: None,
        };
    }
    let least = validate::int_bounds(path).0.unwrap_or(0);
    let friendly = msg
        .replace(
            "expected u32",
            &format!("expected a whole number ({least} or more)"),
        )
        .replace("expected i32", "expected a whole number")
        .replace("expected i64", "expected a whole number")
        .replace("expected a sequence", "expected a list")
        .replace("expected a map", "expected a mapping");
    let friendly = match friendly.find(", expected struct ") {
        Some(i) => format!("{}, expected a mapping", &friendly[..i]),
        None => friendly,
    };
    Found {
        place,
        message: format!("{at}: {path}: {friendly}"),
        hint: None,
    }
}

/// The first key (in the file) of the mapping at `path`: where a list item starts, since a
/// block mapping's own start mark is not where its first key is.
fn first_key(marked: &Marked, path: &Path) -> Option<Path> {
    marked
        .key_origins
        .iter()
        .filter(|(p, _)| p.0.len() == path.0.len() + 1 && p.starts_with(path))
        .filter_map(|(p, o)| match o {
            Origin::File { line, col } => Some(((*line, *col), p)),
            Origin::Flag(_) => None,
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, p)| p.clone())
}

/// A whole number outside what its field takes, said with the field's own bounds: serde's
/// "expected u32" for `workers: -3` would say "0 or more" where the least is 1, and an
/// integer too large for 64 bits arrives as a float.
fn out_of_range(marked: &Marked, path: &Path, msg: &str) -> Option<String> {
    let (min, max) = validate::int_bounds(path);
    let type_max = |msg: &str| -> Option<u64> {
        let ty = msg.rsplit("expected ").next()?;
        Some(match ty {
            "u16" => u16::MAX.into(),
            "u32" => u32::MAX.into(),
            "u64" => u64::MAX,
            "i32" => i32::MAX as u64,
            "i64" => i64::MAX as u64,
            _ => return None,
        })
    };
    let too_large = |n: &str| {
        let most = max
            .map(|m| m.to_string())
            .or_else(|| type_max(msg).map(|m| m.to_string()));
        match most {
            Some(m) => format!("`{n}` is too large (at most {m})"),
            None => format!("`{n}` is too large"),
        }
    };
    if let Some(rest) = msg.strip_prefix("invalid value: integer `") {
        let n = rest.split('`').next()?;
        type_max(msg)?;
        return Some(if n.starts_with('-') {
            format!("must be at least {} (not {n})", min.unwrap_or(0))
        } else {
            too_large(n)
        });
    }
    if msg.starts_with("invalid type: floating point `") {
        type_max(msg)?;
        let text = marked.plain_text.get(path)?;
        let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Some(if text.starts_with('-') {
                format!("must be at least {} (not {text})", min.unwrap_or(0))
            } else {
                too_large(text)
            });
        }
    }
    None
}

pub use crate::text::did_you_mean;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::spec::CleanPodPolicy;

    const BASE: &str = "name: mnist\nimage: example.com/mnist\ncommand: [python3, train.py]\n";

    fn load_with(extra: &str, sets: &[&str]) -> Result<App> {
        let flags: Vec<SetFlag> = sets.iter().map(|s| set::parse(s).unwrap()).collect();
        from_text(&format!("{BASE}{extra}"), "hvdctl.yaml", &flags)
    }

    #[test]
    fn defaults() {
        let app = load_with("", &[]).unwrap();
        assert_eq!(
            (app.workers, app.slots_per_worker, app.gpus_per_worker),
            (1, 1, 0)
        );
        assert_eq!(app.run_policy.clean_pod_policy, CleanPodPolicy::Running);
    }

    #[test]
    fn strings_keep_their_source_text() {
        let app = load_with("env:\n  A: 1.10\n  B: 0x10\n  C: true\n  D: ~x\n", &[]).unwrap();
        assert_eq!(app.env["A"], "1.10");
        assert_eq!(app.env["B"], "0x10");
        assert_eq!(app.env["C"], "true");
        assert_eq!(app.env["D"], "~x");
    }

    #[test]
    fn set_overrides_with_types_from_the_field() {
        let app = load_with(
            "",
            &[
                "workers=8",
                "env.NCCL_DEBUG=INFO",
                "env.N=007",
                r#"annotations["sidecar.istio.io/inject"]=false"#,
                "args=[--epochs, 3]",
            ],
        )
        .unwrap();
        assert_eq!(app.workers, 8);
        assert_eq!(app.env["NCCL_DEBUG"], "INFO");
        assert_eq!(app.env["N"], "007");
        assert_eq!(app.annotations["sidecar.istio.io/inject"], "false");
        assert_eq!(app.args, vec!["--epochs", "3"]);
    }

    #[test]
    fn set_strings_are_verbatim() {
        for v in [
            "a\nhostNetwork: true",
            "#",
            "a: b",
            "{",
            "*alias",
            "\u{7f}",
            "\u{2028}",
            "[x",
            "&a b",
        ] {
            let app = load_with("", &[&format!("env.X={v}")]).unwrap();
            assert_eq!(app.env["X"], v);
        }
    }

    #[test]
    fn unknown_key_says_where_and_suggests() {
        let e = load_with("wrokers: 2\n", &[]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message
                .starts_with("hvdctl.yaml:4:1: unknown key `wrokers`"),
            "{}",
            e.message
        );
        assert_eq!(e.hint.as_deref(), Some("did you mean `workers`?"));
        let e = load_with("resources:\n  worker:\n    limit: {cpu: 1}\n", &[]).unwrap_err();
        assert!(
            e.message
                .starts_with("hvdctl.yaml:6:5: unknown key `limit` in `resources.worker`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn type_errors_point_at_the_value_or_flag() {
        let e = load_with("workers: many\n", &[]).unwrap_err();
        assert!(
            e.message
                .starts_with("hvdctl.yaml:4:10: workers: invalid type"),
            "{}",
            e.message
        );
        let e = load_with("", &["workers=lots"]).unwrap_err();
        assert!(
            e.message.starts_with("--set workers=lots: workers:"),
            "{}",
            e.message
        );
        let e = load_with("", &["name.x=1"]).unwrap_err();
        assert!(e.message.contains("--set name.x=1"), "{}", e.message);
    }

    #[test]
    fn closed_sets_list_every_value_from_the_enum() {
        use crate::app::spec::{Launcher, MpiImplementation};
        use crate::backend::Backend;
        let e = load_with("backend: bogus\n", &[]).unwrap_err();
        assert!(
            e.message
                .ends_with("backend: `bogus` is not one of mpijob, native, trainjob, local"),
            "{}",
            e.message
        );
        assert_eq!(
            crate::backend::names().join(", "),
            "mpijob, native, trainjob, local"
        );
        // A scalar of another type is read as its text, then checked against the set.
        let e = load_with("mpi: {implementation: 1}\n", &[]).unwrap_err();
        assert!(
            e.message
                .contains("mpi.implementation: `1` is not one of OpenMPI, Intel, MPICH"),
            "{}",
            e.message
        );
        let e = load_with("", &["mpi.implementation=openmpi"]).unwrap_err();
        assert!(
            e.message.contains("(did you mean `OpenMPI`?)"),
            "{}",
            e.message
        );
        let e = load_with("mpi: {launcher: [a]}\n", &[]).unwrap_err();
        assert!(
            e.message
                .contains("expected a string, one of mpirun, horovodrun"),
            "{}",
            e.message
        );
        let app = load_with(
            "mpi: {implementation: MPICH, launcher: horovodrun}\ntolerations: [{operator: Exists, effect: ''}]\n",
            &[],
        )
        .unwrap();
        assert_eq!(app.mpi.implementation, MpiImplementation::Mpich);
        assert_eq!(app.mpi.launcher, Launcher::Horovodrun);
        assert_eq!(app.tolerations[0].effect, None, "empty means every effect");
        for n in crate::backend::names() {
            assert_eq!(n.parse::<Backend>().ok().map(|b| b.as_str()), Some(n));
        }
    }

    #[test]
    fn every_problem_is_reported_in_order() {
        let e = load_with(
            "wrokers: 2\nslotsPerWorker: 0\nmpi: {launcher: srun}\nenv: {1BAD: x}\n",
            &["gpusPerWorker=lots", "namespace=Bad NS"],
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let lines: Vec<&str> = e.message.lines().collect();
        assert_eq!(
            lines,
            [
                "hvdctl.yaml:4:1: unknown key `wrokers`",
                "  hint: did you mean `workers`?",
                "hvdctl.yaml:5:17: slotsPerWorker: must be at least 1",
                "hvdctl.yaml:6:17: mpi.launcher: `srun` is not one of mpirun, horovodrun",
                "hvdctl.yaml:7:13: env.1BAD: `1BAD` is not a valid environment variable name (letters, digits, `_`, `-`, `.`; not starting with a digit)",
                "--set gpusPerWorker=lots: gpusPerWorker: invalid type: string \"lots\", expected a whole number (0 or more)",
                "--set namespace=Bad NS: namespace: `Bad NS` is not a valid namespace name (lowercase letters, digits, `-`; at most 63)",
            ],
            "{}",
            e.message
        );
    }

    #[test]
    fn malformed_flags_are_listed_with_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(APP_FILE), format!("{BASE}workers: 0\n")).unwrap();
        let sets = ["a..b=1", "workers=x", "novalue"].map(String::from);
        let e = load(tmp.path(), &sets).unwrap_err();
        let lines: Vec<&str> = e.message.lines().collect();
        assert_eq!(lines.len(), 3, "{}", e.message);
        assert!(lines[0].starts_with("--set a..b=1: empty path segment"));
        assert!(lines[1].starts_with("--set workers=x: workers:"));
        assert!(lines[2].starts_with("--set novalue: expected KEY=VALUE"));
    }

    #[test]
    fn a_repaired_key_raises_no_second_problem() {
        // `workers` is removed to go on; its default must not be checked against elastic.
        let e = load_with(
            "workers: many\nelastic: {minWorkers: 2, maxWorkers: 4}\nmpi: {launcher: horovodrun}\n",
            &[],
        )
        .unwrap_err();
        assert_eq!(e.message.lines().count(), 1, "{}", e.message);
        // A required key removed is not also "missing".
        let e = from_text("name: [x]\nimage: i\ncommand: [c]\n", "f", &[]).unwrap_err();
        assert_eq!(e.message.lines().count(), 1, "{}", e.message);
        assert!(e.message.starts_with("f:1:7: name:"), "{}", e.message);
    }

    #[test]
    fn set_problems_name_the_flag_not_a_file_line() {
        for (flag, needle) in [
            (
                "elastic.minWorkers=2",
                "--set elastic.minWorkers=2: `elastic` needs the key `maxWorkers`",
            ),
            (
                "resources.worker.limit.cpu=1",
                "--set resources.worker.limit.cpu=1: unknown key `limit` in `resources.worker`",
            ),
            (
                "volumes[0].name=data",
                "--set volumes[0].name=data: `volumes[0]` needs the key `mountPath`",
            ),
            (
                "tolerations[0].operator=Maybe",
                "--set tolerations[0].operator=Maybe: tolerations[0].operator: `Maybe` is not one of Equal, Exists",
            ),
        ] {
            let e = load_with("resources:\n  launcher: {}\n", &[flag]).unwrap_err();
            assert!(e.message.starts_with(needle), "{flag}: {}", e.message);
            assert!(!e.message.contains("hvdctl.yaml:"), "{flag}: {}", e.message);
        }
    }

    #[test]
    fn only_text_is_read() {
        let e = as_text(b"\x00\x01", "f").unwrap_err();
        assert_eq!(
            e.message,
            "f: not text (YAML): byte 0 (line 1, column 1) is 0x00, a control character"
        );
        let e = as_text(b"a: 1\nb: \xc3(\n", "f").unwrap_err();
        assert_eq!(
            e.message,
            "f: not text (YAML): byte 8 (line 2, column 4) is 0xc3, not UTF-8"
        );
        let e = as_text("a: \u{7f}".as_bytes(), "f").unwrap_err();
        assert!(
            e.message.contains("byte 3 (line 1, column 4) is 0x7f"),
            "{}",
            e.message
        );
        for ok in ["a: b\tc\r\n", "\u{feff}a: é ✓ \u{1F600}\n", ""] {
            assert_eq!(as_text(ok.as_bytes(), "f").unwrap(), ok);
        }
    }

    #[test]
    fn the_file_is_read_up_to_its_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let big = format!("{BASE}{}", "#\n".repeat(MAX_APP_FILE as usize / 2));
        std::fs::write(tmp.path().join(APP_FILE), big).unwrap();
        let e = load(tmp.path(), &[]).unwrap_err();
        assert!(e.message.contains("larger than 128 KiB"), "{}", e.message);
        let e = load(&tmp.path().join("nope"), &[]).unwrap_err();
        assert!(
            e.message.ends_with("nope: no such directory"),
            "{}",
            e.message
        );
    }

    #[test]
    fn numbers_out_of_range_are_said_with_the_fields_bounds() {
        let e = load_with("workers: -3\n", &[]).unwrap_err();
        assert_eq!(
            e.message,
            "hvdctl.yaml:4:10: workers: must be at least 1 (not -3)"
        );
        let e = load_with("workers: 99999999999999999999\n", &[]).unwrap_err();
        assert_eq!(
            e.message,
            "hvdctl.yaml:4:10: workers: `99999999999999999999` is too large (at most 10000)"
        );
        let e = load_with("workers: 1.5\n", &[]).unwrap_err();
        assert!(
            e.message.contains("expected a whole number (1 or more)"),
            "{}",
            e.message
        );
        let e = load_with("", &["gpusPerWorker=-1"]).unwrap_err();
        assert_eq!(
            e.message,
            "--set gpusPerWorker=-1: gpusPerWorker: must be at least 0 (not -1)"
        );
    }

    #[test]
    fn a_missing_key_is_placed_where_it_belongs() {
        let e = from_text("image: a\ncommand: [x]\n", "f", &[]).unwrap_err();
        assert_eq!(e.message, "f: the app needs the key `name`");
        let e = load_with("volumes:\n- name: d\n  pvc: {claimName: c}\n", &[]).unwrap_err();
        assert_eq!(
            e.message,
            "hvdctl.yaml:5:3: `volumes[0]` needs the key `mountPath`"
        );
        let e = load_with("elastic:\n  minWorkers: 1\n", &[]).unwrap_err();
        assert_eq!(
            e.message,
            "hvdctl.yaml:4:1: `elastic` needs the key `maxWorkers`"
        );
    }

    #[test]
    fn a_flag_that_cannot_apply_changes_nothing() {
        let e = load_with("", &["volumes[5].readOnly=true"]).unwrap_err();
        assert_eq!(
            e.message,
            "--set volumes[5].readOnly=true: `volumes[5]` is past the end of the list (0 items; use [0] to append)"
        );
        let e = load_with(
            "volumes:\n- {name: d, mountPath: /d, nfs: {server: s, path: /p}}\n",
            &["volumes[0].nfs.server="],
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "--set volumes[0].nfs.server=: volumes[0].nfs.server: must not be empty"
        );
    }
}
