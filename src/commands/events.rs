//! `hvdctl events [-f]`: the run's events, as kubectl prints them, on every engine; for a
//! run no engine has any more, the events its flight record kept.

use super::block_on;
use crate::cli::{EventsArgs, Global, ListFormat};
use crate::cluster::events::RunEvent;
use crate::engine::{Answer, Env};
use crate::error::{Error, Result};
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: EventsArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        match env.run_or_record(a.run.as_deref()).await? {
            Answer::Live(run) => match (a.output, a.follow) {
                (ListFormat::Text, _) => {
                    header();
                    run.events(a.follow, &mut print_event).await?;
                }
                // Followed: each event as it comes, one JSON object a line or one YAML document;
                // the first that cannot be written ends the command with that error.
                (format, true) => {
                    let mut failed = None;
                    run.events(true, &mut |e: &RunEvent| {
                        let one = match format {
                            ListFormat::Json => serde_json::to_string(e).map_err(|err| {
                                Error::failure(format!("cannot write an event as JSON: {err}"))
                                    .caused_by(err)
                            }),
                            _ => crate::text::yaml(e).map(|y| format!("---\n{}", y.trim_end())),
                        };
                        match one {
                            Ok(line) if failed.is_none() => crate::outln!("{line}"),
                            Ok(_) => {}
                            Err(err) => {
                                failed.get_or_insert(err);
                            }
                        }
                    })
                    .await?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                }
                // Listed: one array.
                (format, false) => {
                    let mut all = Vec::new();
                    run.events(false, &mut |e: &RunEvent| all.push(e.clone()))
                        .await?;
                    print_all(format, &all)?;
                }
            },
            // A record does not change: its events once, with -f too.
            Answer::Record(rec) => {
                let events = rec.events()?;
                match a.output {
                    ListFormat::Text if events.is_empty() => {
                        ui.note(format!("No events recorded for run {}", rec.report.run));
                    }
                    ListFormat::Text => {
                        header();
                        events.iter().for_each(print_event);
                    }
                    format => print_all(format, &events)?,
                }
            }
        }
        Ok(0)
    })
}

fn header() {
    crate::outln!(
        "{:<25} {:<8} {:<20} {:<40} MESSAGE",
        "TIME",
        "TYPE",
        "REASON",
        "OBJECT"
    )
}

fn print_all(format: ListFormat, all: &[RunEvent]) -> Result<()> {
    if format == ListFormat::Json {
        crate::out!("{}", crate::text::json(all)?);
    } else {
        crate::out!("{}", crate::text::yaml(all)?);
    }
    Ok(())
}

fn print_event(e: &RunEvent) {
    let reason = if e.count > 1 {
        format!("{} (x{})", e.reason, e.count)
    } else {
        e.reason.clone()
    };
    // A cluster's words, shown as text: no control character reaches the terminal raw.
    let line = format!(
        "{:<25} {:<8} {:<20} {:<40} {}",
        e.time, e.type_, reason, e.object, e.message
    );
    crate::outln!("{}", crate::text::for_terminal(&line));
}
