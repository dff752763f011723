//! `hvdctl events [-f]`: the run's events, as kubectl prints them, on every engine; for a
//! run no engine has any more, the events its flight record kept.

use super::block_on;
use crate::cli::{EventsArgs, Global};
use crate::cluster::events::RunEvent;
use crate::engine::{Answer, Env};
use crate::error::Result;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: EventsArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        let answer = env.run_or_record(a.run.as_deref()).await?;
        let header = || {
            println!(
                "{:<25} {:<8} {:<20} {:<40} MESSAGE",
                "TIME", "TYPE", "REASON", "OBJECT"
            )
        };
        match answer {
            Answer::Live(run) => {
                header();
                run.events(a.follow, &mut print_event).await?;
            }
            // A record does not change: its events once, with -f too.
            Answer::Record(rec) => {
                let events = rec.events()?;
                if events.is_empty() {
                    ui.note(format!("No events recorded for run {}", rec.report.run));
                    return Ok(0);
                }
                header();
                events.iter().for_each(print_event);
            }
        }
        Ok(0)
    })
}

fn print_event(e: &RunEvent) {
    let reason = if e.count > 1 {
        format!("{} (x{})", e.reason, e.count)
    } else {
        e.reason.clone()
    };
    println!(
        "{:<25} {:<8} {:<20} {:<40} {}",
        e.time, e.type_, reason, e.object, e.message
    );
}
