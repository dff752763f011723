//! The connection to the Docker daemon.
//!
//! Where the daemon is comes from [`docker_endpoint`], read as the docker CLI reads it:
//! `DOCKER_HOST` (unix, tcp, ssh) with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH`, else
//! `DOCKER_CONTEXT` or the Docker config's `currentContext` with the context's endpoint and
//! TLS material, else `unix:///var/run/docker.sock`. The API version is negotiated with the
//! daemon on connect (Debian's docker.io 20.10 speaks 1.41), so the first request already
//! tells whether a daemon answers; if none does, the error names the address tried, how it
//! was chosen (the variable or the context) and what to do.
//!
//! Most calls go through [`bollard`], whose every connection is one of the endpoint's
//! streams (unix socket, TCP, TLS, `ssh … docker system dial-stdio`). A few need the daemon's
//! JSON stream verbatim (push progress carries per-layer ids that bollard's typed messages
//! drop); those use [`DockerClient::json_stream`], a plain HTTP/1.1 request on a stream of
//! the same endpoint.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

pub use docker_endpoint::{Endpoint, Host};

use crate::error::{Error, Result};

/// The daemon address used when nothing names one.
pub const DEFAULT_DOCKER_HOST: &str = docker_endpoint::DEFAULT_HOST;

/// How long connecting and negotiating the API version may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a request may wait for the daemon's response headers. Builds stream their
/// output as they go, but the classic builder answers only once it has the whole context.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// An endpoint error as hvdctl's: bad settings are input errors (exit 2).
pub fn endpoint_error(e: docker_endpoint::Error) -> Error {
    let err = if e.bad_input {
        Error::input(e.message)
    } else {
        Error::failure(e.message)
    };
    match e.hint {
        Some(h) => err.hint(h),
        None => err,
    }
}

/// The endpoint the docker CLI would use here.
pub fn endpoint_from_env() -> Result<Endpoint> {
    Endpoint::from_env().map_err(endpoint_error)
}

/// A connected, version-negotiated Docker client.
#[derive(Clone)]
pub struct DockerClient {
    docker: bollard::Docker,
    /// The endpoint and what explains its failures (shared: clients are cloned freely).
    client: std::sync::Arc<docker_endpoint::Client>,
    api_version: String,
    server_version: String,
}

impl std::fmt::Debug for DockerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerClient")
            .field("host", &self.host().to_string())
            .field("api_version", &self.api_version)
            .finish()
    }
}

impl DockerClient {
    /// Connects to the daemon the docker CLI would use (see the module's documentation).
    pub async fn connect() -> Result<DockerClient> {
        DockerClient::connect_to(&endpoint_from_env()?).await
    }

    /// Connects to `host` and negotiates the API version; fails with a clear message naming
    /// `host` (and the context that chose it) when no daemon answers.
    pub async fn connect_to(host: &Endpoint) -> Result<DockerClient> {
        let unreachable = |why: String| {
            let lower = why.to_lowercase();
            let hint = if lower.contains("permission denied") && matches!(host.host, Host::Unix(_))
            {
                "add your user to the `docker` group (then log in again), or run with sudo"
                    .to_string()
            } else if host.tls.is_some() && lower.contains("certificate") {
                "DOCKER_CERT_PATH (or the context's TLS files) must hold the ca.pem that signed the daemon's certificate and a cert.pem/key.pem the daemon trusts".to_string()
            } else if let docker_endpoint::Source::Context { name, .. } = &host.source {
                format!(
                    "start the daemon of Docker context {name:?}, or choose another (`docker context ls`; DOCKER_CONTEXT=default for the local daemon)"
                )
            } else if matches!(host.host, Host::Ssh(_)) {
                "check that `ssh` reaches the host without a prompt and that `docker` runs there"
                    .to_string()
            } else {
                "start the Docker daemon (`sudo systemctl start docker`, or run `sudo dockerd`), \
                 or point DOCKER_HOST at one that runs (for hvdctl's tests: scripts/dev-services.sh)"
                    .to_string()
            };
            Error::failure(format!(
                "cannot connect to the Docker daemon at {}: {why}",
                host.describe()
            ))
            .hint(hint)
        };
        if let Host::Unix(path) = &host.host
            && !path.exists()
        {
            return Err(unreachable("no such socket".into()));
        }
        let client = host
            .bollard(CONNECT_TIMEOUT.as_secs())
            .map_err(endpoint_error)?;
        let docker = client
            .docker
            .clone()
            .with_request_modifier(url_safe_registry_headers)
            .negotiate_version()
            .await
            .map_err(|e| unreachable(client.explain(&e)))?;
        let version = docker
            .version()
            .await
            .map_err(|e| unreachable(client.explain(&e)))?;
        let v = docker.client_version();
        let docker = docker.with_timeout(REQUEST_TIMEOUT);
        Ok(DockerClient {
            docker,
            client: std::sync::Arc::new(client),
            api_version: format!("{}.{}", v.major_version, v.minor_version),
            server_version: version.version.unwrap_or_default(),
        })
    }

