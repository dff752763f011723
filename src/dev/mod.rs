//! `hvdctl dev`: deploy once in warm mode, then turn every saved change into a new attempt.
//!
//! Warm mode is a value of the run (`App::warm` → `HVDCTL_DEV=1` for launcher.sh, the held
//! operator launcher command for `mpijob`): the launcher sets up ssh, waits for the workers
//! and holds; the workers keep their sshd. Each attempt runs the launch command in the
//! launcher through exec ([`attempt`]), so pods, ssh and the image stay as they are between
//! attempts.
//!
//! * [`watch`]: the build context watched; batches of saves; sync or rebuild;
//! * [`sync`]: the saved files copied into every pod/container at `dev.syncTo`;
//! * [`attempt`]: the launch command by exec, its lines numbered `#N`.
//!
//! A change to the Dockerfile or the dependency files builds a new image (pushed by the
//! deploy, on Kubernetes) and replaces the run; a change to hvdctl.yaml replaces the run with
//! the same image; the attempt count goes on. Ctrl-C or SIGTERM
//! undeploys and exits 130.

pub mod attempt;
pub mod sync;
pub mod watch;

use crate::app::Loaded;
use crate::backend::Backend;
use crate::backend::values::{HOSTFILE, launch_argv};
use crate::engine::{self, DeployOptions, Env, Plan, Run};
use crate::error::{Error, Result};
use crate::image::BuildContext;
use crate::kinds::ROLE_LAUNCHER;
use crate::logs::printer::Style;
use crate::logs::target::Target;
use crate::remote::Which;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use watch::Batch;

/// What `hvdctl dev` was asked for.
pub struct Options {
    pub backend: Backend,
    /// The run's id, kept when a rebuild replaces the run.
    pub run_id: String,
    /// The image of the first deploy.
    pub image: String,
    /// That image, when it was built here and not pushed yet.
    pub unpushed: Option<String>,
    /// The `--set` flags (recorded in the run's provenance).
    pub sets: Vec<String>,
    /// Quiet time that ends a batch of saves.
    pub debounce: Duration,
    pub style: Style,
    pub deploy: DeployOptions,
}

/// A warm run: its launcher (for the rank tags of its lines), where files go, and the launch
/// command each attempt runs (from the hvdctl.yaml it was deployed with).
struct Live {
    run: Arc<Run>,
    launcher: Target,
    places: Vec<Which>,
    launch: Vec<String>,
}

impl Live {
    /// Deploys `image` in warm mode and waits until every pod/container runs.
    async fn start(
        env: &Env<'_>,
        loaded: &Loaded,
        o: &Options,
        image: &str,
        unpushed: Option<String>,
    ) -> Result<Live> {
        let plan = Plan {
            app: &loaded.app,
            dir: &loaded.dir,
            backend: o.backend,
            run_id: o.run_id.clone(),
            image: image.to_string(),
            unpushed,
            sets: &o.sets,
        };
        let run = engine::deploy(env, &plan, o.deploy)
            .await?
            .ok_or_else(|| Error::failure("the deploy made no run"))?;
        let report = tokio::select! {
            r = run.wait_running(env.ui) => r,
            _ = interrupt() => Err(Error::interrupted()),
        };
        let live_or_err = match report {
            Ok(r) if r.state.is_finished() || r.failing => {
                let why = r.reason.map(|t| format!(": {t}")).unwrap_or_default();
                let e = Error::failure(format!(
                    "{} ended ({}) before its launcher held{why}; see `hvdctl logs {}`",
                    run.info().job,
                    r.state,
                    run.info().run_id
                ));
                Err((e, run))
            }
            Ok(_) => Self::look(run, launch_of(loaded, o.backend, image)).await,
            Err(e) => Err((e, run)),
        };
        match live_or_err {
            Ok(live) => Ok(live),
            Err((e, run)) => match crate::engine::remove(env, &run, true).await {
                Ok(_) => Err(e),
                Err(ce) => Err(e.context(format!(
                    "removing the run after this failure also failed ({ce}); run `hvdctl undeploy {}` to finish it",
                    run.info().run_id
                ))),
            },
        }
    }

