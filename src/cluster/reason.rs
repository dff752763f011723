//! Why a Kubernetes run is where it is: facts read from its pods (scheduler conditions,
//! container states, memory limits) and the containers' last log lines, worded by
//! [`crate::reason`]. One line for the run and one per pod that has something to say.

use super::Cluster;
use super::status::{JobState, role_of};
use crate::fit;
use crate::logs::rank::TagForms;
use crate::reason::{self, Reason};
use crate::types::{JobCondition, ROLE_LAUNCHER, ROLE_WORKER};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};
use kube::api::{Api, LogParams};
use std::collections::BTreeMap;

/// What one pod says, before its last log lines are read.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    pub kind: Kind,
    pub text: String,
    /// Read the last lines of this container (`previous` instance or not) and append them.
    pub lines_of: Option<(String, bool)>,
    /// The run cannot succeed because of it.
    pub failing: bool,
    /// When the container ended (RFC 3339), to find the first rank that failed.
    pub finished_at: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The pod waits, and its newest Warning event says why (FailedMount,
    /// FailedAttachVolume, FailedCreatePodSandBox, FailedScheduling).
    Event,
    Unschedulable,
    ImagePull,
    OomKilled,
    CrashLoop,
    Failed,
}

/// A run's reasons: the run's line and each pod's, by pod name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Explained {
    pub run: Option<Reason>,
    pub pods: BTreeMap<String, String>,
}

/// Restarts after which a crash-looping container fails the run.
pub const CRASH_LOOP_FAILING: i32 = 3;

const IMAGE_PULL: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// What `p` says, if anything is wrong with it (`elastic`: a worker that ended is lost, the
/// run goes on).
pub fn fact(p: &Pod, elastic: bool) -> Option<Fact> {
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let status = p.status.as_ref()?;
    let worker = role_of(p) == ROLE_WORKER;
    if let Some(c) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        let message = c.message.as_deref().unwrap_or("no node can run it");
        return Some(Fact {
            kind: Kind::Unschedulable,
            text: format!("Pending: {message}"),
            lines_of: None,
            // A claim's problem fails the run only when nothing will make the claim
            // (`missing_for_good` decides, asking the API).
            failing: !about_claims(message),
            finished_at: None,
        });
    }
    let limit = |container: &str| -> Option<String> {
        p.spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| c.name == container)?
            .resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("memory")
            .map(|q| q.0.clone())
    };
    let ended = |t: &ContainerStateTerminated| t.finished_at.as_ref().map(|f| f.0.to_string());
    for cs in status.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        let now_term = state.and_then(|s| s.terminated.as_ref());
        let last_term = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let waiting = state.and_then(|s| s.waiting.as_ref());
        if let Some(t) = now_term
            .into_iter()
            .chain(last_term)
            .find(|t| t.reason.as_deref() == Some("OOMKilled"))
        {
            return Some(Fact {
                kind: Kind::OomKilled,
                text: reason::oom(
                    name,
                    &cs.name,
                    limit(&cs.name).as_deref(),
                    i64::from(t.exit_code),
                ),
                lines_of: None,
                failing: !(elastic && worker && now_term.is_some()),
                finished_at: ended(t),
            });
        }
        if let Some(w) = waiting
            && let Some(r) = w.reason.as_deref()
        {
            if IMAGE_PULL.contains(&r) {
                return Some(Fact {
                    kind: Kind::ImagePull,
                    text: reason::image_pull(
                        r,
                        &cs.image,
                        &cs.name,
                        w.message.as_deref().unwrap_or(""),
                    ),
                    lines_of: None,
                    failing: true,
                    finished_at: None,
                });
            }
            if r == "CrashLoopBackOff" {
                let exit = last_term.map_or(0, |t| i64::from(t.exit_code));
                return Some(Fact {
                    kind: Kind::CrashLoop,
                    text: reason::crash_loop(&cs.name, exit, i64::from(cs.restart_count), ""),
                    lines_of: Some((cs.name.clone(), true)),
                    // A container may crash once or twice and recover (a worker started
                    // before its peers); a third restart is a loop.
                    failing: cs.restart_count >= CRASH_LOOP_FAILING,
                    finished_at: last_term.and_then(ended),
                });
            }
        }
        if let Some(t) = now_term
            && t.exit_code != 0
        {
            return Some(Fact {
                kind: Kind::Failed,
                text: reason::failed(&cs.name, i64::from(t.exit_code), ""),
                lines_of: Some((cs.name.clone(), false)),
                // A launcher's Job may retry it; the job's state says when it is over.
                failing: worker && !elastic,
                finished_at: ended(t),
            });
        }
    }
    None
}

