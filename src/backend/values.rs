//! The values a manifest template sees (documented in docs/config.md, "Template values").
//! Everything structured is built here as data; templates only place it.

use super::ssh::{REDACTED, SshKeys};
use super::{Launch, Run};
use crate::app::App;
use crate::app::spec::{CleanPodPolicy, Launcher, MpiImplementation};
use crate::app::validate::param_env_name;
use crate::assets;
use crate::logs::rank::TagForms;
use crate::render::manifests::{LABEL_ROLE, LABEL_RUN};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

pub use crate::types::{MPI_DIR, SCRIPTS_DIR};
pub const SSH_DIR: &str = "/etc/hvdctl/ssh";
pub const HOSTFILE: &str = "/etc/mpi/hostfile";
pub const DISCOVER_HOSTS: &str = "/etc/mpi/discover_hosts.sh";

/// Names of the environment variables every rank gets (app env + parameters + hvdctl's own,
/// `TENSORBOARD_LOG_DIR` with `tensorboard.logDir`, `HOROVOD_TIMELINE…` with `timeline`).
pub fn env_pairs(run: &Run) -> BTreeMap<String, String> {
    let app = run.app;
    let mut env = app.env.clone();
    for (k, v) in &app.parameters {
        env.insert(param_env_name(k), v.clone());
    }
    env.insert("HVDCTL_APP".into(), app.name.clone());
    env.insert("HVDCTL_RUN".into(), run.run_id.clone());
    env.insert("HVDCTL_JOB".into(), run.job_name());
    if let Some(tb) = &app.tensorboard {
        env.insert(TENSORBOARD_LOG_DIR.into(), tb.log_dir.clone());
    }
    if let Some(t) = &app.timeline {
        let [file, cycles] = crate::types::TIMELINE_ENV;
        env.insert(file.into(), crate::types::TIMELINE_PATH.into());
        if t.mark_cycles {
            env.insert(cycles.into(), "1".into());
        }
        // A tensor answered from Horovod's response cache is negotiated without each rank's
        // ready time (`horovod/common/response_cache.cc`): off, unless the app says otherwise.
        env.entry("HOROVOD_CACHE_CAPACITY".into())
            .or_insert_with(|| "0".into());
    }
    env
}

pub use crate::types::TENSORBOARD_LOG_DIR;

/// Whether `mpi.extraArgs` has one of `opts` (spelled exactly, e.g. `-l`).
fn extra_has(app: &App, opts: &[&str]) -> bool {
    app.mpi
        .extra_args
        .iter()
        .any(|a| opts.contains(&a.as_str()))
}

/// The rank tags the launcher's lines carry (stamped on the launcher as
/// [`LABEL_RANK_TAGS`](crate::logs::rank::LABEL_RANK_TAGS), read back by `hvdctl logs`):
/// Open MPI's `--tag-output` and Hydra's `-prepend-rank`, which [`launch_argv`] adds, and
/// horovodrun's own (it runs `mpirun --tag-output`, MPICH's `mpirun -l`, or tags Gloo ranks
/// itself). None when `mpi.extraArgs` asks Hydra for a pattern of its own.
pub fn rank_tags(app: &App) -> TagForms {
    let hydra = matches!(
        app.mpi.implementation,
        MpiImplementation::Mpich | MpiImplementation::Intel
    );
    match app.mpi.launcher {
        // Elastic mode is horovodrun's Gloo driver, whatever the MPI.
        Launcher::Horovodrun if app.elastic.is_some() => TagForms::HOROVODRUN_ELASTIC,
        Launcher::Horovodrun if hydra => TagForms::HOROVODRUN_HYDRA,
        Launcher::Horovodrun => TagForms::HOROVODRUN,
        Launcher::Mpirun if !hydra => TagForms::OPEN_MPI,
        Launcher::Mpirun if extra_has(app, &["-prepend-pattern", "--prepend-pattern"]) => {
            TagForms::NONE
        }
        Launcher::Mpirun => TagForms::HYDRA,
    }
}

