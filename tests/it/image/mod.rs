//! Image building and pushing (`hvdctl::image`): the parts without a daemon, then the
//! daemon and registry of `scripts/dev-services.sh`.

// Docker config: auths, credential helpers and stores.
mod auth;
// Build contexts: tar layout, the same files as `docker build` sends.
mod context;
// BuildKit builds: cache mounts, reuse after a script edit, a failing step named.
mod buildkit;
// Build and push through the real daemon and registry.
mod docker;
// Docker hosts: a second dockerd over TLS, through DOCKER_HOST and a Docker context.
mod hosts;
// .dockerignore: documented behaviour, exceptions, order.
mod dockerignore;
// Default image tags from git state or content.
mod tag;
