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
//! * [`scale`]: more or fewer workers for a running elastic run.
//! * [`undeploy`]: remove containers, network and temp dir; idempotent.
//!
//! `crate::engine::docker` presents these as the Docker engine's verbs.

pub mod deploy;
pub mod events;
pub mod logs;
pub mod rundir;
pub mod scale;
pub mod spec;
pub mod status;
pub mod undeploy;

use crate::error::{Error, Result};
use crate::image::docker::{DockerClient, describe_bollard};
use crate::render::manifests::{LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
use std::collections::HashMap;

pub use deploy::{LocalRun, deploy};

/// Label holding the run's private directory (so `undeploy` removes it).
pub const LABEL_DIR: &str = "hvdctl.io/local-dir";
/// Label holding the job name.
pub const LABEL_JOB: &str = "hvdctl.io/job";
pub use crate::render::manifests::LABEL_BACKEND;

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

/// The index in a worker container's name ([`worker_name`]: the local engine names its
/// containers itself, so it reads them back).
pub fn worker_index(name: &str) -> Option<u32> {
    name.rsplit_once("-worker-")
        .and_then(|(_, i)| i.parse().ok())
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
