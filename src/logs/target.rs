//! Identity: which container of which pod (or which Docker container) a stream reads, what it
//! is in the run (role, worker index, which rank tags its lines carry), and the short stable
//! name its lines are prefixed with (`launcher`, `worker-3`, `worker-3/sidecar`), coloured by a
//! stable hash. This is the one model of a log line's origin, whatever the engine: text
//! prefixes and the keys of `-o json` lines come from it, and a launcher line's rank from its
//! tag read in the forms the target names ([`super::rank`]).

use super::rank::TagForms;
use crate::types::Identity;
use k8s_openapi::api::core::v1::Pod;

/// Where a target's container runs: the one engine type.
pub use crate::types::EngineKind as Engine;

/// One container of one pod (or one Docker container of a local run): what a tail reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub engine: Engine,
    /// The pod's name; for Docker, the container's name (`<job>-worker-3`).
    pub pod: String,
    /// The pod's uid; for Docker, the container's id.
    pub uid: String,
    /// The container's name in its pod; for Docker, the role (one container per "pod").
    pub container: String,
    /// `launcher`, `worker`, or "" for pods without the role label.
    pub role: String,
    /// The worker's index (read from the pod's labels as its backend says); None for the
    /// launcher.
    pub index: Option<u32>,
    /// The rank tags this container's lines carry: the launcher's, as its
    /// [`LABEL_RANK_TAGS`](super::rank::LABEL_RANK_TAGS) label says (every rank's output goes
    /// through the launcher; a line's rank is read from its tag).
    pub ranks: TagForms,
    /// Short name shown before each line.
    pub prefix: String,
}

impl Target {
    /// The key that tells two targets apart (a pod re-created under the same name is new).
    pub fn key(&self) -> (String, String) {
        (self.uid.clone(), self.container.clone())
    }

    /// ANSI SGR colour code of the prefix: a stable hash of the prefix (same name, same colour).
    pub fn color(&self) -> u8 {
        const PALETTE: [u8; 6] = [31, 32, 33, 34, 35, 36];
        // FNV-1a: stable across runs and platforms (unlike `std`'s RandomState hasher).
        let mut h: u32 = 0x811c_9dc5;
        for b in self.prefix.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        PALETTE[(h % PALETTE.len() as u32) as usize]
    }
}

/// The short name of a pod within its run: `launcher`, `worker-<i>` (role and index from
/// its labels, as `id` says), else the pod name without the `<job>-` prefix.
/// `launcher_taken` says another launcher pod already uses `launcher` (a restarted launcher
/// pod is then `launcher-<suffix>`).
pub fn pod_short_name(job: &str, pod: &Pod, id: Identity, launcher_taken: bool) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let rest = name
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix('-'))
        .unwrap_or(name);
    let role = id.role(pod.metadata.labels.as_ref());
    if role.is_launcher() {
        if !launcher_taken {
            return "launcher".into();
        }
        if rest.starts_with("launcher") {
            return rest.to_string();
        }
        return format!("launcher-{rest}");
    }
    if let Some(i) = role.index {
        return format!("worker-{i}");
    }
    rest.to_string()
}

