use super::{block_on, locate_run, optional_app};
use crate::cli::{Global, StatusArgs, StatusFormat};
use crate::cluster::Cluster;
use crate::cluster::runs::{self, RunRef};
use crate::cluster::status::{JobState, job_state, role_of, run_pods, worker_index};
use crate::error::Result;
use crate::kinds::JobCondition;
use crate::ui::Ui;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::time::Duration;

/// What `status -o json|yaml` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub run: String,
    pub job: String,
    pub app: String,
    pub namespace: String,
    pub context: String,
    pub backend: String,
    pub state: JobState,
    pub conditions: Vec<JobCondition>,
    pub pods: Vec<PodRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    pub name: String,
    pub role: String,
    pub index: Option<u32>,
    pub phase: String,
    pub ready: String,
    pub restarts: i32,
    pub node: String,
    pub created: String,
    pub last_termination: Option<String>,
}

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
        let mut last = String::new();
        loop {
            let report = report(&c, &run).await?;
            let text = render(&report, a.output);
            let finished = report.state.is_finished();
            let show = if a.watch {
                text != last
            } else {
                !a.wait || finished
            };
            if show {
                if a.watch && !last.is_empty() && a.output == StatusFormat::Text {
                    println!();
                }
                print!("{text}");
                last = text;
            }
            if finished || !(a.watch || a.wait) {
                return Ok(if a.wait { report.state.exit_code() } else { 0 });
            }
            ui.debug(format!("{}: {}", run.job, report.state));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
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

fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "-".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn render(r: &StatusReport, format: StatusFormat) -> String {
    match format {
        StatusFormat::Json => serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        StatusFormat::Yaml => serde_norway::to_string(r).unwrap_or_default(),
        StatusFormat::Text => {
            let mut s = format!(
                "Run:        {} (job {}, app {})\nBackend:    {}\nNamespace:  {} (context {})\nState:      {}\n",
                r.run, r.job, r.app, r.backend, r.namespace, r.context, r.state
            );
            if !r.conditions.is_empty() {
                s.push_str("Conditions:\n");
                for c in &r.conditions {
                    s.push_str(&format!(
                        "  {:<12} {:<6} {:<22} {}\n",
                        c.type_,
                        c.status,
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default()
                    ));
                }
            }
            if r.pods.is_empty() {
                s.push_str("Pods:       none yet\n");
                return s;
            }
            let w = r
                .pods
                .iter()
                .map(|p| p.name.len())
                .max()
                .unwrap_or(4)
                .max(4);
            s.push_str(&format!(
                "{:<w$}  {:<8} {:<5} {:<18} {:<5} {:<8} {:<14} {:<5} {}\n",
                "NAME",
                "ROLE",
                "INDEX",
                "PHASE",
                "READY",
                "RESTARTS",
                "NODE",
                "AGE",
                "LAST TERMINATION"
            ));
            for p in &r.pods {
                s.push_str(&format!(
                    "{:<w$}  {:<8} {:<5} {:<18} {:<5} {:<8} {:<14} {:<5} {}\n",
                    p.name,
                    p.role,
                    p.index.map_or("-".into(), |i| i.to_string()),
                    p.phase,
                    p.ready,
                    p.restarts,
                    p.node,
                    age(&p.created),
                    p.last_termination.clone().unwrap_or_else(|| "-".into())
                ));
            }
            s
        }
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
