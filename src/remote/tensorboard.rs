//! `hvdctl tensorboard`: TensorBoard started in rank 0's pod/container (worker 0, where
//! rank 0 writes `tensorboard.logDir`) through `exec`, then reached through the engine's
//! port-forward. The event files never leave the run and nothing is installed on this
//! machine; the price is that the run's image must have the `tensorboard` package and
//! the container must still run (see `docs/architecture.md`).

use crate::backend::values::TENSORBOARD_LOG_DIR;
use crate::error::{Error, Result};
use crate::remote::stdio::ExecRequest;

/// TensorBoard's port inside the container (its own default).
pub const REMOTE_PORT: u16 = 6006;

/// Exit code of the script when the container has no `TENSORBOARD_LOG_DIR`.
const NO_LOG_DIR: u8 = 3;
/// Exit code of the script when the image has no `tensorboard` program.
const NO_TENSORBOARD: u8 = 127;

/// Exit code of the script when rank 0 has not created the log directory within 5 minutes.
const NO_WRITER: u8 = 4;

/// Run with `sh -c SCRIPT tensorboard PORT`: the log directory is the container's own
/// `TENSORBOARD_LOG_DIR` (what the ranks were given), read before anything else. A
/// TensorBoard already answering on PORT (an earlier `hvdctl tensorboard`) is reused.
/// Otherwise the script waits until rank 0 has created the directory (its writer starts
/// with training, after Horovod's start-up: a TensorBoard started while the ranks were
/// still starting was seen to stall `hvd.init()` on rank 0), then starts TensorBoard in the
/// background — it lives as long as the container — and returns once it answers, or prints
/// TensorBoard's log and fails.
const SCRIPT: &str = r#"
port=$1
dir=${TENSORBOARD_LOG_DIR:-}
[ -n "$dir" ] || exit 3
command -v tensorboard >/dev/null 2>&1 || exit 127
up() { python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null; }
up && exit 0
[ -d "$dir" ] || echo "waiting for rank 0 to create $dir (it does when training starts)" >&2
i=0
while [ ! -d "$dir" ]; do
    [ "$i" -lt 600 ] || exit 4
    sleep 0.5
    i=$((i + 1))
done
log=/tmp/hvdctl-tensorboard.log
nohup tensorboard --logdir "$dir" --port "$port" --bind_all >"$log" 2>&1 </dev/null &
pid=$!
i=0
while [ "$i" -lt 240 ]; do
    up && exit 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
    i=$((i + 1))
done
cat "$log" >&2
exit 1
"#;

/// The exec that starts (or finds) TensorBoard in rank 0's container.
pub fn start_request() -> ExecRequest {
    ExecRequest {
        command: vec![
            "sh".into(),
            "-c".into(),
            SCRIPT.into(),
            "tensorboard".into(),
            REMOTE_PORT.to_string(),
        ],
        stdin: false,
        tty: false,
        output: Default::default(),
    }
}

/// What the start script's exit code means for run `job`: `Ok` once TensorBoard answers.
pub fn started(code: u8, job: &str) -> Result<()> {
    match code {
        0 => Ok(()),
        NO_LOG_DIR => Err(Error::input(format!(
            "run {job} has no TensorBoard log directory: its worker-0 has no {TENSORBOARD_LOG_DIR}"
        ))
        .hint("set `tensorboard: {logDir: /tmp/tensorboard}` in hvdctl.yaml (or --set tensorboard.logDir=/tmp/tensorboard) and deploy again")),
        NO_TENSORBOARD => Err(Error::failure(format!(
            "the image of run {job} has no `tensorboard` program in worker-0"
        ))
        .hint("install the tensorboard package in the app's Dockerfile (`pip install tensorboard`) and build and deploy again")),
        NO_WRITER => Err(Error::failure(format!(
            "rank 0 of run {job} has not created its TensorBoard log directory (${TENSORBOARD_LOG_DIR} in worker-0) in 5 minutes"
        ))
        .hint("rank 0 creates it when training starts, and skips it when the image lacks the tensorboard package: see `hvdctl logs`")),
        other => Err(Error::failure(format!(
            "TensorBoard did not start in worker-0 of run {job} (exit {other}; its log is above)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    #[test]
    fn the_scripts_codes_become_kinds() {
        assert!(started(0, "a-b").is_ok());
        let e = started(NO_LOG_DIR, "a-b").unwrap_err();
        assert_eq!(e.kind, Kind::Input);
        assert!(e.message.contains("a-b"), "{e}");
        assert_eq!(
            started(NO_TENSORBOARD, "a-b").unwrap_err().kind,
            Kind::Failure
        );
        assert_eq!(started(1, "a-b").unwrap_err().kind, Kind::Failure);
    }

    #[test]
    fn the_port_is_an_argument_not_script_text() {
        let req = start_request();
        assert_eq!(req.command[..2], ["sh", "-c"]);
        assert_eq!(req.command.last().unwrap(), "6006");
        assert!(!req.command[2].contains("6006"));
    }
}
