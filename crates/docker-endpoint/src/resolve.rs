//! From the environment and the Docker config directory to an [`Endpoint`].

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{DEFAULT_HOST, Error, Result};

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A unix socket path.
    Unix(PathBuf),
    /// `host:port` over TCP (with or without TLS: see [`Endpoint::tls`]).
    Tcp(String),
    /// A daemon reached through `ssh … docker system dial-stdio`.
    Ssh(SshTarget),
}

/// `ssh://[user@]host[:port][/socket]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The daemon's socket on the remote machine, when not the remote CLI's default.
    pub socket: Option<String>,
}

impl SshTarget {
    /// The `ssh` arguments that run the remote CLI's `dial-stdio` (what the docker CLI runs).
    pub fn ssh_args(&self) -> Vec<String> {
        let mut a = vec![
            "-o".to_string(),
            "ConnectTimeout=30".to_string(),
            "-T".into(),
        ];
        if let Some(u) = &self.user {
            a.extend(["-l".to_string(), u.clone()]);
        }
        if let Some(p) = self.port {
            a.extend(["-p".to_string(), p.to_string()]);
        }
        a.extend(["--".to_string(), self.host.clone(), "docker".into()]);
        if let Some(s) = &self.socket {
            a.push(format!("--host=unix://{s}"));
        }
        a.extend(["system".to_string(), "dial-stdio".into()]);
        a
    }
}

/// The TLS material of a TCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The directory the files are read from (`DOCKER_CERT_PATH`, the config directory, or the
    /// context's TLS directory).
    pub dir: PathBuf,
    /// The CA that signed the daemon's certificate; absent: the system's roots.
    pub ca: Option<PathBuf>,
    /// The client certificate and its key, sent when the daemon asks for one.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// The files present in `dir` (`ca.pem`, `cert.pem`, `key.pem`).
    fn in_dir(dir: &Path) -> TlsFiles {
        let file = |n: &str| Some(dir.join(n)).filter(|p| p.is_file());
        TlsFiles {
            dir: dir.to_path_buf(),
            ca: file("ca.pem"),
            cert: file("cert.pem"),
            key: file("key.pem"),
        }
    }
}

/// What named the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Nothing did: the default socket.
    Default,
    /// `DOCKER_HOST`.
    Env,
    /// A Docker context, by name (from `DOCKER_CONTEXT` or the config's `currentContext`).
    Context { name: String, from: &'static str },
}

/// A daemon to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: Host,
    /// TLS on a TCP host; `None` is plain TCP (and always for unix and ssh).
    pub tls: Option<TlsFiles>,
    pub source: Source,
}

impl Endpoint {
    /// The endpoint the docker CLI would use here (see the crate's documentation).
    pub fn from_env() -> Result<Endpoint> {
        Endpoint::resolve(&|k| std::env::var(k).ok())
    }

