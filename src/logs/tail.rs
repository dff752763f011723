//! Tailing: one stream per target, carrying its resume state (the last timestamp printed and
//! how many lines were printed at exactly that timestamp). The same code reads pods and Docker
//! containers: what it needs from the engine is a [`LogSource`].
//!
//! Every request asks for `timestamps=true`. On any end of a stream — an error or a clean end
//! of body — the container is looked at again: gone, or the container terminated for good → make
//! sure the end was really reached and stop; otherwise reconnect with backoff from `sinceTime`
//! floored to the second, dropping what was already printed. A restarted container's previous
//! instance is drained with `previous=true` before its new instance is read. Only complete
//! (`\n`-terminated) lines count; an unterminated last line is printed only once the container
//! has terminated and the log is confirmed to end with it.
//!
//! A clean end of body is ambiguous (a proxy may close a stream early, stern's bug), so the end
//! of a terminated container's log is confirmed with a small `tailLines` request whose last
//! lines must be exactly the ones printed last ([`confirms_end`]).

use super::printer::LineFormat;
use super::source::{Failure, LogRequest, LogSource, SourceError};
pub use super::source::{Life, View};
use super::target::Target;
use futures::{AsyncBufReadExt, AsyncReadExt};
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};

// ---------------------------------------------------------------------------------------------
// Timestamps
// ---------------------------------------------------------------------------------------------

/// A log line's timestamp: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts {
    pub secs: i64,
    pub nanos: u32,
}

impl Ts {
    /// The same instant. jiff gives an instant before 1970 a negative fraction
    /// (`-1.25 s` is `-1 s` and `-250_000_000 ns`); a `Ts` counts whole seconds down and
    /// its nanoseconds up (`-2 s` and `750_000_000 ns`), as [`parse_ts`] reads one.
    pub fn from_jiff(t: jiff::Timestamp) -> Ts {
        let (secs, nanos) = (t.as_second(), t.subsec_nanosecond());
        if nanos < 0 {
            Ts {
                secs: secs - 1,
                nanos: (nanos + 1_000_000_000) as u32,
            }
        } else {
            Ts {
                secs,
                nanos: nanos as u32,
            }
        }
    }

    /// The whole second at or before this instant, as sent in `sinceTime`.
    pub fn floor_second(self) -> jiff::Timestamp {
        jiff::Timestamp::from_second(self.secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    /// The last instant of the second `t` falls in (an engine's timestamp to the second
    /// stands for all of it).
    pub fn end_of_second(t: jiff::Timestamp) -> Ts {
        Ts {
            secs: t.as_second(),
            nanos: 999_999_999,
        }
    }
}

impl std::fmt::Display for Ts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match jiff::Timestamp::new(self.secs, self.nanos as i32) {
            Ok(t) => write!(f, "{t}"),
            Err(_) => write!(f, "{}.{:09}s", self.secs, self.nanos),
        }
    }
}

/// An instant as people read it in a message: `2026-11-26 11:49:53.205 UTC`.
pub fn user_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

fn digits(b: &[u8]) -> Option<i64> {
    let mut n: i64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(c - b'0');
    }
    Some(n)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses the RFC 3339 timestamp the kubelet puts before each line
/// (`2026-11-22T10:00:00.123456789Z`, fraction optional, `Z` or `±hh:mm`).
pub fn parse_ts(b: &[u8]) -> Option<Ts> {
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (h, mi, s) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // A leap second (RFC 3339's `:60`) is the minute's last second, as jiff reads it (found
    // by the log_timestamp fuzz target: it was read as the next minute's first).
    let s = s.min(59);
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let off = digits(&b[i + 1..i + 3])? * 3600 + digits(&b[i + 4..i + 6])? * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset;
    Some(Ts { secs, nanos })
}

/// Splits a timestamped log line into (timestamp text, message).
pub fn split_ts(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&c| c == b' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[]),
    }
}

// ---------------------------------------------------------------------------------------------
// Resume state
// ---------------------------------------------------------------------------------------------

/// Where a target's output stands: the last timestamp printed and how many lines were printed
/// at exactly that timestamp. Survives reconnects and container restarts (an instance's lines
/// all come after the previous instance's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resume {
    pub last: Option<Ts>,
    pub at_last: u64,
}

/// Where a response stands against the resume point: lines seen at `Resume::last`, and whether
/// the first line not printed before has been met.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadPos {
    seen_at_last: u64,
    past: bool,
    /// A line at or before the resume point was met (the response reached back to it).
    pub met: bool,
    /// Lines stamped after this are not wanted from this response (see `Tail::read`).
    pub until: Option<Ts>,
    /// Such a line came; the response is read no further.
    pub crossed: bool,
    /// The first line accepted as new.
    pub first_new: Option<Ts>,
}

impl Resume {
    /// `sinceTime` for the next request: the last printed second, floored (the server may only
    /// honour whole seconds, and kube would otherwise round it — up, losing lines).
    pub fn since_time(&self) -> Option<jiff::Timestamp> {
        self.last.map(Ts::floor_second)
    }

    /// Whether a line stamped `ts` (met in a response read from `since_time()`) is new; if so it
    /// counts as printed. A line without a readable timestamp counts as stamped `last`.
    ///
    /// Until the resume point is passed, lines older than `last`, and the first `at_last` lines
    /// stamped `last`, were printed before. From then on every line is new, even one stamped a
    /// little earlier than the line before it (an engine writing stdout and stderr from two
    /// threads may stamp them out of order); `last` stays the newest timestamp printed.
    pub fn accept(&mut self, pos: &mut ReadPos, ts: Option<Ts>) -> bool {
        let Some(last) = self.last else {
            pos.past = true;
            if let Some(ts) = ts {
                self.last = Some(ts);
                self.at_last = 1;
            }
            return true;
        };
        let ts = ts.unwrap_or(last);
        if !pos.past {
            match ts.cmp(&last) {
                Ordering::Less => {
                    pos.met = true;
                    return false;
                }
                Ordering::Equal => {
                    pos.met = true;
                    pos.seen_at_last += 1;
                    if pos.seen_at_last <= self.at_last {
                        return false;
                    }
                }
                Ordering::Greater => {}
            }
            pos.past = true;
        }
        match ts.cmp(&last) {
            Ordering::Less => {}
            Ordering::Equal => self.at_last += 1,
            Ordering::Greater => {
                self.last = Some(ts);
                self.at_last = 1;
            }
        }
        true
    }
}

/// Lines the `tailLines` check of [`confirms_end`] needs.
pub fn end_check_lines(r: &Resume, partial: bool) -> i64 {
    (r.at_last as i64).saturating_add(1 + i64::from(partial))
}

/// Whether `body`, the last [`end_check_lines`] lines of a terminated container's log, shows
/// that everything up to its end was printed: the log must end with exactly the `at_last`
/// lines stamped `last` (preceded by an older line or nothing), followed by `partial` — the
/// unterminated line the last read ended with — if there was one.
pub fn confirms_end(r: &Resume, partial: Option<&[u8]>, body: &[u8]) -> bool {
    let (lines, rest) = match body.iter().rposition(|&c| c == b'\n') {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (&body[..0], body),
    };
    if rest != partial.unwrap_or_default() {
        return false;
    }
    let ts: Vec<Option<Ts>> = if lines.is_empty() && body.first() != Some(&b'\n') {
        Vec::new()
    } else {
        lines
            .split(|&c| c == b'\n')
            .map(|l| parse_ts(split_ts(l).0))
            .collect()
    };
    let Some(last) = r.last else {
        return ts.is_empty();
    };
    let n = r.at_last as usize;
    if ts.len() < n {
        return false;
    }
    let (before, end) = ts.split_at(ts.len() - n);
    end.iter().all(|t| *t == Some(last))
        && before.last().is_none_or(|t| t.is_some_and(|t| t < last))
}

// ---------------------------------------------------------------------------------------------
// The tail task
// ---------------------------------------------------------------------------------------------

/// What a tail was asked to start from (the flags), for the first instance it reads.
#[derive(Debug, Clone, Default)]
pub struct Start {
    pub since_seconds: Option<i64>,
    pub since_time: Option<jiff::Timestamp>,
    pub tail: Option<i64>,
}

