//! hvdctl: distributed Horovod (MPI/Gloo) training on Kubernetes and Docker.
//!
//! The binary (`src/main.rs`) only parses flags and maps errors to exit codes; everything
//! else lives here so it can be tested without the CLI. See `docs/architecture.md`.

// Output goes through `ui::out`'s macros, which do not panic on a closed pipe.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod app;
pub mod assets;
pub mod backend;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod dev;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod files;
pub mod fit;
#[doc(hidden)]
pub mod fuzz;
pub mod image;
pub mod kinds;
pub mod kubeconfig;
pub mod ledger;
pub mod local;
pub mod logs;
pub mod options;
pub mod phases;
pub mod program;
pub mod provenance;
pub mod reason;
pub mod remote;
pub mod render;
pub mod report;
pub mod scaffold;
pub mod state;
pub mod text;
pub mod timeline;
pub mod types;
pub mod ui;
pub mod yaml;

pub use error::{Error, Result};
