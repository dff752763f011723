//! Kubernetes side: connection and errors ([`client`]), finding a run's objects
//! ([`runs`]), and the lifecycle operations built on them.

pub mod client;
pub mod runs;
pub mod status;

pub use client::{Cluster, connect};
