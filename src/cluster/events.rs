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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    #[serde(skip)]
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
    let op = format!("training.kubeflow.org/job-name={}", run.job);
    for d in undeploy::find(c, &run.namespace, &op).await? {
        set.insert((d.kind.to_string(), d.name));
    }
    // The operator's launcher Job and service are named after the job.
    set.insert(("MPIJob".into(), run.job.clone()));
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