/// The MPI launch command line: `mpirun ...` or `horovodrun ...` followed by the app's
/// command and args. `hostfile` is passed explicitly when the backend provides one itself.
pub fn launch_argv(run: &Run, hostfile: Option<&str>) -> Vec<String> {
    let app = run.app;
    let np = app.workers * app.slots_per_worker;
    let mut argv: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| argv.extend(xs.iter().map(|s| s.to_string()));
    let env = env_pairs(run);
    match (app.mpi.launcher, app.mpi.implementation) {
        (Launcher::Horovodrun, _) => {
            push(&["horovodrun", "-np", &np.to_string()]);
            match &app.elastic {
                Some(e) => {
                    let (min, max) = (
                        e.min_workers * app.slots_per_worker,
                        e.max_workers * app.slots_per_worker,
                    );
                    push(&["--min-np", &min.to_string(), "--max-np", &max.to_string()]);
                    push(&["--slots-per-host", &app.slots_per_worker.to_string()]);
                    push(&["--host-discovery-script", DISCOVER_HOSTS]);
                }
                None => {
                    if let Some(h) = hostfile {
                        push(&["--hostfile", h]);
                    }
                }
            }
            if let Some(port) = launcher_ssh_port(run)
                && !extra_has(app, &["--ssh-port", "-p"])
            {
                push(&["--ssh-port", &port.to_string()]);
            }
        }
        (Launcher::Mpirun, MpiImplementation::OpenMpi) => {
            push(&["mpirun"]);
            if app.runs_as_root() {
                push(&["--allow-run-as-root"]);
            }
            push(&["-np", &np.to_string()]);
            if let Some(h) = hostfile {
                push(&["--hostfile", h]);
            }
            // Every rank's line marked with its rank, for `hvdctl logs` (see rank_tags).
            if !extra_has(app, &["--tag-output", "-tag-output"]) {
                push(&["--tag-output"]);
            }
            // hvdctl's defaults, each unless `mpi.extraArgs` says otherwise (Open MPI refuses
            // a mapping or binding given twice).
            let extra = &app.mpi.extra_args;
            let given = |opt: &str| {
                extra
                    .iter()
                    .any(|a| a.trim_start_matches('-') == opt.trim_start_matches('-'))
            };
            let mca_given = |param: &str| {
                extra
                    .windows(2)
                    .any(|w| matches!(w[0].as_str(), "-mca" | "--mca") && w[1] == param)
            };
            if !given("bind-to") {
                push(&["-bind-to", "none"]);
            }
            if !given("map-by") {
                push(&["-map-by", "slot"]);
            }
            if !mca_given("pml") {
                push(&["-mca", "pml", "ob1"]);
            }
            if !mca_given("btl") {
                push(&["-mca", "btl", "^openib"]);
            }
            // Under an operator nobody writes an ssh_config: the port goes to Open MPI's ssh
            // (with the MPI Operator's own ConnectionAttempts, which this replaces). hvdctl's
            // launcher.sh writes `Port` into the ssh_config on the other backends.
            if let (Some(port), Launch::Operator { .. }) =
                (launcher_ssh_port(run), run.backend.launch())
                && !mca_given("plm_rsh_args")
            {
                push(&[
                    "-mca",
                    "plm_rsh_args",
                    &format!("-o ConnectionAttempts=10 -p {port}"),
                ]);
            }
            // Ranks started over ssh do not inherit the pod's environment: forward it.
            for k in env.keys() {
                push(&["-x", k]);
            }
            for k in ["PATH", "LD_LIBRARY_PATH"] {
                if !env.contains_key(k) {
                    push(&["-x", k]);
                }
            }
        }
        (Launcher::Mpirun, MpiImplementation::Intel | MpiImplementation::Mpich) => {
            // Hydra (Intel MPI, MPICH).
            push(&[
                "mpirun",
                "-n",
                &np.to_string(),
                "-ppn",
                &app.slots_per_worker.to_string(),
            ]);
            if let Some(h) = hostfile {
                push(&["-f", h]);
            }
            if rank_tags(app) == TagForms::HYDRA
                && !extra_has(app, &["-prepend-rank", "--prepend-rank", "-l"])
            {
                push(&["-prepend-rank"]);
            }
            if !env.is_empty() {
                let names: Vec<&str> = env.keys().map(String::as_str).collect();
                push(&["-genvlist", &names.join(",")]);
            }
        }
    }
    argv.extend(app.mpi.extra_args.iter().cloned());
    argv.extend(app.command.iter().cloned());
    argv.extend(app.args.iter().cloned());
    argv
}

fn resources(spec: &crate::app::spec::ResourceSpec, gpus: u32) -> Value {
    let mut out = Map::new();
    if !spec.requests.is_empty() {
        out.insert("requests".into(), json!(spec.requests));
    }
    let mut limits = spec.limits.clone();
    if gpus > 0 {
        limits.insert("nvidia.com/gpu".into(), gpus.to_string());
    }
    if !limits.is_empty() {
        out.insert("limits".into(), json!(limits));
    }
    Value::Object(out)
}

fn volumes(app: &App) -> (Vec<Value>, Vec<Value>) {
    let mut vols = Vec::new();
    let mut mounts = Vec::new();
    for v in &app.volumes {
        let mut vol = Map::new();
        vol.insert("name".into(), json!(v.name));
        if let Some(p) = &v.pvc {
            vol.insert(
                "persistentVolumeClaim".into(),
                json!({"claimName": p.claim_name, "readOnly": v.read_only}),
            );
        }
        if let Some(n) = &v.nfs {
            vol.insert(
                "nfs".into(),
                json!({"server": n.server, "path": n.path, "readOnly": v.read_only}),
            );
        }
        if let Some(h) = &v.host_path {
            let mut hp = Map::new();
            hp.insert("path".into(), json!(h.path));
            if let Some(t) = h.kind {
                hp.insert("type".into(), json!(t.as_str()));
            }
            vol.insert("hostPath".into(), Value::Object(hp));
        }
        if let Some(sec) = &v.secret {
            let m = object_source(
                ("secretName", &sec.secret_name),
                &sec.items,
                sec.default_mode,
                sec.optional,
            );
            vol.insert("secret".into(), m);
        }
        if let Some(cm) = &v.config_map {
            let m = object_source(("name", &cm.name), &cm.items, cm.default_mode, cm.optional);
            vol.insert("configMap".into(), m);
        }
        if let Some(ed) = &v.empty_dir {
            let mut m = Map::new();
            if let Some(md) = ed.medium {
                m.insert("medium".into(), json!(md.as_str()));
            }
            if let Some(q) = &ed.size_limit {
                m.insert("sizeLimit".into(), json!(q));
            }
            vol.insert("emptyDir".into(), Value::Object(m));
        }
        vols.push(Value::Object(vol));
        let mut m = json!({"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only});
        if let Some(sp) = &v.sub_path {
            m["subPath"] = json!(sp);
        }
        mounts.push(m);
    }
    for st in &app.storage {
        vols.push(json!({"name": st.name,
            "persistentVolumeClaim": {"claimName": claim_name(app, &st.name)}}));
        mounts.push(json!({"name": st.name, "mountPath": st.mount_path}));
    }
    if let Some(size) = &app.shm {
        vols.push(json!({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}));
        mounts.push(json!({"name": SHM_VOLUME, "mountPath": crate::app::validate::SHM_DIR}));
    }
    (vols, mounts)
}

fn pod_values(app: &App) -> Value {
    let sc = &app.security_context;
    let mut security = Map::new();
    for (k, v) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
        ("fsGroup", sc.fs_group.or(default_fs_group(app))),
    ] {
        if let Some(v) = v {
            security.insert(k.into(), json!(v));
        }
    }
    if let Some(b) = sc.run_as_non_root {
        security.insert("runAsNonRoot".into(), json!(b));
    }
    let tolerations: Vec<Value> = app
        .tolerations
        .iter()
        .map(|t| {
            let mut m = Map::new();
            for (k, v) in [
                ("key", t.key.as_deref()),
                ("operator", t.operator.map(|o| o.as_str())),
                ("value", t.value.as_deref()),
                ("effect", t.effect.map(|e| e.as_str())),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), json!(v));
                }
            }
            if let Some(s) = t.toleration_seconds {
                m.insert("tolerationSeconds".into(), json!(s));
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "labels": app.labels,
        "annotations": app.annotations,
        "nodeSelector": app.node_selector,
        "tolerations": tolerations,
        "securityContext": if security.is_empty() { Value::Null } else { Value::Object(security) },
        "imagePullSecrets": app.image_pull_secrets.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        "serviceAccountName": app.service_account_name,
        "priorityClassName": app.priority_class_name,
        "imagePullPolicy": app.image_pull_policy.map(|p| p.as_str()),
    })
}

