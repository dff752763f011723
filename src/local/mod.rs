//! The `local` backend: a whole MPI job on this machine's Docker engine.
//!
//! A run is a private bridge network `hvdctl-<job>`, one container per worker
//! (`<job>-worker-<i>`, hostname and network alias alike, running sshd through `worker.sh`)
//! and a launcher container (`<job>-launcher`, running `launcher.sh mpirun ...`). The run's
//! ssh key pair, hostfile and scripts live in a private temp dir ([`rundir`]: 0700, files
//! 0600) that is bind-mounted read-only and removed by `undeploy`. Everything carries
//! hvdctl's labels, so a run is found from the Docker engine alone.
//!
//! * [`spec`]: App → network and container specs (pure; unit-tested).
//! * [`rundir`]: the private directory of a run.
//! * [`deploy`]: create everything, or nothing (errors and Ctrl-C roll back).
//! * [`status`]: containers → job state and one row per container.
//! * [`logs`]: every container's log, multiplexed with the same printer as Kubernetes runs.
//! * [`events`]: container lifecycle from inspect state and the Docker events API.
//! * [`undeploy`]: remove containers, network and temp dir; idempotent.
//! * [`cmd`]: the entry points `hvdctl deploy|status|logs|events|undeploy` call for local runs.

pub mod cmd;
pub mod deploy;
pub mod events;
pub mod logs;
pub mod rundir;
pub mod spec;
pub mod status;
pub mod undeploy;

use crate::error::{Error, Result};
use crate::image::docker::{DockerClient, describe_bollard};
use crate::render::manifests::{LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
use crate::state;
use bollard::query_parameters::ListContainersOptions;
use std::collections::HashMap;
use std::path::Path;

pub use deploy::{LocalRun, deploy};

/// The kube "context" and "namespace" recorded for local runs.
pub const CONTEXT: &str = "local";
pub const NAMESPACE: &str = "local";
/// Label holding the run's private directory (so `undeploy` removes it).
pub const LABEL_DIR: &str = "hvdctl.io/local-dir";
/// Label holding the job name and the backend.
pub const LABEL_JOB: &str = "hvdctl.io/job";
pub const LABEL_BACKEND: &str = "hvdctl.io/backend";

/// A local run, as found in `.hvdctl/runs.json` or from container labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRef {
    pub run_id: String,
    pub app: String,
    /// `<app>-<run id>`.
    pub job: String,
}

impl LocalRef {
    pub fn new(app: &str, run_id: &str) -> LocalRef {
        LocalRef {
            run_id: run_id.to_string(),
            app: app.to_string(),
            job: crate::backend::job_name(app, run_id),
        }
    }

    /// `label` filters matching every container of this run (and nothing else).
    pub fn filters(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED_BY}={MANAGER}"),
                format!("{LABEL_RUN}={}", self.run_id),
                format!("{LABEL_BACKEND}=local"),
            ],
        )])
    }

    pub fn network(&self) -> String {
        network_name(&self.job)
    }
}

pub fn network_name(job: &str) -> String {
    format!("hvdctl-{job}")
}

pub fn launcher_name(job: &str) -> String {
    format!("{job}-launcher")
}

pub fn worker_name(job: &str, i: u32) -> String {
    format!("{job}-worker-{i}")
}

/// Connects to the Docker engine for a local run.
pub async fn connect() -> Result<DockerClient> {
    DockerClient::connect()
        .await
        .map_err(|e| e.context("the local backend runs the job on this machine's Docker engine"))
}

/// A Docker API error as an [`Error`] saying what was being done.
pub(crate) fn docker_error(what: impl std::fmt::Display, e: &bollard::errors::Error) -> Error {
    Error::failure(format!("{what}: {}", describe_bollard(e)))
}

/// Whether a bollard error is the daemon's 404.
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Finds the local run `arg` names (run id or job name), or — without `arg` — the app's last
/// run when that one is local. Looks in `.hvdctl/runs.json` only: no daemon is contacted, so
/// Kubernetes commands pay nothing for this check. See [`find_by_label`] for the rest.
pub fn resolve_recorded(app_dir: &Path, arg: Option<&str>) -> Result<Option<LocalRef>> {
    let runs = state::runs(app_dir)?;
    let local = |r: &state::RunRecord| r.context == CONTEXT && r.backend == "local";
    let found = match arg {
        Some(a) => runs
            .iter()
            .rev()
            .find(|r| r.run_id == a || r.job == a)
            .filter(|r| local(r)),
        None => runs.last().filter(|r| local(r)),
    };
    Ok(found.map(|r| LocalRef {
        run_id: r.run_id.clone(),
        app: r.app.clone(),
        job: r.job.clone(),
    }))
}

/// Finds a local run from container labels alone (run id or job name), e.g. from another
/// directory. `None` when no container of that run exists.
pub async fn find_by_label(docker: &DockerClient, arg: &str) -> Result<Option<LocalRef>> {
    let key = if arg.contains('-') {
        LABEL_JOB
    } else {
        LABEL_RUN
    };
    let filters = HashMap::from([(
        "label".to_string(),
        vec![
            format!("{LABEL_MANAGED_BY}={MANAGER}"),
            format!("{LABEL_BACKEND}=local"),
            format!("{key}={arg}"),
        ],
    )]);
    let list = docker
        .bollard()
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| docker_error("listing hvdctl's containers", &e))?;
    Ok(list.iter().find_map(|c| {
        let l = c.labels.as_ref()?;
        Some(LocalRef {
            run_id: l.get(LABEL_RUN)?.clone(),
            app: l.get(crate::render::manifests::LABEL_APP)?.clone(),
            job: l.get(LABEL_JOB)?.clone(),
        })
    }))
}
