//! Engines: what a [`super::tail::Tail`] needs from whatever runs its container — a look at the
//! container now, and its log as a byte stream — so that one tail, with one resume state, reads
//! pods ([`super::pods::PodSource`]) and Docker containers ([`super::docker::ContainerSource`])
//! alike.
//!
//! A log stream is the kubelet's format: `<RFC 3339 timestamp> <text>\n` per line (the last one
//! possibly unterminated), timestamps always on. A source whose engine says something else
//! (Docker's multiplexed frames) translates.

use super::target::{Engine, Target};
use futures::AsyncBufRead;
use std::future::Future;
use std::pin::Pin;

/// One request for a container's log. Timestamps are always asked for: resuming depends on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRequest {
    /// Keep the stream open for new lines while the container runs.
    pub follow: bool,
    /// The previous (terminated) instance of a restarted container.
    pub previous: bool,
    /// Lines stamped at or after this instant (callers floor it to the second).
    pub since_time: Option<jiff::Timestamp>,
    /// Lines of the last so many seconds; never together with `since_time`.
    pub since_seconds: Option<i64>,
    /// Only the last lines (an engine may count a long line split in its log as several).
    pub tail_lines: Option<i64>,
}

/// A log as bytes in the kubelet's timestamped line format.
pub type LogStream = Pin<Box<dyn AsyncBufRead + Send>>;

/// What kind of failure a request met, which decides what a tail does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Worth repeating after a pause (throttled, server error, broken connection).
    Transient,
    /// The container or its log is not there (any more).
    NotFound,
    /// Repeating will not help (forbidden, unreadable log driver): stop and say so.
    Fatal,
}

/// A failed request, for people (`message`) and for the tail (`failure`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    pub failure: Failure,
    pub message: String,
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SourceError {}

impl SourceError {
    /// This error as the I/O error a [`LogStream`] fails with (the tail recovers it with
    /// [`SourceError::of_io`]).
    pub fn into_io(self) -> std::io::Error {
        std::io::Error::other(self)
    }

    /// The [`SourceError`] an I/O error of a [`LogStream`] carries, if any.
    pub fn of_io(e: &std::io::Error) -> Option<&SourceError> {
        e.get_ref().and_then(|e| e.downcast_ref::<SourceError>())
    }
}

/// An engine's containers, as tails see them.
pub trait LogSource: Clone + Send + Sync + 'static {
    fn engine(&self) -> Engine;

    /// The target's container now; `None` once it is gone (its pod deleted or replaced, the
    /// Docker container removed).
    fn look(&self, t: &Target) -> impl Future<Output = Result<Option<View>, SourceError>> + Send;

    /// Opens the target's log. A refusal may come as the stream's first error rather than
    /// here (the stream then fails with an I/O error carrying a [`SourceError`]).
    fn open(
        &self,
        t: &Target,
        req: &LogRequest,
    ) -> impl Future<Output = Result<LogStream, SourceError>> + Send;

    /// Why the target's pod was deleted, as far as its owner tells (`seen`: the pod as last
    /// looked at), worded to follow "was deleted": `after its owner MPIJob x had Succeeded …`.
    /// Asked only when lines were lost with the pod.
    fn why_deleted(
        &self,
        _t: &Target,
        _seen: &View,
    ) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }
}

/// What the engine says about a target's container (see [`LogSource::look`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    /// No instance has run yet (reason: ContainerCreating, ImagePullBackOff, Pending…).
    NotStarted {
        reason: String,
        for_good: bool,
    },
    Running,
    /// Instance `restart` has terminated; `for_good`: no further instance will come.
    Dead {
        for_good: bool,
    },
}

/// A container's restart count and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub restart: u32,
    pub life: Life,
    /// There is a terminated instance before the current one (`previous=true` reads it).
    pub has_previous: bool,
    /// When the instance counted by `restart` ended (to the second), where the engine would
    /// serve the next instance's log under the same request once it starts (Kubernetes: a
    /// container about to restart). Lines stamped after that second are not this instance's.
    pub ended_at: Option<jiff::Timestamp>,
    /// When the deletion of the container's pod was asked for (its `deletionTimestamp` less
    /// the grace period): the pod is going, and its log with it.
    pub deleting: Option<jiff::Timestamp>,
    /// The pod's controller (its owner reference marked `controller`).
    pub owner: Option<Owner>,
}

impl View {
    /// A container that never restarted, in `life`, nothing more known (one log across
    /// restarts, as Docker keeps it).
    pub fn first(life: Life) -> View {
        View {
            restart: 0,
            life,
            has_previous: false,
            ended_at: None,
            deleting: None,
            owner: None,
        }
    }
}

/// An object that owns a pod, as its owner reference names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}
