//! The entry points `hvdctl deploy|status|logs|events|undeploy` call when a run is local:
//! each takes the parsed flags, runs on its own runtime and returns the exit code, printing
//! the same shapes as the Kubernetes paths (status table / `-o json|yaml`, log prefixes and
//! JSON objects, event rows).

use super::{LocalRef, connect};
use crate::app::App;
use crate::cli::{DeployArgs, Global, ManifestFormat, StatusArgs};
use crate::cluster::events::RunEvent;
use crate::cluster::status::JobState;
use crate::error::{Error, Result};
use crate::logs::LogOptions;
use crate::state;
use crate::ui::Ui;
use std::path::Path;
use std::time::Duration;

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::failure(format!("cannot start the async runtime: {e}")))
}

/// Runs `f`; Ctrl-C ends it with exit code 130.
fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    runtime()?.block_on(async {
        tokio::select! {
            r = f => r,
            _ = tokio::signal::ctrl_c() => Err(Error::interrupted()),
        }
    })
}

/// The local run a command is about, or `None` when it is not a local run:
/// * `arg` (run id or job name) recorded in `.hvdctl/runs.json` as a local run, or — without
///   `arg` — the app's last run when that one is local;
/// * `arg` not recorded at all: found from container labels on the Docker engine (when one
///   answers), or, when no kubeconfig exists, taken as local anyway (so `undeploy` of a
///   run already gone says "nothing to delete" instead of asking for a cluster).
pub fn find(g: &Global, arg: Option<&str>) -> Result<Option<LocalRef>> {
    let records = state::runs(&g.app_dir)?;
    let recorded = |a: &str| records.iter().rev().find(|r| r.run_id == a || r.job == a);
    match arg {
        None => return super::resolve_recorded(&g.app_dir, None),
        Some(a) if recorded(a).is_some() => return super::resolve_recorded(&g.app_dir, Some(a)),
        Some(_) => {}
    }
    let a = arg.expect("arg is Some here");
    let by_label = runtime()?.block_on(async {
        match crate::image::docker::DockerClient::connect().await {
            Ok(d) => super::find_by_label(&d, a).await.map(Some),
            Err(_) => Ok(None),
        }
    })?;
    if let Some(Some(r)) = by_label {
        return Ok(Some(r));
    }
    if matches!(crate::kubeconfig::load(g), Ok(None)) {
        let app = g
            .app_dir
            .join(crate::app::load::APP_FILE)
            .exists()
            .then(|| crate::app::load(&g.app_dir, &[]).ok())
            .flatten()
            .map(|l| l.app.name);
        return Ok(Some(guess_ref(a, app.as_deref())));
    }
    Ok(None)
}

/// A run named on the command line that exists nowhere: its identity from the argument.
fn guess_ref(arg: &str, app: Option<&str>) -> LocalRef {
    match (arg.rsplit_once('-'), app) {
        (_, Some(app)) if !arg.starts_with(&format!("{app}-")) => LocalRef::new(app, arg),
        (Some((app, id)), _) => LocalRef::new(app, id),
        (None, _) => LocalRef {
            run_id: arg.into(),
            app: String::new(),
            job: arg.into(),
        },
    }
}

