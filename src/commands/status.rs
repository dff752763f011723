use super::{block_on, locate_run, optional_app};
use crate::cli::{Global, StatusArgs, StatusFormat};
use crate::cluster::Cluster;
use crate::cluster::runs::{self, RunRef};
use crate::cluster::status::{JobState, job_state, role_of, run_pods, worker_index};
use crate::error::Result;
use crate::report::{PodRow, StatusReport};
use crate::ui::Ui;
use k8s_openapi::api::core::v1::Pod;

pub fn run(g: &Global, ui: &Ui, a: StatusArgs) -> Result<u8> {
    if !a.all
        && let Some(r) = crate::local::cmd::find(g, a.run.as_deref())?
    {
        return crate::local::cmd::status(ui, &a, &r);
    }
    block_on(async {
        if a.all {
            return list_all(g, &a).await;
        }
        let (c, run) = locate_run(g, a.run.as_deref()).await?;
        crate::report::show(&a, ui, || report(&c, &run)).await
    })
}

async fn report(c: &Cluster, run: &RunRef) -> Result<StatusReport> {
    let (state, conditions) = job_state(c, run).await?;
    let pods = run_pods(c, run).await?.iter().map(row).collect();
    Ok(StatusReport {
        run: run.run_id.clone(),
        job: run.job.clone(),
        app: run.app.clone(),
        namespace: run.namespace.clone(),
        context: c.context.clone(),
        backend: run.backend.to_string(),
        state,
        conditions,
        pods,
    })
}

fn row(p: &Pod) -> PodRow {
    let name = p.metadata.name.clone().unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    let cs = status.container_statuses.unwrap_or_default();
    let ready = cs.iter().filter(|c| c.ready).count();
    let total = p.spec.as_ref().map_or(cs.len(), |s| s.containers.len());
    let last_termination = cs.iter().find_map(|c| {
        let t = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| c.state.as_ref().and_then(|s| s.terminated.as_ref()))?;
        Some(format!(
            "{} (exit {})",
            t.reason.clone().unwrap_or_else(|| "Terminated".into()),
            t.exit_code
        ))
    });
    let waiting = cs
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
    let phase = status.phase.clone().unwrap_or_else(|| "Unknown".into());
    PodRow {
        index: worker_index(&name),
        role: role_of(p).to_string(),
        phase: match (phase.as_str(), waiting) {
            ("Pending" | "Running", Some(w)) => w,
            _ => phase,
        },
        ready: format!("{ready}/{total}"),
        restarts: cs.iter().map(|c| c.restart_count).sum(),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| "-".into()),
        created: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        last_termination,
        name,
    }
}

async fn list_all(g: &Global, a: &StatusArgs) -> Result<u8> {
    let app = optional_app(g)?;
    let ns = crate::kubeconfig::namespace(g, app.as_ref().and_then(|a| a.namespace.as_deref()))?;
    let c = crate::cluster::connect(g).await?;
    let seen = runs::list(&c, &ns, None, None).await?;
    let mut reports = Vec::new();
    for s in &seen {
        match report(&c, &s.run).await {
            Ok(r) => reports.push(r),
            // A run whose job object is gone (half-undeployed) still shows, as Failed.
            Err(_) => reports.push(StatusReport {
                run: s.run.run_id.clone(),
                job: s.run.job.clone(),
                app: s.run.app.clone(),
                namespace: ns.clone(),
                context: c.context.clone(),
                backend: s.run.backend.to_string(),
                state: JobState::Failed,
                conditions: vec![],
                pods: vec![],
            }),
        }
    }
    match a.output {
        StatusFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&reports).unwrap_or_default()
        ),
        StatusFormat::Yaml => print!("{}", serde_norway::to_string(&reports).unwrap_or_default()),
        StatusFormat::Text => {
            if reports.is_empty() {
                eprintln!("No hvdctl runs in namespace {ns} (context {})", c.context);
                return Ok(0);
            }
            println!(
                "{:<7} {:<30} {:<20} {:<8} {:<10} {:<5}",
                "RUN", "JOB", "APP", "BACKEND", "STATE", "PODS"
            );
            for r in &reports {
                println!(
                    "{:<7} {:<30} {:<20} {:<8} {:<10} {:<5}",
                    r.run,
                    r.job,
                    r.app,
                    r.backend,
                    r.state.to_string(),
                    r.pods.len()
                );
            }
        }
    }
    Ok(0)
}
