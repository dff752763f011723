//! Deleting exactly what carries a run's labels (never anything else, whatever its name),
//! with foreground propagation, and waiting until it is gone.

use super::apply::dynamic_api;
use super::client::{ATTEMPTS, Cluster, retry, status_code};
use crate::error::{Error, Result};
use crate::kinds::ApiKind;
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One object that was (or is being) deleted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deleted {
    pub kind: &'static str,
    pub name: String,
    /// The kind as the API serves it.
    pub api: ApiKind,
}

/// The kinds a run may be made of (the built-in ones and every registered backend's) that
/// this cluster serves, owners first.
async fn kinds(c: &Cluster) -> Result<Vec<ApiKind>> {
    let all = crate::backend::all_kinds();
    let mut out = Vec::with_capacity(all.len());
    for k in all {
        if c.serves(k.api).await? {
            out.push(k.api);
        }
    }
    Ok(out)
}

/// Every object matching `selector` in `namespace`, by kind.
pub async fn find(c: &Cluster, namespace: &str, selector: &str) -> Result<Vec<Deleted>> {
    let mut out = Vec::new();
    let lp = ListParams::default().labels(selector);
    for k in kinds(c).await? {
        let api = dynamic_api(c, namespace, k);
        let list = retry(ATTEMPTS, || api.list(&lp))
            .await
            .map_err(|e| c.error(&format!("list {} in namespace {namespace}", k.plural), &e))?;
        for o in list.items {
            // Objects already being deleted still count until they are gone.
            out.push(Deleted {
                kind: k.kind,
                name: o.metadata.name.unwrap_or_default(),
                api: k,
            });
        }
    }
    Ok(out)
}

/// Deletes every object matching `selector` (foreground propagation, so an owner goes only
/// after what it owns). Returns what was deleted; 404s are fine (already gone).
pub async fn delete(c: &Cluster, namespace: &str, selector: &str) -> Result<Vec<Deleted>> {
    let found = find(c, namespace, selector).await?;
    let dp = DeleteParams::foreground();
    stream::iter(found.iter())
        .map(|d| {
            let api = dynamic_api(c, namespace, d.api);
            let dp = dp.clone();
            async move {
                match retry(ATTEMPTS, || api.delete(&d.name, &dp)).await {
                    Ok(_) => Ok(()),
                    Err(e) if status_code(&e) == Some(404) => Ok(()),
                    Err(e) => Err(c.error(
                        &format!("delete {} {} in namespace {namespace}", d.kind, d.name),
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

/// Waits until nothing matches `selector`, watching every kind (kube's watcher, with its
/// backoff: a dropped watch is resumed, an expired one relisted). `progress(left)` is called
/// whenever the count changes.
pub async fn wait_gone(
    c: &Cluster,
    namespace: &str,
    selector: &str,
    timeout: Duration,
    progress: &dyn Fn(usize),
) -> Result<()> {
    let kinds = kinds(c).await?;
    let streams = kinds.iter().map(|k| {
        let api = dynamic_api(c, namespace, *k);
        let kind = k.kind;
        watcher(api, watcher::Config::default().labels(selector))
            .default_backoff()
            .map(move |ev| (kind, ev))
            .boxed()
    });
    let mut events = stream::select_all(streams);
    // Per kind: the names present, and whether the kind's initial list has been seen.
    let mut present: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut listing: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut listed: BTreeSet<&'static str> = BTreeSet::new();
    let mut last = usize::MAX;
    let watch = async {
        while let Some((kind, ev)) = events.next().await {
            let name = |o: &kube::api::DynamicObject| o.metadata.name.clone().unwrap_or_default();
            match ev {
                Ok(watcher::Event::Init) => {
                    listing.insert(kind, BTreeSet::new());
                }
                Ok(watcher::Event::InitApply(o)) => {
                    listing.entry(kind).or_default().insert(name(&o));
                }
                Ok(watcher::Event::InitDone) => {
                    present.insert(kind, listing.remove(kind).unwrap_or_default());
                    listed.insert(kind);
                }
                Ok(watcher::Event::Apply(o)) => {
                    present.entry(kind).or_default().insert(name(&o));
                }
                Ok(watcher::Event::Delete(o)) => {
                    present.entry(kind).or_default().remove(&name(&o));
                }
                // The watcher retries with backoff; a lasting failure ends in the timeout.
                Err(e) => {
                    if let watcher::Error::InitialListFailed(k)
                    | watcher::Error::WatchStartFailed(k) = &e
                        && !super::client::is_transient(k)
                    {
                        return Err(
                            c.error(&format!("watch {kind} objects in namespace {namespace}"), k)
                        );
                    }
                    continue;
                }
            }
            if listed.len() < kinds.len() {
                continue;
            }
            let left: usize = present.values().map(BTreeSet::len).sum();
            if left != last {
                progress(left);
                last = left;
            }
            if left == 0 {
                return Ok(());
            }
        }
        Err(Error::failure("watching the run's objects stopped"))
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(r) => r,
        Err(_) => {
            let left = find(c, namespace, selector).await?;
            if left.is_empty() {
                return Ok(());
            }
            let names: Vec<String> = left
                .iter()
                .take(5)
                .map(|d| format!("{} {}", d.kind, d.name))
                .collect();
            Err(Error::failure(format!(
                "{} object(s) still present after {}s in namespace {namespace}: {}",
                left.len(),
                timeout.as_secs(),
                names.join(", ")
            ))
            .hint(
                "a finalizer may be holding them; `kubectl get <kind> <name> -o yaml` shows which",
            ))
        }
    }
}

/// Objects an app's runs share (a backend's [`crate::backend::KubeBackend::shared_kinds`]:
/// the app's labels without a run label) are deleted when no `job_kind` object of the app is
/// left in `namespace` (one being deleted does not count). Returns what was deleted.
pub async fn remove_shared_if_unused(
    c: &Cluster,
    namespace: &str,
    app: &str,
    job_kind: ApiKind,
    shared: &[ApiKind],
) -> Result<Vec<Deleted>> {
    use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, LABEL_RUN, MANAGER};
    if shared.is_empty() {
        return Ok(Vec::new());
    }
    let runs = format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_APP}={app}");
    let api = dynamic_api(c, namespace, job_kind);
    let lp = ListParams::default().labels(&runs);
    let jobs = retry(ATTEMPTS, || api.list(&lp)).await.map_err(|e| {
        c.error(
            &format!("list {} in namespace {namespace}", job_kind.plural),
            &e,
        )
    })?;
    if jobs
        .items
        .iter()
        .any(|j| j.metadata.deletion_timestamp.is_none())
    {
        return Ok(Vec::new());
    }
    let selector = format!("{runs},!{LABEL_RUN}");
    let lp = ListParams::default().labels(&selector);
    let dp = DeleteParams::foreground();
    let mut out = Vec::new();
    for k in shared {
        let api = dynamic_api(c, namespace, *k);
        let list = retry(ATTEMPTS, || api.list(&lp))
            .await
            .map_err(|e| c.error(&format!("list {} in namespace {namespace}", k.plural), &e))?;
        for o in list.items {
            let name = o.metadata.name.unwrap_or_default();
            match retry(ATTEMPTS, || api.delete(&name, &dp)).await {
                Ok(_) => {}
                Err(e) if status_code(&e) == Some(404) => continue,
                Err(e) => {
                    return Err(c.error(
                        &format!("delete {} {name} in namespace {namespace}", k.kind),
                        &e,
                    ));
                }
            }
            out.push(Deleted {
                kind: k.kind,
                name,
                api: *k,
            });
        }
    }
    Ok(out)
}
