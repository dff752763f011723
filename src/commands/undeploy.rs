//! `hvdctl undeploy`: delete everything a run created (or, with `--all`, every run of the
//! app) on whichever engine holds it, and wait until it is gone.

use super::block_on;
use crate::cli::{Global, UndeployArgs};
use crate::engine::{Env, Lookup, Run};
use crate::error::{Error, Result};
use crate::state;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: UndeployArgs) -> Result<u8> {
    // Said before anything is read or asked: without a terminal nobody can confirm.
    if a.all && !a.yes && !ui.interactive {
        return Err(Error::input(
            "--all deletes every run of the app and needs a confirmation: there is no terminal to ask on",
        )
        .hint("add --yes (-y) to confirm"));
    }
    let env = Env::new(g, ui)?;
    let wait = !a.no_wait;
    if a.all {
        return block_on(all(&env, &a, wait));
    }
    block_on(async {
        match env.locate(a.run.as_deref()).await? {
            Lookup::Found(run) => {
                crate::engine::remove(&env, &run, wait).await?;
                Ok(0)
            }
            // Idempotent, but only when every engine that could hold the run was asked:
            // otherwise nobody can say it is gone.
            Lookup::Missing(m) if m.complete() => {
                ui.note(format!(
                    "Nothing to delete: {} not found in {}",
                    m.what,
                    m.looked.join(" or ")
                ));
                if let Some(arg) = &a.run {
                    state::forget_run(&g.app_dir, arg)?;
                }
                Ok(0)
            }
            Lookup::Recorded(rec) => {
                ui.note(format!(
                    "Nothing to delete: the newest run of app {}, {} ({}), was {}",
                    rec.report.app,
                    rec.report.run,
                    rec.report.job,
                    rec.gone()
                ));
                Ok(0)
            }
            Lookup::Missing(m) => Err(m.into_error()),
        }
    })
}

/// `--all`: every run of the app on every engine, after a confirmation (a prompt on a
/// terminal, `--yes` otherwise).
async fn all(env: &Env<'_>, a: &UndeployArgs, wait: bool) -> Result<u8> {
    let app = env.app.as_ref().ok_or_else(|| {
        Error::input(
            "--all removes every run of an app: run it in the app directory (or pass -C DIR)",
        )
    })?;
    let mut runs: Vec<Run> = Vec::new();
    let mut unreached: Vec<(String, Error)> = Vec::new();
    let mut unreadable: Vec<Error> = Vec::new();
    let mut looked = Vec::new();
    for (name, engine) in env.engines(false).await? {
        let listed = match engine {
            Ok(e) => {
                looked.push(e.describe());
                e.list(Some(&app.name)).await
            }
            Err(e) => Err(e),
        };
        match listed {
            Ok(r) => {
                runs.extend(r.runs);
                unreadable.extend(r.unreadable);
            }
            Err(e) => unreached.push((name, e)),
        }
    }
    if let Some(e) = unreadable.into_iter().next() {
        // A run this hvdctl cannot read cannot be removed whole by it: nothing is deleted,
        // rather than all runs but that one.
        return Err(e.context(format!("--all cannot remove every run of app {}", app.name)));
    }
    if runs.is_empty() {
        // No kubeconfig (and no `--context` asking for one): there is no cluster to hold
        // runs, as a machine without a Docker engine holds no local ones — not an error.
        let no_cluster = matches!(env.kubeconfig()?, crate::kubeconfig::Loaded::Missing(_))
            && env.g.context.is_none();
        if let Some((name, e)) = unreached
            .into_iter()
            .find(|(name, _)| !(no_cluster && name == crate::engine::resolve::KUBERNETES))
        {
            return Err(e.context(format!("{name} could not be asked")));
        }
        // What the app's runs shared outlives a last run deleted by another client (the
        // Kubeflow SDK's delete_job takes a TrainJob, not hvdctl's runtime).
        let shared = if no_cluster {
            Vec::new()
        } else {
            let ns = env.namespace()?;
            env.kube(Some(ns.clone()))
                .await?
                .remove_orphaned_shared(&ns, &app.name)
                .await?
        };
        if shared.is_empty() {
            env.ui.note(format!(
                "Nothing to delete: no runs of app {} in {}",
                app.name,
                looked.join(" or ")
            ));
        } else {
            let names: Vec<String> = shared
                .iter()
                .map(|d| format!("{}/{}", d.kind, d.name))
                .collect();
            env.ui.note(format!(
                "No runs of app {} in {}; deleted what its runs shared: {}",
                app.name,
                looked.join(" or "),
                names.join(", ")
            ));
        }
        if a.volumes {
            volumes(env, &app.name, a.yes).await?;
        }
        return Ok(0);
    }
    let names: Vec<String> = runs
        .iter()
        .map(|r| format!("{} ({})", r.info().job, r.info().place))
        .collect();
    // Without --yes there is a terminal: `run` refused before anything else otherwise.
    if !a.yes {
        let ok = crate::ui::confirm(&format!(
            "Delete {} run(s) of app {}: {}?",
            runs.len(),
            app.name,
            names.join(", ")
        ))?;
        if !ok {
            env.ui.note("Nothing deleted.");
            return Ok(1);
        }
    }
    for r in &runs {
        crate::engine::remove(env, r, wait).await?;
    }
    if a.volumes {
        // After every pod using them is gone; asked separately (their data goes too).
        volumes(env, &app.name, a.yes).await?;
    }
    if let Some((name, e)) = unreached.into_iter().next() {
        return Err(Error::failure(format!(
            "{name} could not be asked, so runs of app {} there (if any) remain: {}",
            app.name, e.message
        )));
    }
    Ok(0)
}

/// `--volumes`: the app's `storage:` claims in the namespace, deleted and waited for; their
/// data goes with them, so without `--yes` a terminal is asked first.
async fn volumes(env: &Env<'_>, app: &str, confirmed: bool) -> Result<()> {
    // Claims live in a cluster: with no kubeconfig, an app that names no storage (a local
    // app) has none to delete; one that names storage is told why they cannot be reached.
    if let crate::kubeconfig::Loaded::Missing(looked) = env.kubeconfig()?
        && env.app.as_ref().is_none_or(|a| a.storage.is_empty())
    {
        env.ui.note(format!(
            "No storage claims of app {app} to delete: it names no storage, and there is no kubeconfig ({looked})"
        ));
        return Ok(());
    }
    let ns = env.namespace()?;
    let k = env.kube(Some(ns.clone())).await?;
    let claims = crate::cluster::storage::list(&k.cluster, &ns, app).await?;
    if claims.is_empty() {
        env.ui
            .note(format!("No storage claims of app {app} in namespace {ns}"));
        return Ok(());
    }
    let names: Vec<&str> = claims.iter().map(|c| c.name.as_str()).collect();
    if !confirmed
        && !crate::ui::confirm(&format!(
            "Delete the claim(s) {} and their data?",
            names.join(", ")
        ))?
    {
        env.ui.note("Claims kept.");
        return Ok(());
    }
    let gone =
        crate::cluster::storage::delete(&k.cluster, &ns, app, std::time::Duration::from_secs(120))
            .await?;
    env.ui.note(format!(
        "Deleted PersistentVolumeClaim(s) {} in namespace {ns}",
        gone.join(", ")
    ));
    Ok(())
}
