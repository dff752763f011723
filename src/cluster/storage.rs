//! `storage:` claims: PersistentVolumeClaims `<app>-<name>` made with the app, not a run.
//! They carry the app's labels and `hvdctl.io/storage`, never a run's, so undeploying a run
//! leaves them (and their data) for the next; `undeploy --all --volumes` deletes them.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use crate::app::App;
use crate::error::Result;
use crate::render::manifests::{LABEL_APP, LABEL_MANAGED_BY, MANAGER};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The label naming a claim's `storage[].name`.
pub const LABEL_STORAGE: &str = "hvdctl.io/storage";

/// The claims `app` asks for, as they are created.
pub fn claims(app: &App, namespace: &str) -> Vec<PersistentVolumeClaim> {
    app.storage
        .iter()
        .map(|st| PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(crate::backend::values::claim_name(app, &st.name)),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED_BY.to_string(), MANAGER.to_string()),
                    (LABEL_APP.to_string(), app.name.clone()),
                    (LABEL_STORAGE.to_string(), st.name.clone()),
                ])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(
                    st.access_modes
                        .iter()
                        .map(|m| m.as_str().to_string())
                        .collect(),
                ),
                storage_class_name: st.storage_class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(st.size.clone()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// Creates the claims of `app` that do not exist yet; those that do are reused as they are
/// (their data is why they are kept). Returns the names created.
pub async fn ensure(c: &Cluster, namespace: &str, app: &App) -> Result<Vec<String>> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), namespace);
    let mut created = Vec::new();
    for claim in claims(app, namespace) {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let what = format!("create PersistentVolumeClaim {name} in namespace {namespace}");
        let existing = retry(ATTEMPTS, || api.get_opt(&name))
            .await
            .map_err(|e| c.error(&what, &e))?;
        if existing.is_some() {
            continue;
        }
        let pp = PostParams::default();
        match retry(ATTEMPTS, || api.create(&pp, &claim)).await {
            Ok(_) => created.push(name),
            // Made by someone else meanwhile: reused too.
            Err(e) if status_code(&e) == Some(409) => {}
            Err(e) => return Err(c.error(&what, &e)),
        }
    }
    Ok(created)
}

/// One claim of an app as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ClaimRow {
    pub name: String,
    /// `Pending`, `Bound`, `Lost` (empty: not yet said).
    pub phase: String,
    pub size: String,
    /// For a claim not bound: the newest event about it (the provisioner's, or the binder's
    /// `WaitForFirstConsumer`), as `Reason: message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn selector(app: &str) -> String {
    format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_APP}={app},{LABEL_STORAGE}")
}

/// The app's claims in `namespace`, by name.
pub async fn list(c: &Cluster, namespace: &str, app: &str) -> Result<Vec<ClaimRow>> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), namespace);
    let lp = ListParams::default().labels(&selector(app));
    let list = retry(ATTEMPTS, || api.list(&lp)).await.map_err(|e| {
        c.error(
            &format!("list PersistentVolumeClaims in namespace {namespace}"),
            &e,
        )
    })?;
    let mut rows: Vec<ClaimRow> = list
        .items
        .iter()
        .map(|p| ClaimRow {
            name: p.metadata.name.clone().unwrap_or_default(),
            phase: p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            size: p
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone())
                .unwrap_or_default(),
            message: None,
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    if rows.iter().any(|r| r.phase != "Bound") {
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(c.client.clone(), namespace);
        let lp = ListParams::default().fields("involvedObject.kind=PersistentVolumeClaim");
        // Said when it can be read; the phase alone otherwise.
        if let Ok(list) = events.list(&lp).await {
            for r in rows.iter_mut().filter(|r| r.phase != "Bound") {
                r.message = list
                    .items
                    .iter()
                    .filter(|e| e.involved_object.name.as_deref() == Some(r.name.as_str()))
                    .max_by_key(|e| super::events::flatten(e).time)
                    .map(|e| {
                        crate::reason::event(
                            e.reason.as_deref().unwrap_or_default(),
                            e.message.as_deref().unwrap_or_default(),
                        )
                    });
            }
        }
    }
    Ok(rows)
}

/// Deletes the app's claims in `namespace` and waits (up to `timeout`) until they are gone.
/// Returns their names.
pub async fn delete(
    c: &Cluster,
    namespace: &str,
    app: &str,
    timeout: Duration,
) -> Result<Vec<String>> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), namespace);
    let lp = ListParams::default().labels(&selector(app));
    let what = format!("delete PersistentVolumeClaims in namespace {namespace}");
    let found = retry(ATTEMPTS, || api.list(&lp))
        .await
        .map_err(|e| c.error(&what, &e))?;
    let claims: Vec<(String, String)> = found
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (name, _) in &claims {
        delete_claim(c, &api, namespace, name).await?;
    }
    // Watched until gone (a claim in use by a pod is held by its finalizer until the pod ends).
    for (name, uid) in &claims {
        let gone = kube::runtime::wait::await_condition(
            api.clone(),
            name,
            kube::runtime::conditions::is_deleted(uid),
        );
        if tokio::time::timeout(timeout, gone).await.is_err() {
            return Err(crate::error::Error::failure(format!(
                "PersistentVolumeClaim {name} in namespace {namespace} is still there after {}s",
                timeout.as_secs()
            ))
            .hint("a pod still using it holds it; undeploy the app's runs first"));
        }
    }
    let names = claims.into_iter().map(|(n, _)| n).collect();
    Ok(names)
}

/// Deletes the claims `names` (those one deploy made, when it fails); gone ones are fine.
pub async fn remove(c: &Cluster, namespace: &str, names: &[String]) -> Result<()> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), namespace);
    for name in names {
        delete_claim(c, &api, namespace, name).await?;
    }
    Ok(())
}

/// Deletes the claim `name`; one already gone is fine.
async fn delete_claim(
    c: &Cluster,
    api: &Api<PersistentVolumeClaim>,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let dp = DeleteParams::default();
    match retry(ATTEMPTS, || api.delete(name, &dp)).await {
        Ok(_) => Ok(()),
        Err(e) if status_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(c.error(
            &format!("delete PersistentVolumeClaim {name} in namespace {namespace}"),
            &e,
        )),
    }
}
