//! The state of a local run from its containers (the Docker engine is the source of truth):
//! one row per container in the shape `hvdctl status` prints for pods, and the job's state.
//!
//! The launcher decides: exited 0 → Succeeded, exited non-zero → Failed. A worker that died
//! (exited non-zero, was killed, ran out of memory) fails the job at once, even while the
//! launcher still runs: it is reported, never hidden. Elastic runs are the exception: there
//! a dead worker is *lost* (its row says so, with its exit) and the job goes on while
//! horovodrun goes on; with fewer live workers than `minWorkers` a condition says so, and
//! the launcher's failure is then named `BelowMinWorkers`.

use super::worker_index;
use super::{LABEL_DIR, LocalRef, docker_error, is_not_found};
use crate::backend::elastic::{self, Bounds};
use crate::cluster::status::JobState;
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use crate::kinds::{JobCondition, ROLE_LAUNCHER, ROLE_WORKER};
use crate::logs::rank::TagForms;
use crate::render::manifests::LABEL_ROLE;
use crate::report::{PodRow, StatusReport};
use bollard::models::ContainerStateStatusEnum as S;
use bollard::query_parameters::ListContainersOptions;

/// One container of a run, as inspected.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    pub name: String,
    pub id: String,
    /// `launcher` or `worker`.
    pub role: String,
    pub index: Option<u32>,
    pub status: Status,
    pub exit_code: i64,
    pub oom_killed: bool,
    pub created: String,
    /// RFC 3339, empty when never started.
    pub started_at: String,
    pub finished_at: String,
    pub restarts: i64,
    pub image: String,
    /// The rank tags of its lines (the launcher's label, see [`crate::logs::rank`]).
    pub ranks: TagForms,
    /// What it runs (entrypoint and command): the launcher's holds the elastic bounds.
    pub command: Vec<String>,
    /// The run's private directory (label).
    pub dir: String,
    /// What the run was deployed from (labels), if it says.
    pub provenance: Option<crate::provenance::Provenance>,
    /// Memory limit in bytes (0: none).
    pub memory_limit: i64,
    /// Its address on the run's network (empty when it has none).
    pub ip: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Created,
    Running,
    Exited,
    /// Dead, removing, or unknown to us.
    Gone,
}

impl Container {
    /// The container as a log target: the container is the "pod", its role the container
    /// name (one container per "pod").
    pub fn target(&self) -> crate::logs::target::Target {
        crate::logs::target::Target {
            engine: crate::logs::target::Engine::Docker,
            pod: self.name.clone(),
            uid: self.id.clone(),
            container: self.role.clone(),
            role: self.role.clone(),
            index: self.index,
            ranks: self.ranks,
            prefix: self.short_name(),
        }
    }

    /// Pod-like phase: Pending, Running, Succeeded, Failed.
    pub fn phase(&self) -> &'static str {
        match self.status {
            Status::Created => "Pending",
            Status::Running => "Running",
            Status::Exited if self.exit_code == 0 && !self.oom_killed => "Succeeded",
            Status::Exited | Status::Gone => "Failed",
        }
    }

    pub fn failed(&self) -> bool {
        self.phase() == "Failed"
    }

    /// Running or about to: a worker that counts for the job.
    pub fn alive(&self) -> bool {
        matches!(self.status, Status::Created | Status::Running)
    }

    pub fn has_started(&self) -> bool {
        self.status != Status::Created
    }

    pub fn finished(&self) -> bool {
        matches!(self.status, Status::Exited | Status::Gone)
    }

    /// `Completed (exit 0)`, `Error (exit 3)`, `OOMKilled (exit 137)`.
    pub fn termination(&self) -> Option<String> {
        if !self.finished() {
            return None;
        }
        let reason = if self.oom_killed {
            "OOMKilled"
        } else if self.exit_code == 0 {
            "Completed"
        } else {
            "Error"
        };
        Some(format!("{reason} (exit {})", self.exit_code))
    }

    /// `launcher`, `worker-3`.
    pub fn short_name(&self) -> String {
        match self.index {
            Some(i) if self.role == ROLE_WORKER => format!("worker-{i}"),
            _ if self.role == ROLE_LAUNCHER => "launcher".into(),
            _ => self.name.clone(),
        }
    }
}

