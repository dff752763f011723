//! `logs [-f]` for local runs: the run's containers, found by their labels, each read by the
//! same tail as a pod of a Kubernetes run ([`crate::logs::tail`] over
//! [`ContainerSource`]: timestamps, resume from the last second printed without repeating a
//! line, confirmed ends) into the same printer (`launcher | …`, `worker-3 | …`, or `-o json`
//! objects with the same keys).
//!
//! This module only decides which containers to read and when to stop. Containers are never
//! auto-removed, so a finished container's log is complete until `undeploy`. Following picks
//! up containers as they start and ends when the job has finished (see
//! [`super::status::job_state`]) and every tailed container has stopped, or [`DRAIN_GRACE`]
//! after the job's end for workers that linger; the exit code is then the job's (launcher
//! exit 0 → 0, else 1).

use super::LocalRef;
use super::status::{Container, containers, job_state};
use crate::cluster::status::JobState;
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use crate::logs::docker::ContainerSource;
use crate::logs::{LogOptions, LogsOutcome, OpenOut, Tails, until_interrupted};
use crate::options::RoleFilter;
use crate::ui::Ui;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long running containers may keep writing after the job has finished (workers stop
/// within a second or two of the launcher's end); then what they wrote so far is read and
/// following ends.
pub const DRAIN_GRACE: Duration = Duration::from_secs(15);

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
/// thread). With `follow`, returns once the job has finished and every line is out; Ctrl-C
/// gives [`Error::interrupted`].
pub async fn run_to(
    docker: &DockerClient,
    r: &LocalRef,
    opts: LogOptions,
    ui: &Ui,
    out: impl OpenOut,
) -> Result<LogsOutcome> {
    let source = ContainerSource::new(docker.clone());
    let mut tails = Tails::start(&opts, ui, out);
    let result = until_interrupted(drive(&source, r, &opts, ui, &mut tails)).await;
    let mut outcome = tails.end(result).await?;
    if outcome.state == Some(JobState::Failed) {
        let cs = containers(docker, r).await?;
        let (state, _) = job_state(&r.job, &cs);
        outcome.reason = super::status::explain(docker, state, &cs)
            .await
            .0
            .map(|r| r.text);
    }
    Ok(outcome)
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

/// The containers tailed so far (by id).
struct Found<'a> {
    source: &'a ContainerSource,
    opts: &'a LogOptions,
    seen: HashSet<String>,
}

impl Found<'_> {
    /// Tails every wanted container that has started and is not tailed yet.
    fn spawn(&mut self, tails: &mut Tails<'_>, cs: &[Container]) {
        for c in cs {
            if c.has_started() && wanted(c, self.opts) && self.seen.insert(c.id.clone()) {
                tails.spawn(self.source, [c.target()]);
            }
        }
    }
}

