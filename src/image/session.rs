//! A BuildKit session serving the build context ([`super::filesync`]), build secrets
//! (`--secret id=…,src=…`) and ssh agents (`--ssh`, [`super::sshforward`]).
//!
//! `POST /session` with `Upgrade: h2c` turns the connection around: the daemon becomes an
//! HTTP/2 gRPC client of hvdctl on it, calling the methods hvdctl names in
//! `X-Docker-Expose-Session-Grpc-Method`. They are served by hand:
//! `grpc.health.v1.Health/Check` (BuildKit checks the session is alive),
//! `moby.buildkit.secrets.v1.Secrets/GetSecret` (the file's bytes for an id; one-field
//! messages), `moby.filesync.v1.FileSync/DiffCopy` (the context, a bidirectional stream:
//! see [`super::filesync`]) and, with `--ssh`, `moby.sshforward.v1.SSH`'s `CheckAgent` and
//! `ForwardAgent` (see [`super::sshforward`]). The build names the session with
//! `session=<id>`. The session's shared key is a digest of the context directory's absolute path, as the Docker CLI's is:
//! the daemon keeps its copy of a context under it, and the next build of the same directory
//! only transfers what changed. Secret files are read before the build starts (a missing one
//! is exit 2) and never printed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use zeroize::Zeroizing;

use super::docker::{DockerClient, endpoint_error};
use crate::error::{Error, Result};

const HEALTH: &str = "/grpc.health.v1.Health/Check";
const GET_SECRET: &str = "/moby.buildkit.secrets.v1.Secrets/GetSecret";
use super::filesync::DIFF_COPY;
use super::proto::{Reply, Value, fields, put_varint, reply, status};
use super::sshforward::{self, CHECK_AGENT, FORWARD_AGENT, SshSpec};

/// A `--secret id=ID,src=PATH` (also `source=`, `type=file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSpec {
    pub id: String,
    pub src: PathBuf,
}

impl SecretSpec {
    pub fn parse(s: &str) -> Result<SecretSpec> {
        let (mut id, mut src) = (None, None);
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::input(format!("--secret {s}: expected id=ID,src=PATH")))?;
            match k.trim() {
                "id" => id = Some(v.trim().to_string()),
                "src" | "source" => src = Some(PathBuf::from(v.trim())),
                "type" if v.trim() == "file" => {}
                other => {
                    return Err(Error::input(format!(
                        "--secret {s}: unknown key {other:?} (id, src and type=file are known)"
                    )));
                }
            }
        }
        match (id, src) {
            (Some(id), Some(src)) if !id.is_empty() => Ok(SecretSpec { id, src }),
            _ => Err(Error::input(format!(
                "--secret {s}: both id= and src= are needed"
            ))),
        }
    }
}

/// What a session serves besides the context, read and checked before the build starts.
#[derive(Default, Clone)]
pub(crate) struct Attached {
    /// The secrets' contents by id.
    pub secrets: HashMap<String, Zeroizing<Vec<u8>>>,
    /// The ssh agents' sockets by id.
    pub agents: HashMap<String, PathBuf>,
}

impl Attached {
    pub(crate) fn of(secrets: &[SecretSpec], ssh: &[SshSpec]) -> Result<Attached> {
        Ok(Attached {
            secrets: read_secrets(secrets)?,
            agents: sshforward::agents(ssh)?,
        })
    }

    /// The flags that asked for them (for "… needs BuildKit"), if any.
    pub(crate) fn flags(&self) -> Option<&'static str> {
        match (self.secrets.is_empty(), self.agents.is_empty()) {
            (true, true) => None,
            (false, true) => Some("--secret"),
            (true, false) => Some("--ssh"),
            (false, false) => Some("--secret and --ssh"),
        }
    }
}

/// The secrets' contents by id, read now.
fn read_secrets(specs: &[SecretSpec]) -> Result<HashMap<String, Zeroizing<Vec<u8>>>> {
    let mut out = HashMap::new();
    for s in specs {
        let kind = crate::files::BUILD_SECRET;
        let data = crate::files::read(&s.src, kind).map_err(|r| {
            let e = r.error(&s.src, kind);
            Error::input(format!("--secret id={}: {}", s.id, e.message))
        })?;
        out.insert(s.id.clone(), Zeroizing::new(data));
    }
    Ok(out)
}

