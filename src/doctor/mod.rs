//! `hvdctl doctor`: is everything in place for a run of this app? Each check answers one
//! question with ok / warn / fail, what it saw, and what to do; they run concurrently.
//! `deploy` runs the few that can prove a run will not start ([`preflight`]) before it
//! creates anything.
//!
//! [`fit`] is the arithmetic (nodes, quotas), [`kube`] the cluster's checks, [`registry`]
//! the image in its registry, [`host`] the Docker daemon.

/// The arithmetic of fitting a run (shared with `cluster::reason`, contacting nothing).
pub use crate::fit;
pub mod host;
pub mod kube;
pub mod registry;

use crate::app::App;
use crate::backend::Backend;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::ui::Ui;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of `doctor` (and one object of `-o json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Status,
    pub message: String,
    /// What to do (null when nothing is to be done).
    pub hint: Option<String>,
    /// The chain of errors a check that could not tell ran into (text output shows it with
    /// `-v`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<String>,
}

impl Check {
    fn new(check: &str, status: Status, message: impl Into<String>, hint: &str) -> Check {
        Check {
            check: check.into(),
            status,
            message: message.into(),
            hint: (!hint.is_empty()).then(|| hint.to_string()),
            causes: Vec::new(),
        }
    }
    pub fn ok(check: &str, message: impl Into<String>) -> Check {
        Check::new(check, Status::Ok, message, "")
    }
    pub fn warn(check: &str, message: impl Into<String>, hint: impl AsRef<str>) -> Check {
        Check::new(check, Status::Warn, message, hint.as_ref())
    }
    pub fn fail(check: &str, message: impl Into<String>, hint: impl AsRef<str>) -> Check {
        Check::new(check, Status::Fail, message, hint.as_ref())
    }
}

/// What doctor looks at: the app (with `--set`), its backend, image and namespace.
pub struct Subject<'a> {
    pub app: &'a App,
    pub backend: Backend,
    pub image: String,
    pub namespace: String,
}

/// `-np N` (`-n`, `--np`) in the app's own mpirun/horovodrun arguments (`mpi.extraArgs`;
/// `args` are the training program's), if any.
fn np_of(app: &App) -> Option<(String, u32)> {
    app.mpi.extra_args.windows(2).find_map(|w| {
        matches!(w[0].as_str(), "-np" | "-n" | "--np")
            .then(|| w[1].parse().ok().map(|n| (w[0].clone(), n)))
            .flatten()
    })
}

/// The app's own numbers: GPUs per worker against ranks per worker, `-np` against workers
/// × slots.
pub fn app_checks(app: &App) -> Vec<Check> {
    let slots = app.slots_per_worker;
    let gpus = app.gpus_per_worker;
    let gpu = if gpus > 0 && slots > gpus {
        Check::fail(
            "gpus",
            format!(
                "slotsPerWorker {slots} but gpusPerWorker {gpus}: Horovod gives each rank its own GPU (by local rank), so {} rank(s) per worker would have none",
                slots - gpus
            ),
            format!("set gpusPerWorker: {slots}, or slotsPerWorker: {gpus}"),
        )
    } else if gpus > 0 && gpus != slots {
        Check::warn(
            "gpus",
            format!(
                "gpusPerWorker {gpus} but slotsPerWorker {slots}: Horovod runs one rank per GPU, so {} GPU(s) per worker would idle or ranks would share one",
                gpus.abs_diff(slots)
            ),
            format!("set slotsPerWorker: {gpus}"),
        )
    } else if gpus > 0 {
        Check::ok("gpus", format!("{gpus} GPU(s) per worker, one per rank"))
    } else {
        Check::ok("gpus", "no GPUs requested (CPU training)")
    };
    let want = app.workers * slots;
    let np = match np_of(app) {
        Some((flag, n)) if n != want => Check::fail(
            "np",
            format!(
                "{flag} {n} in the app's arguments, but workers × slotsPerWorker = {} × {slots} = {want}",
                app.workers
            ),
            "drop it: hvdctl passes -np workers × slotsPerWorker itself",
        ),
        _ => Check::ok(
            "np",
            format!(
                "{want} rank(s): {} worker(s) × {slots} slot(s)",
                app.workers
            ),
        ),
    };
    vec![gpu, np]
}

/// Whether the app's pods never pull (`imagePullPolicy: Never`): the nodes' own copy of the
/// image is used, and its registry has nothing to say.
fn never_pulls(app: &App) -> bool {
    app.image_pull_policy == Some(crate::app::spec::PullPolicy::Never)
}

/// The image in its registry, as a check.
pub async fn image_check(app: &App, image: &str) -> Check {
    use registry::Manifest;
    if never_pulls(app) {
        return Check::ok(
            "image",
            format!(
                "{image}: imagePullPolicy Never, the nodes' own copy is used (its registry is not asked)"
            ),
        );
    }
    match registry::manifest(image).await {
        Manifest::Present => Check::ok("image", format!("{image} is in its registry")),
        Manifest::Missing(m) if host::in_local_daemon(image).await => Check::warn(
            "image",
            format!("{image} is not in its registry ({m}), only in the local Docker daemon"),
            "push it (hvdctl push), unless the cluster is local (kind, minikube, k3d) and has it loaded",
        ),
        Manifest::Missing(m) => Check::fail(
            "image",
            format!("{image} is not in its registry: {m}"),
            "build and push it: hvdctl build --push",
        ),
        Manifest::Unauthorized(m) => Check::warn(
            "image",
            format!("cannot tell whether {image} exists: {m}"),
            "docker login to its registry; the cluster also needs imagePullSecrets for a private one",
        ),
        Manifest::Unreachable(e) => Check {
            causes: crate::error::cause_lines(&e),
            ..Check::warn(
                "image",
                format!("cannot tell whether {image} exists: {e}"),
                "",
            )
        },
    }
}

/// Every check for `s`, concurrently. `connect` reaches the cluster (Kubernetes backends).
pub async fn run<C>(s: &Subject<'_>, connect: C) -> Vec<Check>
where
    C: Future<Output = Result<Cluster>>,
{
    let local = s.backend == Backend::Local;
    let docker = async {
        let (check, d) = host::docker(local).await;
        let mut out = vec![check];
        if let Some(d) = d {
            let (disk, image) = futures::join!(host::disk(&d), async {
                if local {
                    Some(host::local_image(&d, &s.image).await)
                } else {
                    None
                }
            });
            out.push(disk);
            out.extend(image);
        } else if local {
            out.push(Check::fail(
                "image",
                format!("cannot look for {} without the Docker daemon", s.image),
                "",
            ));
        }
        out
    };
    let cluster = async {
        let Backend::Kubernetes(b) = s.backend else {
            return Vec::new();
        };
        let c = match connect.await {
            Ok(c) => c,
            Err(e) => {
                return vec![Check {
                    causes: crate::error::cause_lines(&e),
                    ..Check::fail("cluster", e.message.clone(), e.hint.unwrap_or_default())
                }];
            }
        };
        let first = match kube::server(&c).await {
            Ok(ok) => ok,
            Err(fail) => return vec![fail],
        };
        let ns = s.namespace.as_str();
        let (kinds, prereq, queue, rbac, nodes, secrets, sources, istio, quotas) = futures::join!(
            kube::kinds(&c, b),
            kube::prerequisites(&c, ns, s.app, b),
            kube::queue(&c, ns, s.app),
            kube::rbac(&c, ns, b),
            kube::nodes(&c),
            kube::pull_secrets(&c, ns, s.app),
            kube::volume_sources(&c, ns, s.app),
            kube::istio(&c, ns, s.app),
            kube::quotas(&c, ns),
        );
        vec![first, kinds]
            .into_iter()
            .chain(prereq)
            .chain(queue)
            .chain([
                rbac,
                kube::nodes_check(nodes, s.app),
                secrets,
                sources,
                istio,
                kube::quota_check(ns, quotas, s.app),
            ])
            .collect::<Vec<_>>()
    };
    // The registry is asked whether or not the cluster answers.
    let registry = async {
        if s.backend.is_kubernetes() {
            Some(image_check(s.app, &s.image).await)
        } else {
            None
        }
    };
    let (mut checks, image, docker) = futures::join!(cluster, registry, docker);
    checks.extend(image);
    checks.extend(app_checks(s.app));
    checks.extend(docker);
    checks
}

/// The exit code: 1 when any check failed.
pub fn exit_code(checks: &[Check]) -> u8 {
    u8::from(checks.iter().any(|c| c.status == Status::Fail))
}

/// One line per check: `ok   rbac          …`, the hint indented under a warn or fail.
pub fn render_text(checks: &[Check], verbose: bool) -> String {
    let w = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    let mut s = String::new();
    for c in checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        s.push_str(&format!("{status:<4}  {:<w$}  {}\n", c.check, c.message));
        if let Some(h) = c.hint.as_ref().filter(|_| c.status != Status::Ok) {
            s.push_str(&format!("{:<4}  {:<w$}  → {h}\n", "", ""));
        }
        for cause in c.causes.iter().filter(|_| verbose) {
            s.push_str(&format!("{:<4}  {:<w$}    caused by: {cause}\n", "", ""));
        }
    }
    s
}

/// `deploy`'s checks before anything is created or pushed: a refusal (exit 1, the numbers
/// named) for a worker no node can hold, a quota without room, an image its registry answers
/// 404 for (`image`: None when deploy is about to push it; not asked when the app's
/// `imagePullPolicy` is `Never`); warnings for what cannot be told
/// (nodes or quotas not readable, registry unreachable or unauthorised). `--skip-checks`
/// skips this.
pub async fn preflight(
    c: &Cluster,
    namespace: &str,
    app: &App,
    image: Option<&str>,
    ui: &Ui,
) -> Result<()> {
    // A pod that never pulls uses the nodes' copy: the registry is not asked.
    let image = image.filter(|_| !never_pulls(app));
    let manifest = async {
        match image {
            Some(i) => Some(registry::manifest(i).await),
            None => None,
        }
    };
    let (nodes, quotas, manifest, queue) = futures::join!(
        kube::nodes(c),
        kube::quotas(c, namespace),
        manifest,
        kube::queue(c, namespace, app)
    );
    let mut refusals = Vec::new();
    // A queue system that is not installed, or a queue that does not exist: the run would
    // wait for ever.
    match queue {
        Some(q) if q.status == Status::Fail => refusals.push(match &q.hint {
            Some(h) => format!("{} ({h})", q.message),
            None => q.message,
        }),
        Some(q) if q.status == Status::Warn => {
            ui.note(format!("warning: cannot check the queue: {}", q.message));
        }
        _ => {}
    }
    match nodes {
        Ok(nodes) if !nodes.is_empty() => {
            let (fit, msg) = fit::nodes_for_worker(&nodes, app);
            if fit == 0 {
                refusals.push(msg);
            }
        }
        Ok(_) => {}
        Err(e) => ui.note(format!(
            "warning: cannot check that a node can hold a worker: {e}"
        )),
    }
    match quotas {
        Ok(qs) => {
            let totals = fit::run_totals(app);
            refusals.extend(qs.iter().flat_map(|q| fit::quota_short(q, &totals)));
        }
        Err(e) => ui.note(format!("warning: cannot check the namespace's quotas: {e}")),
    }
    let image = image.unwrap_or_default();
    match manifest.unwrap_or(registry::Manifest::Present) {
        registry::Manifest::Present => {}
        registry::Manifest::Missing(m) if host::in_local_daemon(image).await => {
            ui.note(format!(
                "warning: {image} is not in its registry ({m}); it is in the local Docker daemon, so a local cluster (kind, minikube, k3d) may have it loaded"
            ));
        }
        registry::Manifest::Missing(m) => {
            refusals.push(format!("image {image} is not in its registry: {m}"))
        }
        registry::Manifest::Unauthorized(m) => {
            ui.note(format!(
                "warning: cannot check that {image} is in its registry: {m}"
            ));
        }
        registry::Manifest::Unreachable(e) => {
            ui.note(format!(
                "warning: cannot check that {image} is in its registry: {e}"
            ));
            if ui.verbose > 0 {
                for cause in crate::error::cause_lines(&e) {
                    ui.note(format!("  caused by: {cause}"));
                }
            }
        }
    }
    if refusals.is_empty() {
        return Ok(());
    }
    Err(Error::failure(format!(
        "refusing to deploy to namespace {namespace} (nothing was created): {}",
        refusals.join("; ")
    ))
    .hint("`hvdctl doctor` shows every check; --skip-checks deploys anyway"))
}