    async fn look(run: Run, launch: Vec<String>) -> std::result::Result<Live, (Error, Run)> {
        let targets = match run.targets().await {
            Ok(t) => t,
            Err(e) => return Err((e, run)),
        };
        let Some(launcher) = targets.iter().find(|t| t.role == ROLE_LAUNCHER).cloned() else {
            let e = Error::failure(format!("{} has no launcher", run.info().job));
            return Err((e, run));
        };
        Ok(Live {
            places: sync::places(&targets),
            launcher,
            run: Arc::new(run),
            launch,
        })
    }
}

/// The launch command (mpirun/horovodrun and the app's command) of `loaded`'s app.
fn launch_of(loaded: &Loaded, backend: Backend, image: &str) -> Vec<String> {
    let r = crate::backend::Run {
        app: &loaded.app,
        backend,
        run_id: String::new(),
        namespace: String::new(),
        image: image.to_string(),
    };
    launch_argv(&r, Some(HOSTFILE))
}

/// hvdctl.yaml read again (with the same `--set` flags) for a redeploy; an error leaves the
/// run as it is.
fn reload(loaded: &Loaded, sets: &[String]) -> Result<Loaded> {
    let mut l = crate::app::load(&loaded.dir, sets)?;
    l.app.warm = true;
    Ok(l)
}

/// `f`'s output, or None at Ctrl-C or SIGTERM (what `f` did so far is dropped with it: a
/// copy or a build, never a deploy, which rolls itself back).
async fn or_interrupt<T>(f: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        v = f => Some(v),
        _ = interrupt() => None,
    }
}

/// Ctrl-C or SIGTERM.
async fn interrupt() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The attempt running, if any.
struct Running {
    n: u32,
    task: JoinHandle<Result<attempt::Ended>>,
}

async fn finished(running: &mut Option<Running>) -> (u32, Result<attempt::Ended>) {
    match running {
        Some(r) => {
            let res = (&mut r.task).await;
            let n = r.n;
            *running = None;
            let res = res.unwrap_or_else(|e| Err(Error::failure(format!("attempt #{n}: {e}"))));
            (n, res)
        }
        None => std::future::pending().await,
    }
}

