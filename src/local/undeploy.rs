//! `undeploy` for local runs: every container of the run (force-removed, with its anonymous
//! volumes), its network and its private directory. Idempotent: nothing left is not an error.

use super::{LABEL_DIR, LocalRef, docker_error, is_not_found, rundir};
use crate::error::Result;
use crate::image::docker::DockerClient;
use bollard::query_parameters::{ListNetworksOptions, RemoveContainerOptions};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// What one pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub dirs: Vec<PathBuf>,
}

impl Removed {
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.networks.is_empty() && self.dirs.is_empty()
    }

    /// `2 containers, 1 network, 1 private directory`.
    pub fn summary(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        [
            plural(self.containers.len(), "container", "containers"),
            plural(self.networks.len(), "network", "networks"),
            plural(self.dirs.len(), "private directory", "private directories"),
        ]
        .join(", ")
    }
}

/// Removes the run `r` and checks that it is gone (a container created concurrently is
/// removed too). Returns everything removed.
pub async fn undeploy(docker: &DockerClient, r: &LocalRef) -> Result<Removed> {
    let mut all = Removed::default();
    for _ in 0..10 {
        let pass = remove(docker, r).await?;
        if pass.is_empty() {
            return Ok(all);
        }
        all.containers.extend(pass.containers);
        all.networks.extend(pass.networks);
        all.dirs.extend(pass.dirs);
    }
    Ok(all)
}

/// One pass: removes what exists now.
pub async fn remove(docker: &DockerClient, r: &LocalRef) -> Result<Removed> {
    let d = docker.bollard();
    let mut out = Removed::default();
    let list = super::status::listed(docker, r).await?;
    let mut dirs: BTreeSet<PathBuf> = rundir::find(&r.job).into_iter().collect();
    for c in &list {
        if let Some(dir) = c.labels.as_ref().and_then(|l| l.get(LABEL_DIR)) {
            dirs.insert(PathBuf::from(dir));
        }
        let Some(id) = c.id.as_deref() else { continue };
        let name = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map_or(id, |n| n.trim_start_matches('/'))
            .to_string();
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match d.remove_container(id, Some(opts)).await {
            Ok(()) => out.containers.push(name),
            Err(e) if is_not_found(&e) => {}
            // "removal already in progress"
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => out.containers.push(name),
            Err(e) => return Err(docker_error(format!("removing container {name}"), &e)),
        }
    }
    let nets = d
        .list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([(
                "label".to_string(),
                r.filters()["label"].clone(),
            )])),
        }))
        .await
        .map_err(|e| docker_error(format!("listing the networks of {}", r.job), &e))?;
    for n in nets {
        let Some(id) = n.id.as_deref() else { continue };
        let name = n.name.clone().unwrap_or_else(|| id.to_string());
        // A container being removed may still hold the network for a moment.
        let mut tries = 0;
        loop {
            match d.remove_network(id).await {
                Ok(()) => {
                    out.networks.push(name);
                    break;
                }
                Err(e) if is_not_found(&e) => break,
                Err(e) if tries < 20 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(docker_error(format!("removing network {name}"), &e)),
            }
        }
    }
    for dir in dirs {
        if rundir::remove(&dir, Some(&r.job))? {
            out.dirs.push(dir);
        }
    }
    Ok(out)
}
