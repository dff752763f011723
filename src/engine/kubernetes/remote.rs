//! `exec`, `cp` and `port-forward` in a run's pods, through the API server's WebSocket
//! subresources (kube's `ws` feature: `pods/exec` on the v5/v4 channel protocols, with the
//! command's exit status as a `Status` on channel 3; `pods/portforward`), never the kubectl
//! program.
//!
//! `cp` is `kubectl cp`'s method: `tar` runs in the container (it must have `tar`, and `test`
//! to look at paths) and the archive travels over the exec's stdin or stdout, unpacked or
//! packed here while it streams. Exec and cp need a running container, as with kubectl.

use super::KubeRun;
use crate::cluster::status::run_pods;
use crate::error::{Error, Result};
use crate::logs::target::{Target, pod_short_name, targets_of};
use crate::remote::archive::{self, Copied};
use crate::remote::forward;
use crate::remote::path::{join_remote, local_landing, local_name, split_remote};
use crate::remote::stdio::{self, ExecRequest};
use crate::remote::{Pick, Which, choose};
use crate::ui::Ui;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess, TerminalSize};
use std::path::Path;
use tokio::io::AsyncWriteExt;

/// The pipe between kube's WebSocket task and our readers: large enough for tar streams.
const BUF: usize = 256 * 1024;

