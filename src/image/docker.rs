//! The connection to the Docker daemon.
//!
//! `DOCKER_HOST` decides where: `unix:///path/to/socket` or `tcp://host:port` (also
//! `http://`), unset or empty meaning `unix:///var/run/docker.sock`. The API version is
//! negotiated with the daemon on connect (Debian's docker.io 20.10 speaks 1.41), so the
//! first request already tells whether a daemon answers; if none does, the error names the
//! address tried and how to start one.
//!
//! Most calls go through [`bollard`]. A few need the daemon's JSON stream verbatim (push
//! progress carries per-layer ids that bollard's typed messages drop); those use
//! [`DockerClient::json_stream`], a plain HTTP/1.1 request on the same socket.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The daemon address used when `DOCKER_HOST` is unset.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// How long connecting and negotiating the API version may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a request may wait for the daemon's response headers. Builds stream their
/// output as they go, but the classic builder answers only once it has the whole context.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerHost {
    /// A unix socket path.
    Unix(PathBuf),
    /// `host:port` over plain TCP.
    Tcp(String),
}

impl DockerHost {
    /// From `DOCKER_HOST`, or the default socket.
    pub fn from_env() -> Result<DockerHost> {
        match std::env::var("DOCKER_HOST") {
            Ok(v) if !v.trim().is_empty() => DockerHost::parse(v.trim()),
            _ => DockerHost::parse(DEFAULT_DOCKER_HOST),
        }
    }

    /// Parses a `DOCKER_HOST` value.
    pub fn parse(s: &str) -> Result<DockerHost> {
        if let Some(path) = s.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(Error::input(format!(
                    "DOCKER_HOST={s}: the socket path is missing"
                )));
            }
            return Ok(DockerHost::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = s
            .strip_prefix("tcp://")
            .or_else(|| s.strip_prefix("http://"))
        {
            let addr = rest.trim_end_matches('/');
            if addr.is_empty() {
                return Err(Error::input(format!(
                    "DOCKER_HOST={s}: the address is missing"
                )));
            }
            if std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty()) {
                return Err(Error::input(format!(
                    "DOCKER_HOST={s} with DOCKER_TLS_VERIFY set: hvdctl talks to the daemon without TLS only"
                ))
                .hint("unset DOCKER_TLS_VERIFY, or reach the daemon through its unix socket or an ssh tunnel"));
            }
            // Docker's default port for plain TCP.
            let has_port = addr
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                && !addr.ends_with(']');
            let addr = if has_port {
                addr.to_string()
            } else {
                format!("{addr}:2375")
            };
            return Ok(DockerHost::Tcp(addr));
        }
        Err(Error::input(format!(
            "DOCKER_HOST={s} is not supported: use unix:///path/to/docker.sock or tcp://host:port"
        )))
    }
}

impl std::fmt::Display for DockerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DockerHost::Unix(p) => write!(f, "unix://{}", p.display()),
            DockerHost::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

/// A connected, version-negotiated Docker client.
#[derive(Debug, Clone)]
pub struct DockerClient {
    docker: bollard::Docker,
    host: DockerHost,
    api_version: String,
    server_version: String,
}

impl DockerClient {
    /// Connects to the daemon named by `DOCKER_HOST` (default `unix:///var/run/docker.sock`).
    pub async fn connect() -> Result<DockerClient> {
        DockerClient::connect_to(&DockerHost::from_env()?).await
    }

    /// Connects to `host` and negotiates the API version; fails with a clear message naming
    /// `host` when no daemon answers.
    pub async fn connect_to(host: &DockerHost) -> Result<DockerClient> {
        let unreachable = |why: String| {
            let mut hint = "start the Docker daemon (`sudo systemctl start docker`, or run `sudo dockerd`), \
                            or point DOCKER_HOST at one that runs (for hvdctl's tests: scripts/dev-services.sh)"
                .to_string();
            if why.to_lowercase().contains("permission denied") {
                hint = "add your user to the `docker` group (then log in again), or run with sudo"
                    .into();
            }
            Error::failure(format!(
                "cannot connect to the Docker daemon at {host}: {why}"
            ))
            .hint(hint)
        };
        let docker = match host {
            DockerHost::Unix(path) => {
                if !path.exists() {
                    return Err(unreachable("no such socket".into()));
                }
                bollard::Docker::connect_with_unix(
                    &path.to_string_lossy(),
                    CONNECT_TIMEOUT.as_secs(),
                    bollard::API_DEFAULT_VERSION,
                )
            }
            DockerHost::Tcp(addr) => bollard::Docker::connect_with_http(
                &format!("tcp://{addr}"),
                CONNECT_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            ),
        }
        .map_err(|e| unreachable(e.to_string()))?;
        let docker = docker
            .with_request_modifier(url_safe_registry_headers)
            .negotiate_version()
            .await
            .map_err(|e| unreachable(describe_bollard(&e)))?;
        let version = docker
            .version()
            .await
            .map_err(|e| unreachable(describe_bollard(&e)))?;
        let v = docker.client_version();
        let docker = docker.with_timeout(REQUEST_TIMEOUT);
        Ok(DockerClient {
            docker,
            host: host.clone(),
            api_version: format!("{}.{}", v.major_version, v.minor_version),
            server_version: version.version.unwrap_or_default(),
        })
    }

