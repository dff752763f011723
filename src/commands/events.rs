//! `hvdctl events [-f]`: the run's events, as kubectl prints them, on every engine.

use super::block_on;
use crate::cli::{EventsArgs, Global};
use crate::cluster::events::RunEvent;
use crate::engine::Env;
use crate::error::Result;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: EventsArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        println!(
            "{:<25} {:<8} {:<20} {:<40} MESSAGE",
            "TIME", "TYPE", "REASON", "OBJECT"
        );
        run.events(a.follow, &mut print_event).await?;
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
