//! Where a queued run stands in its queue: Kueue's Workload (admitted or not, why, its
//! ClusterQueue and position) or Volcano's PodGroup (its phase and Unschedulable message).
//! A run's job object says which queue it went to (`hvdctl.io/queue`, stamped at render by
//! its backend); runs without it cost nothing here.
//!
//! Read from Kueue v0.19.2:
//! - the Workload of a job is labelled `kueue.x-k8s.io/job-uid` (`pkg/controller/constants`);
//!   a pod group's Workload is named after the group (`pkg/controller/jobs/pod`);
//! - admitted = condition `Admitted` True; not admitted = `QuotaReserved` False with reason
//!   `Pending` (waits for quota) or `Inadmissible` (`LocalQueue <q> doesn't exist`: nothing
//!   will admit it) — the granular reasons (`Misconfigured`, ...) of the
//!   `UnadmittedWorkloadsObservability` gate are read the same way
//!   (`pkg/controller/core/workload_controller.go`, `pkg/scheduler/scheduler.go`);
//! - positions from the visibility API's `pendingworkloads` of the LocalQueue, 0-based
//!   (`pkg/visibility/storage`): shown 1-based, in the ClusterQueue (the order admission
//!   follows).
//!
//! Read from Volcano v1.15.1: PodGroup `status.phase` (`Pending` until the queue takes the
//! group: `Inqueue`, `Running`, `Completed`) and the `Unschedulable` condition's message
//! (`pkg/scheduler/plugins/gang/gang.go`).

use super::client::{ATTEMPTS, Cluster, retry};
use super::runs::RunRef;
use crate::backend::KueueWorkload;
use crate::backend::queue::{self, System, kinds};
use crate::error::Result;
use crate::kinds::JobCondition;
use kube::api::{DynamicObject, ListParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The condition type hvdctl adds to a queued run's conditions.
pub const CONDITION: &str = "Queued";

/// Reasons of a queued run that no waiting fixes.
const FAILING: &[&str] = &["Inadmissible", "Misconfigured", NOT_INSTALLED];
/// hvdctl's reason when the queue system is not there at all.
const NOT_INSTALLED: &str = "QueueSystemMissing";

/// What `status -o json` and `runs -o json` say about a run's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queue {
    pub system: System,
    /// The LocalQueue (Kueue) or the Volcano queue.
    pub name: String,
    /// Kueue's ClusterQueue behind the LocalQueue (null when unknown, and for Volcano).
    pub cluster_queue: Option<String>,
    /// 1-based place among the ClusterQueue's pending Workloads (null when admitted or
    /// unknown).
    pub position: Option<u32>,
}

impl Queue {
    /// `Kueue: LocalQueue team-a → ClusterQueue gpu; position 1`.
    pub fn describe(&self) -> String {
        match self.system {
            System::Kueue => {
                let mut s = format!("Kueue: LocalQueue {}", self.name);
                if let Some(cq) = &self.cluster_queue {
                    s.push_str(&format!(" → ClusterQueue {cq}"));
                }
                if let Some(p) = self.position {
                    s.push_str(&format!("; position {p}"));
                }
                s
            }
            System::Volcano => format!("Volcano: queue {}", self.name),
        }
    }
}

/// A run's reading of its queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub queue: Queue,
    pub admitted: bool,
    /// When the queue admitted it (the queue system's own timestamp).
    pub admitted_at: Option<String>,
    /// Why it is not admitted: (reason, message).
    pub waiting: Option<(String, String)>,
}

impl Reading {
    /// The condition a queued run carries.
    pub fn condition(&self) -> Option<JobCondition> {
        let (reason, message) = self.waiting.clone()?;
        Some(JobCondition {
            type_: CONDITION.into(),
            status: "True".into(),
            reason: Some(reason),
            message: Some(message),
            last_transition_time: None,
        })
    }
}

/// The message of a queued run that no waiting fixes, from its conditions.
pub fn failure(conds: &[JobCondition]) -> Option<String> {
    conds
        .iter()
        .find(|c| c.type_ == CONDITION && c.reason.as_deref().is_some_and(|r| FAILING.contains(&r)))
        .map(|c| c.message.clone().unwrap_or_default())
}

/// The queue a run's job object names, if any.
pub fn named(job: Option<&DynamicObject>) -> Option<(System, String)> {
    let v = job?
        .metadata
        .annotations
        .as_ref()?
        .get(queue::ANNOTATION_QUEUE)?;
    queue::parse_annotation(v)
}

/// Reads the run's queue, when its job object names one.
pub async fn read(
    c: &Cluster,
    run: &RunRef,
    job: Option<&DynamicObject>,
) -> Result<Option<Reading>> {
    let (Some(job), Some((system, name))) = (job, named(job)) else {
        return Ok(None);
    };
    Ok(Some(match system {
        System::Kueue => kueue(c, run, job, name).await?,
        System::Volcano => volcano(c, run, name).await?,
    }))
}

fn cond<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn text(v: Option<&Value>, key: &str) -> Option<String> {
    v?.get(key)?.as_str().map(String::from)
}

