//! The Kubernetes engine as a [`LogSource`]: a target is one container of one pod, looked at
//! with `GET pod` (a pod re-created under the same name is another target: its uid differs) and
//! read with the pod log API (`timestamps=true`, `sinceTime`, `tailLines`, `previous`).

use super::source::{Failure, LogRequest, LogSource, LogStream, Owner, SourceError};
use super::tail::{Life, View};
use super::target::{Engine, Target};
use crate::cluster::client::{ATTEMPTS, is_transient, retry, status_code};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, LogParams};

/// The pods of one namespace.
#[derive(Clone)]
pub struct PodSource {
    pub api: Api<Pod>,
}

impl PodSource {
    pub fn new(api: Api<Pod>) -> PodSource {
        PodSource { api }
    }
}

/// The query parameters of a request (kube rounds `sinceTime` to the second: callers floor it).
pub fn log_params(container: &str, req: &LogRequest) -> LogParams {
    LogParams {
        container: Some(container.to_string()),
        follow: req.follow,
        previous: req.previous,
        since_time: req.since_time,
        since_seconds: req.since_seconds,
        tail_lines: req.tail_lines,
        timestamps: true,
        ..LogParams::default()
    }
}

impl LogSource for PodSource {
    fn engine(&self) -> Engine {
        Engine::Kubernetes
    }

    async fn look(&self, t: &Target) -> Result<Option<View>, SourceError> {
        let api = self.api.clone();
        match retry(ATTEMPTS, || api.get_opt(&t.pod)).await {
            Ok(Some(p)) if p.metadata.uid.as_deref() == Some(t.uid.as_str()) => {
                Ok(Some(view(&p, &t.container)))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(SourceError {
                failure: if is_transient(&e) {
                    Failure::Transient
                } else {
                    Failure::Fatal
                },
                message: format!("cannot read pod {}: {e}", t.pod),
            }),
        }
    }

    async fn open(&self, t: &Target, req: &LogRequest) -> Result<LogStream, SourceError> {
        match self
            .api
            .log_stream(&t.pod, &log_params(&t.container, req))
            .await
        {
            Ok(s) => Ok(Box::pin(s)),
            Err(e) => Err(SourceError {
                failure: match status_code(&e) {
                    Some(401 | 403) => Failure::Fatal,
                    // 400: the container has no log to serve (not started, or its instance
                    // is gone).
                    Some(400 | 404) => Failure::NotFound,
                    _ => Failure::Transient,
                },
                message: e.to_string(),
            }),
        }
    }

    async fn why_deleted(&self, _t: &Target, seen: &View) -> Option<String> {
        let owner = seen.owner.as_ref()?;
        let ns = self.api.namespace()?;
        let (group, version) = owner
            .api_version
            .split_once('/')
            .unwrap_or(("", owner.api_version.as_str()));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &owner.kind));
        let api: Api<DynamicObject> = Api::namespaced_with(self.api.clone().into_client(), ns, &ar);
        let what = format!("{} {}", owner.kind, owner.name);
        Some(match api.get_opt(&owner.name).await {
            Ok(Some(o)) => owner_says(&what, &o.data),
            Ok(None) => format!("with its owner {what} (gone too)"),
            Err(_) => format!("(its owner: {what})"),
        })
    }
}

/// Why a pod went, as its owner's status and run policy tell: after it finished (and
/// whether its `runPolicy.cleanPodPolicy` deletes pods then), or while it had not.
fn owner_says(what: &str, data: &serde_json::Value) -> String {
    let conditions = data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ended = conditions.iter().find_map(|c| {
        let ty = c.get("type")?.as_str()?;
        (c.get("status")?.as_str()? == "True"
            && matches!(ty, "Succeeded" | "Failed" | "Complete" | "Completed"))
        .then_some(ty)
    });
    let policy = data
        .pointer("/spec/runPolicy/cleanPodPolicy")
        .and_then(serde_json::Value::as_str);
    match (ended, policy) {
        (Some(state), Some(p @ ("Running" | "All"))) => format!(
            "by its owner {what}'s operator once the job had {state} (runPolicy.cleanPodPolicy: {p} deletes {} pods when the job ends)",
            if p == "All" {
                "all its"
            } else {
                "its still running"
            }
        ),
        (Some(state), _) => format!("after its owner {what} had {state}"),
        (None, _) => format!("while its owner {what} had not finished"),
    }
}

