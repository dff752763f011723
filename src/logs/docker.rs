//! The Docker engine as a [`LogSource`]: a target is one container (its id in `Target::uid`),
//! looked at with `inspect` and read with the container log API (`timestamps`, `since`, `tail`,
//! `follow`; stdout and stderr both).
//!
//! Docker differs from the kubelet in three ways this module hides from the tail:
//! * The log is multiplexed frames, one per log entry, each stamped; a line longer than the
//!   daemon's buffer (16 KiB) is several entries, and stdout and stderr entries interleave.
//!   [`Frames`] turns them into the kubelet's format: one `<timestamp> <text>\n` per line,
//!   stamped with the timestamp of its last entry (so lines come out in the order of their
//!   stamps, whichever stream they are on, and a long line whose first entries fall before a
//!   resume's `since` is still recognised as printed). `tail` counts entries, not lines; the
//!   tail's end check compares timestamps, so a long last line still passes it — unless it is
//!   unterminated and longer than the entries asked for: then the check gives up after a few
//!   tries with a warning, and that last line is not printed.
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
    // One log across restarts: no request can be answered by another instance.
    View::first(life)
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

/// Real-daemon helpers for tests: the Docker engine and the busybox image made by
/// `scripts/dev-services.sh`, or a skip (a failure when `CI` is set).
#[cfg(test)]
pub(crate) mod testing {
    use crate::image::docker::DockerClient;
    use bollard::models::ContainerCreateBody;
    use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
    use std::collections::HashMap;

    pub fn busybox() -> String {
        std::env::var("HVDCTL_TEST_BUSYBOX_IMAGE")
            .unwrap_or_else(|_| "hvdctl-test/busybox:latest".into())
    }