    /// [`Endpoint::from_env`] with the environment read through `env`.
    pub fn resolve(env: &dyn Fn(&str) -> Option<String>) -> Result<Endpoint> {
        let get = |k: &str| {
            env(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let config_dir = config_dir(env)?;
        if let Some(host) = get("DOCKER_HOST") {
            let tls = match (get("DOCKER_TLS_VERIFY"), get("DOCKER_TLS")) {
                (Some(_), _) => {
                    let dir = get("DOCKER_CERT_PATH")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| config_dir.clone());
                    Some(TlsFiles::in_dir(&dir))
                }
                (None, Some(_)) => {
                    return Err(Error::input(format!(
                        "DOCKER_HOST={} with DOCKER_TLS but without DOCKER_TLS_VERIFY: \
                         hvdctl does not talk TLS to a daemon it cannot verify",
                        crate::redact::userinfo(&host)
                    ))
                    .hint("set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to the directory holding ca.pem, cert.pem and key.pem"));
                }
                (None, None) => None,
            };
            let (host, tls) = parse_host(&host, tls).map_err(|e| Error {
                message: format!(
                    "DOCKER_HOST={}: {}",
                    crate::redact::userinfo(&host),
                    e.message
                ),
                ..e
            })?;
            return Ok(Endpoint {
                host,
                tls,
                source: Source::Env,
            });
        }
        let (name, from) = match get("DOCKER_CONTEXT") {
            Some(n) => (n, "DOCKER_CONTEXT"),
            None => match current_context(&config_dir)? {
                Some(n) => (n, "currentContext"),
                None => (String::new(), ""),
            },
        };
        if name.is_empty() || name == "default" {
            let (host, tls) = parse_host(DEFAULT_HOST, None)?;
            return Ok(Endpoint {
                host,
                tls,
                source: Source::Default,
            });
        }
        context(&config_dir, &name, from)
    }

    /// An endpoint for `host` (a `DOCKER_HOST` value), without TLS.
    pub fn parse(host: &str) -> Result<Endpoint> {
        let (host, tls) = parse_host(host, None)?;
        Ok(Endpoint {
            host,
            tls,
            source: Source::Env,
        })
    }

    /// The same endpoint with TLS from `files`.
    pub fn with_tls(mut self, files: TlsFiles) -> Endpoint {
        if let Host::Tcp(_) = self.host {
            self.tls = Some(files);
        }
        self
    }

    /// True when the daemon runs on this machine (a unix socket or a loopback address).
    pub fn is_local(&self) -> bool {
        match &self.host {
            Host::Unix(_) => true,
            Host::Tcp(a) => {
                a.starts_with("127.") || a.starts_with("localhost:") || a.starts_with("[::1]")
            }
            Host::Ssh(_) => false,
        }
    }

    /// The address and how it was chosen, e.g. `tcp://127.0.0.1:2376 (TLS, context
    /// "minikube")`.
    pub fn describe(&self) -> String {
        let mut notes = Vec::new();
        if let Some(t) = &self.tls {
            notes.push(format!("TLS, certificates from {}", t.dir.display()));
        }
        if let Source::Context { name, from } = &self.source {
            notes.push(format!("context {name:?} from {from}"));
        }
        if notes.is_empty() {
            self.to_string()
        } else {
            format!("{self} ({})", notes.join("; "))
        }
    }
}

impl fmt::Display for Endpoint {
    /// The address as a `DOCKER_HOST` value, its userinfo masked ([`crate::redact`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.unmasked();
        f.write_str(&crate::redact::userinfo(&shown))
    }
}

impl Endpoint {
    /// The address as written, userinfo and all: never for people.
    fn unmasked(&self) -> String {
        let mut f = String::new();
        let _ = self.write_unmasked(&mut f);
        f
    }