/// Whether the pod's `Ready` condition is true.
fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the scheduler keeps a pod off every node because of its claims (one missing,
/// or not bound yet: a provisioner's or an administrator's business, not room on a node).
fn about_claims(message: &str) -> bool {
    message.contains("unbound immediate PersistentVolumeClaims")
        || missing_object(message).is_some_and(|(k, _)| k == "persistentvolumeclaim")
}

/// Seconds a pod may wait before its events are asked why.
pub const STUCK_AFTER_SECONDS: i64 = 2;

/// Whether `p` has waited more than [`STUCK_AFTER_SECONDS`] without running: not scheduled,
/// or a container still waiting to be created (volumes, sandbox). Image pulls and crash
/// loops say why through their container states, not here.
pub fn stuck(p: &Pod) -> bool {
    let Some(status) = p.status.as_ref() else {
        return false;
    };
    if status.phase.as_deref() != Some("Pending") || p.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let creating = status.container_statuses.as_ref().is_none_or(|cs| {
        cs.iter().all(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref())
                .is_none_or(|r| matches!(r, "ContainerCreating" | "PodInitializing"))
        })
    });
    let age = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| jiff::Timestamp::now().as_second() - t.0.as_second());
    creating && age.is_some_and(|a| a >= STUCK_AFTER_SECONDS)
}

/// The object an event's message says does not exist: `secret "x" not found` (the
/// kubelet's FailedMount), `configmap "x"`, `persistentvolumeclaim "x"` (the scheduler's
/// FailedScheduling, or a mount).
pub fn missing_object(message: &str) -> Option<(&'static str, String)> {
    for kind in ["secret", "configmap", "persistentvolumeclaim"] {
        let start = format!("{kind} \"");
        let mut rest = message;
        while let Some(i) = rest.find(&start) {
            let after = &rest[i + start.len()..];
            if let Some(end) = after.find('"')
                && after[end + 1..].trim_start().starts_with("not found")
            {
                return Some((kind, after[..end].to_string()));
            }
            rest = after;
        }
    }
    None
}

/// Whether the Secret, ConfigMap or PersistentVolumeClaim `name` exists in `namespace`
/// (None: it could not be asked).
pub async fn object_exists(c: &Cluster, namespace: &str, kind: &str, name: &str) -> Option<bool> {
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
    let client = c.client.clone();
    let r = match kind {
        "secret" => Api::<Secret>::namespaced(client, namespace)
            .get_metadata_opt(name)
            .await
            .map(|o| o.is_some()),
        "configmap" => Api::<ConfigMap>::namespaced(client, namespace)
            .get_metadata_opt(name)
            .await
            .map(|o| o.is_some()),
        _ => Api::<PersistentVolumeClaim>::namespaced(client, namespace)
            .get_metadata_opt(name)
            .await
            .map(|o| o.is_some()),
    };
    r.ok()
}

/// The newest Warning event of each stuck pod (by uid) among `pods`, as a fact. One list of
/// the namespace's Warning events for all of them; unreadable, nothing is said.
async fn stuck_facts<'p>(c: &Cluster, namespace: &str, pods: &[&'p Pod]) -> Vec<(&'p Pod, Fact)> {
    use k8s_openapi::api::core::v1::Event;
    if pods.is_empty() {
        return Vec::new();
    }
    let api: Api<Event> = Api::namespaced(c.client.clone(), namespace);
    let lp = kube::api::ListParams::default().fields("type=Warning,involvedObject.kind=Pod");
    let Ok(list) = api.list(&lp).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in pods {
        let uid = p.metadata.uid.as_deref();
        let name = p.metadata.name.as_deref();
        let newest = list
            .items
            .iter()
            .filter(|e| {
                let io = &e.involved_object;
                io.name.as_deref() == name && (io.uid.is_none() || io.uid.as_deref() == uid)
            })
            .max_by_key(|e| super::events::flatten(e).time);
        if let Some(e) = newest {
            out.push((
                *p,
                Fact {
                    kind: Kind::Event,
                    text: reason::event(
                        e.reason.as_deref().unwrap_or("Warning"),
                        e.message.as_deref().unwrap_or(""),
                    ),
                    lines_of: None,
                    failing: false,
                    finished_at: None,
                },
            ));
        }
    }
    out
}

