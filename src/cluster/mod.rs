//! Kubernetes side: connection and errors ([`client`]), finding a run's objects
//! ([`runs`]), and the lifecycle operations built on them.

pub mod apply;
pub mod client;
pub mod events;
pub mod queue;
pub mod reason;
pub mod runs;
pub mod scale;
pub mod status;
pub mod storage;
pub mod undeploy;

pub use client::{Cluster, connect};

/// The cluster's nodes; an error (for people) when they cannot be listed (not allowed, say).
pub async fn nodes(c: &Cluster) -> crate::Result<Vec<k8s_openapi::api::core::v1::Node>> {
    use client::{ATTEMPTS, retry};
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    let lp = kube::api::ListParams::default();
    retry(ATTEMPTS, || api.list(&lp))
        .await
        .map(|l| l.items)
        .map_err(|e| c.error("list nodes", &e))
}
