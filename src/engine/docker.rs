//! The Docker engine: the `local` backend's runs are labelled containers and a network on
//! this machine's daemon (see `crate::local`).

mod remote;

use super::{Env, Place, Plan, Removed, RunInfo};
use crate::error::Result;
use crate::image::docker::DockerClient;
use crate::local::{self, LocalRef};
use crate::options::ManifestFormat;
use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
use crate::report::StatusReport;
use crate::ui::Ui;
use bollard::query_parameters::ListContainersOptions;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A connected Docker engine.
pub struct Docker {
    pub client: DockerClient,
}

/// A local run.
pub struct DockerRun {
    pub docker: DockerClient,
    pub run: LocalRef,
    pub info: RunInfo,
    first_log: crate::phases::FirstLog,
}

impl Docker {
    pub async fn connect() -> Result<Docker> {
        Ok(Docker {
            client: local::connect().await?,
        })
    }

    pub fn describe(&self) -> String {
        place(&self.client).to_string()
    }

    fn run(&self, r: LocalRef, created: String) -> DockerRun {
        DockerRun::new(self.client.clone(), r, created)
    }

    /// The runs whose containers match `labels`, oldest first.
    async fn runs(&self, labels: Vec<String>) -> Result<Vec<DockerRun>> {
        let mut l = vec![
            format!("{LABEL_MANAGED_BY}={MANAGER}"),
            format!(
                "{}={}",
                local::LABEL_BACKEND,
                crate::app::BackendName::LOCAL
            ),
        ];
        l.extend(labels);
        let list = self
            .client
            .bollard()
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([("label".to_string(), l)])),
                ..Default::default()
            }))
            .await
            .map_err(|e| local::docker_error("listing hvdctl's containers", &e))?;
        let mut runs: BTreeMap<String, (LocalRef, i64)> = BTreeMap::new();
        for c in &list {
            let Some(l) = c.labels.as_ref() else { continue };
            let (Some(id), Some(app)) = (l.get(LABEL_RUN), l.get(LABEL_APP)) else {
                continue;
            };
            let created = c.created.unwrap_or_default();
            let e = runs
                .entry(id.clone())
                .or_insert_with(|| (LocalRef::new(app, id), created));
            e.1 = e.1.max(created);
        }
        let mut out: Vec<(LocalRef, i64)> = runs.into_values().collect();
        out.sort_by_key(|(_, t)| *t);
        Ok(out
            .into_iter()
            .map(|(r, t)| {
                let ts = jiff::Timestamp::from_second(t)
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                self.run(r, ts)
            })
            .collect())
    }

    pub async fn find(&self, run_id: &str, app: Option<&str>) -> Result<Option<DockerRun>> {
        let mut labels = vec![format!("{LABEL_RUN}={run_id}")];
        labels.extend(app.map(|a| format!("{LABEL_APP}={a}")));
        Ok(self.runs(labels).await?.pop())
    }

    pub async fn list(&self, app: Option<&str>) -> Result<Vec<DockerRun>> {
        self.runs(
            app.map(|a| format!("{LABEL_APP}={a}"))
                .into_iter()
                .collect(),
        )
        .await
    }
}

fn place(d: &DockerClient) -> Place {
    Place::Docker {
        host: d.host().to_string(),
    }
}

impl DockerRun {
    pub fn new(docker: DockerClient, run: LocalRef, created: String) -> DockerRun {
        let info = RunInfo {
            run_id: run.run_id.clone(),
            app: run.app.clone(),
            job: run.job.clone(),
            backend: crate::app::BackendName::LOCAL.to_string(),
            place: place(&docker),
            created,
        };
        DockerRun {
            docker,
            run,
            info,
            first_log: Default::default(),
        }
    }

    pub async fn status(&self) -> Result<StatusReport> {
        local::status::report(&self.docker, &self.run, &self.first_log).await
    }

    pub async fn undeploy(&self) -> Result<Removed> {
        let r = local::undeploy::undeploy(&self.docker, &self.run).await?;
        let mut items: Vec<(String, String)> = Vec::new();
        items.extend(r.containers.into_iter().map(|c| ("container".into(), c)));
        items.extend(r.networks.into_iter().map(|n| ("network".into(), n)));
        items.extend(
            r.dirs
                .into_iter()
                .map(|d| ("private directory".into(), d.display().to_string())),
        );
        Ok(Removed { items })
    }

    /// Looks at the containers twice a second (the Docker engine's state is local and cheap
    /// to read).
    pub async fn wait_running(&self, ui: &Ui) -> Result<StatusReport> {
        let bar = ui.spinner(format!("waiting for the containers of {}", self.run.job));
        loop {
            let r = self.status().await?;
            if super::wait_done(&r, &bar, ui) {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Creates the run's network and containers (all of them or nothing).
pub async fn deploy(env: &Env<'_>, plan: &Plan<'_>) -> Result<DockerRun> {
    let ui = env.ui;
    let run = local::deploy(
        plan.dir,
        plan.app,
        &plan.run_id,
        &plan.image,
        plan.provenance(ui).await,
        ui,
    )
    .await?;
    ui.note(format!(
        "Deployed {} (run {}, backend local, {} containers on network {})",
        run.run.job,
        run.run.run_id,
        run.containers.len(),
        run.network
    ));
    ui.debug(format!(
        "  private directory (ssh keys, hostfile): {}",
        run.dir.display()
    ));
    let docker = local::connect().await?;
    Ok(DockerRun::new(docker, run.run, crate::state::now()))
}

/// `deploy --dry-run` of a local run: the network and container specs the engine would get
/// (the private directory's path is a placeholder; no key exists yet).
pub fn dry_run(plan: &Plan, format: ManifestFormat) -> Result<String> {
    let run = crate::backend::Run {
        app: plan.app,
        backend: plan.backend,
        run_id: plan.run_id.clone(),
        namespace: String::new(),
        image: plan.image.clone(),
    };
    let job = run.job_name();
    let dir = local::rundir::RunDir::at(
        std::env::temp_dir().join(format!("{}{job}.<random>", local::rundir::PREFIX)),
    );
    let plan = local::spec::plan(&run, &dir, "")?;
    let mut items = vec![
        serde_json::json!({"kind": "Network", "name": plan.network.name, "spec": plan.network}),
    ];
    for c in plan.workers.iter().chain([&plan.launcher]) {
        items.push(serde_json::json!({"kind": "Container", "name": c.name, "role": c.role, "spec": c.body}));
    }
    // bollard's specs hold HashMaps (labels, endpoints): sort keys so the output is stable.
    let list = sort_keys(serde_json::json!({"backend": "local", "job": job, "items": items}));
    Ok(match format {
        ManifestFormat::Json => crate::text::json(&list)?,
        ManifestFormat::Yaml => crate::text::yaml(&list)?,
    })
}

/// `v` with the keys of every mapping in sorted order.
fn sort_keys(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort_keys).collect()),
        other => other,
    }
}
