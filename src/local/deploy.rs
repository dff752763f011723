//! `deploy` for local runs: network, workers, launcher — all of it or nothing. A failure or
//! Ctrl-C half way removes what was created (containers, network, private directory) and
//! forgets the run.

use super::rundir::{Contents, RunDir};
use super::{LocalRef, connect, docker_error, is_not_found, spec, undeploy};
use crate::app::App;
use crate::backend::Backend;
use crate::backend::{Run, SshKeys};
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use crate::state::{self, RunRecord};
use crate::ui::Ui;
use bollard::query_parameters::CreateContainerOptions;
use std::path::{Path, PathBuf};

/// A deployed local run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRun {
    pub run: LocalRef,
    pub image: String,
    pub network: String,
    /// Worker containers, then the launcher.
    pub containers: Vec<String>,
    /// The private directory holding the ssh keys (removed by `undeploy`).
    pub dir: PathBuf,
}

/// Creates and starts the run `run_id` of `app` with `image` on the local Docker engine and
/// records it in `<app_dir>/.hvdctl/runs.json`. Returns once
/// every container has started; `logs`/`status` follow it from there.
///
/// Bad input (PVC/NFS volumes, bad quantities, `runAsNonRoot` with a root image) fails before
/// anything is created, with exit code 2. On any later failure, or Ctrl-C, everything
/// created so far is removed before the error is returned.
pub async fn deploy(
    app_dir: &Path,
    app: &App,
    run_id: &str,
    image: &str,
    mut provenance: crate::provenance::Provenance,
    ui: &Ui,
) -> Result<LocalRun> {
    spec::check(app)?;
    let docker = connect().await?;
    let (image_user, image_id) = check_image(&docker, app, image).await?;
    // The image lives only here: its ID is its digest.
    provenance.image_digest = image_id;
    let r = LocalRef::new(&app.name, run_id);
    let network = r.network();
    match docker.bollard().inspect_network(&network, None).await {
        Ok(_) => {
            return Err(Error::input(format!(
                "run {run_id} of {} already exists on this Docker engine (network {network})",
                app.name
            ))
            .hint(format!(
                "pick another --run-id, or remove it first: hvdctl undeploy {run_id}"
            )));
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(docker_error(format!("inspecting network {network}"), &e)),
    }
    let record = RunRecord {
        run_id: run_id.to_string(),
        app: app.name.clone(),
        job: r.job.clone(),
        engine: Some(crate::types::EngineKind::Docker),
        namespace: None,
        context: None,
        image: image.to_string(),
        backend: Backend::Local.to_string(),
        created: state::now(),
    };
    // Recorded first: if hvdctl is killed half way, `hvdctl undeploy` still finds the run.
    state::record_run(app_dir, &record)?;
    let run = Run {
        app,
        backend: Backend::Local,
        run_id: run_id.to_string(),
        namespace: String::new(),
        image: image.to_string(),
    };
    let bar = ui.spinner(format!("creating the containers of {}", r.job));
    let created = tokio::select! {
        res = create(&docker, &run, &image_user, &provenance, &bar) => res,
        _ = tokio::signal::ctrl_c() => Err(Error::interrupted()),
    };
    bar.finish_and_clear();
    match created {
        Ok(done) => Ok(done),
        Err(e) => {
            ui.note(format!(
                "deploy of {} failed; removing what was created",
                r.job
            ));
            // Not cancellable: a second Ctrl-C must not stop the cleanup half way.
            match rollback(&docker, &r).await {
                Ok(()) => {
                    state::forget_run(app_dir, run_id)?;
                    Err(e)
                }
                Err(ce) => Err(e.context(format!(
                    "deploy failed and cleanup also failed ({ce}); run `hvdctl undeploy {run_id}` to finish it"
                ))),
            }
        }
    }
}

/// The image must be in the local engine (the local backend does not pull or push); returns
/// its configured user and its ID.
async fn check_image(
    docker: &DockerClient,
    app: &App,
    image: &str,
) -> Result<(String, Option<String>)> {
    let info = match docker.bollard().inspect_image(image).await {
        Ok(i) => i,
        Err(e) if is_not_found(&e) => {
            return Err(Error::failure(format!(
                "image {image} is not in the Docker engine at {}",
                docker.host()
            ))
            .hint(format!(
                "build it with `hvdctl build` (local runs need no push), or fetch it with `docker pull {image}`"
            )));
        }
        Err(e) => return Err(docker_error(format!("inspecting image {image}"), &e)),
    };
    let id = info.id.clone();
    let user = info.config.and_then(|c| c.user).unwrap_or_default();
    let sc = &app.security_context;
    if sc.run_as_non_root == Some(true) {
        let effective = sc
            .run_as_user
            .map(|u| u.to_string())
            .unwrap_or_else(|| user.split(':').next().unwrap_or("").to_string());
        if effective.is_empty() || effective == "0" || effective == "root" {
            return Err(Error::input(format!(
                "securityContext.runAsNonRoot is set, but the containers would run as root (image {image} has no non-root USER and runAsUser is not set)"
            ))
            .hint("set securityContext.runAsUser to a non-zero uid"));
        }
    }
    Ok((user, id))
}

async fn create(
    docker: &DockerClient,
    run: &Run<'_>,
    image_user: &str,
    provenance: &crate::provenance::Provenance,
    bar: &indicatif::ProgressBar,
) -> Result<LocalRun> {
    let app = run.app;
    let job = run.job_name();
    let keys = SshKeys::generate(&format!("hvdctl-{job}"))?;
    let sc = &app.security_context;
    let non_root = sc.run_as_user.is_some_and(|u| u != 0);
    let owner = non_root.then(|| {
        (
            sc.run_as_user.and_then(|u| u32::try_from(u).ok()),
            sc.run_as_group.and_then(|g| u32::try_from(g).ok()),
        )
    });
    let dir = RunDir::create(
        &job,
        &Contents {
            keys: &keys,
            hostfile: spec::hostfile(run),
            discover_hosts: spec::discover_hosts(run),
            workers: spec::workers_list(run),
            launcher_sh: crate::assets::script("launcher.sh").to_string(),
            worker_sh: crate::assets::script("worker.sh").to_string(),
            owner,
        },
    )?;
    drop(keys);
    let mut plan = spec::plan(run, &dir, image_user)?;
    for c in plan.workers.iter_mut().chain([&mut plan.launcher]) {
        c.body
            .labels
            .get_or_insert_with(Default::default)
            .extend(provenance.to_map());
    }
    bar.set_message(format!("creating network {}", plan.network.name));
    let network = plan.network.name.clone();
    docker
        .bollard()
        .create_network(plan.network)
        .await
        .map_err(|e| docker_error(format!("creating network {network}"), &e))?;
    let mut names = Vec::new();
    let total = plan.workers.len() + 1;
    for c in plan.workers.into_iter().chain([plan.launcher]) {
        bar.set_message(format!("starting {} ({}/{total})", c.name, names.len() + 1));
        docker
            .bollard()
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(c.name.clone()),
                    ..Default::default()
                }),
                c.body,
            )
            .await
            .map_err(|e| docker_error(format!("creating container {}", c.name), &e))?;
        docker
            .bollard()
            .start_container(&c.name, None)
            .await
            .map_err(|e| docker_error(format!("starting container {}", c.name), &e))?;
        names.push(c.name);
    }
    Ok(LocalRun {
        run: LocalRef::new(&app.name, &run.run_id),
        image: run.image.clone(),
        network,
        containers: names,
        dir: dir.root().to_path_buf(),
    })
}

/// Removes everything of a run that failed to deploy, including a container or network
/// whose create was in flight when it failed (looked for until three looks agree nothing
/// is left).
async fn rollback(docker: &DockerClient, r: &LocalRef) -> Result<()> {
    let mut quiet = 0;
    for _ in 0..40 {
        let removed = undeploy::remove(docker, r).await?;
        if removed.is_empty() {
            quiet += 1;
            if quiet == 3 {
                return Ok(());
            }
        } else {
            quiet = 0;
        }
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    Err(Error::failure(format!(
        "containers of {} kept appearing while cleaning up",
        r.job
    )))
}
