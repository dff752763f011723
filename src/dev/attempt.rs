//! One attempt of `hvdctl dev`: the launch command run in the warm launcher through exec
//! (`templates/scripts/attempt.sh` stops the attempt still running first), its output read
//! as the launcher's log lines — rank tags through [`crate::logs::rank`] — each stamped with
//! the attempt's number.

use crate::engine::Run;
use crate::error::Result;
use crate::logs::printer::{LineFormat, Style};
use crate::logs::target::Target;
use crate::remote::stdio::{ExecRequest, Output};
use crate::remote::{Pick, Which};
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The exec of attempt.sh with the launch command as its arguments.
pub fn request(launch: &[String], output: Output) -> ExecRequest {
    let mut command = vec![
        "/bin/bash".to_string(),
        "-c".to_string(),
        crate::assets::script("attempt.sh").into_owned(),
        "attempt".to_string(),
    ];
    command.extend(launch.iter().cloned());
    ExecRequest {
        command,
        stdin: false,
        tty: false,
        output,
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// The launch command's exit code.
    pub code: u8,
    /// Lines printed.
    pub lines: u64,
}

/// Runs attempt `n` in the launcher and prints its lines as they come.
pub async fn run(
    run: Arc<Run>,
    n: u32,
    launch: Vec<String>,
    launcher: Target,
    style: Style,
) -> Result<Ended> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>(crate::logs::printer::CHANNEL);
    let printer = tokio::spawn(print_lines(
        rx,
        LineFormat::new(&launcher, style).with_attempt(n),
    ));
    let pick = Pick::pod(Which::Launcher);
    let code = run
        .exec(&pick, &request(&launch, Output::Channel(tx)))
        .await;
    let lines = printer.await.unwrap_or(0);
    Ok(Ended { code: code?, lines })
}

/// Splits the chunks into lines, formats and prints them (stdout, one write per chunk);
/// how many lines were printed.
async fn print_lines(mut rx: mpsc::Receiver<Vec<u8>>, mut fmt: LineFormat) -> u64 {
    let mut pending: Vec<u8> = Vec::new();
    let mut lines = 0;
    while let Some(chunk) = rx.recv().await {
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        let ts = crate::state::now();
        let mut start = 0;
        while let Some(i) = pending[start..].iter().position(|&b| b == b'\n') {
            lines += fmt.push(&mut out, ts.as_bytes(), &pending[start..start + i]);
            start += i + 1;
        }
        pending.drain(..start);
        write(&out);
    }
    let mut out = Vec::new();
    if !pending.is_empty() {
        lines += fmt.push(&mut out, crate::state::now().as_bytes(), &pending);
    }
    lines += fmt.finish(&mut out);
    write(&out);
    lines
}

fn write(out: &[u8]) {
    if out.is_empty() {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(out).and_then(|_| stdout.flush()) {
        crate::errln!("hvdctl: writing an attempt's lines to stdout: {e}");
    }
}
