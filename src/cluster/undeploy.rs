//! Deleting exactly what carries a run's labels (never anything else, whatever its name),
//! with foreground propagation, and waiting until it is gone.

use super::apply::dynamic_api;
use super::client::{ATTEMPTS, Cluster, retry, status_code};
use super::runs::mpijob_served;
use crate::error::{Error, Result};
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{DeleteParams, ListParams};
use std::time::{Duration, Instant};

/// (apiVersion, kind, plural) of everything a run can own, owners first.
const KINDS: &[(&str, &str, &str)] = &[
    ("kubeflow.org/v2beta1", "MPIJob", "mpijobs"),
    ("batch/v1", "Job", "jobs"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("v1", "Pod", "pods"),
    ("v1", "Service", "services"),
    ("v1", "ConfigMap", "configmaps"),
    ("v1", "Secret", "secrets"),
    ("v1", "ServiceAccount", "serviceaccounts"),
];

/// One object that was (or is being) deleted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deleted {
    pub kind: &'static str,
    pub name: String,
}

async fn kinds(c: &Cluster) -> Result<Vec<(&'static str, &'static str, &'static str)>> {
    let served = mpijob_served(c).await?;
    Ok(KINDS
        .iter()
        .copied()
        .filter(|(_, k, _)| served || *k != "MPIJob")
        .collect())
}

/// Every object matching `selector` in `namespace`, by kind.
pub async fn find(c: &Cluster, namespace: &str, selector: &str) -> Result<Vec<Deleted>> {
    let mut out = Vec::new();
    let lp = ListParams::default().labels(selector);
    for (av, kind, plural) in kinds(c).await? {
        let api = dynamic_api(c, namespace, av, kind, plural);
        let list = retry(ATTEMPTS, || api.list(&lp))
            .await
            .map_err(|e| c.error(&format!("list {plural} in namespace {namespace}"), &e))?;
        for o in list.items {
            // Objects already being deleted still count until they are gone.
            out.push(Deleted {
                kind,
                name: o.metadata.name.unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// Deletes every object matching `selector` (foreground propagation, so an owner goes only
/// after what it owns). Returns what was deleted; 404s are fine (already gone).
pub async fn delete(c: &Cluster, namespace: &str, selector: &str) -> Result<Vec<Deleted>> {
    let found = find(c, namespace, selector).await?;
    let all = kinds(c).await?;
    let dp = DeleteParams::foreground();
    stream::iter(found.iter())
        .map(|d| {
            let (av, kind, plural) = *all
                .iter()
                .find(|(_, k, _)| *k == d.kind)
                .expect("found kinds are known");
            let api = dynamic_api(c, namespace, av, kind, plural);
            let dp = dp.clone();
            async move {
                match retry(ATTEMPTS, || api.delete(&d.name, &dp)).await {
                    Ok(_) => Ok(()),
                    Err(e) if status_code(&e) == Some(404) => Ok(()),
                    Err(e) => Err(c.error(
                        &format!("delete {kind} {} in namespace {namespace}", d.name),
                        &e,
                    )),
                }
            }
        })
        .buffer_unordered(super::apply::CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(found)
}

/// Waits until nothing matches `selector`; `progress(left)` is called after each look.
pub async fn wait_gone(
    c: &Cluster,
    namespace: &str,
    selector: &str,
    timeout: Duration,
    progress: &dyn Fn(usize),
) -> Result<()> {
    let started = Instant::now();
    loop {
        let left = find(c, namespace, selector).await?;
        progress(left.len());
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() > timeout {
            let names: Vec<String> = left
                .iter()
                .take(5)
                .map(|d| format!("{} {}", d.kind, d.name))
                .collect();
            return Err(Error::failure(format!(
                "{} object(s) still present after {}s in namespace {namespace}: {}",
                left.len(),
                timeout.as_secs(),
                names.join(", ")
            ))
            .hint(
                "a finalizer may be holding them; `kubectl get <kind> <name> -o yaml` shows which",
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