    fn write_unmasked(&self, f: &mut String) -> fmt::Result {
        use std::fmt::Write;
        match &self.host {
            Host::Unix(p) => write!(f, "unix://{}", p.display()),
            Host::Tcp(a) => write!(f, "tcp://{a}"),
            Host::Ssh(s) => {
                write!(f, "ssh://")?;
                if let Some(u) = &s.user {
                    write!(f, "{u}@")?;
                }
                write!(f, "{}", s.host)?;
                if let Some(p) = s.port {
                    write!(f, ":{p}")?;
                }
                if let Some(p) = &s.socket {
                    write!(f, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

/// `DOCKER_CONFIG`, else `~/.docker`.
fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf> {
    if let Some(d) = env("DOCKER_CONFIG").filter(|v| !v.trim().is_empty()) {
        return Ok(PathBuf::from(d));
    }
    match env("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(Path::new(&h).join(".docker")),
        None => Ok(PathBuf::from(".docker")),
    }
}

/// `currentContext` of `config.json` in `dir`, if the file exists and names one.
fn current_context(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::input(format!("reading {}: {e}", path.display()))),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::input(format!("{}: not valid JSON: {e}", path.display())))?;
    Ok(v.get("currentContext")
        .and_then(|c| c.as_str())
        .map(str::to_string)
        .filter(|c| !c.is_empty()))
}

/// The context's directory name: the hex SHA-256 of its name.
pub(crate) fn context_id(name: &str) -> String {
    Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `docker` endpoint of the context `name`.
fn context(config_dir: &Path, name: &str, from: &'static str) -> Result<Endpoint> {
    let id = context_id(name);
    let meta = config_dir
        .join("contexts")
        .join("meta")
        .join(&id)
        .join("meta.json");
    let text = match std::fs::read_to_string(&meta) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::input(format!(
                "Docker context {name:?} (from {from}) does not exist: no {}",
                meta.display()
            ))
            .hint("`docker context ls` lists the contexts; `docker context use default` goes back to the local daemon"));
        }
        Err(e) => {
            return Err(Error::input(format!(
                "Docker context {name:?}: reading {}: {e}",
                meta.display()
            )));
        }
    };
    from_meta(config_dir, name, from, &meta, &text)
}

/// The endpoint context `name`'s `meta.json` (at `meta`, holding `text`) names: its docker
/// host, and the TLS files of the context's directory under `config_dir`.
pub(crate) fn from_meta(
    config_dir: &Path,
    name: &str,
    from: &'static str,
    meta: &Path,
    text: &str,
) -> Result<Endpoint> {
    let id = context_id(name);
    let source = Source::Context {
        name: name.to_string(),
        from,
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        Error::input(format!(
            "Docker context {name:?}: {} is not valid JSON: {e}",
            meta.display()
        ))
    })?;
    let docker = v.get("Endpoints").and_then(|e| e.get("docker"));
    let host = docker
        .and_then(|d| d.get("Host"))
        .and_then(|h| h.as_str())
        .unwrap_or("")
        .trim();
    if host.is_empty() {
        return Err(Error::input(format!(
            "Docker context {name:?}: {} names no docker endpoint host",
            meta.display()
        )));
    }
    if docker
        .and_then(|d| d.get("SkipTLSVerify"))
        .and_then(|s| s.as_bool())
        == Some(true)
    {
        return Err(Error::input(format!(
            "Docker context {name:?} skips TLS verification: hvdctl does not talk TLS to a daemon it cannot verify"
        ))
        .hint(format!(
            "recreate the context with the daemon's CA: docker context create {name} --docker host={host},ca=…,cert=…,key=…"
        )));
    }
    let tls_dir = config_dir
        .join("contexts")
        .join("tls")
        .join(&id)
        .join("docker");
    let files = TlsFiles::in_dir(&tls_dir);
    let has_tls = files.ca.is_some() || files.cert.is_some() || files.key.is_some();
    let (host, tls) = parse_host(host, has_tls.then_some(files)).map_err(|e| Error {
        message: format!(
            "Docker context {name:?}: host {}: {}",
            crate::redact::userinfo(host),
            e.message
        ),
        ..e
    })?;
    Ok(Endpoint { host, tls, source })
}

/// Parses a host as the docker CLI does; `tls` is kept for TCP hosts only.
fn parse_host(s: &str, tls: Option<TlsFiles>) -> Result<(Host, Option<TlsFiles>)> {
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("tcp".to_string(), s),
    };
    match scheme.as_str() {
        "unix" => {
            if rest.is_empty() {
                return Err(Error::input("the socket path is missing"));
            }
            Ok((Host::Unix(PathBuf::from(rest)), None))
        }
        "tcp" | "http" | "https" => {
            let addr = rest.trim_end_matches('/');
            if addr.is_empty() {
                return Err(Error::input("the address is missing"));
            }
            if addr.contains('@') {
                return Err(Error::input(
                    "a user or password in a tcp:// address is not supported: the Docker API over TCP has no login",
                )
                .hint("remove `user:password@`; a daemon on TCP is secured with TLS (DOCKER_TLS_VERIFY=1, DOCKER_CERT_PATH)"));
            }
            if addr.contains('/') {
                return Err(Error::input(format!(
                    "{addr:?}: a TCP address is host:port, without a path"
                )));
            }
            let tls = if scheme == "https" && tls.is_none() {
                return Err(Error::input(
                    "https:// needs DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH",
                ));
            } else {
                tls
            };
            let has_port = addr
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                && !addr.ends_with(']');
            let addr = if has_port {
                addr.to_string()
            } else if tls.is_some() {
                format!("{addr}:2376")
            } else {
                format!("{addr}:2375")
            };
            Ok((Host::Tcp(addr), tls))
        }
        "ssh" => Ok((Host::Ssh(parse_ssh(rest)?), None)),
        other => Err(Error::input(format!(
            "{other}:// is not supported: use unix:///path/to/docker.sock, tcp://host:port or ssh://[user@]host[:port]"
        ))),
    }
}

