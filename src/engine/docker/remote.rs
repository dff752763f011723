//! `exec`, `cp` and `port-forward` in a local run's containers, through the Docker Engine
//! API (never the docker program): exec instances, the archive API (which also reads and
//! writes stopped containers, so a finished run's results can be copied out), and the
//! container's address on the run's network.
//!
//! Port-forward connects from this machine to the container's IP on the run's bridge network
//! (`hvdctl-<job>`), as the fake cluster's kubelet does for pods. That needs the daemon's
//! bridge to be reachable from here — true for a local Linux daemon (the `local` backend's
//! home); a remote or Docker Desktop daemon is not, and the connection error says so.
//! Publishing ports would need them chosen when the containers are created, and a relay
//! container would need an image with a relay in it: neither is available after the fact.

use super::DockerRun;
use crate::error::{Error, Result};
use crate::local::status::{Container, Status, containers};
use crate::local::{docker_error, is_not_found};
use crate::logs::target::Target;
use crate::remote::archive::{self, Copied};
use crate::remote::forward;
use crate::remote::path::{join_remote, local_landing, local_name, split_remote};
use crate::remote::stdio::{self, ExecRequest};
use crate::remote::{Pick, Which, choose};
use crate::ui::Ui;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use futures::{StreamExt, TryStreamExt};
use std::path::Path;
use std::time::Duration;

/// Go's `os.ModeDir`, in the mode the archive API's stat reports.
const GO_MODE_DIR: u32 = 1 << 31;

impl DockerRun {
    /// The container `pick` names (its `-c` can only be its role: one container per
    /// launcher or worker).
    async fn pick(&self, pick: &Pick) -> Result<(Target, Container)> {
        let all = containers(&self.docker, &self.run).await?;
        if all.is_empty() {
            return Err(Error::not_found(format!(
                "local run {} ({}) has no containers on this Docker engine",
                self.run.run_id, self.run.job
            )));
        }
        let targets: Vec<Target> = all
            .iter()
            .map(crate::local::status::Container::target)
            .collect();
        let t = choose(&targets, pick, &self.run.job)?;
        let c = all
            .into_iter()
            .find(|c| c.id == t.uid)
            .expect("the target is one of the containers");
        Ok((t, c))
    }

    /// Every container of the run as a log target.
    pub async fn targets(&self) -> Result<Vec<Target>> {
        let all = containers(&self.docker, &self.run).await?;
        Ok(all
            .iter()
            .map(crate::local::status::Container::target)
            .collect())
    }

