//! Byte streams to the daemon, and a [`bollard::Docker`] over them.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::{Endpoint, Error, Host, Result, TlsFiles};

/// One connection to the daemon.
pub enum Conn {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
    /// `ssh … docker system dial-stdio`: its stdout is read, its stdin written.
    Ssh(Box<SshPipe>),
}

/// The pipes of an `ssh` child; the child is killed when the connection is dropped.
pub struct SshPipe {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Ssh(p) => Pin::new(&mut p.as_mut().stdout).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Ssh(p) => Pin::new(&mut p.as_mut().stdin).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Ssh(p) => Pin::new(&mut p.as_mut().stdin).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Ssh(p) => Pin::new(&mut p.as_mut().stdin).poll_shutdown(cx),
        }
    }
}

/// A prepared endpoint: its TLS configuration loaded once, ssh's last complaint kept.
#[derive(Clone)]
pub(crate) struct Dialer {
    endpoint: Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    ssh_stderr: Arc<Mutex<String>>,
}

impl Dialer {
    pub(crate) fn new(endpoint: &Endpoint) -> Result<Dialer> {
        let tls = match (&endpoint.host, &endpoint.tls) {
            (Host::Tcp(_), Some(files)) => Some(Arc::new(client_config(files)?)),
            _ => None,
        };
        Ok(Dialer {
            endpoint: endpoint.clone(),
            tls,
            ssh_stderr: Arc::default(),
        })
    }

    pub(crate) async fn dial(&self) -> io::Result<Conn> {
        match &self.endpoint.host {
            Host::Unix(p) => Ok(Conn::Unix(tokio::net::UnixStream::connect(p).await?)),
            Host::Tcp(addr) => {
                let tcp = tokio::net::TcpStream::connect(addr.as_str()).await?;
                let _ = tcp.set_nodelay(true);
                let Some(config) = &self.tls else {
                    return Ok(Conn::Tcp(tcp));
                };
                let name = server_name(addr)?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await?;
                Ok(Conn::Tls(Box::new(tls)))
            }
            Host::Ssh(target) => {
                let mut child = tokio::process::Command::new("ssh")
                    .args(target.ssh_args())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("running ssh (is OpenSSH's client installed?): {e}"),
                        )
                    })?;
                let (Some(stdin), Some(stdout), Some(mut stderr)) =
                    (child.stdin.take(), child.stdout.take(), child.stderr.take())
                else {
                    return Err(io::Error::other("ssh started without its pipes"));
                };
                // ssh's own messages (host key, permission denied, no docker there): kept for
                // the error a failed connection gets.
                let keep = self.ssh_stderr.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let _ = stderr.read_to_end(&mut buf).await;
                    let text = String::from_utf8_lossy(&buf).trim().to_string();
                    if !text.is_empty() {
                        *keep.lock().unwrap_or_else(|p| p.into_inner()) = text;
                    }
                });
                Ok(Conn::Ssh(Box::new(SshPipe {
                    _child: child,
                    stdin,
                    stdout,
                })))
            }
        }
    }

    /// What ssh last said on stderr, if this is an ssh endpoint and it said anything.
    pub(crate) fn ssh_said(&self) -> Option<String> {
        let s = self.ssh_stderr.lock().unwrap_or_else(|p| p.into_inner());
        (!s.is_empty()).then(|| s.clone())
    }
}

fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?}: {e}")))
}

/// The rustls configuration for `files`: the daemon verified against `ca.pem` (else the
/// system's roots), the client certificate sent when both `cert.pem` and `key.pem` are there.
fn client_config(files: &TlsFiles) -> Result<rustls::ClientConfig> {
    let bad = |path: &std::path::Path, what: String| {
        Error::input(format!("{}: {what}", path.display())).hint(
            "DOCKER_CERT_PATH (or the context's TLS directory) must hold the daemon's ca.pem and this client's cert.pem and key.pem, in PEM",
        )
    };
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            let certs = CertificateDer::pem_file_iter(ca)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| bad(ca, format!("not a PEM certificate: {e}")))?;
            if certs.is_empty() {
                return Err(bad(ca, "holds no certificate".into()));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| bad(ca, format!("not a usable CA certificate: {e}")))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::failure(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots);
    let config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| bad(cert, format!("not a PEM certificate: {e}")))?;
            if chain.is_empty() {
                return Err(bad(cert, "holds no certificate".into()));
            }
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| bad(key, format!("not a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| bad(cert, format!("does not go with {}: {e}", key.display())))?
        }
        (Some(cert), None) => {
            return Err(bad(
                cert,
                format!("no key.pem beside it in {}", files.dir.display()),
            ));
        }
        (None, Some(key)) => {
            return Err(bad(
                key,
                format!("no cert.pem beside it in {}", files.dir.display()),
            ));
        }
        (None, None) => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// A connection as hyper's client takes it.
pub(crate) struct HyperConn(TokioIo<Conn>);

impl Connection for HyperConn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for HyperConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for HyperConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl tower_service::Service<http::Uri> for Dialer {
    type Response = HyperConn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<HyperConn>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let d = self.clone();
        Box::pin(async move { d.dial().await.map(|c| HyperConn(TokioIo::new(c))) })
    }
}

