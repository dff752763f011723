//! One error type for the whole tool. Every error says what failed and where; its
//! [`Kind`] decides the exit code (2 for bad input, 1 for a failure or something not found,
//! 130 for Ctrl-C); callers tell errors apart by kind, never by message text.

use std::fmt;

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

/// An error for people: a message (may span lines) plus an optional hint on what to do next.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    pub hint: Option<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Input,
            message: message.into(),
            hint: None,
        }
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Failure,
            message: message.into(),
            hint: None,
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::NotFound,
            message: message.into(),
            hint: None,
        }
    }
    pub fn interrupted() -> Self {
        Error {
            kind: Kind::Interrupted,
            message: "interrupted".into(),
            hint: None,
        }
    }
    /// Adds a "what to do next" line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Adds context to any displayable error, turning it into an [`Error`] of the given kind.
pub trait Context<T> {
    fn fail_with(self, what: impl FnOnce() -> String) -> Result<T>;
    fn input_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn fail_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::failure(format!("{}: {e}", what())))
    }
    fn input_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::input(format!("{}: {e}", what())))
    }
}
