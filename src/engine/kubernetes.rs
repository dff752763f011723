//! The Kubernetes engine: runs are labelled objects in a namespace of a kube context; what
//! differs between backends (mpijob, native, ...) is asked of their [`KubeBackend`].

mod remote;

use super::{DeployOptions, Env, Place, Plan, Removed, RunInfo};
use crate::backend::{self, KubeBackend, Scaling, SshKeys};
use crate::cluster::events::{self, RunEvent};
use crate::cluster::runs::{self, Filter, RunRef};
use crate::cluster::status::{JobState, job_object, observe, role, run_pods, state_of};
use crate::cluster::{Cluster, apply, scale, undeploy};
use crate::error::{Error, Result};
use crate::kinds::Object;
use crate::kubeconfig;
use crate::options::ManifestFormat;
use crate::phases::Phases;
use crate::provenance::Provenance;
use crate::render::manifests;
use crate::report::{PodRow, StatusReport};
use crate::state::{self, RunRecord};
use crate::ui::Ui;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A kube context, looking in one namespace (or every namespace).
pub struct Kube {
    pub cluster: Cluster,
    pub namespace: Option<String>,
}

impl Kube {
    /// What the runs of app `app` share in `namespace` (a backend's `shared_kinds`: the
    /// trainjob backend's TrainingRuntime) when no run of it is left there — its last run
    /// was deleted by another client, e.g. the Kubeflow SDK's `delete_job`. Backends whose
    /// job kind the cluster does not serve have none.
    pub async fn remove_orphaned_shared(
        &self,
        namespace: &str,
        app: &str,
    ) -> Result<Vec<undeploy::Deleted>> {
        let mut out = Vec::new();
        for b in crate::backend::kube_backends() {
            let shared = b.shared_kinds();
            let job = b.job_object("").0;
            if shared.is_empty() || !self.cluster.serves(job).await? {
                continue;
            }
            out.extend(
                undeploy::remove_shared_if_unused(&self.cluster, namespace, app, job, &shared)
                    .await?,
            );
        }
        Ok(out)
    }
}

/// A run in a cluster.
pub struct KubeRun {
    pub cluster: Cluster,
    pub run: RunRef,
    pub info: RunInfo,
    first_log: crate::phases::FirstLog,
}

impl Kube {
    pub async fn connect(
        kc: &kubeconfig::Loaded,
        context: Option<&str>,
        namespace: Option<String>,
        log_requests: bool,
    ) -> Result<Kube> {
        Ok(Kube {
            cluster: crate::cluster::connect(kc, context, log_requests).await?,
            namespace,
        })
    }

    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("namespace {ns} (context `{}`)", self.cluster.context),
            None => format!("every namespace (context `{}`)", self.cluster.context),
        }
    }

    fn run(&self, seen: runs::Seen) -> KubeRun {
        KubeRun::new(self.cluster.clone(), seen.run, seen.created)
    }

    /// The run `run_id` (of `app`, when given); an error when it is there but of a backend
    /// this hvdctl cannot read.
    pub async fn find(&self, run_id: &str, app: Option<&str>) -> Result<Option<KubeRun>> {
        let f = Filter {
            namespace: self.namespace.as_deref(),
            app,
            run_id: Some(run_id),
        };
        let mut listed = runs::list(&self.cluster, &f).await?;
        match (listed.seen.pop(), listed.unreadable.pop()) {
            (Some(s), _) => Ok(Some(self.run(s))),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        }
    }

    /// Every run (of `app`, when given) oldest first, and an error for each run this hvdctl
    /// cannot read.
    pub async fn list(&self, app: Option<&str>) -> Result<(Vec<KubeRun>, Vec<Error>)> {
        let f = Filter {
            namespace: self.namespace.as_deref(),
            app,
            run_id: None,
        };
        let listed = runs::list(&self.cluster, &f).await?;
        let found = listed.seen.into_iter().map(|s| self.run(s)).collect();
        Ok((found, listed.unreadable))
    }

    /// The namespace looked in, when it does not exist; an error when the cluster could not
    /// say (it is not taken for "exists").
    pub async fn namespace_missing(&self) -> Result<Option<&str>> {
        use crate::cluster::client::{ATTEMPTS, retry};
        let Some(ns) = self.namespace.as_deref() else {
            return Ok(None);
        };
        let api: Api<Namespace> = Api::all(self.cluster.client.clone());
        match retry(ATTEMPTS, || api.get_opt(ns)).await {
            Ok(None) => Ok(Some(ns)),
            Ok(Some(_)) => Ok(None),
            Err(e) => Err(self.cluster.error(&format!("get namespace {ns}"), &e)),
        }
    }
}