/// What this backend cannot do with the app, as an input error (exit 2), before anything is
/// rendered: an ssh port for Hydra's mpirun under an operator (no ssh_config hvdctl writes,
/// no flag hvdctl passes).
pub fn check(run: &Run) -> crate::error::Result<()> {
    let app = run.app;
    if launcher_ssh_port(run).is_some()
        && app.mpi.launcher == Launcher::Mpirun
        && app.mpi.implementation != MpiImplementation::OpenMpi
        && matches!(run.backend.launch(), Launch::Operator { .. })
    {
        return Err(crate::error::Error::input(format!(
            "mpi.sshPort: the {} backend's launcher has no ssh_config hvdctl writes, and hvdctl passes no ssh port to {}'s mpirun (Hydra)",
            run.backend, app.mpi.implementation
        ))
        .hint("use `--backend native` (its launcher writes the port into ssh_config), `mpi.launcher: horovodrun`, or leave mpi.sshPort unset")
        .at_key(&["mpi", "sshPort"]));
    }
    Ok(())
}

/// The name of the claim `storage[]` entry `name` of `app` makes: `<app>-<name>`.
pub fn claim_name(app: &App, name: &str) -> String {
    format!("{}-{name}", app.name)
}

/// A Secret's or ConfigMap's `items` as Kubernetes' `KeyToPath` list.
/// A Secret or ConfigMap volume source: the field naming the object, then what both kinds
/// share (`items`, `defaultMode`, `optional`), each only when set.
fn object_source(
    (key, name): (&str, &str),
    items: &[crate::app::spec::KeyToPath],
    default_mode: Option<crate::app::spec::FileMode>,
    optional: Option<bool>,
) -> Value {
    let mut m = json!({ key: name });
    if !items.is_empty() {
        m["items"] = key_to_paths(items);
    }
    if let Some(mode) = default_mode {
        m["defaultMode"] = json!(mode.0);
    }
    if let Some(o) = optional {
        m["optional"] = json!(o);
    }
    m
}

fn key_to_paths(items: &[crate::app::spec::KeyToPath]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|i| {
                let mut m = json!({"key": i.key, "path": i.path});
                if let Some(mode) = i.mode {
                    m["mode"] = json!(mode.0);
                }
                m
            })
            .collect(),
    )
}

/// Where `shm` mounts its memory volume, and that volume's name.
const SHM_VOLUME: &str = "hvdctl-shm";

/// DNS name of worker `i` of a native run (headless Service `<job>` in the namespace).
pub fn worker_host(run: &Run, i: u32) -> String {
    format!(
        "{}.{}.{}.svc",
        super::native::worker_name(&run.job_name(), i),
        run.job_name(),
        run.namespace
    )
}

/// The hostfile of a run whose workers are named by `host(i)`.
pub fn hostfile(app: &App, host: impl Fn(u32) -> String) -> String {
    // Hydra (MPICH, Intel MPI) reads `host:N`; Open MPI and horovodrun read `host slots=N`.
    let hydra = app.mpi.launcher == Launcher::Mpirun
        && matches!(
            app.mpi.implementation,
            MpiImplementation::Mpich | MpiImplementation::Intel
        );
    (0..app.workers)
        .map(|i| {
            if hydra {
                format!("{}:{}\n", host(i), app.slots_per_worker)
            } else {
                format!("{} slots={}\n", host(i), app.slots_per_worker)
            }
        })
        .collect()
}

/// Where a local run lists its workers for `discover_hosts.sh` (one name a line; `hvdctl
/// scale` rewrites it).
pub const WORKERS_FILE: &str = "/etc/mpi/workers";

