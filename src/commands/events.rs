use super::{block_on, locate_run};
use crate::cli::{EventsArgs, Global};
use crate::cluster::events::{self, RunEvent, concerns, flatten, run_objects};
use crate::error::Result;
use crate::ui::Ui;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;

pub fn run(g: &Global, _ui: &Ui, a: EventsArgs) -> Result<u8> {
    if let Some(r) = crate::local::cmd::find(g, a.run.as_deref())? {
        return crate::local::cmd::events(&r, a.follow, &mut |e| print_event(e));
    }
    block_on(async {
        let (c, run) = locate_run(g, a.run.as_deref()).await?;
        let now = events::list(&c, &run).await?;
        println!(
            "{:<25} {:<8} {:<20} {:<40} MESSAGE",
            "TIME", "TYPE", "REASON", "OBJECT"
        );
        let mut seen: HashSet<(String, i32)> = HashSet::new();
        for e in &now {
            print_event(e);
            seen.insert((e.uid.clone(), e.count));
        }
        if !a.follow {
            return Ok(0);
        }
        let api: Api<Event> = Api::namespaced(c.client.clone(), &run.namespace);
        let mut objects = run_objects(&c, &run).await?;
        let mut stream = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(e) = stream
            .try_next()
            .await
            .map_err(|e| crate::Error::failure(format!("watching events: {e}")))?
        {
            if !concerns(&e, &objects) {
                // A pod created since we looked (late workers, restarted launcher)?
                let name = e.involved_object.name.clone().unwrap_or_default();
                if !name.starts_with(&format!("{}-", run.job)) {
                    continue;
                }
                objects = run_objects(&c, &run).await?;
                if !concerns(&e, &objects) {
                    continue;
                }
            }
            let f = flatten(&e);
            if seen.insert((f.uid.clone(), f.count)) {
                print_event(&f);
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
