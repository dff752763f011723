//! `hvdctl tensorboard [RUN] [--port P]`: TensorBoard in rank 0's pod/container, forwarded
//! to `127.0.0.1:P` until Ctrl-C (exit 0); see `crate::remote::tensorboard`.

use super::runtime;
use crate::cli::{Global, TensorboardArgs};
use crate::engine::Env;
use crate::error::{Error, Result};
use crate::remote::forward;
use crate::remote::rank0;
use crate::remote::tensorboard::{REMOTE_PORT, start_request, started};
use crate::ui::Ui;
use std::io::Write;

pub fn run(g: &Global, ui: &Ui, a: TensorboardArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    runtime(true)?.block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        let job = run.info().job.clone();
        let listener = forward::listen(a.port).await?;
        let state = run.status().await?.state;
        if state.is_finished() {
            return Err(Error::failure(format!(
                "run {job} has ended ({state:?}): TensorBoard runs in its rank-0 container, which no longer runs"
            ))
            .hint(format!(
                "copy the event files out with `hvdctl cp {} worker-0:LOGDIR ./tensorboard` (LOGDIR: tensorboard.logDir) and run `tensorboard --logdir ./tensorboard`",
                run.info().run_id
            )));
        }
        let (pick, start) = (rank0(), start_request());
        tokio::select! {
            code = run.exec(&pick, &start) => started(code?, &job)?,
            _ = tokio::signal::ctrl_c() => return Err(Error::interrupted()),
        }
        let local = listener
            .local_addr()
            .map_err(|e| Error::failure(format!("local listener: {e}")))?;
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "TensorBoard of run {job} (worker-0): http://{local}/  (Ctrl-C to stop forwarding)"
            );
            let _ = out.flush();
        }
        tokio::select! {
            r = run.port_forward(&pick, listener, REMOTE_PORT) => r.map(|()| 0),
            // Ctrl-C is how it ends; TensorBoard lives on in the container until the run ends.
            _ = tokio::signal::ctrl_c() => Ok(0),
        }
    })
}