    /// The bollard client, for calls this module does not wrap.
    pub fn bollard(&self) -> &bollard::Docker {
        &self.docker
    }

    /// Where the daemon is.
    pub fn host(&self) -> &DockerHost {
        &self.host
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// The daemon's version, e.g. `20.10.24+dfsg1`.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// Sends a bodiless request to the Engine API (`path_and_query` without the version
    /// prefix, e.g. `/images/x/push?tag=y`) on a connection of its own.
    pub(crate) async fn request(
        &self,
        method: hyper::Method,
        path_and_query: &str,
        headers: &[(&str, String)],
    ) -> Result<hyper::Response<Incoming>> {
        let uri = format!("/v{}{}", self.api_version, path_and_query);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(&uri)
            .header(hyper::header::HOST, "docker")
            .header(
                hyper::header::USER_AGENT,
                concat!("hvdctl/", env!("CARGO_PKG_VERSION")),
            );
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| Error::failure(format!("building the request {uri}: {e}")))?;
        let fail = |e: &dyn std::fmt::Display| {
            Error::failure(format!(
                "talking to the Docker daemon at {}: {e}",
                self.host
            ))
        };
        match &self.host {
            DockerHost::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(|e| fail(&e))?;
                send(s, req).await
            }
            DockerHost::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a.as_str())
                    .await
                    .map_err(|e| fail(&e))?;
                send(s, req).await
            }
        }
        .map_err(|e| fail(&e))
    }

    /// [`DockerClient::request`] whose JSON-lines body is read as a stream of `T`. A non-2xx
    /// status is an error carrying the daemon's message.
    pub(crate) async fn json_stream<T: DeserializeOwned>(
        &self,
        method: hyper::Method,
        path_and_query: &str,
        headers: &[(&str, String)],
    ) -> Result<JsonLines<T>> {
        let resp = self.request(method, path_and_query, headers).await?;
        let status = resp.status();
        if !status.is_success() {
            let message = daemon_message(resp).await;
            return Err(Error::failure(format!(
                "{message} (HTTP {})",
                status.as_u16()
            )));
        }
        Ok(JsonLines {
            body: resp.into_body(),
            buf: BytesMut::new(),
            done: false,
            _t: std::marker::PhantomData,
        })
    }
}

/// The `message` of a daemon's error response (or its body as text).
pub(crate) async fn daemon_message(resp: hyper::Response<Incoming>) -> String {
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string())
}

async fn send<S>(
    stream: S,
    req: hyper::Request<Empty<Bytes>>,
) -> hyper::Result<hyper::Response<Incoming>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // The connection ends with the response body; its error, if any, surfaces there.
        let _ = conn.await;
    });
    sender.send_request(req).await
}

/// A JSON-lines response body, read message by message.
pub(crate) struct JsonLines<T> {
    body: Incoming,
    buf: BytesMut,
    done: bool,
    _t: std::marker::PhantomData<T>,
}

impl<T: DeserializeOwned> JsonLines<T> {
    /// The next message, `None` at the end of the body.
    pub(crate) async fn next(&mut self) -> Result<Option<T>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1);
                let line = trim_ascii(&line);
                if line.is_empty() {
                    continue;
                }
                return parse_line(line).map(Some);
            }
            if self.done {
                let rest = self.buf.split();
                let rest = trim_ascii(&rest);
                return if rest.is_empty() {
                    Ok(None)
                } else {
                    parse_line(rest).map(Some)
                };
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    return Err(Error::failure(format!(
                        "the Docker daemon's answer broke off: {e}"
                    )));
                }
                None => self.done = true,
            }
        }
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

fn parse_line<T: DeserializeOwned>(line: &[u8]) -> Result<T> {
    serde_json::from_slice(line).map_err(|e| {
        Error::failure(format!(
            "unexpected message from the Docker daemon ({e}): {}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        ))
    })
}

/// bollard encodes `X-Registry-Auth`/`X-Registry-Config` with the standard base64 alphabet;
/// the daemon decodes URL-safe base64 (what the Docker CLI sends), so re-encode.
fn url_safe_registry_headers(mut req: bollard::BollardRequest) -> bollard::BollardRequest {
    for name in ["X-Registry-Auth", "X-Registry-Config"] {
        let recoded = req
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| STANDARD.decode(v).ok())
            .map(|raw| URL_SAFE.encode(raw))
            .and_then(|v| HeaderValue::from_str(&v).ok());
        if let Some(v) = recoded {
            req.headers_mut().insert(name, v);
        }
    }
    req
}

/// A one-line description of a bollard error, without Debug noise.
pub(crate) fn describe_bollard(e: &bollard::errors::Error) -> String {
    use bollard::errors::Error as B;
    match e {
        B::DockerResponseServerError {
            status_code,
            message,
        } => format!("{message} (HTTP {status_code})"),
        B::DockerStreamError { error } => error.clone(),
        B::RequestTimeoutError => "the daemon did not answer in time".into(),
        B::SocketNotFoundError(p) => format!("no such socket {p}"),
        other => {
            // hyper/io errors: the innermost cause says the most ("Connection refused").
            let mut msg = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(s) = src {
                msg = s.to_string();
                src = s.source();
            }
            msg
        }
    }
}
