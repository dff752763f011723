//! `scale` on Kubernetes: the workers of a running elastic run, in place (same run id).
//!
//! - `mpijob`: the MPIJob's Worker replicas; the MPI Operator adds or removes worker pods
//!   and keeps its `discover_hosts.sh` up to date.
//! - `native`: hvdctl's own worker pods. A new worker is a copy of a live worker's pod
//!   (spec, labels, annotations, ownerReferences to the launcher Job) under the lowest
//!   worker index no pod holds: `discover_hosts.sh` probes the names of indices 0 to
//!   maxWorkers - 1, so a new worker is found once its sshd answers. Scaling down deletes
//!   the newest (highest index) live workers; Horovod lets go of hosts it no longer finds.

use super::apply::{apply_one, dynamic_api};
use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::RunRef;
use super::status::worker_index;
use crate::error::{Error, Result};
use crate::kinds::Object;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

/// Sets the MPIJob's Worker replicas to `workers`.
pub async fn replicas(c: &Cluster, run: &RunRef, workers: u32) -> Result<()> {
    let (kind, name) = run.backend.job_object(&run.job);
    let api = dynamic_api(c, &run.namespace, kind);
    let patch = serde_json::json!({"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": workers}}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| c.error(&format!("scaling {} {name}", kind.kind), &e))?;
    Ok(())
}

/// Creates or deletes worker pods until `live` (the run's running or pending workers)
/// become `workers`; `pods` are all the run's pods (a finished worker's name stays taken).
pub async fn pods(
    c: &Cluster,
    run: &RunRef,
    pods: &[Pod],
    live: &[&Pod],
    workers: u32,
    max_workers: u32,
) -> Result<()> {
    let before = live.len() as u32;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), &run.namespace);
    let dp = DeleteParams::default();
    if workers > before {
        let template = live
            .first()
            .ok_or_else(|| Error::failure(format!("{} has no live worker to copy", run.job)))?;
        let taken: Vec<u32> = pods
            .iter()
            .filter_map(|p| worker_index(p.metadata.name.as_deref()?))
            .collect();
        let free: Vec<u32> = (0..max_workers)
            .filter(|i| !taken.contains(i))
            .take((workers - before) as usize)
            .collect();
        if free.len() < (workers - before) as usize {
            return Err(Error::failure(format!(
                "{} has no free worker index below maxWorkers {max_workers}: finished worker pods hold them",
                run.job
            ))
            .hint("delete the lost workers' pods (`kubectl delete pod <job>-worker-<i>`), then scale again"));
        }
        for i in free {
            apply_one(c, &Object::Pod(copy(template, &run.job, i)), false).await?;
        }
    } else {
        let mut newest: Vec<&&Pod> = live.iter().collect();
        newest
            .sort_by_key(|p| std::cmp::Reverse(p.metadata.name.as_deref().and_then(worker_index)));
        for p in newest.into_iter().take((before - workers) as usize) {
            let name = p.metadata.name.clone().unwrap_or_default();
            match retry(ATTEMPTS, || api.delete(&name, &dp)).await {
                Ok(_) => {}
                Err(e) if status_code(&e) == Some(404) => {}
                Err(e) => {
                    return Err(c.error(
                        &format!("delete pod {name} in namespace {}", run.namespace),
                        &e,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Worker `index` of job `job` as a copy of the pod `from`: its spec with the new name as
/// hostname (and no node yet), its labels, annotations and owners; nothing the cluster set.
fn copy(from: &Pod, job: &str, index: u32) -> Pod {
    let name = format!("{job}-worker-{index}");
    let m = &from.metadata;
    let mut spec = from.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.node_name = None;
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m.owner_references.clone(),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn a_new_worker_is_a_copy_under_its_own_name_and_hostname() {
        let from = Pod {
            metadata: ObjectMeta {
                name: Some("j-worker-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u0".into()),
                resource_version: Some("7".into()),
                labels: Some([("hvdctl.io/run".to_string(), "r".to_string())].into()),
                owner_references: Some(vec![OwnerReference {
                    name: "j-launcher".into(),
                    uid: "l".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                hostname: Some("j-worker-0".into()),
                subdomain: Some("j".into()),
                node_name: Some("node-1".into()),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let p = copy(&from, "j", 2);
        assert_eq!(p.metadata.name.as_deref(), Some("j-worker-2"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(p.metadata.labels, from.metadata.labels);
        assert_eq!(p.metadata.owner_references, from.metadata.owner_references);
        assert_eq!(p.metadata.uid, None);
        assert_eq!(p.metadata.resource_version, None);
        let s = p.spec.unwrap();
        assert_eq!(s.hostname.as_deref(), Some("j-worker-2"));
        assert_eq!(s.subdomain.as_deref(), Some("j"));
        assert_eq!(s.node_name, None);
        assert!(p.status.is_none());
    }
}