async fn kueue(c: &Cluster, run: &RunRef, job: &DynamicObject, lq: String) -> Result<Reading> {
    let mut reading = Reading {
        queue: Queue {
            system: System::Kueue,
            name: lq.clone(),
            cluster_queue: None,
            position: None,
        },
        admitted: false,
        admitted_at: None,
        waiting: None,
    };
    if !c.serves(kinds::WORKLOAD).await? {
        reading.waiting = Some((
            NOT_INSTALLED.into(),
            format!(
                "Kueue is not installed in context `{}` ({} is not served): nothing will admit the job, which waits suspended for LocalQueue {lq}",
                c.context,
                kinds::WORKLOAD
            ),
        ));
        return Ok(reading);
    }
    let api = super::apply::dynamic_api(c, &run.namespace, kinds::WORKLOAD);
    let wl = match run.backend.kueue_workload(&run.job) {
        KueueWorkload::Named(n) => match retry(ATTEMPTS, || api.get_opt(&n)).await {
            Ok(w) => w,
            Err(e) => return Err(c.error(&format!("get Workload {n}"), &e)),
        },
        KueueWorkload::OfJobObject => {
            let uid = job.metadata.uid.clone().unwrap_or_default();
            let lp = ListParams::default().labels(&format!("{}={uid}", queue::KUEUE_JOB_UID_LABEL));
            match retry(ATTEMPTS, || api.list(&lp)).await {
                Ok(l) => l.items.into_iter().next(),
                Err(e) => {
                    return Err(c.error(
                        &format!(
                            "list the Workloads of {} in namespace {}",
                            run.job, run.namespace
                        ),
                        &e,
                    ));
                }
            }
        }
    };
    let Some(wl) = wl else {
        reading.waiting = Some((
            "NoWorkload".into(),
            format!(
                "waiting for Kueue to make the Workload of {} (LocalQueue {lq})",
                run.job
            ),
        ));
        reading.queue.cluster_queue = cluster_queue_of(c, &run.namespace, &lq).await;
        return Ok(reading);
    };
    let wl_name = wl.metadata.name.clone().unwrap_or_default();
    let v = serde_json::to_value(&wl).unwrap_or_default();
    let admitted = cond(&v, "Admitted").filter(|c| c["status"] == "True");
    if let Some(a) = admitted {
        reading.admitted = true;
        reading.admitted_at =
            text(Some(a), "lastTransitionTime").and_then(|t| crate::text::normalize_time(&t));
        reading.queue.cluster_queue = v
            .pointer("/status/admission/clusterQueue")
            .and_then(Value::as_str)
            .map(String::from);
        return Ok(reading);
    }
    let qr = cond(&v, "QuotaReserved").filter(|c| c["status"] == "False");
    reading.waiting = Some(match qr {
        Some(q) => (
            text(Some(q), "reason").unwrap_or_else(|| "Pending".into()),
            text(Some(q), "message").unwrap_or_default(),
        ),
        None => (
            "Pending".into(),
            format!("Workload {wl_name} waits for Kueue's scheduler (LocalQueue {lq})"),
        ),
    });
    let inadmissible = reading
        .waiting
        .as_ref()
        .is_some_and(|(r, _)| FAILING.contains(&r.as_str()));
    if !inadmissible {
        reading.queue.cluster_queue = cluster_queue_of(c, &run.namespace, &lq).await;
        reading.queue.position = position(c, &run.namespace, &lq, &wl_name).await;
    }
    Ok(reading)
}

/// The LocalQueue's ClusterQueue (`spec.clusterQueue`), or `None` when it cannot be read.
async fn cluster_queue_of(c: &Cluster, namespace: &str, lq: &str) -> Option<String> {
    let api = super::apply::dynamic_api(c, namespace, kinds::LOCAL_QUEUE);
    let o = retry(ATTEMPTS, || api.get_opt(lq)).await.ok()??;
    o.data
        .pointer("/spec/clusterQueue")
        .and_then(Value::as_str)
        .map(String::from)
}

/// The Workload's 1-based place in its ClusterQueue from Kueue's visibility API, or `None`
/// when the API does not answer (not served, forbidden, not listed).
async fn position(c: &Cluster, namespace: &str, lq: &str, workload: &str) -> Option<u32> {
    let path = format!(
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{lq}/pendingworkloads"
    );
    let req = http::Request::get(&path).body(Vec::new()).ok()?;
    // Unknown to an older Kueue, not allowed, or not answering: no position, no failure.
    let summary: Value = c.client.request::<Value>(req).await.ok()?;
    position_in(&summary, workload)
}

/// The 1-based `positionInClusterQueue` of `workload` in a `PendingWorkloadsSummary`.
pub fn position_in(summary: &Value, workload: &str) -> Option<u32> {
    summary["items"]
        .as_array()?
        .iter()
        .find(|i| i.pointer("/metadata/name").and_then(Value::as_str) == Some(workload))?
        .get("positionInClusterQueue")?
        .as_u64()
        .map(|p| p as u32 + 1)
}