impl Endpoint {
    /// Opens one byte stream to the daemon (for requests bollard does not make). Errors in
    /// the certificate files are input errors; a daemon that cannot be reached is a failure
    /// naming this endpoint.
    pub async fn dial(&self) -> Result<Conn> {
        let d = Dialer::new(self)?;
        d.dial().await.map_err(|e| {
            let why = match d.ssh_said() {
                Some(s) => format!("{}; ssh said: {s}", crate::explain(&e)),
                None => crate::explain(&e),
            };
            Error::failure(format!(
                "cannot connect to the Docker daemon at {}: {}",
                self.describe(),
                clarify(self, &why)
            ))
        })
    }

    /// A bollard client whose connections are [`Endpoint::dial`]'s streams; `timeout` is the
    /// longest a request may wait (seconds). Nothing is connected yet.
    pub fn bollard(&self, timeout: u64) -> Result<Client> {
        let dialer = Dialer::new(self)?;
        let client = Arc::new(
            hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(if matches!(self.host, Host::Ssh(_)) {
                    4
                } else {
                    0
                })
                .build(dialer.clone()),
        );
        let docker = bollard::Docker::connect_with_custom_transport(
            move |req: bollard::BollardRequest| {
                let client = client.clone();
                async move {
                    client
                        .request(req)
                        .await
                        .map_err(bollard::errors::Error::from)
                }
            },
            Some("http://docker"),
            timeout,
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| Error::failure(format!("{}: {e}", self.describe())))?;
        Ok(Client {
            docker,
            dialer,
            endpoint: self.clone(),
        })
    }
}

/// A bollard client on an endpoint, with what the endpoint needs to explain failures.
#[derive(Clone)]
pub struct Client {
    pub docker: bollard::Docker,
    dialer: Dialer,
    endpoint: Endpoint,
}

impl Client {
    /// Why a request failed, for people: the innermost cause, ssh's own words, and what a
    /// TLS refusal means.
    pub fn explain(&self, e: &bollard::errors::Error) -> String {
        let why = crate::explain(e);
        let why = match self.dialer.ssh_said() {
            Some(s) => format!("{why}; ssh said: {s}"),
            None => why,
        };
        clarify(&self.endpoint, &why)
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// Adds what a TLS failure means in the endpoint's terms.
fn clarify(endpoint: &Endpoint, why: &str) -> String {
    let Some(files) = &endpoint.tls else {
        if (why.contains("Connection reset") || why.contains("connection closed before"))
            && matches!(endpoint.host, Host::Tcp(_))
        {
            return format!(
                "{why} (if the daemon expects TLS, set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH)"
            );
        }
        return why.to_string();
    };
    let ca = files
        .ca
        .as_ref()
        .map_or("the system's roots".to_string(), |p| {
            p.display().to_string()
        });
    if why.contains("UnknownIssuer") || why.contains("BadSignature") {
        format!("{why}: the daemon's certificate is not signed by the CA in {ca}")
    } else if why.contains("NotValidForName") || why.contains("not valid for name") {
        format!("{why}: the daemon's certificate does not name this host")
    } else if why.contains("Expired") {
        format!("{why}: the daemon's certificate has expired")
    } else if why.to_lowercase().contains("certificate required")
        || why.contains("CertificateRequired")
        || why.contains("BadCertificate")
        || why.contains("UnknownCA")
        || why.contains("bad certificate")
    {
        format!(
            "{why}: the daemon did not accept this client's certificate ({})",
            files
                .cert
                .as_ref()
                .map_or("none sent: no cert.pem".to_string(), |p| p
                    .display()
                    .to_string())
        )
    } else {
        why.to_string()
    }
}
