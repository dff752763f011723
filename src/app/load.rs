//! Loading `hvdctl.yaml` + `--set` into a validated [`App`], with every error pointing at
//! `file:line:col` or at the flag that caused it.

use super::set::{self, SetFlag};
use super::spec::App;
use super::validate;
use crate::error::{Error, Result};
use crate::yaml::{self, Marked, Origin, Path, Seg};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path as FsPath, PathBuf};

/// The app file's name inside an app directory.
pub const APP_FILE: &str = "hvdctl.yaml";

/// A loaded, validated app and where it lives.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub app: App,
    /// The app directory (`-C`), as given.
    pub dir: PathBuf,
}

/// Reads `<dir>/hvdctl.yaml`, applies `--set` flags, checks types and values.
pub fn load(dir: &FsPath, sets: &[String]) -> Result<Loaded> {
    let file = dir.join(APP_FILE);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                Error::input(format!("no {APP_FILE} in {}", display_dir(dir)))
                    .hint("run `hvdctl init` to create an app, or pass -C DIR to point at one"),
            );
        }
        Err(e) => return Err(Error::input(format!("cannot read {}: {e}", file.display()))),
    };
    let flags = sets
        .iter()
        .map(|s| set::parse(s).map_err(|e| Error::input(format!("--set {s}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let app = from_text(&text, &file.display().to_string(), &flags)?;
    Ok(Loaded {
        app,
        dir: dir.to_path_buf(),
    })
}

fn display_dir(dir: &FsPath) -> String {
    if dir.as_os_str().is_empty() || dir == FsPath::new(".") {
        "the current directory".into()
    } else {
        dir.display().to_string()
    }
}

/// Parses, overrides, deserializes and validates an app from text. `file` names it in errors.
pub fn from_text(text: &str, file: &str, flags: &[SetFlag]) -> Result<App> {
    let mut marked = yaml::parse(text).map_err(|e| {
        Error::input(format!(
            "{file}:{}:{}: invalid YAML: {}",
            e.line, e.col, e.message
        ))
    })?;
    if !marked.value.is_object() {
        let what = if marked.value.is_null() {
            "is empty"
        } else {
            "must be a mapping of keys to values"
        };
        return Err(Error::input(format!("{file}: the app file {what}"))
            .hint("see `hvdctl init --help` or docs/config.md for the format"));
    }
    for f in flags {
        apply_set(&mut marked, f)?;
    }
    let app = deserialize(&mut marked, file)?;
    let problems = validate::check(&app);
    if problems.is_empty() {
        return Ok(app);
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|p| {
            format!(
                "{}: {}: {}",
                locate(&marked, file, &p.path, false),
                p.path,
                p.message
            )
        })
        .collect();
    Err(Error::input(lines.join("\n")))
}

/// Where `path` came from, as `file:line:col` or `--set FLAG`.
fn locate(marked: &Marked, file: &str, path: &Path, key: bool) -> String {
    let origin = if key {
        marked.key_origins.get(path).or_else(|| marked.origin(path))
    } else {
        marked.origin(path)
    };
    match origin {
        Some(Origin::File { line, col }) => format!("{file}:{line}:{col}"),
        Some(Origin::Flag(flag)) => format!("--set {flag}"),
        None => file.to_string(),
    }
}

/// Writes a `--set` value (as text) at its path, creating mappings on the way.
fn apply_set(marked: &mut Marked, f: &SetFlag) -> Result<()> {
    let err = |m: String| Error::input(format!("--set {}: {m}", f.flag));
    let mut node = &mut marked.value;
    let mut walked = Path::default();
    for seg in &f.path.0 {
        walked = walked.child(seg.clone());
        node = match (seg, node) {
            (Seg::Key(k), Value::Object(map)) => map.entry(k.clone()).or_insert(Value::Null),
            (Seg::Key(k), n @ Value::Null) => {
                *n = Value::Object(Default::default());
                n.as_object_mut()
                    .expect("just made")
                    .entry(k.clone())
                    .or_insert(Value::Null)
            }
            (Seg::Index(i), Value::Array(items)) => {
                let len = items.len();
                if *i > len {
                    return Err(err(format!(
                        "`{walked}` is past the end of the list ({len} items; use [{len}] to append)"
                    )));
                }
                if *i == len {
                    items.push(Value::Null);
                }
                &mut items[*i]
            }
            (Seg::Index(i), Value::Null) if *i > 0 => {
                return Err(err(format!(
                    "`{walked}` is past the end of the list (0 items; use [0] to append)"
                )));
            }
            (Seg::Index(_), n @ Value::Null) => {
                *n = Value::Array(vec![Value::Null]);
                &mut n.as_array_mut().expect("just made")[0]
            }
            (Seg::Key(_), _) => {
                return Err(err(format!("`{walked}`: its parent is not a mapping")));
            }
            (Seg::Index(_), _) => return Err(err(format!("`{walked}`: its parent is not a list"))),
        };
    }
    *node = Value::String(f.value.clone());
    marked.forget(&f.path);
    marked
        .origins
        .insert(f.path.clone(), Origin::Flag(f.flag.clone()));
    Ok(())
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

/// Typed deserialization. Scalars take the type of the field that receives them: a plain
/// scalar in a string field becomes its source text; a `--set` text in a number/bool/list
/// field is parsed as YAML. Each node is retyped at most once.
fn deserialize(marked: &mut Marked, file: &str) -> Result<App> {
    let mut retyped: HashSet<Path> = HashSet::new();
    loop {
        let result: Result<App, _> = serde_path_to_error::deserialize(&marked.value);
        let err = match result {
            Ok(app) => return Ok(app),
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
                        return Err(Error::input(format!(
                            "{}: {path}: cannot read the value as YAML: {}",
                            locate(marked, file, &path, false),
                            e.message
                        )));
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
        return Err(type_error(marked, file, &path, &msg));
    }
}

/// Turns a serde message into one for people, with the place and a "did you mean".
fn type_error(marked: &Marked, file: &str, path: &Path, msg: &str) -> Error {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default().to_string();
        let expected: Vec<&str> = rest
            .split('`')
            .skip(2)
            .step_by(2)
            .filter(|s| !s.is_empty())
            .collect();
        // The path may or may not already end with the unknown key.
        let (parent, key_path) = if path.0.last() == Some(&Seg::Key(field.clone())) {
            (Path(path.0[..path.0.len() - 1].to_vec()), path.clone())
        } else {
            (path.clone(), path.child(Seg::Key(field.clone())))
        };
        let place = locate(marked, file, &key_path, true);
        let within = if parent.is_empty() {
            String::new()
        } else {
            format!(" in `{parent}`")
        };
        let mut e = Error::input(format!("{place}: unknown key `{field}`{within}"));
        if let Some(s) = did_you_mean(&field, &expected) {
            e = e.hint(format!("did you mean `{s}`?"));
        } else if !expected.is_empty() {
            e = e.hint(format!("known keys here: {}", expected.join(", ")));
        }
        return e;
    }
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let within = if path.is_empty() {
            "the app".to_string()
        } else {
            format!("`{path}`")
        };
        return Error::input(format!(
            "{}: {within} needs the key `{field}`",
            locate(marked, file, path, false)
        ));
    }
    let friendly = msg
        .replace("expected u32", "expected a whole number (0 or more)")
        .replace("expected i32", "expected a whole number")
        .replace("expected i64", "expected a whole number")
        .replace("expected a sequence", "expected a list")
        .replace("expected a map", "expected a mapping");
    let friendly = match friendly.find(", expected struct ") {
        Some(i) => format!("{}, expected a mapping", &friendly[..i]),
        None => friendly,
    };
    Error::input(format!(
        "{}: {path}: {friendly}",
        locate(marked, file, path, false)
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(app.run_policy.clean_pod_policy, "Running");
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
}
