//! The local end of `hvdctl exec`, the same for both engines: what was asked (command,
//! stdin, terminal), this process's stdin copied to the remote command until its end, and
//! how a command that could not start becomes an exit code.

use crate::error::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// A command to run in a pod/container.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: Vec<String>,
    /// Send this process's stdin to the command (`-i`).
    pub stdin: bool,
    /// A terminal for the command (`-t`): raw mode here, stdout and stderr merged there.
    pub tty: bool,
    /// Where the command's output goes.
    pub output: Output,
}

/// Where an exec's output goes: this process's stdout and stderr (`hvdctl exec`), or chunks
/// of stdout and stderr alike on a channel (`hvdctl dev`, which reads them as log lines).
#[derive(Debug, Clone, Default)]
pub enum Output {
    #[default]
    Terminal,
    Channel(mpsc::Sender<Vec<u8>>),
}

impl Output {
    /// Writes one chunk of the command's stdout (or stderr); an error once the reader is
    /// gone (a closed stdout, a dropped channel).
    pub async fn write(&self, chunk: &[u8], stderr: bool) -> std::io::Result<()> {
        match self {
            Output::Terminal if stderr => {
                let mut err = tokio::io::stderr();
                err.write_all(chunk).await?;
                err.flush().await
            }
            Output::Terminal => {
                let mut out = tokio::io::stdout();
                out.write_all(chunk).await?;
                out.flush().await
            }
            Output::Channel(tx) => tx
                .send(chunk.to_vec())
                .await
                .map_err(|_| std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Copies `r` (the command's stdout or stderr) here until it ends or the reader is gone.
    pub async fn copy_from(&self, mut r: impl AsyncRead + Unpin, stderr: bool) {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = r.read(&mut buf).await {
            if self.write(&buf[..n], stderr).await.is_err() {
                break;
            }
        }
    }
}

impl ExecRequest {
    /// `-t` needs a terminal on stdin: without one it is dropped with a warning, as kubectl
    /// does ("Unable to use a TTY").
    pub fn new(command: Vec<String>, stdin: bool, tty: bool, ui: &crate::ui::Ui) -> ExecRequest {
        use std::io::IsTerminal;
        let tty = tty && {
            let ok = std::io::stdin().is_terminal();
            if !ok {
                ui.note("warning: -t needs a terminal on stdin; running without one");
            }
            ok
        };
        ExecRequest {
            command,
            stdin,
            tty,
            output: Output::Terminal,
        }
    }

    /// The command as a person would type it, for messages.
    pub fn shown(&self) -> String {
        self.command.join(" ")
    }
}

/// Copies this process's stdin to `remote` until it ends, then closes `remote` so the
/// command sees the end of its input.
pub async fn pump_stdin(mut remote: impl AsyncWrite + Unpin) {
    let mut stdin = tokio::io::stdin();
    let _ = tokio::io::copy(&mut stdin, &mut remote).await;
    let _ = remote.shutdown().await;
}

/// The exit code of a command the engine could not start, from the engine's message, the
/// way shells count: 127 not found, 126 found but not executable. `None` for any other
/// failure (the engine's, not the command's).
pub fn cannot_run_code(message: &str) -> Option<u8> {
    let m = message.to_ascii_lowercase();
    if m.contains("executable file not found") || m.contains("no such file or directory") {
        Some(127)
    } else if m.contains("permission denied") || m.contains("exec format error") {
        Some(126)
    } else {
        None
    }
}

/// An exit code as the process's own (`u8`): out-of-range codes (Windows-style, negative)
/// become 1 rather than wrapping to 0.
pub fn exit_code(code: i64) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

/// Where a command ran, for messages: `pod mnist-ab1-worker-1 (container worker)` or
/// `container mnist-ab1-worker-1`.
pub fn failed_to_run(req: &ExecRequest, place: &str, why: impl std::fmt::Display) -> Error {
    Error::failure(format!("running `{}` in {place}: {why}", req.shown()))
}

/// An exec on a target that does not run (any more): exit 1, saying what can be done.
pub fn not_running(place: &str, state: &str) -> Error {
    Error::failure(format!(
        "{place} is not running ({state}): exec needs a running container"
    ))
    .hint("`hvdctl cp` copies from a finished local run's containers; see `hvdctl status`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_that_cannot_run_count_like_a_shell() {
        assert_eq!(
            cannot_run_code(
                "OCI runtime exec failed: exec failed: unable to start container process: exec: \"nope\": executable file not found in $PATH: unknown"
            ),
            Some(127)
        );
        assert_eq!(
            cannot_run_code("exec: \"/etc/passwd\": permission denied"),
            Some(126)
        );
        assert_eq!(cannot_run_code("error dialing backend: timeout"), None);
        assert_eq!(exit_code(3), 3);
        assert_eq!(exit_code(-1), 1);
        assert_eq!(exit_code(256), 1);
    }
}