/// The part of `discover_hosts.sh` both forms share: the port (worker.sh's rule) and the
/// probe. A worker is ready when its sshd accepts a connection; a name that does not resolve
/// (a pod or container that does not exist) fails at once. The probe's time limit is generous:
/// a live worker that misses one round is taken for removed, and Horovod then stops its ranks.
///
/// The probe reads sshd's banner and sends a client identification before closing: sshd logs
/// that visit (`Connection closed by ... [preauth]`) at INFO, below the workers' `LogLevel
/// ERROR`, where a connection closed before any identification is an error line
/// (`kex_exchange_identification: Connection closed by remote host`) in the worker's log. And
/// horovodrun runs the script every second: a worker that answered is remembered with its
/// address (in `HVDCTL_DISCOVERY_DIR`, on the launcher) and, while its name still resolves to
/// that address, not probed again for `HVDCTL_DISCOVERY_RECHECK` seconds (30). A worker that
/// is gone stops resolving at once; a new one in its place (a new address) is probed. Without
/// `getent` every round probes.
const DISCOVER_PROBE: &str = r#"#!/bin/bash
# Prints the workers that exist and accept ssh now (Horovod elastic host discovery).
if [ "$(id -u)" = 0 ]; then port=${HVDCTL_SSH_PORT:-22}; else port=${HVDCTL_SSH_PORT:-2222}; fi
seen=${HVDCTL_DISCOVERY_DIR:-${TMPDIR:-/tmp}/hvdctl-discovery}
recheck=${HVDCTL_DISCOVERY_RECHECK:-30}
mkdir -p "$seen" 2>/dev/null
probe() {
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
    IFS= read -r banner <&3 && [ "${banner#SSH-}" != "$banner" ] || exit 1
    printf "SSH-2.0-hvdctl-probe\r\n" >&3' "$1" "$port" 2>/dev/null
}
ready() {
  command -v getent >/dev/null || { probe "$1"; return; }
  local addr now was at
  addr=$(getent hosts "$1") || return 1
  addr=${addr%%[[:space:]]*}
  now=$(date +%s)
  read -r was at 2>/dev/null < "$seen/$1"
  if [ "$was" = "$addr" ] && [ $((now - ${at:-0})) -lt "$recheck" ]; then return 0; fi
  probe "$1" || return 1
  echo "$addr $now" > "$seen/$1" 2>/dev/null
  return 0
}
"#;

/// `discover_hosts.sh` for elastic runs on Kubernetes: probes workers 0 to maxWorkers - 1 by
/// name (`hvdctl scale` adds and removes pods within those) and prints those that are ready.
pub fn discover_hosts(app: &App, host: impl Fn(u32) -> String) -> String {
    let n = app
        .elastic
        .as_ref()
        .map_or(app.workers, |e| e.max_workers.max(app.workers));
    let hosts: Vec<String> = (0..n).map(host).collect();
    format!(
        "{DISCOVER_PROBE}for h in {}; do\n  if ready \"$h\"; then echo \"$h\"; fi\ndone\nexit 0\n",
        hosts.join(" ")
    )
}

/// `discover_hosts.sh` of a local run: probes the workers named in [`WORKERS_FILE`].
pub fn discover_hosts_listed() -> String {
    format!(
        "{DISCOVER_PROBE}while read -r h; do\n  if [ -n \"$h\" ] && ready \"$h\"; then echo \"$h\"; fi\ndone < {WORKERS_FILE}\nexit 0\n"
    )
}

/// The port the workers' sshd listens on: `mpi.sshPort`, else worker.sh's rule (22 as root,
/// 2222 otherwise).
pub fn ssh_port(app: &App) -> u16 {
    app.mpi
        .ssh_port
        .unwrap_or(if app.runs_as_root() { 22 } else { 2222 })
}

/// The port the launcher's ssh must be told: `mpi.sshPort`, and under an operator also a
/// non-root run's 2222 (hvdctl's launcher.sh writes it into ssh_config on the other backends;
/// nobody does under an operator).
fn launcher_ssh_port(run: &Run) -> Option<u16> {
    match run.backend.launch() {
        Launch::Operator { .. } => Some(ssh_port(run.app)).filter(|p| *p != 22),
        Launch::Scripts => run.app.mpi.ssh_port,
    }
}

/// The workers' command under an operator (its pods expect sshd in the foreground): one line
/// saying sshd starts, then sshd logging errors only. As root, the image's sshd on
/// [`ssh_port`]; as another user, which cannot use the image's host keys nor a port below
/// 1024, sshd with a host key and configuration of its own in /tmp, on [`ssh_port`] (2222
/// unless `mpi.sshPort`), accepting the run's key where the operator mounts it. If sshd
/// ends, the worker says how (sshd itself may exit without a word).
pub fn operator_worker_command(app: &App) -> Vec<String> {
    let port = ssh_port(app);
    let script = if app.runs_as_root() {
        format!(
            "echo 'hvdctl: starting sshd (it logs errors only)'; exec /usr/sbin/sshd -De -o LogLevel=ERROR -p {port}"
        )
    } else {
        let keys = format!("{}/authorized_keys", app.ssh_auth_mount_path());
        format!(
            r#"echo 'hvdctl: starting sshd on port {port} as '"$(id -un 2>/dev/null || id -u)"' (it logs errors only)'
d=/tmp/hvdctl-sshd-$(id -u)
mkdir -p "$d" && chmod 700 "$d" && ssh-keygen -q -t ed25519 -N '' -f "$d/host_ed25519" </dev/null >/dev/null || {{ echo "hvdctl: cannot make sshd's host key in $d" >&2; exit 1; }}
printf '%s
' 'Port {port}' "HostKey $d/host_ed25519" 'AuthorizedKeysFile {keys}' "PidFile $d/sshd.pid" 'StrictModes no' 'UsePAM no' 'PasswordAuthentication no' 'KbdInteractiveAuthentication no' 'PubkeyAuthentication yes' 'LogLevel ERROR' > "$d/sshd_config"
/usr/sbin/sshd -De -f "$d/sshd_config"
rc=$?
echo "hvdctl: sshd exited with code $rc" >&2
exit $rc"#
        )
    };
    vec!["/bin/sh".into(), "-c".into(), script]
}