/// A fact naming a Secret, ConfigMap or claim that does not exist fails the run, unless the
/// run itself makes it (its own objects, and an operator's, are named `<job>-…`; they may
/// not be there yet).
async fn missing_for_good(c: &Cluster, namespace: &str, job: &str, facts: &mut [(&Pod, Fact)]) {
    let own = format!("{job}-");
    for (_, f) in facts
        .iter_mut()
        .filter(|(_, f)| matches!(f.kind, Kind::Event | Kind::Unschedulable))
    {
        let Some((kind, name)) = missing_object(&f.text) else {
            continue;
        };
        if name.starts_with(&own) {
            continue;
        }
        if object_exists(c, namespace, kind, &name).await == Some(false) {
            f.failing = true;
            f.text.push_str(&reason::nothing_creates(kind, &name));
        }
    }
}

/// Whether any pod of the run says the run cannot succeed (no API call: what `logs -f`
/// checks on each change before it asks for the whole explanation).
pub fn any_failing<'a>(pods: impl IntoIterator<Item = &'a Pod>, elastic: bool) -> bool {
    pods.into_iter()
        .any(|p| fact(p, elastic).is_some_and(|f| f.failing))
}

/// The first rank that failed, from the end of the launcher pod's log (its MPI's summary
/// and the rank's tagged lines).
async fn launcher_rank(api: &Api<Pod>, launcher: &Pod) -> Option<String> {
    let labels = launcher.metadata.labels.as_ref();
    let forms = TagForms::of_labels(ROLE_LAUNCHER, |k| labels?.get(k).map(String::as_str));
    let name = launcher.metadata.name.clone()?;
    let container = launcher.spec.as_ref()?.containers.first()?.name.clone();
    let lp = LogParams {
        container: Some(container),
        tail_lines: Some(RANK_LOG_LINES),
        ..Default::default()
    };
    let log = api.logs(&name, &lp).await.ok()?;
    reason::launcher_log_cause(&log, forms)
}

/// An unschedulable pod that some node could hold once pods there end is waiting, not
/// failing (a shared cluster's queue); one that no node could hold even empty fails. The
/// nodes are read once, only when a pod is unschedulable; unreadable, it counts as failing.
async fn waiting_for_room(c: &Cluster, facts: &mut [(&Pod, Fact)]) {
    if !facts.iter().any(|(_, f)| f.kind == Kind::Unschedulable) {
        return;
    }
    let Ok(nodes) = super::nodes(c).await else {
        return;
    };
    for (p, f) in facts
        .iter_mut()
        .filter(|(_, f)| f.kind == Kind::Unschedulable)
    {
        if about_claims(&f.text) {
            // Room on a node does not help: the claim does (see `missing_for_good`).
            continue;
        }
        let shape = fit::Shape::of_pod(p);
        let room = nodes
            .iter()
            .filter(|n| fit::misfit(n, &shape).is_none())
            .count();
        if room > 0 {
            f.failing = false;
            f.text
                .push_str(&reason::waiting_for_room(room, nodes.len()));
        }
    }
}

/// Lines from the end of the launcher's log searched for the MPI's summary.
pub const RANK_LOG_LINES: i64 = 200;

/// The reasons of `run` as they are now (its job object and pods read again).
pub async fn of_run(c: &Cluster, run: &super::runs::RunRef) -> crate::error::Result<Explained> {
    let job = super::status::job_object(c, run).await?;
    let pods = super::status::run_pods(c, run).await?;
    let (state, conditions) = super::status::state_of(run, job.as_ref(), &pods)?;
    let (state, conditions, _) =
        super::status::queued(c, run, job.as_ref(), state, conditions).await?;
    let elastic = super::status::elastic_bounds(&pods).is_some();
    Ok(explain(
        c,
        &run.namespace,
        &run.job,
        state,
        &conditions,
        &pods,
        elastic,
    )
    .await)
}