/// When a pod's deletion was asked for: its `deletionTimestamp` less its grace period.
fn deletion_asked(pod: &Pod) -> Option<jiff::Timestamp> {
    let at = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    Some(
        at.checked_sub(jiff::SignedDuration::from_secs(grace))
            .unwrap_or(at),
    )
}

/// A pod's controller, from its owner references.
fn controller(pod: &Pod) -> Option<Owner> {
    let r = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    Some(Owner {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        name: r.name.clone(),
    })
}

/// What a pod says about one of its containers.
pub fn view(pod: &Pod, container: &str) -> View {
    let deleting = deletion_asked(pod);
    let owner = controller(pod);
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let pod_done = matches!(phase, "Succeeded" | "Failed");
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let cs = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|v| v.iter().find(|c| c.name == container));
    let Some(cs) = cs else {
        return View {
            restart: 0,
            life: Life::NotStarted {
                reason: phase.to_string(),
                for_good: pod_done,
            },
            has_previous: false,
            ended_at: None,
            deleting,
            owner,
        };
    };
    let restart = u32::try_from(cs.restart_count.max(0)).unwrap_or(u32::MAX);
    let state = cs.state.as_ref();
    let last_terminated = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some();
    let life = if state.and_then(|s| s.running.as_ref()).is_some() {
        if pod_done {
            Life::Dead { for_good: true }
        } else {
            Life::Running
        }
    } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        let again = match policy {
            "Never" => false,
            "OnFailure" => t.exit_code != 0,
            _ => true,
        };
        Life::Dead {
            for_good: pod_done || !again,
        }
    } else if last_terminated {
        // Waiting to restart (CrashLoopBackOff): the instance counted by `restart` is over.
        Life::Dead { for_good: pod_done }
    } else {
        let reason = state
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone())
            .unwrap_or_else(|| phase.to_string());
        Life::NotStarted {
            reason,
            for_good: pod_done,
        }
    };
    let has_previous = match life {
        Life::Running => restart > 0,
        Life::Dead { .. } | Life::NotStarted { .. } => restart > 0 && last_terminated,
    };
    // The instance counted by `restart` ended: its own terminated state, or the last one while
    // the container waits to restart.
    let ended_at = match life {
        Life::Dead { .. } => state
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
            .and_then(|t| t.finished_at.as_ref())
            .map(|t| t.0),
        _ => None,
    };
    View {
        restart,
        life,
        has_previous,
        ended_at,
        deleting,
        owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn container_views() {
        let p = pod(
            serde_json::json!({"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c"}]}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
              "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}]}}),
        );
        assert_eq!(
            view(&p, "c"),
            View {
                restart: 1,
                life: Life::Dead { for_good: false },
                has_previous: true,
                ended_at: None,
                deleting: None,
                owner: None,
            }
        );
        let p = pod(
            serde_json::json!({"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c"}]}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
              "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1}}}]}}),
        );
        assert_eq!(
            view(&p, "c"),
            View {
                restart: 2,
                life: Life::Running,
                has_previous: true,
                ended_at: None,
                deleting: None,
                owner: None,
            }
        );
        let p = pod(
            serde_json::json!({"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c"}]}, "status": {"phase": "Succeeded",
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
              "state": {"terminated": {"exitCode": 0}}}]}}),
        );
        assert_eq!(
            view(&p, "c"),
            View {
                restart: 0,
                life: Life::Dead { for_good: true },
                has_previous: false,
                ended_at: None,
                deleting: None,
                owner: None,
            }
        );
        let p = pod(
            serde_json::json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending",
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
              "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}),
        );
        assert_eq!(
            view(&p, "c").life,
            Life::NotStarted {
                reason: "ImagePullBackOff".into(),
                for_good: false
            }
        );
        assert_eq!(
            view(&pod(serde_json::json!({"spec": {"containers": []}})), "c").life,
            Life::NotStarted {
                reason: "Pending".into(),
                for_good: false
            }
        );
    }
}
