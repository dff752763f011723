//! Watching: the run's pods, found by its label selector through `kube::runtime::watcher`
//! (which lists, watches, and lists again when the watch expires with 410 Gone), filtered by
//! `--role`/`--pod`/`--container` into targets. A pod seen for the first time — a late worker,
//! an elastic scale-up, a restarted launcher pod — yields new targets; nothing is yielded twice.

use super::target::{Target, pod_short_name, targets_of};
use crate::cluster::status::role_of;
use crate::options::RoleFilter;
use crate::types::Identity;
use futures::Stream;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, HashSet};

/// Which pods and containers to show.
#[derive(Debug, Clone)]
pub struct Filter {
    pub role: RoleFilter,
    pub pod: Option<regex::Regex>,
    pub container: Option<String>,
}

impl Filter {
    pub fn matches(&self, pod: &Pod) -> bool {
        let role_ok = match self.role {
            RoleFilter::All => true,
            RoleFilter::Launcher => role_of(pod) == "launcher",
            RoleFilter::Worker => role_of(pod) == "worker",
        };
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        role_ok && self.pod.as_ref().is_none_or(|re| re.is_match(name))
    }
}

/// The run's pods as seen so far, and the targets already handed out.
pub struct Pods {
    job: String,
    /// Which labels say a pod's role and index (the run's backend's).
    id: Identity,
    filter: Filter,
    /// Latest version of every pod present, by uid.
    pub present: BTreeMap<String, Pod>,
    started: HashSet<(String, String)>,
    launcher_uid: Option<String>,
}

impl Pods {
    pub fn new(job: &str, id: Identity, filter: Filter) -> Pods {
        Pods {
            job: job.to_string(),
            id,
            filter,
            present: BTreeMap::new(),
            started: HashSet::new(),
            launcher_uid: None,
        }
    }

    /// Records a pod (added or changed) and returns its targets not handed out before.
    pub fn update(&mut self, pod: Pod) -> Vec<Target> {
        let Some(uid) = pod.metadata.uid.clone() else {
            return Vec::new();
        };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let new = if self.filter.matches(&pod) && !deleting {
            self.new_targets(&pod, &uid)
        } else {
            Vec::new()
        };
        self.present.insert(uid, pod);
        new
    }

    pub fn remove(&mut self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.present.remove(uid);
        }
    }

    /// A full relist: pods not in it are gone.
    pub fn retain(&mut self, uids: &HashSet<String>) {
        self.present.retain(|u, _| uids.contains(u));
    }

    fn new_targets(&mut self, pod: &Pod, uid: &str) -> Vec<Target> {
        let launcher_taken =
            role_of(pod) == "launcher" && self.launcher_uid.as_deref().is_some_and(|u| u != uid);
        if role_of(pod) == "launcher" && self.launcher_uid.is_none() {
            self.launcher_uid = Some(uid.to_string());
        }
        let short = pod_short_name(&self.job, pod, self.id, launcher_taken);
        targets_of(pod, self.id, &short, self.filter.container.as_deref())
            .into_iter()
            .filter(|t| self.started.insert(t.key()))
            .collect()
    }

    /// Targets handed out so far.
    pub fn target_count(&self) -> usize {
        self.started.len()
    }
}

/// The watcher of the run's pods (relists on 410 Gone, backs off on errors).
pub fn pods(
    api: Api<Pod>,
    selector: &str,
) -> impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + use<> {
    watcher(api, watcher::Config::default().labels(selector)).default_backoff()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, role: &str, containers: &[&str]) -> Pod {
        let cs: Vec<_> = containers.iter().map(|c| json!({"name": c})).collect();
        let mut labels = json!({"hvdctl.io/role": role});
        if let (true, Some((_, i))) = (role == "worker", name.rsplit_once('-')) {
            labels["hvdctl.io/index"] = json!(i);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": uid, "labels": labels},
            "spec": {"containers": cs},
        }))
        .unwrap()
    }

    fn all() -> Filter {
        Filter {
            role: RoleFilter::All,
            pod: None,
            container: None,
        }
    }

    #[test]
    fn new_pods_yield_targets_once() {
        let mut p = Pods::new("j", Identity::HVDCTL, all());
        let t = p.update(pod("j-worker-0", "u0", "worker", &["w"]));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].prefix, "worker-0");
        assert!(
            p.update(pod("j-worker-0", "u0", "worker", &["w"]))
                .is_empty()
        );
        // Same name, new pod (re-created): new target.
        assert_eq!(
            p.update(pod("j-worker-0", "u0b", "worker", &["w"])).len(),
            1
        );
        let l = p.update(pod("j-launcher-abcde", "l1", "launcher", &["l"]));
        assert_eq!(l[0].prefix, "launcher");
        let l2 = p.update(pod("j-launcher-fghij", "l2", "launcher", &["l"]));
        assert_eq!(l2[0].prefix, "launcher-fghij");
        assert_eq!(p.target_count(), 4);
    }

    #[test]
    fn filters() {
        let mut p = Pods::new(
            "j",
            Identity::HVDCTL,
            Filter {
                role: RoleFilter::Worker,
                ..all()
            },
        );
        assert!(
            p.update(pod("j-launcher-x", "l", "launcher", &["l"]))
                .is_empty()
        );
        assert_eq!(
            p.update(pod("j-worker-1", "w1", "worker", &["w", "side"]))
                .len(),
            2
        );
        let mut p = Pods::new(
            "j",
            Identity::HVDCTL,
            Filter {
                pod: Some(regex::Regex::new("worker-1$").unwrap()),
                container: Some("side".into()),
                ..all()
            },
        );
        assert!(
            p.update(pod("j-worker-0", "w0", "worker", &["w", "side"]))
                .is_empty()
        );
        let t = p.update(pod("j-worker-1", "w1", "worker", &["w", "side"]));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].prefix, "worker-1/side");
    }
}