/// The run's containers as the daemon lists them (stopped ones too).
pub async fn listed(
    docker: &DockerClient,
    r: &LocalRef,
) -> Result<Vec<bollard::models::ContainerSummary>> {
    docker
        .bollard()
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(r.filters()),
            ..Default::default()
        }))
        .await
        .map_err(|e| docker_error(format!("listing the containers of {}", r.job), &e))
}

/// Every container of `r`, launcher first, then workers by index.
pub async fn containers(docker: &DockerClient, r: &LocalRef) -> Result<Vec<Container>> {
    let d = docker.bollard();
    let list = listed(docker, r).await?;
    let mut out = Vec::new();
    for c in list {
        let Some(id) = c.id else { continue };
        let i = match d.inspect_container(&id, None).await {
            Ok(i) => i,
            // Removed between list and inspect.
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(docker_error(format!("inspecting container {id}"), &e)),
        };
        let name = i
            .name
            .clone()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string();
        let st = i.state.clone().unwrap_or_default();
        let status = match st.status {
            Some(S::CREATED) => Status::Created,
            Some(S::RUNNING | S::PAUSED | S::RESTARTING) => Status::Running,
            Some(S::EXITED) => Status::Exited,
            _ => Status::Gone,
        };
        let zero = |t: Option<String>| t.filter(|t| !t.starts_with("0001-")).unwrap_or_default();
        let labels = i.config.as_ref().and_then(|c| c.labels.as_ref());
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
        let role = label(LABEL_ROLE);
        let dir = label(LABEL_DIR);
        let command: Vec<String> = i
            .config
            .as_ref()
            .map(|c| {
                let mut v = c.entrypoint.clone().unwrap_or_default();
                v.extend(c.cmd.clone().unwrap_or_default());
                v
            })
            .unwrap_or_default();
        let ranks = TagForms::of_labels(&role, |k| labels?.get(k).map(String::as_str));
        let provenance =
            crate::provenance::Provenance::from_map(|k| labels.and_then(|l| l.get(k)).cloned());
        out.push(Container {
            provenance,
            ranks,
            index: if role == ROLE_WORKER {
                worker_index(&name)
            } else {
                None
            },
            role,
            id,
            status,
            exit_code: st.exit_code.unwrap_or_default(),
            oom_killed: st.oom_killed.unwrap_or(false),
            created: i.created.clone().unwrap_or_default(),
            started_at: zero(st.started_at),
            finished_at: zero(st.finished_at),
            restarts: i.restart_count.unwrap_or_default(),
            image: i.config.and_then(|c| c.image).unwrap_or_default(),
            command,
            dir,
            memory_limit: i
                .host_config
                .as_ref()
                .and_then(|h| h.memory)
                .unwrap_or_default(),
            ip: i
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .and_then(|n| {
                    n.values()
                        .filter_map(|e| e.ip_address.clone())
                        .find(|ip| !ip.is_empty())
                })
                .unwrap_or_default(),
            name,
        });
    }
    out.sort_by_key(|c| {
        (
            u8::from(c.role != ROLE_LAUNCHER),
            c.index.unwrap_or(u32::MAX),
            c.name.clone(),
        )
    });
    Ok(out)
}

fn condition(t: &str, status: bool, reason: &str, message: String, time: &str) -> JobCondition {
    JobCondition {
        type_: t.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: (!time.is_empty()).then(|| time.to_string()),
    }
}

/// The elastic bounds of the run of `cs` (from its launcher's command), if it is elastic.
pub fn elastic_bounds(cs: &[Container]) -> Option<Bounds> {
    cs.iter()
        .find(|c| c.role == ROLE_LAUNCHER)
        .and_then(|l| elastic::bounds(&l.command))
}

