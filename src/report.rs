//! What `hvdctl status` shows, for every backend: the report (same keys for Kubernetes and
//! local runs), its text/JSON/YAML forms, and the `--watch`/`--wait` loop.

use crate::cluster::status::JobState;
use crate::error::Result;
use crate::kinds::JobCondition;
use crate::options::{StatusFormat, Watch};
use crate::ui::Ui;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;

/// What `status -o json|yaml` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub run: String,
    pub job: String,
    pub app: String,
    pub engine: crate::types::EngineKind,
    /// Kubernetes only (null for Docker runs).
    pub namespace: Option<String>,
    /// Kubernetes only (null for Docker runs).
    pub context: Option<String>,
    pub backend: String,
    pub state: JobState,
    pub conditions: Vec<JobCondition>,
    /// Worker pods/containers running now.
    pub workers: u32,
    /// Elastic bounds (in workers), null for a run of fixed size.
    pub elastic: Option<crate::backend::elastic::Bounds>,
    pub pods: Vec<PodRow>,
    /// Phase times from the engine's own timestamps (see [`crate::phases`]).
    pub phases: crate::phases::Phases,
    /// Seconds from `created` to `firstLog` (the training command's first line), null until
    /// both are known.
    #[serde(rename = "startLatencySeconds")]
    pub start_latency_seconds: Option<f64>,
    /// What the run was deployed from (null for a run deployed without it).
    pub provenance: Option<crate::provenance::Provenance>,
    /// `engine`, or `record` when the engine no longer has the run (the flight recorder's).
    #[serde(default)]
    pub source: crate::types::Source,
    /// The app's `storage:` claims in the run's namespace (Kubernetes), with their phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<crate::cluster::storage::ClaimRow>,
    /// Why the run is where it is, in one line (see [`crate::reason`]), or null.
    pub reason: Option<String>,
    /// The queue the run waits (or waited) in — Kueue's LocalQueue or a Volcano queue —, or
    /// null for a run deployed without one.
    #[serde(default)]
    pub queue: Option<crate::cluster::queue::Queue>,
    /// The reason means the run cannot succeed (`--wait` and `logs -f` stop on it).
    #[serde(skip)]
    pub failing: bool,
}

/// The exit code of a command that waited on the run: 1 when it failed or cannot succeed.
pub fn exit_code(r: &StatusReport) -> u8 {
    if r.failing { 1 } else { r.state.exit_code() }
}

pub use crate::ui::print_reason;

/// How many rows are running workers.
pub fn running_workers(pods: &[PodRow]) -> u32 {
    pods.iter()
        .filter(|p| p.role == crate::kinds::ROLE_WORKER && p.phase == "Running")
        .count() as u32
}

/// While an elastic run goes on with fewer running workers than `minWorkers`: a
/// `BelowMinWorkers` condition naming the lost ones (Kubernetes runs; local runs say the same
/// in `local::status`).
pub fn below_min_workers(
    b: crate::backend::elastic::Bounds,
    pods: &[PodRow],
) -> Option<JobCondition> {
    let alive = running_workers(pods);
    if alive >= b.min_workers {
        return None;
    }
    let lost: Vec<String> = pods
        .iter()
        .filter(|p| p.phase == "Lost")
        .map(|p| {
            format!(
                "{} {}",
                p.name,
                p.last_termination.as_deref().unwrap_or("gone")
            )
        })
        .collect();
    let lost = if lost.is_empty() {
        String::new()
    } else {
        format!(" (lost: {})", lost.join(", "))
    };
    Some(JobCondition {
        type_: "BelowMinWorkers".into(),
        status: "True".into(),
        reason: Some("WorkersLost".into()),
        message: Some(format!(
            "{alive} worker(s) running, fewer than minWorkers {}{lost}: horovodrun waits for more (--elastic-timeout, 600 s unless set), then fails",
            b.min_workers
        )),
        last_transition_time: None,
    })
}

