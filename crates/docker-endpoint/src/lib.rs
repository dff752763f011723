//! Where the Docker daemon is, read the way the docker CLI reads it, and connections to it.
//!
//! [`Endpoint::from_env`] follows the CLI's order:
//!
//! 1. `DOCKER_HOST` (`unix:///path`, `tcp://host[:port]`, `ssh://[user@]host[:port][/socket]`,
//!    or a bare `host:port`, which is TCP). Over TCP, `DOCKER_TLS_VERIFY` (any non-empty
//!    value) turns on TLS with the server verified and the client certificate sent, from
//!    `DOCKER_CERT_PATH` (`ca.pem`, `cert.pem`, `key.pem`; default: the Docker config
//!    directory). Without TLS the default port is 2375, with TLS 2376.
//! 2. else `DOCKER_CONTEXT`, else `currentContext` in `config.json` of the Docker config
//!    directory (`DOCKER_CONFIG`, default `~/.docker`): the context's `docker` endpoint from
//!    `contexts/meta/<sha256 of the name>/meta.json` and its TLS material from
//!    `contexts/tls/<sha256 of the name>/docker/`. The context `default` means step 3.
//! 3. else `unix:///var/run/docker.sock`.
//!
//! [`Endpoint::dial`] opens one byte stream to the daemon (a unix socket, a TCP connection, a
//! TLS session over TCP, or `ssh … docker system dial-stdio`, as the CLI does);
//! [`Endpoint::bollard`] is a [`bollard::Docker`] whose every connection is such a stream.

mod dial;
pub mod redact;
mod resolve;

pub use dial::{Client, Conn};
pub use resolve::{Endpoint, Host, Source, SshTarget, TlsFiles};

/// The entry of the fuzz target for a Docker context's `meta.json` (`fuzz/`): its text read
/// as the context `fuzz` under a configuration directory that does not exist.
#[doc(hidden)]
pub fn fuzz_context_meta(text: &str) -> Result<Endpoint> {
    resolve::from_meta(
        std::path::Path::new("/nonexistent/.docker"),
        "fuzz",
        "a fuzz target",
        std::path::Path::new("/nonexistent/.docker/contexts/meta/fuzz/meta.json"),
        text,
    )
}

use std::fmt;

/// The daemon address used when nothing names one.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// What went wrong, for people: a message naming the host or context, and what to do.
#[derive(Debug, Clone)]
pub struct Error {
    /// The user's settings are wrong (a malformed `DOCKER_HOST`, an unknown context, a
    /// certificate file that is missing or unreadable), as opposed to a daemon that does not
    /// answer.
    pub bad_input: bool,
    pub message: String,
    pub hint: Option<String>,
}

impl Error {
    pub(crate) fn input(message: impl Into<String>) -> Error {
        Error {
            bad_input: true,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn failure(message: impl Into<String>) -> Error {
        Error {
            bad_input: false,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A one-line reason for a failed connection, from the innermost cause of `e` (a refused
/// connection, a certificate the daemon did not accept, ssh's own words), said for people.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = s.to_string();
        src = s.source();
    }
    msg
}
