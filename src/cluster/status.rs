//! Where a run stands: the job's state and conditions, and one row per pod.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::RunRef;
use crate::error::{Error, Result};
use crate::kinds::JobCondition;
use crate::render::manifests::LABEL_ROLE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};

pub use crate::types::JobState;

/// The run's state and conditions, as its backend reads them from its job object and pods
/// (and its queue: [`queued`]); `JobState::Unknown` when the job object is gone (half
/// undeployed).
pub async fn observe(c: &Cluster, run: &RunRef) -> Result<(JobState, Vec<JobCondition>)> {
    let job = job_object(c, run).await?;
    let pods = run_pods(c, run).await?;
    let (state, conds) = state_of(run, job.as_ref(), &pods)?;
    let (state, conds, _) = queued(c, run, job.as_ref(), state, conds).await?;
    Ok((state, conds))
}

/// A run its backend calls Pending is `Queued` while its queue (Kueue's Workload, Volcano's
/// PodGroup) has not admitted it; its conditions then end with the queue's `Queued`
/// condition (the reason and message why). Runs that name no queue are read as they are.
pub async fn queued(
    c: &Cluster,
    run: &RunRef,
    job: Option<&DynamicObject>,
    state: JobState,
    mut conds: Vec<JobCondition>,
) -> Result<(JobState, Vec<JobCondition>, Option<super::queue::Reading>)> {
    if super::queue::named(job).is_none() {
        return Ok((state, conds, None));
    }
    let reading = super::queue::read(c, run, job).await?;
    let mut state = state;
    if let Some(r) = &reading
        && !r.admitted
        && state == JobState::Pending
    {
        state = JobState::Queued;
        conds.extend(r.condition());
    }
    Ok((state, conds, reading))
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
) -> Result<(JobState, Vec<JobCondition>)> {
    let job = match job.map(serde_json::to_value).transpose() {
        Ok(j) => j,
        Err(e) => {
            return Err(Error::failure(format!(
                "the job object of {} cannot be read: {e}",
                run.job
            )));
        }
    };
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
    let id = run.backend.identity();
    pods.sort_by_cached_key(|p| {
        let r = id.role(p.metadata.labels.as_ref());
        let name = p.metadata.name.clone().unwrap_or_default();
        (
            u8::from(!r.is_launcher()),
            r.index.unwrap_or(u32::MAX),
            name,
        )
    });
    Ok(pods)
}

/// `launcher` or `worker`: hvdctl's role label, stamped on every pod template (so on pods
/// operators make too). The worker index is the backend's to read: [`role`].
pub fn role_of(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ROLE))
        .map_or("", String::as_str)
}

/// The pod's role and worker index, read from its labels as the run's backend says.
pub fn role(run: &RunRef, p: &Pod) -> crate::types::Role {
    run.backend.identity().role(p.metadata.labels.as_ref())
}

/// The elastic bounds on the launcher pod's command line, if the run is elastic (and its
/// launcher exists).
pub fn elastic_bounds<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Option<crate::types::Bounds> {
    pods.into_iter()
        .filter(|p| role_of(p) == crate::types::ROLE_LAUNCHER)
        .find_map(|p| {
            let c = p.spec.as_ref()?.containers.first()?;
            let mut argv = c.command.clone().unwrap_or_default();
            argv.extend(c.args.clone().unwrap_or_default());
            crate::types::elastic_bounds(&argv)
        })
}
