//! `hvdctl events [-f]`: the run's events, as kubectl prints them, on every engine.

use super::block_on;
use crate::cli::{EventsArgs, Global, ListFormat};
use crate::cluster::events::RunEvent;
use crate::engine::Env;
use crate::error::Result;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: EventsArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        match (a.output, a.follow) {
            (ListFormat::Text, _) => {
                println!(
                    "{:<25} {:<8} {:<20} {:<40} MESSAGE",
                    "TIME", "TYPE", "REASON", "OBJECT"
                );
                run.events(a.follow, &mut print_event).await?;
            }
            // Followed: each event as it comes, one JSON object a line or one YAML document.
            (ListFormat::Json, true) => {
                run.events(true, &mut |e: &RunEvent| {
                    println!("{}", serde_json::to_string(e).unwrap_or_default())
                })
                .await?
            }
            (ListFormat::Yaml, true) => {
                run.events(true, &mut |e: &RunEvent| {
                    print!("---\n{}", serde_norway::to_string(e).unwrap_or_default())
                })
                .await?
            }
            // Listed: one array.
            (format, false) => {
                let mut all = Vec::new();
                run.events(false, &mut |e: &RunEvent| all.push(e.clone()))
                    .await?;
                if format == ListFormat::Json {
                    println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
                } else {
                    print!("{}", serde_norway::to_string(&all).unwrap_or_default());
                }
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
