//! Where a run stands: the job's state and conditions, and one row per pod.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::RunRef;
use crate::error::{Error, Result};
use crate::kinds::JobCondition;
use crate::render::manifests::LABEL_ROLE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use serde::Serialize;

/// The overall state of a run's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum JobState {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// The job object is gone, or the engine cannot tell.
    Unknown,
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

/// The run's state and conditions, as its backend reads them from its job object and pods;
/// `JobState::Unknown` when the job object is gone (half undeployed).
pub async fn observe(c: &Cluster, run: &RunRef) -> Result<(JobState, Vec<JobCondition>)> {
    let job = job_object(c, run).await?;
    let pods = run_pods(c, run).await?;
    Ok(state_of(run, job.as_ref(), &pods))
}

/// The run's job object (the backend's), or `None` when it is gone.
pub async fn job_object(c: &Cluster, run: &RunRef) -> Result<Option<DynamicObject>> {
    let (kind, name) = run.backend.job_object(&run.job);
    let api = super::apply::dynamic_api(c, &run.namespace, kind);
    match retry(ATTEMPTS, || api.get_opt(&name)).await {
        Ok(j) => Ok(j),
        Err(e) if status_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(c.error(
            &format!("get {} {name} in namespace {}", kind.kind, run.namespace),
            &e,
        )),
    }
}

/// The backend's reading of its job object and the run's pods.
pub fn state_of(
    run: &RunRef,
    job: Option<&DynamicObject>,
    pods: &[Pod],
) -> (JobState, Vec<JobCondition>) {
    let job = job.map(|j| serde_json::to_value(j).unwrap_or_default());
    run.backend.state(job.as_ref(), pods)
}

/// The job's state and its conditions (normalised to the MPIJob shape); an error when the
/// job object is gone.
pub async fn job_state(c: &Cluster, run: &RunRef) -> Result<(JobState, Vec<JobCondition>)> {
    let (state, conds) = observe(c, run).await?;
    if state == JobState::Unknown {
        let (kind, name) = run.backend.job_object(&run.job);
        return Err(Error::not_found(format!(
            "{} {name} is gone from namespace {}",
            kind.kind, run.namespace
        )));
    }
    Ok((state, conds))
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