    /// Runs `req` in the container; its exit code.
    pub async fn exec(&self, pick: &Pick, req: &ExecRequest) -> Result<u8> {
        let (t, c) = self.pick(pick).await?;
        let place = format!("container {}", t.pod);
        if c.status != Status::Running {
            return Err(stdio::not_running(&place, c.phase()));
        }
        let d = self.docker.bollard();
        let created = d
            .create_exec(
                &t.uid,
                CreateExecOptions {
                    attach_stdin: Some(req.stdin),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(req.tty),
                    cmd: Some(req.command.clone()),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| docker_error(format!("running `{}` in {place}", req.shown()), &e))?;
        let started = d
            .start_exec(
                &created.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: req.tty,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(|e| docker_error(format!("running `{}` in {place}", req.shown()), &e))?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err(stdio::failed_to_run(req, &place, "the exec was detached"));
        };
        let _raw = req.tty.then(crate::ui::raw::RawMode::enable).flatten();
        // The terminal's size first, before any input (later changes follow below).
        if req.tty
            && let Some((width, height)) = crate::ui::raw::window_size()
        {
            let _ = d
                .resize_exec(&created.id, ResizeExecOptions { width, height })
                .await;
        }
        let stdin = req.stdin.then(|| tokio::spawn(stdio::pump_stdin(input)));
        let resize = req.tty.then(|| {
            let (d, id) = (d.clone(), created.id.clone());
            tokio::spawn(async move {
                let mut sizes = std::pin::pin!(crate::ui::raw::window_sizes());
                while let Some((width, height)) = sizes.next().await {
                    let _ = d
                        .resize_exec(&id, ResizeExecOptions { width, height })
                        .await;
                }
            })
        });
        let pumped: Result<()> = async {
            while let Some(msg) = output.next().await {
                let msg = msg.map_err(|e| docker_error(format!("reading from {place}"), &e))?;
                let written = match msg {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        req.output.write(&message, false).await
                    }
                    LogOutput::StdErr { message } => req.output.write(&message, true).await,
                    LogOutput::StdIn { .. } => Ok(()),
                };
                // Our stdout closed (`| head`): stop copying, still report the exit code.
                if written.is_err() {
                    break;
                }
            }
            Ok(())
        }
        .await;
        for task in [stdin, resize].into_iter().flatten() {
            task.abort();
        }
        pumped?;
        // The output ends as the process does; its exit code may take a moment to appear.
        for _ in 0..40 {
            let i = d
                .inspect_exec(&created.id)
                .await
                .map_err(|e| docker_error(format!("inspecting the exec in {place}"), &e))?;
            if let (Some(code), Some(false)) = (i.exit_code, i.running) {
                return Ok(stdio::exit_code(code));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(stdio::failed_to_run(
            req,
            &place,
            "its output ended but Docker reports no exit code",
        ))
    }

    /// Whether `path` exists in container `id` and is a directory; `None` when it does not
    /// exist.
    async fn stat(&self, id: &str, path: &str) -> Result<Option<bool>> {
        let opts = ContainerArchiveInfoOptions {
            path: path.to_string(),
        };
        match self
            .docker
            .bollard()
            .get_container_archive_info(id, Some(opts))
            .await
        {
            Ok(st) => Ok(Some(st.file_mode & GO_MODE_DIR != 0)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(docker_error(
                format!("looking at {path} in container {id}"),
                &e,
            )),
        }
    }

    /// Copies `remote` (a file or directory) of the `which` container to `local`; works on
    /// stopped containers too.
    pub async fn copy_from(
        &self,
        which: Which,
        remote: &str,
        local: &Path,
        ui: &Ui,
    ) -> Result<Copied> {
        let pick = Pick::pod(which);
        let (t, _) = self.pick(&pick).await?;
        if self.stat(&t.uid, remote).await?.is_none() {
            return Err(missing(remote, &t.pod));
        }
        let (_, src_name) = split_remote(remote)?;
        let (dir, name) = local_landing(local, &src_name)?;
        let bar = ui.bytes_bar(format!("{which}:{remote}"), None);
        let opts = DownloadFromContainerOptions {
            path: remote.to_string(),
        };
        let body = self
            .docker
            .bollard()
            .download_from_container(&t.uid, Some(opts))
            .map_err(std::io::Error::other);
        let reader = tokio_util::io::StreamReader::new(body);
        let copied = archive::unpack(reader, dir, name, bar.clone()).await;
        bar.finish_and_clear();
        copied.map_err(|e| e.context(format!("copying {which}:{remote} from container {}", t.pod)))
    }

    /// Copies `local` (a file or directory) into the `which` container at `remote`.
    pub async fn copy_to(
        &self,
        local: &Path,
        which: Which,
        remote: &str,
        ui: &Ui,
    ) -> Result<Copied> {
        let pick = Pick::pod(which);
        let (t, _) = self.pick(&pick).await?;
        let src_name = local_name(local)?;
        let (dir, name) = match self.stat(&t.uid, remote).await? {
            Some(true) => (remote.to_string(), src_name),
            _ => {
                let (parent, name) = split_remote(remote)?;
                if self.stat(&t.uid, &parent).await? != Some(true) {
                    return Err(missing(&parent, &t.pod));
                }
                (parent, name)
            }
        };
        let packed = archive::pack(local, &name)?;
        let bar = ui.bytes_bar(
            format!("{} → {which}:{}", local.display(), join_remote(&dir, &name)),
            Some(packed.size.bytes),
        );
        let errors = packed.stream.error_slot();
        let counted = {
            let bar = bar.clone();
            packed
                .stream
                .inspect_ok(move |chunk| bar.inc(chunk.len() as u64))
        };
        let opts = UploadToContainerOptions {
            path: dir.clone(),
            ..Default::default()
        };
        let sent = self
            .docker
            .bollard()
            .upload_to_container(&t.uid, Some(opts), bollard::body_try_stream(counted))
            .await;
        bar.finish_and_clear();
        if let Some(e) = errors.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        sent.map_err(|e| docker_error(format!("copying into {dir} of container {}", t.pod), &e))?;
        Ok(packed.size)
    }

    /// Forwards `listener`'s connections to port `remote` of the container until Ctrl-C.
    pub async fn port_forward(
        &self,
        pick: &Pick,
        listener: tokio::net::TcpListener,
        remote: u16,
    ) -> Result<()> {
        let (t, c) = self.pick(pick).await?;
        if c.status != Status::Running {
            return Err(Error::failure(format!(
                "container {} is not running ({}): nothing to forward to",
                t.pod,
                c.phase()
            )));
        }
        let network = self.run.network();
        let inspected = self
            .docker
            .bollard()
            .inspect_container(&t.uid, None)
            .await
            .map_err(|e| docker_error(format!("inspecting container {}", t.pod), &e))?;
        let ip = inspected
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(&network))
            .and_then(|e| e.ip_address)
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| {
                Error::failure(format!(
                    "container {} has no address on network {network}",
                    t.pod
                ))
            })?;
        let target = format!("container {} at {ip}", t.pod);
        forward::serve(listener, remote, &target, || {
            let ip = ip.clone();
            async move {
                tokio::net::TcpStream::connect((ip.as_str(), remote))
                    .await
                    .map_err(|e| {
                        Error::failure(format!("connecting to {ip}:{remote}: {e}")).hint(
                            "the container's address must be reachable from this machine (a local Linux Docker engine)",
                        )
                    })
            }
        })
        .await
    }
}

/// A remote path that does not exist: exit 1, naming it.
fn missing(path: &str, container: &str) -> Error {
    Error::not_found(format!("{path} does not exist in container {container}"))
}