/// `hvdctl deploy` of a local run (after flags, app and image are resolved).
pub fn deploy(
    ui: &Ui,
    a: &DeployArgs,
    app_dir: &Path,
    app: &App,
    run_id: &str,
    image: &str,
) -> Result<u8> {
    if a.dry_run {
        print!("{}", dry_run(app, run_id, image, a.output)?);
        return Ok(0);
    }
    // Ctrl-C is handled inside `deploy` (it cleans up first).
    runtime()?.block_on(async {
        let run = super::deploy(app_dir, app, run_id, image, ui).await?;
        ui.note(format!(
            "Deployed {} (run {}, backend local, {} containers on network {})",
            run.run.job,
            run.run.run_id,
            run.containers.len(),
            run.network
        ));
        ui.debug(format!(
            "  private directory (ssh keys, hostfile): {}",
            run.dir.display()
        ));
        if a.logs {
            let docker = connect().await?;
            let outcome = tokio::select! {
                r = super::logs::run(&docker, &run.run, LogOptions::follow_all(ui), ui) => r?,
                _ = tokio::signal::ctrl_c() => return Err(Error::interrupted()),
            };
            return Ok(outcome.exit_code());
        }
        if a.wait {
            let docker = connect().await?;
            let bar = ui.spinner(format!("waiting for the containers of {}", run.run.job));
            loop {
                let r = super::status::report(&docker, &run.run).await?;
                let running = r.pods.iter().filter(|p| p.phase == "Running").count();
                bar.set_message(format!(
                    "{}: {}, {running}/{} containers running",
                    r.job,
                    r.state,
                    r.pods.len()
                ));
                if r.state.is_finished()
                    || (r.state == JobState::Running && running == r.pods.len())
                {
                    bar.finish_and_clear();
                    ui.note(format!(
                        "{}: {} ({running}/{} containers running)",
                        r.job,
                        r.state,
                        r.pods.len()
                    ));
                    return Ok(r.state.exit_code());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if !ui.quiet {
            eprintln!(
                "Next: hvdctl status {0} · hvdctl logs -f {0} · hvdctl undeploy {0}",
                run.run.run_id
            );
        }
        Ok(0)
    })
}

/// `deploy --dry-run` of a local run: the network and container specs the engine would get
/// (the private directory's path is a placeholder; no key exists yet).
pub fn dry_run(app: &App, run_id: &str, image: &str, format: ManifestFormat) -> Result<String> {
    let run = crate::backend::Run {
        app,
        backend: crate::app::Backend::Local,
        run_id: run_id.to_string(),
        namespace: super::NAMESPACE.into(),
        image: image.to_string(),
    };
    let job = run.job_name();
    let dir = super::rundir::RunDir::at(
        std::env::temp_dir().join(format!("{}{job}.<random>", super::rundir::PREFIX)),
    );
    let plan = super::spec::plan(&run, &dir, "")?;
    let mut items = vec![
        serde_json::json!({"kind": "Network", "name": plan.network.name, "spec": plan.network}),
    ];
    for c in plan.workers.iter().chain([&plan.launcher]) {
        items.push(serde_json::json!({"kind": "Container", "name": c.name, "role": c.role, "spec": c.body}));
    }
    // bollard's specs hold HashMaps (labels, endpoints): sort keys so the output is stable.
    let list = sort_keys(serde_json::json!({"backend": "local", "job": job, "items": items}));
    Ok(match format {
        ManifestFormat::Json => serde_json::to_string_pretty(&list).unwrap_or_default() + "\n",
        ManifestFormat::Yaml => serde_norway::to_string(&list).unwrap_or_default(),
    })
}

/// `v` with the keys of every mapping in sorted order.
fn sort_keys(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// `hvdctl status` of a local run (`--watch`, `--wait`, `-o`).
pub fn status(ui: &Ui, a: &StatusArgs, r: &LocalRef) -> Result<u8> {
    block_on(async {
        let docker = connect().await?;
        crate::report::show(a, ui, || super::status::report(&docker, r)).await
    })
}

/// `hvdctl logs [-f]` of a local run; the exit code is the job's when following.
pub fn logs(ui: &Ui, r: &LocalRef, opts: LogOptions) -> Result<u8> {
    // Ctrl-C: the printer has flushed what it had; 130.
    block_on(async {
        let docker = connect().await?;
        let outcome = super::logs::run(&docker, r, opts, ui).await?;
        Ok(outcome.exit_code())
    })
}

/// `hvdctl events [-f]` of a local run, in the Kubernetes rows (`print` formats one row).
pub fn events(r: &LocalRef, follow: bool, print: &mut dyn FnMut(&RunEvent)) -> Result<u8> {
    block_on(async {
        let docker = connect().await?;
        println!(
            "{:<25} {:<8} {:<20} {:<40} MESSAGE",
            "TIME", "TYPE", "REASON", "OBJECT"
        );
        super::events::run(&docker, r, follow, print).await?;
        Ok(0)
    })
}

/// `hvdctl undeploy` of a local run: containers, network and private directory; waits until
/// they are gone (always: removal is synchronous). Idempotent.
pub fn undeploy(ui: &Ui, app_dir: &Path, r: &LocalRef) -> Result<u8> {
    let removed = block_on(async {
        let docker = connect().await?;
        super::undeploy::undeploy(&docker, r).await
    })?;
    if removed.is_empty() {
        ui.note(format!(
            "Nothing to delete for run {} ({}) on the local Docker engine",
            r.run_id, r.job
        ));
    } else {
        ui.note(format!(
            "Deleted run {} ({}) from the local Docker engine: {}",
            r.run_id,
            r.job,
            removed.summary()
        ));
        for c in &removed.containers {
            ui.debug(format!("  container {c}"));
        }
        for n in &removed.networks {
            ui.debug(format!("  network {n}"));
        }
        ui.note("All gone.");
    }
    state::forget_run(app_dir, &r.run_id)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guessed_identity() {
        assert_eq!(guess_ref("ab1", Some("hello")).job, "hello-ab1");
        assert_eq!(guess_ref("hello-ab1", Some("hello")).run_id, "ab1");
        assert_eq!(
            guess_ref("my-app-ab1", None),
            LocalRef::new("my-app", "ab1")
        );
    }
}
