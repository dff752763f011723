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
    let loaded = load_files(g)?;
    if let Some(ctx) = &g.context {
        check_context(&loaded, ctx)?;
    }
    Ok(loaded)
}

/// `--context NAME` must name a context of the kubeconfig: checked before anything uses it,
/// so a dry run does not quietly fall back to `default` and no lookup answers "not found".
fn check_context(loaded: &Loaded, ctx: &str) -> Result<()> {
    let kc = match loaded {
        Loaded::Missing(looked) => {
            return Err(Error::input(format!(
                "context `{ctx}` (--context) cannot be used: no kubeconfig: {looked}"
            ))
            .hint("point --kubeconfig or KUBECONFIG at the file that has this context"));
        }
        Loaded::Found(kc) => kc,
    };
    let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
    if names.contains(&ctx) {
        return Ok(());
    }
    let e = Error::input(format!("context `{ctx}` is not in the kubeconfig"));
    Err(match crate::app::load::did_you_mean(ctx, &names) {
        _ if names.is_empty() => e.hint("the kubeconfig defines no contexts"),
        Some(s) => e.hint(format!(
            "did you mean `{s}`? (contexts: {})",
            names.join(", ")
        )),
        None => e.hint(format!("pick one with --context: {}", names.join(", "))),
    })
}

/// The kubeconfig files, merged, without looking at `--context`.
fn load_files(g: &Global) -> Result<Loaded> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_flag_must_name_a_context() {
        let kc = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\ncontexts:\n- name: real\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let found = Loaded::Found(Box::new(kc));
        assert!(check_context(&found, "real").is_ok());
        let e = check_context(&found, "reel").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.message, "context `reel` is not in the kubeconfig");
        assert!(e.hint.unwrap().starts_with("did you mean `real`?"));
        let e = check_context(&Loaded::Missing("no file here".into()), "x").unwrap_err();
        assert_eq!(
            e.message,
            "context `x` (--context) cannot be used: no kubeconfig: no file here"
        );
    }
}