/// The job's state and conditions (MPIJob-shaped: Created, Running, Succeeded/Failed).
pub fn job_state(job: &str, cs: &[Container]) -> (JobState, Vec<JobCondition>) {
    let launcher = cs.iter().find(|c| c.role == ROLE_LAUNCHER);
    let bounds = elastic_bounds(cs);
    let created = cs.iter().map(|c| c.created.as_str()).min().unwrap_or("");
    let mut conds = vec![condition(
        "Created",
        true,
        "ContainersCreated",
        format!("{} container(s) of {job} created", cs.len()),
        created,
    )];
    let workers = || cs.iter().filter(|c| c.role == ROLE_WORKER);
    let dead_worker = workers().find(|c| c.failed());
    let alive = workers().filter(|c| c.alive()).count() as u32;
    // Elastic runs lose workers and go on: only the launcher ends them.
    let below_min = bounds.filter(|b| alive < b.min_workers);
    let state = match launcher {
        Some(l) if l.finished() && !l.failed() => JobState::Succeeded,
        Some(l) if l.finished() => JobState::Failed,
        _ if dead_worker.is_some() && bounds.is_none() => JobState::Failed,
        Some(l) if l.status == Status::Running => JobState::Running,
        _ => JobState::Pending,
    };
    if let Some(l) = launcher
        && l.has_started()
    {
        conds.push(condition(
            "Running",
            l.status == Status::Running,
            if l.status == Status::Running {
                "LauncherRunning"
            } else {
                "LauncherFinished"
            },
            format!("launcher {}", l.name),
            &l.started_at,
        ));
    }
    let lost = || {
        let names: Vec<String> = workers()
            .filter(|c| c.failed())
            .map(|c| {
                format!(
                    "{} {}",
                    c.short_name(),
                    c.termination().unwrap_or_else(|| "gone".into())
                )
            })
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!(" (lost: {})", names.join(", "))
        }
    };
    if let (Some(b), JobState::Running) = (below_min, state) {
        conds.push(condition(
            "BelowMinWorkers",
            true,
            "WorkersLost",
            format!(
                "{alive} worker(s) left, fewer than minWorkers {}{}: horovodrun waits for more (--elastic-timeout, 600 s unless set), then fails",
                b.min_workers,
                lost()
            ),
            "",
        ));
    }
    match state {
        JobState::Succeeded => {
            let l = launcher.expect("succeeded runs have a launcher");
            conds.push(condition(
                "Succeeded",
                true,
                "LauncherSucceeded",
                format!("launcher {} exited with code 0", l.name),
                &l.finished_at,
            ));
        }
        JobState::Failed => {
            let (reason, who) = match launcher {
                Some(l) if l.finished() => ("LauncherFailed", l),
                _ => (
                    "WorkerFailed",
                    dead_worker.expect("a dead worker fails the job"),
                ),
            };
            let why = who.termination().unwrap_or_else(|| "is gone".into());
            let (reason, extra) = match below_min {
                Some(b) => (
                    "BelowMinWorkers",
                    format!(
                        "; {alive} worker(s) left, fewer than minWorkers {}{}",
                        b.min_workers,
                        lost()
                    ),
                ),
                None => (reason, String::new()),
            };
            conds.push(condition(
                "Failed",
                true,
                reason,
                format!("{} {}: {why}{extra}", who.short_name(), who.name),
                &who.finished_at,
            ));
        }
        _ => {}
    }
    (state, conds)
}