/// The run's reasons from its state, conditions and pods; the last lines of failed or
/// crash-looping containers are read from the pod log API (at most 8 pods, at once; a log
/// that cannot be read just adds nothing).
pub async fn explain(
    c: &Cluster,
    namespace: &str,
    job: &str,
    state: JobState,
    conditions: &[JobCondition],
    pods: &[Pod],
    elastic: bool,
) -> Explained {
    let mut facts: Vec<(&Pod, Fact)> = pods
        .iter()
        .filter_map(|p| fact(p, elastic).map(|f| (p, f)))
        .collect();
    waiting_for_room(c, &mut facts).await;
    let quiet: Vec<&Pod> = pods
        .iter()
        .filter(|p| stuck(p) && !facts.iter().any(|(q, _)| q.metadata.uid == p.metadata.uid))
        .collect();
    facts.extend(stuck_facts(c, namespace, &quiet).await);
    missing_for_good(c, namespace, job, &mut facts).await;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), namespace);
    let texts = join_all(facts.iter().enumerate().map(|(i, (p, f))| {
        let api = api.clone();
        async move {
            let Some((container, previous)) = f.lines_of.clone().filter(|_| i < 8) else {
                return f.text.clone();
            };
            let name = p.metadata.name.clone().unwrap_or_default();
            let lp = |previous: bool| LogParams {
                container: Some(container.clone()),
                previous,
                tail_lines: Some(20),
                ..Default::default()
            };
            // A crash-looping container's last run is its current log while it waits to
            // restart on some kubelets and its previous one on others.
            let mut log = api.logs(&name, &lp(false)).await.unwrap_or_default();
            if log.is_empty() && previous {
                log = api.logs(&name, &lp(true)).await.unwrap_or_default();
            }
            format!("{}{}", f.text, reason::last_lines(&log))
        }
    }))
    .await;
    let mut out = Explained::default();
    let named: Vec<(&Pod, &Fact, String)> = facts
        .iter()
        .zip(texts)
        .map(|((p, f), t)| (*p, f, t))
        .collect();
    for (p, _, t) in &named {
        out.pods
            .insert(p.metadata.name.clone().unwrap_or_default(), t.clone());
    }
    let pod_name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let launcher = pods.iter().find(|p| role_of(p) == ROLE_LAUNCHER);
    let launcher_fact = named
        .iter()
        .find(|(p, f, _)| role_of(p) == ROLE_LAUNCHER && f.kind != Kind::Unschedulable);
    if state == JobState::Failed {
        // The first worker that ended badly is the first rank that failed.
        let mut ended: Vec<&(&Pod, &Fact, String)> = named
            .iter()
            .filter(|(p, f, _)| {
                role_of(p) == ROLE_WORKER
                    && matches!(f.kind, Kind::Failed | Kind::OomKilled | Kind::CrashLoop)
            })
            .collect();
        ended.sort_by_key(|(_, f, _)| f.finished_at.clone().unwrap_or_else(|| "~".into()));
        let first = ended.first().map(|(p, _, t)| (pod_name(p), t.clone()));
        let rank = match launcher {
            Some(l) => launcher_rank(&api, l).await,
            None => None,
        };
        let first =
            reason::first_failed(rank, first.as_ref().map(|(n, t)| (n.as_str(), t.as_str())));
        // The launcher's pod may be gone with its failed Job: the run's job then.
        let lname = launcher.map_or_else(|| format!("of {job}"), pod_name);
        let own = launcher_fact.map(|(_, _, t)| t.clone()).unwrap_or_else(|| {
            conditions
                .iter()
                .find(|c| c.type_ == "Failed" && c.status == "True")
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "the job failed".into())
        });
        out.run = Some(Reason {
            text: reason::launcher_failed(&lname, &own, first.as_deref()),
            failing: true,
        });
        return out;
    }
    if state == JobState::Succeeded {
        return out;
    }
    if let Some((p, _, t)) = named.iter().find(|(_, f, _)| f.failing) {
        out.run = Some(Reason {
            text: format!("{}: {t}", pod_name(p)),
            failing: true,
        });
        return out;
    }
    let not_ready: Vec<String> = pods
        .iter()
        .filter(|p| role_of(p) == ROLE_WORKER && !is_ready(p))
        .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
        .map(pod_name)
        .collect();
    let waiting = |launcher: Option<&Pod>| Reason {
        text: reason::waiting_for_sshd(launcher.map(pod_name).as_deref(), &not_ready),
        failing: false,
    };
    if let Some(l) = launcher.filter(|l| phase(l) == "Running")
        && !not_ready.is_empty()
    {
        out.run = Some(waiting(Some(l)));
    } else if let Some((p, _, t)) = named.first() {
        out.run = Some(Reason {
            text: format!("{}: {t}", pod_name(p)),
            failing: false,
        });
    } else if launcher.is_none() && !not_ready.is_empty() {
        // An MPIJob's operator creates the launcher once every worker is ready.
        out.run = Some(waiting(None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(role: &str, spec: serde_json::Value, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("j-{role}"), "labels": {"hvdctl.io/role": role}},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_object_an_event_says_is_missing() {
        assert_eq!(
            missing_object(
                "MountVolume.SetUp failed for volume \"creds\" : secret \"aws\" not found"
            ),
            Some(("secret", "aws".to_string()))
        );
        assert_eq!(
            missing_object("configmap \"settings\" not found"),
            Some(("configmap", "settings".to_string()))
        );
        assert_eq!(
            missing_object(
                "0/3 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
            ),
            Some(("persistentvolumeclaim", "data".to_string()))
        );
        // A claim that exists but is not bound, a sandbox that failed: nothing missing.
        assert_eq!(
            missing_object(
                "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."
            ),
            None
        );
        assert_eq!(
            missing_object("Failed to create pod sandbox: secret \"x\" is forbidden"),
            None
        );
    }

    #[test]
    fn stuck_is_pending_with_nothing_created_for_seconds() {
        let old = jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(10))
            .unwrap()
            .to_string();
        let young = jiff::Timestamp::now().to_string();
        let p = |created: &str, status: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "creationTimestamp": created},
                "spec": {"containers": [{"name": "c"}]},
                "status": status,
            }))
            .unwrap()
        };
        let creating = json!({"phase": "Pending", "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]});
        assert!(stuck(&p(&old, creating.clone())));
        assert!(
            !stuck(&p(&young, creating)),
            "not yet: a pod takes a moment"
        );
        assert!(stuck(&p(&old, json!({"phase": "Pending"}))));
        // Its container state says why: not asked here.
        let pulling = json!({"phase": "Pending", "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull"}}}]});
        assert!(!stuck(&p(&old, pulling)));
        assert!(!stuck(&p(&old, json!({"phase": "Running"}))));
    }

    #[test]
    fn each_fact_in_words() {
        let p = pod(
            "worker",
            json!({"containers": [{"name": "c"}]}),
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}),
        );
        let f = fact(&p, false).unwrap();
        assert_eq!(
            f.text,
            "Pending: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
        );
        assert!(f.failing);
        let p = pod(
            "worker",
            json!({"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"}}}]}),
            json!({"phase": "Running", "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}),
        );
        assert_eq!(
            fact(&p, false).unwrap().text,
            "OOMKilled: container c of j-worker exceeded its memory limit 64Mi (exit 137)"
        );
        let p = pod(
            "launcher",
            json!({"containers": [{"name": "c"}]}),
            json!({"phase": "Pending", "containerStatuses": [{"name": "c", "image": "reg/x:1", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}),
        );
        let f = fact(&p, false).unwrap();
        assert_eq!(
            f.text,
            "ImagePullBackOff: image \"reg/x:1\" of container c: Back-off pulling image"
        );
        let p = pod(
            "launcher",
            json!({"containers": [{"name": "c"}]}),
            json!({"phase": "Failed", "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"reason": "Error", "exitCode": 3}}}]}),
        );
        let f = fact(&p, false).unwrap();
        assert_eq!(f.text, "Failed: container c exited with code 3");
        assert!(!f.failing, "a launcher's Job may retry it");
    }
}
