//! The local end of `hvdctl port-forward`: `LOCAL:REMOTE` parsed, a listener on
//! `127.0.0.1:LOCAL`, and each accepted connection joined to a fresh stream to the remote
//! port that the engine opens (a port-forward WebSocket to the pod, or a TCP connection to
//! the container's address on the run's network).

use crate::error::{Error, Result};
use std::future::Future;
use std::io::Write;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// `LOCAL:REMOTE`, `PORT` (the same on both sides) or `:REMOTE` (any free local port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub local: u16,
    pub remote: u16,
}

impl std::str::FromStr for Ports {
    type Err = Error;
    fn from_str(s: &str) -> Result<Ports> {
        let port = |p: &str, zero_ok: bool| -> Result<u16> {
            match p.parse::<u16>() {
                Ok(0) if !zero_ok => Err(Error::input(format!("{s:?}: port 0 in the run"))),
                Ok(n) => Ok(n),
                Err(_) => Err(
                    Error::input(format!("{s:?}: {p:?} is not a port (1-65535)"))
                        .hint("write LOCAL:REMOTE, e.g. 8080:80, or :80 for any free local port"),
                ),
            }
        };
        match s.split_once(':') {
            Some((l, r)) => Ok(Ports {
                local: if l.is_empty() { 0 } else { port(l, true)? },
                remote: port(r, false)?,
            }),
            None => {
                let p = port(s, false)?;
                Ok(Ports {
                    local: p,
                    remote: p,
                })
            }
        }
    }
}

/// Binds `127.0.0.1:local`; a port in use (or not allowed) is exit 1, naming it.
pub async fn listen(local: u16) -> Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", local)).await.map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            "it is in use".to_string()
        } else {
            e.to_string()
        };
        Error::failure(format!(
            "cannot listen on local port {local} (127.0.0.1:{local}): {why}"
        ))
        .hint("choose another local port, or :REMOTE for any free one")
    })
}

/// Accepts connections on `listener` until the process ends, joining each to a stream made
/// by `open`. Prints `Forwarding from 127.0.0.1:L -> R` on stdout first (the port actually
/// bound, for `:REMOTE`). A connection that cannot be opened is reported on stderr and
/// closed; the others go on.
pub async fn serve<F, Fut, S>(
    listener: TcpListener,
    remote: u16,
    target: &str,
    open: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<S>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let local = listener
        .local_addr()
        .map_err(|e| Error::failure(format!("local listener: {e}")))?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "Forwarding from {local} -> {remote} ({target})");
        let _ = out.flush();
    }
    loop {
        let (mut conn, peer) = listener
            .accept()
            .await
            .map_err(|e| Error::failure(format!("accepting on {local}: {e}")))?;
        let opening = open();
        let target = target.to_string();
        tokio::spawn(async move {
            match opening.await {
                Ok(mut stream) => {
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut stream).await;
                }
                Err(e) => crate::errln!(
                    "port-forward: connection from {peer} to port {remote} of {target}: {}",
                    crate::text::for_terminal(&e.message)
                ),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs() {
        let p = |s: &str| s.parse::<Ports>();
        assert_eq!(
            p("8080:80").unwrap(),
            Ports {
                local: 8080,
                remote: 80
            }
        );
        assert_eq!(
            p("22").unwrap(),
            Ports {
                local: 22,
                remote: 22
            }
        );
        assert_eq!(
            p(":6006").unwrap(),
            Ports {
                local: 0,
                remote: 6006
            }
        );
        for bad in ["", "x:80", "80:", "80:0", "70000:80", "1:2:3"] {
            assert_eq!(p(bad).unwrap_err().kind, crate::error::Kind::Input, "{bad}");
        }
    }

    #[tokio::test]
    async fn a_port_in_use_is_a_failure_naming_it() {
        let held = listen(0).await.unwrap();
        let port = held.local_addr().unwrap().port();
        let e = listen(port).await.unwrap_err();
        assert_eq!(e.kind, crate::error::Kind::Failure);
        assert!(e.message.contains(&format!("local port {port}")), "{e}");
        assert!(e.message.contains("in use"), "{e}");
    }
}