/// One row per container: the pod row `hvdctl status` prints for Kubernetes runs. A dead
/// worker of an elastic run is `Lost` (the job went on without it).
pub fn row(c: &Container, elastic: bool) -> PodRow {
    let lost = elastic && c.role == ROLE_WORKER && c.failed();
    PodRow {
        name: c.name.clone(),
        role: c.role.clone(),
        index: c.index,
        phase: if lost { "Lost" } else { c.phase() }.into(),
        ready: format!("{}/1", u8::from(c.status == Status::Running)),
        restarts: i32::try_from(c.restarts).unwrap_or(i32::MAX),
        node: "local".into(),
        created: c.created.clone(),
        last_termination: c.termination(),
        reason: None,
        ip: Some(c.ip.clone()).filter(|ip| !ip.is_empty()),
    }
}

/// What is wrong with a container, without its last lines; `Some(true)` as the second
/// value when its last lines belong to it (it exited with an error).
fn container_fact(c: &Container) -> Option<(String, bool)> {
    if !c.finished() {
        return None;
    }
    if c.oom_killed {
        let limit = (c.memory_limit > 0).then(|| quantity::format_bytes(c.memory_limit));
        return Some((
            crate::reason::oom(&c.name, &c.name, limit.as_deref(), c.exit_code),
            false,
        ));
    }
    (c.exit_code != 0).then(|| (crate::reason::failed(&c.name, c.exit_code, ""), true))
}

/// The last `n` lines of a container's log.
async fn log_tail(docker: &DockerClient, id: &str, n: i64) -> String {
    use futures::StreamExt;
    let opts = bollard::query_parameters::LogsOptions {
        stdout: true,
        stderr: true,
        tail: n.to_string(),
        ..Default::default()
    };
    let mut text = String::new();
    let mut frames = docker.bollard().logs(id, Some(opts));
    while let Some(Ok(f)) = frames.next().await {
        text.push_str(&String::from_utf8_lossy(&f.into_bytes()));
    }
    text
}

/// The last lines of a container's log, as [`crate::reason::last_lines`] quotes them.
async fn last_lines(docker: &DockerClient, id: &str) -> String {
    crate::reason::last_lines(&log_tail(docker, id, 20).await)
}

/// The run's reason and each container's (see [`crate::reason`]): a failed run names its
/// launcher and the first worker that died, with their last lines.
pub async fn explain(
    docker: &DockerClient,
    state: JobState,
    cs: &[Container],
) -> (Option<crate::reason::Reason>, Vec<Option<String>>) {
    let mut texts = Vec::with_capacity(cs.len());
    for c in cs {
        texts.push(match container_fact(c) {
            Some((t, true)) => Some(format!("{t}{}", last_lines(docker, &c.id).await)),
            Some((t, false)) => Some(t),
            None => None,
        });
    }
    if state != JobState::Failed {
        return (None, texts);
    }
    let launcher = cs.iter().position(|c| c.role == ROLE_LAUNCHER);
    let first = cs
        .iter()
        .enumerate()
        .filter(|(i, c)| c.role == ROLE_WORKER && texts[*i].is_some())
        .min_by_key(|(_, c)| c.finished_at.clone())
        .map(|(i, c)| (c.name.as_str(), texts[i].as_deref().unwrap_or_default()));
    let text = match launcher {
        Some(l) => {
            let log = log_tail(docker, &cs[l].id, crate::cluster::reason::RANK_LOG_LINES).await;
            let rank = crate::reason::launcher_log_cause(&log, cs[l].ranks);
            crate::reason::launcher_failed(
                &cs[l].name,
                texts[l].as_deref().unwrap_or("it is gone"),
                crate::reason::first_failed(rank, first).as_deref(),
            )
        }
        None => first.map_or_else(
            || "the run failed".into(),
            |(who, why)| format!("{who}: {why}"),
        ),
    };
    (
        Some(crate::reason::Reason {
            text,
            failing: true,
        }),
        texts,
    )
}