impl Start {
    fn is_whole_log(&self) -> bool {
        self.since_seconds.is_none() && self.since_time.is_none() && self.tail.is_none()
    }
}

/// Everything a tail needs besides its target.
pub struct Ctx<S> {
    pub source: S,
    pub tx: mpsc::Sender<Vec<u8>>,
    pub fmt: LineFormat,
    /// Turns true when no more lines are wanted beyond what is there now (job finished, or
    /// not following): running containers are read to their present end, then the tail stops.
    pub finish: watch::Receiver<bool>,
    pub start: Start,
    /// Reads of a log up to its present end (not following) take a permit: finished logs are
    /// read a few at a time, which bounds the memory in flight without slowing the whole.
    pub drains: Arc<Semaphore>,
}

/// How a tail ended.
#[derive(Debug, Default)]
pub struct Report {
    pub lines: u64,
    pub requests: u64,
    /// A problem worth telling (printed on stderr by the caller).
    pub warning: Option<String>,
    /// The printer is gone (stdout closed).
    pub closed: bool,
}

/// How one request ended: one of these, never two.
#[derive(Debug)]
enum Ended {
    /// A clean end of body; `partial` is the unterminated bytes it left (timestamp included).
    Clean { partial: Option<Vec<u8>> },
    /// The request failed before any byte.
    Refused(SourceError),
    /// Cut short because `finish` turned true (a follow).
    Interrupted,
    /// A line stamped after the read's bound came: a later instance answered (see
    /// [`View::ended_at`]); the read stopped before it.
    Crossed,
    /// The stream broke after some bytes, or the printer went away.
    Broken,
}

/// What one request read, and how it [`Ended`].
#[derive(Debug)]
struct ReadEnd {
    how: Ended,
    new: u64,
    /// The answer reached back to the resume point (a line at or before it was met), so
    /// nothing lies between what was printed before and what this read printed.
    met_resume: bool,
    /// The timestamp of the first line this read printed.
    first_new: Option<Ts>,
    /// Some byte came (a log read from the resume point's second brings at least the lines
    /// printed at it, when it is still there to read).
    bytes: bool,
    /// The answer broke off in the middle of a line: the log goes on past what was printed.
    cut_line: bool,
}

impl ReadEnd {
    fn refused(e: SourceError) -> ReadEnd {
        ReadEnd {
            how: Ended::Refused(e),
            new: 0,
            met_resume: false,
            first_new: None,
            bytes: false,
            cut_line: false,
        }
    }
    fn clean(&self) -> bool {
        matches!(self.how, Ended::Clean { .. })
    }
    fn partial(&self) -> Option<&[u8]> {
        match &self.how {
            Ended::Clean { partial } => partial.as_deref(),
            _ => None,
        }
    }
    fn refusal(&self) -> Option<&SourceError> {
        match &self.how {
            Ended::Refused(e) => Some(e),
            _ => None,
        }
    }
    fn interrupted(&self) -> bool {
        matches!(self.how, Ended::Interrupted)
    }
    fn crossed(&self) -> bool {
        matches!(self.how, Ended::Crossed)
    }
}

struct Backoff {
    delay: Duration,
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);
    fn new() -> Backoff {
        Backoff {
            delay: Backoff::MIN,
        }
    }
    fn reset(&mut self) {
        self.delay = Backoff::MIN;
    }
    async fn wait(&mut self) {
        let jitter = rand::random_range(0..=self.delay.as_millis() as u64 / 4);
        tokio::time::sleep(self.delay + Duration::from_millis(jitter)).await;
        self.delay = (self.delay * 2).min(Backoff::MAX);
    }
}

/// Rounds in a row that read an ended instance without moving the resume point (and without
/// reaching its confirmed end) before the tail reads the log's end through `tailLines`
/// ([`Tail::rescue`]). A round that brings new lines, even a few, is progress; a refused
/// request is not a round (it is retried after backoff).
const STALLED: u32 = 20;

/// Lines the last-resort `tailLines` read asks for.
const RESCUE_LINES: i64 = 10_000;

/// The instance of the container a tail reads (its restart count) and how far it got.
#[derive(Debug)]
struct Instance {
    k: u32,
    /// Read to its confirmed end.
    drained: bool,
    /// The latest read ended with a clean end of body (then `partial` is what it left).
    clean_end: bool,
    /// The unterminated last line of that clean end: printed once the end is confirmed.
    partial: Option<Vec<u8>>,
    /// Rounds in a row that read this ended instance without the resume point moving.
    stalled: u32,
    /// A line of this instance was printed: the resume point lies in its log.
    own: bool,
    /// The latest answer to a follow of this instance ended with a clean end of body, and
    /// nothing was read after it: the engine ended the stream, as it does when the container
    /// ends (or a proxy cut it at a line's end).
    followed_to_end: bool,
    /// After `followed_to_end`, a look showed the instance ended: the stream ended with it.
    ended_with_stream: bool,
    /// Right after a follow's clean end, the log's end was checked ([`confirms_end`]) and was
    /// what had been printed, at this resume point. With `ended_with_stream`, what is known of
    /// the instance's end when its log goes with its pod before a look can show it ended.
    end_at_stream_end: Option<Resume>,
    /// The latest answer for this instance was a live follow that `finish` cut short: it was
    /// read up to the moment no more lines were wanted.
    followed_until_finish: bool,
}

impl Instance {
    fn new(k: u32) -> Instance {
        Instance {
            k,
            drained: false,
            clean_end: false,
            partial: None,
            stalled: 0,
            own: false,
            followed_to_end: false,
            ended_with_stream: false,
            end_at_stream_end: None,
            followed_until_finish: false,
        }
    }

    /// Bookkeeping after a request answered for this instance: `follow` says which kind.
    fn answered(&mut self, end: &ReadEnd, follow: bool) {
        if end.new > 0 {
            self.own = true;
        }
        if end.new > 0 || end.cut_line {
            // The log went on after the stream's end: that end was not the log's.
            self.ended_with_stream = false;
            self.followed_to_end = false;
            self.end_at_stream_end = None;
        }
        if end.refusal().is_some() || self.log_gone(end) {
            return;
        }
        self.followed_until_finish = follow && end.interrupted();
        if follow {
            self.followed_to_end = end.clean();
        } else if end.new > 0 {
            self.followed_to_end = false;
        }
    }

    /// What a look at the container says of the stream's latest end.
    fn saw(&mut self, v: &View) {
        let ended = self.k < v.restart || matches!(v.life, Life::Dead { .. });
        if self.k == v.restart && v.life == Life::Running {
            // The stream ended while the container runs: a cut, not its end (or the engine
            // has not said yet that it ended).
            self.followed_to_end = false;
        } else if ended && self.followed_to_end {
            self.ended_with_stream = true;
        }
    }

    /// The answer shows the log is no longer served: a clean but empty answer from the resume
    /// point's second of a log whose lines were printed up to it (its container removed), or
    /// a refusal saying it is not there.
    fn log_gone(&self, end: &ReadEnd) -> bool {
        (self.own && end.clean() && !end.bytes)
            || end
                .refusal()
                .is_some_and(|e| e.failure == Failure::NotFound)
    }
}

/// What a look at the container found.
enum Look {
    Saw(View),
    /// Look again (after a backoff).
    Again,
    /// The tail is over (the container is gone, or cannot be looked at).
    Done,
}

/// Where a drain of `v`'s instance stops: for the current instance of a container about to
/// restart, the engine may answer with the next instance's log once it starts (Kubernetes
/// serves the current one); lines after this one's end are not its.
fn drain_bound(v: &View, previous: bool) -> Option<Ts> {
    match v.life {
        Life::Dead { for_good: false } if !previous => v.ended_at.map(Ts::end_of_second),
        _ => None,
    }
}

/// What a tail does next. The states of a tail are the instance it reads and the container as
/// the engine shows it; [`decide`] maps them to one of these, one rule each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing more will come: the container never starts, or its last instance is read.
    Stop,
    /// Nothing to read now: wait for the container to change (a start, a restart) or `finish`.
    Wait,
    /// The instance runs and lines are wanted as they come: follow its log.
    Follow,
    /// The instance runs but no more lines are wanted: read what is there now, up to about the
    /// moment `finish` turned true, then stop.
    CatchUp,
    /// The instance has ended: read it to its confirmed end. `previous`: a newer instance runs,
    /// so the ended one is the `previous=true` log.
    Drain { previous: bool },
    /// Go on to instance `to`. `lost`: the one being read could not be read to its end (the
    /// container restarted again before it was; Kubernetes keeps one previous instance).
    Next { to: u32, lost: bool },
}

