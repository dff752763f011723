//! `fake-cluster`: an in-memory Kubernetes API server over plain HTTP, with a Job,
//! StatefulSet and MPI Operator (kubeflow.org/v2beta1) controller, a garbage collector, a
//! kubelet that runs pods whose logs are computed on the fly, and fault injection.
//!
//! ```no_run
//! let fc = fake_cluster::FakeCluster::start(fake_cluster::Options { mpi_operator: true, ..Default::default() }).unwrap();
//! fc.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig")).unwrap();
//! println!("{}", fc.url());
//! ```
//!
//! See README.md for the served API, the kubelet's env protocol and the control endpoints.

pub mod controllers;
pub mod docker;
pub mod error;
pub mod kubelet;
pub mod kueue;
pub mod logs;
pub mod mpi;
pub mod objects;
pub mod patch;
pub mod resources;
pub mod scheduler;
pub mod schema;
pub mod selectors;
mod server;
pub mod store;
pub mod table;
pub mod trainer;
pub mod util;
pub mod volcano;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use error::ApiError;
use resources::ResId;
use selectors::{FieldSelector, LabelSelector};
use store::{Store, WriteOpts};

/// Faults to inject; changeable at runtime (`FakeCluster::set_faults`, `POST /fake/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Fraction of all API requests answered 500 or 429 (+ `Retry-After: 1`) at random.
    pub fail_rate: f64,
    /// Fraction of pod log requests answered 500 or 429 (in addition to `fail_rate`).
    pub log_fail_rate: f64,
    /// Cut every log stream after this many lines (0: never), alternating a clean end of
    /// body and an abrupt mid-line cut.
    pub cut_logs_every: u64,
    /// Watches end after this many seconds and history older than that answers 410 (0: never).
    pub watch_expire_secs: f64,
    /// Delay before answering each API request.
    pub delay_ms: u64,
    /// `VERB:RESOURCE` rules answered 403 (`list:pods`, `get:pods/log`, `*:secrets`, `create:*`).
    pub forbid: Vec<String>,
    /// Pods whose node stops answering for their logs: `(pod name, n)` — the pod's first `n`
    /// log requests are answered, every later one is a 500 (as from a kubelet that cannot be
    /// reached). Counted from when the rule is set.
    pub logs_answered: Vec<(String, u64)>,
}

/// Which kubelet runs the pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KubeletMode {
    /// Containers are simulated; their behaviour and logs come from `FAKE_KUBELET_*` env.
    #[default]
    Synthetic,
    /// Pods become real containers on the Docker engine the docker CLI would use
    /// (`DOCKER_HOST`, a Docker context, or the default socket).
    Docker,
}

/// How to start the fake cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which kubelet runs pods (synthetic by default).
    pub kubelet: KubeletMode,
    /// Docker kubelet: the image of each pod's sandbox container (it runs `sleep`); default
    /// `$FAKE_CLUSTER_PAUSE_IMAGE`, else `$HVDCTL_TEST_BUSYBOX_IMAGE`, else `busybox:latest`.
    pub pause_image: Option<String>,
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve `kubeflow.org/v2beta1` MPIJobs and run the MPI Operator ([`mpi::MpiOperator`],
    /// added to [`Options::operators`]).
    pub mpi_operator: bool,
    /// Serve Kubeflow Trainer v2's TrainJob/TrainingRuntime/ClusterTrainingRuntime and
    /// JobSet, and run the Trainer and JobSet controllers ([`trainer`]).
    pub trainer: bool,
    /// Run Kueue (v0.19, `kueue.x-k8s.io/v1beta2`) with one ClusterQueue `gpu` of this quota
    /// and a LocalQueue `team-a` in every namespace ([`kueue`]); `--kueue`.
    pub kueue: Option<kueue::Quota>,
    /// Run Volcano's scheduler and serve its PodGroups and Queues ([`volcano`]); the MPI
    /// Operator then runs as with `--gang-scheduling=volcano` and the Trainer's volcano plugin
    /// makes PodGroups; `--volcano`.
    pub volcano: bool,
    /// Operators: each serves its custom resources and reconciles them
    /// ([`controllers::Operator`]).
    pub operators: Vec<Arc<dyn controllers::Operator>>,
    pub faults: Faults,
    /// Time a pod stays Pending (ContainerCreating) after being scheduled.
    pub kubelet_delay: Duration,
    /// Time between a container's crash and its restart (CrashLoopBackOff). The kubelet's
    /// first backoff is 10 s (`pkg/kubelet/kubelet.go`, `backOffPeriod`); the fake keeps it
    /// short for fast tests but over a second, as a client may rely on: container states carry
    /// whole seconds (`finishedAt`), so only a restart more than a second after the end tells
    /// the two instances' log lines apart by their timestamps.
    pub restart_backoff: Duration,
    /// Watch events kept for resuming watches; older resourceVersions answer 410.
    pub history_limit: usize,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK when idle.
    pub bookmark_interval: Duration,
    /// Node objects and the scheduler (`count` 0, the default: no Node objects, every pod
    /// runs whatever it requests).
    pub nodes: scheduler::NodeSpec,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kubelet: KubeletMode::Synthetic,
            pause_image: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mpi_operator: false,
            trainer: false,
            kueue: None,
            volcano: false,
            operators: Vec::new(),
            faults: Faults::default(),
            kubelet_delay: Duration::from_millis(100),
            restart_backoff: Duration::from_millis(1500),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(1),
            nodes: scheduler::NodeSpec::default(),
        }
    }
}

