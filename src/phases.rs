//! A run's phase times, read from the engine's own timestamps (never hvdctl's clock):
//! `created` (the job object / first container), `scheduled` (every pod bound to a node),
//! `workersRunning` (every worker's container started), `launcherRunning`, `firstLog` (the
//! training command's first line: a rank's line or the launcher program's own output in the
//! launcher's log — not a worker's sshd, not hvdctl's own launcher script) and `finished`
//! (the launcher's end). A phase not reached yet is absent. Docker has no scheduler: local
//! runs never show `scheduled`.

use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::logs::source::{LogRequest, LogSource};
use crate::logs::target::Target;
use crate::text::{normalize_time, parse_time};
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Phases {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// When the run's queue admitted it (Kueue's `Admitted` condition, Volcano's
    /// `Scheduled`): only for runs deployed with a queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_running: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_running: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_log: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
}

impl Phases {
    /// Seconds from `created` to `firstLog`, once both are known.
    pub fn start_latency_seconds(&self) -> Option<f64> {
        let c = parse_time(self.created.as_deref()?)?;
        let f = parse_time(self.first_log.as_deref()?)?;
        let d = f.duration_since(c);
        Some((d.as_secs_f64() * 1000.0).round() / 1000.0)
    }

    /// Seconds from `created` to `finished` (or to now, while it runs).
    pub fn duration_seconds(&self) -> Option<i64> {
        let c = parse_time(self.created.as_deref()?)?;
        let end = match &self.finished {
            Some(f) => parse_time(f)?,
            None => jiff::Timestamp::now(),
        };
        Some((end.as_second() - c.as_second()).max(0))
    }

    /// (key, time) of every phase reached, in order.
    pub fn reached(&self) -> Vec<(&'static str, &str)> {
        [
            ("created", &self.created),
            ("admitted", &self.admitted),
            ("scheduled", &self.scheduled),
            ("workersRunning", &self.workers_running),
            ("launcherRunning", &self.launcher_running),
            ("firstLog", &self.first_log),
            ("finished", &self.finished),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
        .collect()
    }
}

/// The latest of `ts`, only when every one is known.
pub fn latest<S: AsRef<str>>(ts: impl IntoIterator<Item = Option<S>>) -> Option<String> {
    let mut out: Option<jiff::Timestamp> = None;
    for t in ts {
        let t = parse_time(t?.as_ref())?;
        out = Some(out.map_or(t, |o| o.max(t)));
    }
    out.map(|t| t.to_string())
}

/// The phases of a Kubernetes run from its job object's creation time and its pods;
/// `workers` is the run's size (all of them must be there for `scheduled`/`workersRunning`).
pub fn of_pods(created: Option<&str>, pods: &[Pod], workers: Option<usize>) -> Phases {
    let role = crate::cluster::status::role_of;
    let launchers: Vec<&Pod> = pods.iter().filter(|p| role(p) == ROLE_LAUNCHER).collect();
    let worker_pods: Vec<&Pod> = pods.iter().filter(|p| role(p) == ROLE_WORKER).collect();
    let enough_workers = worker_pods.len() >= workers.unwrap_or(1).max(1);
    let scheduled = |p: &Pod| -> Option<String> {
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "True")?;
        c.last_transition_time.as_ref().map(|t| t.0.to_string())
    };
    // Every container of the pod started: the latest start.
    let started = |p: &Pod| -> Option<String> {
        let cs = p.status.as_ref()?.container_statuses.as_ref()?;
        if cs.is_empty() {
            return None;
        }
        latest(cs.iter().map(|c| {
            let s = c.state.as_ref()?;
            s.running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
                .map(|t| t.0.to_string())
                .or_else(|| {
                    // A restarted container: its first instance's start.
                    let l = c.last_state.as_ref()?.terminated.as_ref()?;
                    l.started_at.as_ref().map(|t| t.0.to_string())
                })
        }))
    };
    let finished = |p: &Pod| -> Option<String> {
        let cs = p.status.as_ref()?.container_statuses.as_ref()?;
        latest(cs.iter().map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            t.finished_at.as_ref().map(|t| t.0.to_string())
        }))
    };
    let scheduled_all = (enough_workers && !launchers.is_empty())
        .then(|| latest(pods.iter().map(scheduled)))
        .flatten();
    let workers_running = enough_workers
        .then(|| latest(worker_pods.iter().map(|p| started(p))))
        .flatten();
    let launcher_running = launchers
        .iter()
        .filter_map(|p| started(p))
        .filter_map(|t| parse_time(&t))
        .min()
        .map(|t| t.to_string());
    let launcher_finished = (!launchers.is_empty())
        .then(|| latest(launchers.iter().map(|p| finished(p))))
        .flatten();
    Phases {
        created: created.and_then(normalize_time),
        // The queue's, read with the run's queue (`cluster::queue`).
        admitted: None,
        scheduled: scheduled_all,
        workers_running,
        launcher_running,
        first_log: None,
        finished: launcher_finished,
    }
}

