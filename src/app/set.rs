//! `--set KEY=VALUE`: dotted paths into `hvdctl.yaml`.
//!
//! Syntax: `workers=8`, `env.NCCL_DEBUG=INFO`, `resources.worker.limits.cpu=4`,
//! `volumes[0].readOnly=true`, `annotations["sidecar.istio.io/inject"]=false`.
//! The value is kept as text; the field that receives it decides its type (a string field gets
//! the text verbatim, a number field parses it), see [`super::load`].

use crate::yaml::{Path, Seg};

/// One parsed `--set` flag.
#[derive(Debug, Clone, PartialEq)]
pub struct SetFlag {
    /// The flag as the user typed it, for error messages.
    pub flag: String,
    pub path: Path,
    pub value: String,
}

/// Parses `KEY=VALUE`. The value may contain `=` and anything else.
pub fn parse(flag: &str) -> crate::Result<SetFlag> {
    let (key, value) = split_key(flag)?;
    let path = parse_path(key)?;
    Ok(SetFlag {
        flag: flag.to_string(),
        path,
        value: value.to_string(),
    })
}

/// Finds the `=` that ends the key (not one inside `["..."]`).
pub fn split_key(flag: &str) -> crate::Result<(&str, &str)> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in flag.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '=' if !in_quotes => return Ok((&flag[..i], &flag[i + 1..])),
            _ => {}
        }
    }
    Err(crate::Error::input(
        "expected KEY=VALUE (e.g. --set workers=4)",
    ))
}

/// Parses `a.b[0]["c.d"]`.
pub fn parse_path(key: &str) -> crate::Result<Path> {
    if key.is_empty() {
        return Err(crate::Error::input("the key is empty"));
    }
    let mut segs = Vec::new();
    let bytes = key.as_bytes();
    let mut i = 0;
    let mut expect_key = true;
    while i < bytes.len() {
        match bytes[i] {
            b'[' => {
                let rest = &key[i + 1..];
                if let Some(q) = rest.strip_prefix('"') {
                    // A JSON string key.
                    let mut end = None;
                    let mut esc = false;
                    for (j, c) in q.char_indices() {
                        match c {
                            _ if esc => esc = false,
                            '\\' => esc = true,
                            '"' => {
                                end = Some(j);
                                break;
                            }
                            _ => {}
                        }
                    }
                    let end = end.ok_or_else(|| crate::Error::input("unterminated quoted key"))?;
                    let k: String = serde_json::from_str(&format!("\"{}\"", &q[..end]))
                        .map_err(|_| crate::Error::input("bad escape in quoted key"))?;
                    if !q[end + 1..].starts_with(']') {
                        return Err(crate::Error::input("expected `]` after quoted key"));
                    }
                    segs.push(Seg::Key(k));
                    i += 1 + 1 + end + 1 + 1;
                } else {
                    let close = rest
                        .find(']')
                        .ok_or_else(|| crate::Error::input("missing `]`"))?;
                    let inner = &rest[..close];
                    let n: usize = inner.parse().map_err(|_| {
                        crate::Error::input(format!(
                            "`[{inner}]` is not a list index (use [\"key\"] for keys)"
                        ))
                    })?;
                    segs.push(Seg::Index(n));
                    i += 1 + close + 1;
                }
                expect_key = false;
            }
            b'.' => {
                if expect_key {
                    return Err(crate::Error::input("empty path segment"));
                }
                expect_key = true;
                i += 1;
            }
            _ => {
                if !expect_key {
                    return Err(crate::Error::input(format!(
                        "expected `.` or `[` at `{}`",
                        &key[i..]
                    )));
                }
                let end = key[i..].find(['.', '[']).map_or(key.len(), |j| i + j);
                if key[i..end].contains([']', '"']) {
                    return Err(crate::Error::input(format!(
                        "unexpected `]` or `\"` in `{}`",
                        &key[i..end]
                    )));
                }
                segs.push(Seg::Key(key[i..end].to_string()));
                i = end;
                expect_key = false;
            }
        }
    }
    if expect_key {
        return Err(crate::Error::input("the key ends with `.`"));
    }
    Ok(Path(segs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(key: &str) -> Vec<Seg> {
        parse_path(key).unwrap().0
    }

    #[test]
    fn paths() {
        assert_eq!(segs("workers"), vec![Seg::Key("workers".into())]);
        assert_eq!(
            segs("env.NCCL_DEBUG"),
            vec![Seg::Key("env".into()), Seg::Key("NCCL_DEBUG".into())]
        );
        assert_eq!(
            segs("volumes[0].readOnly"),
            vec![
                Seg::Key("volumes".into()),
                Seg::Index(0),
                Seg::Key("readOnly".into())
            ]
        );
        assert_eq!(
            segs(r#"annotations["sidecar.istio.io/inject"]"#),
            vec![
                Seg::Key("annotations".into()),
                Seg::Key("sidecar.istio.io/inject".into())
            ]
        );
    }

    #[test]
    fn values_keep_everything_after_the_first_equals() {
        let s = parse("env.X=a=b\nc").unwrap();
        assert_eq!(s.value, "a=b\nc");
        let s = parse(r#"labels["a=b"]=c"#).unwrap();
        assert_eq!(s.path.0[1], Seg::Key("a=b".into()));
        assert_eq!(s.value, "c");
    }

    #[test]
    fn bad_paths() {
        for bad in [
            "", "=1", "a..b=1", "a.=1", "a[x]=1", "a[0=1", "a[\"x]=1", "nokey", "a]b=1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
