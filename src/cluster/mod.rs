//! Kubernetes side: connection and errors ([`client`]), finding a run's objects
//! ([`runs`]), and the lifecycle operations built on them.

pub mod apply;
pub mod client;
pub mod events;
pub mod reason;
pub mod runs;
pub mod scale;
pub mod status;
pub mod undeploy;

pub use client::{Cluster, connect};
