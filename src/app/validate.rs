//! Value checks on a typed [`App`]: names, counts, quantities, policies, volumes. Each problem
//! carries the path of the offending key so the loader can say `file:line:col`.

use super::apirules;
use super::spec::{App, Launcher, TaintEffect, TolerationOperator};
use crate::yaml::{Path, Seg};
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// One thing wrong with an app.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub path: Path,
    pub message: String,
    /// What to do next (a likely typo), when there is something to say.
    pub hint: Option<String>,
}

/// Length of a run id (`<app>-<run id>` is the job name).
pub const RUN_ID_LEN: usize = 5;
/// Kubernetes label (and DNS label) limit.
pub const MAX_LABEL: usize = 63;

static DNS1123_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").unwrap());
static DNS1035_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z]([-a-z0-9]*[a-z0-9])?$").unwrap());
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap()
});
static QUALIFIED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap());
static LABEL_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").unwrap());
static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$").unwrap());
static PARAM_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][-A-Za-z0-9_.]*$").unwrap());

pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= MAX_LABEL && DNS1123_LABEL.is_match(s)
}
pub fn is_dns1035_label(s: &str) -> bool {
    s.len() <= MAX_LABEL && DNS1035_LABEL.is_match(s)
}
/// Whether `name` is spelled as an app name (lowercase letters, digits, `-`, starting with a
/// letter), whatever its length: [`name_too_long`] says that part.
pub fn is_app_name_spelling(name: &str) -> bool {
    DNS1035_LABEL.is_match(name)
}

/// Why `name` is too long for any app (`None` when it fits a run of one worker).
pub fn name_too_long(name: &str) -> Option<String> {
    let most = max_name_len(0);
    (name.len() > most).then(|| {
        format!(
            "{} characters is too long: an app name is at most {most} (pod names `<app>-<run id>-worker-<i>` must fit in 63)",
            name.len()
        )
    })
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && DNS1123_SUBDOMAIN.is_match(s)
}
/// A Kubernetes quantity such as `500m`, `4Gi`, `1.5`, `2e3`: read as the API server reads
/// it ([`quantity::Quantity`]), not negative, and with a digit (the API server reads a bare
/// `+` or `.` as zero; hvdctl takes that for a slip).
pub fn is_quantity(s: &str) -> bool {
    quantity::Quantity::parse(s).is_ok_and(|q| !q.is_negative())
        && s.bytes().any(|c| c.is_ascii_digit())
}
pub fn is_image_ref(s: &str) -> bool {
    crate::image::reference::ImageRef::parse(s).is_ok()
}

/// `prefix/name` label or annotation key.
fn key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns1123_subdomain(p)
    {
        return Some(format!(
            "the prefix `{p}` of `{key}` must be a DNS subdomain (lowercase, dots)"
        ));
    }
    if name.is_empty() || name.len() > MAX_LABEL || !QUALIFIED_NAME.is_match(name) {
        return Some(format!(
            "`{key}` is not a valid key: the name part must be 1-63 characters of letters, digits, `-`, `_`, `.`, starting and ending alphanumeric"
        ));
    }
    None
}

/// A pod's environment variable name for a free parameter (`batch-size` → `BATCH_SIZE`).
pub fn param_env_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Longest app name such that every object name of the largest run fits 63 characters.
pub fn max_name_len(max_worker_index: u32) -> usize {
    // "<name>-<run id>-worker-<index>"
    MAX_LABEL.saturating_sub(1 + RUN_ID_LEN + "-worker-".len() + max_worker_index.to_string().len())
}

/// The bounds of a whole-number key (least, most), for messages about numbers its type
/// cannot even hold (`workers: -3`); [`check`] enforces the same bounds on the rest.
pub fn int_bounds(path: &Path) -> (Option<i64>, Option<i64>) {
    match path.to_string().as_str() {
        "workers" => (Some(1), Some(MAX_WORKERS)),
        "slotsPerWorker"
        | "mpi.sshdTimeoutSeconds"
        | "elastic.minWorkers"
        | "elastic.maxWorkers"
        | "recorder.maxMB"
        | "runPolicy.activeDeadlineSeconds"
        | "scheduling.volcano.minAvailable" => (Some(1), None),
        "gpusPerWorker" => (Some(0), Some(MAX_GPUS)),
        "mpi.sshPort" => (Some(1), Some(65_535)),
        "securityContext.runAsUser" | "securityContext.runAsGroup" | "securityContext.fsGroup" => {
            (Some(0), Some(2_147_483_647))
        }
        _ => (None, None),
    }
}

const MAX_WORKERS: i64 = 10_000;
const MAX_GPUS: i64 = 64;

/// Whether `s` can name a queue: a DNS subdomain that is also a label value (at most 63).
fn is_queue_name(s: &str) -> bool {
    s.len() <= MAX_LABEL && is_dns1123_subdomain(s)
}

