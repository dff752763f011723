//! The Docker kubelet (`--kubelet docker`): every scheduled pod becomes real containers on
//! the Docker engine the docker CLI would use (`docker-endpoint`) — a sandbox container (the pod's network, IPC
//! and hostname) plus one container per spec container joined to it, volumes materialised
//! on the host, `/etc/hosts` per pod kept current, logs and exec from the real containers.
//!
//! Everything created carries the labels [`LABEL_ID`] and [`LABEL_PID`]; at start the
//! leftovers of fake clusters whose process is gone are removed, and at exit everything of
//! this one.

pub mod logs;
mod spdy;
pub mod spec;
pub mod stream;
mod volumes;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, NetworkCreateRequest, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectContainerOptions, ListContainersOptions,
    ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions, RemoveVolumeOptions,
    StopContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

use crate::resources::{PODS, SERVICES};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;
use crate::util::{self, fmt_time, name_of, now_ns, s};

/// Label naming the fake cluster that created a container, network or volume.
pub const LABEL_ID: &str = "io.hvdctl.fake-cluster.id";
/// Label carrying the process id of that fake cluster.
pub const LABEL_PID: &str = "io.hvdctl.fake-cluster.pid";
const LABEL_POD_UID: &str = "io.hvdctl.fake-cluster.pod-uid";
const LABEL_POD: &str = "io.hvdctl.fake-cluster.pod";
const LABEL_CONTAINER: &str = "io.hvdctl.fake-cluster.container";
const LABEL_CLAIM: &str = "io.hvdctl.fake-cluster.claim";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A bollard error as the daemon said it.
pub fn describe(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// One container of a pod, as the kubelet tracks it.
#[derive(Debug, Clone)]
pub struct CSt {
    pub name: String,
    pub image: String,
    pub image_id: String,
    /// Docker id of the current instance.
    pub current: Option<String>,
    /// Docker id of the instance before the last restart (`previous` logs).
    pub previous: Option<String>,
    pub restarts: u64,
    pub state: Value,
    pub last_state: Value,
    pub ready: bool,
    pub started: bool,
    /// Terminated for good (no restart will follow).
    pub done: bool,
    pub failed: bool,
    /// Ever started (a pod is Pending until every container started once).
    pub ever_started: bool,
}

/// What the kubelet knows about one pod.
pub struct PodH {
    pub uid: String,
    pub ns: String,
    pub name: String,
    pub dir: PathBuf,
    pub state: Mutex<PodState>,
    /// Set to `Some(grace seconds)` to stop the pod.
    stop: watch::Sender<Option<i64>>,
    grace: i64,
    scheduled_at: i64,
    node: String,
    /// ConfigMap/Secret volumes, refreshed as their sources change.
    projected: Mutex<Vec<volumes::Projected>>,
}

#[derive(Default)]
pub struct PodState {
    pub sandbox: Option<String>,
    pub ip: Option<String>,
    pub containers: Vec<CSt>,
    pub started_at: Option<i64>,
    pub stopping: bool,
    pub sandbox_ready: bool,
    pub hosts: String,
}

/// The Docker kubelet of one fake cluster.
pub struct DockerKubelet {
    pub docker: Docker,
    /// `<pid>-<random>`; the value of [`LABEL_ID`].
    pub id: String,
    pub network: String,
    pub dir: PathBuf,
    pub pause_image: String,
    backoff: Duration,
    pods: Mutex<HashMap<String, Arc<PodH>>>,
    closing: AtomicBool,
    hosts_lock: Mutex<()>,
}

const NODE: &str = "fake-node-0";
const HOST_IP: &str = "172.18.0.2";

impl DockerKubelet {
    /// Connects to the daemon (as the docker CLI finds it), removes leftovers of
    /// dead fake clusters, creates this cluster's network.
    pub async fn start(pause_image: String, backoff: Duration) -> io::Result<Arc<Self>> {
        let err = |what: &str, e: bollard::errors::Error| {
            io::Error::other(format!("docker kubelet: {what}: {}", describe(&e)))
        };
        // The daemon the docker CLI would use: DOCKER_HOST (with TLS) or a Docker context.
        let endpoint = docker_endpoint::Endpoint::from_env()
            .map_err(|e| io::Error::other(format!("docker kubelet: {e}")))?;
        let docker = endpoint
            .bollard(120)
            .map_err(|e| io::Error::other(format!("docker kubelet: {e}")))?
            .docker;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| err("connecting", e))?
            .with_timeout(Duration::from_secs(7 * 24 * 3600));
        docker.ping().await.map_err(|e| err("ping", e))?;
        let pid = std::process::id();
        let id = format!("{pid}-{:06x}", rand::random::<u32>() & 0xff_ffff);
        let dir = std::env::temp_dir().join(format!("fake-cluster-{id}"));
        let k = Arc::new(DockerKubelet {
            network: format!("fake-cluster-{id}"),
            dir,
            pause_image,
            backoff,
            pods: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            hosts_lock: Mutex::new(()),
            id,
            docker,
        });
        k.remove_leftovers().await;
        std::fs::create_dir_all(k.dir.join("pods"))?;
        let labels = k.labels();
        k.docker
            .create_network(NetworkCreateRequest {
                name: k.network.clone(),
                driver: Some("bridge".into()),
                labels: Some(labels),
                ..Default::default()
            })
            .await
            .map_err(|e| err("creating the network", e))?;
        Ok(k)
    }

    fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_ID.to_string(), self.id.clone()),
            (LABEL_PID.to_string(), std::process::id().to_string()),
        ])
    }

    fn filter(label: String) -> Option<HashMap<String, Vec<String>>> {
        Some(HashMap::from([("label".to_string(), vec![label])]))
    }

    /// Removes containers, networks, volumes and host directories of fake clusters whose
    /// process is gone.
    async fn remove_leftovers(&self) {
        let dead = |labels: Option<&HashMap<String, String>>| -> bool {
            let Some(l) = labels else { return false };
            match l.get(LABEL_PID).and_then(|p| p.parse::<u32>().ok()) {
                Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
                None => false,
            }
        };
        let d = &self.docker;
        if let Ok(cs) = d
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Self::filter(LABEL_ID.into()),
                ..Default::default()
            }))
            .await
        {
            for c in cs {
                if dead(c.labels.as_ref())
                    && let Some(id) = c.id
                {
                    let _ = d
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                v: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                }
            }
        }
        if let Ok(ns) = d
            .list_networks(Some(ListNetworksOptions {
                filters: Self::filter(LABEL_ID.into()),
            }))
            .await
        {
            for n in ns {
                if dead(n.labels.as_ref())
                    && let Some(name) = n.name
                {
                    let _ = d.remove_network(&name).await;
                }
            }
        }
        if let Ok(vs) = d
            .list_volumes(Some(ListVolumesOptions {
                filters: Self::filter(LABEL_ID.into()),
            }))
            .await
        {
            for v in vs.volumes.unwrap_or_default() {
                if dead(Some(&v.labels)) {
                    let _ = d
                        .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
                        .await;
                }
            }
        }
        if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix("fake-cluster-") else {
                    continue;
                };
                let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                    continue;
                };
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }

    /// Removes everything of this fake cluster: containers (killed at once), volumes, the
    /// network and the host directory.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        for h in lock(&self.pods).values() {
            let _ = h.stop.send(Some(0));
        }
        let d = &self.docker;
        for round in 0..5 {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if let Ok(cs) = d
                .list_containers(Some(ListContainersOptions {
                    all: true,
                    filters: Self::filter(format!("{LABEL_ID}={}", self.id)),
                    ..Default::default()
                }))
                .await
            {
                let rm = cs.into_iter().filter_map(|c| c.id).map(|id| async move {
                    let _ = d
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                v: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                });
                futures_util::future::join_all(rm).await;
            }
            let mut left = false;
            if let Ok(vs) = d
                .list_volumes(Some(ListVolumesOptions {
                    filters: Self::filter(format!("{LABEL_ID}={}", self.id)),
                }))
                .await
            {
                for v in vs.volumes.unwrap_or_default() {
                    left |= d
                        .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
                        .await
                        .is_err();
                }
            }
            if !left {
                break;
            }
        }
        let _ = d.remove_network(&self.network).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    pub fn pod(&self, uid: &str) -> Option<Arc<PodH>> {
        lock(&self.pods).get(uid).cloned()
    }

    /// The reconcile loop: admits new pods, stops deleted ones, keeps hosts files and
    /// ConfigMap/Secret volumes current, binds and removes claims' volumes.
    pub async fn run(self: Arc<Self>, store: Arc<Store>) {
        let mut rx = store.subscribe();
        loop {
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            rx.borrow_and_update();
            self.pass(&store).await;
            tokio::select! {
                r = rx.changed() => {
                    if r.is_err() { return; }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ = tokio::time::sleep(Duration::from_millis(1000)) => {}
            }
        }
    }

    async fn pass(self: &Arc<Self>, store: &Arc<Store>) {
        let (pods, _) = store.list(
            PODS,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let live: HashSet<&str> = pods.iter().map(|p| util::uid_of(p)).collect();
        let gone: Vec<Arc<PodH>> = {
            let mut map = lock(&self.pods);
            let dead: Vec<String> = map
                .keys()
                .filter(|u| !live.contains(u.as_str()))
                .cloned()
                .collect();
            dead.into_iter().filter_map(|u| map.remove(&u)).collect()
        };
        for h in gone {
            // Deleted without waiting for us (namespace deletion, grace 0): stop anyway.
            let g = if h.stop.borrow().is_some() {
                0
            } else {
                h.grace
            };
            h.stop.send_if_modified(|v| {
                if v.is_none() {
                    *v = Some(g);
                    true
                } else {
                    false
                }
            });
        }
        for pod in &pods {
            let uid = util::uid_of(pod).to_string();
            let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
            match self.pod(&uid) {
                Some(h) => {
                    if deleting {
                        let g = pod
                            .pointer("/metadata/deletionGracePeriodSeconds")
                            .and_then(Value::as_i64)
                            .unwrap_or(h.grace);
                        h.stop.send_if_modified(|v| match *v {
                            Some(cur) if cur <= g => false,
                            _ => {
                                *v = Some(g);
                                true
                            }
                        });
                    }
                }
                None => {
                    let terminal = matches!(s(pod, "/status/phase"), Some("Succeeded" | "Failed"));
                    if self.closing.load(Ordering::SeqCst) {
                        continue;
                    }
                    if deleting {
                        // Never ran here: nothing to stop.
                        store.finish_pod_deletion(util::ns_of(pod), name_of(pod), &uid);
                        continue;
                    }
                    if terminal {
                        continue;
                    }
                    if s(pod, "/spec/nodeName").is_none_or(str::is_empty)
                        && (store.scheduler.load(Ordering::Relaxed)
                            || !crate::scheduler::for_default_scheduler(pod))
                    {
                        continue; // waits for the scheduler
                    }
                    self.admit(store, pod);
                }
            }
        }
        self.refresh_projected(store);
        self.refresh_hosts(store);
        self.sync_claims(store).await;
    }

    fn admit(self: &Arc<Self>, store: &Arc<Store>, pod: &Value) {
        let uid = util::uid_of(pod).to_string();
        let ns = util::ns_of(pod).to_string();
        let name = name_of(pod).to_string();
        let node = s(pod, "/spec/nodeName")
            .filter(|n| !n.is_empty())
            .unwrap_or(NODE)
            .to_string();
        let containers = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| CSt {
                name: s(c, "/name").unwrap_or_default().to_string(),
                image: s(c, "/image").unwrap_or_default().to_string(),
                image_id: String::new(),
                current: None,
                previous: None,
                restarts: 0,
                state: json!({"waiting": {"reason": "ContainerCreating"}}),
                last_state: json!({}),
                ready: false,
                started: false,
                done: false,
                failed: false,
                ever_started: false,
            })
            .collect();
        let (tx, _) = watch::channel(None);
        let h = Arc::new(PodH {
            dir: self.dir.join("pods").join(&uid),
            uid: uid.clone(),
            ns: ns.clone(),
            name: name.clone(),
            state: Mutex::new(PodState {
                containers,
                ..Default::default()
            }),
            stop: tx,
            grace: pod
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30),
            scheduled_at: now_ns(),
            node: node.clone(),
            projected: Mutex::new(Vec::new()),
        });
        lock(&self.pods).insert(uid.clone(), h.clone());
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
        self.write_status(store, &h);
        let k = self.clone();
        let store = store.clone();
        let pod = pod.clone();
        tokio::spawn(async move {
            k.run_pod(&store, &h, pod).await;
        });
    }

    fn event(&self, store: &Store, h: &PodH, etype: &str, reason: &str, msg: &str) {
        let involved = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": h.name, "namespace": h.ns, "uid": h.uid}});
        store.record_event(&involved, etype, reason, msg, "kubelet");
    }

    /// Writes the pod's status from the kubelet's record (if the stored pod is still this one).
    fn write_status(&self, store: &Store, h: &PodH) {
        let status = {
            let st = lock(&h.state);
            pod_status(h, &st)
        };
        store.mutate(PODS, &h.ns, &h.name, |p| {
            if util::uid_of(p) == h.uid {
                p["status"] = status.clone();
            }
        });
    }

    fn set_container(
        &self,
        store: &Store,
        h: &PodH,
        ci: usize,
        f: impl FnOnce(&mut CSt, &mut PodState),
    ) {
        {
            let mut st = lock(&h.state);
            let mut c = st.containers[ci].clone();
            f(&mut c, &mut st);
            st.containers[ci] = c;
        }
        self.write_status(store, h);
    }

    async fn run_pod(self: &Arc<Self>, store: &Arc<Store>, h: &Arc<PodH>, pod: Value) {
        let mut stop = h.stop.subscribe();
        // Volumes whose sources are missing are retried, as the kubelet does.
        let prepared = loop {
            let r = tokio::select! {
                r = self.prepare(store, h, &pod) => Some(r),
                _ = stop.wait_for(|v| v.is_some()) => None,
            };
            match r {
                Some(Err((reason, msg))) if lock(&h.state).sandbox.is_none() => {
                    self.event(store, h, "Warning", reason, &msg);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = stop.wait_for(|v| v.is_some()) => break None,
                    }
                }
                other => break other,
            }
        };
        match prepared {
            Some(Ok(())) => {
                let n = lock(&h.state).containers.len();
                let runs = (0..n).map(|ci| {
                    let k = self.clone();
                    let store = store.clone();
                    let h = h.clone();
                    let pod = pod.clone();
                    tokio::spawn(async move { k.run_container(&store, &h, &pod, ci).await })
                });
                let all = futures_util::future::join_all(runs);
                tokio::pin!(all);
                let finished = tokio::select! {
                    _ = &mut all => true,
                    _ = stop.wait_for(|v| v.is_some()) => false,
                };
                if finished {
                    // Every container is done for good: release the sandbox, keep the
                    // containers for their logs until the pod is deleted.
                    self.stop_sandbox(h).await;
                    let _ = stop.wait_for(|v| v.is_some()).await;
                }
            }
            Some(Err((reason, msg))) => {
                self.event(store, h, "Warning", reason, &msg);
                let _ = stop.wait_for(|v| v.is_some()).await;
            }
            None => {}
        }
        let grace = stop.borrow().unwrap_or(0);
        self.kill_pod(store, h, grace).await;
    }

    /// Volumes, images of the sandbox, the sandbox itself, its IP and hosts file. A failure
    /// is the event's reason and message as a kubelet words them: `FailedMount` for a
    /// volume, `FailedCreatePodSandBox` for the sandbox (its image included).
    async fn prepare(
        &self,
        store: &Arc<Store>,
        h: &Arc<PodH>,
        pod: &Value,
    ) -> Result<(), (&'static str, String)> {
        const MOUNT: &str = "FailedMount";
        const SANDBOX: &str = "FailedCreatePodSandBox";
        std::fs::create_dir_all(&h.dir)
            .map_err(|e| (MOUNT, format!("{}: {e}", h.dir.display())))?;
        let projected = volumes::prepare(self, store, h, pod)
            .await
            .map_err(|e| (MOUNT, e))?;
        *lock(&h.projected) = projected;
        let sandbox = |e: String| (SANDBOX, format!("Failed to create pod sandbox: {e}"));
        self.ensure_image_simple(&self.pause_image)
            .await
            .map_err(|e| {
                sandbox(format!(
                    "failed to get sandbox image \"{}\": {e}",
                    self.pause_image
                ))
            })?;
        let hostname: String = s(pod, "/spec/hostname")
            .map(String::from)
            .unwrap_or_else(|| h.name.chars().take(63).collect());
        let domain =
            s(pod, "/spec/subdomain").map(|sub| format!("{sub}.{}.svc.cluster.local", h.ns));
        let mut labels = self.labels();
        labels.insert(LABEL_POD_UID.into(), h.uid.clone());
        labels.insert(LABEL_POD.into(), format!("{}/{}", h.ns, h.name));
        labels.insert(LABEL_CONTAINER.into(), "POD".into());
        let body = ContainerCreateBody {
            image: Some(self.pause_image.clone()),
            entrypoint: Some(vec!["sleep".into()]),
            cmd: Some(vec!["2147483647".into()]),
            hostname: Some(hostname),
            domainname: domain,
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(self.network.clone()),
                ipc_mode: Some("shareable".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = format!("fc-{}-{}-{}-pod", self.id, h.ns, short(&h.name, &h.uid));
        // An earlier attempt's sandbox may have been left behind (created, then no IP read
        // from it; or its removal after a failed start not done yet): under its name, every
        // retry would be refused as a conflict and the pod would never start.
        self.remove_named(&name).await;
        let id = self
            .create_start(&name, body)
            .await
            .map_err(|e| sandbox(format!("creating the sandbox container: {e}")))?;
        let ip = self
            .docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.network_settings)
            .and_then(|n| n.networks)
            .and_then(|n| n.get(&self.network).and_then(|e| e.ip_address.clone()))
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| sandbox("the pod sandbox has no IP".to_string()))?;
        {
            let mut st = lock(&h.state);
            st.sandbox = Some(id);
            st.ip = Some(ip);
            st.sandbox_ready = true;
            st.started_at = Some(now_ns());
        }
        self.refresh_hosts(store);
        self.write_status(store, h);
        Ok(())
    }

    async fn create_start(&self, name: &str, body: ContainerCreateBody) -> Result<String, String> {
        if self.closing.load(Ordering::SeqCst) {
            return Err("the fake cluster is shutting down".into());
        }
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.to_string()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| describe(&e))?;
        self.docker
            .start_container(&created.id, None)
            .await
            .map_err(|e| {
                let msg = describe(&e);
                let d = self.docker.clone();
                let id = created.id.clone();
                tokio::spawn(async move {
                    let _ = d
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                ..Default::default()
                            }),
                        )
                        .await;
                });
                msg
            })?;
        Ok(created.id)
    }

    /// Removes the container `name` if there is one (running or not).
    async fn remove_named(&self, name: &str) {
        let _ = self
            .docker
            .remove_container(
                name,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
    }

    async fn ensure_image_simple(&self, image: &str) -> Result<(), String> {
        if self.docker.inspect_image(image).await.is_ok() {
            return Ok(());
        }
        self.pull(image).await
    }

    async fn pull(&self, image: &str) -> Result<(), String> {
        let (repo, tag) = split_image(image);
        let mut st = self.docker.create_image(
            Some(CreateImageOptions {
                from_image: Some(repo),
                tag: Some(tag),
                ..Default::default()
            }),
            None,
            None,
        );
        while let Some(r) = st.next().await {
            match r {
                Err(e) => return Err(describe(&e)),
                Ok(info) => {
                    if let Some(e) = info.error_detail.and_then(|d| d.message) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Image pull policy. `Ok(image user)` when the image is there.
    async fn ensure_image(
        &self,
        store: &Store,
        h: &PodH,
        c: &Value,
    ) -> Result<String, (String, String)> {
        let image = s(c, "/image").unwrap_or_default();
        let (_, tag) = split_image(image);
        let policy =
            s(c, "/imagePullPolicy").unwrap_or(if tag == "latest" && !image.contains('@') {
                "Always"
            } else {
                "IfNotPresent"
            });
        let user_of =
            |i: bollard::models::ImageInspect| i.config.and_then(|c| c.user).unwrap_or_default();
        if let Ok(i) = self.docker.inspect_image(image).await {
            self.event(
                store,
                h,
                "Normal",
                "Pulled",
                &format!("Container image \"{image}\" already present on machine"),
            );
            return Ok(user_of(i));
        }
        if policy == "Never" {
            let msg =
                format!("Container image \"{image}\" is not present with pull policy of Never");
            self.event(store, h, "Warning", "ErrImageNeverPull", &msg);
            return Err(("ErrImageNeverPull".into(), msg));
        }
        self.event(
            store,
            h,
            "Normal",
            "Pulling",
            &format!("Pulling image \"{image}\""),
        );
        match self.pull(image).await {
            Ok(()) => {
                self.event(
                    store,
                    h,
                    "Normal",
                    "Pulled",
                    &format!("Successfully pulled image \"{image}\""),
                );
                let i = self
                    .docker
                    .inspect_image(image)
                    .await
                    .map_err(|e| ("ErrImagePull".to_string(), describe(&e)))?;
                Ok(user_of(i))
            }
            Err(e) => {
                let msg = format!("Failed to pull image \"{image}\": {e}");
                self.event(store, h, "Warning", "Failed", &msg);
                Err(("ErrImagePull".into(), msg))
            }
        }
    }

    /// The instances of one container, restarts included, until it is done for good or the
    /// pod stops.
    async fn run_container(
        self: &Arc<Self>,
        store: &Arc<Store>,
        h: &Arc<PodH>,
        pod: &Value,
        ci: usize,
    ) {
        let c = pod["spec"]["containers"][ci].clone();
        let cname = s(&c, "/name").unwrap_or_default().to_string();
        let policy = s(pod, "/spec/restartPolicy")
            .unwrap_or("Always")
            .to_string();
        let mut stop = h.stop.subscribe();
        let backoff = self.backoff;
        loop {
            if stop.borrow().is_some() {
                return;
            }
            // Image.
            let image_user = match self.ensure_image(store, h, &c).await {
                Ok(u) => u,
                Err((reason, msg)) => {
                    self.set_container(store, h, ci, |cs, _| {
                        cs.state = json!({"waiting": {"reason": reason, "message": msg}});
                    });
                    if reason == "ErrImagePull" {
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = stop.wait_for(|v| v.is_some()) => return,
                        }
                        let image = s(&c, "/image").unwrap_or_default();
                        let msg = format!("Back-off pulling image \"{image}\"");
                        self.event(store, h, "Normal", "BackOff", &msg);
                        self.set_container(store, h, ci, |cs, _| {
                            cs.state =
                                json!({"waiting": {"reason": "ImagePullBackOff", "message": msg}});
                        });
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.max(Duration::from_millis(500))) => continue,
                        _ = stop.wait_for(|v| v.is_some()) => return,
                    }
                }
            };
            // Config.
            let body = match self.container_body(store, h, pod, &c, &image_user) {
                Ok(b) => b,
                Err(msg) => {
                    self.event(store, h, "Warning", "Failed", &format!("Error: {msg}"));
                    self.set_container(store, h, ci, |cs, _| {
                        cs.state = json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}});
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.max(Duration::from_millis(500))) => continue,
                        _ = stop.wait_for(|v| v.is_some()) => return,
                    }
                }
            };
            let k = lock(&h.state).containers[ci].restarts;
            let name = format!(
                "fc-{}-{}-{}-{}-{k}",
                self.id,
                h.ns,
                short(&h.name, &h.uid),
                cname
            );
            // An earlier attempt of the same instance may have been left behind.
            self.remove_named(&name).await;
            if stop.borrow().is_some() {
                return;
            }
            let started = self.create_start(&name, body).await;
            let id = match started {
                Ok(id) => id,
                Err(msg) => {
                    // The runtime could not start the process (e.g. no such executable).
                    let now = fmt_time(now_ns());
                    self.event(store, h, "Warning", "Failed", &format!("Error: {msg}"));
                    let id = self.find_container(&name).await;
                    let restart = policy != "Never";
                    self.set_container(store, h, ci, |cs, _| {
                        let term = json!({"exitCode": 128, "reason": "StartError", "message": msg, "startedAt": "1970-01-01T00:00:00Z", "finishedAt": now, "containerID": id.as_ref().map(|i| format!("docker://{i}"))});
                        cs.previous = cs.current.take();
                        cs.current = id;
                        cs.ready = false;
                        cs.started = false;
                        cs.failed = true;
                        if restart {
                            cs.last_state = json!({"terminated": term});
                            cs.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container={} pod={}_{}({})", cs.name, h.name, h.ns, h.uid)}});
                            cs.restarts += 1;
                        } else {
                            cs.state = json!({"terminated": term});
                            cs.done = true;
                        }
                    });
                    if !restart {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => continue,
                        _ = stop.wait_for(|v| v.is_some()) => return,
                    }
                }
            };
            let info = self
                .docker
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
                .ok();
            let started_at = info
                .as_ref()
                .and_then(|i| i.state.as_ref())
                .and_then(|s| s.started_at.clone())
                .and_then(|t| util::parse_time(&t))
                .unwrap_or_else(now_ns);
            let image_id = info
                .as_ref()
                .and_then(|i| i.image.clone())
                .unwrap_or_default();
            self.event(
                store,
                h,
                "Normal",
                "Created",
                &format!("Created container {cname}"),
            );
            self.event(
                store,
                h,
                "Normal",
                "Started",
                &format!("Started container {cname}"),
            );
            {
                let id = id.clone();
                self.set_container(store, h, ci, move |cs, _| {
                    if cs.current.as_ref() != Some(&id) {
                        let old = cs.previous.replace(cs.current.take().unwrap_or_default());
                        if let Some(old) = old.filter(|o| !o.is_empty()) {
                            let d = self.docker.clone();
                            tokio::spawn(async move {
                                let _ = d
                                    .remove_container(
                                        &old,
                                        Some(RemoveContainerOptions {
                                            force: true,
                                            ..Default::default()
                                        }),
                                    )
                                    .await;
                            });
                        }
                        if cs.previous.as_deref() == Some("") {
                            cs.previous = None;
                        }
                    }
                    cs.current = Some(id.clone());
                    cs.image_id = format!("docker://{image_id}");
                    cs.state = json!({"running": {"startedAt": fmt_time(started_at)}});
                    cs.ready = true;
                    cs.started = true;
                    cs.ever_started = true;
                });
            }
            // Wait for the instance to end.
            let mut wait = self.docker.wait_container(
                &id,
                Some(WaitContainerOptions {
                    condition: "not-running".into(),
                }),
            );
            let _ = wait.next().await;
            let info = self
                .docker
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
                .ok();
            let st = info
                .as_ref()
                .and_then(|i| i.state.clone())
                .unwrap_or_default();
            // Docker may record the cgroup's OOM event after the exit (on a loaded machine,
            // seconds after: 5 s were not enough once, with two test suites and CPU burners
            // on two cores), or not at all (1 run in 30 beside two burners and two fuzzers:
            // its OOM notification raced the exit). The kernel's own record is the sign that
            // does not race: a SIGKILLed container with a memory limit is looked at again, its
            // OOMKilled flag and the kernel log, for up to 15 s, before it counts as not
            // OOM-killed. (The real kubelet's OOM watcher reads the same kernel log.)
            let mut st = st;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            let limited = c.pointer("/resources/limits/memory").is_some();
            while st.exit_code == Some(137)
                && st.oom_killed != Some(true)
                && limited
                && tokio::time::Instant::now() < deadline
            {
                let cid = id.clone();
                if tokio::task::spawn_blocking(move || kernel_saw_oom(&cid))
                    .await
                    .unwrap_or(false)
                {
                    st.oom_killed = Some(true);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                if let Some(again) = self
                    .docker
                    .inspect_container(&id, None::<InspectContainerOptions>)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                {
                    st = again;
                }
            }
            let exit = st.exit_code.unwrap_or(0) as i32;
            let oom = st.oom_killed == Some(true);
            let finished = st
                .finished_at
                .as_deref()
                .and_then(util::parse_time)
                .unwrap_or_else(now_ns);
            let reason = if oom {
                "OOMKilled"
            } else if exit == 0 {
                "Completed"
            } else {
                "Error"
            };
            let stopping = stop.borrow().is_some();
            let restart = !stopping
                && match policy.as_str() {
                    "Never" => false,
                    "OnFailure" => exit != 0,
                    _ => true,
                };
            let term = json!({"exitCode": exit, "reason": reason, "startedAt": fmt_time(started_at), "finishedAt": fmt_time(finished), "containerID": format!("docker://{id}")});
            self.set_container(store, h, ci, |cs, _| {
                cs.ready = false;
                cs.started = false;
                cs.failed = exit != 0;
                if restart {
                    cs.last_state = json!({"terminated": term});
                    cs.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container={} pod={}_{}({})", cs.name, h.name, h.ns, h.uid)}});
                    cs.restarts += 1;
                } else {
                    cs.state = json!({"terminated": term});
                    cs.done = !stopping;
                }
            });
            if !restart {
                return;
            }
            self.event(
                store,
                h,
                "Warning",
                "BackOff",
                &format!(
                    "Back-off restarting failed container {cname} in pod {}_{}({})",
                    h.name, h.ns, h.uid
                ),
            );
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|v| v.is_some()) => return,
            }
        }
    }

    async fn find_container(&self, name: &str) -> Option<String> {
        self.docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.id)
    }

    /// The Docker spec of one instance of container `c`.
    fn container_body(
        &self,
        store: &Store,
        h: &PodH,
        pod: &Value,
        c: &Value,
        image_user: &str,
    ) -> Result<ContainerCreateBody, String> {
        let (sandbox, ip, hosts_path) = {
            let st = lock(&h.state);
            (
                st.sandbox.clone().unwrap_or_default(),
                st.ip.clone().unwrap_or_default(),
                h.dir.join("hosts"),
            )
        };
        let key = |kind: &str, name: &str, key: &str| -> Option<Vec<u8>> {
            volumes::source_data(store, kind, &h.ns, name)?
                .into_iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
        };
        let all = |kind: &str, name: &str| volumes::source_data(store, kind, &h.ns, name);
        let fields = spec::PodFields {
            pod,
            ip: &ip,
            host_ip: HOST_IP,
        };
        let env = spec::env_of(c, &fields, &key, &all)?;
        let vars: BTreeMap<String, String> = env.iter().cloned().collect();
        let list = |p: &str| -> Option<Vec<String>> {
            c.get(p).and_then(Value::as_array).map(|a| {
                a.iter()
                    .map(|x| spec::expand(x.as_str().unwrap_or_default(), &vars))
                    .collect()
            })
        };
        let user = spec::user_of(pod, c, image_user, &h.name)?;
        let mut groups: Vec<String> = Vec::new();
        if let Some(g) = pod
            .pointer("/spec/securityContext/fsGroup")
            .and_then(Value::as_i64)
        {
            groups.push(g.to_string());
        }
        for g in pod
            .pointer("/spec/securityContext/supplementalGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
        {
            groups.push(g.to_string());
        }
        let mut mounts = volumes::mounts(self, h, pod, c)?;
        mounts.push(Mount {
            target: Some("/etc/hosts".into()),
            source: Some(hosts_path.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            ..Default::default()
        });
        let memory =
            spec::quantity(c, "/resources/limits/memory").and_then(|q| spec::parse_bytes(&q));
        let cpus =
            spec::quantity(c, "/resources/limits/cpu").and_then(|q| spec::parse_nano_cpus(&q));
        let caps = |k: &str| -> Option<Vec<String>> {
            c.pointer(&format!("/securityContext/capabilities/{k}"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
        };
        let mut labels = self.labels();
        labels.insert(LABEL_POD_UID.into(), h.uid.clone());
        labels.insert(LABEL_POD.into(), format!("{}/{}", h.ns, h.name));
        labels.insert(
            LABEL_CONTAINER.into(),
            s(c, "/name").unwrap_or_default().into(),
        );
        let command = list("command");
        let args = list("args");
        Ok(ContainerCreateBody {
            image: Some(s(c, "/image").unwrap_or_default().to_string()),
            cmd: match (&command, args) {
                (_, Some(a)) => Some(a),
                // A command without args drops the image's CMD (Docker does so when the
                // entrypoint is given).
                (Some(_), None) => None,
                (None, None) => None,
            },
            entrypoint: command,
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: s(c, "/workingDir").map(String::from),
            user,
            labels: Some(labels),
            tty: c.get("tty").and_then(Value::as_bool),
            open_stdin: c.get("stdin").and_then(Value::as_bool),
            stop_timeout: Some(h.grace),
            host_config: Some(HostConfig {
                network_mode: Some(format!("container:{sandbox}")),
                ipc_mode: Some(format!("container:{sandbox}")),
                mounts: Some(mounts),
                memory,
                memory_swap: memory,
                nano_cpus: cpus,
                group_add: (!groups.is_empty()).then_some(groups),
                privileged: c
                    .pointer("/securityContext/privileged")
                    .and_then(Value::as_bool),
                readonly_rootfs: c
                    .pointer("/securityContext/readOnlyRootFilesystem")
                    .and_then(Value::as_bool),
                cap_add: caps("add"),
                cap_drop: caps("drop"),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn stop_sandbox(&self, h: &PodH) {
        let sandbox = lock(&h.state).sandbox.clone();
        if let Some(id) = sandbox {
            let _ = self
                .docker
                .stop_container(
                    &id,
                    Some(StopContainerOptions {
                        t: Some(0),
                        signal: None,
                    }),
                )
                .await;
        }
        lock(&h.state).sandbox_ready = false;
    }

    /// Stops the pod's containers (TERM, `grace` seconds, KILL), records their final
    /// states, removes everything of the pod, then the pod object.
    async fn kill_pod(&self, store: &Store, h: &PodH, grace: i64) {
        let running: Vec<(usize, String, String)> = {
            let mut st = lock(&h.state);
            st.stopping = true;
            st.containers
                .iter()
                .enumerate()
                .filter(|(_, c)| c.state.get("running").is_some())
                .filter_map(|(i, c)| c.current.clone().map(|id| (i, id, c.name.clone())))
                .collect()
        };
        for (_, _, name) in &running {
            self.event(
                store,
                h,
                "Normal",
                "Killing",
                &format!("Stopping container {name}"),
            );
        }
        let stops = running.iter().map(|(ci, id, _)| async move {
            let _ = self
                .docker
                .stop_container(
                    id,
                    Some(StopContainerOptions {
                        t: Some(grace.clamp(0, i32::MAX as i64) as i32),
                        signal: None,
                    }),
                )
                .await;
            let info = self
                .docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .ok();
            (*ci, id.clone(), info.and_then(|i| i.state))
        });
        let results = futures_util::future::join_all(stops).await;
        {
            let mut st = lock(&h.state);
            for (ci, id, cstate) in results {
                let cs = &mut st.containers[ci];
                let cstate = cstate.unwrap_or_default();
                let exit = cstate.exit_code.unwrap_or(137);
                let started = cs
                    .state
                    .pointer("/running/startedAt")
                    .cloned()
                    .unwrap_or(Value::Null);
                cs.state = json!({"terminated": {"exitCode": exit, "reason": if exit == 0 { "Completed" } else { "Error" }, "startedAt": started, "finishedAt": cstate.finished_at.as_deref().and_then(util::parse_time).map(fmt_time).unwrap_or_else(|| fmt_time(now_ns())), "containerID": format!("docker://{id}")}});
                cs.ready = false;
                cs.started = false;
            }
        }
        self.write_status(store, h);
        // Remove every container of the pod (instances and sandbox).
        if let Ok(cs) = self
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Self::filter(format!("{LABEL_POD_UID}={}", h.uid)),
                ..Default::default()
            }))
            .await
        {
            let rm = cs.into_iter().filter_map(|c| c.id).map(|id| async move {
                let _ = self
                    .docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptions {
                            force: true,
                            v: true,
                            ..Default::default()
                        }),
                    )
                    .await;
            });
            futures_util::future::join_all(rm).await;
        }
        volumes::remove_pod_volumes(self, h).await;
        let _ = std::fs::remove_dir_all(&h.dir);
        lock(&self.pods).remove(&h.uid);
        store.finish_pod_deletion(&h.ns, &h.name, &h.uid);
        self.refresh_hosts(store);
    }

    /// Rewrites every pod's `/etc/hosts` that changed.
    pub fn refresh_hosts(&self, store: &Store) {
        let _g = lock(&self.hosts_lock);
        let handles: Vec<Arc<PodH>> = lock(&self.pods).values().cloned().collect();
        let mut entries = Vec::new();
        let mut mine = Vec::new();
        for h in &handles {
            let Some(pod) = store.get(PODS, &h.ns, &h.name) else {
                continue;
            };
            if util::uid_of(&pod) != h.uid {
                continue;
            }
            let (ip, stopping) = {
                let st = lock(&h.state);
                (st.ip.clone(), st.stopping)
            };
            let Some(ip) = ip else { continue };
            let labels: BTreeMap<String, String> = pod
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            let e = spec::HostEntry {
                ns: h.ns.clone(),
                ip,
                name: h.name.clone(),
                hostname: s(&pod, "/spec/hostname").map(String::from),
                subdomain: s(&pod, "/spec/subdomain").map(String::from),
                labels,
            };
            if !stopping && pod.pointer("/metadata/deletionTimestamp").is_none() {
                entries.push(spec::HostEntry {
                    ns: e.ns.clone(),
                    ip: e.ip.clone(),
                    name: e.name.clone(),
                    hostname: e.hostname.clone(),
                    subdomain: e.subdomain.clone(),
                    labels: e.labels.clone(),
                });
            }
            mine.push((h.clone(), e));
        }
        let (svcs, _) = store.list(
            SERVICES,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let svcs: Vec<spec::SvcEntry> = svcs
            .iter()
            .map(|v| spec::SvcEntry {
                ns: util::ns_of(v).to_string(),
                name: name_of(v).to_string(),
                headless: s(v, "/spec/clusterIP") == Some("None"),
                selector: v
                    .pointer("/spec/selector")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        for (h, e) in mine {
            let text = spec::hosts_file(&e, &entries, &svcs);
            let mut st = lock(&h.state);
            if st.hosts != text {
                // In place (a bind-mounted file cannot be replaced by a rename).
                if std::fs::write(h.dir.join("hosts"), &text).is_ok() {
                    st.hosts = text;
                }
            }
        }
    }

    fn refresh_projected(&self, store: &Store) {
        let handles: Vec<Arc<PodH>> = lock(&self.pods).values().cloned().collect();
        for h in handles {
            let pv = lock(&h.projected);
            for p in pv.iter() {
                let _ = volumes::write_projected(store, &h.ns, p);
            }
        }
    }

    /// Binds claims at once; removes the Docker volumes of deleted claims.
    async fn sync_claims(&self, store: &Store) {
        let Some(pvcs) = crate::resources::find("", "v1", "persistentvolumeclaims", &[]) else {
            return;
        };
        let (claims, _) = store.list(
            pvcs,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let names: HashSet<String> = claims
            .iter()
            .map(|c| volumes::claim_volume(self, util::ns_of(c), name_of(c)))
            .collect();
        let Ok(vs) = self
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Self::filter(format!("{LABEL_ID}={}", self.id)),
            }))
            .await
        else {
            return;
        };
        for v in vs.volumes.unwrap_or_default() {
            if v.labels.contains_key(LABEL_CLAIM) && !names.contains(&v.name) {
                let _ = self
                    .docker
                    .remove_volume(&v.name, None::<RemoveVolumeOptions>)
                    .await;
            }
        }
    }

    async fn create_volume(
        &self,
        name: &str,
        opts: HashMap<String, String>,
        claim: Option<&str>,
    ) -> Result<(), String> {
        let extra = claim.map(|c| (LABEL_CLAIM, c.to_string()));
        self.create_volume_labelled(name, opts, extra).await
    }

    async fn create_volume_for_pod(
        &self,
        name: &str,
        opts: HashMap<String, String>,
        uid: &str,
    ) -> Result<(), String> {
        self.create_volume_labelled(name, opts, Some((LABEL_POD_UID, uid.to_string())))
            .await
    }

    async fn create_volume_labelled(
        &self,
        name: &str,
        opts: HashMap<String, String>,
        extra: Option<(&str, String)>,
    ) -> Result<(), String> {
        let mut labels = self.labels();
        if let Some((k, v)) = extra {
            labels.insert(k.to_string(), v);
        }
        self.docker
            .create_volume(VolumeCreateRequest {
                name: Some(name.to_string()),
                driver: Some("local".into()),
                driver_opts: (!opts.is_empty()).then_some(opts),
                labels: Some(labels),
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|e| describe(&e))
    }

    async fn remove_volume(&self, name: &str) {
        match self
            .docker
            .remove_volume(name, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(()) => {}
            Err(e) if not_found(&e) => {}
            Err(_) => {}
        }
    }

    /// The Docker id of a container instance for logs/exec: `previous` or current.
    pub fn container_id(&self, uid: &str, container: &str, previous: bool) -> Option<String> {
        let h = self.pod(uid)?;
        let st = lock(&h.state);
        let c = st.containers.iter().find(|c| c.name == container)?;
        if previous {
            c.previous.clone()
        } else {
            c.current.clone()
        }
    }

    /// The waiting reason of a container that has no instance yet.
    pub fn waiting_reason(&self, uid: &str, container: &str) -> String {
        self.pod(uid)
            .and_then(|h| {
                let st = lock(&h.state);
                st.containers
                    .iter()
                    .find(|c| c.name == container)
                    .and_then(|c| s(&c.state, "/waiting/reason").map(String::from))
            })
            .unwrap_or_else(|| "ContainerCreating".into())
    }
}

/// `repo`, `tag` of an image reference (`latest` when untagged).
fn split_image(image: &str) -> (String, String) {
    if let Some((repo, digest)) = image.split_once('@') {
        return (repo.to_string(), digest.to_string());
    }
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_string(),
            image[slash + i + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

/// A Docker-name-safe short form of a pod name, unique by uid.
fn short(name: &str, uid: &str) -> String {
    let n: String = name.chars().take(40).collect();
    format!("{n}-{}", &uid[..uid.len().min(8)])
}

fn pod_status(h: &PodH, st: &PodState) -> Value {
    let sched = fmt_time(h.scheduled_at);
    let statuses: Vec<Value> = st
        .containers
        .iter()
        .map(|c| {
            let mut v = json!({
                "name": c.name,
                "image": c.image,
                "imageID": c.image_id,
                "ready": c.ready,
                "started": c.started,
                "restartCount": c.restarts,
                "state": c.state,
                "lastState": c.last_state,
            });
            if let Some(id) = &c.current {
                v["containerID"] = json!(format!("docker://{id}"));
            }
            v
        })
        .collect();
    let all_started = st.containers.iter().all(|c| c.ever_started || c.done);
    let all_done = st.containers.iter().all(|c| c.done);
    let any_failed = st.containers.iter().any(|c| c.failed);
    let any_running = st
        .containers
        .iter()
        .any(|c| c.state.get("running").is_some());
    let finished = (all_done && !st.containers.is_empty())
        || (st.stopping
            && !any_running
            && st
                .containers
                .iter()
                .all(|c| c.state.get("terminated").is_some()));
    let phase = if finished {
        if any_failed { "Failed" } else { "Succeeded" }
    } else if all_started && st.started_at.is_some() {
        "Running"
    } else {
        "Pending"
    };
    let all_ready = !st.containers.is_empty() && st.containers.iter().all(|c| c.ready);
    let unready: Vec<&str> = st
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let now = fmt_time(now_ns());
    let mut ready = json!({"type": "Ready", "status": if all_ready { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now});
    let mut cready = json!({"type": "ContainersReady", "status": if all_ready { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now});
    if !all_ready {
        let reason = if matches!(phase, "Succeeded" | "Failed") {
            "PodCompleted"
        } else {
            "ContainersNotReady"
        };
        ready["reason"] = json!(reason);
        cready["reason"] = json!(reason);
        if reason == "ContainersNotReady" {
            let m = format!("containers with unready status: [{}]", unready.join(" "));
            ready["message"] = json!(m.clone());
            cready["message"] = json!(m);
        }
    }
    let mut status = json!({
        "phase": phase,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": if st.sandbox_ready { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": sched},
            {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
            ready,
            cready,
            {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": sched},
        ],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "startTime": sched,
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    });
    if let Some(ip) = &st.ip {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    let _ = &h.node;
    status
}

/// Whether the kernel's log holds an OOM kill in container `id`'s memory cgroup: the record
/// `oom-kill:constraint=CONSTRAINT_MEMCG,…,oom_memcg=/docker/<id>,…` (or `…docker-<id>.scope`
/// under systemd) the kernel writes for every OOM kill. Read from `/dev/kmsg` without
/// waiting; `false` when it cannot be read (not root).
pub fn kernel_saw_oom(id: &str) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    const EPIPE: i32 = 32;
    let Ok(mut kmsg) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open("/dev/kmsg")
    else {
        return false;
    };
    let has = |rec: &[u8], what: &[u8]| rec.windows(what.len()).any(|w| w == what);
    // One record per read; a record longer than the buffer is an error (EINVAL): the
    // kernel's are at most 1 KiB of text plus the dictionary.
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                let rec = &buf[..n];
                if has(rec, b"oom-kill:") && has(rec, id.as_bytes()) {
                    return true;
                }
            }
            // Overwritten while reading: the next read gives the oldest record left.
            Err(e) if e.raw_os_error() == Some(EPIPE) => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images() {
        assert_eq!(split_image("busybox"), ("busybox".into(), "latest".into()));
        assert_eq!(
            split_image("127.0.0.1:5000/a/b:1.2"),
            ("127.0.0.1:5000/a/b".into(), "1.2".into())
        );
        assert_eq!(
            split_image("127.0.0.1:5000/a"),
            ("127.0.0.1:5000/a".into(), "latest".into())
        );
    }
}
