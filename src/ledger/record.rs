//! The flight recorder: what hvdctl saw of a run, kept under `.hvdctl/runs/<run id>/` so
//! `status`, `logs` and `runs` still answer once the engine has deleted the run.
//!
//! * `status.json`: the last status report (state, conditions, every pod/container with its
//!   last termination and exit code, phases, provenance).
//! * `events.json`: the run's events.
//! * `undeployed.json`: when `undeploy` (or `dev`'s end) removed the run, once it did.
//! * `logs.json` + `logs/<pod>.<container>.log.gz`: every container's log in the kubelet's
//!   `<timestamp> <text>` form, gzip members appended as lines come. Each stream keeps its
//!   resume point (the last timestamp written and how many lines carried it, the tail's
//!   [`Resume`]), so a second recording adds only what is new.
//!
//! Logs are read from the engine line by line and written by a blocking thread through a
//! bounded channel: memory does not grow with the log. Beyond `recorder.maxMB` the oldest
//! lines of every stream are dropped, a marker line saying how many.

use crate::cluster::events::RunEvent;
use crate::error::{Error, Result};
use crate::logs::LogOptions;
use crate::logs::printer::LineFormat;
use crate::logs::source::{LogRequest, LogSource};
use crate::logs::tail::{ReadPos, Resume, Ts, parse_ts, split_ts};
use crate::logs::target::{Engine, Target};
use crate::options::RoleFilter;
use crate::report::StatusReport;
use crate::types::EngineKind;
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

const STATUS: &str = "status.json";
const EVENTS: &str = "events.json";
const UNDEPLOYED: &str = "undeployed.json";
const INDEX: &str = "logs.json";
const LOGS: &str = "logs";
/// Bytes of lines handed to the writer at a time.
const CHUNK: usize = 64 * 1024;

/// `<app dir>/.hvdctl/runs/<run id>`.
pub fn dir(app_dir: &Path, run_id: &str) -> PathBuf {
    app_dir.join(crate::state::DIR).join("runs").join(run_id)
}

/// One container's recorded log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stream {
    file: String,
    pod: String,
    uid: String,
    container: String,
    role: String,
    index: Option<u32>,
    /// The launcher's rank-tags label, if any.
    rank_tags: Option<String>,
    prefix: String,
    /// Resume point: the last timestamp written (seconds, nanoseconds) and lines at it.
    last: Option<(i64, u32)>,
    at_last: u64,
}

impl Stream {
    fn resume(&self) -> Resume {
        Resume {
            last: self.last.map(|(secs, nanos)| Ts { secs, nanos }),
            at_last: self.at_last,
        }
    }

    fn target(&self, engine: Engine) -> Target {
        let tags = self.rank_tags.clone();
        Target {
            engine,
            pod: self.pod.clone(),
            uid: self.uid.clone(),
            container: self.container.clone(),
            role: self.role.clone(),
            index: self.index,
            ranks: crate::logs::rank::TagForms::of_labels(&self.role, |_| tags.as_deref()),
            prefix: self.prefix.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    streams: Vec<Stream>,
}

/// A run's record as read back.
#[derive(Debug, Clone)]
pub struct Record {
    pub dir: PathBuf,
    pub report: StatusReport,
    /// When hvdctl removed the run from its engine (RFC 3339), if it did.
    pub undeployed: Option<String>,
    /// When the record was last written (the status file's time): the last time hvdctl saw
    /// the run on its engine.
    pub saved: Option<jiff::Timestamp>,
    index: Index,
}

/// What `undeployed.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Undeployed {
    undeployed: String,
}

fn corrupt(p: &Path, e: impl std::fmt::Display) -> Error {
    Error::input(format!("flight record {}: {e}", p.display())).hint(format!(
        "the record cannot be read; delete {} to drop it",
        p.parent().map_or(p, |d| d).display()
    ))
}

/// The record of `run_id`, if there is one; an error naming the file when it is corrupt.
pub fn load(app_dir: &Path, run_id: &str) -> Result<Option<Record>> {
    let d = dir(app_dir, run_id);
    if !d.is_dir() {
        return Ok(None);
    }
    let read_json = |name: &str| -> Result<Option<serde_json::Value>> {
        let p = d.join(name);
        match crate::files::read(&p, crate::files::STATE) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| corrupt(&p, e)),
            Err(crate::files::Refused::Missing) => Ok(None),
            Err(r) => Err(corrupt(&p, r.error(&p, crate::files::STATE).message)),
        }
    };
    let status = read_json(STATUS)?.ok_or_else(|| corrupt(&d.join(STATUS), "missing"))?;
    let mut report: StatusReport =
        serde_json::from_value(status).map_err(|e| corrupt(&d.join(STATUS), e))?;
    report.source = super::Source::Record;
    let index: Index = match read_json(INDEX)? {
        Some(v) => serde_json::from_value(v).map_err(|e| corrupt(&d.join(INDEX), e))?,
        None => Index::default(),
    };
    let undeployed = match read_json(UNDEPLOYED)? {
        Some(v) => Some(
            serde_json::from_value::<Undeployed>(v)
                .map_err(|e| corrupt(&d.join(UNDEPLOYED), e))?
                .undeployed,
        ),
        None => None,
    };
    let saved = std::fs::metadata(d.join(STATUS))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| jiff::Timestamp::try_from(t).ok());
    Ok(Some(Record {
        dir: d,
        report,
        undeployed,
        saved,
        index,
    }))
}