/// The status of `r`; an error when none of its containers exists.
pub async fn report(
    docker: &DockerClient,
    r: &LocalRef,
    first_log: &crate::phases::FirstLog,
) -> Result<StatusReport> {
    let cs = containers(docker, r).await?;
    if cs.is_empty() {
        return Err(Error::not_found(format!(
            "local run {} ({}) has no containers on this Docker engine",
            r.run_id, r.job
        ))
        .hint("it was undeployed, or deployed against another Docker engine (DOCKER_HOST)"));
    }
    let (state, conditions) = job_state(&r.job, &cs);
    let elastic = elastic_bounds(&cs);
    let mut pods: Vec<PodRow> = cs.iter().map(|c| row(c, elastic.is_some())).collect();
    let (reason, texts) = explain(docker, state, &cs).await;
    for (p, t) in pods.iter_mut().zip(texts) {
        p.reason = t;
    }
    let mut phases = phases_of(&cs);
    let targets = cs
        .iter()
        .filter(|c| c.has_started())
        .map(Container::target)
        .collect();
    let source = crate::logs::docker::ContainerSource::new(docker.clone());
    let key = format!(
        "docker/{}/{}",
        r.job,
        phases.created.as_deref().unwrap_or_default()
    );
    phases.first_log = first_log.of(key, &source, targets).await;
    Ok(StatusReport {
        run: r.run_id.clone(),
        job: r.job.clone(),
        app: r.app.clone(),
        engine: crate::types::EngineKind::Docker,
        namespace: None,
        context: None,
        backend: crate::app::BackendName::LOCAL.into(),
        state,
        conditions,
        workers: crate::report::running_workers(&pods),
        elastic,
        pods,
        start_latency_seconds: phases.start_latency_seconds(),
        phases,
        provenance: cs.iter().find_map(|c| c.provenance.clone()),
        source: crate::types::Source::Engine,
        failing: reason.as_ref().is_some_and(|r| r.failing),
        storage: Vec::new(),
        reason: reason.map(|r| r.text),
        queue: None,
    })
}

