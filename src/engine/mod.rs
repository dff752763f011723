//! Where runs execute: the seam between "what runs" and "where it runs".
//!
//! A run is resolved once ([`resolve`]: RUN argument, the app's record, or labels) into a
//! [`Run`] on its engine — Kubernetes ([`kubernetes`], with its backends in
//! `crate::backend`) or the Docker engine ([`docker`], the `local` backend). Commands call
//! the verbs of [`Run`] and [`Engine`]; this module is the only place that matches on the
//! engine (like ripgrep's `search.rs` over the searcher it chose once).

pub mod docker;
pub mod kubernetes;
pub mod resolve;

use crate::app::App;
use crate::backend::Backend;
use crate::cluster::events::RunEvent;
use crate::cluster::status::JobState;
use crate::error::{Error, Result};
use crate::logs::{LogOptions, LogsOutcome};
use crate::options::ManifestFormat;
use crate::remote::Pick;
use crate::remote::archive::Copied;
use crate::remote::path::Copy;
use crate::remote::stdio::ExecRequest;
use crate::report::StatusReport;
use crate::ui::Ui;
use std::path::Path;
use tokio::net::TcpListener;

pub use resolve::{Answer, Env, Lookup, Missing};

pub use crate::types::{EngineKind, Removed, Scaled};

/// Where a run lives (for messages, records and reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Kubernetes { context: String, namespace: String },
    Docker { host: String },
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Kubernetes { context, namespace } => {
                write!(f, "namespace {namespace} (context `{context}`)")
            }
            Place::Docker { host } => write!(f, "the Docker engine at {host}"),
        }
    }
}

/// What identifies a run, wherever it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    pub run_id: String,
    pub app: String,
    pub job: String,
    pub backend: String,
    pub place: Place,
    /// RFC 3339: when its newest object or container was created (empty when unknown).
    pub created: String,
}

/// A run on its engine: every verb a command needs.
pub enum Run {
    Kubernetes(kubernetes::KubeRun),
    Docker(docker::DockerRun),
}

impl Run {
    pub fn info(&self) -> &RunInfo {
        match self {
            Run::Kubernetes(r) => &r.info,
            Run::Docker(r) => &r.info,
        }
    }

    /// The run's state, conditions and one row per pod/container.
    pub async fn status(&self) -> Result<StatusReport> {
        match self {
            Run::Kubernetes(r) => r.status().await,
            Run::Docker(r) => r.status().await,
        }
    }

    /// Prints the logs of every pod/container (see [`crate::logs`]).
    pub async fn logs(&self, opts: LogOptions, ui: &Ui) -> Result<LogsOutcome> {
        match self {
            Run::Kubernetes(r) => crate::logs::run(&r.cluster, &r.run, opts, ui).await,
            Run::Docker(r) => crate::local::logs::run(&r.docker, &r.run, opts, ui).await,
        }
    }

    /// Calls `print` for each event of the run, oldest first; with `follow`, then for each new
    /// one until Ctrl-C.
    pub async fn events(&self, follow: bool, print: &mut dyn FnMut(&RunEvent)) -> Result<()> {
        match self {
            Run::Kubernetes(r) => r.events(follow, print).await,
            Run::Docker(r) => crate::local::events::run(&r.docker, &r.run, follow, print).await,
        }
    }

    /// Deletes everything of the run; with `wait`, returns once it is gone.
    pub async fn undeploy(&self, wait: bool, ui: &Ui) -> Result<Removed> {
        match self {
            Run::Kubernetes(r) => r.undeploy(wait, ui).await,
            Run::Docker(r) => r.undeploy().await,
        }
    }

    /// Changes the number of workers of a running elastic run in place (same run id): an input
    /// error for a run that is not elastic or a count outside its bounds, nothing changed.
    pub async fn scale(&self, workers: u32) -> Result<Scaled> {
        match self {
            Run::Kubernetes(r) => r.scale(workers).await,
            Run::Docker(r) => crate::local::scale::scale(&r.docker, &r.run, workers).await,
        }
    }

    /// Waits until every pod/container runs or the job has ended.
    pub async fn wait_running(&self, ui: &Ui) -> Result<StatusReport> {
        match self {
            Run::Kubernetes(r) => r.wait_running(ui).await,
            Run::Docker(r) => r.wait_running(ui).await,
        }
    }
}

// --- The flight recorder (see `crate::ledger::record`) ---------------------------------------