/// The `fsGroup` a non-root run gets when it names none: its `runAsGroup`, else its
/// `runAsUser`, so the volumes Kubernetes makes (the ssh key Secret, emptyDirs, claims) are
/// readable and writable by the user the containers run as. None when the run is root or
/// names an `fsGroup`.
pub fn default_fs_group(app: &App) -> Option<i64> {
    let sc = &app.security_context;
    if sc.fs_group.is_some() || app.runs_as_root() {
        return None;
    }
    sc.run_as_group.or(sc.run_as_user)
}

/// The environment hvdctl's launcher/worker scripts read (native and local backends).
/// `cleanPodPolicy: None` keeps the workers up after the command (to look at them); with
/// `Running` and `All` they stop when it ends.
pub fn launcher_env(app: &App) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("HVDCTL_SSH_DIR", SSH_DIR.to_string()),
        ("HVDCTL_HOSTFILE", HOSTFILE.to_string()),
        (
            "HVDCTL_SSHD_TIMEOUT",
            app.mpi.sshd_timeout_seconds.to_string(),
        ),
    ];
    if let Some(port) = app.mpi.ssh_port {
        env.push(("HVDCTL_SSH_PORT", port.to_string()));
    }
    if app.run_policy.clean_pod_policy == CleanPodPolicy::None {
        env.push(("HVDCTL_KEEP_WORKERS", "1".into()));
    }
    if app.warm {
        env.push(("HVDCTL_DEV", "1".into()));
    }
    env
}

/// The operator launcher's command in warm mode (`hvdctl dev`): what launcher.sh does with
/// `HVDCTL_DEV=1` after its ssh setup (the operator did that here) — say where HOME is, then
/// hold until terminated. The launch command runs per attempt through exec (attempt.sh).
const WARM_HOLD: &str = "mkdir -p /tmp/hvdctl-dev && printf '%s\\n' \"$HOME\" > /tmp/hvdctl-dev/held; \
echo 'hvdctl: warm mode: the launcher holds; hvdctl dev runs each attempt'; \
trap 'exit 143' TERM INT; while :; do sleep 3600 & wait $!; done";

/// All values for the manifest template of `run`. Without `ssh` (dry run) the key is redacted.
pub fn values(run: &Run, ssh: Option<&SshKeys>) -> Value {
    let app = run.app;
    let job = run.job_name();
    let env: Vec<Value> = env_pairs(run)
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let (vols, mounts) = volumes(app);
    let mut v = json!({
        "job": {"name": job, "namespace": run.namespace, "runId": run.run_id},
        "app": {"name": app.name},
        "image": run.image,
        "workers": app.workers,
        "slotsPerWorker": app.slots_per_worker,
        "gpusPerWorker": app.gpus_per_worker,
        "np": app.workers * app.slots_per_worker,
        "mpiImplementation": app.mpi.implementation.as_str(),
        "sshAuthMountPath": app.ssh_auth_mount_path(),
        "ssh": {"port": ssh_port(app)},
        "warm": app.warm,
        "runPolicy": {
            "cleanPodPolicy": app.run_policy.clean_pod_policy.as_str(),
            "backoffLimit": app.run_policy.backoff_limit,
            "ttlSecondsAfterFinished": app.run_policy.ttl_seconds_after_finished,
            "activeDeadlineSeconds": app.run_policy.active_deadline_seconds,
        },
        "env": env,
        "volumes": vols,
        "volumeMounts": mounts,
        "pod": pod_values(app),
        "parameters": app.parameters,
        "launcher": {"resources": resources(&app.resources.launcher, 0)},
        "worker": {"resources": resources(&app.resources.worker, app.gpus_per_worker)},
    });
    // Drop null run-policy fields so `{{json runPolicy}}` holds only what is set.
    if let Some(rp) = v["runPolicy"].as_object_mut() {
        rp.retain(|_, x| !x.is_null());
    }
    match run.backend.launch() {
        Launch::Operator {
            hostfile,
            worker_command,
        } => {
            // The operator writes the hostfile at the same path; horovodrun must be told it
            // (mpirun also finds it through the operator's environment). mpirun forwards
            // LD_LIBRARY_PATH (-x), so it is defined (empty when the image sets none) for
            // Open MPI not to warn: the one step launcher.sh does on the other backends.
            let mut cmd: Vec<String> = [
                "/bin/sh",
                "-c",
                "export LD_LIBRARY_PATH=\"${LD_LIBRARY_PATH:-}\"; exec \"$@\"",
                "launch",
            ]
            .map(String::from)
            .to_vec();
            cmd.extend(launch_argv(run, Some(hostfile)));
            let worker_command = match worker_command {
                Some(c) => c.iter().map(|s| s.to_string()).collect(),
                None => operator_worker_command(app),
            };
            if app.warm {
                cmd = ["/bin/sh", "-c", WARM_HOLD].map(String::from).to_vec();
            }
            v["launcher"]["command"] = json!(cmd);
            v["worker"]["command"] = json!(worker_command);
        }
        Launch::Scripts => {
            let launcher_sh = format!("{SCRIPTS_DIR}/launcher.sh");
            let mut cmd = vec!["/bin/bash".to_string(), launcher_sh];
            cmd.extend(launch_argv(run, Some(HOSTFILE)));
            v["launcher"]["command"] = json!(cmd);
            v["worker"]["command"] = json!(["/bin/bash", format!("{SCRIPTS_DIR}/worker.sh")]);
            v["env"].as_array_mut().expect("env is a list").extend(
                launcher_env(app)
                    .into_iter()
                    .map(|(name, value)| json!({"name": name, "value": value})),
            );
            let config = format!("{job}-config");
            let secret = format!("{job}-ssh");
            let mut native_vols = v["volumes"].as_array().cloned().unwrap_or_default();
            native_vols.extend([
                json!({"name": "hvdctl-ssh", "secret": {"secretName": secret, "defaultMode": 0o400}}),
                json!({"name": "hvdctl-mpi", "configMap": {"name": config, "defaultMode": 0o755,
                    "items": [{"key": "hostfile", "path": "hostfile"}, {"key": "discover_hosts.sh", "path": "discover_hosts.sh"}]}}),
                json!({"name": "hvdctl-scripts", "configMap": {"name": config, "defaultMode": 0o755,
                    "items": [{"key": "launcher.sh", "path": "launcher.sh"}, {"key": "worker.sh", "path": "worker.sh"}]}}),
            ]);
            let mut native_mounts = v["volumeMounts"].as_array().cloned().unwrap_or_default();
            native_mounts.extend([
                json!({"name": "hvdctl-ssh", "mountPath": SSH_DIR, "readOnly": true}),
                json!({"name": "hvdctl-mpi", "mountPath": MPI_DIR, "readOnly": true}),
                json!({"name": "hvdctl-scripts", "mountPath": format!("{SCRIPTS_DIR}/launcher.sh"), "subPath": "launcher.sh", "readOnly": true}),
                json!({"name": "hvdctl-scripts", "mountPath": format!("{SCRIPTS_DIR}/worker.sh"), "subPath": "worker.sh", "readOnly": true}),
            ]);
            let (private, public) = match ssh {
                Some(k) => (k.private_openssh().to_string(), k.public.clone()),
                None => (REDACTED.to_string(), REDACTED.to_string()),
            };
            v["native"] = json!({
                "workerSelector": {LABEL_RUN: run.run_id, LABEL_ROLE: crate::types::ROLE_WORKER},
                "sshSecretName": secret,
                "configMapName": config,
                "launcherName": format!("{job}-launcher"),
                "hostfile": hostfile(app, |i| worker_host(run, i)),
                "discoverHosts": discover_hosts(app, |i| worker_host(run, i)),
                "launcherScript": assets::script("launcher.sh"),
                "workerScript": assets::script("worker.sh"),
                "ssh": {"privateKey": private, "publicKey": public},
                "workerName": format!("{job}-worker"),
                "volumes": native_vols,
                "volumeMounts": native_mounts,
            });
        }
    }
    if let crate::backend::Backend::Kubernetes(kb) = run.backend {
        let own = kb.template_values(run, &v);
        if !own.is_null() {
            v[kb.name()] = own;
        }
    }
    v
}