/// Notes in `run_id`'s record (if it has one) that hvdctl removed the run from its engine now.
pub fn mark_undeployed(app_dir: &Path, run_id: &str) -> Result<()> {
    let d = dir(app_dir, run_id);
    if !d.join(STATUS).is_file() {
        return Ok(());
    }
    crate::state::write(
        &d.join(UNDEPLOYED),
        &Undeployed {
            undeployed: crate::state::now(),
        },
    )
}

/// The records of `app`'s runs under `app_dir`, newest first (by the run's creation);
/// corrupt ones reported through `warn` and skipped.
pub fn of_app(app_dir: &Path, app: &str, warn: &dyn Fn(String)) -> Vec<Record> {
    let mut recs: Vec<Record> = all(app_dir, warn)
        .into_iter()
        .filter(|r| r.report.app == app)
        .collect();
    recs.sort_by_key(|r| std::cmp::Reverse(r.created()));
    recs
}

/// Every record under `app_dir`; a corrupt one is reported through `warn` and skipped.
pub fn all(app_dir: &Path, warn: &dyn Fn(String)) -> Vec<Record> {
    let root = app_dir.join(crate::state::DIR).join("runs");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let id = e.file_name().to_string_lossy().into_owned();
        match load(app_dir, &id) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {}
            Err(e) => warn(format!("skipping a corrupt flight record: {}", e.message)),
        }
    }
    out
}

/// Writes a run's record: opened at the start of a recording, saved at its end.
pub struct Recorder {
    dir: PathBuf,
    index: Index,
    max_bytes: u64,
}

impl Recorder {
    /// The record of `run_id` under `app_dir` (its earlier streams and their resume points
    /// kept, or afresh when there are none or they cannot be read).
    pub fn open(app_dir: &Path, run_id: &str, max_mb: u64) -> Result<Recorder> {
        let d = dir(app_dir, run_id);
        std::fs::create_dir_all(d.join(LOGS))
            .map_err(|e| Error::failure(format!("cannot create {}: {e}", d.display())))?;
        let index = crate::state::read::<Index>(&d.join(INDEX))
            .ok()
            .flatten()
            .unwrap_or_default();
        Ok(Recorder {
            dir: d,
            index,
            max_bytes: max_mb.saturating_mul(1024 * 1024),
        })
    }

