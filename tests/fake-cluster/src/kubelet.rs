//! The fake kubelet: schedules pods onto `fake-node-0..3`, moves them through their phases
//! and computes container instances as pure functions of time, so logs need no storage.
//!
//! A container's behaviour comes from its env: `FAKE_KUBELET_LINES` (N lines per instance),
//! `FAKE_KUBELET_RATE` (lines/s, 0 = as fast as possible: one line per microsecond),
//! `FAKE_KUBELET_EXIT` (exit code of the final instance), `FAKE_KUBELET_RESTARTS` (crashes
//! with exit 1 before that). Without `FAKE_KUBELET_LINES` a container runs silently forever.
//!
//! Faults, each `1` (every pod) or a pod name's suffix (`worker-1`: only pods named
//! `…-worker-1`): `FAKE_KUBELET_OOM` (every instance ends `OOMKilled`, exit 137, after its
//! lines), `FAKE_KUBELET_PULL=fail` (or `fail:SUFFIX`; the image is never pulled: waiting
//! `ErrImagePull`, then `ImagePullBackOff`, the pod stays Pending), `FAKE_KUBELET_HANG`
//! (runs, prints nothing, never becomes ready). `FAKE_KUBELET_ONLY` (a suffix, or `launcher`
//! for a Job's `<job>-launcher-<random>` pods) limits all of these to the pods it names.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::resources::PODS;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;
use crate::util::{self, fmt_time, name_of, s};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub lines: Option<u64>,
    pub rate: f64,
    pub exit: i32,
    pub restarts: u64,
    /// Instances end OOMKilled (exit 137).
    pub oom: bool,
    /// The image cannot be pulled: the container never starts.
    pub pull_fail: bool,
    /// Runs silently and never becomes ready.
    pub hang: bool,
}

/// Whether a fault's env value (`1`, or a pod name's suffix such as `worker-1`) applies to
/// the pod `pod`.
fn applies(v: &str, pod: &str) -> bool {
    let v = v.trim();
    // `launcher` also names a Job's pod, `<job>-launcher-<random>`.
    v == "1" || pod == v || pod.ends_with(&format!("-{v}")) || pod.contains(&format!("-{v}-"))
}

/// The state of one container at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CState {
    /// Before the pod's containers were started.
    Creating,
    Running {
        k: u64,
        started: i64,
    },
    /// Instance `k` terminated, instance `k+1` starts at `next`.
    BackOff {
        k: u64,
        started: i64,
        finished: i64,
        exit: i32,
        next: i64,
    },
    Terminated {
        k: u64,
        started: i64,
        finished: i64,
        exit: i32,
    },
}

impl CState {
    pub fn instance(&self) -> Option<u64> {
        match *self {
            CState::Creating => None,
            CState::Running { k, .. }
            | CState::BackOff { k, .. }
            | CState::Terminated { k, .. } => Some(k),
        }
    }
}

impl ContainerSpec {
    fn from_json(c: &Value, pod: &str) -> Self {
        let var = |name: &str| -> Option<String> {
            c.get("env")?
                .as_array()?
                .iter()
                .find(|e| s(e, "/name") == Some(name))
                .and_then(|e| s(e, "/value"))
                .map(String::from)
        };
        // `FAKE_KUBELET_ONLY`: the behaviour below is this pod's only if the value applies
        // to it; elsewhere the container runs silently forever (an app's env reaches every pod).
        let mine = var("FAKE_KUBELET_ONLY").is_none_or(|v| applies(&v, pod));
        let env = |name: &str| var(name).filter(|_| mine);
        let fault = |name: &str| env(name).is_some_and(|v| applies(&v, pod));
        let pull_fail = env("FAKE_KUBELET_PULL").is_some_and(|v| {
            let v = v.trim();
            v == "fail" || v.strip_prefix("fail:").is_some_and(|w| applies(w, pod))
        });
        let oom = fault("FAKE_KUBELET_OOM");
        let hang = fault("FAKE_KUBELET_HANG");
        let lines = if hang {
            None
        } else {
            env("FAKE_KUBELET_LINES")
                .and_then(|v| v.trim().parse().ok())
                .or(oom.then_some(0))
        };
        ContainerSpec {
            oom,
            pull_fail,
            hang,
            name: s(c, "/name").unwrap_or_default().to_string(),
            image: s(c, "/image").unwrap_or_default().to_string(),
            lines,
            rate: env("FAKE_KUBELET_RATE")
                .and_then(|v| v.trim().parse().ok())
                .filter(|r: &f64| r.is_finite() && *r >= 0.0)
                .unwrap_or(0.0),
            exit: if oom {
                137
            } else {
                env("FAKE_KUBELET_EXIT")
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            },
            restarts: env("FAKE_KUBELET_RESTARTS")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        }
    }

