//! Events of a run: those whose involved object is one of the run's objects or pods (by uid,
//! or by kind and name for objects made by the operator on the run's behalf).

use super::client::{ATTEMPTS, Cluster, retry};
use super::runs::RunRef;
use super::undeploy;
use crate::error::Result;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde::Serialize;
use std::collections::BTreeSet;

/// One event, flattened for printing.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunEvent {
    /// RFC 3339: last seen (or event time, or first seen).
    pub time: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// `Kind/name`.
    pub object: String,
    pub message: String,
    pub count: i32,
    #[serde(skip, default)]
    pub uid: String,
}

/// The (kind, name) pairs that belong to a run: its labelled objects and the operator's
/// objects named after the job.
pub async fn run_objects(c: &Cluster, run: &RunRef) -> Result<BTreeSet<(String, String)>> {
    let mut set: BTreeSet<(String, String)> = undeploy::find(c, &run.namespace, &run.selector())
        .await?
        .into_iter()
        .map(|d| (d.kind.to_string(), d.name))
        .collect();
    if let Some(op) = run.backend.operator_selector(&run.job) {
        for d in undeploy::find(c, &run.namespace, &op).await? {
            set.insert((d.kind.to_string(), d.name));
        }
    }
    // The job object even once it is gone (its events outlive it).
    let (kind, name) = run.backend.job_object(&run.job);
    set.insert((kind.kind.into(), name));
    Ok(set)
}

pub fn flatten(e: &Event) -> RunEvent {
    let time = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .unwrap_or_default();
    let io = &e.involved_object;
    RunEvent {
        time,
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        object: format!(
            "{}/{}",
            io.kind.clone().unwrap_or_default(),
            io.name.clone().unwrap_or_default()
        ),
        message: e.message.clone().unwrap_or_default(),
        count: e.count.unwrap_or(1),
        uid: e.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Whether an event concerns one of `objects`.
pub fn concerns(e: &Event, objects: &BTreeSet<(String, String)>) -> bool {
    let io = &e.involved_object;
    match (&io.kind, &io.name) {
        (Some(k), Some(n)) => objects.contains(&(k.clone(), n.clone())),
        _ => false,
    }
}

/// The run's events now, oldest first.
pub async fn list(c: &Cluster, run: &RunRef) -> Result<Vec<RunEvent>> {
    let objects = run_objects(c, run).await?;
    let api: Api<Event> = Api::namespaced(c.client.clone(), &run.namespace);
    let what = format!("list events in namespace {}", run.namespace);
    let lp = ListParams::default();
    let all = retry(ATTEMPTS, || api.list(&lp))
        .await
        .map_err(|e| c.error(&what, &e))?;
    let mut out: Vec<RunEvent> = all
        .items
        .iter()
        .filter(|e| concerns(e, &objects))
        .map(flatten)
        .collect();
    out.sort_by(|a, b| a.time.cmp(&b.time));
    Ok(out)
}

/// Prints the run's events as they come (`events -f`) until Ctrl-C. kube's watcher resumes a
/// dropped watch and relists an expired one (with backoff), so a broken connection does not
/// end it; events already printed are not printed again.
pub async fn follow(
    c: &Cluster,
    run: &RunRef,
    seen: &mut std::collections::HashSet<(String, i32)>,
    print: &mut dyn FnMut(&RunEvent),
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::{WatchStreamExt, watcher};
    let api: Api<Event> = Api::namespaced(c.client.clone(), &run.namespace);
    let mut objects = run_objects(c, run).await?;
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    let prefix = format!("{}-", run.job);
    loop {
        let e = match stream.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return Ok(()),
            Err(watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k))
                if !super::client::is_transient(&k) =>
            {
                return Err(c.error(&format!("watch events in namespace {}", run.namespace), &k));
            }
            // Transient: the backoff above has waited; the watcher resumes.
            Err(_) => continue,
        };
        if !concerns(&e, &objects) {
            // A pod created since we looked (late workers, restarted launcher)?
            let name = e.involved_object.name.clone().unwrap_or_default();
            if !name.starts_with(&prefix) {
                continue;
            }
            objects = run_objects(c, run).await?;
            if !concerns(&e, &objects) {
                continue;
            }
        }
        let f = flatten(&e);
        if seen.insert((f.uid.clone(), f.count)) {
            print(&f);
        }
    }
}