impl KubeRun {
    pub fn new(cluster: Cluster, run: RunRef, created: String) -> KubeRun {
        let info = RunInfo {
            run_id: run.run_id.clone(),
            app: run.app.clone(),
            job: run.job.clone(),
            backend: run.backend.name().to_string(),
            place: Place::Kubernetes {
                context: cluster.context.clone(),
                namespace: run.namespace.clone(),
            },
            created,
        };
        KubeRun {
            cluster,
            run,
            info,
            first_log: Default::default(),
        }
    }

    pub async fn status(&self) -> Result<StatusReport> {
        let job = job_object(&self.cluster, &self.run).await?;
        let pods = run_pods(&self.cluster, &self.run).await?;
        let (state, conditions) = state_of(&self.run, job.as_ref(), &pods)?;
        let (state, conditions, queue) = crate::cluster::status::queued(
            &self.cluster,
            &self.run,
            job.as_ref(),
            state,
            conditions,
        )
        .await?;
        let (provenance, mut phases) = self.ledger(job.as_ref(), &pods).await;
        phases.admitted = queue.as_ref().and_then(|q| q.admitted_at.clone());
        let elastic = elastic_bounds(&pods);
        let mut rows: Vec<PodRow> = pods
            .iter()
            .map(|p| row(p, role(&self.run, p), elastic.is_some()))
            .collect();
        let why = crate::cluster::reason::explain(
            &self.cluster,
            &self.run.namespace,
            &self.run.job,
            state,
            &conditions,
            &pods,
            elastic.is_some(),
        )
        .await;
        for r in &mut rows {
            r.reason = why.pods.get(&r.name).cloned();
        }
        let queue_failure = crate::cluster::queue::failure(&conditions);
        let queue_reason = (state == JobState::Queued)
            .then(|| {
                conditions
                    .iter()
                    .rfind(|c| c.type_ == crate::cluster::queue::CONDITION)
                    .and_then(|c| c.message.clone())
            })
            .flatten();
        let mut conditions = conditions;
        if let Some(b) = elastic
            && state == JobState::Running
        {
            conditions.extend(crate::report::below_min_workers(b, &rows));
        }
        Ok(StatusReport {
            run: self.run.run_id.clone(),
            job: self.run.job.clone(),
            app: self.run.app.clone(),
            engine: super::EngineKind::Kubernetes,
            namespace: Some(self.run.namespace.clone()),
            context: Some(self.cluster.context.clone()),
            backend: self.info.backend.clone(),
            state,
            conditions,
            workers: crate::report::running_workers(&rows),
            elastic,
            pods: rows,
            start_latency_seconds: phases.start_latency_seconds(),
            phases,
            provenance,
            source: crate::types::Source::Engine,
            // The queue's word is the most specific while it holds the run.
            failing: queue_failure.is_some() || why.run.as_ref().is_some_and(|r| r.failing),
            reason: queue_reason.or(why.run.map(|r| r.text)),
            queue: queue.map(|q| q.queue),
            storage: crate::cluster::storage::list(
                &self.cluster,
                &self.run.namespace,
                &self.run.app,
            )
            .await
            .unwrap_or_default(),
        })
    }

