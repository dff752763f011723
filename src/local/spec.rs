//! What a local run is made of: the network and container specs, built from an [`App`] as data.
//! Pure functions, no daemon: `deploy` sends what [`plan`] returns.

use super::rundir::RunDir;
use super::{LABEL_BACKEND, LABEL_DIR, LABEL_JOB, launcher_name, network_name, worker_name};
use crate::app::App;
use crate::app::spec::ResourceSpec;
use crate::backend::Backend;
use crate::backend::Run;
use crate::backend::values::{
    HOSTFILE, MPI_DIR, SCRIPTS_DIR, SSH_DIR, env_pairs, launch_argv, rank_tags,
};
use crate::error::{Error, Result};
use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::render::manifests::{
    LABEL_APP, LABEL_MANAGED_BY, LABEL_RANK_TAGS, LABEL_ROLE, LABEL_RUN, MANAGER,
};
use bollard::models::{
    ContainerCreateBody, DeviceRequest, EndpointSettings, HostConfig, Mount, MountType,
    NetworkCreateRequest, NetworkingConfig,
};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// One container to create.
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub name: String,
    pub role: &'static str,
    pub body: ContainerCreateBody,
}

/// Everything a run creates, in creation order: network, workers, launcher.
#[derive(Debug, Clone)]
pub struct Plan {
    pub network: NetworkCreateRequest,
    pub workers: Vec<ContainerPlan>,
    pub launcher: ContainerPlan,
}

/// What the local backend cannot do with this app, as an input error (exit 2). Checked
/// before anything is created.
pub fn check(app: &App) -> Result<()> {
    if let Some(q) = &app.queue {
        return Err(Error::input(format!(
            "queue `{q}`: a Kueue LocalQueue applies to Kubernetes backends; the local backend runs on this machine's Docker engine, which has no queue"
        ))
        .hint("remove `queue` for local runs, or deploy to a cluster with Kueue (--backend mpijob, native or trainjob)")
        .at_key(&["queue"]));
    }
    if app.scheduling.volcano.is_some() {
        return Err(Error::input(
            "scheduling.volcano: Volcano applies to Kubernetes backends; the local backend runs on this machine's Docker engine, which has no batch scheduler",
        )
        .hint("remove `scheduling.volcano` for local runs, or deploy to a cluster with Volcano (--backend mpijob, native or trainjob)")
        .at_key(&["scheduling", "volcano"]));
    }
    if app.image_pull_policy == Some(crate::app::spec::PullPolicy::Always) {
        return Err(Error::input(
            "imagePullPolicy `Always`: the local backend never pulls; it runs the image that is in this machine's Docker engine",
        )
        .hint("for local runs leave imagePullPolicy unset (or IfNotPresent/Never: the image must be in the engine), and `hvdctl build` or `docker pull` the image first")
        .at_key(&["imagePullPolicy"]));
    }
    if let Some(st) = app.storage.first() {
        return Err(Error::input(format!(
            "storage `{}`: the local backend has no PersistentVolumeClaims to create",
            st.name
        ))
        .hint(format!(
            "for local runs, mount a host directory instead: volumes: [{{name: {0}, mountPath: {1}, hostPath: {{path: /some/dir}}}}], or deploy to a cluster (--backend native or mpijob)",
            st.name, st.mount_path
        ))
        .at(index_path("storage", 0)));
    }
    if let Some(shm) = &app.shm {
        bytes(shm).ok_or_else(|| {
            Error::input(format!("shm `{shm}` is not a memory quantity"))
                .hint("use a Kubernetes quantity, e.g. shm: 2Gi")
                .at_key(&["shm"])
        })?;
    }
    for (i, v) in app.volumes.iter().enumerate() {
        let at = || index_path("volumes", i);
        let projected = if let Some(sec) = &v.secret {
            Some(("secret", format!("Secret `{}`", sec.secret_name)))
        } else {
            v.config_map
                .as_ref()
                .map(|cm| ("configMap", format!("ConfigMap `{}`", cm.name)))
        };
        if let Some((key, what)) = projected {
            return Err(Error::input(format!(
                "volume `{}` (volumes[].{key}) mounts the {what}: the local backend has no Kubernetes Secrets or ConfigMaps",
                v.name
            ))
            .hint(format!(
                "for local runs, put the files in a directory and mount it read-only: {{name: {}, mountPath: {}, readOnly: true, hostPath: {{path: /some/dir}}}}; or deploy to a cluster (--backend native or mpijob)",
                v.name, v.mount_path
            ))
            .at(at()));
        }
        if let Some(q) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref())
            && bytes(q).is_none()
        {
            return Err(Error::input(format!(
                "volume `{}`: emptyDir.sizeLimit `{q}` is not a memory quantity",
                v.name
            ))
            .at(at()));
        }
        let kind = if v.pvc.is_some() {
            Some("a PersistentVolumeClaim (pvc)")
        } else if v.nfs.is_some() {
            Some("an NFS share (nfs)")
        } else {
            None
        };
        if let Some(kind) = kind {
            return Err(Error::input(format!(
                "volume `{}` is {kind}: the local backend runs on this machine's Docker engine and can only mount host directories (hostPath)",
                v.name
            ))
            .hint(format!(
                "for local runs, give volume `{}` (mounted at {}) a hostPath source instead (hostPath: {{path: /some/dir}}), or deploy to a cluster (--backend native or mpijob)",
                v.name, v.mount_path
            ))
            .at(at()));
        }
        if let Some(h) = &v.host_path {
            if !Path::new(&h.path).is_absolute() {
                return Err(Error::input(format!(
                    "volume `{}`: hostPath.path `{}` must be an absolute path",
                    v.name, h.path
                ))
                .at(at()));
            }
            if let Some(sp) = &v.sub_path
                && !is_plain_relative(sp)
            {
                return Err(Error::input(format!(
                    "volume `{}`: subPath `{sp}` must be a relative path without `..`",
                    v.name
                ))
                .at(at()));
            }
        }
    }
    for (role, spec) in [
        ("launcher", &app.resources.launcher),
        ("worker", &app.resources.worker),
    ] {
        limits(spec).map_err(|e| {
            e.context(format!("resources.{role}"))
                .at_key(&["resources", role])
        })?;
    }
    Ok(())
}