impl Run {
    /// Saves what the engine has of the run — status, events, every container's log (what
    /// is new since the last recording) — under `app_dir`'s `.hvdctl/runs/<run id>/`;
    /// returns that directory.
    pub async fn record(&self, app_dir: &Path, max_mb: u64) -> Result<std::path::PathBuf> {
        use crate::logs::target::{pod_short_name, targets_of};
        let report = self.status().await?;
        let mut events = Vec::new();
        self.events(false, &mut |e| events.push(e.clone())).await?;
        let mut rec = crate::ledger::record::Recorder::open(app_dir, &report.run, max_mb)?;
        match self {
            Run::Kubernetes(r) => {
                let pods = crate::cluster::status::run_pods(&r.cluster, &r.run).await?;
                let mut launcher_taken = false;
                let mut targets = Vec::new();
                for p in &pods {
                    let id = r.run.backend.identity();
                    let short = pod_short_name(&r.run.job, p, id, launcher_taken);
                    launcher_taken |= short == "launcher";
                    targets.extend(targets_of(p, id, &short, None));
                }
                let api = kube::Api::namespaced(r.cluster.client.clone(), &r.run.namespace);
                rec.logs(&crate::logs::pods::PodSource::new(api), targets)
                    .await;
            }
            Run::Docker(r) => {
                let cs = crate::local::status::containers(&r.docker, &r.run).await?;
                let targets = cs
                    .iter()
                    .filter(|c| c.has_started())
                    .map(crate::local::status::Container::target)
                    .collect();
                let source = crate::logs::docker::ContainerSource::new(r.docker.clone());
                rec.logs(&source, targets).await;
            }
        }
        rec.save(&report, &events)
    }
}

// --- Inside a run: exec, cp, port-forward (see `crate::remote`) ------------------------------

impl Run {
    /// Runs a command in the pod/container `pick` names; the command's exit code.
    pub async fn exec(&self, pick: &Pick, req: &ExecRequest) -> Result<u8> {
        match self {
            Run::Kubernetes(r) => r.exec(pick, req).await,
            Run::Docker(r) => r.exec(pick, req).await,
        }
    }

    /// Every container of the run's pods (or its containers) as log targets: role, index,
    /// uid (the pod's or the container's), the launcher's rank tags.
    pub async fn targets(&self) -> Result<Vec<crate::logs::target::Target>> {
        match self {
            Run::Kubernetes(r) => r.targets().await,
            Run::Docker(r) => r.targets().await,
        }
    }

    /// Copies a file or directory between this machine and the run, either way.
    pub async fn copy(&self, copy: &Copy, ui: &Ui) -> Result<Copied> {
        match (self, copy) {
            (
                Run::Kubernetes(r),
                Copy::From {
                    which,
                    remote,
                    local,
                },
            ) => r.copy_from(*which, remote, local, ui).await,
            (
                Run::Kubernetes(r),
                Copy::To {
                    local,
                    which,
                    remote,
                },
            ) => r.copy_to(local, *which, remote, ui).await,
            (
                Run::Docker(r),
                Copy::From {
                    which,
                    remote,
                    local,
                },
            ) => r.copy_from(*which, remote, local, ui).await,
            (
                Run::Docker(r),
                Copy::To {
                    local,
                    which,
                    remote,
                },
            ) => r.copy_to(local, *which, remote, ui).await,
        }
    }

    /// Forwards the connections of `listener` (bound with [`crate::remote::forward::listen`]) to port
    /// `remote` of the pod/container `pick` names, until Ctrl-C.
    pub async fn port_forward(
        &self,
        pick: &Pick,
        listener: TcpListener,
        remote: u16,
    ) -> Result<()> {
        match self {
            Run::Kubernetes(r) => r.port_forward(pick, listener, remote).await,
            Run::Docker(r) => r.port_forward(pick, listener, remote).await,
        }
    }
}

/// A connected engine (runs not chosen yet).
pub enum Engine {
    Kubernetes(kubernetes::Kube),
    Docker(docker::Docker),
}

impl Engine {
    /// Where this engine looks, for messages.
    pub fn describe(&self) -> String {
        match self {
            Engine::Kubernetes(k) => k.describe(),
            Engine::Docker(d) => d.describe(),
        }
    }

    /// The run `run_id` (of `app`, when given), if this engine has it.
    pub async fn find(&self, run_id: &str, app: Option<&str>) -> Result<Option<Run>> {
        Ok(match self {
            Engine::Kubernetes(k) => k.find(run_id, app).await?.map(Run::Kubernetes),
            Engine::Docker(d) => d.find(run_id, app).await?.map(Run::Docker),
        })
    }

    /// Every run (of `app`, when given), oldest first.
    pub async fn list(&self, app: Option<&str>) -> Result<Listed> {
        Ok(match self {
            Engine::Kubernetes(k) => {
                let (runs, unreadable) = k.list(app).await?;
                Listed {
                    runs: runs.into_iter().map(Run::Kubernetes).collect(),
                    unreadable,
                }
            }
            Engine::Docker(d) => Listed {
                runs: d.list(app).await?.into_iter().map(Run::Docker).collect(),
                unreadable: Vec::new(),
            },
        })
    }
}

/// The runs an engine holds: those hvdctl can read, oldest first, and an error naming each
/// one it cannot (a Kubernetes run of a backend this hvdctl does not know). One unreadable run
/// hides none of the others; each caller says what it leaves.
#[derive(Default)]
pub struct Listed {
    pub runs: Vec<Run>,
    pub unreadable: Vec<Error>,
}