async fn volcano(c: &Cluster, run: &RunRef, name: String) -> Result<Reading> {
    let mut reading = Reading {
        queue: Queue {
            system: System::Volcano,
            name: name.clone(),
            cluster_queue: None,
            position: None,
        },
        admitted: false,
        admitted_at: None,
        waiting: None,
    };
    if !c.serves(kinds::POD_GROUP).await? {
        reading.waiting = Some((
            NOT_INSTALLED.into(),
            format!(
                "Volcano is not installed in context `{}` ({} is not served): no scheduler will place the run's pods",
                c.context,
                kinds::POD_GROUP
            ),
        ));
        return Ok(reading);
    }
    let api = super::apply::dynamic_api(c, &run.namespace, kinds::POD_GROUP);
    let pg = match retry(ATTEMPTS, || api.get_opt(&run.job)).await {
        Ok(p) => p,
        Err(e) => return Err(c.error(&format!("get PodGroup {}", run.job), &e)),
    };
    let Some(pg) = pg else {
        reading.waiting = Some((
            "NoPodGroup".into(),
            format!(
                "waiting for the PodGroup {} (Volcano queue {name})",
                run.job
            ),
        ));
        return Ok(reading);
    };
    let v = serde_json::to_value(&pg).unwrap_or_default();
    Ok(of_pod_group(reading, &v))
}

/// A PodGroup's phase and conditions read into `reading`.
pub fn of_pod_group(mut reading: Reading, pg: &Value) -> Reading {
    let phase = pg
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    if phase != "Pending" {
        reading.admitted = true;
        reading.admitted_at = text(
            cond(pg, "Scheduled").filter(|c| c["status"] == "True"),
            "lastTransitionTime",
        )
        .and_then(|t| crate::text::normalize_time(&t));
        return reading;
    }
    let unschedulable = cond(pg, "Unschedulable").filter(|c| c["status"] == "True");
    let name = pg
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    reading.waiting = Some(match unschedulable {
        Some(u) => (
            text(Some(u), "reason").unwrap_or_else(|| "Unschedulable".into()),
            text(Some(u), "message").unwrap_or_default(),
        ),
        None => (
            "Pending".into(),
            format!(
                "PodGroup {name} is Pending in Volcano queue {}",
                reading.queue.name
            ),
        ),
    });
    reading
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn volcano_reading() -> Reading {
        Reading {
            queue: Queue {
                system: System::Volcano,
                name: "default".into(),
                cluster_queue: None,
                position: None,
            },
            admitted: false,
            admitted_at: None,
            waiting: None,
        }
    }

    #[test]
    fn positions_are_shown_one_based_in_the_cluster_queue() {
        let s = json!({"kind": "PendingWorkloadsSummary", "items": [
            {"metadata": {"name": "a"}, "positionInClusterQueue": 0, "positionInLocalQueue": 0},
            {"metadata": {"name": "b"}, "positionInClusterQueue": 2, "positionInLocalQueue": 1},
        ]});
        assert_eq!(position_in(&s, "a"), Some(1));
        assert_eq!(position_in(&s, "b"), Some(3));
        assert_eq!(position_in(&s, "c"), None);
        assert_eq!(position_in(&json!({}), "a"), None);
    }

    #[test]
    fn a_pending_pod_group_says_why_and_an_inqueue_one_is_admitted() {
        let pending = json!({"metadata": {"name": "j"}, "status": {"phase": "Pending", "conditions": [
            {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
             "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; Pending: 3 Unschedulable"}]}});
        let r = of_pod_group(volcano_reading(), &pending);
        assert!(!r.admitted);
        let c = r.condition().unwrap();
        assert_eq!(c.reason.as_deref(), Some("NotEnoughResources"));
        assert!(
            c.message
                .unwrap()
                .starts_with("3/3 tasks in gang unschedulable")
        );
        let inqueue = json!({"metadata": {"name": "j"}, "status": {"phase": "Inqueue", "conditions": [
            {"type": "Scheduled", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"}]}});
        let r = of_pod_group(volcano_reading(), &inqueue);
        assert!(r.admitted);
        assert_eq!(r.admitted_at.as_deref(), Some("2026-11-25T10:00:00Z"));
        assert!(r.condition().is_none());
    }

    #[test]
    fn inadmissible_is_a_failure_and_pending_is_not() {
        let c = |reason: &str| JobCondition {
            type_: CONDITION.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some("LocalQueue team-x doesn't exist".into()),
            last_transition_time: None,
        };
        assert_eq!(
            failure(&[c("Inadmissible")]).as_deref(),
            Some("LocalQueue team-x doesn't exist")
        );
        assert_eq!(failure(&[c("Pending")]), None);
    }

    #[test]
    fn the_text_names_both_queues_and_the_position() {
        let q = Queue {
            system: System::Kueue,
            name: "team-a".into(),
            cluster_queue: Some("gpu".into()),
            position: Some(1),
        };
        assert_eq!(
            q.describe(),
            "Kueue: LocalQueue team-a → ClusterQueue gpu; position 1"
        );
    }
}
