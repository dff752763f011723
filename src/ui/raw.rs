//! The terminal of `hvdctl exec -it`: raw mode while a remote shell owns the keyboard, and
//! the window's size (sent to the remote terminal at start and on every resize).

use std::io::IsTerminal;

/// The terminal in raw mode (no echo, no line editing, no signals from keys: Ctrl-C goes to
/// the remote command) until dropped, whatever ends the command — also an exit that runs no
/// destructor ([`crate::ui::out`]'s on a closed stdout calls [`restore`] first).
pub struct RawMode {
    fd: libc::c_int,
}

/// The settings to put back, per descriptor in raw mode: what [`restore`] reads when the
/// process ends without dropping the [`RawMode`].
static SAVED: std::sync::Mutex<Vec<(libc::c_int, libc::termios)>> =
    std::sync::Mutex::new(Vec::new());

impl RawMode {
    /// Puts stdin's terminal in raw mode; `None` when stdin is not a terminal.
    pub fn enable() -> Option<RawMode> {
        if !std::io::stdin().is_terminal() {
            return None;
        }
        RawMode::enable_on(libc::STDIN_FILENO)
    }

    /// Puts the terminal `fd` in raw mode; `None` when it cannot.
    fn enable_on(fd: libc::c_int) -> Option<RawMode> {
        // SAFETY: termios is plain data; tcgetattr fills it for `fd`, a terminal.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            let mut all = SAVED.lock().unwrap_or_else(|p| p.into_inner());
            if libc::tcsetattr(fd, libc::TCSANOW, &raw) != 0 {
                return None;
            }
            all.push((fd, saved));
            Some(RawMode { fd })
        }
    }
}

/// Puts back every terminal still in raw mode, as its [`RawMode`]'s drop would: for an exit
/// that runs no destructor.
pub fn restore() {
    let mut all = SAVED.lock().unwrap_or_else(|p| p.into_inner());
    while let Some((fd, saved)) = all.pop() {
        // SAFETY: the settings read by `enable_on` for the same descriptor.
        unsafe {
            libc::tcsetattr(fd, libc::TCSANOW, &saved);
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let mut all = SAVED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = all.iter().rposition(|(fd, _)| *fd == self.fd) {
            let (fd, saved) = all.remove(i);
            // SAFETY: restores the settings read in `enable_on` on the same descriptor.
            unsafe {
                libc::tcsetattr(fd, libc::TCSANOW, &saved);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn echoes(fd: libc::c_int) -> bool {
        // SAFETY: plain data filled by tcgetattr.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(fd, &mut t), 0);
            t.c_lflag & libc::ECHO != 0
        }
    }

    #[test]
    fn an_exit_without_destructors_still_restores_the_terminal() {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty fills two descriptors; no name, settings or size asked for.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        assert!(echoes(slave));
        let raw = RawMode::enable_on(slave).expect("raw mode on a pty");
        assert!(!echoes(slave));
        // What the exit on a closed stdout does: the guard is never dropped.
        std::mem::forget(raw);
        restore();
        assert!(echoes(slave));
        // The ordinary way: dropped.
        drop(RawMode::enable_on(slave).unwrap());
        assert!(echoes(slave));
        unsafe {
            libc::close(master);
            libc::close(slave);
        }
    }
}