/// `queue` (a Kueue LocalQueue) and `scheduling.volcano`. Both at once is refused: a run
/// waits in one queue system, and with both Kueue would hold the job suspended while
/// Volcano's PodGroup (made only for a running MPIJob or TrainJob) waits for pods that
/// do not exist yet — two admissions, two sets of messages, one answer to "why is it
/// waiting" lost.
fn queues(c: &mut Checker, app: &App) {
    if let Some(q) = &app.queue {
        if q.is_empty() {
            c.at(
                &["queue"],
                "must not be empty: name a Kueue LocalQueue, or remove the key",
            );
        } else if !is_queue_name(q) {
            c.at(
                &["queue"],
                format!("`{q}` is not a valid LocalQueue name (at most 63 lowercase letters, digits, `-` and `.`, starting and ending alphanumeric)"),
            );
        }
    }
    let Some(v) = &app.scheduling.volcano else {
        return;
    };
    if app.queue.is_some() {
        c.with_hint(
            Path(vec![Seg::Key("scheduling".into()), Seg::Key("volcano".into())]),
            "cannot be used together with `queue`: a run waits in one queue system (Kueue admits the job by quota, Volcano schedules its pods as a gang), and hvdctl reports one",
            Some("keep `queue` for Kueue or `scheduling.volcano` for Volcano, not both".into()),
        );
    }
    if let Some(q) = &v.queue {
        if q.is_empty() {
            c.at(
                &["scheduling", "volcano", "queue"],
                "must not be empty (Volcano refuses an empty queue name); remove it for Volcano's `default` queue",
            );
        } else if !is_queue_name(q) {
            c.at(
                &["scheduling", "volcano", "queue"],
                format!("`{q}` is not a valid Volcano queue name (at most 63 lowercase letters, digits, `-` and `.`, starting and ending alphanumeric)"),
            );
        }
    }
    if let Some(m) = v.min_available {
        let pods = app.workers + 1;
        if m == 0 {
            c.at(
                &["scheduling", "volcano", "minAvailable"],
                "must be at least 1",
            );
        } else if m > pods {
            c.at(
                &["scheduling", "volcano", "minAvailable"],
                format!("{m} is more than the run's {pods} pods ({} workers and the launcher): the gang could never be complete", app.workers),
            );
        }
    }
    if let Some(p) = &v.priority_class
        && !is_dns1123_subdomain(p)
    {
        c.at(
            &["scheduling", "volcano", "priorityClass"],
            format!(
                "`{p}` is not a valid PriorityClass name (lowercase letters, digits, `-`, `.`)"
            ),
        );
    }
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn at(&mut self, path: &[&str], message: impl Into<String>) {
        self.at_path(
            Path(path.iter().map(|s| Seg::Key(s.to_string())).collect()),
            message,
        );
    }
    fn at_path(&mut self, path: Path, message: impl Into<String>) {
        self.problems.push(Problem {
            path,
            message: message.into(),
            hint: None,
        });
    }
    fn with_hint(&mut self, path: Path, message: impl Into<String>, hint: Option<String>) {
        self.problems.push(Problem {
            path,
            message: message.into(),
            hint,
        });
    }
    fn string_map(&mut self, field: &str, map: &BTreeMap<String, String>, label_values: bool) {
        for (k, v) in map {
            let path = Path(vec![Seg::Key(field.into()), Seg::Key(k.clone())]);
            if let Some(p) = key_problem(k) {
                self.at_path(path.clone(), p);
            }
            if label_values && (v.len() > MAX_LABEL || !LABEL_VALUE.is_match(v)) {
                self.at_path(path, format!("`{v}` is not a valid label value (at most 63 letters, digits, `-`, `_`, `.`, starting and ending alphanumeric)"));
            }
        }
    }
}

/// The highest worker index a run of `app` can have (elastic runs grow to `maxWorkers`).
pub fn max_worker_index(app: &App) -> u32 {
    let max_workers = app
        .elastic
        .as_ref()
        .map_or(app.workers, |e| e.max_workers.max(app.workers));
    max_workers.saturating_sub(1)
}

/// `name` too long for its pod names, given the longest app name the backend's pod names
/// allow (`limit`, from the backend: the app does not know its backend's naming).
pub fn name_length_problem(app: &App, limit: usize) -> Option<Problem> {
    (DNS1035_LABEL.is_match(&app.name) && app.name.len() > limit).then(|| Problem {
        path: Path(vec![Seg::Key("name".into())]),
        message: format!(
            "`{}` is {} characters; with the run id and `-worker-{}` pod names it must be at most {limit}",
            app.name,
            app.name.len(),
            max_worker_index(app)
        ),
        hint: None,
    })
}