/// The targets of a pod: one per container (after the `--container` filter), prefixed
/// `short` or `short/container` when the pod has several containers; role and index from
/// its labels, as `id` says.
pub fn targets_of(pod: &Pod, id: Identity, short: &str, container: Option<&str>) -> Vec<Target> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let containers: Vec<&str> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let several = containers.len() > 1;
    let role = id.role(pod.metadata.labels.as_ref());
    let ranks = TagForms::of_labels(&role.role, |k| {
        pod.metadata.labels.as_ref()?.get(k).map(String::as_str)
    });
    containers
        .into_iter()
        .filter(|c| container.is_none_or(|want| want == *c))
        .map(|c| Target {
            engine: Engine::Kubernetes,
            pod: name.clone(),
            uid: uid.clone(),
            container: c.to_string(),
            role: role.role.clone(),
            index: role.index,
            ranks,
            prefix: if several {
                format!("{short}/{c}")
            } else {
                short.to_string()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod named `name`; a worker's index label is its name's last number (as native's).
    fn pod(name: &str, role: &str, containers: &[&str]) -> Pod {
        let cs: Vec<_> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "i"}))
            .collect();
        let mut labels = json!({"hvdctl.io/role": role});
        if let (true, Some((_, i))) = (role == "worker", name.rsplit_once('-')) {
            labels["hvdctl.io/index"] = json!(i);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"containers": cs},
        }))
        .unwrap()
    }

    #[test]
    fn short_names() {
        assert_eq!(
            pod_short_name(
                "mnist-ab1",
                &pod("mnist-ab1-launcher-x7k2p", "launcher", &["l"]),
                Identity::HVDCTL,
                false
            ),
            "launcher"
        );
        assert_eq!(
            pod_short_name(
                "mnist-ab1",
                &pod("mnist-ab1-launcher-q9z8w", "launcher", &["l"]),
                Identity::HVDCTL,
                true
            ),
            "launcher-q9z8w"
        );
        assert_eq!(
            pod_short_name(
                "mnist-ab1",
                &pod("mnist-ab1-worker-12", "worker", &["w"]),
                Identity::HVDCTL,
                false
            ),
            "worker-12"
        );
        assert_eq!(
            pod_short_name(
                "mnist-ab1",
                &pod("mnist-ab1-extra", "", &["w"]),
                Identity::HVDCTL,
                false
            ),
            "extra"
        );
        assert_eq!(
            pod_short_name(
                "mnist-ab1",
                &pod("other", "", &["w"]),
                Identity::HVDCTL,
                false
            ),
            "other"
        );
    }

    #[test]
    fn the_index_is_the_labels_not_the_names() {
        let mut p = pod("j-worker-5", "worker", &["w"]);
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("hvdctl.io/index");
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("jobset.sigs.k8s.io/job-index".into(), "2".into());
        let jobset = Identity {
            role_label: "hvdctl.io/role",
            index_label: "jobset.sigs.k8s.io/job-index",
            index_offset: 0,
            worker_value: crate::types::ROLE_WORKER,
        };
        assert_eq!(pod_short_name("j", &p, jobset, false), "worker-2");
        assert_eq!(targets_of(&p, jobset, "worker-2", None)[0].index, Some(2));
        // Without its backend's label a worker has no index, whatever its name says.
        assert_eq!(targets_of(&p, Identity::HVDCTL, "w", None)[0].index, None);
        assert_eq!(pod_short_name("j", &p, Identity::HVDCTL, false), "worker-5");
    }

    #[test]
    fn container_suffix_only_when_several() {
        let p = pod("j-worker-3", "worker", &["worker", "sidecar"]);
        let t = targets_of(&p, Identity::HVDCTL, "worker-3", None);
        assert_eq!(
            t.iter().map(|t| t.prefix.as_str()).collect::<Vec<_>>(),
            ["worker-3/worker", "worker-3/sidecar"]
        );
        let t = targets_of(&p, Identity::HVDCTL, "worker-3", Some("sidecar"));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].prefix, "worker-3/sidecar");
        let one = targets_of(
            &pod("j-worker-3", "worker", &["worker"]),
            Identity::HVDCTL,
            "worker-3",
            None,
        );
        assert_eq!(one[0].prefix, "worker-3");
        assert_eq!(one[0].role, "worker");
        assert_eq!(one[0].index, Some(3));
        assert_eq!(one[0].engine, Engine::Kubernetes);
        let l = targets_of(
            &pod("j-launcher-abc", "launcher", &["l"]),
            Identity::HVDCTL,
            "launcher",
            None,
        );
        assert_eq!((l[0].index, l[0].ranks), (None, TagForms::NONE));
        let mut tagged = pod("j-launcher-abc", "launcher", &["l"]);
        let labels = tagged.metadata.labels.as_mut().unwrap();
        labels.insert(
            super::super::rank::LABEL_RANK_TAGS.into(),
            "open-mpi".into(),
        );
        let l = targets_of(&tagged, Identity::HVDCTL, "launcher", None);
        assert_eq!(l[0].ranks, TagForms::OPEN_MPI);
    }

    #[test]
    fn colour_is_stable_and_spread() {
        let t = |p: &str| Target {
            engine: Engine::Kubernetes,
            pod: String::new(),
            uid: String::new(),
            container: String::new(),
            role: String::new(),
            index: None,
            ranks: TagForms::NONE,
            prefix: p.into(),
        };
        assert_eq!(t("worker-3").color(), t("worker-3").color());
        let colours: std::collections::BTreeSet<u8> =
            (0..16).map(|i| t(&format!("worker-{i}")).color()).collect();
        assert!(colours.len() >= 4, "{colours:?}");
    }
}
