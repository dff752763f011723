//! Scaffolding: plan every file of a new app in memory (validating name, image, template and
//! target directory), then write them. A failed plan writes nothing; a failed write removes
//! what it wrote.

use super::catalog::{Catalog, TemplateFile};
use crate::app::load::{self, APP_FILE};
use crate::app::validate;
use crate::assets;
use crate::error::{Error, Result};
use crate::render;
use serde_json::json;
use std::path::{Path, PathBuf};

/// What to scaffold.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub dir: PathBuf,
    pub template: String,
    pub name: Option<String>,
    pub image: Option<String>,
    pub force: bool,
    pub catalog: Catalog,
    pub base: super::Base,
}

/// The files of a new app, ready to write.
#[derive(Debug)]
pub struct Plan {
    pub dir: PathBuf,
    pub name: String,
    pub image: String,
    pub files: Vec<TemplateFile>,
    /// Files already in the directory that writing replaces (only with `force`).
    replaced: Vec<Existing>,
}

impl Plan {
    /// The files writing this plan replaces, as paths under the app directory.
    pub fn replaced(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.replaced.iter().map(|e| self.dir.join(&e.path))
    }
}

/// A file of the plan that is already in the target directory, kept so that a failed write
/// can put it back.
#[derive(Debug)]
struct Existing {
    path: String,
    original: Original,
}

#[derive(Debug)]
enum Original {
    File { data: Vec<u8>, mode: u32 },
    Symlink(PathBuf),
}

/// The plan's files that already exist under `dir`. Without `force` any is an error (the
/// directory may hold nothing but dotfiles, and `.dockerignore` is one a template writes);
/// a directory where a file must go (or the reverse) is an error even with `force`.
fn existing(dir: &Path, files: &[TemplateFile], force: bool) -> Result<Vec<Existing>> {
    let mut found = Vec::new();
    for f in files {
        let mut at = dir.to_path_buf();
        let parts: Vec<&str> = f.path.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let last = i + 1 == parts.len();
            let meta = match std::fs::symlink_metadata(&at) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => {
                    return Err(Error::input(format!("cannot use {}: {e}", at.display())));
                }
            };
            let ft = meta.file_type();
            if !last {
                if !ft.is_dir() {
                    return Err(Error::input(format!(
                        "{} is in the way: the template puts files in a directory of that name",
                        at.display()
                    ))
                    .hint("move it away, or choose another directory"));
                }
                continue;
            }
            let original = if ft.is_symlink() {
                Original::Symlink(
                    std::fs::read_link(&at)
                        .map_err(|e| Error::input(format!("cannot read {}: {e}", at.display())))?,
                )
            } else if ft.is_file() {
                #[cfg(unix)]
                let mode = {
                    use std::os::unix::fs::PermissionsExt;
                    meta.permissions().mode()
                };
                #[cfg(not(unix))]
                let mode = 0o644;
                let data = crate::files::read(&at, crate::files::CATALOG_FILE)
                    .map_err(|r| r.error(&at, crate::files::CATALOG_FILE))?;
                Original::File { data, mode }
            } else {
                return Err(Error::input(format!(
                    "{} is in the way: the template writes a file there",
                    at.display()
                ))
                .hint("move it away, or choose another directory"));
            };
            found.push(Existing {
                path: f.path.clone(),
                original,
            });
        }
    }
    if !force && !found.is_empty() {
        let names: Vec<&str> = found.iter().map(|e| e.path.as_str()).collect();
        return Err(Error::input(format!(
            "{} already has {} (the template writes {})",
            if dir == Path::new(".") {
                "the current directory".to_string()
            } else {
                dir.display().to_string()
            },
            names.join(", "),
            if names.len() == 1 { "it" } else { "them" }
        ))
        .hint("pass --force to replace them (each replaced file is listed), or move them away"));
    }
    Ok(found)
}

/// The app name a directory suggests: its last component, lowercased, with runs of characters
/// a Kubernetes name cannot hold turned into one `-`, starting at its first letter (a DNS-1035
/// label starts with a letter), cut to the length job and pod names leave for it. Digits stay:
/// `resnet50` and `resnet101` are different apps. `None` if nothing usable remains.
pub fn name_from_dir(dir: &Path) -> Option<String> {
    let abs = std::path::absolute(dir).ok()?;
    let base = abs
        .components()
        .next_back()?
        .as_os_str()
        .to_string_lossy()
        .to_lowercase();
    let mut s = String::with_capacity(base.len());
    for c in base.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.is_empty() && !s.ends_with('-') {
            s.push('-');
        }
    }
    let start = s.find(|c: char| c.is_ascii_lowercase())?;
    let s: String = s[start..]
        .chars()
        .take(validate::max_name_len(99))
        .collect();
    let s = s.trim_end_matches('-').to_string();
    validate::is_dns1035_label(&s).then_some(s)
}