/// The one place a tail's next step is decided: from the instance being read (`inst`) and the
/// container now (`v`); `finishing`: no more lines are wanted beyond what is there now.
fn decide(inst: &Instance, v: &View, finishing: bool) -> Step {
    let cur = v.restart;
    if let Life::NotStarted { for_good, .. } = v.life {
        return if for_good || finishing {
            Step::Stop
        } else {
            Step::Wait
        };
    }
    if inst.k < cur {
        // A newer instance exists. Read, go on to the next one; else the ended one is readable
        // only as the `previous` of the instance right after it.
        return if inst.drained {
            Step::Next {
                to: inst.k + 1,
                lost: false,
            }
        } else if cur > inst.k + 1 || !v.has_previous {
            Step::Next {
                to: cur,
                lost: true,
            }
        } else {
            Step::Drain { previous: true }
        };
    }
    match v.life {
        Life::Running if !finishing => Step::Follow,
        Life::Running => Step::CatchUp,
        Life::Dead { .. } if !inst.drained => Step::Drain { previous: false },
        Life::Dead { for_good } if for_good || finishing => Step::Stop,
        // Read to its end, and a restart is coming.
        Life::Dead { .. } | Life::NotStarted { .. } => Step::Wait,
    }
}

pub struct Tail<S> {
    target: Target,
    ctx: Ctx<S>,
    resume: Resume,
    /// The minimum timestamp wanted (`--since-time`, exact).
    min_ts: Option<Ts>,
    report: Report,
    /// Whether the flags' start (`--tail`/`--since`) still applies (nothing read yet).
    first: bool,
    /// Refused for good (401/403): stop.
    fatal: bool,
}

impl<S: LogSource> Tail<S> {
    pub fn new(target: Target, ctx: Ctx<S>) -> Tail<S> {
        let min_ts = ctx.start.since_time.map(Ts::from_jiff);
        Tail {
            target,
            ctx,
            resume: Resume::default(),
            min_ts,
            report: Report::default(),
            first: true,
            fatal: false,
        }
    }

    fn finishing(&self) -> bool {
        *self.ctx.finish.borrow()
    }

    fn params(&self, follow: bool, previous: bool) -> LogRequest {
        let mut lp = LogRequest {
            follow,
            previous,
            ..LogRequest::default()
        };
        if let Some(t) = self.resume.since_time() {
            lp.since_time = Some(t);
        } else if self.first {
            // Never both: sinceSeconds wins silently in kube and is refused by the API server.
            if let Some(s) = self.ctx.start.since_seconds {
                lp.since_seconds = Some(s.max(1));
            } else if let Some(t) = self.min_ts {
                lp.since_time = Some(t.floor_second());
            }
            lp.tail_lines = self.ctx.start.tail;
        }
        lp
    }

    /// Runs until the target's log is read to its end (or the pod is gone, or no more lines
    /// are wanted); then shows the pieces of lines a launcher's ranks left unfinished.
    pub async fn run(mut self) -> Report {
        self.read_to_end().await;
        let mut out = Vec::new();
        self.report.lines += self.ctx.fmt.finish(&mut out);
        if !out.is_empty() && !self.report.closed && self.ctx.tx.send(out).await.is_err() {
            self.report.closed = true;
        }
        self.report
    }

    /// The tail's loop: look at the container, [`decide`], do that step; until `Stop`.
    async fn read_to_end(&mut self) {
        let mut backoff = Backoff::new();
        // The instance being read; chosen at the first look that shows one.
        let mut inst: Option<Instance> = None;
        // When `finish` turned true: a running container is read up to about then.
        let mut finish_at: Option<jiff::Timestamp> = None;
        // The container as last seen (what is known of its pod once it is gone).
        let mut seen: Option<View> = None;
        loop {
            if self.report.closed || self.fatal {
                return;
            }
            let v = match self.look(inst.as_mut(), seen.as_ref(), &mut backoff).await {
                Look::Saw(v) => v,
                Look::Again => continue,
                Look::Done => return,
            };
            let finishing = self.finishing();
            if finishing && finish_at.is_none() {
                finish_at = Some(jiff::Timestamp::now());
            }
            seen = Some(v.clone());
            if let Some(i) = inst.as_mut() {
                i.saw(&v);
            }
            let inst = match (&mut inst, &v.life) {
                (Some(i), _) => i,
                (None, Life::NotStarted { .. }) => {
                    // No instance to read yet: decide on a placeholder that has read nothing.
                    match decide(&Instance::new(v.restart), &v, finishing) {
                        Step::Stop => return,
                        _ => {
                            self.wait_for_change(&mut backoff).await;
                            continue;
                        }
                    }
                }
                (None, _) => inst.insert(Instance::new(
                    // Following a run from its start, a container that already restarted is
                    // read from its previous instance too.
                    if v.has_previous && self.ctx.start.is_whole_log() {
                        v.restart - 1
                    } else {
                        v.restart
                    },
                )),
            };
            match decide(inst, &v, finishing) {
                Step::Stop => return,
                Step::Wait => self.wait_for_change(&mut backoff).await,
                Step::Next { to, lost } => {
                    if lost {
                        self.report.warning = Some(format!(
                            "{}: container {} restarted faster than its logs could be read; some of its earlier logs are lost",
                            self.target.prefix, self.target.container
                        ));
                    }
                    *inst = Instance::new(to);
                }
                Step::Follow => self.follow(inst, &mut backoff).await,
                Step::CatchUp => {
                    let wall = finish_at.unwrap_or_else(jiff::Timestamp::now);
                    if self.catch_up(inst, wall, &mut backoff).await {
                        return;
                    }
                }
                Step::Drain { previous } => {
                    let until = drain_bound(&v, previous);
                    let going = v.deleting.is_some();
                    if self.drain(inst, previous, until, going, &mut backoff).await {
                        self.gone(inst, &v, Some(jiff::Timestamp::now())).await;
                        return;
                    }
                }
            }
        }
    }

    /// Looks at the container. When it is gone, the instance being read goes with it
    /// ([`Tail::gone`], `seen`: the container as last seen); a transient failure is waited
    /// out; another one ends the tail with a warning.
    async fn look(
        &mut self,
        inst: Option<&mut Instance>,
        seen: Option<&View>,
        backoff: &mut Backoff,
    ) -> Look {
        match self.ctx.source.look(&self.target).await {
            Ok(Some(v)) => Look::Saw(v),
            Ok(None) => {
                if let (Some(i), Some(seen)) = (inst, seen) {
                    self.gone(i, seen, None).await;
                }
                Look::Done
            }
            Err(e) if e.failure == Failure::Transient => {
                backoff.wait().await;
                Look::Again
            }
            Err(e) => {
                self.report.warning = Some(format!("{}: {e}", self.target.prefix));
                Look::Done
            }
        }
    }