    /// The run's provenance (annotations of its job object, else of a pod) and phase times
    /// (the job object's creation, its pods' conditions and container times, the first log line).
    async fn ledger(
        &self,
        job: Option<&DynamicObject>,
        pods: &[Pod],
    ) -> (Option<Provenance>, Phases) {
        let metas = job
            .map(|j| &j.metadata)
            .into_iter()
            .chain(pods.iter().map(|p| &p.metadata));
        let provenance = metas
            .filter_map(|m| m.annotations.as_ref())
            .find_map(|a| Provenance::from_map(|k| a.get(k).cloned()));
        let created = job
            .and_then(|j| j.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.to_string());
        let workers = provenance.as_ref().map(|p| p.workers as usize);
        let mut phases = crate::phases::of_pods(created.as_deref(), pods, workers);
        let targets: Vec<_> = pods
            .iter()
            .flat_map(|p| crate::logs::target::targets_of(p, self.run.backend.identity(), "", None))
            .collect();
        let source = crate::logs::pods::PodSource::new(Api::namespaced(
            self.cluster.client.clone(),
            &self.run.namespace,
        ));
        // The creation time tells a run apart from one deployed again under its name (`dev`).
        let key = format!(
            "kubernetes/{}/{}/{}/{}",
            self.cluster.context,
            self.run.namespace,
            self.run.job,
            phases.created.as_deref().unwrap_or_default()
        );
        phases.first_log = self.first_log.of(key, &source, targets).await;
        (provenance, phases)
    }

    /// Sets the number of workers of a running elastic run as its backend says (a patch of
    /// the job object, or hvdctl's own worker pods); see [`crate::cluster::scale`].
    pub async fn scale(&self, workers: u32) -> Result<super::Scaled> {
        let pods = run_pods(&self.cluster, &self.run).await?;
        let bounds = backend::elastic::check_scale(&self.run.job, elastic_bounds(&pods), workers)?;
        let (state, _) = observe(&self.cluster, &self.run).await?;
        if state.is_finished() || state == JobState::Unknown {
            return Err(Error::input(format!(
                "{} has ended ({state}): there is nothing to scale",
                self.run.job
            ))
            .hint("deploy a new run with --set workers=N"));
        }
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| role(&self.run, p).is_worker() && !is_finished(p))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let before = live.len() as u32;
        match self.run.backend.scaling() {
            Scaling::Patch(patch) => scale::patch(&self.cluster, &self.run, patch(workers)).await?,
            Scaling::WorkerPods { name } => {
                scale::pods(
                    &self.cluster,
                    &self.run,
                    &pods,
                    &live,
                    workers,
                    bounds.max_workers,
                    name,
                )
                .await?
            }
            Scaling::Unsupported => {
                return Err(Error::input(format!(
                    "hvdctl scale does not change runs of the {} backend",
                    self.run.backend.name()
                ))
                .hint("redeploy with --set workers=N"));
            }
        }
        Ok(super::Scaled {
            job: self.run.job.clone(),
            before,
            after: workers,
            bounds,
        })
    }

    pub async fn events(&self, follow: bool, print: &mut dyn FnMut(&RunEvent)) -> Result<()> {
        let now = events::list(&self.cluster, &self.run).await?;
        let mut seen: HashSet<(String, i32)> = HashSet::new();
        for e in &now {
            print(e);
            seen.insert((e.uid.clone(), e.count));
        }
        if follow {
            events::follow(&self.cluster, &self.run, &mut seen, print).await?;
        }
        Ok(())
    }

    pub async fn undeploy(&self, wait: bool, ui: &Ui) -> Result<Removed> {
        let (c, ns, sel) = (&self.cluster, &self.run.namespace, self.run.selector());
        let mut deleted = undeploy::delete(c, ns, &sel).await?;
        deleted.extend(self.remove_shared().await?);
        let removed = Removed {
            items: deleted
                .iter()
                .map(|d| (d.kind.to_string(), d.name.clone()))
                .collect(),
        };
        if wait && !deleted.is_empty() {
            let bar = ui.spinner(format!("waiting for {} objects to go", deleted.len()));
            let progress = |left: usize| bar.set_message(format!("{left} object(s) left"));
            let r = undeploy::wait_gone(c, ns, &sel, Duration::from_secs(300), &progress).await;
            bar.finish_and_clear();
            r?;
        }
        Ok(removed)
    }

    /// The objects the app's runs share (its backend's `shared_kinds`), when this run was
    /// the app's last.
    async fn remove_shared(&self) -> Result<Vec<undeploy::Deleted>> {
        let b = self.run.backend;
        undeploy::remove_shared_if_unused(
            &self.cluster,
            &self.run.namespace,
            &self.run.app,
            b.job_object(&self.run.job).0,
            &b.shared_kinds(),
        )
        .await
    }

    /// Waits on a watch of the run's pods (kube's watcher, with backoff); the job's state is
    /// read again on each change of the pods, and every few seconds for changes of the job
    /// object alone.
    pub async fn wait_running(&self, ui: &Ui) -> Result<StatusReport> {
        let bar = ui.spinner(format!("waiting for the pods of {}", self.run.job));
        let api: Api<Pod> = Api::namespaced(self.cluster.client.clone(), &self.run.namespace);
        let mut pods = watcher(api, watcher::Config::default().labels(&self.run.selector()))
            .default_backoff()
            .boxed();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            let r = self.status().await?;
            if super::wait_done(&r, &bar, ui) {
                return Ok(r);
            }
            if r.state == JobState::Unknown {
                bar.finish_and_clear();
                return Err(Error::not_found(format!(
                    "the job object of {} is gone from namespace {}",
                    self.run.job, self.run.namespace
                )));
            }
            tokio::select! {
                ev = pods.next() => if ev.is_none() {
                    return Err(Error::failure("watching the run's pods stopped"));
                },
                _ = tick.tick() => {}
            }
        }
    }
}