async fn drive(
    source: &ContainerSource,
    r: &LocalRef,
    opts: &LogOptions,
    ui: &Ui,
    tails: &mut Tails<'_>,
) -> Result<Option<JobState>> {
    let docker = &source.docker;
    let mut found = Found {
        source,
        opts,
        seen: HashSet::new(),
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
        found.spawn(tails, &cs);
        while tails.running() && !tails.closed() {
            tails.join_next().await;
        }
        return Ok(None);
    }
    let bar = if !cs.iter().any(Container::has_started) {
        Some(ui.spinner(format!("waiting for the containers of {} to start", r.job)))
    } else {
        None
    };
    found.spawn(tails, &cs);
    let mut finished_at: Option<(JobState, Instant)> = None;
    let mut finishing: Option<JobState> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick(), if finishing.is_none() => {}
            _ = tails.join_next(), if tails.running() => {
                if tails.closed() {
                    return Ok(None);
                }
            }
        }
        if let Some(state) = finishing {
            if !tails.running() {
                return Ok(Some(state));
            }
            continue;
        }
        let cs = containers(docker, r).await?;
        found.spawn(tails, &cs);
        if let Some(b) = &bar
            && !found.seen.is_empty()
        {
            b.finish_and_clear();
        }
        if cs.is_empty() {
            return Err(Error::failure(format!(
                "the containers of {} were removed while following its logs",
                r.job
            )));
        }
        let (state, _) = job_state(&r.job, &cs);
        if state.is_finished() && finished_at.is_none() {
            finished_at = Some((state, Instant::now()));
        }
        if let Some((state, at)) = finished_at {
            // Tails of stopped containers end by themselves once their log is read; running
            // ones are told to read what is there and stop, once all have stopped or the
            // grace period is over.
            let all_stopped = cs
                .iter()
                .filter(|c| found.seen.contains(&c.id))
                .all(Container::finished);
            if all_stopped || at.elapsed() >= DRAIN_GRACE {
                tails.finish();
                finishing = Some(state);
                if let Some(b) = &bar {
                    b.finish_and_clear();
                }
                if !tails.running() {
                    return Ok(Some(state));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::{LABEL_BACKEND, LABEL_JOB};
    use crate::logs::docker::testing;
    use crate::logs::printer::Format;
    use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, LABEL_ROLE, LABEL_RUN, MANAGER};
    use serde_json::Value;
    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// What `run_to` wrote.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn opts(follow: bool, format: Format) -> LogOptions {
        let mut o = LogOptions::follow_all(&Ui::plain());
        o.follow = follow;
        o.style.format = format;
        o
    }

    async fn logs(d: &DockerClient, r: &LocalRef, o: LogOptions) -> (LogsOutcome, String) {
        let sink = Sink::default();
        let out = sink.clone();
        let outcome = run_to(d, r, o, &Ui::plain(), move || Box::new(out))
            .await
            .expect("logs");
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        (outcome, text)
    }

    /// A local run made of busybox containers with hvdctl's labels (launcher + 2 workers), its
    /// logs followed to the job's end as JSON lines and read again as text.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_local_run_logs_json_lines_with_the_kubernetes_keys_and_more() {
        let Some(d) = testing::docker().await else {
            return;
        };
        let run_id = format!("l{:04x}", rand::random::<u16>());
        let r = LocalRef::new("logtest", &run_id);
        let labels = |role: &str| -> HashMap<String, String> {
            [
                (LABEL_MANAGED_BY, MANAGER),
                (LABEL_APP, "logtest"),
                (LABEL_RUN, run_id.as_str()),
                (LABEL_JOB, r.job.as_str()),
                (LABEL_BACKEND, "local"),
                (LABEL_ROLE, role),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        let mut ids = Vec::new();
        for i in 0..2 {
            let script = format!("for n in 1 2 3; do echo worker {i} says $n; done; sleep 1");
            let name = crate::local::worker_name(&r.job, i);
            ids.push(testing::start(&d, &name, &script, labels("worker")).await);
        }
        let launcher = "sleep 0.5; echo hello; echo oops >&2; sleep 0.2; printf 'no newline'";
        let name = crate::local::launcher_name(&r.job);
        ids.push(testing::start(&d, &name, launcher, labels("launcher")).await);

        let followed = tokio::time::timeout(
            Duration::from_secs(60),
            logs(&d, &r, opts(true, Format::Json)),
        )
        .await;
        let again = logs(&d, &r, opts(false, Format::Text)).await;
        for id in &ids {
            testing::remove(&d, id).await;
        }

        let (outcome, json) = followed.expect("following ends with the job");
        assert_eq!(outcome.state, Some(JobState::Succeeded), "{json}");
        assert_eq!(outcome.targets, 3);
        let lines: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 9, "{json}");
        for v in &lines {
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(keys, crate::logs::printer::JSON_KEYS);
            assert_eq!(v["engine"], "docker");
            assert_eq!(v["rank"], Value::Null);
            assert_eq!(v["container"], v["role"]);
        }
        let of = |msg: &str| {
            lines
                .iter()
                .find(|v| v["message"] == msg)
                .unwrap_or_else(|| panic!("{msg} missing: {json}"))
        };
        let w1 = of("worker 1 says 2");
        assert_eq!(w1["pod"], format!("{}-worker-1", r.job));
        assert_eq!(w1["role"], "worker");
        assert_eq!(w1["index"], 1);
        let l = of("oops");
        assert_eq!(l["pod"], format!("{}-launcher", r.job));
        assert_eq!(l["role"], "launcher");
        assert_eq!(l["index"], Value::Null);
        of("no newline");

        let (outcome, text) = again;
        assert_eq!(outcome.state, None);
        let mut got: Vec<&str> = text.lines().collect();
        got.sort();
        let mut want: Vec<String> = ["hello", "no newline", "oops"]
            .iter()
            .map(|m| format!("launcher | {m}"))
            .collect();
        for i in 0..2 {
            for n in 1..=3 {
                want.push(format!("worker-{i} | worker {i} says {n}"));
            }
        }
        want.sort();
        assert_eq!(got, want);
    }
}
