//! Reading the kubeconfig the way kubectl does (`--kubeconfig`, else `$KUBECONFIG` with several
//! files, else `~/.kube/config`), without contacting any server.

use crate::cli::Global;
use crate::error::{Error, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Loads the merged kubeconfig. `Ok(None)` when there is none at all.
pub fn load(g: &Global) -> Result<Option<Kubeconfig>> {
    if let Some(path) = &g.kubeconfig {
        return Kubeconfig::read_from(path)
            .map(Some)
            .map_err(|e| Error::input(format!("--kubeconfig {}: {e}", path.display())));
    }
    match Kubeconfig::read() {
        Ok(k) => Ok(Some(k)),
        Err(e) => {
            let env_set = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
            if env_set {
                Err(Error::input(format!("KUBECONFIG: {e}")))
            } else {
                Ok(None)
            }
        }
    }
}

/// The options selecting context (and nothing else) as kubectl's flags do.
pub fn options(g: &Global) -> KubeConfigOptions {
    KubeConfigOptions {
        context: g.context.clone(),
        cluster: None,
        user: None,
    }
}

/// The namespace of a run: `-n`, then hvdctl.yaml's, then the context's, then `default`.
pub fn namespace(g: &Global, app_ns: Option<&str>) -> Result<String> {
    if let Some(ns) = g.namespace.as_deref().or(app_ns) {
        if !crate::app::validate::is_dns1123_label(ns) {
            return Err(Error::input(format!("-n {ns}: not a valid namespace name")));
        }
        return Ok(ns.to_string());
    }
    let Some(kc) = load(g)? else {
        return Ok("default".into());
    };
    let ctx_name = g.context.clone().or(kc.current_context.clone());
    let ns = ctx_name
        .and_then(|name| kc.contexts.iter().find(|c| c.name == name).cloned())
        .and_then(|c| c.context)
        .and_then(|c| c.namespace);
    Ok(ns.unwrap_or_else(|| "default".into()))
}
