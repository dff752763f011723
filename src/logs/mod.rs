//! `hvdctl logs`: every container of a run, multiplexed, lossless — pods of a Kubernetes run
//! or Docker containers of a local one, through the same code.
//!
//! The pieces read like stern's: [`watch`] finds the run's pods and turns them into
//! [`target`]s, [`tail`] reads one target with its resume state from a [`source`] (the engine:
//! [`pods`] or [`docker`]), [`printer`] owns stdout. This module wires them: [`Tails`] runs one
//! tail task per target into one bounded channel to the printer; for Kubernetes runs a
//! spinner shows while nothing runs yet and — when following — the job's state says when to
//! stop: once the job has finished and every tail has drained its last line. Local runs find
//! their containers and wait for the job in [`crate::local::logs`], on the same [`Tails`].

pub mod docker;
pub mod pods;
pub mod printer;
pub mod rank;
pub mod source;
pub mod tail;
pub mod target;
pub mod watch;

use crate::cluster::Cluster;
use crate::cluster::runs::RunRef;
use crate::cluster::status::{JobState, job_state, run_pods};
use crate::error::{Error, Result};
use crate::options::RoleFilter;
use crate::ui::Ui;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use pods::PodSource;
use printer::{CHANNEL, LineFormat, Printed, Style};
use source::LogSource;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tail::{Ctx, Life, Report, Start, Tail};
use target::Target;
use tokio::sync::{Semaphore, mpsc, watch as signal};
use tokio::task::{JoinHandle, JoinSet};

/// Logs read at once up to their present end (finished containers; see [`tail::Ctx::drains`]).
/// Measured: 4 reads at once are as fast as 64 against a local server, in 15 MB less memory.
pub const DRAINS: usize = 4;

/// What to show and how (the resolved flags).
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Follow new lines and new pods until the job ends.
    pub follow: bool,
    /// `--since` in seconds.
    pub since_seconds: Option<i64>,
    /// `--since-time`.
    pub since_time: Option<jiff::Timestamp>,
    /// `--tail`: lines from the end of each container's log to start with.
    pub tail: Option<i64>,
    pub role: RoleFilter,
    /// `--pod`: only pods whose name matches.
    pub pod: Option<regex::Regex>,
    pub container: Option<String>,
    pub style: Style,
}

impl LogOptions {
    /// Follow everything from the start, plain text with prefixes (what `deploy --logs` wants).
    pub fn follow_all(ui: &Ui) -> LogOptions {
        LogOptions {
            follow: true,
            since_seconds: None,
            since_time: None,
            tail: None,
            role: RoleFilter::All,
            pod: None,
            container: None,
            style: Style {
                format: printer::Format::Text,
                prefix: true,
                timestamps: false,
                color: ui.color_stdout,
                rank: None,
            },
        }
    }
}

/// How `logs` ended.
#[derive(Debug, Clone)]
pub struct LogsOutcome {
    /// The job's final state when following (None without `-f`, or when stdout was closed).
    pub state: Option<JobState>,
    /// Lines printed.
    pub lines: u64,
    /// Containers read.
    pub targets: usize,
    /// Why the job failed or cannot succeed, when following ended on it.
    pub reason: Option<String>,
}

impl LogsOutcome {
    /// 0, or 1 when following a job that failed (its reason on stderr).
    pub fn exit_code(&self) -> u8 {
        let code = self.state.map_or(0, JobState::exit_code);
        if code != 0 {
            crate::ui::print_reason(self.reason.as_deref());
        }
        code
    }
}

/// Prints the logs of every pod of `run` on stdout (see [`run_to`]).
pub async fn run(
    cluster: &Cluster,
    run: &RunRef,
    opts: LogOptions,
    ui: &Ui,
) -> Result<LogsOutcome> {
    run_to(cluster, run, opts, ui, || {
        Box::new(std::io::stdout().lock())
    })
    .await
}