    /// The pod (or Docker container) of the instance being read is gone, or going with its
    /// log (`seen`: as last looked at; `log_gone_at`: when its log was found gone while the
    /// pod was still there). Read to its confirmed end, or to the end of a stream that ended
    /// with the container: nothing lost. Otherwise the lines after the last one read are
    /// lost, and the warning says which pod went, when, why as far as its owner tells, and
    /// the last line read.
    async fn gone(
        &mut self,
        inst: &mut Instance,
        seen: &View,
        log_gone_at: Option<jiff::Timestamp>,
    ) {
        if inst.drained {
            return;
        }
        if inst.ended_with_stream
            || inst.end_at_stream_end == Some(self.resume)
            || (log_gone_at.is_none() && inst.followed_to_end)
            || (inst.followed_until_finish && self.finishing())
        {
            // The engine ended the stream as the container ended: the look right after the
            // stream's end showed the instance ended (or its pod gone), or the log ended there
            // when checked right after the stream's end and nothing came later. Or it was
            // followed live until no more lines were wanted (what `CatchUp` reads up to).
            inst.drained = true;
            if let Some(p) = inst.partial.take() {
                self.emit_partial(&p).await;
            }
            return;
        }
        let t = &self.target;
        let docker = t.engine == super::target::Engine::Docker;
        let what = if docker { "container" } else { "pod" };
        let verb = if docker { "removed" } else { "deleted" };
        let when = match seen.deleting {
            Some(at) => format!(" at {}", user_time(at)),
            None => format!(
                " (found gone at {})",
                user_time(log_gone_at.unwrap_or_else(jiff::Timestamp::now))
            ),
        };
        let why = match self.ctx.source.why_deleted(t, seen).await {
            Some(w) => format!(" {w}"),
            None => String::new(),
        };
        let lost = match self.resume.last {
            Some(last) => format!(
                "lines after {} (the last one read) are missing",
                user_time(jiff::Timestamp::new(last.secs, last.nanos as i32).unwrap_or_default())
            ),
            None => "none of its lines could be read".to_string(),
        };
        self.report.warning = Some(format!(
            "{}: {what} {} was {verb}{when}{why} before the log of container {} was read to its end; {lost}",
            t.prefix, t.pod, t.container
        ));
    }

    /// `Follow`: one following request; the stream ends when the instance ends, a proxy or
    /// the server closes it, or `finish` turns true.
    async fn follow(&mut self, inst: &mut Instance, backoff: &mut Backoff) {
        let end = self.read(self.params(true, false), None).await;
        inst.clean_end = end.clean();
        inst.answered(&end, true);
        if end.interrupted() || self.settle(&end, backoff, &mut inst.partial).await {
            return;
        }
        // The engine ends a follow when the container ends: check the log's end now, while
        // it is still there (a pod deleted as its container ends may take its log at once).
        if !inst.log_gone(&end) && self.confirm(false, inst.partial.as_deref()).await == Some(true)
        {
            inst.end_at_stream_end = Some(self.resume);
        }
        // A clean end while the container runs: a proxy closed the stream, or the instance
        // just ended. Either way: look again, then reconnect.
        if end.new == 0 {
            backoff.wait().await;
        }
    }

    /// `CatchUp`: reads the running instance up to now. Returns true once nothing more is
    /// wanted: the read brought nothing, reached `wall` (when `finish` turned true; the
    /// container may write forever), or reached the log's confirmed present end.
    async fn catch_up(
        &mut self,
        inst: &mut Instance,
        wall: jiff::Timestamp,
        backoff: &mut Backoff,
    ) -> bool {
        let end = self.read(self.params(false, false), None).await;
        inst.clean_end = end.clean();
        inst.answered(&end, false);
        if self.settle(&end, backoff, &mut inst.partial).await {
            return false;
        }
        let caught_up = self.resume.last.is_none_or(|t| t >= Ts::from_jiff(wall));
        end.new == 0 || caught_up || self.confirm(false, None).await == Some(true)
    }

    /// `Drain`: one round of reading an ended instance to its end. After a clean end of body
    /// the end is confirmed ([`confirms_end`]); otherwise, or when that was not the end, the
    /// log is read on from the resume point. `until`: lines stamped after it are a later
    /// instance's (the read stops there and the tail waits for that instance to show).
    /// `going`: the pod is being deleted. Returns true when then the answer shows its log is
    /// no longer served ([`Instance::log_gone`]): the instance goes with it, which is not a
    /// round.
    async fn drain(
        &mut self,
        inst: &mut Instance,
        previous: bool,
        until: Option<Ts>,
        going: bool,
        backoff: &mut Backoff,
    ) -> bool {
        if inst.clean_end {
            match self.confirm(previous, inst.partial.as_deref()).await {
                Some(true) => {
                    inst.drained = true;
                    if let Some(p) = inst.partial.take() {
                        self.emit_partial(&p).await;
                    }
                    return false;
                }
                Some(false) => {}
                None => {
                    backoff.wait().await;
                    return false;
                }
            }
        }
        let before = self.resume;
        let end = self.read(self.params(false, previous), until).await;
        inst.clean_end = end.clean();
        inst.answered(&end, false);
        if going && !previous && inst.log_gone(&end) {
            return true;
        }
        self.settle(&end, backoff, &mut inst.partial).await;
        if end.crossed() {
            self.wait_for_change(backoff).await;
        } else if end.refusal().is_some() {
            // Retried after the backoff `settle` waited; not a round.
        } else if self.resume != before {
            inst.stalled = 0;
        } else {
            inst.stalled += 1;
            if inst.stalled >= STALLED {
                self.rescue(inst, previous).await;
            }
        }
        false
    }

    /// The last resort for an ended instance whose log does not move past the resume point
    /// when read from `sinceTime` (more lines within one second than a stream brings before it
    /// is cut): its last [`RESCUE_LINES`] lines through `tailLines`, new ones printed. When that
    /// answer does not reach back to the resume point, the lines between are missing, and the
    /// warning says which (by their timestamps) — never silently.
    async fn rescue(&mut self, inst: &mut Instance, previous: bool) {
        let last = self.resume.last;
        let req = LogRequest {
            previous,
            tail_lines: Some(RESCUE_LINES),
            ..LogRequest::default()
        };
        let end = self.read(req, None).await;
        inst.answered(&end, false);
        inst.drained = true;
        inst.partial = None;
        // A stream that ends cleanly may still have been cut at a line's end: the log's end
        // counts as reached only when its last lines are the ones just read.
        let reached_end = end.clean() && self.confirm(previous, end.partial()).await == Some(true);
        if reached_end
            && end.met_resume
            && let Some(p) = end.partial()
        {
            self.emit_partial(p).await;
        }
        if reached_end && end.met_resume {
            return;
        }
        let at = |t: Option<Ts>| t.map_or("its start".to_string(), |t| t.to_string());
        let mut gaps = Vec::new();
        if !end.met_resume {
            gaps.push(match end.first_new {
                Some(first) => format!("stamped after {} and before {first}", at(last)),
                None => format!("after {}", at(last)),
            });
        }
        let after_end = format!("after {}", at(self.resume.last));
        if !reached_end && gaps.last() != Some(&after_end) {
            gaps.push(after_end);
        }
        self.report.warning = Some(format!(
            "{}: the log of container {} stopped moving from where it was read to ({STALLED} tries); lines {} may be missing ({} read from its last {RESCUE_LINES} lines)",
            self.target.prefix,
            self.target.container,
            gaps.join(", and "),
            end.new
        ));
    }

    /// Bookkeeping after a read. Returns true when the read did not end cleanly (the caller
    /// looks at the pod again; backoff was waited if the read brought nothing).
    async fn settle(
        &mut self,
        end: &ReadEnd,
        backoff: &mut Backoff,
        partial: &mut Option<Vec<u8>>,
    ) -> bool {
        if end.new > 0 || end.clean() {
            self.first = false;
        }
        if end.clean() {
            *partial = end.partial().map(<[u8]>::to_vec);
        } else if end.new > 0 {
            *partial = None;
        }
        if end.new > 0 {
            backoff.reset();
        }
        if let Some(e) = end.refusal()
            && e.failure == Failure::Fatal
        {
            self.report.warning = Some(format!("{}: {e}", self.target.prefix));
            self.fatal = true;
        }
        if !end.clean() && end.new == 0 && !end.interrupted() && !end.crossed() {
            backoff.wait().await;
        }
        !end.clean()
    }

    async fn wait_for_change(&mut self, backoff: &mut Backoff) {
        let mut finish = self.ctx.finish.clone();
        tokio::select! {
            _ = backoff.wait() => {}
            _ = finish.wait_for(|f| *f) => {}
        }
    }

    async fn emit_partial(&mut self, line: &[u8]) {
        let (ts_raw, msg) = split_ts(line);
        // Confirmed to follow every line printed: new, whatever its timestamp.
        let mut pos = ReadPos {
            past: true,
            ..ReadPos::default()
        };
        self.resume.accept(&mut pos, parse_ts(ts_raw));
        let mut out = Vec::new();
        self.report.lines += self.ctx.fmt.push(&mut out, ts_raw, msg);
        if !out.is_empty() && self.ctx.tx.send(out).await.is_err() {
            self.report.closed = true;
        }
    }

