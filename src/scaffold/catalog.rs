//! Template catalogs: the built-in one (embedded from `templates/apps/`) or a user's
//! directory (`--template-dir`), both laid out as `<template>/template.yaml` + files.

use crate::assets;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `template.yaml`: metadata of a template (not copied into the app).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    description: String,
}

pub const META_FILE: &str = "template.yaml";
pub const DEFAULT_TEMPLATE: &str = "horovod";

#[derive(Debug, Clone, Serialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
}

/// Where templates come from.
#[derive(Debug, Clone)]
pub enum Catalog {
    BuiltIn,
    Dir(PathBuf),
}

/// One file of a template: path relative to the template root, and its bytes.
#[derive(Debug, Clone)]
pub struct TemplateFile {
    pub path: String,
    pub data: Vec<u8>,
    pub executable: bool,
}

impl Catalog {
    pub fn new(dir: Option<&Path>) -> Catalog {
        dir.map_or(Catalog::BuiltIn, |d| Catalog::Dir(d.to_path_buf()))
    }

    fn describe(&self) -> String {
        match self {
            Catalog::BuiltIn => "the built-in catalog".into(),
            Catalog::Dir(d) => d.display().to_string(),
        }
    }

    /// A `--template-dir` that is not a directory is said before any template is looked for.
    fn check_dir(&self) -> Result<()> {
        let Catalog::Dir(d) = self else {
            return Ok(());
        };
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(Error::input(format!(
                "--template-dir {}: not a directory",
                d.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::input(format!(
                "--template-dir {}: no such directory",
                d.display()
            ))
            .hint(
                "point it at a directory of templates (one sub-directory each, with template.yaml)",
            )),
            Err(e) => Err(Error::input(format!("--template-dir {}: {e}", d.display()))),
        }
    }

    /// Every template, sorted by name.
    pub fn list(&self) -> Result<Vec<TemplateInfo>> {
        self.check_dir()?;
        let names: Vec<String> = match self {
            Catalog::BuiltIn => {
                let mut n: Vec<String> = assets::list("apps/")
                    .iter()
                    .filter_map(|p| {
                        p.strip_prefix("apps/")?
                            .strip_suffix(&format!("/{META_FILE}"))
                            .map(str::to_owned)
                    })
                    .collect();
                n.sort();
                n.dedup();
                n
            }
            Catalog::Dir(d) => {
                let rd = std::fs::read_dir(d)
                    .map_err(|e| Error::input(format!("--template-dir {}: {e}", d.display())))?;
                let mut n: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().join(META_FILE).is_file())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                n.sort();
                n
            }
        };
        names
            .into_iter()
            .map(|n| {
                Ok(TemplateInfo {
                    description: self.meta(&n)?.description,
                    name: n,
                })
            })
            .collect()
    }

    fn meta(&self, name: &str) -> Result<Meta> {
        let (text, place) = match self {
            Catalog::BuiltIn => (
                assets::text(&format!("apps/{name}/{META_FILE}")).map(|t| t.into_owned()),
                format!("(built-in) {name}/{META_FILE}"),
            ),
            Catalog::Dir(d) => {
                let p = d.join(name).join(META_FILE);
                let text = match crate::files::read_text(&p, crate::files::CATALOG_FILE) {
                    Ok(t) => Some(t),
                    Err(crate::files::Refused::Missing) => None,
                    Err(r) => return Err(r.error(&p, crate::files::CATALOG_FILE)),
                };
                (text, p.display().to_string())
            }
        };
        let text = text.ok_or_else(|| self.unknown(name))?;
        serde_norway::from_str(&text).map_err(|e| Error::input(format!("{place}: {e}")))
    }

    fn unknown(&self, name: &str) -> Error {
        let known: Vec<String> = self
            .list()
            .map(|l| l.into_iter().map(|t| t.name).collect())
            .unwrap_or_default();
        let refs: Vec<&str> = known.iter().map(String::as_str).collect();
        let mut e = Error::input(format!("unknown template `{name}` in {}", self.describe()));
        e = match crate::text::did_you_mean(name, &refs) {
            Some(s) => e.hint(format!(
                "did you mean `{s}`? (`hvdctl templates` lists them)"
            )),
            None => e.hint(format!(
                "available: {} (`hvdctl templates`)",
                known.join(", ")
            )),
        };
        e
    }

    /// Every file of template `name` except its `template.yaml`, sorted by path.
    pub fn files(&self, name: &str) -> Result<Vec<TemplateFile>> {
        self.check_dir()?;
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(self.unknown(name));
        }
        self.meta(name)?;
        let mut out = Vec::new();
        match self {
            Catalog::BuiltIn => {
                let prefix = format!("apps/{name}/");
                for p in assets::list(&prefix) {
                    let rel = p[prefix.len()..].to_string();
                    if rel == META_FILE || skip(&rel) {
                        continue;
                    }
                    let data = assets::bytes(&p)
                        .map(|b| b.into_owned())
                        .unwrap_or_default();
                    let executable = rel.ends_with(".sh");
                    out.push(TemplateFile {
                        path: rel,
                        data,
                        executable,
                    });
                }
            }
            Catalog::Dir(d) => {
                let root = d.join(name);
                walk(&root, &root, &mut out)?;
                out.retain(|f| f.path != META_FILE && !skip(&f.path));
                out.sort_by(|a, b| a.path.cmp(&b.path));
            }
        }
        Ok(out)
    }
}

/// Build leftovers never belong in an app.
fn skip(rel: &str) -> bool {
    rel.split('/').any(|c| c == "__pycache__" || c == ".git") || rel.ends_with(".pyc")
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<TemplateFile>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::input(format!("{}: {e}", dir.display())))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::input(format!("{}: {e}", dir.display())))?;
        let path = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| Error::input(format!("{}: {e}", path.display())))?;
        if ft.is_dir() {
            walk(root, &path, out)?;
        } else if ft.is_file() {
            let data = crate::files::read(&path, crate::files::CATALOG_FILE)
                .map_err(|r| r.error(&path, crate::files::CATALOG_FILE))?;
            #[cfg(unix)]
            let executable = {
                use std::os::unix::fs::PermissionsExt;
                entry
                    .metadata()
                    .map(|m| m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
            };
            #[cfg(not(unix))]
            let executable = false;
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            out.push(TemplateFile {
                path: rel,
                data,
                executable,
            });
        }
    }
    Ok(())
}
