//! The `native` backend: no operator. hvdctl creates a headless Service, a per-run ssh key
//! Secret, the hostfile ConfigMap, one Pod per worker and a launcher Job that waits for
//! every worker's sshd (see `templates/k8s/native.yaml.hbs` and `templates/scripts/`).

use super::queue::{self, PodGroup};
use super::{KubeBackend, KueueWorkload, Run, Scaling, conditions, is_true};
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
            KindDef::of::<PodGroup>(),
        ]
    }

    fn needs_ssh_keys(&self) -> bool {
        true
    }

    /// Volcano's PodGroup is one of the run's kinds when the app uses Volcano; asking for
    /// it is not needed otherwise.
    fn permissions(&self) -> Vec<super::Permission> {
        let mut p = super::rbac::permissions_for(&self.kinds());
        for x in p
            .iter_mut()
            .filter(|x| x.resource == queue::kinds::POD_GROUP.plural)
        {
            x.needed = false;
        }
        p
    }

    fn finish(&self, objects: Vec<Object>, run: &Run) -> Vec<Object> {
        let mut objects = replicate_workers(objects, run.app.workers);
        queue_pods(&mut objects, run);
        objects
    }

    /// Kueue's pod group Workload is named after the group: the job.
    fn kueue_workload(&self, job: &str) -> KueueWorkload {
        KueueWorkload::Named(job.to_string())
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

/// Queues on hvdctl's own pods.
///
/// Kueue: the launcher's pod and every worker are one Kueue pod group (Kueue v0.19.2's pod
/// integration, `pkg/controller/jobs/pod`): each pod has the queue label, the group's name
/// (the job) and its size (workers + 1) — Kueue makes the group's Workload once all of them
/// exist and ungates them together on admission. The launcher Job itself carries no queue
/// label: Kueue would then manage the Job as the pods' ancestor (batch/job integration,
/// `FindAncestorJobManagedByKueue`) and skip its pod. Workers are marked not retriable: their
/// sshd never succeeds by itself, and without it Kueue waits for replacements of ended ones
/// instead of finishing the group.
///
/// Volcano: the run's PodGroup (named after the job) and every pod scheduled by `volcano`
/// in that group.
fn queue_pods(objects: &mut Vec<Object>, run: &Run) {
    let app = run.app;
    let job = run.job_name();
    let total = (app.workers + 1).to_string();
    for o in objects.iter_mut() {
        if let Some(j) = o.get_mut::<Job>() {
            queue::mark(&mut j.metadata, app);
            if let Some(spec) = j.spec.as_mut() {
                let meta = spec.template.metadata.get_or_insert_with(Default::default);
                if let Some(q) = &app.queue {
                    queue::put(&mut meta.labels, queue::KUEUE_QUEUE_LABEL, q.clone());
                    queue::put(
                        &mut meta.annotations,
                        queue::KUEUE_POD_GROUP_NAME,
                        job.clone(),
                    );
                    queue::put(
                        &mut meta.annotations,
                        queue::KUEUE_POD_GROUP_TOTAL,
                        total.clone(),
                    );
                }
                if queue::volcano(app).is_some() {
                    queue::put(
                        &mut meta.annotations,
                        queue::VOLCANO_GROUP_ANNOTATION,
                        job.clone(),
                    );
                    if let Some(ps) = spec.template.spec.as_mut() {
                        ps.scheduler_name = Some(queue::VOLCANO_SCHEDULER.into());
                    }
                }
            }
        } else if let Some(p) = o.get_mut::<Pod>() {
            if let Some(q) = &app.queue {
                queue::put(&mut p.metadata.labels, queue::KUEUE_QUEUE_LABEL, q.clone());
                queue::put(
                    &mut p.metadata.annotations,
                    queue::KUEUE_POD_GROUP_NAME,
                    job.clone(),
                );
                queue::put(
                    &mut p.metadata.annotations,
                    queue::KUEUE_POD_GROUP_TOTAL,
                    total.clone(),
                );
                queue::put(&mut p.metadata.annotations, queue::KUEUE_RETRIABLE, "false");
            }
            if queue::volcano(app).is_some() {
                queue::put(
                    &mut p.metadata.annotations,
                    queue::VOLCANO_GROUP_ANNOTATION,
                    job.clone(),
                );
                if let Some(ps) = p.spec.as_mut() {
                    ps.scheduler_name = Some(queue::VOLCANO_SCHEDULER.into());
                }
            }
        }
    }
    if let Some(v) = queue::volcano(app) {
        objects.push(Object::new(PodGroup::of(&job, app, v)));
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