/// `key[index]` in the app file.
fn index_path(key: &str, index: usize) -> crate::yaml::Path {
    use crate::yaml::Seg;
    crate::yaml::Path(vec![Seg::Key(key.into()), Seg::Index(index)])
}

fn is_plain_relative(p: &str) -> bool {
    let p = Path::new(p);
    !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// A Kubernetes CPU quantity (`500m`, `2`, `1.5`) in nano-CPUs, read as the Kubernetes
/// backends read it; above zero.
pub fn nano_cpus(q: &str) -> Option<i64> {
    let q = quantity::Quantity::parse(q).ok()?;
    i64::try_from(q.nanos()).ok().filter(|n| *n > 0)
}

/// A Kubernetes memory quantity (`512Mi`, `1G`, `1e9`, `1048576`) in bytes (rounded up, as
/// the API server's `Value`); above zero.
pub fn bytes(q: &str) -> Option<i64> {
    let q = quantity::Quantity::parse(q).ok()?;
    i64::try_from(q.value()).ok().filter(|n| *n > 0)
}

/// Docker's resource settings from a pod's requests and limits: limits.cpu → NanoCpus,
/// limits.memory → Memory (swap off), requests.memory → MemoryReservation,
/// requests.cpu → CpuShares (1024 per CPU). Other resources are ignored.
fn limits(spec: &ResourceSpec) -> Result<HostConfig> {
    let mut hc = HostConfig::default();
    let bad = |k: &str, v: &str, what: &str| {
        Error::input(format!("{k} `{v}` is not a {what} quantity"))
            .hint("use Kubernetes quantities, e.g. cpu: 500m or 2, memory: 512Mi or 4Gi")
    };
    if let Some(v) = spec.limits.get("cpu") {
        hc.nano_cpus = Some(nano_cpus(v).ok_or_else(|| bad("limits.cpu", v, "CPU"))?);
    }
    if let Some(v) = spec.limits.get("memory") {
        let b = bytes(v).ok_or_else(|| bad("limits.memory", v, "memory"))?;
        if b < 6 * 1024 * 1024 {
            return Err(Error::input(format!(
                "limits.memory `{v}` is below Docker's minimum of 6Mi"
            )));
        }
        hc.memory = Some(b);
        hc.memory_swap = Some(b);
    }
    if let Some(v) = spec.requests.get("memory") {
        let b = bytes(v).ok_or_else(|| bad("requests.memory", v, "memory"))?;
        // Docker refuses a reservation above the limit; Kubernetes would too.
        hc.memory_reservation = Some(hc.memory.map_or(b, |m| b.min(m)));
    }
    if let Some(v) = spec.requests.get("cpu") {
        let n = nano_cpus(v).ok_or_else(|| bad("requests.cpu", v, "CPU"))?;
        hc.cpu_shares = Some((n * 1024 / 1_000_000_000).max(2));
    }
    Ok(hc)
}

/// The labels of every container and the network: the app's own first, hvdctl's win.
pub fn labels(
    app: &App,
    run_id: &str,
    job: &str,
    role: Option<&str>,
    dir: &Path,
) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = app
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    l.insert(LABEL_APP.into(), app.name.clone());
    l.insert(LABEL_RUN.into(), run_id.into());
    l.insert(LABEL_JOB.into(), job.into());
    l.insert(LABEL_BACKEND.into(), Backend::Local.as_str().into());
    l.insert(LABEL_DIR.into(), dir.display().to_string());
    match role {
        Some(r) => l.insert(LABEL_ROLE.into(), r.into()),
        None => l.remove(LABEL_ROLE),
    };
    match rank_tags(app).label() {
        Some(v) if role == Some(ROLE_LAUNCHER) => l.insert(LABEL_RANK_TAGS.into(), v.into()),
        _ => l.remove(LABEL_RANK_TAGS),
    };
    l
}

