//! `scale` for local runs: more or fewer worker containers for a running elastic run, in
//! place (same run id, network and private directory).
//!
//! New workers are copies of a worker of the run (image, environment, mounts, limits,
//! labels) under the next unused index, so a lost worker's container and log stay as they
//! were. The list `discover_hosts.sh` probes (`/etc/mpi/workers`) is rewritten after the
//! new containers start, and before removed ones stop: Horovod takes new workers in once
//! their sshd answers and lets go of removed ones as hosts it no longer finds.

use super::rundir::RunDir;
use super::status::{Container, containers, elastic_bounds};
use super::{LocalRef, docker_error, worker_name};
use crate::backend::elastic;
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::types::Scaled;
use bollard::models::{ContainerCreateBody, EndpointSettings, NetworkingConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use std::collections::HashMap;
use std::path::PathBuf;

/// Sets the live workers of the elastic run `r` to `workers`.
pub async fn scale(docker: &DockerClient, r: &LocalRef, workers: u32) -> Result<Scaled> {
    let cs = containers(docker, r).await?;
    if cs.is_empty() {
        return Err(Error::not_found(format!(
            "local run {} ({}) has no containers on this Docker engine",
            r.run_id, r.job
        )));
    }
    let bounds = elastic::check_scale(&r.job, elastic_bounds(&cs), workers)?;
    let launcher = cs.iter().find(|c| c.role == ROLE_LAUNCHER);
    if launcher.is_none_or(|l| l.finished()) {
        return Err(
            Error::input(format!("{} has ended: there is nothing to scale", r.job))
                .hint("deploy a new run with --set workers=N"),
        );
    }
    let live: Vec<&Container> = cs
        .iter()
        .filter(|c| c.role == ROLE_WORKER && c.alive())
        .collect();
    let before = live.len() as u32;
    let template = live
        .first()
        .ok_or_else(|| Error::failure(format!("{} has no live worker to copy", r.job)))?;
    let dir = RunDir::at(PathBuf::from(&template.dir));
    let mut names: Vec<String> = live.iter().map(|c| c.name.clone()).collect();
    if workers > before {
        let first = cs.iter().filter_map(|c| c.index).max().map_or(0, |i| i + 1);
        for next in first..first + (workers - before) {
            let name = worker_name(&r.job, next);
            add_worker(docker, r, template, &name).await?;
            names.push(name);
        }
        dir.write_workers(&names)?;
    } else if workers < before {
        // The newest workers go first.
        let mut by_index: Vec<&Container> = live.clone();
        by_index.sort_by_key(|c| c.index);
        let gone: Vec<&Container> = by_index.split_off(workers as usize);
        names = by_index.iter().map(|c| c.name.clone()).collect();
        dir.write_workers(&names)?;
        for c in gone {
            docker
                .bollard()
                .remove_container(
                    &c.id,
                    Some(RemoveContainerOptions {
                        force: true,
                        // Its emptyDir volumes go with it.
                        v: true,
                        ..Default::default()
                    }),
                )
                .await
                .map_err(|e| docker_error(format!("removing worker {}", c.name), &e))?;
        }
    }
    Ok(Scaled {
        job: r.job.clone(),
        before,
        after: workers,
        bounds,
    })
}

/// Creates and starts worker `name` as a copy of `template`.
async fn add_worker(
    docker: &DockerClient,
    r: &LocalRef,
    template: &Container,
    name: &str,
) -> Result<()> {
    let d = docker.bollard();
    let i = d
        .inspect_container(&template.id, None)
        .await
        .map_err(|e| docker_error(format!("inspecting worker {}", template.name), &e))?;
    let config = i.config.unwrap_or_default();
    let network = r.network();
    let body = ContainerCreateBody {
        hostname: Some(name.to_string()),
        user: config.user,
        env: config.env,
        image: config.image,
        entrypoint: config.entrypoint,
        cmd: config.cmd,
        working_dir: config.working_dir,
        labels: config.labels,
        host_config: i.host_config,
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.clone(),
                EndpointSettings {
                    aliases: Some(vec![name.to_string()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    };
    d.create_container(
        Some(CreateContainerOptions {
            name: Some(name.to_string()),
            ..Default::default()
        }),
        body,
    )
    .await
    .map_err(|e| docker_error(format!("creating worker {name}"), &e))?;
    d.start_container(name, None)
        .await
        .map_err(|e| docker_error(format!("starting worker {name}"), &e))?;
    Ok(())
}