/// Request counters.
#[derive(Default)]
pub struct Stats {
    total: AtomicU64,
    by: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    fn count(&self, verb: &str, resource: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut m = self.by.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(verb.to_string()).or_default() += 1;
        *m.entry(format!("{verb} {resource}")).or_default() += 1;
    }

    fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        self.by.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn to_json(&self) -> Value {
        json!({"total": self.total.load(Ordering::Relaxed), "by": *self.by.lock().unwrap_or_else(|p| p.into_inner())})
    }
}

/// Shared state of a running fake cluster.
pub struct Inner {
    pub store: Arc<Store>,
    /// The operators this cluster runs.
    pub operators: Vec<Arc<dyn controllers::Operator>>,
    pub kubelet: Arc<kubelet::Kubelet>,
    /// The Docker kubelet, when pods run as real containers.
    pub docker: Option<Arc<docker::DockerKubelet>>,
    faults: Mutex<Faults>,
    pub stats: Stats,
    pub addr: String,
    pub cuts: Arc<AtomicU64>,
    /// Log requests per pod name since the faults were last set (`Faults::logs_answered`).
    pub pod_log_requests: Mutex<BTreeMap<String, u64>>,
    pub bookmark_interval: Duration,
}

impl Inner {
    pub fn faults(&self) -> Faults {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_faults(&self, f: Faults) {
        let age = (f.watch_expire_secs > 0.0).then(|| Duration::from_secs_f64(f.watch_expire_secs));
        *self
            .store
            .history_max_age
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = age;
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = f;
        self.pod_log_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Counts a log request of `pod`; whether `Faults::logs_answered` refuses it.
    pub fn pod_log_refused(&self, faults: &Faults, pod: &str) -> bool {
        let Some((_, n)) = faults.logs_answered.iter().find(|(p, _)| p == pod) else {
            return false;
        };
        let mut counts = self
            .pod_log_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let c = counts.entry(pod.to_string()).or_default();
        *c += 1;
        *c > *n
    }
}

/// A running fake cluster. Dropping it stops the server.
pub struct FakeCluster {
    inner: Arc<Inner>,
    url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The error of `FakeCluster::start`.
pub type StartError = std::io::Error;

impl FakeCluster {
    /// Binds, then serves on a thread with its own tokio runtime (usable from sync tests).
    pub fn start(opts: Options) -> Result<FakeCluster, StartError> {
        let listener = std::net::TcpListener::bind(opts.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let mut operators = opts.operators.clone();
        if opts.mpi_operator {
            operators.push(Arc::new(mpi::MpiOperator));
        }
        if opts.trainer {
            operators.extend(trainer::operators());
        }
        if let Some(q) = &opts.kueue {
            operators.push(Arc::new(kueue::Kueue::new(q.clone())));
        }
        if opts.volcano {
            operators.push(Arc::new(volcano::Volcano));
        }
        let custom: Vec<ResId> = operators
            .iter()
            .flat_map(|o| o.resources())
            .map(resources::register)
            .collect();
        let store = Arc::new(Store::new(custom, opts.history_limit));
        let _ = store.admission.set(operators.clone());
        for op in &operators {
            op.start(&store);
        }
        if opts.nodes.count > 0 {
            opts.nodes
                .validate()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            scheduler::create_nodes(&store, resources::NODES, &opts.nodes);
            store
                .scheduler
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let kubelet = Arc::new(kubelet::Kubelet::new(
            opts.kubelet_delay.as_nanos() as i64,
            opts.restart_backoff.as_nanos() as i64,
        ));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("fake-cluster")
            .build()?;
        let docker = match opts.kubelet {
            KubeletMode::Synthetic => None,
            KubeletMode::Docker => {
                let image = opts
                    .pause_image
                    .clone()
                    .or_else(|| std::env::var("FAKE_CLUSTER_PAUSE_IMAGE").ok())
                    .or_else(|| std::env::var("HVDCTL_TEST_BUSYBOX_IMAGE").ok())
                    .filter(|i| !i.is_empty())
                    .unwrap_or_else(|| "busybox:latest".into());
                let k = rt.block_on(docker::DockerKubelet::start(image, opts.restart_backoff))?;
                store
                    .graceful_pods
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Some(k)
            }
        };
        let inner = Arc::new(Inner {
            store,
            operators,
            kubelet,
            docker: docker.clone(),
            faults: Mutex::new(Faults::default()),
            stats: Stats::default(),
            addr: addr.to_string(),
            cuts: Arc::new(AtomicU64::new(0)),
            pod_log_requests: Mutex::new(BTreeMap::new()),
            bookmark_interval: opts.bookmark_interval,
        });
        inner.set_faults(opts.faults.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let inner2 = inner.clone();
        let thread = std::thread::Builder::new()
            .name("fake-cluster".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("fake-cluster: {e}");
                            return;
                        }
                    };
                    tokio::spawn(control_loop(inner2.clone()));
                    if let Some(k) = &docker {
                        tokio::spawn(k.clone().run(inner2.store.clone()));
                    }
                    serve(listener, inner2, rx).await;
                    if let Some(k) = &docker {
                        k.shutdown().await;
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(100));
            })?;
        Ok(FakeCluster {
            inner,
            url: format!("http://{addr}"),
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// Docker kubelet: this cluster's id (the value of the label
    /// `io.hvdctl.fake-cluster.id` on every container, network and volume it creates).
    pub fn docker_id(&self) -> Option<&str> {
        self.inner.docker.as_deref().map(|k| k.id.as_str())
    }

    /// Docker kubelet: the Docker network every pod is attached to.
    pub fn docker_network(&self) -> Option<&str> {
        self.inner.docker.as_deref().map(|k| k.network.as_str())
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig whose current context (`fake-cluster`) points here, namespace `default`.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.url)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    pub fn faults(&self) -> Faults {
        self.inner.faults()
    }

    pub fn set_faults(&self, f: Faults) {
        self.inner.set_faults(f);
    }

    /// The stored object (`resource`: plural like `pods`, `jobs`, `mpijobs`; `ns` "" for cluster-scoped).
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let id = self.lookup(resource)?;
        self.inner.store.get(id, ns, name).map(|v| (*v).clone())
    }

    /// Objects of a type (`ns` None: all namespaces) matching a label selector ("" for all).
    pub fn list(&self, resource: &str, ns: Option<&str>, label_selector: &str) -> Vec<Value> {
        let Some(id) = self.lookup(resource) else {
            return Vec::new();
        };
        let Ok(ls) = LabelSelector::parse(label_selector) else {
            return Vec::new();
        };
        self.inner
            .store
            .list(id, ns, &ls, &FieldSelector::default())
            .0
            .into_iter()
            .map(|v| (*v).clone())
            .collect()
    }

    /// Creates an object; its `apiVersion`/`kind` choose the type, `metadata.namespace` the
    /// namespace (default `default`).
    pub fn create(&self, obj: Value) -> Result<Value, ApiError> {
        let av = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let id = resources::find_kind(av, kind, &self.inner.store.custom)
            .ok_or_else(|| ApiError::bad_request(format!("no resource for {av} {kind}")))?;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        self.inner.store.create(id, &ns, obj, &WriteOpts::default())
    }

    /// Deletes with a propagation policy (`None`: the type's default).
    pub fn delete(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        propagation: Option<&str>,
    ) -> Result<Value, ApiError> {
        let id = self
            .lookup(resource)
            .ok_or_else(|| ApiError::bad_request(format!("unknown resource {resource}")))?;
        self.inner
            .store
            .delete(id, ns, name, propagation, None, false)
            .map(|(v, _)| v)
    }

    /// Applies a change to a stored object through `f` (status included), like a controller would.
    pub fn mutate(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        self.inner.store.mutate(self.lookup(resource)?, ns, name, f)
    }

    /// Total API requests served (the `/fake/` endpoints not counted).
    pub fn request_count(&self) -> u64 {
        self.inner.stats.total.load(Ordering::Relaxed)
    }

    /// Requests by RBAC verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, `discovery`) and by `"<verb> <resource>"` (e.g. `"get pods/log"`).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.inner
            .stats
            .by
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn reset_request_counts(&self) {
        self.inner.stats.reset();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store.resource_version()
    }

    /// Polls `cond` over the object until it holds or `timeout` passes; returns the last value seen.
    pub fn wait_for(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        timeout: Duration,
        cond: impl Fn(Option<&Value>) -> bool,
    ) -> Result<Option<Value>, Option<Value>> {
        let end = std::time::Instant::now() + timeout;
        loop {
            let v = self.get(resource, ns, name);
            if cond(v.as_ref()) {
                return Ok(v);
            }
            if std::time::Instant::now() >= end {
                return Err(v);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until some version of the object written after resourceVersion `since` (take it
    /// with [`resource_version`](Self::resource_version) before the action) satisfies `cond`,
    /// and returns that version. Every write counts, not only the ones a poll happens to see:
    /// a phase that lasted a few milliseconds between two polls is still found. It is only as
    /// strong as the writes: a state the controller never wrote (a kubelet pass that went from
    /// Pending straight to Succeeded) is not found, and `Err` carries the versions seen.
    pub fn wait_seen(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        since: u64,
        timeout: Duration,
        cond: impl Fn(&Value) -> bool,
    ) -> Result<Value, Vec<Value>> {
        let Some(id) = self.lookup(resource) else {
            return Err(Vec::new());
        };
        let end = std::time::Instant::now() + timeout;
        loop {
            let versions: Vec<Value> = match self.inner.store.events_after(since, id, Some(ns)) {
                Ok(evs) => evs
                    .iter()
                    .filter(|e| util::name_of(&e.obj) == name)
                    .map(|e| (*e.obj).clone())
                    .collect(),
                // The history was compacted: only the current version is left to look at.
                Err(_) => self.get(resource, ns, name).into_iter().collect(),
            };
            if let Some(v) = versions.iter().find(|v| cond(v)) {
                return Ok(v.clone());
            }
            if std::time::Instant::now() >= end {
                return Err(versions);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl FakeCluster {
    /// The served resource called `resource` (plural, singular, kind or short name).
    fn lookup(&self, resource: &str) -> Option<ResId> {
        let plural = resource.split('.').next().unwrap_or(resource);
        resources::served(&self.inner.store.custom)
            .into_iter()
            .find(|(_, r)| {
                r.plural == plural
                    || r.singular == plural
                    || r.kind.eq_ignore_ascii_case(plural)
                    || r.short_names.contains(&plural)
            })
            .map(|(id, _)| id)
    }
}

pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake-cluster
  cluster:
    server: {url}
contexts:
- name: fake-cluster
  context:
    cluster: fake-cluster
    user: fake-cluster
    namespace: default
current-context: fake-cluster
preferences: {{}}
users:
- name: fake-cluster
  user:
    token: fake-token
"
    )
}

async fn control_loop(inner: Arc<Inner>) {
    let ctl = controllers::Controllers {
        store: inner.store.clone(),
        kubelet: inner.kubelet.clone(),
        synthetic: inner.docker.is_none(),
        operators: inner.operators.clone(),
    };
    let mut rx = inner.store.subscribe();
    loop {
        rx.borrow_and_update();
        let next = ctl.pass();
        let now = util::now_ns();
        let wait_ns = next
            .map(|t| (t - now).clamp(1_000_000, 1_000_000_000))
            .unwrap_or(1_000_000_000);
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() { return; }
                // Let a burst of writes land before the next pass.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            _ = tokio::time::sleep(Duration::from_nanos(wait_ns as u64)) => {}
        }
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    inner: Arc<Inner>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                let _ = stream.set_nodelay(true);
                let inner = inner.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| server::handle(inner.clone(), req));
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(io, svc).with_upgrades().await;
                });
            }
        }
    }
}
