//! Server-side apply of a run's objects (field manager `hvdctl`), in dependency order with
//! bounded concurrency, plus the namespace and discovery checks that come before it.

use super::client::{ATTEMPTS, Cluster, retry, status_code};
use crate::error::{Error, Result};
use crate::kinds::{ApiKind, Object};
use crate::render::manifests::{MANAGER, apply_order};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

/// Requests in flight at once while applying one group of objects.
pub const CONCURRENCY: usize = 16;

/// The dynamic API for an object's kind in `namespace`.
pub fn dynamic_api(c: &Cluster, namespace: &str, k: ApiKind) -> Api<DynamicObject> {
    let (group, version) = k.group_version();
    let gvk = GroupVersionKind::gvk(group, version, k.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, k.plural);
    Api::namespaced_with(c.client.clone(), namespace, &ar)
}

/// The dynamic API for kind `k` across every namespace.
pub fn dynamic_api_all(c: &Cluster, k: ApiKind) -> Api<DynamicObject> {
    let (group, version) = k.group_version();
    let gvk = GroupVersionKind::gvk(group, version, k.kind);
    Api::all_with(
        c.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, k.plural),
    )
}

/// Whether the namespace must be created: `Ok(false)` when it exists, `Ok(true)` when it does
/// not and `create` is set, an error naming it otherwise. A 403 on reading namespaces (common
/// for restricted users) is not an error: the apply will tell. Reads only.
pub async fn namespace_missing(c: &Cluster, namespace: &str, create: bool) -> Result<bool> {
    let api: Api<Namespace> = Api::all(c.client.clone());
    match retry(ATTEMPTS, || api.get_opt(namespace)).await {
        Ok(Some(_)) => Ok(false),
        Ok(None) if create => Ok(true),
        Ok(None) => Err(Error::input(format!(
            "namespace {namespace} does not exist in context `{}` ({})",
            c.context, c.server
        ))
        .hint("pass --create-namespace to create it, or pick another with -n")),
        Err(e) if status_code(&e) == Some(403) => Ok(false),
        Err(e) => Err(c.error(&format!("get namespace {namespace}"), &e)),
    }
}

/// Creates the namespace (server-side apply: a namespace made meanwhile is no error).
pub async fn create_namespace(c: &Cluster, namespace: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(c.client.clone());
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let pp = PatchParams::apply(MANAGER);
    let patch = Patch::Apply(&ns);
    retry(ATTEMPTS, || api.patch(namespace, &pp, &patch))
        .await
        .map_err(|e| c.error(&format!("create namespace {namespace}"), &e))?;
    Ok(())
}

/// Applies one object (server-side apply, field manager `hvdctl`); returns its uid.
pub async fn apply_one(c: &Cluster, o: &Object, dry_run: bool) -> Result<String> {
    let ns = o.meta().namespace.clone().unwrap_or_default();
    let api = dynamic_api(c, &ns, o.api_kind());
    let mut pp = PatchParams::apply(MANAGER);
    if dry_run {
        pp = pp.dry_run();
    }
    let body = o.to_value();
    let name = o.name().to_string();
    let patch = Patch::Apply(&body);
    retry(ATTEMPTS, || api.patch(&name, &pp, &patch))
        .await
        .map(|o| o.metadata.uid.unwrap_or_default())
        .map_err(|e| c.error(&format!("apply {} {name} in namespace {ns}", o.kind()), &e))
}

/// Applies every object: groups in [`apply_order`], each group concurrently (bounded).
/// `on_applied` is told of each success (for progress). Stops at the first failure.
pub async fn apply_all(
    c: &Cluster,
    objects: &[Object],
    dry_run: bool,
    on_applied: &(dyn Fn(&Object) + Sync),
) -> Result<()> {
    let mut start = 0;
    while start < objects.len() {
        let rank = apply_order(&objects[start]);
        let end = objects[start..]
            .iter()
            .position(|o| apply_order(o) != rank)
            .map_or(objects.len(), |i| start + i);
        stream::iter(&objects[start..end])
            .map(|o| async move {
                apply_one(c, o, dry_run).await?;
                on_applied(o);
                Ok::<_, Error>(())
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        start = end;
    }
    Ok(())
}
