//! `hvdctl.yaml`: the typed spec, loading with positions, `--set` overrides, validation.
//! Flags + file + `--set` are resolved here, once, into an [`App`] the rest of hvdctl trusts.

pub mod apirules;
pub mod load;
pub mod set;
pub mod spec;
pub mod validate;

pub use load::{APP_FILE, Loaded, load};
pub use spec::{App, BackendName};
