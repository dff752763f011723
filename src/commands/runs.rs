//! `hvdctl runs`: the app's runs (or every app's) on every engine reachable here, newest
//! first, as a table or as data; `-w` prints the table again when it changes.

use super::block_on;
use crate::cli::{Global, ListFormat, RunsArgs};
use crate::engine::Env;
use crate::error::{Error, Result};
use crate::ledger::{self, RunRow};
use crate::ui::Ui;
use std::time::Duration;

pub fn run(g: &Global, ui: &Ui, a: RunsArgs) -> Result<u8> {
    if a.watch && a.output != ListFormat::Text {
        return Err(Error::input(
            "--watch prints the text table; drop -o or --watch",
        ));
    }
    let env = Env::new(g, ui)?;
    let app = match (&env.app, a.all_apps) {
        (_, true) => None,
        (Some(app), false) => Some(app.name.clone()),
        (None, false) => {
            return Err(Error::input(format!(
                "no {} in {}: `hvdctl runs` lists an app's runs",
                crate::app::APP_FILE,
                g.app_dir.display()
            ))
            .hint("run it in an app directory (or -C DIR), or pass --all-apps"));
        }
    };
    block_on(async {
        let mut last = String::new();
        loop {
            let (rows, looked) = rows(&env, &a, app.as_deref()).await?;
            let text = match a.output {
                ListFormat::Json => crate::text::json(&rows)?,
                ListFormat::Yaml => crate::text::yaml(&rows)?,
                ListFormat::Text if rows.is_empty() => {
                    let whose = app
                        .as_deref()
                        .map_or("hvdctl runs".to_string(), |a| format!("runs of app `{a}`"));
                    format!("No {whose} in {}\n", looked.join(" or "))
                }
                ListFormat::Text => ledger::table(&rows, a.all_apps),
            };
            if !a.watch {
                if rows.is_empty() && a.output == ListFormat::Text {
                    crate::err!("{}", crate::text::for_terminal(&text));
                } else {
                    crate::out!("{}", crate::text::for_terminal(&text));
                }
                return Ok(0);
            }
            if text != last {
                if !last.is_empty() {
                    crate::outln!();
                }
                crate::out!("{}", crate::text::for_terminal(&text));
                last = text;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

/// Every run's row, newest first, and the places looked.
async fn rows(
    env: &Env<'_>,
    a: &RunsArgs,
    app: Option<&str>,
) -> Result<(Vec<RunRow>, Vec<String>)> {
    let (runs, looked) = env.every_run(a.all_namespaces, app).await?;
    let mut rows = Vec::new();
    // Every run's report at once: each is a few requests to its engine.
    let reports = futures::future::join_all(runs.iter().map(|r| r.status())).await;
    for (r, report) in runs.iter().zip(reports) {
        match report {
            Ok(s) => rows.push(RunRow::of(&s, &r.info().created)),
            // Undeployed between the listing and the look.
            Err(e) if e.kind == crate::error::Kind::NotFound => {}
            Err(e) => env.ui.note(format!(
                "warning: {} in {}: {}",
                r.info().job,
                r.info().place,
                e.message
            )),
        }
    }
    // Runs the engines no longer have, from the flight recorder.
    let warn = |w: String| env.ui.note(format!("warning: {w}"));
    for rec in ledger::record::all(&env.g.app_dir, &warn) {
        let r = &rec.report;
        let live = rows.iter().any(|x| x.run == r.run && x.app == r.app);
        if !live && app.is_none_or(|a| a == r.app) {
            rows.push(RunRow::of(r, ""));
        }
    }
    ledger::sort(&mut rows);
    Ok((rows, looked))
}