    /// The daemon with the busybox image, or None (SKIPPED printed) — a failure under CI.
    pub async fn docker() -> Option<DockerClient> {
        let unavailable = |why: String| -> Option<DockerClient> {
            if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
                panic!("CI is set but the Docker engine for the log tests is not available: {why}");
            }
            crate::errln!("SKIPPED: no Docker engine for the log tests: {why}");
            None
        };
        let d = match DockerClient::connect().await {
            Ok(d) => d,
            Err(e) => return unavailable(e.to_string()),
        };
        if d.bollard().inspect_image(&busybox()).await.is_err() {
            return unavailable(format!("image {} is missing", busybox()));
        }
        Some(d)
    }

    /// A unique container name.
    pub fn name(prefix: &str) -> String {
        format!("{prefix}-{:08x}", rand::random::<u32>())
    }

    /// Creates and starts a busybox container running `sh -c script`; returns its id.
    pub async fn start(
        d: &DockerClient,
        name: &str,
        script: &str,
        labels: HashMap<String, String>,
    ) -> String {
        let body = ContainerCreateBody {
            image: Some(busybox()),
            cmd: Some(vec!["sh".into(), "-c".into(), script.into()]),
            labels: Some(labels),
            ..Default::default()
        };
        let id = d
            .bollard()
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.into()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .expect("create container")
            .id;
        d.bollard()
            .start_container(&id, None)
            .await
            .expect("start container");
        id
    }

    pub async fn remove(d: &DockerClient, id: &str) {
        let _ = d
            .bollard()
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::printer::{Format, Style};
    use super::super::tail::Ts;
    use super::*;
    use bytes::Bytes;
    use futures::{AsyncBufReadExt, AsyncReadExt};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn out(m: &str) -> LogOutput {
        LogOutput::StdOut {
            message: Bytes::copy_from_slice(m.as_bytes()),
        }
    }

    fn err(m: &str) -> LogOutput {
        LogOutput::StdErr {
            message: Bytes::copy_from_slice(m.as_bytes()),
        }
    }

    #[test]
    fn frames_become_timestamped_lines() {
        let mut f = Frames::default();
        let mut b = Vec::new();
        f.push(out("2026-01-01T00:00:01.000000001Z hello\n"), &mut b);
        // A long stdout line in two entries, a stderr line between them.
        f.push(out("2026-01-01T00:00:02.000000000Z long"), &mut b);
        f.push(err("2026-01-01T00:00:02.500000000Z err\n"), &mut b);
        f.push(out("2026-01-01T00:00:03.000000000Z  line\n"), &mut b);
        f.push(out("2026-01-01T00:00:04.000000000Z tail"), &mut b);
        f.push(err("2026-01-01T00:00:03.500000000Z half"), &mut b);
        assert_eq!(
            String::from_utf8(b.clone()).unwrap(),
            "2026-01-01T00:00:01.000000001Z hello\n\
             2026-01-01T00:00:02.500000000Z err\n\
             2026-01-01T00:00:03.000000000Z long line\n"
        );
        // The end: both unterminated lines, older first, the last one left unterminated.
        b.clear();
        f.finish(&mut b);
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "2026-01-01T00:00:03.500000000Z half\n2026-01-01T00:00:04.000000000Z tail"
        );
    }

    #[test]
    fn container_views() {
        let c = |v: serde_json::Value| -> ContainerInspectResponse {
            serde_json::from_value(v).unwrap()
        };
        let v = view(&c(serde_json::json!({"State": {"Status": "running"}})));
        assert_eq!(
            (v.restart, v.life, v.has_previous),
            (0, Life::Running, false)
        );
        let v = view(&c(
            serde_json::json!({"State": {"Status": "exited", "ExitCode": 1}}),
        ));
        assert_eq!(v.life, Life::Dead { for_good: true });
        let v = view(&c(
            serde_json::json!({"State": {"Status": "exited", "ExitCode": 1},
            "HostConfig": {"RestartPolicy": {"Name": "on-failure"}}}),
        ));
        assert_eq!(v.life, Life::Dead { for_good: false });
        let v = view(&c(serde_json::json!({"State": {"Status": "created"}})));
        assert!(matches!(
            v.life,
            Life::NotStarted {
                for_good: false,
                ..
            }
        ));
    }

    /// A source whose streams break: each (but end checks) is cut after 50–400 lines the
    /// client has not seen before (a cut sooner than that could starve a client that re-reads
    /// up to a second of lines), in the middle of the next line, alternately by a clean end of
    /// body and by an error.
    #[derive(Clone)]
    struct Faulty {
        inner: ContainerSource,
        opened: Arc<AtomicU64>,
        newest: Arc<Mutex<Option<Ts>>>,
    }

    impl LogSource for Faulty {
        fn engine(&self) -> Engine {
            Engine::Docker
        }

        async fn look(&self, t: &Target) -> Result<Option<View>, SourceError> {
            self.inner.look(t).await
        }

        async fn open(&self, t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
            let inner = self.inner.open(t, req).await?;
            if req.tail_lines.is_some() {
                return Ok(inner);
            }
            let n = self.opened.fetch_add(1, Ordering::Relaxed);
            let budget: u64 = rand::random_range(50..400);
            let newest = self.newest.clone();
            let seen = *newest.lock().unwrap();
            // (stream, new lines so far, cut made)
            let state = (Some(inner), 0u64);
            let lines = futures::stream::unfold(state, move |(s, fresh)| {
                let newest = newest.clone();
                async move {
                    let mut s = s?;
                    let mut line = Vec::new();
                    match s.read_until(b'\n', &mut line).await {
                        Ok(0) => return None,
                        Ok(_) => {}
                        Err(e) => return Some((Err(e), (None, fresh))),
                    }
                    if fresh >= budget {
                        // Half of the next line, then the cut.
                        line.truncate(line.len() / 2);
                        return Some((Ok(line), (None, fresh)));
                    }
                    let ts = parse_ts(super::super::tail::split_ts(&line).0);
                    let mut fresh = fresh;
                    if ts.is_some() && ts > seen {
                        fresh += 1;
                        let mut newest = newest.lock().unwrap();
                        *newest = (*newest).max(ts);
                    }
                    Some((Ok(line), (Some(s), fresh)))
                }
            });
            let end = futures::stream::iter(
                (n % 2 == 1).then(|| Err(std::io::Error::other("cut by the test"))),
            );
            Ok(Box::pin(lines.chain(end).into_async_read()))
        }
    }

    /// A busybox container writing `n` numbered lines in bursts (one on stderr), then an
    /// unterminated last line; its log read while it runs through streams cut every few tens
    /// of milliseconds: every line must come out exactly once, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_container_log_cut_again_and_again_loses_and_repeats_nothing() {
        let Some(d) = testing::docker().await else {
            return;
        };
        let n = 6000;
        let script = format!(
            "sleep 0.3; i=0; while [ $i -lt {n} ]; do \
               if [ $i = 3000 ]; then sleep 0.1; echo \"line $i\" >&2; sleep 0.1; \
               else echo \"line $i\"; fi; \
               i=$((i+1)); if [ $((i % 200)) = 0 ]; then sleep 0.05; fi; \
             done; printf end"
        );
        let name = testing::name("hvdctl-logs-cut");
        let id = testing::start(&d, &name, &script, Default::default()).await;
        let target = Target {
            engine: Engine::Docker,
            pod: name.clone(),
            uid: id.clone(),
            container: "c".into(),
            role: "worker".into(),
            index: Some(0),
            ranks: Default::default(),
            prefix: "worker-0".into(),
        };
        let opened = Arc::new(AtomicU64::new(0));
        let source = Faulty {
            inner: ContainerSource::new(d.clone()),
            opened: opened.clone(),
            newest: Arc::default(),
        };
        let style = Style {
            format: Format::Text,
            prefix: false,
            timestamps: false,
            color: false,
            rank: None,
        };
        // The bound only tells a hang from a slow machine: hundreds of reopened streams take
        // a while when the machine is busy.
        let (report, printed) =
            super::super::tail::run_to_end(&target, style, source, false, Duration::from_secs(300))
                .await;
        // The whole log, read in one piece, for comparison.
        let mut whole = Vec::new();
        let plain = ContainerSource::new(d.clone())
            .open(&target, &LogRequest::default())
            .await;
        if let Ok(mut s) = plain {
            let _ = s.read_to_end(&mut whole).await;
        }
        testing::remove(&d, &id).await;
        let text = String::from_utf8(printed).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let report = report.unwrap_or_else(|_| {
            panic!(
                "the tail did not end within 300 s of the container's start: {} lines printed of {}, {} streams opened, the last line {:?}",
                lines.len(),
                n + 1,
                opened.load(Ordering::Relaxed),
                lines.last()
            )
        });
        let mut want: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
        want.push("end".into());
        let first_wrong = lines.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            lines == want,
            "{} lines printed of {}, first difference at {first_wrong:?} ({:?}); report {report:?}; the log has {} lines",
            lines.len(),
            want.len(),
            first_wrong.map(|i| (lines.get(i), want.get(i))),
            whole.split(|&c| c == b'\n').count()
        );
        assert_eq!(report.warning, None);
        let cuts = opened.load(Ordering::Relaxed);
        crate::errln!("{cuts} streams opened, {} requests", report.requests);
        assert!(cuts >= 5, "the streams were cut only {cuts} times");
    }
}
