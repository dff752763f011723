//! The Docker engine as a [`LogSource`]: a target is one container (its id in `Target::uid`),
//! looked at with `inspect` and read with the container log API (`timestamps`, `since`, `tail`,
//! `follow`; stdout and stderr both).
//!
//! Docker differs from the kubelet in three ways this module hides from the tail:
//! * The log is multiplexed frames, one per log entry, each stamped; a line longer than the
//!   daemon's buffer (16 KiB) is several entries, and stdout and stderr entries interleave.
//!   [`Frames`] turns them into the kubelet's format: one `<timestamp> <text>\n` per line,
//!   stamped with the timestamp of its last entry (so lines come out in the order of their
//!   stamps, whichever stream they are on).
//! * A container keeps one log across restarts: there is no `previous` log, so the view always
//!   says restart 0 with no previous instance, and a restarted container is simply read on.
//! * A stopped container's log stays readable until the container is removed.

use super::source::{Failure, LogRequest, LogSource, LogStream, SourceError};
use super::tail::{Life, View, parse_ts};
use super::target::{Engine, Target};
use crate::image::docker::{DockerClient, describe_bollard};
use bollard::container::LogOutput;
use bollard::models::{
    ContainerInspectResponse, ContainerStateStatusEnum as S, RestartPolicyNameEnum,
};
use bollard::query_parameters::LogsOptions;
use futures::{Stream, StreamExt, TryStreamExt};

/// The containers of one Docker engine.
#[derive(Clone)]
pub struct ContainerSource {
    pub docker: DockerClient,
}

impl ContainerSource {
    pub fn new(docker: DockerClient) -> ContainerSource {
        ContainerSource { docker }
    }
}

/// A bollard error as a [`SourceError`]: gone (404), repeatable (5xx but 501, broken
/// connections), or not.
pub fn source_error(what: &str, e: &bollard::errors::Error) -> SourceError {
    use bollard::errors::Error as B;
    let failure = match e {
        B::DockerResponseServerError {
            status_code: 404, ..
        } => Failure::NotFound,
        // 501: the container's logging driver cannot be read (`none`, `syslog`…).
        B::DockerResponseServerError {
            status_code: 501, ..
        } => Failure::Fatal,
        B::DockerResponseServerError { status_code, .. } if *status_code >= 500 => {
            Failure::Transient
        }
        B::DockerResponseServerError { .. }
        | B::DockerStreamError { .. }
        | B::SocketNotFoundError(_) => Failure::Fatal,
        _ => Failure::Transient,
    };
    SourceError {
        failure,
        message: format!("{what}: {}", describe_bollard(e)),
    }
}

/// What an inspected container says, as a tail's [`View`].
pub fn view(c: &ContainerInspectResponse) -> View {
    let st = c.state.clone().unwrap_or_default();
    let exit = st.exit_code.unwrap_or_default();
    let restarts = match c
        .host_config
        .as_ref()
        .and_then(|h| h.restart_policy.as_ref())
        .and_then(|p| p.name)
    {
        Some(RestartPolicyNameEnum::ALWAYS | RestartPolicyNameEnum::UNLESS_STOPPED) => true,
        Some(RestartPolicyNameEnum::ON_FAILURE) => exit != 0,
        _ => false,
    };
    let life = match st.status {
        Some(S::RUNNING | S::PAUSED | S::STOPPING) => Life::Running,
        // Between two instances: the next one continues the same log.
        Some(S::RESTARTING) => Life::Dead { for_good: false },
        Some(S::EXITED) => Life::Dead {
            for_good: !restarts,
        },
        Some(S::DEAD | S::REMOVING) => Life::Dead { for_good: true },
        Some(S::CREATED) => Life::NotStarted {
            reason: "Created".into(),
            for_good: false,
        },
        Some(S::EMPTY) | None => Life::NotStarted {
            reason: "Unknown".into(),
            for_good: false,
        },
    };
    View {
        restart: 0,
        life,
        has_previous: false,
    }
}

/// `since` for Docker: whole unix seconds (0: from the start).
fn since(req: &LogRequest) -> i32 {
    let secs = if let Some(t) = req.since_time {
        t.as_second()
    } else if let Some(s) = req.since_seconds {
        jiff::Timestamp::now().as_second() - s.max(0)
    } else {
        return 0;
    };
    i32::try_from(secs.max(0)).unwrap_or(i32::MAX)
}

impl LogSource for ContainerSource {
    fn engine(&self) -> Engine {
        Engine::Docker
    }

