//! How build and push report progress: bars on a terminal, plain lines otherwise.

use std::io::IsTerminal;

/// Progress display for builds and pushes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProgressMode {
    /// Progress bars when stderr is a terminal, plain lines otherwise.
    #[default]
    Auto,
    /// Always plain lines, as the daemon sends them.
    Plain,
    /// Live progress on stderr even when it does not look like a terminal.
    Tty,
}

impl ProgressMode {
    /// True when this mode means live bars on stderr right now: `Tty`, or `Auto` with stderr a
    /// terminal and not `TERM=dumb`.
    pub fn use_bars(self) -> bool {
        match self {
            ProgressMode::Tty => true,
            ProgressMode::Plain => false,
            ProgressMode::Auto => {
                std::io::stderr().is_terminal()
                    && std::env::var("TERM").map_or(true, |t| t != "dumb")
            }
        }
    }
}

/// `12.3 MiB`-style sizes.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// How many lines of a failed step's output a build error keeps (both builders).
pub const FAILED_STEP_LINES: usize = 40;