    /// Appends what is new in each target's log (read from `source`, not following).
    pub async fn logs<S: LogSource>(&mut self, source: &S, targets: Vec<Target>) {
        for t in targets {
            let at = match self
                .index
                .streams
                .iter()
                .position(|s| s.pod == t.pod && s.container == t.container)
            {
                Some(i) => i,
                None => {
                    self.index.streams.push(Stream {
                        file: format!("{}.{}.log.gz", safe(&t.pod), safe(&t.container)),
                        pod: t.pod.clone(),
                        uid: t.uid.clone(),
                        container: t.container.clone(),
                        role: t.role.clone(),
                        index: t.index,
                        rank_tags: t.ranks.label().map(str::to_string),
                        prefix: t.prefix.clone(),
                        last: None,
                        at_last: 0,
                    });
                    self.index.streams.len() - 1
                }
            };
            let stream = &mut self.index.streams[at];
            stream.uid = t.uid.clone();
            let path = self.dir.join(LOGS).join(&stream.file);
            // A restarted pod's container: what its previous instance wrote after the resume
            // point first (Kubernetes keeps one; Docker keeps one log across restarts).
            let mut resume = stream.resume();
            if matches!(source.look(&t).await, Ok(Some(v)) if v.has_previous)
                && let Ok(r) = append(source, &t, resume, true, &path).await
            {
                resume = r;
            }
            if let Ok(r) = append(source, &t, resume, false, &path).await {
                resume = r;
            }
            stream.last = resume.last.map(|t| (t.secs, t.nanos));
            stream.at_last = resume.at_last;
        }
    }

    /// Saves the report, the events and the streams' index, then keeps the logs within the cap.
    pub fn save(self, report: &StatusReport, events: &[RunEvent]) -> Result<PathBuf> {
        crate::state::write(&self.dir.join(STATUS), report)?;
        crate::state::write(&self.dir.join(EVENTS), &events)?;
        crate::state::write(&self.dir.join(INDEX), &self.index)?;
        cap(&self.dir.join(LOGS), self.max_bytes)?;
        Ok(self.dir)
    }
}

/// A file-name-safe form of a pod or container name.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Reads `t`'s log (its `previous` instance's) from its resume point and appends the new
/// lines to `path` (one gzip member per recording); returns the new resume point.
async fn append<S: LogSource>(
    source: &S,
    t: &Target,
    mut resume: Resume,
    previous: bool,
    path: &Path,
) -> std::result::Result<Resume, ()> {
    use futures::AsyncBufReadExt;
    let req = LogRequest {
        since_time: resume.since_time(),
        previous,
        ..Default::default()
    };
    let mut stream = source.open(t, &req).await.map_err(|_| ())?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>(4);
    let file = path.to_path_buf();
    let writer = tokio::task::spawn_blocking(move || write_gz(&file, rx));
    let mut pos = ReadPos::default();
    let mut line = Vec::new();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut failed = false;
    loop {
        line.clear();
        match stream.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => {
                failed = true;
                break;
            }
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        if !resume.accept(&mut pos, parse_ts(split_ts(body).0)) {
            continue;
        }
        chunk.extend_from_slice(body);
        chunk.push(b'\n');
        if chunk.len() >= CHUNK && tx.send(std::mem::take(&mut chunk)).await.is_err() {
            failed = true;
            break;
        }
    }
    if !chunk.is_empty() && !failed {
        failed = tx.send(chunk).await.is_err();
    }
    drop(tx);
    let written = writer.await.map_err(|_| ())?;
    if failed || written.is_err() {
        return Err(());
    }
    Ok(resume)
}

/// Appends the chunks of `rx` to `path` as one gzip member (none when nothing comes).
fn write_gz(path: &Path, mut rx: mpsc::Receiver<Vec<u8>>) -> std::io::Result<()> {
    let mut enc: Option<GzEncoder<std::fs::File>> = None;
    while let Some(chunk) = rx.blocking_recv() {
        let e = match &mut enc {
            Some(e) => e,
            None => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                enc.insert(GzEncoder::new(f, Compression::default()))
            }
        };
        e.write_all(&chunk)?;
    }
    if let Some(e) = enc {
        e.finish()?.sync_all()?;
    }
    Ok(())
}

/// Keeps the logs under `dir` within `max` bytes on disk: when over, every stream drops its
/// oldest lines in proportion, a marker line first saying how many.
fn cap(dir: &Path, max: u64) -> Result<()> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let size = |p: &PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let total: u64 = files.iter().map(size).sum();
    if total <= max {
        return Ok(());
    }
    // Aim a little below the cap: compression of what is kept differs from the whole.
    let keep = (max as f64 * 0.9) / total as f64;
    for f in &files {
        shrink(f, keep).map_err(|e| Error::failure(format!("cannot trim {}: {e}", f.display())))?;
    }
    Ok(())
}

