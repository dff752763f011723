//! `hvdctl status`: one run's report (`--watch`, `--wait`), or every run with `--all`.

use super::block_on;
use crate::cli::{Global, StatusArgs, StatusFormat};
use crate::engine::{Answer, Env};
use crate::error::Result;
use crate::report::StatusReport;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: StatusArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        if a.all {
            return list_all(&env, &a).await;
        }
        let run = match env.run_or_record(a.run.as_deref()).await? {
            Answer::Live(run) => run,
            Answer::Record(rec) => {
                // A record does not change: shown once, whatever --watch/--wait say.
                crate::out!(
                    "{}",
                    crate::text::for_terminal(&crate::report::render(&rec.report, a.output)?)
                );
                return Ok(if a.wait {
                    rec.report.state.exit_code()
                } else {
                    0
                });
            }
        };
        let code = crate::report::show(&a.watch_options(), ui, || run.status()).await?;
        if a.wait {
            env.save_record(&run).await;
        }
        Ok(code)
    })
}

/// Every run on every engine reachable here; an unreachable engine is a warning, and an
/// error only when none was reached.
async fn list_all(env: &Env<'_>, a: &StatusArgs) -> Result<u8> {
    let (runs, looked) = env.every_run(a.all_namespaces, None).await?;
    let mut reports: Vec<StatusReport> = Vec::new();
    for r in runs {
        reports.push(r.status().await?);
    }
    match a.output {
        StatusFormat::Json => crate::out!("{}", crate::text::json(&reports)?),
        StatusFormat::Yaml => crate::out!("{}", crate::text::yaml(&reports)?),
        StatusFormat::Text | StatusFormat::Wide => {
            if reports.is_empty() {
                crate::errln!(
                    "No hvdctl runs in {}",
                    crate::text::for_terminal(&looked.join(" or "))
                );
                return Ok(0);
            }
            crate::outln!(
                "{:<7} {:<30} {:<20} {:<8} {:<10} {:<5} {:<8} WHERE",
                "RUN",
                "JOB",
                "APP",
                "BACKEND",
                "STATE",
                "PODS",
                "WORKERS"
            );
            for r in &reports {
                let place = match (&r.namespace, &r.context) {
                    (Some(ns), Some(ctx)) => format!("{ctx}/{ns}"),
                    _ => r.engine.to_string(),
                };
                let workers = match r.elastic {
                    Some(b) => format!("{} ({}-{})", r.workers, b.min_workers, b.max_workers),
                    None => r.workers.to_string(),
                };
                crate::outln!(
                    "{:<7} {:<30} {:<20} {:<8} {:<10} {:<5} {:<8} {place}",
                    r.run,
                    r.job,
                    r.app,
                    r.backend,
                    r.state.to_string(),
                    r.pods.len(),
                    workers
                );
            }
        }
    }
    Ok(0)
}