    /// The `tailLines` check of the end of the log (see [`confirms_end`]). `None`: the request
    /// failed.
    async fn confirm(&mut self, previous: bool, partial: Option<&[u8]>) -> Option<bool> {
        let req = LogRequest {
            previous,
            // Exactly the lines needed: a longer answer cut short could pass for the end.
            tail_lines: Some(end_check_lines(&self.resume, partial.is_some())),
            ..LogRequest::default()
        };
        self.report.requests += 1;
        let mut stream = self.ctx.source.open(&self.target, &req).await.ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        Some(confirms_end(&self.resume, partial, &body))
    }

    /// One request: streams lines, drops what was printed, hands new ones to the printer.
    /// `until`: the read stops at the first line stamped after it (`ReadEnd::crossed`).
    async fn read(&mut self, lp: LogRequest, until: Option<Ts>) -> ReadEnd {
        let follow = lp.follow;
        self.report.requests += 1;
        let _permit = if follow {
            None
        } else {
            self.ctx.drains.clone().acquire_owned().await.ok()
        };
        let mut stream = match self.ctx.source.open(&self.target, &lp).await {
            Ok(s) => s,
            Err(e) => return ReadEnd::refused(e),
        };
        let mut finish = self.ctx.finish.clone();
        let mut pos = ReadPos {
            until,
            ..ReadPos::default()
        };
        let mut pending: Vec<u8> = Vec::new();
        let mut batch: Vec<u8> = Vec::new();
        let mut new = 0;
        let mut got_bytes = false;
        let how = loop {
            let n = tokio::select! {
                biased;
                r = stream.fill_buf() => match r {
                    Ok([]) => break Ended::Clean { partial: None },
                    Ok(chunk) => {
                        got_bytes = true;
                        new += self.lines(chunk, &mut pending, &mut pos, &mut batch);
                        chunk.len()
                    }
                    Err(e) => match SourceError::of_io(&e) {
                        Some(e) if !got_bytes => break Ended::Refused(e.clone()),
                        _ => break Ended::Broken,
                    },
                },
                _ = finish.wait_for(|f| *f), if follow => break Ended::Interrupted,
            };
            stream.as_mut().consume(n);
            if pos.crossed {
                break Ended::Crossed;
            }
            if !batch.is_empty() && !self.send(&mut batch).await {
                break Ended::Broken;
            }
        };
        if !batch.is_empty() {
            self.send(&mut batch).await;
        }
        let how = match how {
            Ended::Clean { .. } if !pending.is_empty() => Ended::Clean {
                partial: Some(std::mem::take(&mut pending)),
            },
            how => how,
        };
        ReadEnd {
            cut_line: !matches!(how, Ended::Clean { .. }) && !pending.is_empty(),
            how,
            new,
            met_resume: pos.met || self.resume.last.is_none() && pos.first_new.is_none(),
            first_new: pos.first_new,
            bytes: got_bytes,
        }
    }

    async fn send(&mut self, batch: &mut Vec<u8>) -> bool {
        let b = std::mem::take(batch);
        if self.ctx.tx.send(b).await.is_err() {
            self.report.closed = true;
            return false;
        }
        true
    }

    /// Handles the complete lines of `chunk` (joined with `pending`, the unterminated rest of
    /// the previous chunk), keeps its own unterminated rest in `pending`. Returns new lines.
    fn lines(
        &mut self,
        chunk: &[u8],
        pending: &mut Vec<u8>,
        pos: &mut ReadPos,
        batch: &mut Vec<u8>,
    ) -> u64 {
        let mut new = 0;
        batch.reserve(chunk.len());
        let mut rest = chunk;
        if !pending.is_empty() {
            match memchr::memchr(b'\n', rest) {
                Some(i) => {
                    pending.extend_from_slice(&rest[..i]);
                    let line = std::mem::take(pending);
                    new += u64::from(self.line(&line, pos, batch));
                    rest = &rest[i + 1..];
                }
                None => {
                    pending.extend_from_slice(rest);
                    return 0;
                }
            }
        }
        while !pos.crossed
            && let Some(i) = memchr::memchr(b'\n', rest)
        {
            new += u64::from(self.line(&rest[..i], pos, batch));
            rest = &rest[i + 1..];
        }
        if !pos.crossed {
            pending.extend_from_slice(rest);
        }
        new
    }

    fn line(&mut self, line: &[u8], pos: &mut ReadPos, batch: &mut Vec<u8>) -> bool {
        let (ts_raw, msg) = split_ts(line);
        let ts = parse_ts(ts_raw);
        if let (Some(until), Some(t)) = (pos.until, ts)
            && t > until
        {
            pos.crossed = true;
            return false;
        }
        if !self.resume.accept(pos, ts) {
            return false;
        }
        if pos.first_new.is_none() {
            pos.first_new = ts.or(self.resume.last);
        }
        if let (Some(min), Some(ts)) = (self.min_ts, ts)
            && ts < min
        {
            return false;
        }
        self.report.lines += self.ctx.fmt.push(batch, ts_raw, msg);
        true
    }
}

/// Runs one tail over `source` to its end (within `bound`) and collects what it printed;
/// for tests. The printed bytes come back even when the bound is hit.
#[cfg(test)]
pub(crate) async fn run_to_end<S: LogSource>(
    target: &Target,
    style: super::printer::Style,
    source: S,
    finish: bool,
    bound: Duration,
) -> (Result<Report, tokio::time::error::Elapsed>, Vec<u8>) {
    let (tx, mut rx) = mpsc::channel(8);
    let (_finish_tx, finish) = watch::channel(finish);
    let tail = Tail::new(
        target.clone(),
        Ctx {
            source,
            tx,
            fmt: LineFormat::new(target, style),
            finish,
            start: Start::default(),
            drains: Arc::new(Semaphore::new(1)),
        },
    );
    let printed = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            out.extend(b);
        }
        out
    });
    let report = tokio::time::timeout(bound, tail.run()).await;
    (report, printed.await.unwrap())
}

#[cfg(test)]
mod tests {
    use super::super::printer::{Format, Style};
    use super::super::source::LogStream;
    use super::*;
    use futures::TryStreamExt;
    use std::sync::Mutex;

    /// An engine in memory: one container with a log of timestamped lines, in a given state.
    /// Every stream is cut after `cut` lines — alternately with a clean end of body (the
    /// ambiguous case) and with an error in the middle of the next line; end checks
    /// (`tail_lines`) are served whole.
    #[derive(Clone, Default)]
    struct Mem(Arc<Mutex<MemLog>>);

    #[derive(Default)]
    struct MemLog {
        lines: Vec<String>,
        life: Option<Life>,
        cut: usize,
        opened: u64,
    }

    impl Mem {
        fn new(lines: Vec<String>, life: Life, cut: usize) -> Mem {
            Mem(Arc::new(Mutex::new(MemLog {
                lines,
                life: Some(life),
                cut,
                opened: 0,
            })))
        }
    }

    impl LogSource for Mem {
        fn engine(&self) -> super::super::target::Engine {
            super::super::target::Engine::Docker
        }

        async fn look(&self, _t: &Target) -> Result<Option<View>, SourceError> {
            let m = self.0.lock().unwrap();
            Ok(m.life.clone().map(View::first))
        }

        async fn open(&self, _t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
            let mut m = self.0.lock().unwrap();
            m.opened += 1;
            let since = req.since_time.map(Ts::from_jiff);
            let mut lines: Vec<String> = m
                .lines
                .iter()
                .filter(|l| since.is_none_or(|s| parse_ts(split_ts(l.as_bytes()).0) >= Some(s)))
                .cloned()
                .collect();
            if let Some(n) = req.tail_lines {
                lines = lines.split_off(lines.len().saturating_sub(n as usize));
            }
            let mut chunks: Vec<std::io::Result<Vec<u8>>> = Vec::new();
            let cut = req.tail_lines.is_none() && m.cut > 0 && lines.len() > m.cut;
            for l in lines.iter().take(if cut { m.cut } else { lines.len() }) {
                chunks.push(Ok(format!("{l}\n").into_bytes()));
            }
            if cut && m.opened.is_multiple_of(2) {
                let half = &lines[m.cut][..lines[m.cut].len() / 2];
                chunks.push(Ok(half.as_bytes().to_vec()));
                chunks.push(Err(std::io::Error::other("cut")));
            }
            Ok(Box::pin(futures::stream::iter(chunks).into_async_read()))
        }
    }

