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

const FIX: &str = "fix the file, or point --kubeconfig / KUBECONFIG at another one";

/// One kubeconfig file; errors say which file and, for YAML, where in it. The bytes are read
/// through [`crate::files`] (a regular file, at most 16 MiB, never a hang on a FIFO) and
/// handed to kube as text, with what `Kubeconfig::read_from` does besides: a UTF-16 or UTF-8
/// byte order mark decoded, relative file names made absolute against the file's directory.
fn read(path: &Path) -> Result<Kubeconfig> {
    let bytes = crate::files::read(path, crate::files::KUBECONFIG)
        .map_err(|r| r.input_error(path, crate::files::KUBECONFIG).hint(FIX))?;
    parse(bytes, path)
}

/// A kubeconfig's bytes, read from `path` (named in errors, and the directory its relative
/// file names are taken from): what [`read`] does after reading.
pub fn parse(bytes: Vec<u8>, path: &Path) -> Result<Kubeconfig> {
    let text = decode(bytes).map_err(|why| {
        Error::input(format!(
            "kubeconfig {}: cannot read it: {why}",
            path.display()
        ))
        .hint(FIX)
    })?;
    let mut kc = Kubeconfig::from_yaml(&text).map_err(|e| {
        let why = match &e {
            KubeconfigError::Parse(p) => format!("not a valid kubeconfig: {p}"),
            other => other.to_string(),
        };
        Error::input(format!("kubeconfig {}: {why}", path.display())).hint(FIX)
    })?;
    if let Some(dir) = path.parent() {
        absolute_names(&mut kc, dir);
    }
    Ok(kc)
}

/// A kubeconfig's bytes as text, as kube reads them: UTF-16 (LE or BE) after its byte order
/// mark, else UTF-8 (a byte order mark dropped).
fn decode(bytes: Vec<u8>) -> std::result::Result<String, &'static str> {
    let utf16 = |b: &[u8], from: fn([u8; 2]) -> u16| {
        let units: Vec<u16> = b
            .chunks(2)
            .map(|c| from([c[0], c.get(1).copied().unwrap_or(0)]))
            .collect();
        String::from_utf16(&units).map_err(|_| "not valid UTF-16")
    };
    match bytes.as_slice() {
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes),
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8(rest.to_vec()).map_err(|_| "not UTF-8"),
        _ => String::from_utf8(bytes).map_err(|_| "not UTF-8"),
    }
}

/// The files a kubeconfig names, relative to its own directory, made absolute (as kube's
/// `Kubeconfig::read_from` and client-go do; an exec command only when it holds a `/`).
fn absolute_names(kc: &mut Kubeconfig, dir: &Path) {
    let abs = |name: &mut Option<String>| {
        if let Some(n) = name.as_deref()
            && Path::new(n).is_relative()
            && let Some(a) = dir.join(n).to_str()
        {
            *name = Some(a.to_string());
        }
    };
    for c in kc.clusters.iter_mut().filter_map(|n| n.cluster.as_mut()) {
        abs(&mut c.certificate_authority);
    }
    for a in kc
        .auth_infos
        .iter_mut()
        .filter_map(|n| n.auth_info.as_mut())
    {
        abs(&mut a.client_certificate);
        abs(&mut a.client_key);
        abs(&mut a.token_file);
        if let Some(exec) = a.exec.as_mut()
            && exec
                .command
                .as_deref()
                .is_some_and(|c| c.contains(std::path::MAIN_SEPARATOR))
        {
            abs(&mut exec.command);
        }
    }
}

/// The files context `context` of `kc` names (its cluster's CA, its user's client
/// certificate, key and token file), checked through [`crate::files`] before kube reads
/// them: each must be a regular file of at most 1 MiB, else bad input naming it.
pub fn check_named_files(kc: &Kubeconfig, context: &str) -> Result<()> {
    let Some(ctx) = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
    else {
        return Ok(());
    };
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref());
    let user = ctx.user.as_deref().and_then(|u| {
        kc.auth_infos
            .iter()
            .find(|a| a.name == u)
            .and_then(|a| a.auth_info.as_ref())
    });
    let names = [
        (
            "certificate-authority",
            cluster.and_then(|c| c.certificate_authority.as_deref()),
        ),
        (
            "client-certificate",
            user.and_then(|u| u.client_certificate.as_deref()),
        ),
        ("client-key", user.and_then(|u| u.client_key.as_deref())),
        ("tokenFile", user.and_then(|u| u.token_file.as_deref())),
    ];
    for (key, name) in names {
        let Some(name) = name else { continue };
        let kind = crate::files::KUBECONFIG_FILE;
        crate::files::read(Path::new(name), kind).map_err(|r| {
            r.error(Path::new(name), kind)
                .context(format!("kubeconfig context `{context}`: {key}"))
                .hint(FIX)
        })?;
    }
    Ok(())
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
    fn a_kubeconfig_is_read_as_kube_reads_it_and_its_files_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("config");
        let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://h', certificate-authority: ca.pem}\nusers:\n- name: u\n  user: {client-key: /abs/key.pem, exec: {command: ./bin/get-token, apiVersion: client.authentication.k8s.io/v1}}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n";
        // UTF-16 with its byte order mark, as kube reads it.
        let mut utf16 = vec![0xFF, 0xFE];
        utf16.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
        std::fs::write(&p, utf16).unwrap();
        let kc = read(&p).unwrap();
        let ca = kc.clusters[0]
            .cluster
            .as_ref()
            .unwrap()
            .certificate_authority
            .clone();
        assert_eq!(ca.as_deref(), tmp.path().join("ca.pem").to_str());
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_key.as_deref(), Some("/abs/key.pem"));
        let exec = user.exec.as_ref().unwrap().command.clone().unwrap();
        assert_eq!(exec, tmp.path().join("./bin/get-token").to_str().unwrap());
        // The CA it names is a FIFO: refused at once, naming the key and the file.
        let ca = tmp.path().join("ca.pem");
        let c = std::ffi::CString::new(ca.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = check_named_files(&kc, "x").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message
                .starts_with("kubeconfig context `x`: certificate-authority: ")
                && e.message
                    .contains("ca.pem is a FIFO (named pipe), not a regular file"),
            "{}",
            e.message
        );
    }

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
