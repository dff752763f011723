use super::{block_on, locate_run, optional_app};
use crate::cli::{Global, UndeployArgs};
use crate::cluster::undeploy::{self, Deleted};
use crate::error::{Error, Result};
use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, MANAGER};
use crate::state;
use crate::ui::Ui;
use std::time::Duration;

pub fn run(g: &Global, ui: &Ui, a: UndeployArgs) -> Result<u8> {
    if !a.all
        && let Some(r) = crate::local::cmd::find(g, a.run.as_deref())?
    {
        return crate::local::cmd::undeploy(ui, &g.app_dir, &r);
    }
    let wait = !a.no_wait;
    block_on(async {
        let (c, namespace, selector, what, run_ids) = if a.all {
            let app = optional_app(g)?.ok_or_else(|| {
                Error::input("--all removes every run of an app: run it in the app directory (or pass -C DIR)")
            })?;
            let ns = crate::kubeconfig::namespace(g, app.namespace.as_deref())?;
            let c = crate::cluster::connect(g).await?;
            let runs = crate::cluster::runs::list(&c, &ns, Some(&app.name), None).await?;
            let ids: Vec<String> = runs.iter().map(|s| s.run.run_id.clone()).collect();
            (
                c,
                ns,
                format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_APP}={}", app.name),
                format!("every run of app {}", app.name),
                ids,
            )
        } else {
            let (c, run) = match locate_run(g, a.run.as_deref()).await {
                Ok(x) => x,
                Err(e)
                    if e.message.contains("not found in namespace")
                        || e.message.starts_with("no runs of app")
                        || (e.message.starts_with("namespace ")
                            && e.message.contains("does not exist")) =>
                {
                    // Idempotent: nothing left to delete is not a failure.
                    ui.note(format!("Nothing to delete: {}", e.message));
                    if let Some(arg) = &a.run {
                        state::forget_run(&g.app_dir, arg)?;
                    }
                    return Ok(0);
                }
                Err(e) => return Err(e),
            };
            let ns = run.namespace.clone();
            (
                c,
                ns,
                run.selector(),
                format!("run {} ({})", run.run_id, run.job),
                vec![run.run_id.clone()],
            )
        };
        let deleted = undeploy::delete(&c, &namespace, &selector).await?;
        if deleted.is_empty() {
            ui.note(format!(
                "Nothing to delete for {what} in namespace {namespace}"
            ));
        } else {
            summarize(ui, &deleted, &what, &namespace);
            if wait {
                let bar = ui.spinner(format!("waiting for {} objects to go", deleted.len()));
                let progress = |left: usize| bar.set_message(format!("{left} object(s) left"));
                let r = undeploy::wait_gone(
                    &c,
                    &namespace,
                    &selector,
                    Duration::from_secs(300),
                    &progress,
                )
                .await;
                bar.finish_and_clear();
                r?;
                ui.note("All gone.");
            }
        }
        for id in run_ids {
            state::forget_run(&g.app_dir, &id)?;
        }
        Ok(0)
    })
}

fn summarize(ui: &Ui, deleted: &[Deleted], what: &str, ns: &str) {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for d in deleted {
        *counts.entry(d.kind).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    ui.note(format!(
        "Deleting {what} in namespace {ns}: {}",
        parts.join(", ")
    ));
    for d in deleted {
        ui.debug(format!("  {} {}", d.kind, d.name));
    }
}
