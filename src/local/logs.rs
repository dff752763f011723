//! `logs [-f]` for local runs: every container's log through the same printer as Kubernetes
//! runs ([`crate::logs::printer`]: `launcher | …`, `worker-3 | …`, or `-o json` objects), one
//! task per container, one bounded channel, batched writes.
//!
//! Containers are never auto-removed, so a finished container's log is complete until
//! `undeploy`; the follow stream of a container ends after its last line once it stops.
//! Following ends when the job has finished (see [`super::status::job_state`]) and every
//! stream has drained — then the exit code is the job's (launcher exit 0 → 0, else 1). A
//! stream that breaks is reopened from its last timestamp, skipping what was printed.

use super::status::{Container, containers, job_state};
use super::{LocalRef, docker_error};
use crate::cli::RoleFilter;
use crate::cluster::status::JobState;
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use crate::logs::printer::{self, BATCH, CHANNEL, LineFormat};
use crate::logs::target::Target;
use crate::logs::{LogOptions, LogsOutcome};
use crate::ui::Ui;
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptions;
use futures::StreamExt;
use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// How long running containers may keep streaming after the job has finished (workers stop
/// within a second or two of the launcher's end).
const DRAIN_GRACE: Duration = Duration::from_secs(15);

/// Prints the logs of every container of `r` on stdout.
pub async fn run(
    docker: &DockerClient,
    r: &LocalRef,
    opts: LogOptions,
    ui: &Ui,
) -> Result<LogsOutcome> {
    run_to(docker, r, opts, ui, || Box::new(std::io::stdout().lock())).await
}

/// Prints the logs of every container of `r` to the writer `out` makes (on a blocking
/// thread). With `follow`, returns once the job has finished and every line is out.
pub async fn run_to<F>(
    docker: &DockerClient,
    r: &LocalRef,
    opts: LogOptions,
    ui: &Ui,
    out: F,
) -> Result<LogsOutcome>
where
    F: FnOnce() -> Box<dyn Write> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Vec<u8>>(CHANNEL);
    let printer = tokio::task::spawn_blocking(move || printer::print_all(rx, out()));
    let mut ts = Tails::default();
    let result = drive(docker, r, &opts, ui, &tx, &mut ts).await;
    let Tails {
        set: mut tails,
        seen,
        mut reports,
    } = ts;
    if result.is_err() {
        tails.abort_all();
    }
    while let Some(t) = tails.join_next().await {
        if let Ok(t) = t {
            reports.push(t);
        }
    }
    let mut lines = 0;
    let mut closed = false;
    for t in reports {
        lines += t.lines;
        closed |= t.closed;
        if let Some(w) = t.warning {
            ui.note(format!("warning: {w}"));
        }
    }
    drop(tx);
    let printed = printer
        .await
        .map_err(|e| Error::failure(format!("log printer: {e}")))?
        .map_err(|e| Error::failure(format!("writing logs to stdout: {e}")))?;
    let state = result?;
    Ok(LogsOutcome {
        state: if printed.closed || closed {
            None
        } else {
            state
        },
        lines,
        targets: seen.len(),
    })
}

fn wanted(c: &Container, opts: &LogOptions) -> bool {
    let role_ok = match opts.role {
        RoleFilter::All => true,
        RoleFilter::Launcher => c.role == crate::kinds::ROLE_LAUNCHER,
        RoleFilter::Worker => c.role == crate::kinds::ROLE_WORKER,
    };
    role_ok
        && opts.pod.as_ref().is_none_or(|re| re.is_match(&c.name))
        && opts.container.as_ref().is_none_or(|want| *want == c.role)
}

fn target(c: &Container) -> Target {
    Target {
        pod: c.name.clone(),
        uid: c.id.clone(),
        container: c.role.clone(),
        role: c.role.clone(),
        prefix: c.short_name(),
    }
}