/// All problems of an app, in file order of the keys (roughly).
pub fn check(app: &App) -> Vec<Problem> {
    let mut c = Checker {
        problems: Vec::new(),
    };

    if !DNS1035_LABEL.is_match(&app.name) {
        c.at(&["name"], format!("`{}` is not a valid app name: use lowercase letters, digits and `-`, starting with a letter and ending alphanumeric (e.g. `mnist-demo`)", app.name));
    }
    if app.image.is_empty() || !is_image_ref(&app.image) {
        c.at(&["image"], format!("`{}` is not a valid image reference (e.g. `registry.example.com/team/mnist` or `mnist:1.0`; repository paths are lowercase)", app.image));
    }
    if let Some(ns) = &app.namespace
        && !is_dns1123_label(ns)
    {
        c.at(
            &["namespace"],
            format!(
                "`{ns}` is not a valid namespace name (lowercase letters, digits, `-`; at most 63)"
            ),
        );
    }
    if app.workers == 0 {
        c.at(&["workers"], "must be at least 1");
    }
    if i64::from(app.workers) > MAX_WORKERS {
        c.at(&["workers"], format!("must be at most {MAX_WORKERS}"));
    }
    if app.slots_per_worker == 0 {
        c.at(&["slotsPerWorker"], "must be at least 1");
    }
    if i64::from(app.gpus_per_worker) > MAX_GPUS {
        c.at(&["gpusPerWorker"], format!("must be at most {MAX_GPUS}"));
    }
    if app.command.is_empty() || app.command[0].trim().is_empty() {
        c.at(
            &["command"],
            "must name the program every rank runs, e.g. [python3, /app/train.py]",
        );
    }

    if app.mpi.sshd_timeout_seconds == 0 {
        c.at(&["mpi", "sshdTimeoutSeconds"], "must be at least 1");
    }

    if let Some(p) = &app.mpi.ssh_auth_mount_path {
        use crate::types::{MPI_DIR, SCRIPTS_DIR};
        if !p.starts_with('/') {
            c.at(
                &["mpi", "sshAuthMountPath"],
                format!("`{p}` must be an absolute path"),
            );
        } else if let Some((own, what)) = [
            (MPI_DIR, "hostfile and discover_hosts.sh"),
            (SCRIPTS_DIR, "launcher/worker scripts and ssh keys"),
        ]
        .into_iter()
        .find(|(own, _)| within(p, own))
        {
            c.at(
                &["mpi", "sshAuthMountPath"],
                format!("`{p}` clashes with hvdctl's own mount at {own} ({what}); mount the keys elsewhere"),
            );
        }
    }

    let rp = &app.run_policy;
    if rp.backoff_limit.is_some_and(|b| b < 0) {
        c.at(&["runPolicy", "backoffLimit"], "must be 0 or more");
    }
    if rp.ttl_seconds_after_finished.is_some_and(|t| t < 0) {
        c.at(
            &["runPolicy", "ttlSecondsAfterFinished"],
            "must be 0 or more",
        );
    }
    if rp.active_deadline_seconds.is_some_and(|t| t < 1) {
        c.at(
            &["runPolicy", "activeDeadlineSeconds"],
            "must be at least 1",
        );
    }

    for (role, spec) in [
        ("launcher", &app.resources.launcher),
        ("worker", &app.resources.worker),
    ] {
        let named_and_sized = c.problems.len();
        for (kind, map) in [("requests", &spec.requests), ("limits", &spec.limits)] {
            for (res, q) in map {
                let path = Path(vec![
                    Seg::Key("resources".into()),
                    Seg::Key(role.into()),
                    Seg::Key(kind.into()),
                    Seg::Key(res.clone()),
                ]);
                if let Some(p) = key_problem(res) {
                    c.at_path(path.clone(), p);
                } else if let Some((p, hint)) = resource_name_problem(res) {
                    c.with_hint(path.clone(), p, hint);
                }
                if !is_quantity(q) {
                    c.at_path(
                        path,
                        format!(
                            "`{q}` is not a Kubernetes quantity (e.g. `500m`, `2`, `4Gi`, `1.5G`)"
                        ),
                    );
                }
            }
        }
        // What the API server refuses of the pair (a request above its limit, hugepages or an
        // extended resource requested unlike its limit, a fraction of an extended resource,
        // hugepages without cpu or memory): at the key it is about, once every name and
        // quantity is right.
        let pairs = if c.problems.len() == named_and_sized {
            apirules::resource_requirements(&spec.requests, &spec.limits)
        } else {
            Vec::new()
        };
        for r in pairs {
            let mut segs = vec![Seg::Key("resources".into()), Seg::Key(role.into())];
            if let Some((list, name)) = r.key {
                segs.extend([Seg::Key(list.into()), Seg::Key(name)]);
            }
            c.at_path(
                Path(segs),
                format!("the API server would refuse it: {}", r.message),
            );
        }
        if role == "worker"
            && app.gpus_per_worker > 0
            && spec
                .limits
                .get("nvidia.com/gpu")
                .is_some_and(|g| g != &app.gpus_per_worker.to_string())
        {
            c.at(
                &["resources", "worker", "limits", "nvidia.com/gpu"],
                "conflicts with gpusPerWorker; set only gpusPerWorker",
            );
        }
    }

    c.string_map("nodeSelector", &app.node_selector, true);
    for (i, t) in app.tolerations.iter().enumerate() {
        let p = |f: &str| {
            Path(vec![
                Seg::Key("tolerations".into()),
                Seg::Index(i),
                Seg::Key(f.into()),
            ])
        };
        let op = t.operator.unwrap_or(TolerationOperator::Equal);
        if op == TolerationOperator::Exists && t.value.as_deref().is_some_and(|v| !v.is_empty()) {
            c.at_path(p("value"), "must be empty when operator is Exists");
        }
        if t.key.as_deref().unwrap_or("").is_empty() && op != TolerationOperator::Exists {
            c.at_path(p("operator"), "must be Exists when key is empty");
        }
        if let Some(k) = t.key.as_deref().filter(|k| !k.is_empty())
            && let Some(prob) = key_problem(k)
        {
            c.at_path(p("key"), prob);
        }
        if op == TolerationOperator::Equal
            && let Some(why) = t.value.as_deref().and_then(apirules::toleration_value)
        {
            c.at_path(
                p("value"),
                format!("is not a label value, which the API server requires: {why}"),
            );
        }
        if t.toleration_seconds.is_some() && t.effect != Some(TaintEffect::NoExecute) {
            c.at_path(p("tolerationSeconds"), "only applies with effect NoExecute");
        }
    }

    let reserved = reserved_mounts(app);
    let mut names = BTreeSet::new();
    let mut mounts = BTreeSet::new();
    for (i, v) in app.volumes.iter().enumerate() {
        let p = |f: &str| {
            Path(vec![
                Seg::Key("volumes".into()),
                Seg::Index(i),
                Seg::Key(f.into()),
            ])
        };
        if !is_dns1123_label(&v.name) {
            c.at_path(
                p("name"),
                format!(
                    "`{}` is not a valid volume name (lowercase letters, digits, `-`)",
                    v.name
                ),
            );
        } else if v.name.starts_with("hvdctl-") {
            c.at_path(
                p("name"),
                "names starting with `hvdctl-` are reserved for hvdctl's own volumes",
            );
        } else if !names.insert(v.name.clone()) {
            c.at_path(p("name"), format!("`{}` is used by another volume", v.name));
        }
        if !v.mount_path.starts_with('/') {
            c.at_path(
                p("mountPath"),
                format!("`{}` must be an absolute path", v.mount_path),
            );
        } else if let Some((own, what)) =
            reserved.iter().find(|(own, _)| within(&v.mount_path, own))
        {
            c.at_path(
                p("mountPath"),
                format!(
                    "`{}` clashes with hvdctl's own mount at {own} ({what}); mount the volume elsewhere",
                    v.mount_path
                ),
            );
        } else if !mounts.insert(normalize(&v.mount_path)) {
            c.at_path(
                p("mountPath"),
                format!("`{}` is mounted by another volume", v.mount_path),
            );
        }
        if v.sub_path
            .as_deref()
            .is_some_and(|s| s.starts_with('/') || s.split('/').any(|x| x == ".."))
        {
            c.at_path(p("subPath"), "must be a relative path without `..`");
        }
        let sources = v.sources();
        if sources.len() != 1 {
            let found = if sources.is_empty() {
                "none".to_string()
            } else {
                sources.join(", ")
            };
            c.at_path(
                Path(vec![Seg::Key("volumes".into()), Seg::Index(i)]),
                format!(
                    "volume `{}` needs exactly one of pvc, nfs, hostPath, secret, configMap, emptyDir (found {found})",
                    v.name
                ),
            );
        }
        // Problems of a source's key are reported at that key, so a `--set` that wrote it
        // is named rather than the file line of the source.
        let q = |a: &str, b: &str| {
            Path(vec![
                Seg::Key("volumes".into()),
                Seg::Index(i),
                Seg::Key(a.into()),
                Seg::Key(b.into()),
            ])
        };
        if let Some(pvc) = &v.pvc
            && !is_dns1123_subdomain(&pvc.claim_name)
        {
            c.at_path(
                q("pvc", "claimName"),
                format!("`{}` is not a valid PVC name", pvc.claim_name),
            );
        }
        if let Some(nfs) = &v.nfs {
            if nfs.server.trim().is_empty() {
                c.at_path(q("nfs", "server"), "must not be empty");
            }
            if !nfs.path.starts_with('/') {
                c.at_path(
                    q("nfs", "path"),
                    format!("`{}` must be an absolute path", nfs.path),
                );
            }
        }
        if let Some(hp) = &v.host_path {
            if !hp.path.starts_with('/') {
                c.at_path(
                    q("hostPath", "path"),
                    format!("`{}` must be an absolute path", hp.path),
                );
            } else if has_backstep(&hp.path) {
                c.at_path(
                    q("hostPath", "path"),
                    format!(
                        "`{}` must not contain `..` (the API server refuses it); name the directory itself",
                        hp.path
                    ),
                );
            }
        }
        let projected = v
            .secret
            .as_ref()
            .map(|s| ("secret", "secretName", &s.secret_name, &s.items))
            .or(v
                .config_map
                .as_ref()
                .map(|m| ("configMap", "name", &m.name, &m.items)));
        if let Some((source, key, name, items)) = projected {
            if !is_dns1123_subdomain(name) {
                c.at_path(
                    q(source, key),
                    format!("`{name}` is not a valid {source} name (lowercase letters, digits, `-`, `.`)"),
                );
            }
            for (j, item) in items.iter().enumerate() {
                let at = |f: &str| {
                    Path(vec![
                        Seg::Key("volumes".into()),
                        Seg::Index(i),
                        Seg::Key(source.into()),
                        Seg::Key("items".into()),
                        Seg::Index(j),
                        Seg::Key(f.into()),
                    ])
                };
                if item.key.is_empty() {
                    c.at_path(at("key"), "must not be empty");
                }
                if item.path.is_empty()
                    || item.path.starts_with('/')
                    || item.path.split('/').any(|x| x == "..")
                {
                    c.at_path(
                        at("path"),
                        format!("`{}` must be a relative path without `..`", item.path),
                    );
                }
            }
        }
        if let Some(ed) = &v.empty_dir
            && let Some(q_) = &ed.size_limit
            && !is_quantity(q_)
        {
            c.at_path(
                q("emptyDir", "sizeLimit"),
                format!("`{q_}` is not a Kubernetes quantity (e.g. 1Gi, 500Mi)"),
            );
        }
    }

    if let Some(shm) = &app.shm
        && !is_quantity(shm)
    {
        c.at(
            &["shm"],
            format!("`{shm}` is not a Kubernetes quantity (e.g. 2Gi, 512Mi)"),
        );
    }
    if app.shm.is_some()
        && let Some(i) = app
            .volumes
            .iter()
            .position(|v| within(&v.mount_path, SHM_DIR) || within(SHM_DIR, &v.mount_path))
    {
        c.at_path(
            Path(vec![
                Seg::Key("volumes".into()),
                Seg::Index(i),
                Seg::Key("mountPath".into()),
            ]),
            format!("clashes with `shm`, which mounts {SHM_DIR}; give the size in `shm` alone"),
        );
    }
    if app.mpi.ssh_port == Some(0) {
        c.at(&["mpi", "sshPort"], "must be between 1 and 65535");
    }

    let mut claims = BTreeSet::new();
    for (i, st) in app.storage.iter().enumerate() {
        let p = |f: &str| {
            Path(vec![
                Seg::Key("storage".into()),
                Seg::Index(i),
                Seg::Key(f.into()),
            ])
        };
        if !is_dns1123_label(&st.name) {
            c.at_path(
                p("name"),
                format!(
                    "`{}` is not a valid storage name (lowercase letters, digits, `-`)",
                    st.name
                ),
            );
        } else if !claims.insert(st.name.clone()) {
            c.at_path(p("name"), format!("`{}` is used by another claim", st.name));
        } else if names.contains(&st.name) || st.name.starts_with("hvdctl-") {
            c.at_path(
                p("name"),
                format!(
                    "`{}` is the name of a volume (or reserved); storage and volumes share names",
                    st.name
                ),
            );
        } else if app.name.len() + 1 + st.name.len() > 253 {
            c.at_path(
                p("name"),
                "the claim name `<app>-<name>` is over 253 characters",
            );
        }
        if !is_quantity(&st.size) {
            c.at_path(
                p("size"),
                format!("`{}` is not a Kubernetes quantity (e.g. 10Gi)", st.size),
            );
        }
        if st
            .storage_class
            .as_deref()
            .is_some_and(|s| !is_dns1123_subdomain(s))
        {
            c.at_path(p("storageClass"), "is not a valid StorageClass name");
        }
        if st.access_modes.is_empty() {
            c.at_path(p("accessModes"), "must name at least one access mode");
        }
        let modes: Vec<&str> = st.access_modes.iter().map(|m| m.as_str()).collect();
        for (field, why) in apirules::claim(&st.size, &modes) {
            let at = if field == "accessModes" {
                "accessModes"
            } else {
                "size"
            };
            c.at_path(
                p(at),
                format!("the API server would refuse the claim: {why}"),
            );
        }
        if !st.mount_path.starts_with('/') {
            c.at_path(
                p("mountPath"),
                format!("`{}` must be an absolute path", st.mount_path),
            );
        } else if let Some((own, what)) =
            reserved.iter().find(|(own, _)| within(&st.mount_path, own))
        {
            c.at_path(
                p("mountPath"),
                format!(
                    "`{}` clashes with hvdctl's own mount at {own} ({what}); mount the claim elsewhere",
                    st.mount_path
                ),
            );
        } else if !mounts.insert(normalize(&st.mount_path)) {
            c.at_path(
                p("mountPath"),
                format!("`{}` is mounted by another volume", st.mount_path),
            );
        }
    }

    let sc = &app.security_context;
    for (f, v) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
        ("fsGroup", sc.fs_group),
    ] {
        if v.is_some_and(|v| !(0..=2_147_483_647).contains(&v)) {
            c.at(&["securityContext", f], "must be between 0 and 2147483647");
        }
    }
    if sc.run_as_non_root == Some(true) && sc.run_as_user == Some(0) {
        c.at(
            &["securityContext", "runAsNonRoot"],
            "contradicts runAsUser: 0",
        );
    }

    c.string_map("labels", &app.labels, true);
    for k in app.labels.keys() {
        if k.starts_with("hvdctl.io/")
            || k == "app.kubernetes.io/managed-by"
            || k.starts_with("training.kubeflow.org/")
        {
            c.at_path(
                Path(vec![Seg::Key("labels".into()), Seg::Key(k.clone())]),
                format!("`{k}` is set by hvdctl or the operator and cannot be overridden"),
            );
        }
    }
    c.string_map("annotations", &app.annotations, false);
    if let Some(total) = apirules::annotations_too_long(&app.annotations) {
        c.at(
            &["annotations"],
            format!(
                "{total} bytes together: the API server takes at most {} bytes of annotations on a pod (metadata.annotations: Too long)",
                apirules::ANNOTATIONS_MAX_BYTES
            ),
        );
    }
    for (i, s) in app.image_pull_secrets.iter().enumerate() {
        if !is_dns1123_subdomain(s) {
            c.at_path(
                Path(vec![Seg::Key("imagePullSecrets".into()), Seg::Index(i)]),
                format!("`{s}` is not a valid Secret name"),
            );
        }
    }
    for (field, v) in [
        ("serviceAccountName", &app.service_account_name),
        ("priorityClassName", &app.priority_class_name),
    ] {
        if let Some(v) = v
            && !is_dns1123_subdomain(v)
        {
            c.at(
                &[field],
                format!("`{v}` is not a valid name (lowercase letters, digits, `-`, `.`)"),
            );
        }
    }
    for k in app.env.keys() {
        let path = Path(vec![Seg::Key("env".into()), Seg::Key(k.clone())]);
        if !ENV_NAME.is_match(k) {
            c.at_path(path, format!("`{k}` is not a valid environment variable name (letters, digits, `_`, `-`, `.`; not starting with a digit)"));
        } else if k.starts_with(RESERVED_ENV) && !TUNABLE_ENV.contains(&k.as_str()) {
            c.at_path(
                path,
                format!("`{k}` is reserved: hvdctl sets the {RESERVED_ENV}* variables itself"),
            );
        }
    }
    // A NUL cannot be in an argv or an environment: the container would never start.
    let nul = "contains a NUL character (`\\0`): no process can be given it (argv and environment strings end at a NUL)";
    for (field, items) in [("command", &app.command), ("args", &app.args)] {
        for (i, v) in items.iter().enumerate() {
            if v.contains('\0') {
                c.at_path(Path(vec![Seg::Key(field.into()), Seg::Index(i)]), nul);
            }
        }
    }
    for (i, v) in app.mpi.extra_args.iter().enumerate() {
        if v.contains('\0') {
            c.at_path(
                Path(vec![
                    Seg::Key("mpi".into()),
                    Seg::Key("extraArgs".into()),
                    Seg::Index(i),
                ]),
                nul,
            );
        }
    }
    for (field, map) in [("env", &app.env), ("parameters", &app.parameters)] {
        for (k, v) in map {
            if v.contains('\0') || k.contains('\0') {
                c.at_path(Path(vec![Seg::Key(field.into()), Seg::Key(k.clone())]), nul);
            }
        }
    }
    // Two values that become one variable: the later would drop the earlier without a word.
    let tensorboard = app
        .tensorboard
        .as_ref()
        .map(|_| crate::types::TENSORBOARD_LOG_DIR);
    if let Some(v) = tensorboard
        && app.env.contains_key(v)
    {
        c.at_path(
            Path(vec![Seg::Key("env".into()), Seg::Key(v.into())]),
            format!(
                "`{v}` is also set by `tensorboard.logDir`, which gives every rank {v}; keep one"
            ),
        );
    }
    if app.timeline.is_some()
        && let Some(v) = timeline_env_clash(app)
    {
        c.at_path(
            Path(vec![Seg::Key("env".into()), Seg::Key(v.into())]),
            format!("`{v}` is set by `timeline`; keep one"),
        );
    }
    let mut param_vars: BTreeMap<String, &str> = BTreeMap::new();
    for k in app.parameters.keys() {
        let var = param_env_name(k);
        let path = Path(vec![Seg::Key("parameters".into()), Seg::Key(k.clone())]);
        if let Some(first) = param_vars.get(&var) {
            c.at_path(
                path.clone(),
                format!("its environment variable `{var}` is also the one of parameters.{first}; keep one"),
            );
        } else if tensorboard == Some(var.as_str()) {
            c.at_path(
                path.clone(),
                format!(
                    "its environment variable `{var}` is also set by `tensorboard.logDir`; keep one"
                ),
            );
        }
        param_vars.entry(var).or_insert(k.as_str());
    }
    for k in app.parameters.keys() {
        let path = Path(vec![Seg::Key("parameters".into()), Seg::Key(k.clone())]);
        if !PARAM_NAME.is_match(k) {
            c.at_path(path, format!("`{k}` is not a valid parameter name (a letter or `_`, then letters, digits, `_`, `-`, `.`)"));
        } else if param_env_name(k).starts_with(RESERVED_ENV) {
            c.at_path(
                path,
                format!(
                    "its environment variable `{}` is reserved: hvdctl sets the {RESERVED_ENV}* variables itself",
                    param_env_name(k)
                ),
            );
        } else if app.env.contains_key(&param_env_name(k)) {
            c.at_path(
                path,
                format!(
                    "its environment variable `{}` is also set in env; keep one",
                    param_env_name(k)
                ),
            );
        }
    }

    if let Some(e) = &app.elastic {
        if e.min_workers == 0 {
            c.at(&["elastic", "minWorkers"], "must be at least 1");
        }
        if e.min_workers > e.max_workers {
            c.at(
                &["elastic", "maxWorkers"],
                format!("must be at least minWorkers ({})", e.min_workers),
            );
        }
        if app.workers < e.min_workers || app.workers > e.max_workers {
            c.at(
                &["workers"],
                format!(
                    "must be between elastic.minWorkers ({}) and elastic.maxWorkers ({})",
                    e.min_workers, e.max_workers
                ),
            );
        }
        if app.mpi.launcher != Launcher::Horovodrun {
            c.at(&["mpi", "launcher"], "elastic runs need `horovodrun` (it re-discovers hosts); set mpi.launcher: horovodrun");
        }
    }

    if let Some(r) = &app.trainjob.runtime
        && !is_dns1123_subdomain(r)
    {
        c.at(
            &["trainjob", "runtime"],
            format!("`{r}` is not a valid runtime name (lowercase letters, digits, '-' and '.')"),
        );
    }

    queues(&mut c, app);

    if let Some(tb) = &app.tensorboard
        && !tb.log_dir.starts_with('/')
    {
        c.at(
            &["tensorboard", "logDir"],
            format!(
                "`{}` must be an absolute path in the container, e.g. /tmp/tensorboard",
                tb.log_dir
            ),
        );
    }

    if app.recorder.max_mb == 0 {
        c.at(
            &["recorder", "maxMB"],
            "must be at least 1 (MiB of recorded logs per run)",
        );
    }

    if !app.dev.sync_to.starts_with('/') {
        c.at(
            &["dev", "syncTo"],
            format!(
                "`{}` must be an absolute path in the container, e.g. /app",
                app.dev.sync_to
            ),
        );
    }

    if app.build.dockerfile.trim().is_empty() {
        c.at(&["build", "dockerfile"], "must not be empty");
    }
    if app.build.context.trim().is_empty() {
        c.at(
            &["build", "context"],
            "must not be empty (use `.` for the app directory)",
        );
    }
    for k in app.build.args.keys() {
        if !ENV_NAME.is_match(k) {
            c.at_path(
                Path(vec![
                    Seg::Key("build".into()),
                    Seg::Key("args".into()),
                    Seg::Key(k.clone()),
                ]),
                format!("`{k}` is not a valid build argument name"),
            );
        }
    }
    c.problems
}