/// Prints the logs of every pod of `run` to the writer `out` makes (on a blocking thread).
/// With `follow`, returns once the job has finished and every line is out; Ctrl-C gives
/// [`Error::interrupted`].
pub async fn run_to(
    cluster: &Cluster,
    run: &RunRef,
    opts: LogOptions,
    ui: &Ui,
    out: impl OpenOut,
) -> Result<LogsOutcome> {
    let tails = Tails::start(&opts, ui, out);
    let mut m = Mux::new(cluster, run, &opts, ui, tails);
    let result = until_interrupted(m.drive()).await;
    let reason = m.reason.take();
    let mut outcome = m.tails.end(result).await?;
    outcome.reason = reason;
    Ok(outcome)
}

/// `f`, or [`Error::interrupted`] at Ctrl-C.
pub async fn until_interrupted<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::select! {
        r = f => r,
        _ = tokio::signal::ctrl_c() => Err(Error::interrupted()),
    }
}

/// The tails of one `logs` command, whatever their engine: one task per target, all feeding
/// one printer through one bounded channel, and the signal that no more lines are wanted
/// beyond what is there now.
pub struct Tails<'a> {
    ui: &'a Ui,
    start: Start,
    style: Style,
    tx: mpsc::Sender<Vec<u8>>,
    printer: JoinHandle<std::io::Result<Printed>>,
    finish: signal::Sender<bool>,
    set: JoinSet<Report>,
    drains: Arc<Semaphore>,
    started: usize,
    lines: u64,
    closed: bool,
    /// `--rank` was said to find no tags in some target.
    untagged_noted: bool,
}

/// What opens the writer the merged lines go to, called once on the printer's thread.
pub trait OpenOut: FnOnce() -> Box<dyn Write> + Send + 'static {}

impl<F: FnOnce() -> Box<dyn Write> + Send + 'static> OpenOut for F {}

impl<'a> Tails<'a> {
    /// Starts the printer on a blocking thread, writing to what `out` makes. Without
    /// `opts.follow`, tails read what their container has now and stop.
    pub fn start(opts: &LogOptions, ui: &'a Ui, out: impl OpenOut) -> Tails<'a> {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(CHANNEL);
        let printer = tokio::task::spawn_blocking(move || printer::print_all(rx, out()));
        Tails {
            ui,
            start: Start {
                since_seconds: opts.since_seconds,
                since_time: opts.since_time,
                tail: opts.tail,
            },
            style: opts.style,
            tx,
            printer,
            finish: signal::channel(!opts.follow).0,
            set: JoinSet::new(),
            drains: Arc::new(Semaphore::new(DRAINS)),
            started: 0,
            lines: 0,
            closed: false,
            untagged_noted: false,
        }
    }

    /// One tail per target, reading from `source`.
    pub fn spawn<S: LogSource>(&mut self, source: &S, targets: impl IntoIterator<Item = Target>) {
        for t in targets {
            debug_assert_eq!(t.engine, source.engine(), "{}", t.pod);
            if let Some(n) = self.style.rank
                && t.ranks.is_none()
                && !std::mem::replace(&mut self.untagged_noted, true)
            {
                self.ui.note(format!(
                    "warning: --rank {n}: the lines of {} carry no rank tags hvdctl can read (a run deployed before hvdctl tagged them), so none is shown",
                    t.pod
                ));
            }
            let ctx = Ctx {
                source: source.clone(),
                tx: self.tx.clone(),
                fmt: LineFormat::new(&t, self.style),
                finish: self.finish.subscribe(),
                drains: self.drains.clone(),
                start: self.start.clone(),
            };
            self.started += 1;
            self.set.spawn(Tail::new(t, ctx).run());
        }
    }

    /// No more lines are wanted beyond what is there now: running containers are read to
    /// their present end, then their tails stop.
    pub fn finish(&self) {
        let _ = self.finish.send(true);
    }

    /// Targets handed to a tail so far.
    pub fn count(&self) -> usize {
        self.started
    }

    /// Whether some tail still runs.
    pub fn running(&self) -> bool {
        !self.set.is_empty()
    }

    /// Whether stdout was closed (e.g. `| head`): nothing more can be shown.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Waits for a tail to end and records how it ended (warnings go to stderr). Returns at
    /// once when none runs.
    pub async fn join_next(&mut self) {
        match self.set.join_next().await {
            Some(Ok(rep)) => {
                self.lines += rep.lines;
                if let Some(w) = rep.warning {
                    self.ui.note(format!("warning: {w}"));
                }
                self.closed |= rep.closed;
            }
            Some(Err(e)) if e.is_cancelled() => {}
            Some(Err(e)) => self.ui.note(format!("warning: a log stream stopped: {e}")),
            None => {}
        }
    }

    /// Stops what still runs, waits for the printer to write everything, and says how it
    /// went; `result` is how the caller's driving ended (the job's state when following).
    pub async fn end(mut self, result: Result<Option<JobState>>) -> Result<LogsOutcome> {
        self.set.abort_all();
        while self.running() {
            self.join_next().await;
        }
        let Tails {
            tx,
            printer,
            lines,
            started,
            closed,
            ..
        } = self;
        drop(tx);
        let printed = printer
            .await
            .map_err(|e| Error::failure(format!("log printer: {e}")))?;
        let printed =
            printed.map_err(|e| Error::failure(format!("writing logs to stdout: {e}")))?;
        let state = result?;
        Ok(LogsOutcome {
            state: if printed.closed || closed {
                None
            } else {
                state
            },
            lines,
            targets: started,
            reason: None,
        })
    }
}

/// The multiplexer of a Kubernetes run: its pods, found by the watcher, tailed.
struct Mux<'a> {
    cluster: &'a Cluster,
    run: &'a RunRef,
    opts: &'a LogOptions,
    ui: &'a Ui,
    source: PodSource,
    pods: watch::Pods,
    tails: Tails<'a>,
    /// Why the job failed or cannot succeed (following stops on it).
    reason: Option<String>,
}