impl KubeRun {
    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), &self.run.namespace)
    }

    /// Every container of the run's pods as a log target (`uid` is the pod's).
    pub async fn targets(&self) -> Result<Vec<Target>> {
        let pods = run_pods(&self.cluster, &self.run).await?;
        Ok(pods
            .iter()
            .flat_map(|p| {
                let id = self.run.backend.identity();
                targets_of(p, id, &pod_short_name(&self.run.job, p, id, false), None)
            })
            .collect())
    }

    /// The pod and container `pick` names, which must be running.
    async fn pick(&self, pick: &Pick) -> Result<Target> {
        let mut pods = run_pods(&self.cluster, &self.run).await?;
        // A restarted launcher Job leaves several launcher pods: the running one, else the
        // newest, is "the launcher".
        pods.sort_by_key(|p| {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (!running, std::cmp::Reverse(created))
        });
        let targets: Vec<Target> = pods
            .iter()
            .flat_map(|p| {
                let id = self.run.backend.identity();
                targets_of(p, id, &pod_short_name(&self.run.job, p, id, false), None)
            })
            .collect();
        let t = choose(&targets, pick, &self.run.job)?;
        let pod = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&t.pod))
            .expect("the target is one of the pods");
        let status = pod.status.clone().unwrap_or_default();
        let running = status
            .container_statuses
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.name == t.container && c.state.as_ref().is_some_and(|s| s.running.is_some())
            });
        if !running {
            let phase = status.phase.unwrap_or_else(|| "Unknown".into());
            return Err(stdio::not_running(&place(&t), &phase));
        }
        Ok(t)
    }

    async fn attach(
        &self,
        t: &Target,
        command: Vec<String>,
        ap: AttachParams,
    ) -> Result<AttachedProcess> {
        let what = format!("running `{}` in {}", command.join(" "), place(t));
        self.pods_api()
            .exec(&t.pod, command, &ap.container(t.container.clone()))
            .await
            .map_err(|e| self.cluster.error(&what, &e))
    }

    /// Runs `command` (no stdin, no terminal) and gives its exit code, its stderr
    /// discarded: for `test` and the like.
    async fn probe(&self, t: &Target, command: &[&str]) -> Result<u8> {
        let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        let shown = command.join(" ");
        let mut p = self
            .attach(
                t,
                command,
                AttachParams::default().stdout(false).stderr(true),
            )
            .await?;
        let stderr = collect(p.stderr().expect("stderr attached"));
        let status = p.take_status().expect("status taken once").await;
        let _ = stderr.await;
        match exit_status(status, &format!("`{shown}` in {}", place(t)))? {
            code @ 126.. => Err(Error::failure(format!(
                "`{shown}` cannot run in {} (exit {code}): cp needs `test` and `tar` in the container, as kubectl cp does",
                place(t)
            ))),
            code => Ok(code),
        }
    }

    /// Runs `req` in the pod's container; its exit code.
    pub async fn exec(&self, pick: &Pick, req: &ExecRequest) -> Result<u8> {
        let t = self.pick(pick).await?;
        let ap = AttachParams::default()
            .stdin(req.stdin)
            .stdout(true)
            .stderr(!req.tty)
            .tty(req.tty)
            .max_stdout_buf_size(BUF)
            .max_stderr_buf_size(BUF);
        let mut p = self.attach(&t, req.command.clone(), ap).await?;
        let _raw = req.tty.then(crate::ui::raw::RawMode::enable).flatten();
        let status = p.take_status().expect("status taken once");
        let stdin = p.stdin().map(|w| tokio::spawn(stdio::pump_stdin(w)));
        let resize = p.terminal_size().map(|mut sizes_tx| {
            tokio::spawn(async move {
                let mut sizes = std::pin::pin!(crate::ui::raw::window_sizes());
                while let Some((width, height)) = sizes.next().await {
                    if sizes_tx.send(TerminalSize { width, height }).await.is_err() {
                        break;
                    }
                }
            })
        });
        let out = p.stdout().map(|r| {
            let output = req.output.clone();
            tokio::spawn(async move { output.copy_from(r, false).await })
        });
        let err = p.stderr().map(|r| {
            let output = req.output.clone();
            tokio::spawn(async move { output.copy_from(r, true).await })
        });
        let status = status.await;
        for task in [out, err].into_iter().flatten() {
            let _ = task.await;
        }
        for task in [stdin, resize].into_iter().flatten() {
            task.abort();
        }
        let _ = tokio::io::stdout().flush().await;
        exit_status(status, &format!("`{}` in {}", req.shown(), place(&t)))
    }

    /// Copies `remote` of the pod's main container to `local`: `tar cf -` in the container,
    /// unpacked here as it streams.
    pub async fn copy_from(
        &self,
        which: Which,
        remote: &str,
        local: &Path,
        ui: &Ui,
    ) -> Result<Copied> {
        let t = self.pick(&Pick::pod(which)).await?;
        if self.probe(&t, &["test", "-e", remote]).await? != 0 {
            return Err(missing(remote, &t));
        }
        let (parent, src_name) = split_remote(remote)?;
        let (dir, name) = local_landing(local, &src_name)?;
        let tar = ["tar", "cf", "-", "-C", &parent, &src_name].map(String::from);
        let ap = AttachParams::default()
            .stdout(true)
            .stderr(true)
            .max_stdout_buf_size(BUF);
        let mut p = self.attach(&t, tar.to_vec(), ap).await?;
        let status = p.take_status().expect("status taken once");
        let stdout = p.stdout().expect("stdout attached");
        let stderr = collect(p.stderr().expect("stderr attached"));
        let bar = ui.bytes_bar(format!("{which}:{remote}"), None);
        let copied = archive::unpack(stdout, dir, name, bar.clone()).await;
        bar.finish_and_clear();
        let code = exit_status(status.await, &format!("`tar` in {}", place(&t)))?;
        let stderr = stderr.await.unwrap_or_default();
        if code != 0 {
            return Err(Error::failure(format!(
                "copying {which}:{remote}: tar in {} exited with {code}: {}",
                place(&t),
                stderr.trim()
            )));
        }
        copied
    }

    /// Copies `local` into the pod's main container at `remote`: packed here as it streams
    /// into `tar xpf -` in the container.
    pub async fn copy_to(
        &self,
        local: &Path,
        which: Which,
        remote: &str,
        ui: &Ui,
    ) -> Result<Copied> {
        let t = self.pick(&Pick::pod(which)).await?;
        let src_name = local_name(local)?;
        let (dir, name) = if self.probe(&t, &["test", "-d", remote]).await? == 0 {
            (remote.to_string(), src_name)
        } else {
            let (parent, name) = split_remote(remote)?;
            if self.probe(&t, &["test", "-d", &parent]).await? != 0 {
                return Err(missing(&parent, &t));
            }
            (parent, name)
        };
        let packed = archive::pack(local, &name)?;
        let tar = ["tar", "xpf", "-", "-C", &dir].map(String::from);
        let ap = AttachParams::default()
            .stdin(true)
            .stdout(false)
            .stderr(true)
            .max_stdin_buf_size(BUF);
        let mut p = self.attach(&t, tar.to_vec(), ap).await?;
        let status = p.take_status().expect("status taken once");
        let mut stdin = p.stdin().expect("stdin attached");
        let stderr = collect(p.stderr().expect("stderr attached"));
        let bar = ui.bytes_bar(
            format!("{} → {which}:{}", local.display(), join_remote(&dir, &name)),
            Some(packed.size.bytes),
        );
        let errors = packed.stream.error_slot();
        let mut chunks = packed.stream;
        let mut sent = Ok(());
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(c) => {
                    if let Err(e) = stdin.write_all(&c).await {
                        sent = Err(e);
                        break;
                    }
                    bar.inc(c.len() as u64);
                }
                Err(_) => break,
            }
        }
        let _ = stdin.shutdown().await;
        bar.finish_and_clear();
        if let Some(e) = errors.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        let code = exit_status(status.await, &format!("`tar` in {}", place(&t)))?;
        let stderr = stderr.await.unwrap_or_default();
        if code != 0 || sent.is_err() {
            return Err(Error::failure(format!(
                "copying into {which}:{dir}: tar in {} exited with {code}: {}",
                place(&t),
                stderr.trim()
            )));
        }
        Ok(packed.size)
    }

    /// Forwards `listener`'s connections to port `remote` of the pod until Ctrl-C: one
    /// port-forward WebSocket per accepted connection.
    pub async fn port_forward(
        &self,
        pick: &Pick,
        listener: tokio::net::TcpListener,
        remote: u16,
    ) -> Result<()> {
        let t = self.pick(pick).await?;
        let api = self.pods_api();
        let cluster = self.cluster.clone();
        let target = format!("pod {}", t.pod);
        forward::serve(listener, remote, &target, || {
            let (api, cluster, pod) = (api.clone(), cluster.clone(), t.pod.clone());
            async move {
                let what = format!("forwarding to port {remote} of pod {pod}");
                let mut pf = api
                    .portforward(&pod, &[remote])
                    .await
                    .map_err(|e| cluster.error(&what, &e))?;
                let stream = pf
                    .take_stream(remote)
                    .ok_or_else(|| Error::failure(format!("{what}: no stream")))?;
                if let Some(error) = pf.take_error(remote) {
                    tokio::spawn(async move {
                        if let Some(e) = error.await {
                            crate::errln!(
                                "{}",
                                crate::text::for_terminal(&format!("port-forward: {what}: {e}"))
                            );
                        }
                    });
                }
                Ok(stream)
            }
        })
        .await
    }
}

