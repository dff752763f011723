//! Terminal awareness: colour, progress, prompts. Nothing else in hvdctl asks whether it is
//! talking to a terminal; it asks a [`Ui`].

pub mod out;
pub mod prompt;
pub mod raw;

use std::io::IsTerminal;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// How to talk to the user, decided once from flags, environment and terminals.
#[derive(Debug, Clone)]
pub struct Ui {
    /// Colour on stdout (log prefixes, tables).
    pub color_stdout: bool,
    /// Colour and progress bars on stderr.
    pub color_stderr: bool,
    /// stderr is a terminal: spinners and progress bars may be drawn.
    pub progress: bool,
    /// Prompts allowed: stdin and stderr are terminals, no `--no-input`, no `CI`.
    pub interactive: bool,
    pub quiet: bool,
    pub verbose: u8,
}

impl Ui {
    pub fn new(color: ColorChoice, no_input: bool, quiet: bool, verbose: u8) -> Ui {
        let stdout_tty = std::io::stdout().is_terminal();
        let stderr_tty = std::io::stderr().is_terminal();
        let stdin_tty = std::io::stdin().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
        let colored = |tty: bool| match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && !no_color,
        };
        Ui {
            color_stdout: colored(stdout_tty),
            color_stderr: colored(stderr_tty),
            progress: stderr_tty && !quiet,
            interactive: stdin_tty && stderr_tty && !no_input && !ci,
            quiet,
            verbose,
        }
    }

    /// A plain, non-interactive UI (tests, library use).
    pub fn plain() -> Ui {
        Ui {
            color_stdout: false,
            color_stderr: false,
            progress: false,
            interactive: false,
            quiet: false,
            verbose: 0,
        }
    }

    /// A status line for people, on stderr (suppressed by `-q`).
    pub fn note(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            crate::errln!("{}", crate::text::for_terminal(msg.as_ref()));
        }
    }

    /// Extra detail shown with `-v`.
    pub fn debug(&self, msg: impl AsRef<str>) {
        if self.verbose > 0 {
            crate::errln!("{}", crate::text::for_terminal(msg.as_ref()));
        }
    }

    /// A spinner on stderr when drawing is allowed, hidden otherwise.
    pub fn spinner(&self, msg: impl Into<String>) -> indicatif::ProgressBar {
        if !self.progress {
            return indicatif::ProgressBar::hidden();
        }
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        pb.set_message(msg.into());
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        pb
    }
}

impl Ui {
    /// A byte-counting progress bar on stderr when drawing is allowed (hidden otherwise):
    /// with a length when `total` is known, else a spinner with the bytes so far.
    pub fn bytes_bar(&self, msg: impl Into<String>, total: Option<u64>) -> indicatif::ProgressBar {
        if !self.progress {
            return indicatif::ProgressBar::hidden();
        }
        let (pb, template) = match total {
            Some(n) => (
                indicatif::ProgressBar::new(n),
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            ),
            None => (
                indicatif::ProgressBar::new_spinner(),
                "{spinner} {msg} {bytes} {bytes_per_sec} ({elapsed})",
            ),
        };
        pb.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_message(msg.into());
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        pb
    }
}

/// Asks a yes/no question on the terminal (default no). Esc or Ctrl-C answer no.
pub fn confirm(question: &str) -> crate::Result<bool> {
    dialoguer::Confirm::new()
        .with_prompt(question)
        .default(false)
        .interact_opt()
        .map(|a| a.unwrap_or(false))
        .map_err(|e| crate::Error::input(format!("prompt failed: {e}")))
}

/// The reason a waiting command stopped with exit 1, on stderr (also under `-q`: it is
/// why the command failed).
pub fn print_reason(reason: Option<&str>) {
    if let Some(r) = reason {
        crate::errln!("Reason: {}", crate::text::for_terminal(r));
    }
}