    async fn look(&self, t: &Target) -> Result<Option<View>, SourceError> {
        match self.docker.bollard().inspect_container(&t.uid, None).await {
            Ok(c) => Ok(Some(view(&c))),
            Err(e) => {
                let e = source_error(&format!("cannot inspect container {}", t.pod), &e);
                if e.failure == Failure::NotFound {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    async fn open(&self, t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
        if req.previous {
            return Err(SourceError {
                failure: Failure::NotFound,
                message: format!(
                    "container {}: Docker keeps one log across restarts, no previous one",
                    t.pod
                ),
            });
        }
        let opts = LogsOptions {
            follow: req.follow,
            stdout: true,
            stderr: true,
            since: since(req),
            timestamps: true,
            tail: match req.tail_lines {
                Some(n) if n >= 0 => n.to_string(),
                _ => "all".into(),
            },
            ..Default::default()
        };
        // The request is sent when the stream is first polled; a refusal is its first item.
        let frames = self.docker.bollard().logs(&t.uid, Some(opts));
        let what = format!("reading the log of container {}", t.pod);
        Ok(lines(frames, what))
    }
}

/// Docker's frames as the kubelet's byte stream. Frames that arrive together are converted
/// together (one read of the result, not one per line).
pub fn lines<F>(frames: F, what: String) -> LogStream
where
    F: Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send + 'static,
{
    let batches = frames.ready_chunks(256);
    let state = (
        Box::pin(batches),
        Frames::default(),
        None::<SourceError>,
        false,
    );
    let bytes = futures::stream::unfold(state, move |(mut batches, mut f, mut failed, done)| {
        let what = what.clone();
        async move {
            if done {
                return None;
            }
            if let Some(e) = failed.take() {
                return Some((Err(e.into_io()), (batches, f, None, true)));
            }
            loop {
                let Some(batch) = batches.next().await else {
                    let mut out = Vec::new();
                    f.finish(&mut out);
                    return (!out.is_empty()).then_some((Ok(out), (batches, f, None, true)));
                };
                let mut out = Vec::new();
                for item in batch {
                    match item {
                        Ok(o) => f.push(o, &mut out),
                        Err(e) => {
                            failed = Some(source_error(&what, &e));
                            break;
                        }
                    }
                }
                if !out.is_empty() {
                    return Some((Ok(out), (batches, f, failed, false)));
                }
                if let Some(e) = failed.take() {
                    return Some((Err(e.into_io()), (batches, f, None, true)));
                }
            }
        }
    });
    Box::pin(bytes.into_async_read())
}

/// Joins Docker's log entries into lines: per output stream, the unterminated line so far and
/// the timestamp of its latest entry.
#[derive(Default)]
pub struct Frames {
    open: [(Vec<u8>, Vec<u8>); 2],
}

impl Frames {
    /// One frame (`<timestamp> <text>`), its complete lines appended to `out`.
    pub fn push(&mut self, o: LogOutput, out: &mut Vec<u8>) {
        let (i, frame) = match o {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (0, message),
            LogOutput::StdErr { message } => (1, message),
            LogOutput::StdIn { .. } => return,
        };
        let (ts, mut text) = match memchr::memchr(b' ', &frame) {
            Some(n) if parse_ts(&frame[..n]).is_some() => (&frame[..n], &frame[n + 1..]),
            _ => (&frame[..0], &frame[..]),
        };
        let (open_ts, open) = &mut self.open[i];
        while let Some(n) = memchr::memchr(b'\n', text) {
            out.extend_from_slice(ts);
            out.push(b' ');
            out.append(open);
            out.extend_from_slice(&text[..=n]);
            text = &text[n + 1..];
        }
        if !text.is_empty() {
            open_ts.clear();
            open_ts.extend_from_slice(ts);
            open.extend_from_slice(text);
        }
    }

    /// At the end of the log: the unterminated lines, older first; the last one stays
    /// unterminated (the tail prints it once the log is known to end with it).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let mut open: Vec<(Vec<u8>, Vec<u8>)> = self
            .open
            .iter_mut()
            .filter(|(_, text)| !text.is_empty())
            .map(std::mem::take)
            .collect();
        open.sort_by_key(|(ts, _)| parse_ts(ts));
        let n = open.len();
        for (k, (ts, text)) in open.into_iter().enumerate() {
            out.extend_from_slice(&ts);
            out.push(b' ');
            out.extend_from_slice(&text);
            if k + 1 < n {
                out.push(b'\n');
            }
        }
    }
}