/// How every line hvdctl's own launcher script (`launcher.sh`) writes begins. The training
/// command's output never comes from hvdctl, so `firstLog` skips these lines.
pub const OWN_LINE: &[u8] = b"hvdctl: ";

/// Lines of a launcher's log read for its first training line before giving up (launcher.sh
/// writes one line per worker before the command starts).
const FIRST_LINE_SCAN: usize = 10_000;

/// The training command's first line of one run, once found: `status --watch` reports every
/// second, and once the command has written, its first line stays the first. The run a
/// command holds owns one ([`crate::engine::kubernetes::KubeRun`],
/// [`crate::engine::docker::DockerRun`]).
#[derive(Default)]
pub struct FirstLog(std::sync::Mutex<Option<(String, String)>>);

impl FirstLog {
    /// [`first_log`] of the run `key` (engine, place, job and creation time: a run deployed
    /// again under its name is another key), read from the logs until it was found once.
    pub async fn of<S: LogSource>(
        &self,
        key: String,
        source: &S,
        targets: Vec<Target>,
    ) -> Option<String> {
        let found = self.0.lock().ok().and_then(|m| {
            m.as_ref()
                .filter(|(k, _)| *k == key)
                .map(|(_, t)| t.clone())
        });
        if found.is_some() {
            return found;
        }
        let t = first_log(source, targets).await?;
        if let Ok(mut m) = self.0.lock() {
            *m = Some((key, t.clone()));
        }
        Some(t)
    }
}

/// Whether a launcher's line (text after its timestamp) is the training command's: a rank's
/// line or the launcher program's own output, not one of `launcher.sh`'s [`OWN_LINE`]s.
pub fn is_training_line(text: &[u8]) -> bool {
    !text.starts_with(OWN_LINE)
}

/// The time of the training command's first line: the earliest, among the launchers of
/// `targets`, of the first line that is the command's ([`is_training_line`]). Workers' lines
/// are their sshd's and hvdctl's, never the command's (ranks write through the launcher), so
/// they are not read. `None` while the command has written nothing.
async fn first_log<S: LogSource>(source: &S, targets: Vec<Target>) -> Option<String> {
    use futures::AsyncBufReadExt;
    let reads = targets
        .into_iter()
        .filter(|t| t.role == ROLE_LAUNCHER)
        .map(|t| async move {
            let read = async {
                let mut stream = source.open(&t, &LogRequest::default()).await.ok()?;
                let mut line = Vec::with_capacity(256);
                for _ in 0..FIRST_LINE_SCAN {
                    line.clear();
                    if stream.read_until(b'\n', &mut line).await.ok()? == 0 {
                        return None;
                    }
                    let body = line.strip_suffix(b"\n").unwrap_or(&line);
                    let (ts, text) = crate::logs::tail::split_ts(body);
                    if is_training_line(text) {
                        return crate::logs::tail::parse_ts(ts);
                    }
                }
                None
            };
            tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .ok()
                .flatten()
        });
    let firsts = futures::future::join_all(reads).await;
    firsts
        .into_iter()
        .flatten()
        .filter_map(|ts| jiff::Timestamp::new(ts.secs, ts.nanos as i32).ok())
        .min()
        .map(|t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_created_to_first_log() {
        let p = Phases {
            created: Some("2026-01-01T00:00:00Z".into()),
            first_log: Some("2026-01-01T00:00:03.25Z".into()),
            ..Default::default()
        };
        assert_eq!(p.start_latency_seconds(), Some(3.25));
        assert_eq!(
            p.reached(),
            vec![
                ("created", "2026-01-01T00:00:00Z"),
                ("firstLog", "2026-01-01T00:00:03.25Z")
            ]
        );
        assert_eq!(Phases::default().start_latency_seconds(), None);
    }

    #[test]
    fn latest_needs_every_time() {
        assert_eq!(
            latest([Some("2026-01-01T00:00:01Z"), Some("2026-01-01T00:00:02Z")]),
            Some("2026-01-01T00:00:02Z".into())
        );
        assert_eq!(latest([Some("2026-01-01T00:00:01Z"), None]), None);
        assert_eq!(latest([Some("2026-01-01T00:00:01Z"), Some("")]), None);
    }
}
