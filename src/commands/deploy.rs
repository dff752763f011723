use crate::app;
use crate::backend::{self, Run, SshKeys};
use crate::cli::{DeployArgs, Global, ManifestFormat};
use crate::cluster::runs::{RunRef, mpijob_served};
use crate::cluster::status::{JobState, job_state, run_pods};
use crate::cluster::{Cluster, apply, undeploy};
use crate::error::{Error, Result};
use crate::kinds::Object;
use crate::render::manifests;
use crate::state::{self, RunRecord};
use crate::ui::Ui;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub fn run(g: &Global, ui: &Ui, a: DeployArgs) -> Result<u8> {
    let loaded = app::load(&g.app_dir, &a.app.set)?;
    let app = &loaded.app;
    let backend = a.app.backend.unwrap_or(app.backend);
    let run_id = match &a.run_id {
        Some(id) => {
            backend::check_run_id(id).map_err(|e| Error::input(format!("--run-id: {e}")))?;
            id.clone()
        }
        None => backend::new_run_id(),
    };
    let recorded = if a.image.is_some() {
        None
    } else {
        state::image(&loaded.dir)?
    };
    let image = match (&a.image, &recorded) {
        (Some(i), _) => i.clone(),
        (None, Some(r)) => r.image.clone(),
        (None, None) => app.image.clone(),
    };
    // An image built here and not pushed yet must reach a registry before a cluster can run it.
    let unpushed = recorded.filter(|r| !r.pushed).map(|r| r.image);
    if !app::validate::is_image_ref(&image) {
        return Err(Error::input(format!(
            "--image {image}: not a valid image reference"
        )));
    }
    if backend == app::Backend::Local {
        return crate::local::cmd::deploy(ui, &a, &loaded.dir, app, &run_id, &image);
    }
    let namespace = crate::kubeconfig::namespace(g, app.namespace.as_deref())?;
    let run = Run {
        app,
        backend,
        run_id,
        namespace,
        image,
    };
    if a.dry_run {
        let objects = backend::objects(&run, &loaded.dir, None)?;
        print!("{}", format_objects(&objects, a.output));
        return Ok(0);
    }
    // Render before contacting anything: a template error must not cost a round trip.
    let keys = match backend {
        app::Backend::Native => Some(SshKeys::generate(&format!("hvdctl-{}", run.job_name()))?),
        app::Backend::Mpijob => None,
        app::Backend::Local => return Err(Error::input("the local backend is not available yet")),
    };
    let objects = backend::objects(&run, &loaded.dir, keys.as_ref())?;
    drop(keys);
    // Ctrl-C is handled inside `deploy`: it cleans up before exiting.
    super::runtime(true)?.block_on(deploy(g, ui, &a, &run, &loaded.dir, &objects, unpushed))
}