/// Rewrites a recorded log keeping the newest `keep` fraction of its bytes (whole lines),
/// led by a marker line stamped like the first line kept.
fn shrink(path: &Path, keep: f64) -> std::io::Result<()> {
    let lines = || -> std::io::Result<_> {
        Ok(BufReader::new(MultiGzDecoder::new(crate::files::open_io(path)?)).split(b'\n'))
    };
    let (mut count, mut bytes) = (0u64, 0u64);
    for l in lines()? {
        count += 1;
        bytes += l?.len() as u64 + 1;
    }
    let budget = (bytes as f64 * keep) as u64;
    let (mut drop_n, mut dropped_bytes) = (0u64, 0u64);
    for l in lines()? {
        if bytes - dropped_bytes <= budget || drop_n + 1 >= count {
            break;
        }
        dropped_bytes += l?.len() as u64 + 1;
        drop_n += 1;
    }
    if drop_n == 0 {
        return Ok(());
    }
    let tmp = path.with_extension("tmp");
    let mut enc = GzEncoder::new(std::fs::File::create(&tmp)?, Compression::default());
    let mut marked = false;
    for l in lines()?.skip(drop_n as usize) {
        let l = l?;
        if !marked {
            let ts = split_ts(&l).0;
            enc.write_all(ts)?;
            enc.write_all(
                format!(
                    " hvdctl: {drop_n} older line(s) dropped (the run's record is capped by recorder.maxMB)\n"
                )
                .as_bytes(),
            )?;
            marked = true;
        }
        enc.write_all(&l)?;
        enc.write_all(b"\n")?;
    }
    enc.finish()?.sync_all()?;
    std::fs::rename(tmp, path)
}

/// What [`print_logs`] printed.
pub struct Replayed {
    pub lines: u64,
    /// Workers the run had that were never recorded (`worker-<i>`).
    pub not_recorded: Vec<String>,
}

impl Record {
    /// When the run was created (its `created` phase), if the record says.
    pub fn created(&self) -> Option<jiff::Timestamp> {
        self.report.phases.created.as_deref()?.parse().ok()
    }

    /// How the run left its engine, for a person: `undeployed 3m ago`, or for a run removed
    /// by other means `not on its engine; recorded 3m ago`.
    pub fn gone(&self) -> String {
        let now = jiff::Timestamp::now().as_second();
        let ago = |t: jiff::Timestamp| super::human_seconds(now - t.as_second());
        match self
            .undeployed
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        {
            Some(t) => format!("undeployed {} ago", ago(t)),
            None => match self.saved {
                Some(t) => format!("not on its engine; recorded {} ago", ago(t)),
                None => "not on its engine".into(),
            },
        }
    }

    /// The run's events as recorded.
    pub fn events(&self) -> Result<Vec<RunEvent>> {
        let p = self.dir.join(EVENTS);
        Ok(crate::state::read::<Vec<RunEvent>>(&p)
            .map_err(|e| corrupt(&p, e.message))?
            .unwrap_or_default())
    }

    fn engine(&self) -> Engine {
        match self.report.engine {
            EngineKind::Kubernetes => Engine::Kubernetes,
            EngineKind::Docker => Engine::Docker,
        }
    }