pub use crate::cluster::status::elastic_bounds;

fn is_finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// One pod (whose role and index are `r`) as a status row. A failed worker of an elastic
/// run is `Lost`: the launcher went on without it (the same rule as local runs).
fn row(p: &Pod, r: crate::types::Role, elastic: bool) -> PodRow {
    let name = p.metadata.name.clone().unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    let cs = status.container_statuses.unwrap_or_default();
    let ready = cs.iter().filter(|c| c.ready).count();
    let total = p.spec.as_ref().map_or(cs.len(), |s| s.containers.len());
    let last_termination = cs.iter().find_map(|c| {
        let t = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| c.state.as_ref().and_then(|s| s.terminated.as_ref()))?;
        Some(format!(
            "{} (exit {})",
            t.reason.clone().unwrap_or_else(|| "Terminated".into()),
            t.exit_code
        ))
    });
    let waiting = cs
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
    let phase = status.phase.clone().unwrap_or_else(|| "Unknown".into());
    // A pod being deleted is `Terminating` whatever its phase, as kubectl shows it (its
    // `printPod`): it no longer counts as running.
    let deleting = p.metadata.deletion_timestamp.is_some();
    PodRow {
        index: r.index,
        phase: match (phase.as_str(), waiting) {
            _ if deleting => "Terminating".into(),
            ("Pending" | "Running", Some(w)) => w,
            ("Failed", _) if elastic && r.is_worker() => "Lost".into(),
            _ => phase,
        },
        role: r.role,
        ready: format!("{ready}/{total}"),
        restarts: cs.iter().map(|c| c.restart_count).sum(),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| "-".into()),
        created: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        last_termination,
        reason: None,
        ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()),
        name,
    }
}

fn backend_run<'a>(plan: &'a Plan, namespace: String) -> backend::Run<'a> {
    backend::Run {
        app: plan.app,
        backend: plan.backend,
        run_id: plan.run_id.clone(),
        namespace,
        image: plan.image.clone(),
    }
}