/// Deploys warm, runs attempt 1, then one attempt per batch of saves until Ctrl-C/SIGTERM,
/// which undeploys (exit 130).
pub async fn run(env: &Env<'_>, loaded: &Loaded, o: Options) -> Result<u8> {
    let ui = env.ui;
    let mut loaded = loaded.clone();
    // The watched directory, the engine and the namespace stay those of the first load.
    let root = loaded.dir.join(&loaded.app.build.context);
    let mut ctx = BuildContext::open(&root, &loaded.app.build.dockerfile)?;
    let mut changes = watch::watch(&root, o.debounce)?;
    let app_file = loaded
        .dir
        .join(crate::app::APP_FILE)
        .canonicalize()
        .ok()
        .and_then(|f| {
            Some(
                f.strip_prefix(changes.root())
                    .ok()?
                    .to_string_lossy()
                    .replace('\\', "/"),
            )
        });
    let mut image = o.image.clone();
    // What was copied since `image` was built: the image does not hold it, so a redeploy
    // with the same image copies it again.
    let mut synced: BTreeSet<String> = BTreeSet::new();
    let mut live = Live::start(env, &loaded, &o, &image, o.unpushed.clone()).await?;
    ui.note(format!(
        "Watching {} (saves are copied to {} in every container); Ctrl-C undeploys",
        changes.root().display(),
        loaded.app.dev.sync_to
    ));
    let mut n = 0u32;
    let start = |live: &Live, n: u32| Running {
        n,
        task: tokio::spawn(attempt::run(
            live.run.clone(),
            n,
            live.launch.clone(),
            live.launcher.clone(),
            o.style,
        )),
    };
    n += 1;
    let mut running = Some(start(&live, n));
    let outcome: Result<()> = loop {
        tokio::select! {
            batch = changes.next() => {
                let Some(paths) = batch else { break Ok(()) };
                let saved = Instant::now();
                match BuildContext::open(&root, &loaded.app.build.dockerfile) {
                    Ok(c) => ctx = c,
                    Err(e) => ui.note(format!("warning: {e}; keeping the previous .dockerignore")),
                }
                match watch::classify(&paths, &ctx, app_file.as_deref()) {
                    None => continue,
                    Some(Batch::Sync(files)) => {
                        if let Some(r) = running.take() {
                            r.task.abort();
                        }
                        synced.extend(files.iter().cloned());
                        let copied = sync::sync(&live.run, &live.places, &root, &files, &loaded.app.dev.sync_to, ui);
                        let Some(copied) = or_interrupt(copied).await else {
                            break Err(Error::interrupted());
                        };
                        match copied {
                            Ok(k) => ui.debug(format!(
                                "synced {k} file(s) to {} place(s) in {} ms",
                                live.places.len(),
                                saved.elapsed().as_millis()
                            )),
                            Err(_) => ui.note("warning: not every file was copied; starting the attempt anyway"),
                        }
                    }
                    Some(Batch::Redeploy { why, rebuild }) => {
                        let next = match reload(&loaded, &o.sets) {
                            Ok(l) => l,
                            Err(e) => {
                                ui.note(format!("error: {e}\nthe run stays as it was; waiting for a change"));
                                continue;
                            }
                        };
                        if let Some(r) = running.take() {
                            r.task.abort();
                        }
                        let mut unpushed = None;
                        if rebuild {
                            ui.note(format!("{why} changed: building a new image and deploying it"));
                            let Some(built) = or_interrupt(crate::image::build_app(&next, &crate::image::AppBuild::default(), ui)).await else {
                                break Err(Error::interrupted());
                            };
                            match built {
                                Ok(i) => image = i,
                                Err(e) => {
                                    ui.note(format!("error: the rebuild failed: {e}; the run stays as it was"));
                                    continue;
                                }
                            };
                            unpushed = matches!(o.backend, Backend::Kubernetes(_)).then(|| image.clone());
                            synced.clear();
                        } else {
                            ui.note(format!("{why} changed: deploying the run again with it"));
                        }
                        loaded = next;
                        // Deploying again under the same run id over what is left would mix
                        // two runs: a failed removal ends dev.
                        if let Err(e) = crate::engine::remove(env, &live.run, true).await {
                            break Err(e.context("removing the run before deploying it again"));
                        }
                        live = match Live::start(env, &loaded, &o, &image, unpushed).await {
                            Ok(l) => l,
                            Err(e) => break Err(e),
                        };
                        if !synced.is_empty() {
                            let files: Vec<String> = synced.iter().cloned().collect();
                            let copied = sync::sync(&live.run, &live.places, &root, &files, &loaded.app.dev.sync_to, ui);
                            match or_interrupt(copied).await {
                                None => break Err(Error::interrupted()),
                                Some(Err(_)) => ui.note("warning: not every file saved since the image was built was copied again"),
                                Some(Ok(_)) => {}
                            }
                        }
                    }
                }
                n += 1;
                ui.note(format!("attempt #{n}"));
                running = Some(start(&live, n));
            }
            (k, res) = finished(&mut running) => match res {
                Ok(e) => ui.note(format!(
                    "attempt #{k} exited with code {} ({} lines); waiting for a change",
                    e.code, e.lines
                )),
                Err(e) => ui.note(format!("attempt #{k} failed: {e}; waiting for a change")),
            },
            _ = interrupt() => break Err(Error::interrupted()),
        }
    };
    if let Some(r) = running.take() {
        r.task.abort();
    }
    crate::engine::remove(env, &live.run, true).await?;
    outcome.map(|_| 0)
}