    /// Prints the recorded logs as `hvdctl logs` prints a live run's (the same prefixes, rank
    /// tags and `--role`/`--pod`/`--container`/`--since`/`--since-time`/`--tail` filters),
    /// container by container, launcher first. Reads and prints on a blocking thread.
    pub async fn print_logs(&self, opts: &LogOptions) -> Result<Replayed> {
        let mut streams = self.index.streams.clone();
        streams.sort_by_key(|s| {
            (
                u8::from(s.role != crate::kinds::ROLE_LAUNCHER),
                s.index.unwrap_or(u32::MAX),
                s.pod.clone(),
                s.container.clone(),
            )
        });
        let expected = self.report.provenance.as_ref().map_or(0, |p| p.workers);
        let not_recorded: Vec<String> = (0..expected)
            .filter(|i| {
                !streams
                    .iter()
                    .any(|s| s.role == crate::kinds::ROLE_WORKER && s.index == Some(*i))
            })
            .map(|i| format!("worker-{i}"))
            .collect();
        let wanted: Vec<(Target, PathBuf)> = streams
            .iter()
            .filter(|s| match opts.role {
                RoleFilter::All => true,
                RoleFilter::Launcher => s.role == crate::kinds::ROLE_LAUNCHER,
                RoleFilter::Worker => s.role == crate::kinds::ROLE_WORKER,
            })
            .filter(|s| opts.pod.as_ref().is_none_or(|re| re.is_match(&s.pod)))
            .filter(|s| opts.container.as_ref().is_none_or(|c| *c == s.container))
            .map(|s| (s.target(self.engine()), self.dir.join(LOGS).join(&s.file)))
            .collect();
        let opts = opts.clone();
        let lines = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut n = 0;
            for (t, path) in &wanted {
                n += replay(t, path, &opts, &mut out)?;
            }
            out.flush()?;
            Ok(n)
        })
        .await
        .map_err(|e| Error::failure(format!("reading the record: {e}")))?;
        let lines = match lines {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
            Err(e) => {
                return Err(Error::failure(format!(
                    "reading the record {}: {e}",
                    self.dir.display()
                )));
            }
        };
        Ok(Replayed {
            lines,
            not_recorded,
        })
    }
}

/// One recorded stream through the printer's line format.
fn replay(
    t: &Target,
    path: &Path,
    opts: &LogOptions,
    out: &mut impl Write,
) -> std::io::Result<u64> {
    // Opened as every file a user could swap is (a FIFO or a device is refused, no hang).
    let open = crate::files::open_io;
    let file = match open(path) {
        Ok(f) => f,
        // A container that never wrote a line has no file.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let since = opts.since_time.or_else(|| {
        opts.since_seconds
            .and_then(|s| jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - s).ok())
    });
    let lines = |f: std::fs::File| BufReader::new(MultiGzDecoder::new(f)).split(b'\n');
    let skip = match opts.tail {
        Some(n) => {
            let total = lines(open(path)?).count() as u64;
            total.saturating_sub(n.max(0) as u64)
        }
        None => 0,
    };
    let mut fmt = LineFormat::new(t, opts.style);
    let mut buf = Vec::new();
    let mut n = 0;
    for l in lines(file).skip(skip as usize) {
        let l = l?;
        let (ts, msg) = split_ts(&l);
        if let Some(s) = since
            && parse_ts(ts).is_some_and(|t| t < Ts::from_jiff(s))
        {
            continue;
        }
        n += fmt.push(&mut buf, ts, msg);
        if buf.len() >= CHUNK {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    n += fmt.finish(&mut buf);
    out.write_all(&buf)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(p: &Path) -> String {
        let mut s = String::new();
        std::io::Read::read_to_string(
            &mut MultiGzDecoder::new(std::fs::File::open(p).unwrap()),
            &mut s,
        )
        .unwrap();
        s
    }

    #[test]
    fn appended_members_read_as_one_log_and_the_cap_drops_the_oldest() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.log.gz");
        for part in 0..2 {
            let (tx, rx) = mpsc::channel(4);
            let mut text = Vec::new();
            for i in 0..1000 {
                text.extend_from_slice(
                    format!(
                        "2026-01-01T00:00:{:02}Z line {part}-{i} {}\n",
                        i % 60,
                        "x".repeat(i % 97)
                    )
                    .as_bytes(),
                );
            }
            tx.try_send(text).unwrap();
            drop(tx);
            write_gz(&p, rx).unwrap();
        }
        let all = read_all(&p);
        assert_eq!(all.lines().count(), 2000);
        assert!(all.starts_with("2026-01-01T00:00:00Z line 0-0 "));
        assert!(all.contains("line 1-999 "));
        let before = std::fs::metadata(&p).unwrap().len();
        cap(tmp.path(), before / 2).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() <= before / 2);
        let kept = read_all(&p);
        let first = kept.lines().next().unwrap();
        assert!(first.contains("older line(s) dropped"), "{first}");
        assert!(kept.contains("line 1-999 "), "the newest line is kept");
        // Nothing dropped beyond what the marker says.
        let n: u64 = first.split(' ').nth(2).unwrap().parse().unwrap();
        assert_eq!(n + kept.lines().count() as u64 - 1, 2000);
    }
}
