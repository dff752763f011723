//! One module per subcommand: each adapts parsed flags to the library functions that do the
//! work, and returns the process exit code.

mod build;
mod completions;
mod deploy;
mod events;
mod init;
mod logs;
mod status;
mod templates;
mod undeploy;

use crate::cli::{Cli, Command};
use crate::error::Result;
use crate::ui::Ui;

/// Runs a parsed command line; `Ok(code)` is the exit code for a run that did not fail.
pub fn run(cli: Cli) -> Result<u8> {
    let g = &cli.global;
    let ui = Ui::new(g.color, g.no_input, g.quiet, g.verbose);
    match cli.command {
        Command::Init(a) => init::run(&cli.global, &ui, a),
        Command::Templates(a) => templates::run(&ui, a),
        Command::Build(a) => build::run(&cli.global, &ui, a),
        Command::Push(a) => build::push_cmd(&cli.global, &ui, a),
        Command::Deploy(a) => deploy::run(&cli.global, &ui, a),
        Command::Status(a) => status::run(&cli.global, &ui, a),
        Command::Events(a) => events::run(&cli.global, &ui, a),
        Command::Undeploy(a) => undeploy::run(&cli.global, &ui, a),
        Command::Logs(a) => logs::run(&cli.global, &ui, a),
        Command::Completions(a) => completions::run(a),
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

/// The cluster and the run a command is about (RUN argument, last run, or newest in cluster).
pub(crate) async fn locate_run(
    g: &crate::cli::Global,
    arg: Option<&str>,
) -> Result<(crate::cluster::Cluster, crate::cluster::runs::RunRef)> {
    let app = optional_app(g)?;
    let namespace =
        crate::kubeconfig::namespace(g, app.as_ref().and_then(|a| a.namespace.as_deref()))?;
    let cluster = crate::cluster::connect(g).await?;
    let q = crate::cluster::runs::Query {
        arg,
        app: app.as_ref().map(|a| a.name.as_str()),
        namespace: namespace.clone(),
        app_dir: &g.app_dir,
        namespace_flag: g.namespace.is_some(),
    };
    match crate::cluster::runs::resolve(&cluster, &q).await {
        Ok(run) => Ok((cluster, run)),
        // "not found" is clearer when the namespace itself is missing.
        Err(e) => Err(namespace_missing(&cluster, &namespace).await.unwrap_or(e)),
    }
}

/// A clearer error when the namespace itself does not exist.
async fn namespace_missing(c: &crate::cluster::Cluster, ns: &str) -> Option<crate::Error> {
    use crate::cluster::client::{ATTEMPTS, retry};
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(c.client.clone());
    match retry(ATTEMPTS, || api.get_opt(ns)).await {
        Ok(None) => Some(
            crate::Error::input(format!(
                "namespace {ns} does not exist (context `{}`)",
                c.context
            ))
            .hint("pick the run's namespace with -n; `kubectl get namespaces` lists them"),
        ),
        _ => None,
    }
}

/// The app of `-C DIR` if there is one; a broken hvdctl.yaml is still an error.
pub(crate) fn optional_app(g: &crate::cli::Global) -> Result<Option<crate::app::App>> {
    if !g.app_dir.join(crate::app::APP_FILE).exists() {
        return Ok(None);
    }
    crate::app::load(&g.app_dir, &[]).map(|l| Some(l.app))
}
