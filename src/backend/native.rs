//! The `native` backend: no operator. hvdctl creates a headless Service, a per-run ssh key
//! Secret, the hostfile ConfigMap, one Pod per worker and a launcher Job that waits for
//! every worker's sshd (see `templates/k8s/native.yaml.hbs` and `templates/scripts/`).

use super::{KubeBackend, Scaling, conditions, is_true};
use crate::app::App;
use crate::error::Result;
use crate::kinds::{ApiKind, JobCondition, KindDef, Object};
use crate::types::{Identity, JobState, LABEL_INDEX};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};

pub struct NativeBackend;

/// Worker `index`'s pod (and host) name in job `job`: `<job>-worker-<index>`.
pub fn worker_name(job: &str, index: u32) -> String {
    format!("{job}-worker-{index}")
}

impl KubeBackend for NativeBackend {
    fn name(&self) -> &'static str {
        "native"
    }

    fn about(&self) -> &'static str {
        "no operator: hvdctl creates Service, Secret, ConfigMap, worker pods and a launcher Job"
    }

    fn kinds(&self) -> Vec<KindDef> {
        vec![
            KindDef::of::<Job>(),
            KindDef::of::<Pod>(),
            KindDef::of::<Service>(),
            KindDef::of::<ConfigMap>(),
            KindDef::of::<Secret>(),
        ]
    }

    fn needs_ssh_keys(&self) -> bool {
        true
    }

    fn finish(&self, objects: Vec<Object>, app: &App) -> Vec<Object> {
        replicate_workers(objects, app.workers)
    }

    fn job_owns_run(&self) -> bool {
        true
    }

    fn job_object(&self, job: &str) -> (ApiKind, String) {
        (ApiKind::of::<Job>(), format!("{job}-launcher"))
    }

    fn state(
        &self,
        job: Option<&serde_json::Value>,
        pods: &[Pod],
    ) -> Result<(JobState, Vec<JobCondition>)> {
        let Some(job) = job else {
            return Ok((JobState::Unknown, vec![]));
        };
        let conds = conditions(job, "the launcher Job")?;
        let active = job
            .pointer("/status/active")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0);
        let launcher_running = pods.iter().any(|p| {
            self.identity()
                .role(p.metadata.labels.as_ref())
                .is_launcher()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        let state = if is_true(&conds, "Complete") {
            JobState::Succeeded
        } else if is_true(&conds, "Failed") {
            JobState::Failed
        } else if active > 0 && launcher_running {
            JobState::Running
        } else {
            JobState::Pending
        };
        Ok((state, conds))
    }

    fn identity(&self) -> Identity {
        Identity::HVDCTL
    }

    fn scaling(&self) -> Scaling {
        Scaling::WorkerPods { name: worker_name }
    }
}

/// The native template holds one worker Pod; a run has `workers` of them, `<name>-<i>`, each
/// its own hostname (so `<name>-<i>.<job>.<ns>.svc` resolves through the headless Service)
/// and its index in hvdctl's label. Rendering and checking one copy instead of thousands
/// keeps large runs fast.
fn replicate_workers(objects: Vec<Object>, workers: u32) -> Vec<Object> {
    let mut out = Vec::with_capacity(objects.len() + workers as usize);
    for o in objects {
        let pod = match o.into_kind::<Pod>() {
            Ok(pod) => pod,
            Err(o) => {
                out.push(o);
                continue;
            }
        };
        let base = pod.metadata.name.clone().unwrap_or_default();
        for i in 0..workers {
            let mut p = pod.clone();
            let name = format!("{base}-{i}");
            p.metadata.name = Some(name.clone());
            p.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(LABEL_INDEX.into(), i.to_string());
            p.spec.get_or_insert_with(Default::default).hostname = Some(name);
            out.push(Object::new(p));
        }
    }
    out
}