    /// The bollard client, for calls this module does not wrap.
    pub fn bollard(&self) -> &bollard::Docker {
        &self.docker
    }

    /// Where the daemon is.
    pub fn host(&self) -> &Endpoint {
        self.client.endpoint()
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
        let empty = Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed();
        self.request_with_body(method, path_and_query, headers, empty)
            .await
    }

    /// [`DockerClient::request`] with a body, sent as it is produced (a build's context).
    pub(crate) async fn request_with_body(
        &self,
        method: hyper::Method,
        path_and_query: &str,
        headers: &[(&str, String)],
        body: BoxBody<Bytes, std::io::Error>,
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
            .body(body)
            .map_err(|e| Error::failure(format!("building the request {uri}: {e}")))?;
        let stream = self.host().dial().await.map_err(endpoint_error)?;
        send(stream, req).await.map_err(|e| {
            Error::failure(format!(
                "talking to the Docker daemon at {}: {}",
                self.host().describe(),
                docker_endpoint::explain(&e)
            ))
        })
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
        Ok(JsonLines::new(resp.into_body()))
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
    req: hyper::Request<BoxBody<Bytes, std::io::Error>>,
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

/// The longest message of a JSON-lines answer read: the daemon's messages (a build step's
/// output, a BuildKit progress update, a pull's progress) are far shorter; a line that does
/// not end within this is an error, and memory stays bounded by it.
pub(crate) const MAX_MESSAGE: usize = 8 << 20;

/// The lines of a byte stream, each at most [`MAX_MESSAGE`] bytes: bytes are pushed as they
/// come, whole lines taken out; each byte is looked at once.
#[derive(Default)]
pub(crate) struct LineBuf {
    buf: BytesMut,
    /// How much of `buf` is known to hold no line break.
    scanned: usize,
}

impl LineBuf {
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole line (with its `\n`), `None` until one is there; an error when the
    /// line so far is longer than [`MAX_MESSAGE`].
    pub(crate) fn line(&mut self) -> Result<Option<BytesMut>> {
        match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            Some(i) => {
                let end = self.scanned + i + 1;
                self.scanned = 0;
                Ok(Some(self.buf.split_to(end)))
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_MESSAGE {
                    let start =
                        String::from_utf8_lossy(&self.buf[..self.buf.len().min(200)]).into_owned();
                    self.buf = BytesMut::new();
                    self.scanned = 0;
                    return Err(Error::failure(format!(
                        "the Docker daemon sent a message longer than {} MiB without a line break (it starts: {start:?}); stopped reading it",
                        MAX_MESSAGE >> 20
                    )));
                }
                Ok(None)
            }
        }
    }

    /// What is left after the last line break.
    pub(crate) fn rest(&mut self) -> BytesMut {
        self.scanned = 0;
        self.buf.split()
    }
}

/// A JSON-lines response body, read message by message (each at most [`MAX_MESSAGE`]).
pub(crate) struct JsonLines<T> {
    body: Incoming,
    lines: LineBuf,
    done: bool,
    _t: std::marker::PhantomData<T>,
}

impl<T: DeserializeOwned> JsonLines<T> {
    pub(crate) fn new(body: Incoming) -> JsonLines<T> {
        JsonLines {
            body,
            lines: LineBuf::default(),
            done: false,
            _t: std::marker::PhantomData,
        }
    }

    /// The next message, `None` at the end of the body.
    pub(crate) async fn next(&mut self) -> Result<Option<T>> {
        loop {
            if let Some(line) = self.lines.line()? {
                let line = trim_ascii(&line);
                if line.is_empty() {
                    continue;
                }
                return parse_line(line).map(Some);
            }
            if self.done {
                let rest = self.lines.rest();
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
                        self.lines.push(&data);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_and_a_line_without_end_is_bounded() {
        let mut l = LineBuf::default();
        l.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(&l.line().unwrap().unwrap()[..], b"{\"a\":1}\n");
        assert!(l.line().unwrap().is_none());
        l.push(b":2}\n");
        assert_eq!(&l.line().unwrap().unwrap()[..], b"{\"b\":2}\n");
        // A message that never ends: an error once past the bound, memory back to nothing.
        let chunk = vec![b'x'; 1 << 20];
        let mut failed = None;
        for _ in 0..=(MAX_MESSAGE >> 20) {
            l.push(&chunk);
            if let Err(e) = l.line() {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("refused past the bound");
        assert!(e.message.contains("longer than 8 MiB"), "{}", e.message);
        assert!(l.buf.capacity() < 1 << 20);
        l.push(b"{}\n");
        assert_eq!(&l.line().unwrap().unwrap()[..], b"{}\n");
    }
}