impl<'a> Mux<'a> {
    fn new(
        cluster: &'a Cluster,
        run: &'a RunRef,
        opts: &'a LogOptions,
        ui: &'a Ui,
        tails: Tails<'a>,
    ) -> Mux<'a> {
        let filter = watch::Filter {
            role: opts.role,
            pod: opts.pod.clone(),
            container: opts.container.clone(),
        };
        Mux {
            cluster,
            run,
            opts,
            ui,
            source: PodSource::new(Api::namespaced(cluster.client.clone(), &run.namespace)),
            pods: watch::Pods::new(&run.job, run.backend.identity(), filter),
            tails,
            reason: None,
        }
    }

    fn update(&mut self, pod: Pod) {
        let t = self.pods.update(pod);
        self.tails.spawn(&self.source, t);
    }

    async fn drive(&mut self) -> Result<Option<JobState>> {
        if self.opts.follow {
            self.follow().await.map(Some)
        } else {
            self.snapshot().await.map(|()| None)
        }
    }

    fn what(&self) -> String {
        format!("run {} in namespace {}", self.run.job, self.run.namespace)
    }

    /// Without `-f`: what every pod has now.
    async fn snapshot(&mut self) -> Result<()> {
        let pods = run_pods(self.cluster, self.run).await?;
        if pods.is_empty() {
            let state = job_state(self.cluster, self.run)
                .await
                .map(|(s, _)| s.to_string())
                .unwrap_or_else(|_| "unknown".into());
            return Err(Error::failure(format!(
                "{} has no pods yet (job state: {state})",
                self.what()
            ))
            .hint(
                "`hvdctl logs -f` waits for them; `hvdctl status` shows why they are not there",
            ));
        }
        for p in pods {
            self.update(p);
        }
        self.no_match_check()?;
        while self.tails.running() {
            self.tails.join_next().await;
            if self.tails.closed() {
                break;
            }
        }
        Ok(())
    }

    fn no_match_check(&self) -> Result<()> {
        if self.pods.target_count() == 0 && !self.pods.present.is_empty() {
            return Err(Error::input(format!(
                "no container of the {} pod(s) of {} matches --role/--pod/--container",
                self.pods.present.len(),
                self.what()
            )));
        }
        Ok(())
    }

    /// With `-f`: follow every pod, new ones too, until the job has finished and every tail
    /// has drained.
    async fn follow(&mut self) -> Result<JobState> {
        let mut events = Box::pin(watch::pods(self.source.api.clone(), &self.run.selector()));
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut wait = Waiting::new(self.ui, &self.run.job);
        let mut watch_errors = 0u32;
        let mut relist: Option<HashSet<String>> = None;
        let mut finished: Option<JobState> = None;
        loop {
            tokio::select! {
                ev = events.next(), if finished.is_none() => match ev {
                    Some(Ok(ev)) => {
                        watch_errors = 0;
                        self.saw(ev, &mut relist);
                        wait.update(&self.pods.present, self.pods.target_count());
                    }
                    Some(Err(e)) => {
                        watch_errors += 1;
                        self.watch_failed(&e, watch_errors)?;
                    }
                    None => return Err(Error::failure(format!("watching the pods of {} stopped", self.what()))),
                },
                _ = tick.tick(), if finished.is_none() => {
                    finished = self.finished().await?;
                    if finished.is_some() {
                        wait.done();
                        // Pods the watcher has not shown yet still count.
                        for p in run_pods(self.cluster, self.run).await? {
                            self.update(p);
                        }
                        self.tails.finish();
                    } else {
                        wait.update(&self.pods.present, self.pods.target_count());
                    }
                },
                _ = self.tails.join_next(), if self.tails.running() => {
                    if self.tails.closed() {
                        return Ok(finished.unwrap_or(JobState::Running));
                    }
                },
            }
            if let Some(state) = finished
                && !self.tails.running()
            {
                return Ok(state);
            }
        }
    }

    /// A pod event of the watch. `relist`: the pods a relist has shown so far (those it does
    /// not show are gone).
    fn saw(&mut self, ev: watcher::Event<Pod>, relist: &mut Option<HashSet<String>>) {
        match ev {
            watcher::Event::Apply(p) => self.update(p),
            watcher::Event::Delete(p) => self.pods.remove(&p),
            watcher::Event::Init => *relist = Some(HashSet::new()),
            watcher::Event::InitApply(p) => {
                if let (Some(seen), Some(uid)) = (relist.as_mut(), p.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                self.update(p);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = relist.take() {
                    self.pods.retain(&seen);
                }
            }
        }
    }

    /// The watch failed (`errors` times in a row): an error once it will not recover (the
    /// API refused it, or eight tries in a row failed); the watcher retries otherwise.
    fn watch_failed(&self, e: &watcher::Error, errors: u32) -> Result<()> {
        let fatal = match e {
            watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) => {
                !crate::cluster::client::is_transient(k)
            }
            _ => false,
        };
        if !fatal && errors < 8 {
            return Ok(());
        }
        let what = format!("watch the pods of {}", self.what());
        Err(match e {
            watcher::Error::InitialListFailed(k)
            | watcher::Error::WatchStartFailed(k)
            | watcher::Error::WatchFailed(k) => self.cluster.error(&what, k),
            _ => Error::failure(format!("{what}: {e}")),
        })
    }

    /// The run's state once following can stop: it finished, it cannot succeed, or its queue
    /// will never admit it (then `self.reason` says why). `None` while it goes on.
    async fn finished(&mut self) -> Result<Option<JobState>> {
        let (state, conds) = job_state(self.cluster, self.run).await?;
        // A queue that will never admit the run (no such LocalQueue): a failure now; a queue
        // that waits for room (quota) is waited through.
        if let Some(unqueued) = crate::cluster::queue::failure(&conds) {
            self.reason = Some(unqueued);
            return Ok(Some(JobState::Failed));
        }
        // A pod that says the run cannot succeed (no image, out of memory, crash loop,
        // unschedulable on every node) ends following as a failure: seen on the pods at no
        // cost, decided by the run's explanation (which also reads the nodes and the logs).
        // A pod waiting for seconds with nothing said (a volume, the sandbox, a claim) is
        // asked about too: its events may say no retry will help.
        let pods = self.pods.present.values();
        let suspect = !state.is_finished()
            && (crate::cluster::reason::any_failing(
                pods.clone(),
                crate::cluster::status::elastic_bounds(pods.clone()).is_some(),
            ) || self
                .pods
                .present
                .values()
                .any(crate::cluster::reason::stuck));
        let why = if suspect || state == JobState::Failed {
            crate::cluster::reason::of_run(self.cluster, self.run)
                .await
                .ok()
                .and_then(|e| e.run)
        } else {
            None
        };
        let failing = suspect && why.as_ref().is_some_and(|r| r.failing);
        if !state.is_finished() && !failing {
            return Ok(None);
        }
        let state = if failing { JobState::Failed } else { state };
        if state == JobState::Failed {
            self.reason = why.map(|r| r.text);
        }
        Ok(Some(state))
    }
}

