//! One module per subcommand: each adapts parsed flags to the library functions that do the
//! work, and returns the process exit code.

mod build;
mod completions;
mod cp;
mod deploy;
pub(crate) mod dev;
mod doctor;
mod events;
mod exec;
mod init;
mod logs;
mod port_forward;
mod runs;
mod scale;
mod status;
mod templates;
mod tensorboard;
mod timeline;
mod undeploy;
mod version;

use crate::cli::{Cli, Command};
use crate::error::Result;
use crate::ui::Ui;

/// Runs a parsed command line; `Ok(code)` is the exit code for a run that did not fail.
pub fn run(cli: Cli) -> Result<u8> {
    let g = &cli.global();
    let ui = Ui::new(g.color, g.no_input, g.quiet, g.verbose);
    let Some(command) = cli.command else {
        // Bare `hvdctl`: the help, as asked for.
        crate::cli::command(crate::cli::Invoked::now())
            .print_help()
            .map_err(|e| crate::Error::failure(format!("cannot print the help: {e}")))?;
        return Ok(0);
    };
    // Every command but these reads the app directory: one that is not there is said first.
    let reads_app_dir = !matches!(
        command,
        Command::Init(_) | Command::Templates(_) | Command::Completions(_) | Command::Version(_)
    );
    if reads_app_dir && !g.app_dir.is_dir() {
        return Err(crate::app::load::missing_dir(&g.app_dir));
    }
    match command {
        Command::Init(a) => init::run(g, &ui, a),
        Command::Templates(a) => templates::run(&ui, a),
        Command::Build(a) => build::run(g, &ui, a),
        Command::Push(a) => build::push_cmd(g, &ui, a),
        Command::Deploy(a) => deploy::run(g, &ui, a),
        Command::Dev(a) => dev::run(g, &ui, a),
        Command::Status(a) => status::run(g, &ui, a),
        Command::Runs(a) => runs::run(g, &ui, a),
        Command::Events(a) => events::run(g, &ui, a),
        Command::Undeploy(a) => undeploy::run(g, &ui, a),
        Command::Logs(a) => logs::run(g, &ui, a),
        Command::Scale(a) => scale::run(g, &ui, a),
        Command::Exec(a) => exec::run(g, &ui, a),
        Command::Cp(a) => cp::run(g, &ui, a),
        Command::PortForward(a) => port_forward::run(g, &ui, a),
        Command::Tensorboard(a) => tensorboard::run(g, &ui, a),
        Command::Timeline(a) => timeline::run(g, &ui, a),
        Command::Completions(a) => completions::run(a),
        Command::Version(a) => version::run(g, &ui, a),
        Command::Doctor(a) => doctor::run(g, &ui, a),
    }
}

/// Runs async work on a fresh runtime; Ctrl-C ends it at once with exit code 130 unless the
/// command handles Ctrl-C itself (deploy cleans up first).
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    runtime(true)?.block_on(async {
        tokio::select! {
            r = f => r,
            _ = tokio::signal::ctrl_c() => Err(crate::Error::interrupted()),
        }
    })
}

/// An async runtime: two worker threads, or (`multi` false) the current thread only.
pub(crate) fn runtime(multi: bool) -> Result<tokio::runtime::Runtime> {
    let mut b = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all()
        .build()
        .map_err(|e| crate::Error::failure(format!("cannot start the async runtime: {e}")))
}

/// The backend a command works with: `--backend`, else the one the app names.
pub(crate) fn backend(
    flag: Option<crate::backend::Backend>,
    app: &crate::app::App,
) -> Result<crate::backend::Backend> {
    flag.map_or_else(|| crate::backend::Backend::of(app), Ok)
}