fn bind(source: &Path, target: &str, read_only: bool) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(source.display().to_string()),
        target: Some(target.to_string()),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The app's hostPath volumes as bind mounts, its emptyDirs as a tmpfs (`medium: Memory`)
/// or an anonymous volume of each container, removed with it (see [`check`]).
fn volume_mounts(app: &App) -> Vec<Mount> {
    app.volumes
        .iter()
        .filter_map(|v| {
            if let Some(ed) = &v.empty_dir {
                let memory = ed.medium == Some(crate::app::spec::StorageMedium::Memory);
                return Some(Mount {
                    typ: Some(if memory {
                        MountType::TMPFS
                    } else {
                        MountType::VOLUME
                    }),
                    target: Some(v.mount_path.clone()),
                    read_only: Some(v.read_only),
                    tmpfs_options: memory.then(|| bollard::models::MountTmpfsOptions {
                        size_bytes: ed.size_limit.as_deref().and_then(bytes),
                        mode: Some(0o1777),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            let h = v.host_path.as_ref()?;
            let mut src = PathBuf::from(&h.path);
            if let Some(sp) = &v.sub_path {
                src.push(sp);
            }
            Some(bind(&src, &v.mount_path, v.read_only))
        })
        .collect()
}

/// The container `User`: `runAsUser[:runAsGroup]`; a group alone keeps the image's user.
fn user(app: &App, image_user: &str) -> Option<String> {
    let sc = &app.security_context;
    match (sc.run_as_user, sc.run_as_group) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(g)) => {
            let base = image_user.split(':').next().unwrap_or("");
            Some(format!("{}:{g}", if base.is_empty() { "0" } else { base }))
        }
        (None, None) => None,
    }
}

/// The environment of every container: the app's env and parameters, hvdctl's `HVDCTL_*`.
pub fn env(run: &Run) -> Vec<String> {
    let mut env: Vec<String> = env_pairs(run)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.extend(
        crate::backend::values::launcher_env(run.app)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    env
}

/// The hostfile of a local run: workers by container name (= hostname = network alias).
pub fn hostfile(run: &Run) -> String {
    let job = run.job_name();
    crate::backend::values::hostfile(run.app, |i| worker_name(&job, i))
}

/// `discover_hosts.sh` of a local run: it probes the workers listed in `/etc/mpi/workers`
/// ([`workers_list`] at deploy, rewritten by `hvdctl scale`).
pub fn discover_hosts(_run: &Run) -> String {
    crate::backend::values::discover_hosts_listed()
}

/// The workers of a new run, one name a line.
pub fn workers_list(run: &Run) -> String {
    let job = run.job_name();
    (0..run.app.workers)
        .map(|i| format!("{}\n", worker_name(&job, i)))
        .collect()
}

/// The launcher's argv: `launcher.sh mpirun ... <command> <args>`.
pub fn launcher_argv(run: &Run) -> Vec<String> {
    let mut argv = vec![
        "/bin/bash".to_string(),
        format!("{SCRIPTS_DIR}/launcher.sh"),
    ];
    argv.extend(launch_argv(run, Some(HOSTFILE)));
    argv
}

/// The whole run. `image_user` is the image's configured `User` (for a group-only
/// securityContext).
pub fn plan(run: &Run, dir: &RunDir, image_user: &str) -> Result<Plan> {
    let app = run.app;
    check(app)?;
    let job = run.job_name();
    let network = network_name(&job);
    let env = env(run);
    let user = user(app, image_user);
    let group_add = app.security_context.fs_group.map(|g| vec![g.to_string()]);
    let container = |name: String,
                     role: &'static str,
                     argv: Vec<String>,
                     spec: &ResourceSpec,
                     ssh: &Path,
                     gpus: u32|
     -> Result<ContainerPlan> {
        let mut mounts = volume_mounts(app);
        mounts.extend([
            bind(ssh, SSH_DIR, true),
            bind(&dir.mpi(), MPI_DIR, true),
            bind(
                &dir.script("launcher.sh"),
                &format!("{SCRIPTS_DIR}/launcher.sh"),
                true,
            ),
            bind(
                &dir.script("worker.sh"),
                &format!("{SCRIPTS_DIR}/worker.sh"),
                true,
            ),
        ]);
        let mut hc = limits(spec)?;
        hc.mounts = Some(mounts);
        hc.shm_size = app.shm.as_deref().and_then(bytes);
        hc.network_mode = Some(network.clone());
        hc.group_add = group_add.clone();
        if gpus > 0 {
            hc.device_requests = Some(vec![DeviceRequest {
                driver: Some(String::new()),
                count: Some(i64::from(gpus)),
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                ..Default::default()
            }]);
        }
        let endpoint = EndpointSettings {
            aliases: Some(vec![name.clone()]),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            hostname: Some(name.clone()),
            user: user.clone(),
            env: Some(env.clone()),
            image: Some(run.image.clone()),
            // Like a Kubernetes `command`: replaces the image's ENTRYPOINT and CMD.
            entrypoint: Some(argv),
            labels: Some(labels(app, &run.run_id, &job, Some(role), dir.root())),
            host_config: Some(hc),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(network.clone(), endpoint)])),
            }),
            ..Default::default()
        };
        Ok(ContainerPlan { name, role, body })
    };
    let workers = (0..app.workers)
        .map(|i| {
            container(
                worker_name(&job, i),
                ROLE_WORKER,
                vec!["/bin/bash".to_string(), format!("{SCRIPTS_DIR}/worker.sh")],
                &app.resources.worker,
                &dir.worker_ssh(),
                app.gpus_per_worker,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let launcher = container(
        launcher_name(&job),
        ROLE_LAUNCHER,
        launcher_argv(run),
        &app.resources.launcher,
        &dir.launcher_ssh(),
        0,
    )?;
    Ok(Plan {
        network: NetworkCreateRequest {
            name: network.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels(app, &run.run_id, &job, None, dir.root())),
            ..Default::default()
        },
        workers,
        launcher,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::spec::{HostPathSource, PvcSource, Volume};

    fn app() -> App {
        crate::app::load::from_text(
            "name: hello\nimage: hello:1\nworkers: 2\nslotsPerWorker: 2\ncommand: [python3, /app/hello.py]\nenv:\n  FOO: bar\nresources:\n  worker:\n    requests: {cpu: 250m, memory: 256Mi}\n    limits: {cpu: '1.5', memory: 512Mi}\n",
            "hvdctl.yaml",
            &[],
        )
        .unwrap()
    }

    fn run(app: &App) -> Run<'_> {
        Run {
            app,
            backend: crate::backend::Backend::Local,
            run_id: "ab1".into(),
            namespace: "local".into(),
            image: "hello:1".into(),
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(nano_cpus("500m"), Some(500_000_000));
        assert_eq!(nano_cpus("2"), Some(2_000_000_000));
        assert_eq!(nano_cpus("1.5"), Some(1_500_000_000));
        assert_eq!(nano_cpus("x"), None);
        assert_eq!(nano_cpus("0"), None);
        assert_eq!(bytes("512Mi"), Some(512 * 1024 * 1024));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("2Gi"), Some(2 << 30));
        assert_eq!(bytes("1048576"), Some(1_048_576));
        assert_eq!(bytes("lots"), None);
    }

    #[test]
    fn plan_has_names_limits_labels_and_mounts() {
        let app = app();
        let r = run(&app);
        let dir = RunDir::at(PathBuf::from("/tmp/hvdctl-local-x"));
        let p = plan(&r, &dir, "").unwrap();
        assert_eq!(p.network.name, "hvdctl-hello-ab1");
        let names: Vec<&str> = p.workers.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["hello-ab1-worker-0", "hello-ab1-worker-1"]);
        assert_eq!(p.launcher.name, "hello-ab1-launcher");
        let w = &p.workers[1].body;
        assert_eq!(w.hostname.as_deref(), Some("hello-ab1-worker-1"));
        let hc = w.host_config.as_ref().unwrap();
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
        assert_eq!(hc.memory, Some(512 << 20));
        assert_eq!(hc.memory_reservation, Some(256 << 20));
        assert_eq!(hc.network_mode.as_deref(), Some("hvdctl-hello-ab1"));
        assert!(hc.device_requests.is_none());
        let aliases = &w
            .networking_config
            .as_ref()
            .unwrap()
            .endpoints_config
            .as_ref()
            .unwrap()["hvdctl-hello-ab1"]
            .aliases;
        assert_eq!(
            aliases.as_deref(),
            Some(&["hello-ab1-worker-1".to_string()][..])
        );
        let l = w.labels.as_ref().unwrap();
        assert_eq!(l[LABEL_ROLE], "worker");
        assert_eq!(l[LABEL_RUN], "ab1");
        assert_eq!(l[LABEL_DIR], "/tmp/hvdctl-local-x");
        let env = w.env.as_ref().unwrap();
        assert!(env.contains(&"FOO=bar".to_string()));
        assert!(env.contains(&"HVDCTL_SSH_DIR=/etc/hvdctl/ssh".to_string()));
        // Workers see only the public key directory; the launcher the private one.
        let ssh_src = |c: &ContainerPlan| {
            c.body
                .host_config
                .as_ref()
                .unwrap()
                .mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.target.as_deref() == Some(SSH_DIR))
                .unwrap()
                .source
                .clone()
                .unwrap()
        };
        assert_eq!(ssh_src(&p.workers[0]), "/tmp/hvdctl-local-x/ssh-worker");
        assert_eq!(ssh_src(&p.launcher), "/tmp/hvdctl-local-x/ssh-launcher");
        let argv = p.launcher.body.entrypoint.as_ref().unwrap();
        assert_eq!(argv[..2], ["/bin/bash", "/etc/hvdctl/launcher.sh"]);
        assert!(argv.windows(2).any(|w| w == ["-np", "4"]));
        assert!(
            argv.windows(2)
                .any(|w| w == ["--hostfile", "/etc/mpi/hostfile"])
        );
        assert_eq!(
            hostfile(&r),
            "hello-ab1-worker-0 slots=2\nhello-ab1-worker-1 slots=2\n"
        );
        let json = serde_json::to_string(&p.launcher.body).unwrap();
        assert!(!json.contains("PRIVATE KEY"));
    }

    #[test]
    fn gpus_users_and_host_paths() {
        let mut app = app();
        app.gpus_per_worker = 2;
        app.security_context.run_as_user = Some(1000);
        app.security_context.run_as_group = Some(100);
        app.volumes.push(Volume {
            name: "data".into(),
            mount_path: "/data".into(),
            read_only: true,
            sub_path: Some("train".into()),
            pvc: None,
            nfs: None,
            host_path: Some(HostPathSource {
                path: "/srv/data".into(),
                kind: None,
            }),
            secret: None,
            config_map: None,
            empty_dir: None,
        });
        let r = run(&app);
        let dir = RunDir::at(PathBuf::from("/tmp/d"));
        let p = plan(&r, &dir, "").unwrap();
        let w = &p.workers[0].body;
        assert_eq!(w.user.as_deref(), Some("1000:100"));
        let hc = w.host_config.as_ref().unwrap();
        let dr = &hc.device_requests.as_ref().unwrap()[0];
        assert_eq!(dr.count, Some(2));
        assert_eq!(dr.capabilities, Some(vec![vec!["gpu".to_string()]]));
        let m = hc
            .mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.target.as_deref() == Some("/data"))
            .unwrap();
        assert_eq!(m.source.as_deref(), Some("/srv/data/train"));
        assert_eq!(m.read_only, Some(true));
        // The launcher gets no GPUs.
        assert!(
            p.launcher
                .body
                .host_config
                .as_ref()
                .unwrap()
                .device_requests
                .is_none()
        );
        app.security_context.run_as_user = None;
        assert_eq!(user(&app, "mpi"), Some("mpi:100".into()));
        assert_eq!(user(&app, ""), Some("0:100".into()));
    }

    #[test]
    fn pvc_and_nfs_are_refused_as_bad_input() {
        let mut app = app();
        app.volumes.push(Volume {
            name: "scratch".into(),
            mount_path: "/scratch".into(),
            read_only: false,
            sub_path: None,
            pvc: Some(PvcSource {
                claim_name: "scratch".into(),
            }),
            nfs: None,
            host_path: None,
            secret: None,
            config_map: None,
            empty_dir: None,
        });
        let e = check(&app).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("volume `scratch`"), "{}", e.message);
        assert!(e.message.contains("hostPath"), "{}", e.message);
    }

    fn with(yaml: &str) -> App {
        crate::app::load::from_text(
            &format!("name: hello\nimage: hello:1\ncommand: [python3, /app/hello.py]\n{yaml}"),
            "hvdctl.yaml",
            &[],
        )
        .unwrap()
    }

    #[test]
    fn secrets_config_maps_storage_and_pulls_are_refused_naming_the_key() {
        for (yaml, says) in [
            (
                "volumes: [{name: creds, mountPath: /creds, secret: {secretName: aws}}]",
                "volume `creds` (volumes[].secret) mounts the Secret `aws`",
            ),
            (
                "volumes: [{name: cfg, mountPath: /cfg, configMap: {name: settings}}]",
                "volume `cfg` (volumes[].configMap) mounts the ConfigMap `settings`",
            ),
            (
                "storage: [{name: data, size: 1Gi, mountPath: /data}]",
                "storage `data`",
            ),
            ("imagePullPolicy: Always", "imagePullPolicy `Always`"),
        ] {
            let e = check(&with(yaml)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{yaml}");
            assert!(e.message.contains(says), "{yaml}: {}", e.message);
        }
        assert!(check(&with("imagePullPolicy: Never")).is_ok());
    }

    #[test]
    fn shm_and_empty_dirs_become_docker_settings() {
        let app = with(
            "shm: 2Gi\nvolumes: [{name: fast, mountPath: /fast, emptyDir: {medium: Memory, sizeLimit: 64Mi}}, {name: disk, mountPath: /disk, emptyDir: {}}]",
        );
        let r = run(&app);
        let dir = RunDir::at(PathBuf::from("/tmp/d"));
        let p = plan(&r, &dir, "").unwrap();
        for c in p.workers.iter().chain([&p.launcher]) {
            let hc = c.body.host_config.as_ref().unwrap();
            assert_eq!(hc.shm_size, Some(2 << 30));
            let mounts = hc.mounts.as_ref().unwrap();
            let at = |t: &str| {
                mounts
                    .iter()
                    .find(|m| m.target.as_deref() == Some(t))
                    .unwrap()
            };
            assert_eq!(at("/fast").typ, Some(MountType::TMPFS));
            assert_eq!(
                at("/fast").tmpfs_options.as_ref().unwrap().size_bytes,
                Some(64 << 20)
            );
            assert_eq!(at("/disk").typ, Some(MountType::VOLUME));
            assert_eq!(at("/disk").source, None);
        }
    }

    #[test]
    fn bad_quantities_are_input_errors() {
        let mut app = app();
        app.resources
            .worker
            .limits
            .insert("memory".into(), "lots".into());
        let e = check(&app).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("resources.worker"), "{}", e.message);
    }
}