/// An open session; dropping it ends the session.
pub(crate) struct Session {
    pub id: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens a session on `docker` serving `attached` and, when given, the build context
/// (`transfer` counts what it sends).
pub(crate) async fn start(
    docker: &DockerClient,
    attached: Attached,
    dirs: Option<super::filesync::Dirs>,
    transfer: Arc<super::filesync::Transfer>,
) -> Result<Session> {
    let id: String = (0..25)
        .map(|_| char::from(b'a' + rand::random::<u8>() % 26))
        .collect();
    let mut req = hyper::Request::builder()
        .method(hyper::Method::POST)
        .uri(format!("/v{}/session", docker.api_version()))
        .header(hyper::header::HOST, "docker")
        .header(hyper::header::CONNECTION, "Upgrade")
        .header(hyper::header::UPGRADE, "h2c")
        .header("X-Docker-Expose-Session-Uuid", &id)
        .header("X-Docker-Expose-Session-Name", "hvdctl")
        .header(
            "X-Docker-Expose-Session-Sharedkey",
            dirs.as_ref()
                .map(|d| shared_key(&d.context))
                .unwrap_or_default(),
        );
    let mut methods = vec![HEALTH, GET_SECRET];
    if dirs.is_some() {
        methods.push(DIFF_COPY);
    }
    if !attached.agents.is_empty() {
        methods.extend([CHECK_AGENT, FORWARD_AGENT]);
    }
    for m in methods {
        req = req.header("X-Docker-Expose-Session-Grpc-Method", m);
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| Error::failure(format!("building the session request: {e}")))?;
    let fail = |e: &dyn std::fmt::Display| {
        Error::failure(format!(
            "opening a BuildKit session on the Docker daemon at {}: {e}",
            docker.host().describe()
        ))
    };
    let stream = docker.host().dial().await.map_err(endpoint_error)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let resp = sender.send_request(req).await.map_err(|e| fail(&e))?;
    if resp.status() != hyper::StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status().as_u16();
        let msg = super::docker::daemon_message(resp).await;
        return Err(fail(&format!("{msg} (HTTP {status})")));
    }
    let upgraded = hyper::upgrade::on(resp).await.map_err(|e| fail(&e))?;
    let secrets = Arc::new(attached.secrets);
    let agents = Arc::new(attached.agents);
    let dirs = dirs.map(Arc::new);
    let task = tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let (secrets, agents) = (secrets.clone(), agents.clone());
            let (dirs, transfer) = (dirs.clone(), transfer.clone());
            async move {
                Ok::<_, Infallible>(match (req.uri().path(), dirs) {
                    (DIFF_COPY, Some(d)) => super::filesync::serve(req, d, transfer),
                    (FORWARD_AGENT, _) => sshforward::forward(req, agents),
                    _ => serve(req, &secrets, &agents).await,
                })
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(upgraded, service)
            .await;
    });
    Ok(Session { id, task })
}

/// The key the daemon files its copy of a context under: a digest of the directory's
/// absolute path (the Docker CLI hashes its node id with the path).
fn shared_key(dir: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut h = Sha256::new();
    h.update(b"hvdctl-context:");
    h.update(std::os::unix::ffi::OsStrExt::as_bytes(abs.as_os_str()));
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The calls of one request message and one answer.
async fn serve(
    req: hyper::Request<Incoming>,
    secrets: &HashMap<String, Zeroizing<Vec<u8>>>,
    agents: &HashMap<String, PathBuf>,
) -> Reply {
    let path = req.uri().path().to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return status(13, "reading the request failed"),
    };
    // One gRPC frame: a compression flag, a big-endian length, the message.
    let msg = if body.len() >= 5 { &body[5..] } else { &[][..] };
    match path.as_str() {
        HEALTH => reply(&[0x08, 0x01]), // status: SERVING
        GET_SECRET => {
            let id = first_string(msg);
            match secrets.get(&id) {
                Some(data) => {
                    let mut m = Vec::with_capacity(data.len() + 10);
                    m.push(0x0a); // field 1 (data), length-delimited
                    put_varint(&mut m, data.len() as u64);
                    m.extend_from_slice(data);
                    let r = reply(&m);
                    // The copy made for the frame is wiped too.
                    zeroize::Zeroize::zeroize(&mut m);
                    r
                }
                None => status(5, &format!("secret {id} not found")),
            }
        }
        CHECK_AGENT => sshforward::check(msg, agents),
        _ => status(12, "not served by hvdctl"),
    }
}

/// Field 1 of a message as a string (the secret's id).
fn first_string(b: &[u8]) -> String {
    fields(b)
        .into_iter()
        .find_map(|f| match f {
            (1, Value::Bytes(s)) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_flags() {
        assert_eq!(
            SecretSpec::parse("id=pip,src=/tmp/pip.conf").unwrap(),
            SecretSpec {
                id: "pip".into(),
                src: "/tmp/pip.conf".into()
            }
        );
        assert!(SecretSpec::parse("type=file,id=a,source=b").is_ok());
        for bad in ["id=a", "src=b", "id=,src=b", "pip", "id=a,src=b,env=X"] {
            assert_eq!(SecretSpec::parse(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn the_secret_id_is_read_from_the_request() {
        // GetSecretRequest { ID: "token", annotations: {} }
        let mut m = vec![0x0a, 5];
        m.extend_from_slice(b"token");
        assert_eq!(first_string(&m), "token");
        assert_eq!(first_string(&[]), "");
    }
}