    /// Runs a tail over `source` to its end; what it printed, one line per entry.
    async fn tail_all<S: LogSource>(source: S, finish: bool) -> (Report, Vec<String>) {
        let (rep, printed) =
            run_to_end(&target(), bare(), source, finish, Duration::from_secs(30)).await;
        let rep = rep.expect("the tail ends");
        let out = String::from_utf8(printed).unwrap();
        (rep, out.lines().map(str::to_string).collect())
    }

    /// `n` numbered lines, 80 per second, four at a time sharing one timestamp exactly.
    fn numbered(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                format!(
                    "2026-11-22T10:{:02}:{:02}.{:09}Z line {i}",
                    10 + i / 80 / 60,
                    i / 80 % 60,
                    (i % 80) / 4 * 1_000_000
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn cut_streams_lose_and_repeat_nothing() {
        // A reconnect re-reads up to a second of lines: cuts must be further apart than that
        // (80 lines) for any client resuming from a whole second to make progress.
        let n = 2000;
        for cut in [81, 100, 173, 5000] {
            let src = Mem::new(numbered(n), Life::Dead { for_good: true }, cut);
            let (rep, out) = tail_all(src.clone(), false).await;
            let want: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
            let first_wrong = out.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                out == want,
                "cut every {cut} lines: {} printed, first difference at {first_wrong:?}",
                out.len()
            );
            assert_eq!(rep.lines, n as u64);
            assert_eq!(rep.warning, None);
            if cut < n {
                assert!(src.0.lock().unwrap().opened > 2, "cut every {cut} lines");
            }
        }
    }

    fn ts(s: &str) -> Ts {
        parse_ts(s.as_bytes()).unwrap_or_else(|| panic!("parse {s}"))
    }

    #[test]
    fn parses_timestamps_like_jiff() {
        for s in [
            "2026-11-22T10:00:00.123456789Z",
            "2026-11-22T10:00:00Z",
            "2026-11-22T10:00:00.5Z",
            "1999-02-28T23:59:59.000000001Z",
            "2000-02-29T00:00:00.25+02:00",
            "2024-12-31T23:59:59.999999999-05:30",
            // Before 1970 (found by the log_timestamp fuzz target: jiff's negative fraction).
            "0026-11-22T20:00:00.1289Z",
            "1969-12-31T23:59:59.75Z",
            "2026-01-22T10:00:60.102789Z",
        ] {
            let j: jiff::Timestamp = s.parse().unwrap();
            assert_eq!(ts(s), Ts::from_jiff(j), "{s}");
        }
        assert!(ts("2026-11-22T10:00:00.5Z") > ts("2026-11-22T10:00:00Z"));
        assert!(ts("2026-11-22T10:00:00.5Z") < ts("2026-11-22T10:00:01Z"));
        for bad in [
            "",
            "hello world",
            "2026-11-22T10:00:00",
            "2026-13-22T10:00:00Z",
            "2026-11-22T10:00:00.Z",
            "2026-11-22T10:00:00Zjunk",
        ] {
            assert_eq!(parse_ts(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn since_time_is_floored_to_the_second() {
        let r = Resume {
            last: Some(ts("2026-11-22T10:00:07.999999999Z")),
            at_last: 1,
        };
        assert_eq!(r.since_time().unwrap().to_string(), "2026-11-22T10:00:07Z");
        // What kube puts on the wire must not round up past lines not yet printed.
        let lp = super::super::pods::log_params(
            "c",
            &LogRequest {
                since_time: r.since_time(),
                ..LogRequest::default()
            },
        );
        assert_eq!(
            lp.since_time
                .unwrap()
                .round(jiff::Unit::Second)
                .unwrap()
                .to_string(),
            "2026-11-22T10:00:07Z"
        );
        assert_eq!(Resume::default().since_time(), None);
    }

    /// Feeds a response (lines as (timestamp, text)) through `accept`, returning what is printed.
    fn feed<'a>(r: &mut Resume, lines: &[(&str, &'a str)]) -> Vec<&'a str> {
        let mut pos = ReadPos::default();
        lines
            .iter()
            .filter(|(t, _)| r.accept(&mut pos, Some(ts(t))))
            .map(|(_, m)| *m)
            .collect()
    }

    #[test]
    fn equal_timestamps_across_a_cut_are_printed_once() {
        let a = "2026-11-22T10:00:05.100Z";
        let b = "2026-11-22T10:00:05.200Z";
        let c = "2026-11-22T10:00:06Z";
        let mut r = Resume::default();
        // First stream: cut after two of the three lines stamped `b`.
        assert_eq!(
            feed(&mut r, &[(a, "1"), (b, "2"), (b, "3")]),
            ["1", "2", "3"]
        );
        assert_eq!(
            r,
            Resume {
                last: Some(ts(b)),
                at_last: 2
            }
        );
        // Reconnect from 10:00:05: everything from that second comes again.
        assert_eq!(
            feed(&mut r, &[(a, "1"), (b, "2"), (b, "3"), (b, "4"), (c, "5")]),
            ["4", "5"]
        );
        assert_eq!(
            r,
            Resume {
                last: Some(ts(c)),
                at_last: 1
            }
        );
        // Again, with nothing new.
        assert_eq!(feed(&mut r, &[(b, "4"), (c, "5")]), Vec::<&str>::new());
        // Many lines at one instant, cut twice.
        let mut r = Resume::default();
        assert_eq!(feed(&mut r, &[(a, "x1")]), ["x1"]);
        assert_eq!(feed(&mut r, &[(a, "x1"), (a, "x2")]), ["x2"]);
        assert_eq!(
            feed(&mut r, &[(a, "x1"), (a, "x2"), (a, "x3"), (b, "y")]),
            ["x3", "y"]
        );
    }

    #[test]
    fn lines_stamped_out_of_order_are_printed_once() {
        // stdout and stderr stamped by two threads: 5.3 is written before 5.2.
        let a = "2026-11-22T10:00:05.1Z";
        let b = "2026-11-22T10:00:05.2Z";
        let c = "2026-11-22T10:00:05.3Z";
        let d = "2026-11-22T10:00:06Z";
        let mut r = Resume::default();
        assert_eq!(
            feed(&mut r, &[(a, "1"), (c, "2"), (b, "3")]),
            ["1", "2", "3"]
        );
        assert_eq!(
            r,
            Resume {
                last: Some(ts(c)),
                at_last: 1
            }
        );
        // A reconnect: everything up to the newest line printed is skipped, the older one too.
        assert_eq!(
            feed(&mut r, &[(a, "1"), (c, "2"), (b, "3"), (d, "4"), (c, "5")]),
            ["4", "5"]
        );
        assert_eq!(
            r,
            Resume {
                last: Some(ts(d)),
                at_last: 1
            }
        );
    }

    #[test]
    fn unstamped_lines_count_at_the_last_timestamp() {
        let a = "2026-11-22T10:00:05.1Z";
        let mut r = Resume::default();
        let mut pos = ReadPos::default();
        assert!(r.accept(&mut pos, Some(ts(a))));
        assert!(r.accept(&mut pos, None));
        assert_eq!(r.at_last, 2);
        let mut pos = ReadPos::default();
        assert!(!r.accept(&mut pos, Some(ts(a))));
        assert!(!r.accept(&mut pos, None));
        assert!(r.accept(&mut pos, None));
    }

    #[test]
    fn end_of_log_is_confirmed_only_when_exact() {
        let a = "2026-11-22T10:00:05.1Z";
        let b = "2026-11-22T10:00:05.2Z";
        let c = "2026-11-22T10:00:06Z";
        let r = Resume {
            last: Some(ts(b)),
            at_last: 2,
        };
        assert_eq!(end_check_lines(&r, false), 3);
        let body = |ls: &[(&str, &str)]| {
            ls.iter()
                .map(|(t, m)| format!("{t} {m}\n"))
                .collect::<String>()
        };
        assert!(confirms_end(
            &r,
            None,
            body(&[(a, "1"), (b, "2"), (b, "3")]).as_bytes()
        ));
        // Only these two lines in the whole log.
        assert!(confirms_end(
            &r,
            None,
            body(&[(b, "2"), (b, "3")]).as_bytes()
        ));
        // A third line at `b` was never printed.
        assert!(!confirms_end(
            &r,
            None,
            body(&[(b, "2"), (b, "3"), (b, "4")]).as_bytes()
        ));
        // A later line exists.
        assert!(!confirms_end(
            &r,
            None,
            body(&[(b, "2"), (b, "3"), (c, "4")]).as_bytes()
        ));
        // An unterminated last line nobody held.
        let mut with_partial = body(&[(a, "1"), (b, "2"), (b, "3")]);
        with_partial.push_str(&format!("{c} tail"));
        assert!(!confirms_end(&r, None, with_partial.as_bytes()));
        let held = format!("{c} tail");
        assert!(confirms_end(
            &r,
            Some(held.as_bytes()),
            with_partial.as_bytes()
        ));
        assert!(!confirms_end(
            &r,
            Some(b"2026-11-22T10:00:06Z ta"),
            with_partial.as_bytes()
        ));
        // Nothing printed: only an empty log confirms.
        assert!(confirms_end(&Resume::default(), None, b""));
        assert!(!confirms_end(
            &Resume::default(),
            None,
            body(&[(a, "1")]).as_bytes()
        ));
        assert!(!confirms_end(&r, None, b""));
    }

    fn target() -> Target {
        Target {
            engine: super::super::target::Engine::Docker,
            pod: "p".into(),
            uid: "u".into(),
            container: "c".into(),
            role: String::new(),
            index: None,
            ranks: Default::default(),
            prefix: "p".into(),
        }
    }

    fn bare() -> Style {
        Style {
            format: Format::Text,
            prefix: false,
            timestamps: false,
            color: false,
            rank: None,
        }
    }

    fn tail_for_lines() -> Tail<Mem> {
        let (tx, _rx) = mpsc::channel(1);
        let (_ftx, finish) = watch::channel(false);
        let fmt = LineFormat::new(&target(), bare());
        Tail::new(
            target(),
            Ctx {
                source: Mem::default(),
                tx,
                fmt,
                finish,
                start: Start::default(),
                drains: Arc::new(Semaphore::new(1)),
            },
        )
    }

    #[tokio::test]
    async fn partial_lines_are_held_until_complete() {
        let mut t = tail_for_lines();
        let (mut pending, mut pos, mut batch) = (Vec::new(), ReadPos::default(), Vec::new());
        let chunks: [&[u8]; 4] = [
            b"2026-11-22T10:00:05.1Z one\n2026-11-22T10:00:05.2Z tw",
            b"o\n2026-11-22T10:00:05.3Z thr",
            b"ee",
            b"\n2026-11-22T10:00:05.4Z fo",
        ];
        let mut new = 0;
        for c in chunks {
            new += t.lines(c, &mut pending, &mut pos, &mut batch);
        }
        assert_eq!(new, 3);
        assert_eq!(String::from_utf8(batch).unwrap(), "one\ntwo\nthree\n");
        // The cut line is not printed and not counted: a reconnect brings it whole.
        assert_eq!(pending, b"2026-11-22T10:00:05.4Z fo");
        assert_eq!(
            t.resume,
            Resume {
                last: Some(ts("2026-11-22T10:00:05.3Z")),
                at_last: 1
            }
        );
        let (mut pending, mut pos, mut batch) = (Vec::new(), ReadPos::default(), Vec::new());
        let again = b"2026-11-22T10:00:05.1Z one\n2026-11-22T10:00:05.2Z two\n2026-11-22T10:00:05.3Z three\n2026-11-22T10:00:05.4Z four\n";
        assert_eq!(t.lines(again, &mut pending, &mut pos, &mut batch), 1);
        assert_eq!(String::from_utf8(batch).unwrap(), "four\n");
    }

    /// `lines` filtered by a request's `sinceTime` and `tailLines`, as one whole stream.
    fn serve(lines: &[String], req: &LogRequest) -> LogStream {
        let since = req.since_time.map(Ts::from_jiff);
        let mut l: Vec<&String> = lines
            .iter()
            .filter(|l| since.is_none_or(|s| parse_ts(split_ts(l.as_bytes()).0) >= Some(s)))
            .collect();
        if let Some(n) = req.tail_lines {
            l = l.split_off(l.len().saturating_sub(n as usize));
        }
        let body: Vec<std::io::Result<Vec<u8>>> = l
            .iter()
            .map(|l| Ok(format!("{l}\n").into_bytes()))
            .collect();
        Box::pin(futures::stream::iter(body).into_async_read())
    }

    /// A container that crashed once and restarts. Instance 0 ended at 10:00:00 (to the
    /// second, as Kubernetes says); instance 1 starts 1.5 s later. The restart happens between
    /// the tail's look (instance 0 ended, a restart coming) and its request for the current
    /// log, so the engine answers with instance 1's lines — as on a busy machine.
    #[derive(Clone)]
    struct Restarted(Arc<Mutex<(bool, u32)>>);

    impl Restarted {
        fn instance(k: u32) -> Vec<String> {
            (0..50)
                .map(|i| {
                    let at = if k == 0 { 10 + i * 15 } else { 1600 + i * 15 };
                    format!(
                        "2026-11-22T10:00:0{}.{:03}000000Z instance {k} line {i}",
                        at / 1000,
                        at % 1000
                    )
                })
                .collect()
        }
    }

    impl LogSource for Restarted {
        fn engine(&self) -> super::super::target::Engine {
            super::super::target::Engine::Kubernetes
        }

        async fn look(&self, _t: &Target) -> Result<Option<View>, SourceError> {
            let (restarted, _) = *self.0.lock().unwrap();
            let ended = "2026-11-22T10:00:00Z".parse().unwrap();
            Ok(Some(if restarted {
                View {
                    restart: 1,
                    life: Life::Dead { for_good: true },
                    has_previous: true,
                    ended_at: Some("2026-11-22T10:00:02Z".parse().unwrap()),
                    deleting: None,
                    owner: None,
                }
            } else {
                View {
                    restart: 0,
                    life: Life::Dead { for_good: false },
                    has_previous: false,
                    ended_at: Some(ended),
                    deleting: None,
                    owner: None,
                }
            }))
        }

        async fn open(&self, _t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
            let mut m = self.0.lock().unwrap();
            m.1 += 1;
            let k = if req.previous {
                0
            } else {
                m.0 = true;
                1
            };
            Ok(serve(&Restarted::instance(k), req))
        }
    }

    #[tokio::test]
    async fn a_restart_between_look_and_request_loses_nothing() {
        let src = Restarted(Arc::new(Mutex::new((false, 0))));
        let (rep, out) = tail_all(src, false).await;
        let want: Vec<String> = [0, 1]
            .iter()
            .flat_map(|k| (0..50).map(move |i| format!("instance {k} line {i}")))
            .collect();
        assert_eq!(out, want);
        assert_eq!(rep.warning, None);
    }

    #[tokio::test]
    async fn a_log_that_sincetime_cannot_resume_is_read_from_its_end() {
        // 80 lines a second, streams cut every 40: a reconnect from the floored second never
        // gets past the second it stopped in. The end, through `tailLines`, brings the rest.
        let n = 2000;
        let src = Mem::new(numbered(n), Life::Dead { for_good: true }, 40);
        let (rep, out) = tail_all(src, false).await;
        let want: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
        assert_eq!(out.len(), want.len());
        assert!(out == want);
        assert_eq!(rep.warning, None);
    }

    #[tokio::test]
    async fn lines_the_tail_could_not_reach_are_named_in_a_warning() {
        // As above, but the log is longer than the last-resort read brings: what lies between
        // is named by its timestamps, and nothing is printed twice.
        let n = RESCUE_LINES as usize + 4000;
        let src = Mem::new(numbered(n), Life::Dead { for_good: true }, 40);
        let (rep, out) = tail_all(src, false).await;
        let w = rep.warning.expect("a warning");
        assert!(w.contains("may be missing"), "{w}");
        assert!(
            w.contains(&format!(
                "({RESCUE_LINES} read from its last {RESCUE_LINES} lines)"
            )),
            "{w}"
        );
        let mut seen = std::collections::HashSet::new();
        assert!(
            out.iter().all(|l| seen.insert(l.clone())),
            "a line printed twice"
        );
        assert!(out.ends_with(&[format!("line {}", n - 1)]));
        assert!(out.len() >= RESCUE_LINES as usize);
    }

    /// How the first follow of [`Going`]'s container is answered.
    #[derive(Clone, Copy)]
    enum FirstFollow {
        /// Every line, then a clean end (the container ended).
        Whole,
        /// This many lines, then a clean end (cut while it runs).
        CleanCut(usize),
        /// This many lines and half of the next, then an error.
        BrokenCut(usize),
    }

    /// How every later request is answered.
    #[derive(Clone, Copy)]
    enum Later {
        /// An empty body: the container and its log were removed, its pod not yet.
        Empty,
        /// Refused (its node does not answer).
        Refused,
    }

    /// A pod that goes away: its looks are scripted (the last one repeats; `None`: gone), its
    /// first follow answered as `first`, every later request as `later`.
    #[derive(Clone)]
    struct Going(Arc<Mutex<GoingSt>>);

    struct GoingSt {
        lines: Vec<String>,
        looks: std::collections::VecDeque<Option<View>>,
        first: Option<FirstFollow>,
        later: Later,
    }

    impl Going {
        fn new(looks: Vec<Option<View>>, first: FirstFollow, later: Later) -> Going {
            Going(Arc::new(Mutex::new(GoingSt {
                lines: numbered(10),
                looks: looks.into(),
                first: Some(first),
                later,
            })))
        }
    }

    impl LogSource for Going {
        fn engine(&self) -> super::super::target::Engine {
            super::super::target::Engine::Kubernetes
        }

        async fn look(&self, _t: &Target) -> Result<Option<View>, SourceError> {
            let mut m = self.0.lock().unwrap();
            Ok(if m.looks.len() > 1 {
                m.looks.pop_front().unwrap()
            } else {
                m.looks[0].clone()
            })
        }

        async fn open(&self, _t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
            let mut m = self.0.lock().unwrap();
            let first = if req.follow { m.first.take() } else { None };
            let lines = m.lines.clone();
            let mut chunks: Vec<std::io::Result<Vec<u8>>> = Vec::new();
            let whole = |n: usize| -> Vec<std::io::Result<Vec<u8>>> {
                lines[..n]
                    .iter()
                    .map(|l| Ok(format!("{l}\n").into_bytes()))
                    .collect()
            };
            match (first, m.later) {
                (Some(FirstFollow::Whole), _) => chunks = whole(lines.len()),
                (Some(FirstFollow::CleanCut(n)), _) => chunks = whole(n),
                (Some(FirstFollow::BrokenCut(n)), _) => {
                    chunks = whole(n);
                    chunks.push(Ok(lines[n].as_bytes()[..10].to_vec()));
                    chunks.push(Err(std::io::Error::other("cut")));
                }
                (None, Later::Empty) => {}
                (None, Later::Refused) => {
                    return Err(SourceError {
                        failure: Failure::Transient,
                        message: "500: the node does not answer".into(),
                    });
                }
            }
            Ok(Box::pin(futures::stream::iter(chunks).into_async_read()))
        }
    }

    fn deleting(life: Life) -> Option<View> {
        Some(View {
            deleting: Some("2026-11-22T10:00:05Z".parse().unwrap()),
            ..view(0, life, false)
        })
    }

    #[tokio::test]
    async fn a_pod_deleted_as_its_followed_container_ends_loses_nothing() {
        // The follow ends with the container; by the next look the container is removed with
        // its log, the pod marked for deletion: read to its end, no warning.
        let src = Going::new(
            vec![
                Some(view(0, Life::Running, false)),
                deleting(Life::Dead { for_good: true }),
            ],
            FirstFollow::Whole,
            Later::Empty,
        );
        let (rep, out) = tail_all(src, false).await;
        assert_eq!(out.len(), 10);
        assert_eq!(rep.warning, None);
        // Gone at once after the stream's end: the same.
        let src = Going::new(
            vec![Some(view(0, Life::Running, false)), None],
            FirstFollow::Whole,
            Later::Refused,
        );
        let (rep, out) = tail_all(src, false).await;
        assert_eq!(out.len(), 10);
        assert_eq!(rep.warning, None);
    }

    #[tokio::test]
    async fn a_pod_deleted_before_its_log_was_read_to_the_end_is_named() {
        // The stream breaks after 4 lines, the node answers no more, the pod goes.
        let src = Going::new(
            vec![Some(view(0, Life::Running, false)), None],
            FirstFollow::BrokenCut(4),
            Later::Refused,
        );
        let (rep, out) = tail_all(src, false).await;
        assert_eq!(out.len(), 4);
        let w = rep.warning.expect("a warning");
        assert!(
            w.starts_with("p: container p was removed (found gone at "),
            "{w}"
        );
        assert!(
            w.ends_with(
                "before the log of container c was read to its end; lines after 2026-11-22 10:10:00.000 UTC (the last one read) are missing"
            ),
            "{w}"
        );
        // A clean end while the container still runs (a cut at a line's end), then the same;
        // the pod seen deleting first.
        let src = Going::new(
            vec![
                Some(view(0, Life::Running, false)),
                Some(view(0, Life::Running, false)),
                deleting(Life::Running),
                None,
            ],
            FirstFollow::CleanCut(6),
            Later::Refused,
        );
        let (rep, out) = tail_all(src, false).await;
        assert_eq!(out.len(), 6);
        let w = rep.warning.expect("a warning");
        assert!(
            w.starts_with("p: container p was removed at 2026-11-22 10:00:05.000 UTC before"),
            "{w}"
        );
        assert!(
            w.contains("lines after 2026-11-22 10:10:00.001 UTC (the last one read)"),
            "{w}"
        );
    }

    fn view(restart: u32, life: Life, has_previous: bool) -> View {
        View {
            restart,
            life,
            has_previous,
            ended_at: None,
            deleting: None,
            owner: None,
        }
    }

    #[test]
    fn each_state_has_one_next_step() {
        let fresh = |k| Instance::new(k);
        let read = |k| Instance {
            drained: true,
            ..Instance::new(k)
        };
        let not_started = |for_good| Life::NotStarted {
            reason: "ContainerCreating".into(),
            for_good,
        };
        let dead = |for_good| Life::Dead { for_good };
        use Step::*;
        let cases: Vec<(Instance, View, bool, Step)> = vec![
            (fresh(0), view(0, not_started(false), false), false, Wait),
            (fresh(0), view(0, not_started(false), false), true, Stop),
            (fresh(0), view(0, not_started(true), false), false, Stop),
            (fresh(0), view(0, Life::Running, false), false, Follow),
            (fresh(0), view(0, Life::Running, false), true, CatchUp),
            (
                fresh(0),
                view(0, dead(true), false),
                false,
                Drain { previous: false },
            ),
            (
                fresh(0),
                view(0, dead(false), false),
                false,
                Drain { previous: false },
            ),
            (read(0), view(0, dead(true), false), false, Stop),
            (read(0), view(0, dead(false), false), false, Wait),
            (read(0), view(0, dead(false), false), true, Stop),
            (
                fresh(0),
                view(1, Life::Running, true),
                false,
                Drain { previous: true },
            ),
            (
                read(0),
                view(1, Life::Running, true),
                false,
                Next { to: 1, lost: false },
            ),
            (
                read(0),
                view(2, Life::Running, true),
                false,
                Next { to: 1, lost: false },
            ),
            (
                fresh(1),
                view(2, Life::Running, true),
                false,
                Drain { previous: true },
            ),
            (
                fresh(0),
                view(2, Life::Running, true),
                false,
                Next { to: 2, lost: true },
            ),
            (
                fresh(0),
                view(1, Life::Running, false),
                false,
                Next { to: 1, lost: true },
            ),
        ];
        for (inst, v, finishing, want) in cases {
            assert_eq!(
                decide(&inst, &v, finishing),
                want,
                "{inst:?} {v:?} finishing={finishing}"
            );
        }
    }
}
