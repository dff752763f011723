//! The terminal of `hvdctl exec -it`: raw mode while a remote shell owns the keyboard, and
//! the window's size (sent to the remote terminal at start and on every resize).

use std::io::IsTerminal;

/// The terminal in raw mode (no echo, no line editing, no signals from keys: Ctrl-C goes to
/// the remote command) until dropped, whatever ends the command.
pub struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Puts stdin's terminal in raw mode; `None` when stdin is not a terminal.
    pub fn enable() -> Option<RawMode> {
        if !std::io::stdin().is_terminal() {
            return None;
        }
        // SAFETY: termios is plain data; tcgetattr fills it for fd 0, which is a terminal.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) != 0 {
                return None;
            }
            Some(RawMode { saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enable` on the same descriptor.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.saved);
        }
    }
}

/// The terminal's (columns, rows), when stdout is a terminal.
pub fn window_size() -> Option<(u16, u16)> {
    console::Term::stdout()
        .size_checked()
        .map(|(rows, cols)| (cols, rows))
}

/// The window's size now and after every resize (SIGWINCH), as (columns, rows).
pub fn window_sizes() -> impl futures::Stream<Item = (u16, u16)> + Send {
    use futures::StreamExt;
    use tokio::signal::unix::{SignalKind, signal};
    let now = futures::stream::iter(window_size());
    let resized = signal(SignalKind::window_change()).ok();
    let later = futures::stream::unfold(resized, |mut resized| async move {
        let signals = resized.as_mut()?;
        loop {
            signals.recv().await?;
            if let Some(size) = window_size() {
                return Some((size, resized));
            }
        }
    });
    now.chain(later)
}