    /// Time between two lines.
    pub fn step_ns(&self) -> i64 {
        if self.rate <= 0.0 {
            1_000
        } else {
            ((1e9 / self.rate) as i64).max(1)
        }
    }

    /// How long an instance runs: its lines plus one millisecond.
    pub fn run_ns(&self) -> Option<i64> {
        self.lines.map(|n| {
            (n as i64)
                .saturating_mul(self.step_ns())
                .saturating_add(1_000_000)
        })
    }

    pub fn exit_of(&self, k: u64) -> i32 {
        if k < self.restarts && !self.oom {
            1
        } else {
            self.exit
        }
    }

    fn last_instance(&self, policy: RestartPolicy) -> Option<u64> {
        match policy {
            RestartPolicy::Never => Some(0),
            RestartPolicy::OnFailure if self.exit == 0 => Some(self.restarts),
            _ => None,
        }
    }

    /// Start of instance `k`.
    pub fn instance_start(&self, start0: i64, k: u64, backoff: i64) -> i64 {
        let period = self.run_ns().unwrap_or(0) + backoff;
        start0 + period * k as i64
    }

    pub fn state_at(&self, start0: i64, t: i64, policy: RestartPolicy, backoff: i64) -> CState {
        if t < start0 || self.pull_fail {
            return CState::Creating;
        }
        let Some(run) = self.run_ns() else {
            return CState::Running {
                k: 0,
                started: start0,
            };
        };
        let period = run + backoff;
        let mut k = ((t - start0) / period) as u64;
        if let Some(last) = self.last_instance(policy) {
            k = k.min(last);
        }
        let sk = start0 + period * k as i64;
        let ek = sk + run;
        if t < ek {
            CState::Running { k, started: sk }
        } else if self.last_instance(policy) == Some(k) {
            CState::Terminated {
                k,
                started: sk,
                finished: ek,
                exit: self.exit_of(k),
            }
        } else {
            CState::BackOff {
                k,
                started: sk,
                finished: ek,
                exit: self.exit_of(k),
                next: sk + period,
            }
        }
    }

    /// Lines of an instance started at `sk` written by time `t`.
    pub fn lines_at(&self, sk: i64, t: i64) -> u64 {
        let Some(n) = self.lines else { return 0 };
        if t < sk {
            return 0;
        }
        (((t - sk) / self.step_ns()) as u64).min(n)
    }
}

/// What the kubelet knows about one pod.
#[derive(Debug)]
pub struct PodRt {
    pub uid: String,
    pub ns: String,
    pub name: String,
    pub containers: Vec<ContainerSpec>,
    pub policy: RestartPolicy,
    pub scheduled_at: i64,
    pub start_at: i64,
    pub node: String,
    pub ip: String,
    pub backoff: i64,
    pub deleted: AtomicBool,
    /// Per container: what its events have told so far.
    emitted: Mutex<Vec<Emitted>>,
}

/// What one container's events have told: how many instances started, how many back-offs,
/// whether the failed pull.
#[derive(Debug, Clone, Copy, Default)]
struct Emitted {
    started: u64,
    backoffs: u64,
    pull_failed: bool,
}

impl PodRt {
    pub fn state(&self, ci: usize, t: i64) -> CState {
        self.containers[ci].state_at(self.start_at, t, self.policy, self.backoff)
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Relaxed)
    }
}