/// The phases of a local run from its containers' inspect times.
fn phases_of(cs: &[Container]) -> crate::phases::Phases {
    let workers: Vec<_> = cs.iter().filter(|c| c.role == ROLE_WORKER).collect();
    let launcher = cs.iter().find(|c| c.role == ROLE_LAUNCHER);
    use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
    use crate::phases::latest;
    use crate::text::{normalize_time as normalize, parse_time as parse};
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let created = cs
        .iter()
        .filter_map(|c| parse(&c.created))
        .min()
        .map(|t| t.to_string());
    let workers_running = (!workers.is_empty())
        .then(|| latest(workers.iter().map(|c| Some(c.started_at.as_str()))))
        .flatten();
    crate::phases::Phases {
        created,
        admitted: None,
        scheduled: None,
        workers_running,
        launcher_running: launcher
            .and_then(|l| nonempty(&l.started_at))
            .and_then(|t| normalize(&t)),
        first_log: None,
        finished: launcher
            .filter(|l| l.finished())
            .and_then(|l| nonempty(&l.finished_at))
            .and_then(|t| normalize(&t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, role: &str, status: Status, exit: i64) -> Container {
        Container {
            name: name.into(),
            id: name.into(),
            role: role.into(),
            index: worker_index(name),
            status,
            exit_code: exit,
            oom_killed: false,
            created: "2026-01-01T00:00:00Z".into(),
            started_at: String::new(),
            finished_at: String::new(),
            restarts: 0,
            image: "i".into(),
            ranks: TagForms::NONE,
            command: if role == "launcher" {
                "/bin/bash /etc/hvdctl/launcher.sh horovodrun -np 3 --min-np 2 --max-np 3 --slots-per-host 1 python3 t.py"
                    .split(' ')
                    .map(String::from)
                    .collect()
            } else {
                Vec::new()
            },
            dir: String::new(),
            provenance: None,
            memory_limit: 0,
            ip: String::new(),
        }
    }

    fn fixed(mut l: Container) -> Container {
        l.command = vec!["mpirun".into(), "python3".into()];
        l
    }

    #[test]
    fn states() {
        let w0 = c("j-worker-0", "worker", Status::Running, 0);
        let w1 = c("j-worker-1", "worker", Status::Running, 0);
        let run = |l: Container, ws: &[&Container]| {
            let mut all = vec![fixed(l)];
            all.extend(ws.iter().map(|w| (*w).clone()));
            job_state("j", &all).0
        };
        assert_eq!(
            run(c("j-launcher", "launcher", Status::Created, 0), &[&w0]),
            JobState::Pending
        );
        assert_eq!(
            run(c("j-launcher", "launcher", Status::Running, 0), &[&w0, &w1]),
            JobState::Running
        );
        assert_eq!(
            run(c("j-launcher", "launcher", Status::Exited, 0), &[&w0]),
            JobState::Succeeded
        );
        assert_eq!(
            run(c("j-launcher", "launcher", Status::Exited, 1), &[&w0]),
            JobState::Failed
        );
        let killed = c("j-worker-1", "worker", Status::Exited, 137);
        let (s, conds) = job_state(
            "j",
            &[
                fixed(c("j-launcher", "launcher", Status::Running, 0)),
                w0.clone(),
                killed.clone(),
            ],
        );
        assert_eq!(s, JobState::Failed);
        let f = conds.iter().find(|c| c.type_ == "Failed").unwrap();
        assert_eq!(f.reason.as_deref(), Some("WorkerFailed"));
        assert!(f.message.as_deref().unwrap().contains("worker-1"), "{f:?}");
        assert!(f.message.as_deref().unwrap().contains("exit 137"), "{f:?}");
        let r = row(&killed, false);
        assert_eq!(r.phase, "Failed");
        assert_eq!(r.last_termination.as_deref(), Some("Error (exit 137)"));
        assert_eq!(r.index, Some(1));
        assert_eq!(job_state("j", &[w0]).0, JobState::Pending);
    }

    #[test]
    fn elastic_runs_lose_workers_and_go_on_until_the_launcher_ends() {
        let w = |i: u32, st: Status, exit: i64| c(&format!("j-worker-{i}"), "worker", st, exit);
        let l = |st: Status, exit: i64| c("j-launcher", "launcher", st, exit);
        let lost = w(2, Status::Exited, 137);
        let three = |launcher: Container| {
            vec![
                launcher,
                w(0, Status::Running, 0),
                w(1, Status::Running, 0),
                lost.clone(),
            ]
        };
        let (s, conds) = job_state("j", &three(l(Status::Running, 0)));
        assert_eq!(s, JobState::Running, "{conds:?}");
        assert!(
            !conds.iter().any(|c| c.type_ == "BelowMinWorkers"),
            "{conds:?}"
        );
        let r = row(&lost, true);
        assert_eq!(r.phase, "Lost");
        assert_eq!(r.last_termination.as_deref(), Some("Error (exit 137)"));
        assert_eq!(
            job_state("j", &three(l(Status::Exited, 0))).0,
            JobState::Succeeded
        );
        // Below minWorkers: said while horovodrun waits, named when it gives up.
        let below = vec![
            l(Status::Running, 0),
            w(0, Status::Running, 0),
            lost.clone(),
        ];
        let (s, conds) = job_state("j", &below);
        assert_eq!(s, JobState::Running);
        let b = conds.iter().find(|c| c.type_ == "BelowMinWorkers").unwrap();
        assert!(
            b.message
                .as_deref()
                .unwrap()
                .contains("1 worker(s) left, fewer than minWorkers 2"),
            "{b:?}"
        );
        let below = vec![l(Status::Exited, 1), w(0, Status::Running, 0), lost.clone()];
        let (s, conds) = job_state("j", &below);
        assert_eq!(s, JobState::Failed);
        let f = conds.iter().find(|c| c.type_ == "Failed").unwrap();
        assert_eq!(f.reason.as_deref(), Some("BelowMinWorkers"));
        assert!(
            f.message
                .as_deref()
                .unwrap()
                .contains("worker-2 Error (exit 137)"),
            "{f:?}"
        );
    }
}