/// Checks that `dir` may receive a new app: missing, or empty but for dotfiles (or `force`).
pub fn check_target(dir: &Path, force: bool) -> Result<()> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::input(format!("cannot use {}: {e}", dir.display()))),
        Ok(m) if !m.is_dir() => {
            return Err(Error::input(format!(
                "{} exists and is not a directory",
                dir.display()
            )));
        }
        Ok(_) => {}
    }
    if force {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::input(format!("cannot read {}: {e}", dir.display())))?;
    let mut visible: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    if visible.is_empty() {
        return Ok(());
    }
    visible.sort();
    let shown: Vec<&str> = visible.iter().take(3).map(String::as_str).collect();
    let more = if visible.len() > 3 {
        format!(" and {} more", visible.len() - 3)
    } else {
        String::new()
    };
    Err(Error::input(format!(
        "{} is not empty (it has {}{more})",
        if dir == Path::new(".") {
            "the current directory".to_string()
        } else {
            dir.display().to_string()
        },
        shown.join(", ")
    ))
    .hint("choose an empty or new directory (`hvdctl init DIR`), or pass --force to write into it"))
}

/// Validates the request and renders every file in memory.
pub fn plan(req: &InitRequest) -> Result<Plan> {
    let mut files = req.catalog.files(&req.template)?;
    if let Some((path, fits)) = req.base.dockerfile() {
        let builtin = matches!(req.catalog, Catalog::BuiltIn);
        if !builtin || !fits.contains(&req.template.as_str()) {
            return Err(Error::input(format!(
                "--base debian: the {} template has no Debian base; it is for the built-in {} templates",
                req.template,
                fits.join(" and ")
            )));
        }
        let data = crate::assets::bytes(path)
            .expect("base Dockerfiles are embedded")
            .into_owned();
        match files.iter_mut().find(|f| f.path == "Dockerfile") {
            Some(f) => f.data = data,
            None => files.push(TemplateFile {
                path: "Dockerfile".into(),
                data,
                executable: false,
            }),
        }
    }
    check_target(&req.dir, req.force)?;
    let name = match &req.name {
        Some(n) => n.clone(),
        None => name_from_dir(&req.dir).ok_or_else(|| {
            Error::input(format!(
                "cannot derive an app name from the directory {}",
                req.dir.display()
            ))
            .hint("pass --name APP (lowercase letters, digits and `-`, starting with a letter)")
        })?,
    };
    if !validate::is_app_name_spelling(&name) {
        return Err(Error::input(format!(
            "--name {name}: not a valid app name: use lowercase letters, digits and `-`, starting with a letter"
        )));
    }
    if let Some(why) = validate::name_too_long(&name) {
        return Err(Error::input(format!("--name {name}: {why}")));
    }
    let image = req.image.clone().unwrap_or_else(|| name.clone());
    if !validate::is_image_ref(&image) {
        return Err(Error::input(format!(
            "--image {image}: not a valid image reference (e.g. registry.example.com/team/{name}; lowercase)"
        )));
    }
    let values =
        json!({"name": name, "image": image, "debianBase": req.base == super::Base::Debian});
    let mut out = Vec::new();
    for f in files {
        // `*.hbs` files are rendered with name and image, except manifest templates under k8s/,
        // which are rendered at deploy time.
        if let Some(target) = f
            .path
            .strip_suffix(".hbs")
            .filter(|_| !f.path.starts_with("k8s/"))
        {
            let text = String::from_utf8(f.data).map_err(|_| {
                Error::input(format!(
                    "template {}: {} is not UTF-8 text",
                    req.template, f.path
                ))
            })?;
            // YAML files get values as quoted scalars, anything else (a README) as they are.
            let rendered = render::render_as(
                render::Format::of(target),
                &format!("{}/{}", req.template, f.path),
                &text,
                &values,
            )?;
            out.push(TemplateFile {
                path: target.to_string(),
                data: rendered.into_bytes(),
                executable: f.executable,
            });
        } else {
            out.push(f);
        }
    }
    // Every app gets the shared manifest templates unless its template brings its own.
    for rel in assets::list("k8s/") {
        if !out.iter().any(|f| f.path == rel) {
            let data = assets::bytes(&rel)
                .map(|b| b.into_owned())
                .unwrap_or_default();
            out.push(TemplateFile {
                path: rel,
                data,
                executable: false,
            });
        }
    }
    let app_file = out.iter().find(|f| f.path == APP_FILE).ok_or_else(|| {
        Error::input(format!("template {} has no {APP_FILE}(.hbs)", req.template))
    })?;
    let text = String::from_utf8_lossy(&app_file.data);
    load::from_text(
        &text,
        &format!("template {}: {APP_FILE}", req.template),
        &[],
    )?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    let replaced = existing(&req.dir, &out, req.force)?;
    Ok(Plan {
        dir: req.dir.clone(),
        name,
        image,
        files: out,
        replaced,
    })
}

