//! Running another program hvdctl asks something of (`git`, a Docker credential helper) with a
//! deadline: one that does not answer in time is killed and said to have hung, never waited
//! on forever.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long `git` may take for one question (a `diff` of a large work tree included).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a credential helper may take (one that unlocks a keychain may prompt).
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a program gave no output.
#[derive(Debug)]
pub enum Failed {
    /// It could not be started.
    Start(std::io::Error),
    /// It did not end within the time given, and was killed.
    TimedOut(Duration),
    /// Waiting for it failed.
    Wait(std::io::Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Start(e) => write!(f, "cannot start it: {e}"),
            Failed::TimedOut(d) => write!(
                f,
                "it did not finish within {} s and was stopped",
                d.as_secs()
            ),
            Failed::Wait(e) => write!(f, "waiting for it failed: {e}"),
        }
    }
}

/// Runs `cmd` to its end with `input` on its stdin (or none), its stdout and stderr read
/// whole, killed after `limit`.
pub fn output(cmd: &mut Command, input: Option<&[u8]>, limit: Duration) -> Result<Output, Failed> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(Failed::Start)?;
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        let input = input.to_vec();
        // A program that exits without reading gives a broken pipe: its status tells.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(child.stdout.take().map(|s| Box::new(s) as _));
    let err = reader(child.stderr.take().map(|s| Box::new(s) as _));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failed::TimedOut(limit));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(Failed::Wait(e)),
        }
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// [`output`] on the async runtime: `cmd` (stdin closed) killed after `limit`.
pub async fn output_async(
    cmd: &mut tokio::process::Command,
    limit: Duration,
) -> Result<Output, Failed> {
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(e)) => Err(Failed::Start(e)),
        Err(_) => Err(Failed::TimedOut(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_hangs_is_stopped_at_its_deadline() {
        let started = Instant::now();
        let r = output(
            Command::new("sleep").arg("30"),
            None,
            Duration::from_millis(300),
        );
        assert!(matches!(r, Err(Failed::TimedOut(_))), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            Failed::TimedOut(Duration::from_secs(60)).to_string(),
            "it did not finish within 60 s and was stopped"
        );
    }

    #[test]
    fn input_goes_in_and_output_comes_back() {
        let o = output(
            &mut Command::new("cat"),
            Some(b"registry.example"),
            Duration::from_secs(30),
        )
        .unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout, b"registry.example");
    }

    #[test]
    fn an_async_program_that_hangs_is_stopped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(output_async(
            tokio::process::Command::new("sleep").arg("30"),
            Duration::from_millis(300),
        ));
        assert!(matches!(r, Err(Failed::TimedOut(_))), "{r:?}");
    }
}