/// The prefix of the environment variables hvdctl gives every container.
/// The first of the variables `timeline` sets that the app's `env` sets too.
pub fn timeline_env_clash(app: &App) -> Option<&'static str> {
    crate::types::TIMELINE_ENV
        .into_iter()
        .find(|v| app.env.contains_key(*v))
}

pub const RESERVED_ENV: &str = "HVDCTL_";
/// The `HVDCTL_*` variables hvdctl's scripts read but never set: the user's to tune.
const TUNABLE_ENV: &[&str] = &["HVDCTL_DISCOVERY_RECHECK"];

/// Resource names Kubernetes knows without a domain.
const STANDARD_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// Why `name` is not a resource a container can request (`cpuu`), with a likely spelling.
/// Kubernetes takes `cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>` and extended
/// resources named by a vendor's domain (`nvidia.com/gpu`); anything else it either rejects
/// or, in some paths, drops.
fn resource_name_problem(name: &str) -> Option<(String, Option<String>)> {
    if STANDARD_RESOURCES.contains(&name) {
        return None;
    }
    if let Some(size) = name.strip_prefix("hugepages-") {
        if is_quantity(size) {
            return None;
        }
        return Some((
            format!("`{name}`: a hugepages resource is `hugepages-<size>`, e.g. `hugepages-2Mi`"),
            None,
        ));
    }
    if let Some((domain, _)) = name.split_once('/') {
        if domain.contains('.') && !domain.ends_with("kubernetes.io") {
            return None;
        }
        return Some((
            format!(
                "`{name}` is not a resource name: an extended resource is named by its vendor's domain, e.g. `nvidia.com/gpu`"
            ),
            None,
        ));
    }
    let known = [STANDARD_RESOURCES, &["nvidia.com/gpu", "hugepages-2Mi"]].concat();
    let hint = crate::text::did_you_mean(name, &known).map(|s| format!("did you mean `{s}`?"));
    Some((
        format!(
            "`{name}` is not a resource name (cpu, memory, ephemeral-storage, hugepages-<size>, or a vendor's such as nvidia.com/gpu)"
        ),
        hint,
    ))
}