/// The "nothing to show yet" indicator: a spinner on a terminal, a line per change otherwise.
struct Waiting<'a> {
    ui: &'a Ui,
    job: String,
    since: Instant,
    bar: Option<indicatif::ProgressBar>,
    last: String,
    last_note: Option<Instant>,
    over: bool,
}

impl<'a> Waiting<'a> {
    fn new(ui: &'a Ui, job: &str) -> Waiting<'a> {
        Waiting {
            ui,
            job: job.to_string(),
            since: Instant::now(),
            bar: None,
            last: String::new(),
            last_note: None,
            over: false,
        }
    }

    fn update(&mut self, pods: &BTreeMap<String, Pod>, targets: usize) {
        if self.over {
            return;
        }
        let msg = waiting_message(&self.job, pods, targets);
        let Some(msg) = msg else {
            self.done();
            return;
        };
        if self.ui.progress {
            let bar = self.bar.get_or_insert_with(|| self.ui.spinner(msg.clone()));
            bar.set_message(msg.clone());
        } else {
            // A line when what is waited for changes (not for every count), and every 30 s.
            let kind = |m: &str| {
                m.chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect::<String>()
            };
            let stale = self
                .last_note
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(30));
            if kind(&msg) != kind(&self.last) || stale {
                let secs = self.since.elapsed().as_secs();
                self.ui.note(if secs > 0 {
                    format!("{msg} ({secs}s)")
                } else {
                    msg.clone()
                });
                self.last_note = Some(Instant::now());
            }
        }
        self.last = msg;
    }