/// `deploy --dry-run`: the objects, with a placeholder where the ssh key would be.
pub fn dry_run(env: &Env, plan: &Plan, format: ManifestFormat) -> Result<String> {
    let run = backend_run(plan, env.namespace()?);
    let mut objects = backend::objects(&run, plan.dir, None)?;
    note_fs_group(env, plan);
    // The app's `storage:` claims, which deploy creates when they are missing.
    objects.extend(
        crate::cluster::storage::claims(plan.app, &run.namespace)
            .into_iter()
            .map(crate::kinds::Object::new),
    );
    objects.sort_by_key(manifests::apply_order);
    Ok(match format {
        ManifestFormat::Yaml => manifests::to_yaml_stream(&objects),
        ManifestFormat::Json => manifests::to_json_list(&objects)?,
    })
}

/// Says on stderr (once, by the deploy or dry run that renders it) that a non-root run got a
/// defaulted `fsGroup`.
fn note_fs_group(env: &Env, plan: &Plan) {
    if let Some(g) = backend::values::default_fs_group(plan.app) {
        env.ui.note(format!(
            "securityContext.fsGroup set to {g} (the run's non-root group): the ssh key Secret and the pods' volumes are then readable by the user the containers run as; set securityContext.fsGroup to choose another"
        ));
    }
}

