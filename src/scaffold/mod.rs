//! `hvdctl init` and `hvdctl templates`: the template catalog and scaffolding an app from it.

pub mod catalog;
pub mod init;

pub use catalog::{Catalog, DEFAULT_TEMPLATE, TemplateInfo};
