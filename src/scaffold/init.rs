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
}

/// The files of a new app, ready to write.
#[derive(Debug)]
pub struct Plan {
    pub dir: PathBuf,
    pub name: String,
    pub image: String,
    pub files: Vec<TemplateFile>,
}

/// The app name a directory suggests: its last component, lowercased, with characters a
/// Kubernetes name cannot hold turned into `-`. `None` if nothing usable remains.
pub fn name_from_dir(dir: &Path) -> Option<String> {
    let abs = std::path::absolute(dir).ok()?;
    let base = abs
        .components()
        .next_back()?
        .as_os_str()
        .to_string_lossy()
        .to_lowercase();
    let mut s: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s
        .trim_matches(|c: char| c == '-' || c.is_ascii_digit())
        .to_string();
    let s = s.trim_end_matches('-').to_string();
    let s: String = s.chars().take(validate::max_name_len(99)).collect();
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
    let files = req.catalog.files(&req.template)?;
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
    if !validate::is_dns1035_label(&name) {
        return Err(Error::input(format!(
            "--name {name}: not a valid app name: use lowercase letters, digits and `-`, starting with a letter"
        )));
    }
    let image = req.image.clone().unwrap_or_else(|| name.clone());
    if !validate::is_image_ref(&image) {
        return Err(Error::input(format!(
            "--image {image}: not a valid image reference (e.g. registry.example.com/team/{name}; lowercase)"
        )));
    }
    let values = json!({"name": name, "image": image});
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
            let rendered = render::render(&format!("{}/{}", req.template, f.path), &text, &values)?;
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
    Ok(Plan {
        dir: req.dir.clone(),
        name,
        image,
        files: out,
    })
}

/// Writes a plan. On failure, removes the files and directories it created.
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
            std::fs::write(&path, &f.data)?;
            written.push(path.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_dirs() {
        assert_eq!(
            name_from_dir(Path::new("/tmp/mnist")).as_deref(),
            Some("mnist")
        );
        assert_eq!(
            name_from_dir(Path::new("/tmp/My_Project")).as_deref(),
            Some("my-project")
        );
        assert_eq!(
            name_from_dir(Path::new("/tmp/2024-run")).as_deref(),
            Some("run")
        );
        assert_eq!(name_from_dir(Path::new("/tmp/___")), None);
    }
}