/// Renders, checks and applies the run; on failure or Ctrl-C removes what was created.
pub async fn deploy(
    env: &Env<'_>,
    plan: &Plan<'_>,
    b: &'static dyn KubeBackend,
    o: DeployOptions,
) -> Result<Option<KubeRun>> {
    let ui = env.ui;
    let run = backend_run(plan, env.namespace()?);
    // Render before contacting anything: a template error must not cost a round trip.
    let keys = if b.needs_ssh_keys() {
        Some(SshKeys::generate(&format!("hvdctl-{}", run.job_name()))?)
    } else {
        None
    };
    let mut objects = backend::objects(&run, plan.dir, keys.as_ref())?;
    drop(keys);
    note_fs_group(env, plan);
    let k = env.kube(Some(run.namespace.clone())).await?;
    let c = &k.cluster;
    // Everything that can refuse the run is asked before the push (minutes for a big image)
    // and before anything is created.
    check_unpushed(plan, c, o)?;
    for req in b.requires() {
        if !c.serves(req.kind).await? {
            return Err(Error::failure(format!(
                "{} is not installed in context `{}` ({}): {} is not served",
                req.provider, c.context, c.server, req.kind
            ))
            .hint(req.hint));
        }
    }
    for (p, found) in crate::doctor::kube::prerequisite_errors(c, &run.namespace, run.app, b).await
    {
        let place = crate::doctor::kube::prerequisite_place(&p, &run.namespace);
        use crate::doctor::kube::Found;
        match found {
            Found::Exists => {}
            Found::Missing => {
                return Err(Error::failure(format!(
                    "{place} (named in {}) does not exist in context `{}`",
                    p.what, c.context
                ))
                .hint(p.hint));
            }
            Found::Lacks(why) => {
                return Err(
                    Error::failure(format!("{place} (named in {}) {why}", p.what))
                        .hint(p.needs.as_ref().map_or("", |n| n.hint)),
                );
            }
            Found::Unknown(e) => return Err(Error::failure(e)),
        }
    }
    let create_ns =
        apply::namespace_missing(c, &run.namespace, o.create_namespace && !o.server_dry_run)
            .await?;
    let to_push = plan
        .unpushed
        .as_deref()
        .filter(|_| !o.no_push && !o.server_dry_run);
    if !o.skip_checks {
        // An image about to be pushed is not looked for in its registry.
        let image = to_push.is_none().then_some(plan.image.as_str());
        crate::doctor::preflight(c, &run.namespace, plan.app, image, ui).await?;
    }
    if let Some(image) = to_push {
        push(image, plan, ui).await?;
    }
    let mut provenance = plan.provenance(ui).await;
    provenance.image_digest = registry_digest(&plan.image).await;
    manifests::annotate(&mut objects, &provenance.to_map());
    if create_ns {
        apply::create_namespace(c, &run.namespace).await?;
    }
    let mut claims_made = Vec::new();
    if !o.server_dry_run {
        // Made before the run that mounts them, and kept after it (`undeploy --volumes`).
        claims_made = crate::cluster::storage::ensure(c, &run.namespace, plan.app).await?;
        for name in &claims_made {
            ui.note(format!(
                "Created PersistentVolumeClaim {name} (kept across runs; `hvdctl undeploy --all --volumes` deletes it)"
            ));
        }
    }
    let job = run.job_name();
    if o.server_dry_run {
        apply::apply_all(c, &objects, true, &|_| {}).await?;
        ui.note(format!(
            "Server dry run: the API server accepted all {} objects of {job}; nothing was created",
            objects.len()
        ));
        return Ok(None);
    }
    // Recorded first: if hvdctl is killed half way, `hvdctl undeploy` still finds the run.
    state::record_run(
        plan.dir,
        &RunRecord {
            run_id: run.run_id.clone(),
            app: run.app.name.clone(),
            job: job.clone(),
            engine: Some(super::EngineKind::Kubernetes),
            context: Some(c.context.clone()),
            namespace: Some(run.namespace.clone()),
            image: run.image.clone(),
            backend: b.name().to_string(),
            created: state::now(),
        },
    )?;
    let bar = ui.spinner(format!("applying {} objects of {job}", objects.len()));
    let done = AtomicUsize::new(0);
    let on_applied = |o: &Object| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        bar.set_message(format!(
            "applied {n}/{} ({} {})",
            objects.len(),
            o.kind(),
            o.name()
        ));
    };
    let applied = tokio::select! {
        r = apply_owned(c, b, &job, objects.clone(), &on_applied) => r,
        _ = tokio::signal::ctrl_c() => Err(Error::interrupted()),
    };
    bar.finish_and_clear();
    let kr = KubeRun::new(
        c.clone(),
        RunRef {
            run_id: run.run_id.clone(),
            app: run.app.name.clone(),
            job: job.clone(),
            namespace: run.namespace.clone(),
            backend: b,
        },
        state::now(),
    );
    if let Err(e) = applied {
        ui.note(format!("deploy of {job} failed; removing what was created"));
        // Not cancellable: a second Ctrl-C must not stop the cleanup half way. Claims this
        // deploy made (empty yet) go too; those that were there stay.
        let claims = crate::cluster::storage::remove(c, &run.namespace, &claims_made).await;
        return match rollback(&kr).await.and(claims) {
            Ok(()) => {
                state::forget_run(plan.dir, &run.run_id)?;
                Err(e)
            }
            Err(ce) => Err(e.context(format!(
                "deploy failed and cleanup also failed ({ce}); run `hvdctl undeploy {}` to finish it",
                run.run_id
            ))),
        };
    }
    ui.note(format!(
        "Deployed {job} (run {}, backend {}, namespace {}, context {}, {} objects)",
        run.run_id,
        b.name(),
        run.namespace,
        c.context,
        objects.len()
    ));
    Ok(Some(kr))
}