/// Where hvdctl (or the MPI Operator) mounts its own files in the pods and containers, with
/// what is there: a user's volume at or under one of them would clash with it.
fn reserved_mounts(app: &App) -> Vec<(String, &'static str)> {
    use crate::types::{MPI_DIR, SCRIPTS_DIR};
    let mut r = vec![
        (MPI_DIR.to_string(), "hostfile and discover_hosts.sh"),
        (
            SCRIPTS_DIR.to_string(),
            "launcher/worker scripts and ssh keys",
        ),
        (
            app.ssh_auth_mount_path(),
            "the ssh keys (mpi.sshAuthMountPath)",
        ),
    ];
    if app.security_context.run_as_user.is_some_and(|u| u != 0) {
        let home = "/home/mpiuser/.ssh".to_string();
        if !r.iter().any(|(p, _)| *p == home) {
            r.push((home, "the non-root user's ssh keys"));
        }
    }
    r
}

/// Where `shm` mounts its memory volume.
pub const SHM_DIR: &str = "/dev/shm";

/// An absolute path as the kernel resolves it, without looking at any file: `//` and `.`
/// dropped, `..` taking the component before it (none above `/`), no trailing `/`.
/// `/data/../etc/mpi`, `//etc/mpi` and `/etc/./mpi/` are all `/etc/mpi`. Paths are compared
/// only in this form.
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether `path` is `dir` or below it (`/etc/mpi/x` is within `/etc/mpi`; `/etc/mpix` is
/// not), both taken in their [`normalize`]d form.
fn within(path: &str, dir: &str) -> bool {
    let p = normalize(path);
    let d = normalize(dir);
    p == d || d == "/" || p.strip_prefix(&d).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a path has a `..` component (the API server refuses one in `hostPath.path`).
fn has_backstep(path: &str) -> bool {
    path.split('/').any(|c| c == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in [
            "1", "500m", "4Gi", "1.5", ".5", "2e3", "1E-3", "+1", "100Ki", "10M",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "", "-1", "1.2.3", "4GB", "abc", "1 Gi", "Gi", "1e", "+", ".",
        ] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn names() {
        assert!(is_dns1035_label("mnist-2"));
        assert!(!is_dns1035_label("2mnist"));
        assert!(!is_dns1035_label("Mnist"));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(key_problem("sidecar.istio.io/inject").is_none());
        assert!(key_problem("bad key").is_some());
        assert!(key_problem("Bad_Prefix/x").is_some());
        assert_eq!(param_env_name("batch-size"), "BATCH_SIZE");
    }

    #[test]
    fn images() {
        for ok in [
            "mnist",
            "example.com/team/mnist:1.0",
            "127.0.0.1:5000/a/b",
            "a@sha256:0123456789abcdef0123456789abcdef",
        ] {
            assert!(is_image_ref(ok), "{ok}");
        }
        for bad in ["", "Mnist", "a b", "a:", "-a", "a//b"] {
            assert!(!is_image_ref(bad), "{bad}");
        }
    }

    #[test]
    fn longest_name_fits_63() {
        let n = max_name_len(999);
        assert_eq!(n + 1 + RUN_ID_LEN + "-worker-999".len(), 63);
    }

    fn app(yaml: &str) -> App {
        crate::app::load::from_text(
            &format!("name: a\nimage: a\ncommand: [x]\n{yaml}"),
            "f",
            &[],
        )
        .unwrap()
    }

    #[test]
    fn resource_names() {
        for ok in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "hugepages-2Mi",
            "hugepages-1Gi",
            "nvidia.com/gpu",
            "example.com/fpga",
        ] {
            assert!(resource_name_problem(ok).is_none(), "{ok}");
        }
        let (msg, hint) = resource_name_problem("cpuu").unwrap();
        assert!(msg.contains("`cpuu` is not a resource name"), "{msg}");
        assert_eq!(hint.as_deref(), Some("did you mean `cpu`?"));
        let (_, hint) = resource_name_problem("memroy").unwrap();
        assert_eq!(hint.as_deref(), Some("did you mean `memory`?"));
        for bad in [
            "gpu",
            "hugepages-",
            "hugepages-big",
            "kubernetes.io/x",
            "vendor/gpu",
        ] {
            assert!(resource_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn hvdctls_mounts_and_variables_are_reserved() {
        assert!(within("/etc/mpi", "/etc/mpi"));
        assert!(within("/etc/mpi/", "/etc/mpi"));
        assert!(within("/etc/mpi/x", "/etc/mpi"));
        assert!(!within("/etc/mpix", "/etc/mpi"));
        assert!(!within("/etc", "/etc/mpi"));
        // Compared as the kernel resolves them, not as text.
        for p in [
            "/data/../etc/mpi",
            "//etc/mpi",
            "/etc/./mpi",
            "/etc//mpi/",
            "/../etc/mpi",
        ] {
            assert_eq!(normalize(p), "/etc/mpi", "{p}");
            assert!(within(p, "/etc/mpi"), "{p}");
        }
        assert!(within("/etc/mpi", "/root/../etc/mpi"));
        assert!(!within("/etc/mpi/../mpix", "/etc/mpi"));
        assert_eq!(normalize("/"), "/");
        assert!(has_backstep("/srv/../etc") && !has_backstep("/srv/..x"));
        let root = reserved_mounts(&app(""));
        let paths: Vec<&str> = root.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/etc/mpi", "/etc/hvdctl", "/root/.ssh"]);
        let user = reserved_mounts(&app(
            "securityContext: {runAsUser: 1000}\nmpi: {sshAuthMountPath: /keys}\n",
        ));
        let paths: Vec<&str> = user.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["/etc/mpi", "/etc/hvdctl", "/keys", "/home/mpiuser/.ssh"]
        );
        let e = crate::app::load::from_text(
            "name: a\nimage: a\ncommand: [x]\nenv: {HVDCTL_RUN: x, HVDCTL: y, HVDCTL_DISCOVERY_RECHECK: '5'}\n",
            "f",
            &[],
        )
        .unwrap_err();
        assert_eq!(e.message.lines().count(), 1, "{}", e.message);
        assert!(
            e.message.contains("`HVDCTL_RUN` is reserved"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bounds_of_whole_numbers() {
        let p = |s: &str| Path(s.split('.').map(|k| Seg::Key(k.into())).collect());
        assert_eq!(int_bounds(&p("workers")), (Some(1), Some(10_000)));
        assert_eq!(int_bounds(&p("gpusPerWorker")), (Some(0), Some(64)));
        assert_eq!(int_bounds(&p("mpi.sshdTimeoutSeconds")), (Some(1), None));
        assert_eq!(int_bounds(&p("env.X")), (None, None));
        assert!(name_too_long(&"a".repeat(48)).is_none());
        assert!(
            name_too_long(&"a".repeat(49))
                .unwrap()
                .starts_with("49 characters")
        );
    }
}
