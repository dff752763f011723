//! Reading the kubeconfig the way kubectl does (`--kubeconfig`, else `$KUBECONFIG` with several
//! files, missing ones skipped, else `~/.kube/config`), once per command and without contacting
//! any server.

use crate::error::{Error, Result};
use crate::options::Global;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::path::{Path, PathBuf};

/// The merged kubeconfig, or where it was looked for when there is none.
#[derive(Debug, Clone)]
pub enum Loaded {
    Found(Box<Kubeconfig>),
    /// No kubeconfig file exists: the places looked at, for messages.
    Missing(String),
}

/// Loads the kubeconfig: an unreadable or malformed file is an error naming the file (and
/// the line, for YAML errors); no file at all is [`Loaded::Missing`].
pub fn load(g: &Global) -> Result<Loaded> {
    if let Some(path) = &g.kubeconfig {
        if !path.exists() {
            return Err(Error::input(format!(
                "--kubeconfig {}: no such file",
                path.display()
            )));
        }
        return read(path).map(|k| Loaded::Found(Box::new(k)));
    }
    if let Some(value) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        // kubectl skips the files of the list that do not exist.
        let mut merged: Option<Kubeconfig> = None;
        for p in paths.iter().filter(|p| p.exists()) {
            let k = read(p)?;
            merged = Some(match merged {
                None => k,
                Some(m) => m.merge(k).map_err(|e| {
                    Error::input(format!("KUBECONFIG: merging {}: {e}", p.display()))
                })?,
            });
        }
        return Ok(match merged {
            Some(k) => Loaded::Found(Box::new(k)),
            None => Loaded::Missing(format!(
                "none of the KUBECONFIG files exists ({})",
                value.to_string_lossy()
            )),
        });
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.map(|h| h.join(".kube").join("config")) {
        Some(p) if p.exists() => read(&p).map(|k| Loaded::Found(Box::new(k))),
        Some(p) => Ok(Loaded::Missing(format!(
            "KUBECONFIG is not set and {} does not exist",
            p.display()
        ))),
        None => Ok(Loaded::Missing(
            "KUBECONFIG is not set and there is no home directory".into(),
        )),
    }
}

/// One kubeconfig file; errors say which file and, for YAML, where in it.
fn read(path: &Path) -> Result<Kubeconfig> {
    Kubeconfig::read_from(path).map_err(|e| {
        let why = match &e {
            KubeconfigError::ReadConfig(io, _) => format!("cannot read it: {io}"),
            KubeconfigError::Parse(p) => format!("not a valid kubeconfig: {p}"),
            other => other.to_string(),
        };
        Error::input(format!("kubeconfig {}: {why}", path.display()))
            .hint("fix the file, or point --kubeconfig / KUBECONFIG at another one")
    })
}

impl Loaded {
    pub fn config(&self) -> Option<&Kubeconfig> {
        match self {
            Loaded::Found(k) => Some(k),
            Loaded::Missing(_) => None,
        }
    }

    /// The context a command uses: `--context`, else the current one.
    pub fn context(&self, g: &Global) -> Option<String> {
        g.context
            .clone()
            .or_else(|| self.config().and_then(|k| k.current_context.clone()))
    }

    /// The namespace of a run: `-n`, then hvdctl.yaml's, then the context's, then `default`.
    pub fn namespace(&self, g: &Global, app_ns: Option<&str>) -> Result<String> {
        namespace_of(g, app_ns, self.config(), self.context(g).as_deref())
    }
}

/// The namespace: `-n`, then `app_ns`, then context `ctx`'s in `kc`, then `default`.
pub fn namespace_of(
    g: &Global,
    app_ns: Option<&str>,
    kc: Option<&Kubeconfig>,
    ctx: Option<&str>,
) -> Result<String> {
    if let Some(ns) = g.namespace.as_deref().or(app_ns) {
        if !crate::app::validate::is_dns1123_label(ns) {
            return Err(Error::input(format!("-n {ns}: not a valid namespace name")));
        }
        return Ok(ns.to_string());
    }
    let ns = kc
        .zip(ctx)
        .and_then(|(kc, name)| kc.contexts.iter().find(|c| c.name == name).cloned())
        .and_then(|c| c.context)
        .and_then(|c| c.namespace);
    Ok(ns.unwrap_or_else(|| "default".into()))
}

/// The options selecting context `context` (and nothing else) as kubectl's flags do.
pub fn options(context: Option<String>) -> KubeConfigOptions {
    KubeConfigOptions {
        context,
        cluster: None,
        user: None,
    }
}