async fn deploy(
    g: &Global,
    ui: &Ui,
    a: &DeployArgs,
    run: &Run<'_>,
    dir: &std::path::Path,
    objects: &[Object],
    unpushed: Option<String>,
) -> Result<u8> {
    let c = crate::cluster::connect(g).await?;
    if let Some(image) = unpushed {
        if a.no_push || a.server_dry_run {
            if !is_local_server(&c.server) && !a.server_dry_run {
                return Err(Error::input(format!(
                    "image {image} was built on this machine and never pushed, and the cluster of context `{}` ({}) is remote: it cannot pull it",
                    c.context, c.server
                ))
                .hint("run `hvdctl push` (or drop --no-push), or pass --image with an image the cluster can pull"));
            }
        } else {
            let docker = crate::image::DockerClient::connect().await?;
            super::build::push_image(&docker, &image, crate::image::ProgressMode::Auto, ui).await?;
            state::record_image(
                dir,
                &state::ImageRecord {
                    image,
                    pushed: true,
                    built: state::now(),
                },
            )?;
        }
    }
    if run.backend == app::Backend::Mpijob && !mpijob_served(&c).await? {
        return Err(Error::failure(format!(
            "the MPI Operator is not installed in context `{}` ({}): kubeflow.org/v2beta1 MPIJob is not served",
            c.context, c.server
        ))
        .hint("install the MPI Operator (v0.4 or later, https://github.com/kubeflow/mpi-operator), or deploy without it: `hvdctl deploy --backend native`"));
    }
    apply::ensure_namespace(&c, &run.namespace, a.create_namespace && !a.server_dry_run).await?;
    let job = run.job_name();
    if a.server_dry_run {
        apply::apply_all(&c, objects, true, &|_| {}).await?;
        ui.note(format!(
            "Server dry run: the API server accepted all {} objects of {job}; nothing was created",
            objects.len()
        ));
        return Ok(0);
    }
    let record = RunRecord {
        run_id: run.run_id.clone(),
        app: run.app.name.clone(),
        job: job.clone(),
        namespace: run.namespace.clone(),
        context: c.context.clone(),
        image: run.image.clone(),
        backend: run.backend.to_string(),
        created: state::now(),
    };
    // Recorded first: if hvdctl is killed half way, `hvdctl undeploy` still finds the run.
    state::record_run(dir, &record)?;
    let bar = ui.spinner(format!("applying {} objects of {job}", objects.len()));
    let done = AtomicUsize::new(0);
    let on_applied = |o: &Object| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        bar.set_message(format!(
            "applied {n}/{} ({} {})",
            objects.len(),
            o.kind(),
            o.name()
        ));
    };
    let applied = tokio::select! {
        r = apply::apply_all(&c, objects, false, &on_applied) => r,
        _ = tokio::signal::ctrl_c() => Err(Error::interrupted()),
    };
    bar.finish_and_clear();
    let rref = RunRef {
        run_id: run.run_id.clone(),
        app: run.app.name.clone(),
        job: job.clone(),
        namespace: run.namespace.clone(),
        backend: run.backend,
    };
    if let Err(e) = applied {
        ui.note(format!("deploy of {job} failed; removing what was created"));
        // A second Ctrl-C must not stop the cleanup half way.
        let cleaned = rollback(&c, &rref).await;
        match cleaned {
            Ok(()) => state::forget_run(dir, &run.run_id)?,
            Err(ce) => {
                return Err(e.context(format!(
                    "deploy failed and cleanup also failed ({ce}); run `hvdctl undeploy {}` to finish it",
                    run.run_id
                )));
            }
        }
        return Err(e);
    }
    ui.note(format!(
        "Deployed {job} (run {}, backend {}, namespace {}, context {}, {} objects)",
        run.run_id,
        run.backend,
        run.namespace,
        c.context,
        objects.len()
    ));
    if a.logs {
        // Logs follow the job to its end and carry its result.
        let outcome = tokio::select! {
            r = crate::logs::run(&c, &rref, crate::logs::LogOptions::follow_all(ui), ui) => r?,
            _ = tokio::signal::ctrl_c() => return Err(Error::interrupted()),
        };
        return Ok(outcome.exit_code());
    }
    if a.wait {
        let state = wait_running(&c, &rref, ui).await?;
        return Ok(state.exit_code());
    }
    if !ui.quiet {
        eprintln!(
            "Next: hvdctl status {0} · hvdctl logs -f {0} · hvdctl undeploy {0}",
            run.run_id
        );
    }
    Ok(0)
}

/// Whether an API server URL points at this machine (a kind/minikube-style or test cluster
/// can use images that exist only in the local daemon).
fn is_local_server(server: &str) -> bool {
    let host = server.split("://").nth(1).unwrap_or(server);
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.split([':', '/']).next().unwrap_or("")
    };
    matches!(host, "localhost" | "::1") || host.starts_with("127.")
}

/// Removes everything of a run that failed to deploy, including objects whose create was in
/// flight when it failed (looked for again until two looks agree nothing is left).
async fn rollback(c: &Cluster, run: &RunRef) -> Result<()> {
    let sel = run.selector();
    let mut quiet_looks = 0;
    for _ in 0..20 {
        let deleted = undeploy::delete(c, &run.namespace, &sel).await?;
        if deleted.is_empty() {
            quiet_looks += 1;
            if quiet_looks == 2 {
                return Ok(());
            }
        } else {
            undeploy::wait_gone(c, &run.namespace, &sel, Duration::from_secs(120), &|_| {}).await?;
            quiet_looks = 0;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(Error::failure("objects kept appearing while cleaning up"))
}

/// Waits until every pod of the run is running or the job has ended.
async fn wait_running(c: &Cluster, run: &RunRef, ui: &Ui) -> Result<JobState> {
    let bar = ui.spinner(format!("waiting for the pods of {}", run.job));
    let expected = |pods: usize| pods.max(1);
    loop {
        let (state, _) = job_state(c, run).await?;
        let pods = run_pods(c, run).await?;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        bar.set_message(format!(
            "{}: {state}, {running}/{} pods running",
            run.job,
            expected(pods.len())
        ));
        if state.is_finished()
            || (state == JobState::Running && running == pods.len() && running > 0)
        {
            bar.finish_and_clear();
            ui.note(format!(
                "{}: {state} ({running}/{} pods running)",
                run.job,
                pods.len()
            ));
            return Ok(state);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Objects as a YAML stream (`---` between documents) or a JSON `v1 List`, like kubectl.
pub fn format_objects(objects: &[Object], format: ManifestFormat) -> String {
    match format {
        ManifestFormat::Yaml => manifests::to_yaml_stream(objects),
        ManifestFormat::Json => manifests::to_json_list(objects),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn local_servers() {
        for s in [
            "http://127.0.0.1:6443",
            "https://localhost",
            "https://[::1]:6443/",
            "http://127.1.2.3",
        ] {
            assert!(super::is_local_server(s), "{s}");
        }
        for s in [
            "https://k8s.example.com:6443",
            "https://10.0.0.1",
            "https://[2001:db8::1]:443",
        ] {
            assert!(!super::is_local_server(s), "{s}");
        }
    }
}
