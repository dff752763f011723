//! `hvdctl timeline [RUN]`: rank 0's Horovod timeline copied out of worker 0 (where rank 0
//! runs; see `crate::remote::rank0`), saved as the Chrome trace it is, and read
//! as a straggler report (`crate::timeline`).

use super::block_on;
use crate::cli::{Global, LogFormat, TimelineArgs};
use crate::engine::Env;
use crate::error::Result;
use crate::remote::path::Copy;
use crate::remote::rank0;
use crate::timeline::Timeline;
use crate::types::TIMELINE_PATH;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: TimelineArgs) -> Result<u8> {
    let env = Env::new(g, ui)?;
    block_on(async {
        let run = env.run(a.run.as_deref()).await?;
        let job = run.info().job.clone();
        let trace = a
            .trace
            .clone()
            .unwrap_or_else(|| format!("{job}-timeline.json").into());
        let which = rank0().which;
        let copy = Copy::From {
            which,
            remote: TIMELINE_PATH.to_string(),
            local: trace.clone(),
        };
        run.copy(&copy, ui).await.map_err(|e| {
            e.context(format!("fetching the Horovod timeline of {job} from {which}"))
                .hint(format!(
                    "rank 0 writes it when the run was deployed with `timeline: true` (or `hvdctl deploy --timeline`), once Horovod has started; after the run ends it is there only while {which}'s container is (an mpijob's workers go with runPolicy.cleanPodPolicy: Running; a trainjob's node pods end with the run: read it while the run runs)"
                ))
        })?;
        let file =
            crate::files::open(&trace).map_err(|r| r.error(&trace, crate::files::TIMELINE))?;
        let report = Timeline::read(file, &trace.display().to_string())?.report();
        match a.output {
            LogFormat::Json => crate::out!("{}", crate::text::json(&report)?),
            LogFormat::Text => {
                crate::out!(
                    "Timeline of {job} saved to {} (open it in https://ui.perfetto.dev or chrome://tracing)\n\n{}",
                    trace.display(),
                    report.text().trim_end()
                );
            }
        }
        if report.partial {
            ui.note(
                "the run is still writing its timeline: run `hvdctl timeline` again for the rest",
            );
        }
        Ok(0)
    })
}
