//! `scale` on Kubernetes: the workers of a running elastic run, in place (same run id), the
//! way its backend says ([`crate::backend::Scaling`]):
//!
//! - a patch of the job object (`mpijob`: the MPIJob's Worker replicas; the MPI Operator
//!   adds or removes worker pods and keeps its `discover_hosts.sh` up to date);
//! - hvdctl's own worker pods (`native`). A new worker is a copy of a live worker's pod
//!   (spec, labels, annotations, ownerReferences to the launcher Job) under the lowest
//!   worker index no pod holds: `discover_hosts.sh` probes the names of indices 0 to
//!   maxWorkers - 1, so a new worker is found once its sshd answers. Scaling down deletes
//!   the newest (highest index) live workers; Horovod lets go of hosts it no longer finds.
//!
//! Indices are read from the pods' labels ([`super::status::role`]), never their names.

use super::apply::{apply_one, dynamic_api};
use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::RunRef;
use super::status::role;
use crate::error::{Error, Result};
use crate::kinds::Object;
use crate::types::LABEL_INDEX;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

/// Applies `patch` (a merge patch) to the run's job object.
pub async fn patch(c: &Cluster, run: &RunRef, patch: serde_json::Value) -> Result<()> {
    let (kind, name) = run.backend.job_object(&run.job);
    let api = dynamic_api(c, &run.namespace, kind);
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| c.error(&format!("scaling {} {name}", kind.kind), &e))?;
    Ok(())
}

/// Creates or deletes worker pods until `live` (the run's running or pending workers)
/// become `workers`; `pods` are all the run's pods (a finished worker's index stays taken).
/// A new worker `i` is named `name(job, i)`.
pub async fn pods(
    c: &Cluster,
    run: &RunRef,
    pods: &[Pod],
    live: &[&Pod],
    workers: u32,
    max_workers: u32,
    name: fn(&str, u32) -> String,
) -> Result<()> {
    let before = live.len() as u32;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), &run.namespace);
    let dp = DeleteParams::default();
    if workers > before {
        let template = live
            .first()
            .ok_or_else(|| Error::failure(format!("{} has no live worker to copy", run.job)))?;
        let taken: Vec<u32> = pods.iter().filter_map(|p| role(run, p).index).collect();
        // A name in use is taken too, whatever its labels say (a pod of a run deployed
        // before workers carried their index): a new pod never lands on an existing one.
        let names: Vec<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let free: Vec<u32> = (0..max_workers)
            .filter(|i| !taken.contains(i) && !names.contains(&name(&run.job, *i).as_str()))
            .take((workers - before) as usize)
            .collect();
        if free.len() < (workers - before) as usize {
            return Err(Error::failure(format!(
                "{} has no free worker index below maxWorkers {max_workers}: finished worker pods hold them",
                run.job
            ))
            .hint(format!("delete the lost workers' pods (`kubectl delete pod -l {LABEL_INDEX}=<i>,{}`), then scale again", run.selector())));
        }
        for i in free {
            apply_one(
                c,
                &Object::new(copy(template, &name(&run.job, i), i)),
                false,
            )
            .await?;
        }
    } else {
        let mut newest: Vec<&&Pod> = live.iter().collect();
        newest.sort_by_key(|p| std::cmp::Reverse(role(run, p).index));
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

/// Worker `index`, named `name`, as a copy of the pod `from`: its spec with the new name as
/// hostname (and no node yet), its labels (the index its own), annotations and owners;
/// nothing the cluster set.
fn copy(from: &Pod, name: &str, index: u32) -> Pod {
    let m = &from.metadata;
    let mut spec = from.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.to_string());
    spec.node_name = None;
    let mut labels = m.labels.clone().unwrap_or_default();
    labels.insert(LABEL_INDEX.into(), index.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: m.namespace.clone(),
            labels: Some(labels),
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
                labels: Some(
                    [
                        ("hvdctl.io/run".to_string(), "r".to_string()),
                        (LABEL_INDEX.to_string(), "0".to_string()),
                    ]
                    .into(),
                ),
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
        let p = copy(&from, "j-worker-2", 2);
        assert_eq!(p.metadata.name.as_deref(), Some("j-worker-2"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["hvdctl.io/run"], "r");
        assert_eq!(labels[LABEL_INDEX], "2", "the copy's own index");
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