async fn drive(
    docker: &DockerClient,
    r: &LocalRef,
    opts: &LogOptions,
    ui: &Ui,
    tx: &mpsc::Sender<Vec<u8>>,
    ts: &mut Tails,
) -> Result<Option<JobState>> {
    let Tails {
        set: tails,
        seen,
        reports,
    } = ts;
    let spawn = |tails: &mut JoinSet<TailReport>, seen: &mut HashSet<String>, cs: &[Container]| {
        for c in cs {
            if c.has_started() && wanted(c, opts) && seen.insert(c.id.clone()) {
                let t = Tail {
                    docker: docker.clone(),
                    fmt: LineFormat::new(&target(c), opts.style),
                    target: target(c),
                    tx: tx.clone(),
                    follow: opts.follow,
                    since: since(opts),
                    tail: opts.tail,
                };
                tails.spawn(t.run());
            }
        }
    };
    let cs = containers(docker, r).await?;
    if cs.is_empty() {
        return Err(Error::failure(format!(
            "local run {} ({}) has no containers on this Docker engine",
            r.run_id, r.job
        ))
        .hint("it was undeployed, or deployed against another Docker engine (DOCKER_HOST)"));
    }
    if !cs.iter().any(|c| wanted(c, opts)) {
        return Err(Error::input(format!(
            "no container of the {} of {} matches --role/--pod/--container",
            cs.len(),
            r.job
        )));
    }
    if !opts.follow {
        spawn(tails, seen, &cs);
        return Ok(None);
    }
    let bar = if seen.is_empty() && !cs.iter().any(Container::has_started) {
        Some(ui.spinner(format!("waiting for the containers of {} to start", r.job)))
    } else {
        None
    };
    spawn(tails, seen, &cs);
    let mut finished_at: Option<(JobState, Instant)> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(t) = tails.join_next(), if !tails.is_empty() => {
                if let Ok(rep) = t {
                    let closed = rep.closed;
                    reports.push(rep);
                    if closed {
                        return Ok(None);
                    }
                }
            }
        }
        let cs = containers(docker, r).await?;
        spawn(tails, seen, &cs);
        if let Some(b) = &bar
            && !seen.is_empty()
        {
            b.finish_and_clear();
        }
        let (state, _) = job_state(&r.job, &cs);
        if cs.is_empty() {
            return Err(Error::failure(format!(
                "the containers of {} were removed while following its logs",
                r.job
            )));
        }
        if state.is_finished() && finished_at.is_none() {
            finished_at = Some((state, Instant::now()));
        }
        if let Some((state, at)) = finished_at {
            // Done when every tailed container has stopped (its stream then ends by itself)
            // or the grace period is over.
            let all_stopped = cs
                .iter()
                .filter(|c| seen.contains(&c.id))
                .all(Container::finished);
            if all_stopped || at.elapsed() >= DRAIN_GRACE {
                if !all_stopped {
                    // Running containers' streams would never end: stop them after what
                    // they have printed so far reached the printer.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    tails.abort_all();
                }
                if let Some(b) = &bar {
                    b.finish_and_clear();
                }
                return Ok(Some(state));
            }
        }
    }
}

/// `--since`/`--since-time` as Docker's `since` (unix seconds, floored).
fn since(opts: &LogOptions) -> i32 {
    if let Some(t) = opts.since_time {
        return i32::try_from(t.as_second()).unwrap_or(0);
    }
    if let Some(s) = opts.since_seconds {
        let now = jiff::Timestamp::now().as_second();
        return i32::try_from(now - s).unwrap_or(0);
    }
    0
}

/// The tails of a `logs` command: running, containers already tailed, finished reports.
#[derive(Default)]
struct Tails {
    set: JoinSet<TailReport>,
    seen: HashSet<String>,
    reports: Vec<TailReport>,
}

struct TailReport {
    lines: u64,
    closed: bool,
    warning: Option<String>,
}

/// One container's log stream with its resume state.
struct Tail {
    docker: DockerClient,
    target: Target,
    fmt: LineFormat,
    tx: mpsc::Sender<Vec<u8>>,
    follow: bool,
    since: i32,
    tail: Option<i64>,
}

/// Splits Docker's log frames into timestamped lines (one buffer per output stream, since a
/// long line arrives as several frames, each with its own timestamp).
#[derive(Default)]
struct Lines {
    partial: [Vec<u8>; 2],
    ts: [Vec<u8>; 2],
}

impl Lines {
    /// Feeds one frame (`<RFC 3339 ts> <text>`), calling `line(ts, text)` per complete line.
    fn feed(&mut self, stream: usize, frame: &[u8], mut line: impl FnMut(&[u8], &[u8])) {
        let (ts, text) = match memchr::memchr(b' ', frame) {
            Some(i) if frame[..i].first().is_some_and(u8::is_ascii_digit) => {
                (&frame[..i], &frame[i + 1..])
            }
            _ => (&frame[..0], frame),
        };
        if self.partial[stream].is_empty() {
            self.ts[stream] = ts.to_vec();
        }
        let mut rest = text;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            let buf = &mut self.partial[stream];
            if buf.is_empty() {
                line(&self.ts[stream], &rest[..i]);
            } else {
                buf.extend_from_slice(&rest[..i]);
                line(&self.ts[stream], buf);
                buf.clear();
            }
            rest = &rest[i + 1..];
            self.ts[stream] = ts.to_vec();
        }
        self.partial[stream].extend_from_slice(rest);
    }

    /// The last line without a newline, at the end of the log.
    fn flush(&mut self, mut line: impl FnMut(&[u8], &[u8])) {
        for s in 0..2 {
            if !self.partial[s].is_empty() {
                line(&self.ts[s], &self.partial[s]);
                self.partial[s].clear();
            }
        }
    }
}