/// Applies the run's objects; when the backend's job object owns the run, it goes first and
/// every other object gets an ownerReference to it.
async fn apply_owned(
    c: &Cluster,
    b: &'static dyn KubeBackend,
    job: &str,
    mut objects: Vec<Object>,
    on_applied: &(dyn Fn(&Object) + Sync),
) -> Result<()> {
    let (kind, name) = b.job_object(job);
    let at = objects
        .iter()
        .position(|o| o.api_kind() == kind && o.name() == name);
    if let (true, Some(at)) = (b.job_owns_run(), at) {
        let owner = objects.remove(at);
        let uid = apply::apply_one(c, &owner, false).await?;
        on_applied(&owner);
        let reference = OwnerReference {
            api_version: kind.api_version.into(),
            kind: kind.kind.into(),
            name: name.clone(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        };
        for o in &mut objects {
            o.meta_mut()
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(reference.clone());
        }
    }
    apply::apply_all(c, &objects, false, on_applied).await
}

/// An image built here and never pushed must reach a registry before a cluster can run it:
/// with `--no-push` that is refused unless the API server is on this machine.
fn check_unpushed(plan: &Plan<'_>, c: &Cluster, o: DeployOptions) -> Result<()> {
    match &plan.unpushed {
        Some(image) if o.no_push && !o.server_dry_run && !is_local_server(&c.server) => {
            Err(Error::input(format!(
                "image {image} was built on this machine and never pushed, and the cluster of context `{}` ({}) is remote: it cannot pull it",
                c.context, c.server
            ))
            .hint("run `hvdctl push` (or drop --no-push), or pass --image with an image the cluster can pull"))
        }
        _ => Ok(()),
    }
}

/// Pushes the image built here and records that it was.
async fn push(image: &str, plan: &Plan<'_>, ui: &Ui) -> Result<()> {
    let docker = crate::image::DockerClient::connect().await?;
    crate::image::push_reference(&docker, image, crate::image::ProgressMode::Auto, ui).await?;
    state::record_image(
        plan.dir,
        &state::ImageRecord {
            image: image.to_string(),
            pushed: true,
            built: state::now(),
        },
    )
}

/// The image's digest as this machine's Docker engine knows it (the registry's after a
/// push, else the local image ID); `None` without an engine here or without the image.
async fn registry_digest(image: &str) -> Option<String> {
    let docker = crate::image::DockerClient::connect().await.ok()?;
    crate::provenance::image_digest(&docker, image, true).await
}

/// Whether an API server URL points at this machine (a kind/minikube-style or test cluster
/// can use images that exist only in the local daemon).
fn is_local_server(server: &str) -> bool {
    let host = server.split("://").nth(1).unwrap_or(server);
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.split([':', '/']).next().unwrap_or("")
    };
    matches!(host, "localhost" | "::1") || host.starts_with("127.")
}

/// Removes everything of a run that failed to deploy, including objects whose create was in
/// flight when it failed (looked for again until two looks agree nothing is left).
async fn rollback(run: &KubeRun) -> Result<()> {
    let (c, ns, sel) = (&run.cluster, &run.run.namespace, run.run.selector());
    let mut quiet_looks = 0;
    for _ in 0..20 {
        let deleted = undeploy::delete(c, ns, &sel).await?;
        if deleted.is_empty() {
            quiet_looks += 1;
            if quiet_looks == 2 {
                run.remove_shared().await?;
                return Ok(());
            }
        } else {
            undeploy::wait_gone(c, ns, &sel, Duration::from_secs(120), &|_| {}).await?;
            quiet_looks = 0;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(Error::failure("objects kept appearing while cleaning up"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_pod_being_deleted_is_terminating_not_running() {
        let mut pod = Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let worker = crate::types::Role {
            role: crate::kinds::ROLE_WORKER.into(),
            index: Some(0),
        };
        let rows = |pod: &Pod| vec![super::row(pod, worker.clone(), false)];
        assert_eq!(rows(&pod)[0].phase, "Running");
        assert_eq!(crate::report::running_workers(&rows(&pod)), 1);
        pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(rows(&pod)[0].phase, "Terminating");
        assert_eq!(crate::report::running_workers(&rows(&pod)), 0);
    }

    #[test]
    fn local_servers() {
        for s in [
            "http://127.0.0.1:6443",
            "https://localhost",
            "https://[::1]:6443/",
            "http://127.1.2.3",
        ] {
            assert!(super::is_local_server(s), "{s}");
        }
        for s in [
            "https://k8s.example.com:6443",
            "https://10.0.0.1",
            "https://[2001:db8::1]:443",
        ] {
            assert!(!super::is_local_server(s), "{s}");
        }
    }
}