/// `pod mnist-ab1-worker-1 (container worker)`.
fn place(t: &Target) -> String {
    format!("pod {} (container {})", t.pod, t.container)
}

fn missing(path: &str, t: &Target) -> Error {
    Error::not_found(format!("{path} does not exist in {}", place(t)))
}

/// Everything a reader gives, as text (a command's stderr), read concurrently.
fn collect(
    mut r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        let _ = (&mut r).take(64 * 1024).read_to_end(&mut buf).await;
        // Drain the rest so the exec never blocks on a full pipe.
        let _ = tokio::io::copy(&mut r, &mut tokio::io::sink()).await;
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// The exit code in an exec's final `Status` (channel 3): `Success` is 0; a
/// `NonZeroExitCode` carries the code as its `ExitCode` cause; a command that could not
/// start is 127 or 126 (its message printed, as kubectl does); anything else is the API
/// server's or the kubelet's failure.
fn exit_status(status: Option<Status>, what: &str) -> Result<u8> {
    let Some(s) = status else {
        return Err(Error::failure(format!(
            "{what}: the connection ended before the command's exit status arrived"
        )));
    };
    if s.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    let message = s.message.clone().unwrap_or_default();
    if s.reason.as_deref() == Some("NonZeroExitCode") {
        let code = s
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref()?.parse::<i64>().ok());
        if let Some(code) = code {
            return Ok(stdio::exit_code(code));
        }
    }
    if let Some(code) = stdio::cannot_run_code(&message) {
        crate::errln!("{}", crate::text::for_terminal(&message));
        return Ok(code);
    }
    Err(Error::failure(format!("{what}: {message}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: serde_json::Value) -> Option<Status> {
        Some(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn exit_codes_from_the_status_channel() {
        assert_eq!(
            exit_status(status(json!({"status": "Success"})), "x").unwrap(),
            0
        );
        let three = json!({
            "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: exit status 3",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
        });
        assert_eq!(exit_status(status(three), "x").unwrap(), 3);
        let not_found = json!({
            "status": "Failure", "reason": "InternalError",
            "message": "OCI runtime exec failed: exec: \"nope\": executable file not found in $PATH",
        });
        assert_eq!(exit_status(status(not_found), "x").unwrap(), 127);
        let other = json!({"status": "Failure", "reason": "InternalError", "message": "boom"});
        let e = exit_status(status(other), "`ls` in pod p").unwrap_err();
        assert_eq!(e.message, "`ls` in pod p: boom");
        assert!(exit_status(None, "x").is_err());
    }
}