#[cfg(test)]
mod launch_tests {
    use super::*;
    use crate::backend::Backend;

    fn app(yaml: &str) -> App {
        crate::app::load::from_text(
            &format!("name: t\nimage: i:1\ncommand: [python3, x.py]\nworkers: 2\nslotsPerWorker: 2\n{yaml}"),
            "hvdctl.yaml",
            &[],
        )
        .unwrap()
    }

    fn argv(app: &App, backend: &str) -> Vec<String> {
        let v = run_values(app, backend);
        serde_json::from_value(v["launcher"]["command"].clone()).unwrap()
    }

    fn run_values(app: &App, backend: &str) -> Value {
        let run = Run {
            app,
            backend: backend.parse::<Backend>().unwrap(),
            run_id: "r1".into(),
            namespace: "ns".into(),
            image: "i:1".into(),
        };
        values(&run, None)
    }

    #[test]
    fn pod_options_reach_the_values_of_every_backend() {
        let a = app(
            "imagePullPolicy: Never\nshm: 2Gi\nstorage: [{name: data, size: 1Gi, mountPath: /data}]\nvolumes:\n- {name: creds, mountPath: /creds, secret: {secretName: aws, defaultMode: 0400, items: [{key: k, path: k.txt, mode: 0o600}], optional: true}}\n- {name: cfg, mountPath: /cfg, configMap: {name: settings, defaultMode: 256}}\n- {name: tmp, mountPath: /scratch, emptyDir: {medium: Memory, sizeLimit: 1Gi}}\n",
        );
        for backend in ["mpijob", "native"] {
            let v = run_values(&a, backend);
            assert_eq!(v["pod"]["imagePullPolicy"], "Never");
            let vols = v["volumes"].as_array().unwrap();
            let vol = |n: &str| vols.iter().find(|x| x["name"] == n).unwrap().clone();
            assert_eq!(
                vol("creds")["secret"],
                json!({"secretName": "aws", "defaultMode": 0o400, "optional": true,
                    "items": [{"key": "k", "path": "k.txt", "mode": 0o600}]})
            );
            assert_eq!(
                vol("cfg")["configMap"],
                json!({"name": "settings", "defaultMode": 256})
            );
            assert_eq!(
                vol("tmp")["emptyDir"],
                json!({"medium": "Memory", "sizeLimit": "1Gi"})
            );
            assert_eq!(
                vol("hvdctl-shm")["emptyDir"],
                json!({"medium": "Memory", "sizeLimit": "2Gi"})
            );
            assert_eq!(vol("data")["persistentVolumeClaim"]["claimName"], "t-data");
            let mounts = v["volumeMounts"].as_array().unwrap();
            assert!(mounts.contains(&json!({"name": "hvdctl-shm", "mountPath": "/dev/shm"})));
            assert!(mounts.contains(&json!({"name": "data", "mountPath": "/data"})));
        }
        // Unset: no policy, no shm volume.
        let v = run_values(&app(""), "native");
        assert!(v["pod"]["imagePullPolicy"].is_null());
        assert!(
            !v["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == "hvdctl-shm")
        );
    }

    #[test]
    fn non_root_without_fs_group_gets_its_group() {
        let fs = |yaml: &str| {
            run_values(&app(yaml), "native")["pod"]["securityContext"]["fsGroup"].clone()
        };
        assert_eq!(
            fs("securityContext: {runAsUser: 1000, runAsGroup: 1001}"),
            json!(1001)
        );
        assert_eq!(fs("securityContext: {runAsUser: 1000}"), json!(1000));
        assert_eq!(
            fs("securityContext: {runAsUser: 1000, runAsGroup: 1001, fsGroup: 5}"),
            json!(5)
        );
        assert!(fs("securityContext: {runAsGroup: 1001}").is_null());
        assert!(fs("").is_null());
    }

    #[test]
    fn the_ssh_port_reaches_sshd_and_ssh_on_every_backend_and_launcher() {
        let v = run_values(&app("mpi: {sshPort: 2200}"), "mpijob");
        let worker: Vec<String> = serde_json::from_value(v["worker"]["command"].clone()).unwrap();
        assert!(worker.last().unwrap().ends_with("-p 2200"), "{worker:?}");
        let a = argv(&app("mpi: {sshPort: 2200}"), "mpijob");
        assert!(
            a.windows(3)
                .any(|w| w == ["-mca", "plm_rsh_args", "-o ConnectionAttempts=10 -p 2200"]),
            "{a:?}"
        );
        let a = argv(&app("mpi: {sshPort: 2200, launcher: horovodrun}"), "mpijob");
        assert!(a.windows(2).any(|w| w == ["--ssh-port", "2200"]), "{a:?}");
        // hvdctl's scripts read the port from the environment (sshd -p, ssh_config's Port).
        let a = app("mpi: {sshPort: 2200}");
        assert!(launcher_env(&a).contains(&("HVDCTL_SSH_PORT", "2200".into())));
        for b in ["native", "local"] {
            assert!(!argv(&a, b).iter().any(|x| x == "plm_rsh_args"), "{b}");
        }
        // Hydra's mpirun under the operator has no way to the port: refused.
        let hydra = app("mpi: {sshPort: 2200, implementation: MPICH}");
        let run = |backend: &str| Run {
            app: &hydra,
            backend: backend.parse::<Backend>().unwrap(),
            run_id: "r1".into(),
            namespace: "ns".into(),
            image: "i:1".into(),
        };
        assert_eq!(check(&run("mpijob")).unwrap_err().exit_code(), 2);
        assert!(check(&run("native")).is_ok());
        assert_eq!(ssh_port(&app("mpi: {sshPort: 2200}")), 2200);
        assert_eq!(ssh_port(&app("")), 22);
    }

    #[test]
    fn hostfile_forms_follow_the_mpi() {
        let host = |i| format!("w-{i}");
        assert_eq!(hostfile(&app(""), host), "w-0 slots=2\nw-1 slots=2\n");
        let mpich = app("mpi: {implementation: MPICH}");
        assert_eq!(hostfile(&mpich, host), "w-0:2\nw-1:2\n");
        let intel = app("mpi: {implementation: Intel}");
        assert_eq!(hostfile(&intel, host), "w-0:2\nw-1:2\n");
        // horovodrun reads `host slots=N` whatever the MPI.
        let hvd = app("mpi: {implementation: MPICH, launcher: horovodrun}");
        assert_eq!(hostfile(&hvd, host), "w-0 slots=2\nw-1 slots=2\n");
    }

    #[test]
    fn horovodrun_under_the_operator_gets_the_hostfile() {
        let a = argv(&app("mpi: {launcher: horovodrun}"), "mpijob");
        let at = a.iter().position(|x| x == "horovodrun").unwrap();
        assert_eq!(
            a[at..at + 5],
            ["horovodrun", "-np", "4", "--hostfile", HOSTFILE]
        );
    }

    #[test]
    fn ld_library_path_is_defined_before_mpirun_under_the_operator() {
        let a = argv(&app(""), "mpijob");
        assert_eq!(a[0..2], ["/bin/sh", "-c"]);
        assert!(a[2].contains("export LD_LIBRARY_PATH=\"${LD_LIBRARY_PATH:-}\""));
        assert_eq!(a[4], "mpirun");
        assert!(a.windows(2).any(|w| w == ["-x", "LD_LIBRARY_PATH"]));
    }

    #[test]
    fn extra_args_override_the_defaults() {
        let a = argv(
            &app("mpi: {extraArgs: [--map-by, ppr:1:node, --bind-to, core, -mca, btl, tcp,self]}"),
            "native",
        );
        let count = |x: &str| a.iter().filter(|y| y.trim_start_matches('-') == x).count();
        assert_eq!(count("map-by"), 1, "{a:?}");
        assert_eq!(count("bind-to"), 1, "{a:?}");
        assert!(!a.iter().any(|x| x == "^openib"), "{a:?}");
        assert!(a.windows(3).any(|w| w == ["-mca", "pml", "ob1"]), "{a:?}");
        let d = argv(&app(""), "native");
        assert!(d.windows(2).any(|w| w == ["-map-by", "slot"]), "{d:?}");
    }

    #[test]
    fn ranks_are_tagged_once_in_the_form_of_the_mpi() {
        let count = |a: &[String], x: &str| a.iter().filter(|y| *y == x).count();
        let a = argv(&app(""), "native");
        assert_eq!(count(&a, "--tag-output"), 1, "{a:?}");
        assert!(a.iter().position(|x| x == "--tag-output") < a.iter().position(|x| x == "python3"));
        assert_eq!(rank_tags(&app("")), TagForms::OPEN_MPI);
        let a = argv(&app("mpi: {extraArgs: [-tag-output]}"), "mpijob");
        assert_eq!(
            count(&a, "--tag-output") + count(&a, "-tag-output"),
            1,
            "{a:?}"
        );

        let mpich = app("mpi: {implementation: MPICH}");
        let a = argv(&mpich, "native");
        assert_eq!(count(&a, "-prepend-rank"), 1, "{a:?}");
        assert_eq!(count(&a, "--tag-output"), 0, "{a:?}");
        assert_eq!(rank_tags(&mpich), TagForms::HYDRA);
        let a = argv(
            &app("mpi: {implementation: Intel, extraArgs: [-l]}"),
            "native",
        );
        assert_eq!(count(&a, "-prepend-rank"), 0, "{a:?}");
        // A pattern of the user's own: nothing added, nothing read.
        let own = app("mpi: {implementation: MPICH, extraArgs: [-prepend-pattern, '%r: ']}");
        assert_eq!(count(&argv(&own, "native"), "-prepend-rank"), 0);
        assert_eq!(rank_tags(&own), TagForms::NONE);

        // horovodrun tags by itself (mpirun --tag-output, mpirun -l, or Gloo's own).
        let hvd = app("mpi: {launcher: horovodrun}");
        let a = argv(&hvd, "native");
        assert!(
            !a.iter()
                .any(|x| x.contains("tag-output") || x == "-prepend-rank"),
            "{a:?}"
        );
        assert_eq!(rank_tags(&hvd), TagForms::HOROVODRUN);
        let hvd = app("mpi: {launcher: horovodrun, implementation: MPICH}");
        assert_eq!(rank_tags(&hvd), TagForms::HOROVODRUN_HYDRA);
        // Elastic: Gloo tags holding each process's start rank, whatever the MPI.
        for mpi in ["", ", implementation: MPICH"] {
            let e = app(&format!(
                "elastic: {{minWorkers: 1, maxWorkers: 3}}\nmpi: {{launcher: horovodrun{mpi}}}"
            ));
            assert_eq!(rank_tags(&e), TagForms::HOROVODRUN_ELASTIC);
            assert_eq!(rank_tags(&e).label(), Some("horovodrun-elastic"));
        }
    }

    #[test]
    fn discovery_probes_the_workers_up_to_the_maximum() {
        let a = app("elastic: {minWorkers: 1, maxWorkers: 3}\nmpi: {launcher: horovodrun}");
        let s = discover_hosts(&a, |i| format!("w-{i}"));
        assert!(s.contains("for h in w-0 w-1 w-2; do"), "{s}");
        assert!(!s.contains("w-3"), "{s}");
        assert!(s.contains("if ready \"$h\"; then echo \"$h\"; fi"), "{s}");
        let l = discover_hosts_listed();
        assert!(l.contains(&format!("done < {WORKERS_FILE}")), "{l}");
    }

    #[test]
    fn discovery_lists_only_the_workers_that_exist_and_answer() {
        // Run the script: a name that does not resolve, a port nobody listens on and a port
        // that answers without sshd's banner are left out; one that answers as sshd does (its
        // banner, then it reads the client's identification) is printed.
        use std::io::{Read, Write};
        let serve = |banner: bool| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let port = listener.local_addr().ok()?.port();
            std::thread::spawn(move || {
                for mut conn in listener.incoming().map_while(Result::ok) {
                    if banner {
                        let _ = conn.write_all(b"SSH-2.0-OpenSSH_test\r\n");
                        let _ = conn.read_to_end(&mut Vec::new());
                    }
                }
            });
            Some(port)
        };
        let sshd = serve(true).expect("a loopback port");
        let other = serve(false).expect("a loopback port");
        let nobody = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
            l.local_addr().unwrap().port()
        };
        let dir = tempfile::tempdir().unwrap();
        let script = discover_hosts_listed()
            .replace(WORKERS_FILE, &dir.path().join("w").display().to_string());
        std::fs::write(dir.path().join("w"), "127.0.0.1\nno-such-host.invalid\n\n").unwrap();
        std::fs::write(dir.path().join("d.sh"), script).unwrap();
        let run = |port: u16, seen: &str, recheck: &str| {
            let out = std::process::Command::new("bash")
                .arg(dir.path().join("d.sh"))
                .env("HVDCTL_SSH_PORT", port.to_string())
                .env("HVDCTL_DISCOVERY_DIR", dir.path().join(seen))
                .env("HVDCTL_DISCOVERY_RECHECK", recheck)
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert_eq!(run(sshd, "a", "30"), "127.0.0.1\n");
        let remembered = std::fs::read_to_string(dir.path().join("a/127.0.0.1")).unwrap();
        assert!(remembered.starts_with("127.0.0.1 "), "{remembered}");
        // Nobody listens: probed, left out. Not sshd: left out.
        assert_eq!(run(nobody, "b", "30"), "");
        assert_eq!(run(other, "c", "30"), "");
        // Answered less than `recheck` seconds ago at the same address: not probed again.
        assert_eq!(run(nobody, "a", "30"), "127.0.0.1\n");
        // Past `recheck`: probed again, left out.
        assert_eq!(run(nobody, "a", "0"), "");
    }

    #[test]
    fn clean_pod_policy_none_keeps_the_workers() {
        let keep = |yaml: &str| {
            launcher_env(&app(yaml))
                .iter()
                .any(|(k, v)| *k == "HVDCTL_KEEP_WORKERS" && v == "1")
        };
        assert!(keep("runPolicy: {cleanPodPolicy: None}"));
        assert!(!keep("runPolicy: {cleanPodPolicy: Running}"));
        assert!(!keep("runPolicy: {cleanPodPolicy: All}"));
    }
}
