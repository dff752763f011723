//! Writing to stdout and stderr without panicking. `println!` and `eprintln!` panic when the
//! stream is gone (`hvdctl runs | head -1` closes stdout; a parent may close stderr), which
//! would turn a finished command into exit 101. Here a reader that went away from stdout ends
//! the process quietly with exit 0, as `rg`, `fd` and `head` pipelines expect; a lost stderr
//! only loses the message. Use [`outln!`](crate::outln), [`out!`](crate::out) and
//! [`errln!`](crate::errln) and [`err!`](crate::err) everywhere instead of the std macros.

use std::io::{self, Write};

/// Writes `args` to stdout (see the module's rule for a closed stdout).
pub fn stdout(args: std::fmt::Arguments<'_>) {
    let mut o = io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            exit(0);
        }
        // Any other failure (a full disk behind a redirect): say so once, where possible.
        let _ = writeln!(io::stderr(), "hvdctl: cannot write to stdout: {e}");
        exit(1);
    }
}

/// Ends the process at once. `process::exit` runs no destructor, so what must not outlive
/// hvdctl is undone here first: a terminal in raw mode (`exec -it`) is restored.
fn exit(code: i32) -> ! {
    crate::ui::raw::restore();
    std::process::exit(code)
}

/// Writes `args` to stderr; a stderr that cannot be written loses the message, nothing else.
pub fn stderr(args: std::fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// `print!` that does not panic (see [`crate::ui::out`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::ui::out::stdout(format_args!($($arg)*)) };
}

/// `println!` that does not panic (see [`crate::ui::out`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::ui::out::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::ui::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that does not panic (see [`crate::ui::out`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::ui::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that does not panic (see [`crate::ui::out`]).
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::ui::out::stderr(format_args!($($arg)*)) };
}