impl Tail {
    async fn run(self) -> TailReport {
        let mut rep = TailReport {
            lines: 0,
            closed: false,
            warning: None,
        };
        // Resume state: the newest timestamp printed and how many lines carried it.
        let mut last_ts: Vec<u8> = Vec::new();
        let mut at_last = 0u64;
        let mut attempts = 0;
        let mut since = self.since;
        let mut tail = self.tail;
        loop {
            let opts = LogsOptions {
                follow: self.follow,
                stdout: true,
                stderr: true,
                since,
                timestamps: true,
                tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
                ..Default::default()
            };
            let mut stream = self.docker.bollard().logs(&self.target.uid, Some(opts));
            let mut lines = Lines::default();
            let mut batch: Vec<u8> = Vec::with_capacity(BATCH);
            let skip_until = last_ts.clone();
            let mut skipped_at_last = 0u64;
            let mut failed: Option<String> = None;
            while let Some(item) = stream.next().await {
                let (stream_no, frame) = match item {
                    Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                        (0, message)
                    }
                    Ok(LogOutput::StdErr { message }) => (1, message),
                    Ok(LogOutput::StdIn { .. }) => continue,
                    Err(e) => {
                        failed = Some(
                            docker_error(format!("reading the log of {}", self.target.pod), &e)
                                .message,
                        );
                        break;
                    }
                };
                let mut emit = |ts: &[u8], text: &[u8]| {
                    if !skip_until.is_empty() {
                        if ts < skip_until.as_slice() {
                            return;
                        }
                        if ts == skip_until.as_slice() && skipped_at_last < at_last {
                            skipped_at_last += 1;
                            return;
                        }
                    }
                    if ts == last_ts.as_slice() {
                        at_last += 1;
                    } else {
                        last_ts = ts.to_vec();
                        at_last = 1;
                    }
                    self.fmt.push(&mut batch, ts, text);
                    rep.lines += 1;
                };
                lines.feed(stream_no, &frame, &mut emit);
                if batch.len() >= BATCH
                    && self
                        .tx
                        .send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))
                        .await
                        .is_err()
                {
                    rep.closed = true;
                    return rep;
                }
                // Flush promptly when the stream is quiet: a live log must not wait for a
                // full batch.
                if !batch.is_empty()
                    && frame.len() < 4096
                    && self.tx.capacity() > CHANNEL / 2
                    && self.tx.send(std::mem::take(&mut batch)).await.is_err()
                {
                    rep.closed = true;
                    return rep;
                }
            }
            if failed.is_none() {
                lines.flush(|ts, text| {
                    self.fmt.push(&mut batch, ts, text);
                    rep.lines += 1;
                });
            }
            if !batch.is_empty() && self.tx.send(batch).await.is_err() {
                rep.closed = true;
                return rep;
            }
            match failed {
                None => return rep,
                Some(msg) => {
                    attempts += 1;
                    if attempts > 5 {
                        rep.warning = Some(format!("{msg} (gave up after {attempts} attempts)"));
                        return rep;
                    }
                    // Reopen from the second of the last line printed; the skip above drops
                    // what was already out.
                    if let Some(t) = std::str::from_utf8(&last_ts)
                        .ok()
                        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                    {
                        since = i32::try_from(t.as_second()).unwrap_or(since);
                        tail = None;
                    }
                    tokio::time::sleep(Duration::from_millis(200 * attempts)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_lines() {
        let mut l = Lines::default();
        let mut got: Vec<(String, String)> = Vec::new();
        let mut push = |ts: &[u8], t: &[u8]| {
            got.push((
                String::from_utf8_lossy(ts).into(),
                String::from_utf8_lossy(t).into(),
            ))
        };
        l.feed(0, b"2026-01-01T00:00:01.000000001Z hello\n", &mut push);
        l.feed(0, b"2026-01-01T00:00:02Z long", &mut push);
        l.feed(1, b"2026-01-01T00:00:02.5Z err\n", &mut push);
        l.feed(0, b"2026-01-01T00:00:03Z  line\nnext\n", &mut push);
        l.feed(0, b"2026-01-01T00:00:04Z tail", &mut push);
        l.flush(&mut push);
        assert_eq!(
            got,
            [
                ("2026-01-01T00:00:01.000000001Z".into(), "hello".into()),
                ("2026-01-01T00:00:02.5Z".into(), "err".into()),
                ("2026-01-01T00:00:02Z".into(), "long line".into()),
                ("2026-01-01T00:00:03Z".into(), "next".into()),
                ("2026-01-01T00:00:04Z".into(), "tail".into()),
            ]
        );
    }
}