    fn done(&mut self) {
        self.over = true;
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// What is being waited for, or None once some container of the run has started.
fn waiting_message(job: &str, pods: &BTreeMap<String, Pod>, targets: usize) -> Option<String> {
    if pods.is_empty() {
        return Some(format!("waiting for the pods of {job} to be created"));
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods.values() {
        let names: Vec<String> = p
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        for c in names {
            match pods::view(p, &c).life {
                Life::NotStarted { reason, .. } => *reasons.entry(reason).or_default() += 1,
                _ => return None,
            }
        }
    }
    if targets == 0 {
        return Some(format!(
            "waiting for pods of {job} matching the filters ({} other pod(s) present)",
            pods.len()
        ));
    }
    let what: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    Some(format!(
        "waiting for the containers of {job} to start: {}",
        what.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, state: serde_json::Value) -> (String, Pod) {
        let p = serde_json::from_value(json!({
            "metadata": {"name": uid, "uid": uid},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": state}]},
        }))
        .unwrap();
        (uid.to_string(), p)
    }

    #[test]
    fn waiting_says_what_for() {
        let none = BTreeMap::new();
        assert_eq!(
            waiting_message("j", &none, 0).unwrap(),
            "waiting for the pods of j to be created"
        );
        let pods: BTreeMap<_, _> = [
            pod("a", json!({"waiting": {"reason": "ContainerCreating"}})),
            pod("b", json!({"waiting": {"reason": "ImagePullBackOff"}})),
            pod("c", json!({"waiting": {"reason": "ContainerCreating"}})),
        ]
        .into();
        assert_eq!(
            waiting_message("j", &pods, 3).unwrap(),
            "waiting for the containers of j to start: 2 ContainerCreating, 1 ImagePullBackOff"
        );
        let mut running = pods.clone();
        running.extend([pod("d", json!({"running": {}}))]);
        assert_eq!(waiting_message("j", &running, 4), None);
    }
}