/// `2 running` or `2 running (elastic: 2 to 3)`.
pub fn workers_text(r: &StatusReport) -> String {
    match r.elastic {
        Some(b) => format!(
            "{} running (elastic: {} to {})",
            r.workers, b.min_workers, b.max_workers
        ),
        None => format!("{} running", r.workers),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    pub name: String,
    pub role: String,
    pub index: Option<u32>,
    pub phase: String,
    pub ready: String,
    pub restarts: i32,
    pub node: String,
    pub created: String,
    pub last_termination: Option<String>,
    /// What is wrong with this pod/container, in one line, or null.
    pub reason: Option<String>,
    /// The pod's (container's) IP address, or null before it has one.
    #[serde(default)]
    pub ip: Option<String>,
}

/// Prints `fetch()`'s report once, or (`--watch`) whenever it changes, or (`--wait`) when the
/// job has ended; returns the exit code (with `--wait`: 0 succeeded, 1 failed).
pub async fn show<F, Fut>(a: &Watch, ui: &Ui, mut fetch: F) -> Result<u8>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<StatusReport>>,
{
    let mut last = String::new();
    loop {
        let report = fetch().await?;
        let text = render(&report, a.output)?;
        let finished = report.state.is_finished() || (a.wait && report.failing);
        let show = if a.watch {
            text != last
        } else {
            !a.wait || finished
        };
        if show {
            if a.watch
                && !last.is_empty()
                && matches!(a.output, StatusFormat::Text | StatusFormat::Wide)
            {
                crate::outln!();
            }
            crate::out!("{}", crate::text::for_terminal(&text));
            last = text;
        }
        if finished || !(a.watch || a.wait) {
            return Ok(if a.wait { exit_code(&report) } else { 0 });
        }
        ui.debug(format!("{}: {}", report.job, report.state));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "-".into();
    };
    crate::text::human_seconds(jiff::Timestamp::now().as_second() - t.as_second())
}

/// `sha256:0123456789ab` of a digest (the first 12 hex digits).
pub fn short_digest(d: &str) -> String {
    match d.split_once(':') {
        Some((alg, hex)) => format!("{alg}:{}", crate::text::short_id(hex, 12)),
        None => crate::text::short_id(d, 12).to_string(),
    }
}

/// The `Image:` and `Commit:` lines of the text report.
fn provenance_text(p: Option<&crate::provenance::Provenance>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    let digest = p
        .image_digest
        .as_deref()
        .map_or(String::new(), |d| format!(" ({})", short_digest(d)));
    let commit = match (&p.git_commit, &p.git_dirty) {
        (Some(c), Some(d)) if d == crate::provenance::DIRTY_UNKNOWN => {
            format!("{c} + uncommitted changes git could not list")
        }
        (Some(c), Some(d)) => format!("{c} + uncommitted changes {}", short_digest(d)),
        (Some(c), None) => c.clone(),
        _ => "- (not in a git repository)".into(),
    };
    let mut s = format!("Image:      {}{digest}\nCommit:     {commit}\n", p.image);
    if !p.set.is_empty() {
        s.push_str(&format!("Set:        {}\n", p.set.join(" ")));
    }
    s
}

/// The `Phases:` block: each phase reached, with its offset from `created`.
fn phases_text(p: &crate::phases::Phases, latency: Option<f64>) -> String {
    let reached = p.reached();
    if reached.is_empty() {
        return String::new();
    }
    let created = p
        .created
        .as_deref()
        .and_then(|c| c.parse::<jiff::Timestamp>().ok());
    let mut s = String::from("Phases:\n");
    for (k, t) in reached {
        let offset = match (created, t.parse::<jiff::Timestamp>()) {
            (Some(c), Ok(t)) if k != "created" => {
                format!("  (+{:.1}s)", t.duration_since(c).as_secs_f64())
            }
            _ => String::new(),
        };
        s.push_str(&format!("  {k:<16} {t}{offset}\n"));
    }
    if let Some(l) = latency {
        s.push_str(&format!(
            "Start latency: {l:.1}s (created to the training command's first line)\n"
        ));
    }
    s
}

pub fn render(r: &StatusReport, format: StatusFormat) -> crate::Result<String> {
    Ok(match format {
        StatusFormat::Json => crate::text::json(r)?,
        StatusFormat::Yaml => crate::text::yaml(r)?,
        StatusFormat::Text | StatusFormat::Wide => {
            let wide = format == StatusFormat::Wide;
            let place = match (&r.namespace, &r.context) {
                (Some(ns), Some(ctx)) => format!("Namespace:  {ns} (context {ctx})"),
                _ => format!("Engine:     {}", r.engine),
            };
            let state = match (&r.queue, r.state) {
                (Some(q), JobState::Queued) => format!("{} ({})", r.state, q.describe()),
                _ => r.state.to_string(),
            };
            let mut s = format!(
                "Run:        {} (job {}, app {})\nBackend:    {}\n{place}\nState:      {state}\nWorkers:    {}\n",
                r.run,
                r.job,
                r.app,
                r.backend,
                workers_text(r)
            );
            if let Some(reason) = &r.reason {
                s.push_str(&format!("Reason:     {reason}\n"));
            }
            for (i, c) in r.storage.iter().enumerate() {
                let head = if i == 0 { "Storage:" } else { "" };
                let phase = if c.phase.is_empty() { "-" } else { &c.phase };
                let why = c
                    .message
                    .as_deref()
                    .map_or(String::new(), |m| format!(": {m}"));
                s.push_str(&format!("{head:<12}{} {phase} ({}){why}\n", c.name, c.size));
            }
            s.push_str(&provenance_text(r.provenance.as_ref()));
            s.push_str(&phases_text(&r.phases, r.start_latency_seconds));
            if !r.conditions.is_empty() {
                s.push_str("Conditions:\n");
                for c in &r.conditions {
                    s.push_str(&format!(
                        "  {:<12} {:<6} {:<22} {}\n",
                        c.type_,
                        c.status,
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default()
                    ));
                }
            }
            // No table without rows: say why there are none.
            if r.pods.is_empty() {
                let what = match r.engine {
                    crate::types::EngineKind::Docker => "Containers",
                    crate::types::EngineKind::Kubernetes => "Pods:     ",
                };
                let none = if r.state.is_finished() {
                    "none remain (the run has ended)"
                } else {
                    "none yet"
                };
                s.push_str(&format!("{what}: {none}\n"));
                return Ok(s);
            }
            let w = r
                .pods
                .iter()
                .map(|p| p.name.len())
                .max()
                .unwrap_or(4)
                .max(4);
            let ip = |v: &str| {
                if wide {
                    format!("{v:<15} ")
                } else {
                    String::new()
                }
            };
            s.push_str(&format!(
                "{:<w$}  {:<8} {:<5} {:<18} {:<5} {:<8} {:<14} {}{:<5} {}\n",
                "NAME",
                "ROLE",
                "INDEX",
                "PHASE",
                "READY",
                "RESTARTS",
                "NODE",
                ip("IP"),
                "AGE",
                "LAST TERMINATION"
            ));
            for p in &r.pods {
                s.push_str(&format!(
                    "{:<w$}  {:<8} {:<5} {:<18} {:<5} {:<8} {:<14} {}{:<5} {}\n",
                    p.name,
                    p.role,
                    p.index.map_or("-".into(), |i| i.to_string()),
                    p.phase,
                    p.ready,
                    p.restarts,
                    p.node,
                    ip(p.ip.as_deref().unwrap_or("-")),
                    age(&p.created),
                    p.last_termination.clone().unwrap_or_else(|| "-".into())
                ));
                if let Some(reason) = &p.reason {
                    s.push_str(&format!("{:<w$}  reason: {reason}\n", ""));
                }
            }
            s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(state: JobState, pods: Vec<PodRow>) -> StatusReport {
        StatusReport {
            run: "ab1".into(),
            job: "hello-ab1".into(),
            app: "hello".into(),
            engine: crate::types::EngineKind::Docker,
            namespace: None,
            context: None,
            backend: "local".into(),
            state,
            conditions: vec![],
            storage: vec![],
            workers: 0,
            elastic: None,
            pods,
            phases: Default::default(),
            start_latency_seconds: None,
            provenance: None,
            source: Default::default(),
            reason: None,
            failing: false,
            queue: None,
        }
    }

    #[test]
    fn a_queued_run_says_where_it_waits() {
        let mut r = report(JobState::Queued, vec![]);
        r.queue = Some(crate::cluster::queue::Queue {
            system: crate::backend::queue::System::Kueue,
            name: "team-a".into(),
            cluster_queue: Some("gpu".into()),
            position: Some(1),
        });
        r.reason = Some("couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor default-flavor, 4 more needed".into());
        let text = render(&r, StatusFormat::Text).unwrap();
        assert!(
            text.contains(
                "State:      Queued (Kueue: LocalQueue team-a → ClusterQueue gpu; position 1)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Reason:     couldn't assign flavors"),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&render(&r, StatusFormat::Json).unwrap()).unwrap();
        assert_eq!(v["state"], "Queued");
        assert_eq!(
            v["queue"],
            serde_json::json!({"system": "kueue", "name": "team-a", "clusterQueue": "gpu", "position": 1})
        );
        // Once admitted the state is the backend's, and the queue is still named.
        r.state = JobState::Running;
        let text = render(&r, StatusFormat::Text).unwrap();
        assert!(text.contains("State:      Running\n"), "{text}");
    }

    #[test]
    fn no_table_header_without_rows() {
        let text = |r: &StatusReport| render(r, StatusFormat::Text).unwrap();
        let ended = text(&report(JobState::Succeeded, vec![]));
        assert!(!ended.contains("NAME"), "{ended}");
        assert!(
            ended.ends_with("Containers: none remain (the run has ended)\n"),
            "{ended}"
        );
        let waiting = text(&report(JobState::Pending, vec![]));
        assert!(!waiting.contains("NAME"), "{waiting}");
        assert!(waiting.ends_with("Containers: none yet\n"), "{waiting}");
        let row = PodRow {
            name: "hello-ab1-launcher".into(),
            role: "launcher".into(),
            index: None,
            phase: "Succeeded".into(),
            ready: "0/1".into(),
            restarts: 0,
            node: "local".into(),
            ip: None,
            created: "2026-01-01T00:00:00Z".into(),
            last_termination: Some("Completed (exit 0)".into()),
            reason: None,
        };
        let rows = text(&report(JobState::Succeeded, vec![row]));
        let lines: Vec<&str> = rows.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("NAME")).unwrap();
        assert!(
            lines[header + 1].starts_with("hello-ab1-launcher"),
            "{rows}"
        );
    }
}