fn parse_ssh(rest: &str) -> Result<SshTarget> {
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if user.is_some_and(|u| u.contains(':')) {
        return Err(Error::input(
            "a password in an ssh:// address is not supported: use an ssh key or agent",
        ));
    }
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        let (h, tail) = h
            .split_once(']')
            .ok_or_else(|| Error::input("an unclosed [ in the ssh host"))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p),
            None if tail.is_empty() => None,
            None => return Err(Error::input("unexpected text after the ssh host")),
        };
        (h, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(Error::input("the ssh host is missing"));
    }
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .map_err(|_| Error::input(format!("{p:?} is not a port")))
        })
        .transpose()?;
    let socket = path.filter(|p| *p != "/").map(str::to_string);
    Ok(SshTarget {
        user: user.filter(|u| !u.is_empty()).map(str::to_string),
        host: host.to_string(),
        port,
        socket,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn hosts_as_the_cli_reads_them() {
        let tcp = |s| parse_host(s, None).unwrap().0;
        assert_eq!(tcp("tcp://h"), Host::Tcp("h:2375".into()));
        assert_eq!(tcp("h:1234"), Host::Tcp("h:1234".into()));
        assert_eq!(tcp("tcp://[::1]"), Host::Tcp("[::1]:2375".into()));
        assert_eq!(tcp("unix:///s.sock"), Host::Unix("/s.sock".into()));
        let files = TlsFiles::in_dir(Path::new("/nonexistent"));
        assert_eq!(
            parse_host("tcp://h", Some(files.clone())).unwrap().0,
            Host::Tcp("h:2376".into())
        );
        assert_eq!(parse_host("unix:///s", Some(files)).unwrap().1, None);
        assert_eq!(
            tcp("ssh://me@build.example:2222/run/docker.sock"),
            Host::Ssh(SshTarget {
                user: Some("me".into()),
                host: "build.example".into(),
                port: Some(2222),
                socket: Some("/run/docker.sock".into())
            })
        );
        let Host::Ssh(t) = tcp("ssh://box") else {
            panic!()
        };
        assert_eq!(
            t.ssh_args().join(" "),
            "-o ConnectTimeout=30 -T -- box docker system dial-stdio"
        );
        for bad in [
            "fd://",
            "npipe:////./pipe/x",
            "unix://",
            "tcp://",
            "ssh://me:pw@h",
            "ssh://h:x",
            "tcp://h:1/p",
        ] {
            let e = parse_host(bad, None).unwrap_err();
            assert!(e.bad_input, "{bad}: {e}");
        }
    }

    #[test]
    fn docker_host_wins_and_tls_comes_from_the_cert_path() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        let d = dir.path().to_str().unwrap();
        let e = Endpoint::resolve(&env_of(&[
            ("DOCKER_HOST", "tcp://10.0.0.1"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CERT_PATH", d),
            ("DOCKER_CONTEXT", "nowhere"),
        ]))
        .unwrap();
        assert_eq!(e.host, Host::Tcp("10.0.0.1:2376".into()));
        assert_eq!(e.source, Source::Env);
        let tls = e.tls.unwrap();
        assert_eq!(tls.ca, Some(dir.path().join("ca.pem")));
        assert_eq!(tls.key, Some(dir.path().join("key.pem")));

        // Without DOCKER_CERT_PATH: the config directory.
        let e = Endpoint::resolve(&env_of(&[
            ("DOCKER_HOST", "tcp://h:1"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CONFIG", d),
        ]))
        .unwrap();
        assert_eq!(e.tls.unwrap().dir, dir.path());

        let e = Endpoint::resolve(&env_of(&[("DOCKER_HOST", "tcp://h"), ("DOCKER_TLS", "1")]))
            .unwrap_err();
        assert!(
            e.bad_input && e.message.contains("DOCKER_TLS_VERIFY"),
            "{e}"
        );
        let e = Endpoint::resolve(&env_of(&[("DOCKER_HOST", "bogus://x")])).unwrap_err();
        assert!(e.message.starts_with("DOCKER_HOST=bogus://x: "), "{e}");
    }

    #[test]
    fn contexts_by_name_from_the_env_or_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path();
        let write_context = |name: &str, meta: &str| {
            let m = cfg.join("contexts/meta").join(context_id(name));
            std::fs::create_dir_all(&m).unwrap();
            std::fs::write(m.join("meta.json"), meta).unwrap();
        };
        write_context(
            "remote",
            r#"{"Name":"remote","Metadata":{},"Endpoints":{"docker":{"Host":"tcp://10.1.2.3","SkipTLSVerify":false}}}"#,
        );
        let tls = cfg
            .join("contexts/tls")
            .join(context_id("remote"))
            .join("docker");
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::write(tls.join("ca.pem"), "x").unwrap();
        write_context(
            "builder",
            r#"{"Name":"builder","Endpoints":{"docker":{"Host":"ssh://ci@builder"}}}"#,
        );
        let c = cfg.to_str().unwrap();

        let e = Endpoint::resolve(&env_of(&[
            ("DOCKER_CONFIG", c),
            ("DOCKER_CONTEXT", "remote"),
        ]))
        .unwrap();
        assert_eq!(e.host, Host::Tcp("10.1.2.3:2376".into()));
        assert_eq!(e.tls.as_ref().unwrap().ca, Some(tls.join("ca.pem")));
        assert_eq!(e.tls.as_ref().unwrap().cert, None);
        assert!(
            e.describe()
                .contains("context \"remote\" from DOCKER_CONTEXT")
        );

        // currentContext in config.json.
        std::fs::write(cfg.join("config.json"), r#"{"currentContext":"builder"}"#).unwrap();
        let e = Endpoint::resolve(&env_of(&[("DOCKER_CONFIG", c)])).unwrap();
        assert!(matches!(e.host, Host::Ssh(_)), "{e:?}");
        assert_eq!(
            e.source,
            Source::Context {
                name: "builder".into(),
                from: "currentContext"
            }
        );
        // DOCKER_CONTEXT=default: the default socket.
        let e = Endpoint::resolve(&env_of(&[
            ("DOCKER_CONFIG", c),
            ("DOCKER_CONTEXT", "default"),
        ]))
        .unwrap();
        assert_eq!(e.to_string(), DEFAULT_HOST);

        // An unknown context: an input error naming it and where its name came from.
        let e = Endpoint::resolve(&env_of(&[("DOCKER_CONFIG", c), ("DOCKER_CONTEXT", "gone")]))
            .unwrap_err();
        assert!(e.bad_input);
        assert!(
            e.message.contains("\"gone\"") && e.message.contains("DOCKER_CONTEXT"),
            "{e}"
        );
        // A malformed config.json is named.
        std::fs::write(cfg.join("config.json"), "{").unwrap();
        let e = Endpoint::resolve(&env_of(&[("DOCKER_CONFIG", c)])).unwrap_err();
        assert!(e.message.contains("config.json"), "{e}");
    }

    #[test]
    fn the_context_id_is_the_sha256_of_the_name() {
        // The known SHA-256 test vector: the directory name is the hex digest of the name.
        assert_eq!(
            context_id("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
