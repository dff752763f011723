//! Image building and pushing (`hvdctl::image`): the parts without a daemon, then the
//! daemon and registry of `scripts/dev-services.sh`.

// Docker config: auths, credential helpers and stores.
mod auth;
// Build contexts: tar layout, the same files as `docker build` sends.
mod context;
// Build and push through the real daemon and registry.
mod docker;
// .dockerignore: documented behaviour, exceptions, order.
mod dockerignore;
// Default image tags from git state or content.
mod tag;
