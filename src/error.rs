//! One error type for the whole tool. Every error says what failed and where; its
//! [`Kind`] decides the exit code (2 for bad input, 1 for a failure or something not found,
//! 130 for Ctrl-C); callers tell errors apart by kind, never by message text.

use std::fmt;
use std::sync::Arc;

/// The error underneath an [`Error`], kept for [`std::error::Error::source`] (shared, so an
/// [`Error`] stays `Clone`).
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What sort of failure this is; decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The user's input is wrong (flags, hvdctl.yaml, template, target directory). Exit 2.
    Input,
    /// Something outside failed (cluster, daemon, registry, file system) or the job failed. Exit 1.
    Failure,
    /// What was asked for does not exist (a run, an object). Exit 1.
    NotFound,
    /// Interrupted by the user (Ctrl-C). Exit 130.
    Interrupted,
}

/// An error for people: a message (may span lines) plus an optional hint on what to do next,
/// and the error it came from (its chain through [`std::error::Error::source`]).
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    pub hint: Option<String>,
    pub source: Option<Source>,
    /// The app file's key this input error is about, when it was found after loading (by a
    /// backend's check): the command that loaded the app names its line or `--set` flag
    /// ([`crate::app::Loaded::locate`]).
    pub key: Option<crate::yaml::Path>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Input,
            message: message.into(),
            hint: None,
            source: None,
            key: None,
        }
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Failure,
            message: message.into(),
            hint: None,
            source: None,
            key: None,
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::NotFound,
            message: message.into(),
            hint: None,
            source: None,
            key: None,
        }
    }
    pub fn interrupted() -> Self {
        Error {
            kind: Kind::Interrupted,
            message: "interrupted".into(),
            hint: None,
            source: None,
            key: None,
        }
    }
    /// Adds a "what to do next" line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// Says which key of the app file this error is about (`["mpi", "sshPort"]`).
    pub fn at_key(self, key: &[&str]) -> Self {
        self.at(crate::yaml::Path(
            key.iter()
                .map(|k| crate::yaml::Seg::Key((*k).to_string()))
                .collect(),
        ))
    }
    /// [`Self::at_key`] for a path with list indexes (`volumes[2]`).
    pub fn at(mut self, path: crate::yaml::Path) -> Self {
        self.key = Some(path);
        self
    }
    /// Keeps `e` as the error this one came from.
    pub fn caused_by(mut self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(e));
        self
    }
    /// The HTTP status of the API or registry answer this error came from, if any.
    pub fn http_status(&self) -> Option<u16> {
        let mut next: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|s| s as _);
        while let Some(e) = next {
            if let Some(s) = e.downcast_ref::<kube::core::Status>() {
                return Some(s.code);
            }
            if let Some(kube::Error::Api(s)) = e.downcast_ref::<kube::Error>() {
                return Some(s.code);
            }
            next = e.source();
        }
        None
    }
    /// Prefixes the message with where/what was being done ("reading hvdctl.yaml: ...").
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            Kind::Input => 2,
            Kind::Failure | Kind::NotFound => 1,
            Kind::Interrupted => 130,
        }
    }
}

/// An error as people see it: the message and the hint through
/// [`crate::text::for_terminal`] (no URL's userinfo, no raw control character from the
/// user's text or a server's answer).
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::for_terminal(&self.message))?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {}", crate::text::for_terminal(h))?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as _)
    }
}

/// The messages of an error's chain, copied: the cause of an [`Error`] made from an error
/// that is only borrowed (and cannot be cloned), so that `-v` can still show the chain.
#[derive(Debug, Clone)]
pub struct Copied {
    message: String,
    next: Option<Box<Copied>>,
}

impl Copied {
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Copied {
        Copied {
            message: e.to_string(),
            next: e.source().map(|s| Box::new(Copied::of(s))),
        }
    }
}

impl fmt::Display for Copied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Copied {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.next.as_deref().map(|n| n as _)
    }
}

/// The lines `-v` adds below an error: each cause in its chain (one that repeats the cause
/// before it word for word, as wrappers do, once).
pub fn cause_lines(e: &Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut next = std::error::Error::source(e);
    while let Some(c) = next {
        let text = crate::text::for_terminal(&c.to_string()).into_owned();
        if !text.is_empty() && out.last() != Some(&text) {
            out.push(text);
        }
        next = c.source();
    }
    out
}

/// Adds context to any error, turning it into an [`Error`] of the given kind that keeps the
/// original as its source.
pub trait Context<T> {
    fn fail_with(self, what: impl FnOnce() -> String) -> Result<T>;
    fn input_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn fail_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::failure(format!("{}: {e}", what())).caused_by(e))
    }
    fn input_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::input(format!("{}: {e}", what())).caused_by(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_source_chain_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e: Result<()> = Err(io).fail_with(|| "reading x".to_string());
        let e = e.unwrap_err().context("loading the app");
        assert_eq!(e.message, "loading the app: reading x: denied");
        let src = e.source().expect("a source");
        assert_eq!(
            src.downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        let status = kube::core::Status {
            code: 404,
            ..Default::default()
        };
        let api = Error::failure("get x").caused_by(kube::Error::Api(Box::new(status)));
        assert_eq!(api.http_status(), Some(404));
        assert_eq!(Error::failure("plain").http_status(), None);
    }

    #[test]
    fn a_file_error_keeps_the_io_error() {
        // /proc/self/mem is a regular file of size 0 whose read fails (EIO).
        let p = std::path::Path::new("/proc/self/mem");
        let e = crate::files::read(p, crate::files::APP_FILE)
            .map_err(|r| r.error(p, crate::files::APP_FILE))
            .unwrap_err();
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.and_then(std::io::Error::raw_os_error), Some(5), "{e:?}");
        assert_eq!(cause_lines(&e), ["Input/output error (os error 5)"]);
    }

    #[test]
    fn a_copied_chain_reads_as_the_original() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(inner);
        let e = Error::failure("cannot reach").caused_by(Copied::of(&outer));
        assert_eq!(cause_lines(&e), ["refused"]);
        let e = Error::failure("x").caused_by(Copied::of(
            &Error::failure("a").caused_by(std::io::Error::other("b")),
        ));
        assert_eq!(cause_lines(&e), ["a", "b"]);
    }
}
