//! Where a run stands: the job's state and conditions, and one row per pod.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::RunRef;
use crate::app::Backend;
use crate::error::{Error, Result};
use crate::kinds::{JobCondition, MpiJob};
use crate::render::manifests::LABEL_ROLE;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// The overall state of a run's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum JobState {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl JobState {
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed)
    }
    /// Exit code for commands that wait for the end (0 succeeded, 1 failed).
    pub fn exit_code(self) -> u8 {
        if self == JobState::Failed { 1 } else { 0 }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

fn is_true(conds: &[JobCondition], t: &str) -> bool {
    conds.iter().any(|c| c.type_ == t && c.status == "True")
}

/// The job's state and its conditions (normalised to the MPIJob shape).
pub async fn job_state(c: &Cluster, run: &RunRef) -> Result<(JobState, Vec<JobCondition>)> {
    match run.backend {
        Backend::Mpijob => {
            let api: Api<MpiJob> = Api::namespaced(c.client.clone(), &run.namespace);
            let what = format!("get MPIJob {} in namespace {}", run.job, run.namespace);
            let m = retry(ATTEMPTS, || api.get_opt(&run.job))
                .await
                .map_err(|e| c.error(&what, &e))?;
            let m = m.ok_or_else(|| {
                Error::failure(format!(
                    "MPIJob {} is gone from namespace {}",
                    run.job, run.namespace
                ))
            })?;
            let conds = m.status.map(|s| s.conditions).unwrap_or_default();
            let state = if is_true(&conds, "Succeeded") {
                JobState::Succeeded
            } else if is_true(&conds, "Failed") {
                JobState::Failed
            } else if is_true(&conds, "Running") {
                JobState::Running
            } else {
                JobState::Pending
            };
            Ok((state, conds))
        }
        Backend::Local => Err(Error::input(format!(
            "run {} is a local (Docker) run, not a cluster run",
            run.run_id
        ))),
        Backend::Native => {
            let name = format!("{}-launcher", run.job);
            let api: Api<Job> = Api::namespaced(c.client.clone(), &run.namespace);
            let what = format!("get Job {name} in namespace {}", run.namespace);
            let j = match retry(ATTEMPTS, || api.get_opt(&name)).await {
                Ok(j) => j,
                Err(e) if status_code(&e) == Some(404) => None,
                Err(e) => return Err(c.error(&what, &e)),
            };
            let j = j.ok_or_else(|| {
                Error::failure(format!(
                    "Job {name} is gone from namespace {}",
                    run.namespace
                ))
            })?;
            let status = j.status.unwrap_or_default();
            let conds: Vec<JobCondition> = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .map(|c| JobCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    last_transition_time: c.last_transition_time.map(|t| t.0.to_string()),
                })
                .collect();
            let state = if is_true(&conds, "Complete") {
                JobState::Succeeded
            } else if is_true(&conds, "Failed") {
                JobState::Failed
            } else if status.active.unwrap_or(0) > 0 && launcher_running(c, run).await? {
                JobState::Running
            } else {
                JobState::Pending
            };
            Ok((state, conds))
        }
    }
}

async fn launcher_running(c: &Cluster, run: &RunRef) -> Result<bool> {
    let pods = run_pods(c, run).await?;
    Ok(pods.iter().any(|p| {
        role_of(p) == "launcher"
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    }))
}

/// Every pod of the run (hvdctl's labels are on every pod template, so operator-made pods
/// carry them too).
pub async fn run_pods(c: &Cluster, run: &RunRef) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(c.client.clone(), &run.namespace);
    let lp = ListParams::default().labels(&run.selector());
    let what = format!(
        "list the pods of run {} in namespace {}",
        run.run_id, run.namespace
    );
    let mut pods = retry(ATTEMPTS, || api.list(&lp))
        .await
        .map_err(|e| c.error(&what, &e))?
        .items;
    pods.sort_by_key(pod_sort_key);
    Ok(pods)
}

/// `launcher` or `worker`.
pub fn role_of(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ROLE))
        .map_or("", String::as_str)
}

/// A worker's index from its name (`<job>-worker-<i>`), if it has one.
pub fn worker_index(name: &str) -> Option<u32> {
    name.rsplit_once("-worker-")
        .and_then(|(_, i)| i.parse().ok())
}

fn pod_sort_key(p: &Pod) -> (u8, u32, String) {
    let name = p.metadata.name.clone().unwrap_or_default();
    let role = if role_of(p) == "launcher" { 0 } else { 1 };
    (role, worker_index(&name).unwrap_or(u32::MAX), name)
}