/// Writes a plan. On failure, removes the files and directories it created and puts back the
/// files it replaced.
pub fn write(plan: &Plan) -> Result<Vec<PathBuf>> {
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| -> std::io::Result<()> {
        for f in &plan.files {
            let path = plan.dir.join(&f.path);
            if let Some(parent) = path.parent() {
                let mut missing = Vec::new();
                let mut p = parent;
                while !p.as_os_str().is_empty() && !p.exists() {
                    missing.push(p.to_path_buf());
                    match p.parent() {
                        Some(q) => p = q,
                        None => break,
                    }
                }
                std::fs::create_dir_all(parent)?;
                created_dirs.extend(missing.into_iter().rev());
            }
            if plan.replaced.iter().any(|e| e.path == f.path) {
                // Replace a symlink itself, never the file it points to.
                std::fs::remove_file(&path)?;
            }
            written.push(path.clone());
            std::fs::write(&path, &f.data)?;
            #[cfg(unix)]
            if f.executable {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        for p in written.iter().rev() {
            let _ = std::fs::remove_file(p);
        }
        for r in &plan.replaced {
            let path = plan.dir.join(&r.path);
            if written.contains(&path) {
                restore(&path, &r.original);
            }
        }
        for d in created_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        return Err(Error::failure(format!(
            "cannot write the app into {}: {e}",
            plan.dir.display()
        )));
    }
    Ok(written)
}

/// Puts a replaced file back (best effort: this runs while another error is reported).
fn restore(path: &Path, original: &Original) {
    let _ = std::fs::remove_file(path);
    match original {
        Original::File { data, mode } => {
            if std::fs::write(path, data).is_ok() {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode));
                }
                #[cfg(not(unix))]
                let _ = mode;
            }
        }
        Original::Symlink(target) => {
            #[cfg(unix)]
            let _ = std::os::unix::fs::symlink(target, path);
            #[cfg(not(unix))]
            let _ = target;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_dirs() {
        let name = |d: &str| name_from_dir(Path::new(d));
        for (dir, want) in [
            ("/tmp/mnist", "mnist"),
            ("/tmp/My_Project", "my-project"),
            ("/tmp/resnet50", "resnet50"),
            ("/tmp/resnet101", "resnet101"),
            ("/tmp/app-v2", "app-v2"),
            ("/tmp/bert_base_2", "bert-base-2"),
            ("/tmp/2024-run", "run"),
            ("/tmp/-x--y__z-", "x-y-z"),
            ("/tmp/Über Model 3", "ber-model-3"),
        ] {
            assert_eq!(name(dir).as_deref(), Some(want), "{dir}");
        }
        assert_eq!(name("/tmp/___"), None);
        assert_eq!(name("/tmp/2024"), None);
        // Cut to what job and pod names leave, never ending in `-`.
        let long = name(&format!("/tmp/{}-{}", "a".repeat(46), "b".repeat(10))).unwrap();
        assert_eq!(long, "a".repeat(46));
        let long = name(&format!("/tmp/{}", "x9".repeat(40))).unwrap();
        assert_eq!(long.len(), validate::max_name_len(99));
        assert!(validate::is_dns1035_label(&long));
    }

    #[test]
    fn a_failed_write_puts_replaced_files_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join(".dockerignore"), "mine\n").unwrap();
        // `blocker` is a file where the plan needs a directory: the second write fails.
        std::fs::write(dir.join("blocker"), "x").unwrap();
        let file = |path: &str| TemplateFile {
            path: path.into(),
            data: b"new\n".to_vec(),
            executable: false,
        };
        let files = vec![file(".dockerignore"), file("a.txt"), file("blocker/b.txt")];
        assert!(existing(dir, &files, false).is_err(), "not without force");
        let replaced = vec![Existing {
            path: ".dockerignore".into(),
            original: Original::File {
                data: b"mine\n".to_vec(),
                mode: 0o640,
            },
        }];
        let plan = Plan {
            dir: dir.to_path_buf(),
            name: "a".into(),
            image: "a".into(),
            files,
            replaced,
        };
        let e = write(&plan).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert_eq!(
            std::fs::read_to_string(dir.join(".dockerignore")).unwrap(),
            "mine\n"
        );
        assert!(!dir.join("a.txt").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(".dockerignore"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o640);
        }
    }

    #[test]
    fn a_directory_in_the_way_is_refused_even_with_force() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("Dockerfile")).unwrap();
        std::fs::write(tmp.path().join("k8s"), "x").unwrap();
        for path in ["Dockerfile", "k8s/mpijob.yaml.hbs"] {
            let f = TemplateFile {
                path: path.into(),
                data: Vec::new(),
                executable: false,
            };
            let e = existing(tmp.path(), &[f], true).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.message.contains("is in the way"), "{}", e.message);
        }
    }
}