/// Deletes `run` (waiting until it is gone with `wait`), says what went, forgets its record.
pub async fn remove(env: &Env<'_>, run: &Run, wait: bool) -> Result<Removed> {
    let info = run.info();
    // What the engine is about to forget stays in the flight record.
    env.save_record(run).await;
    let removed = run.undeploy(wait, env.ui).await?;
    if let Err(e) = crate::ledger::record::mark_undeployed(&env.g.app_dir, &info.run_id) {
        env.ui.note(format!("warning: {}", e.message));
    }
    if removed.is_empty() {
        env.ui.note(format!(
            "Nothing left of run {} ({}) in {}",
            info.run_id, info.job, info.place
        ));
    } else {
        env.ui.note(format!(
            "Deleted run {} ({}) from {}: {}",
            info.run_id,
            info.job,
            info.place,
            removed.summary()
        ));
        for (kind, name) in &removed.items {
            env.ui.debug(format!("  {kind} {name}"));
        }
        if wait {
            env.ui.note("All gone.");
        }
    }
    crate::state::forget_run(&env.g.app_dir, &info.run_id)?;
    Ok(removed)
}

/// What `deploy` makes: a validated app, its backend, the run id and the image.
pub struct Plan<'a> {
    pub app: &'a App,
    /// The app directory (manifest templates, `.hvdctl/`).
    pub dir: &'a Path,
    pub backend: Backend,
    pub run_id: String,
    pub image: String,
    /// An image built here and not pushed yet.
    pub unpushed: Option<String>,
    /// The `--set` flags (recorded in the run's provenance, `env.*` without values).
    pub sets: &'a [String],
}

impl Plan<'_> {
    /// The run's provenance, but for the image digest (the engine resolves it); what git
    /// could not tell is a warning on `ui`.
    pub async fn provenance(&self, ui: &Ui) -> crate::provenance::Provenance {
        let warn = |w: String| ui.note(format!("warning: {w}"));
        crate::provenance::Provenance::collect(self.app, self.dir, &self.image, self.sets, &warn)
            .await
    }
}

/// How `deploy` was asked to go about it.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeployOptions {
    pub create_namespace: bool,
    /// Ask the API server to validate without persisting.
    pub server_dry_run: bool,
    pub no_push: bool,
    /// Skip [`crate::doctor::preflight`].
    pub skip_checks: bool,
}

/// The complete object set (or container plan) of a run, contacting nothing.
pub fn dry_run(env: &Env, plan: &Plan, format: ManifestFormat) -> Result<String> {
    match plan.backend {
        Backend::Kubernetes(_) => kubernetes::dry_run(env, plan, format),
        Backend::Local => docker::dry_run(plan, format),
    }
}

/// Deploys the run on the engine its backend names. `Ok(None)` after a server dry run.
pub async fn deploy(env: &Env<'_>, plan: &Plan<'_>, o: DeployOptions) -> Result<Option<Run>> {
    match plan.backend {
        Backend::Kubernetes(b) => Ok(kubernetes::deploy(env, plan, b, o)
            .await?
            .map(Run::Kubernetes)),
        Backend::Local if o.server_dry_run => Err(Error::input(
            "--dry-run=server asks a Kubernetes API server; the local backend has none",
        )
        .hint("use --dry-run to see the containers a local run would get")),
        Backend::Local => Ok(Some(Run::Docker(docker::deploy(env, plan).await?))),
    }
}

/// After a deploy, for every engine: follow the logs (`--logs`, exit code = the job's), wait
/// until everything runs (`--wait`), or print what to do next. Following and waiting end
/// with the run's flight record saved.
pub async fn after_deploy(env: &Env<'_>, run: &Run, logs: bool, wait: bool) -> Result<u8> {
    let ui = env.ui;
    if logs {
        let outcome = tokio::select! {
            r = run.logs(LogOptions::follow_all(ui), ui) => r?,
            _ = tokio::signal::ctrl_c() => return Err(Error::interrupted()),
        };
        env.save_record(run).await;
        return Ok(outcome.exit_code());
    }
    if wait {
        let report = tokio::select! {
            r = run.wait_running(ui) => r?,
            _ = tokio::signal::ctrl_c() => return Err(Error::interrupted()),
        };
        env.save_record(run).await;
        let code = crate::report::exit_code(&report);
        if code != 0 {
            crate::report::print_reason(report.reason.as_deref());
        }
        return Ok(code);
    }
    if !ui.quiet {
        crate::errln!(
            "Next: hvdctl status {0} · hvdctl logs -f {0} · hvdctl undeploy {0}",
            run.info().run_id
        );
    }
    Ok(0)
}

/// Prints the wait's progress line and decides whether waiting is over: every pod/container
/// running, or the job ended. Shared by both engines' `wait_running`.
pub(crate) fn wait_done(r: &StatusReport, bar: &indicatif::ProgressBar, ui: &Ui) -> bool {
    let running = r.pods.iter().filter(|p| p.phase == "Running").count();
    let total = r.pods.len();
    bar.set_message(format!(
        "{}: {}, {running}/{} running",
        r.job,
        r.state,
        total.max(1)
    ));
    let done = r.state.is_finished()
        || r.failing
        || (r.state == JobState::Running && running == total && running > 0);
    if done {
        bar.finish_and_clear();
        ui.note(format!(
            "{}: {} ({running}/{total} running)",
            r.job, r.state
        ));
    }
    done
}