pub struct Kubelet {
    pods: Mutex<HashMap<String, Arc<PodRt>>>,
    pub start_delay_ns: Mutex<i64>,
    pub backoff_ns: i64,
}

fn terminated_json(
    c: &ContainerSpec,
    uid: &str,
    k: u64,
    started: i64,
    finished: i64,
    exit: i32,
) -> Value {
    json!({
        "exitCode": exit,
        "reason": if c.oom && exit == 137 { "OOMKilled" } else if exit == 0 { "Completed" } else { "Error" },
        "startedAt": fmt_time(started),
        "finishedAt": fmt_time(finished),
        "containerID": container_id(uid, &c.name, k),
    })
}

/// How long a failed pull shows `ErrImagePull` before `ImagePullBackOff`.
const PULL_RETRY_NS: i64 = 1_000_000_000;

/// The message a registry gives for an image it does not have.
fn pull_message(c: &ContainerSpec) -> String {
    format!(
        "failed to pull and unpack image \"{0}\": failed to resolve reference \"{0}\": {0}: not found",
        c.image
    )
}

/// A container whose image cannot be pulled, `since` ns after the pod started.
fn pull_waiting(c: &ContainerSpec, since: i64) -> Value {
    if since < PULL_RETRY_NS {
        json!({"reason": "ErrImagePull", "message": format!("rpc error: code = NotFound desc = {}", pull_message(c))})
    } else {
        json!({"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{}\": ErrImagePull: {}", c.image, pull_message(c))})
    }
}

fn container_id(uid: &str, name: &str, k: u64) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in uid.bytes().chain(name.bytes()).chain(k.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    format!(
        "containerd://{h:016x}{:016x}{:016x}{:016x}",
        h.rotate_left(13),
        h.rotate_left(29),
        h.rotate_left(47)
    )
}

impl Kubelet {
    pub fn new(start_delay_ns: i64, backoff_ns: i64) -> Self {
        Kubelet {
            pods: Mutex::new(HashMap::new()),
            start_delay_ns: Mutex::new(start_delay_ns),
            backoff_ns,
        }
    }

    pub fn pod(&self, uid: &str) -> Option<Arc<PodRt>> {
        self.pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }

    /// One kubelet pass over every pod. Returns the next instant something changes.
    pub fn sync(&self, store: &Store, now: i64) -> Option<i64> {
        let (pods, _) = store.list(
            PODS,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let mut next: Option<i64> = None;
        let mut soon = |t: i64| next = Some(next.map_or(t, |n: i64| n.min(t)));
        // Forget deleted pods.
        let live: std::collections::HashSet<&str> = pods.iter().map(|p| util::uid_of(p)).collect();
        let gone: Vec<Arc<PodRt>> = {
            let mut map = self.pods.lock().unwrap_or_else(|p| p.into_inner());
            let dead: Vec<String> = map
                .keys()
                .filter(|u| !live.contains(u.as_str()))
                .cloned()
                .collect();
            dead.into_iter().filter_map(|u| map.remove(&u)).collect()
        };
        for rt in gone {
            rt.deleted.store(true, Ordering::Relaxed);
            for (ci, c) in rt.containers.iter().enumerate() {
                if matches!(rt.state(ci, now), CState::Running { .. }) {
                    let involved = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": rt.name, "namespace": rt.ns, "uid": rt.uid}});
                    store.record_event(
                        &involved,
                        "Normal",
                        "Killing",
                        &format!("Stopping container {}", c.name),
                        "kubelet",
                    );
                }
            }
        }
        let scheduler = store.scheduler.load(Ordering::Relaxed);
        for pod in pods {
            if s(&pod, "/spec/nodeName").is_none_or(str::is_empty)
                && (scheduler || !crate::scheduler::for_default_scheduler(&pod))
            {
                continue;
            }
            let uid = util::uid_of(&pod).to_string();
            let rt = self
                .pod(&uid)
                .unwrap_or_else(|| self.admit(store, &pod, now));
            let status = self.status(&rt, &pod, now);
            if pod.get("status") != Some(&status) {
                store.mutate(PODS, &rt.ns, &rt.name, |p| {
                    if util::uid_of(p) == rt.uid {
                        p["status"] = status.clone();
                    }
                });
            }
            self.emit_events(store, &rt, &pod, now);
            if now < rt.start_at {
                soon(rt.start_at);
            }
            for ci in 0..rt.containers.len() {
                match rt.state(ci, now) {
                    CState::Creating if now < rt.start_at => soon(rt.start_at),
                    // ErrImagePull turns into ImagePullBackOff.
                    CState::Creating if now < rt.start_at + PULL_RETRY_NS => {
                        soon(rt.start_at + PULL_RETRY_NS)
                    }
                    CState::Creating => {}
                    CState::Running { started, .. } => {
                        if let Some(run) = rt.containers[ci].run_ns() {
                            soon(started + run)
                        }
                    }
                    CState::BackOff { next, .. } => soon(next),
                    CState::Terminated { .. } => {}
                }
            }
        }
        next
    }

    fn admit(&self, store: &Store, pod: &Value, now: i64) -> Arc<PodRt> {
        let uid = util::uid_of(pod).to_string();
        let name = name_of(pod).to_string();
        let ns = util::ns_of(pod).to_string();
        let node = match s(pod, "/spec/nodeName") {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => {
                let h = uid
                    .bytes()
                    .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
                format!("fake-node-{}", h % 4)
            }
        };
        let containers: Vec<ContainerSpec> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| ContainerSpec::from_json(c, &name))
            .collect();
        let policy = match s(pod, "/spec/restartPolicy") {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        };
        let n: u16 = rand::random();
        let delay = *self
            .start_delay_ns
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let rt = Arc::new(PodRt {
            uid: uid.clone(),
            ns: ns.clone(),
            name: name.clone(),
            emitted: Mutex::new(vec![Emitted::default(); containers.len()]),
            containers,
            policy,
            scheduled_at: now,
            start_at: now + delay,
            node: node.clone(),
            ip: format!("10.244.{}.{}", n >> 8, (n & 0xff).clamp(2, 254)),
            backoff: self.backoff_ns,
            deleted: AtomicBool::new(false),
        });
        self.pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.clone(), rt.clone());
        if s(pod, "/spec/nodeName").is_none_or(str::is_empty) {
            store.mutate(PODS, &ns, &name, |p| {
                if util::uid_of(p) == uid {
                    p["spec"]["nodeName"] = json!(node.clone());
                }
            });
            store.record_event(
                pod,
                "Normal",
                "Scheduled",
                &format!("Successfully assigned {ns}/{name} to {node}"),
                "default-scheduler",
            );
        }
        rt
    }

    /// The pod status at `now`: a pure function of the runtime record.
    fn status(&self, rt: &PodRt, pod: &Value, now: i64) -> Value {
        let sched = fmt_time(rt.scheduled_at);
        let pulling = rt.containers.iter().any(|c| c.pull_fail);
        if now < rt.start_at || pulling {
            let started = now >= rt.start_at;
            let statuses: Vec<Value> = rt
                .containers
                .iter()
                .map(|c| {
                    let waiting = if c.pull_fail && started {
                        pull_waiting(c, now - rt.start_at)
                    } else if started {
                        json!({"reason": "PodInitializing"})
                    } else {
                        json!({"reason": "ContainerCreating"})
                    };
                    json!({"name": c.name, "image": c.image, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                           "state": {"waiting": waiting}, "lastState": {}})
                })
                .collect();
            return json!({
                "phase": "Pending",
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": null, "lastTransitionTime": sched},
                    {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
                    {"type": "Ready", "status": "False", "lastProbeTime": null, "lastTransitionTime": sched, "reason": "ContainersNotReady", "message": format!("containers with unready status: [{}]", rt.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(" "))},
                    {"type": "ContainersReady", "status": "False", "lastProbeTime": null, "lastTransitionTime": sched, "reason": "ContainersNotReady"},
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
                ],
                "hostIP": "172.18.0.2",
                "hostIPs": [{"ip": "172.18.0.2"}],
                "startTime": sched,
                "containerStatuses": statuses,
                "qosClass": "BestEffort",
            });
        }
        let mut statuses = Vec::new();
        let (mut any_live, mut any_failed, mut all_ready) = (false, false, true);
        let mut last_change = rt.start_at;
        let mut unready = Vec::new();
        for (ci, c) in rt.containers.iter().enumerate() {
            let st = rt.state(ci, now);
            let prev = |k: u64| -> Value {
                if k == 0 {
                    return json!({});
                }
                let sp = c.instance_start(rt.start_at, k - 1, rt.backoff);
                json!({"terminated": terminated_json(c, &rt.uid, k - 1, sp, sp + c.run_ns().unwrap_or(0), c.exit_of(k - 1))})
            };
            let (state, last, ready, k) = match st {
                CState::Creating => unreachable!("checked above"),
                CState::Running { k, started } => {
                    any_live = true;
                    last_change = last_change.max(started);
                    (
                        json!({"running": {"startedAt": fmt_time(started)}}),
                        prev(k),
                        !c.hang,
                        k,
                    )
                }
                CState::BackOff {
                    k,
                    started,
                    finished,
                    exit,
                    ..
                } => {
                    any_live = true;
                    last_change = last_change.max(finished);
                    let msg = format!(
                        "back-off 10s restarting failed container={} pod={}_{}({})",
                        c.name, rt.name, rt.ns, rt.uid
                    );
                    (
                        json!({"waiting": {"reason": "CrashLoopBackOff", "message": msg}}),
                        json!({"terminated": terminated_json(c, &rt.uid, k, started, finished, exit)}),
                        false,
                        k,
                    )
                }
                CState::Terminated {
                    k,
                    started,
                    finished,
                    exit,
                } => {
                    any_failed |= exit != 0;
                    last_change = last_change.max(finished);
                    (
                        json!({"terminated": terminated_json(c, &rt.uid, k, started, finished, exit)}),
                        prev(k),
                        false,
                        k,
                    )
                }
            };
            if !ready {
                all_ready = false;
                unready.push(c.name.clone());
            }
            statuses.push(json!({
                "name": c.name,
                "image": c.image,
                "imageID": format!("docker.io/library/{}@sha256:{}", c.image, "0".repeat(64)),
                "containerID": container_id(&rt.uid, &c.name, k),
                "ready": ready,
                "started": matches!(st, CState::Running { .. }),
                "restartCount": k,
                "state": state,
                "lastState": last,
            }));
        }
        let phase = if any_live {
            "Running"
        } else if any_failed {
            "Failed"
        } else {
            "Succeeded"
        };
        let changed = fmt_time(last_change);
        let mut ready_cond = json!({"type": "Ready", "status": if all_ready { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": changed});
        let mut cready_cond = json!({"type": "ContainersReady", "status": if all_ready { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": changed});
        if !all_ready {
            let reason = if phase == "Running" {
                "ContainersNotReady"
            } else {
                "PodCompleted"
            };
            ready_cond["reason"] = json!(reason);
            cready_cond["reason"] = json!(reason);
            if phase == "Running" {
                ready_cond["message"] = json!(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                ));
            }
        }
        let _ = pod;
        json!({
            "phase": phase,
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": if any_live { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": fmt_time(rt.start_at)},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
                ready_cond,
                cready_cond,
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
            ],
            "hostIP": "172.18.0.2",
            "hostIPs": [{"ip": "172.18.0.2"}],
            "podIP": rt.ip,
            "podIPs": [{"ip": rt.ip}],
            "startTime": sched,
            "containerStatuses": statuses,
            "qosClass": "BestEffort",
        })
    }

    /// The kubelet's events for what happened to the containers since the last pass. The real
    /// kubelet records them as it acts (`Pulled`, `Created`, `Started` when it starts an
    /// instance, `BackOff` while a restart waits), so every instance and every back-off gets
    /// its events even when a pass comes late and an instance started and ended between two
    /// passes: what a pass did not see is caught up, in order.
    fn emit_events(&self, store: &Store, rt: &PodRt, pod: &Value, now: i64) {
        let mut emitted = rt.emitted.lock().unwrap_or_else(|p| p.into_inner());
        for (ci, c) in rt.containers.iter().enumerate() {
            let st = rt.state(ci, now);
            let e = &mut emitted[ci];
            if let CState::Creating = st {
                if c.pull_fail && now >= rt.start_at && !e.pull_failed {
                    e.pull_failed = true;
                    store.record_event(
                        pod,
                        "Warning",
                        "Failed",
                        &format!("Failed to pull image \"{}\": {}", c.image, pull_message(c)),
                        "kubelet",
                    );
                    store.record_event(pod, "Warning", "Failed", "Error: ErrImagePull", "kubelet");
                }
                continue;
            }
            // Instances 0..=k have started; back-offs after instances 0..k have been waited
            // (and after k too while it waits for k+1).
            let k = st.instance().unwrap_or(0);
            let backoffs = k + u64::from(matches!(st, CState::BackOff { .. }));
            while e.started <= k || e.backoffs < backoffs {
                if e.backoffs < e.started && e.backoffs < backoffs {
                    e.backoffs += 1;
                    store.record_event(
                        pod,
                        "Warning",
                        "BackOff",
                        &format!(
                            "Back-off restarting failed container {} in pod {}_{}({})",
                            c.name, rt.name, rt.ns, rt.uid
                        ),
                        "kubelet",
                    );
                    continue;
                }
                e.started += 1;
                for (reason, msg) in [
                    (
                        "Pulled",
                        format!("Container image \"{}\" already present on machine", c.image),
                    ),
                    ("Created", format!("Created container {}", c.name)),
                    ("Started", format!("Started container {}", c.name)),
                ] {
                    store.record_event(pod, "Normal", reason, &msg, "kubelet");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(lines: Option<u64>, rate: f64, exit: i32, restarts: u64) -> ContainerSpec {
        ContainerSpec {
            oom: false,
            pull_fail: false,
            hang: false,
            name: "c".into(),
            image: "i".into(),
            lines,
            rate,
            exit,
            restarts,
        }
    }

    #[test]
    fn timeline() {
        let c = spec(Some(10), 10.0, 3, 1); // 1 s + 1 ms per instance
        let b = 100_000_000;
        assert_eq!(
            c.state_at(0, -1, RestartPolicy::OnFailure, b),
            CState::Creating
        );
        assert_eq!(
            c.state_at(0, 500_000_000, RestartPolicy::OnFailure, b),
            CState::Running { k: 0, started: 0 }
        );
        assert_eq!(c.lines_at(0, 500_000_000), 5);
        let st = c.state_at(0, 1_050_000_000, RestartPolicy::OnFailure, b);
        assert!(
            matches!(st, CState::BackOff { k: 0, exit: 1, .. }),
            "{st:?}"
        );
        assert_eq!(
            c.state_at(0, 1_200_000_000, RestartPolicy::OnFailure, b),
            CState::Running {
                k: 1,
                started: 1_101_000_000
            }
        );
        // OnFailure with a non-zero final exit restarts forever.
        assert!(matches!(
            c.state_at(0, 2_150_000_000, RestartPolicy::OnFailure, b),
            CState::BackOff { k: 1, exit: 3, .. }
        ));
        // Never: the first crash is final.
        assert!(matches!(
            c.state_at(0, 5_000_000_000, RestartPolicy::Never, b),
            CState::Terminated { k: 0, exit: 1, .. }
        ));
        let ok = spec(Some(10), 10.0, 0, 1);
        assert!(matches!(
            ok.state_at(0, 50_000_000_000, RestartPolicy::OnFailure, b),
            CState::Terminated { k: 1, exit: 0, .. }
        ));
        assert!(matches!(
            spec(None, 0.0, 0, 0).state_at(0, i64::MAX / 2, RestartPolicy::Never, b),
            CState::Running { k: 0, .. }
        ));
    }
}
