//! The Kubernetes engine as a [`LogSource`]: a target is one container of one pod, looked at
//! with `GET pod` (a pod re-created under the same name is another target: its uid differs) and
//! read with the pod log API (`timestamps=true`, `sinceTime`, `tailLines`, `previous`).

use super::source::{Failure, LogRequest, LogSource, LogStream, SourceError};
use super::tail::{Life, View};
use super::target::{Engine, Target};
use crate::cluster::client::{ATTEMPTS, is_transient, retry, status_code};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};

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
                    Some(404) => Failure::NotFound,
                    _ => Failure::Transient,
                },
                message: e.to_string(),
            }),
        }
    }
}

/// What a pod says about one of its containers.
pub fn view(pod: &Pod, container: &str) -> View {
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
                ended_at: None
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
                ended_at: None
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
                ended_at: None
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
