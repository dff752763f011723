//! The `mpijob` backend: one `kubeflow.org/v2beta1` MPIJob; the MPI Operator makes the
//! launcher Job, the worker pods, the ssh Secret and the hostfile.

use super::{KubeBackend, Requirement};
use crate::cluster::status::JobState;
use crate::kinds::{ApiKind, JobCondition, MpiJob};
use k8s_openapi::api::core::v1::Pod;

pub struct MpiJobBackend;

impl KubeBackend for MpiJobBackend {
    fn name(&self) -> &'static str {
        "mpijob"
    }

    fn about(&self) -> &'static str {
        "kubeflow.org/v2beta1 MPIJob for the MPI Operator"
    }

    fn requires(&self) -> Option<Requirement> {
        Some(Requirement {
            kind: ApiKind::of::<MpiJob>(),
            provider: "the MPI Operator",
            hint: "install the MPI Operator (v0.4 or later, https://github.com/kubeflow/mpi-operator), or deploy without it: `hvdctl deploy --backend native`",
        })
    }

    fn operator_launch(&self) -> bool {
        true
    }

    fn operator_selector(&self, job: &str) -> Option<String> {
        // What MPI Operator v0.5+ labels its Secret, ConfigMap, Service and launcher Job with.
        Some(format!("app={job}"))
    }

    fn job_object(&self, job: &str) -> (ApiKind, String) {
        (ApiKind::of::<MpiJob>(), job.to_string())
    }

    fn state(
        &self,
        job: Option<&serde_json::Value>,
        _pods: &[Pod],
    ) -> (JobState, Vec<JobCondition>) {
        let Some(job) = job else {
            return (JobState::Unknown, vec![]);
        };
        let conds: Vec<JobCondition> = job
            .pointer("/status/conditions")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        let state = if is_true(&conds, "Succeeded") {
            JobState::Succeeded
        } else if is_true(&conds, "Failed") {
            JobState::Failed
        } else if is_true(&conds, "Running") {
            JobState::Running
        } else {
            JobState::Pending
        };
        (state, conds)
    }
}

/// Whether condition `t` is `True`.
pub fn is_true(conds: &[JobCondition], t: &str) -> bool {
    conds.iter().any(|c| c.type_ == t && c.status == "True")
}
