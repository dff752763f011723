//! Docker Engine side: build context, build, tag, push, registry auth.
//!
//! * [`dockerignore`]: `.dockerignore` with Docker's exact semantics.
//! * [`context`]: the files a build sends, tarred while they are sent.
//! * [`auth`]: registry credentials from the Docker config (`auths`, `credsStore`,
//!   `credHelpers`), kept secret.
//! * [`docker`]: the connection to the daemon (`DOCKER_HOST`, version negotiation).
//! * [`build`]: builds with progress and readable failures: BuildKit when the daemon has it
//!   ([`buildkit`]), else the classic builder.
//! * [`tag`]: reproducible default tags from git and the context's contents.
//! * [`app`]: an app's image as `build` and `dev` make it, recorded in `.hvdctl/`.
//! * [`push`]: pushing with per-layer progress, and checking whether a tag is already there.

pub mod app;
pub mod auth;
pub mod build;
pub mod buildkit;
pub mod context;
pub mod docker;
pub mod dockerignore;
mod filesync;
pub mod push;
pub mod reference;
pub mod session;
pub mod sshforward;
pub mod tag;

mod progress;
mod proto;

pub use app::{AppBuild, build_app};
pub use auth::{Credentials, DockerConfig};
pub use build::{BuildRequest, Builder, BuiltImage, build};
pub use context::{BuildContext, ContextEntry, EntryKind};
pub use docker::DockerClient;
pub use progress::ProgressMode;
pub(crate) use progress::human_bytes;
pub use push::{PushRequest, PushedImage, push, tag_exists};

/// Compile-time check: the futures of [`build`], [`push`] and [`tag_exists`] are `Send`, so
/// callers may spawn them.
#[allow(dead_code)]
fn futures_are_send(
    docker: &DockerClient,
    build_req: &BuildRequest,
    push_req: &PushRequest,
    log: &mut (dyn std::io::Write + Send),
) {
    fn is_send<T: Send>(_: &T) {}
    is_send(&build(docker, build_req, log));
    is_send(&push(docker, push_req, None, log));
    is_send(&tag_exists(docker, "r", "t", None));
}

/// Pushes `reference` (which must carry a tag) with the user's registry credentials and
/// says so on stderr.
pub async fn push_reference(
    docker: &DockerClient,
    reference: &str,
    mode: ProgressMode,
    ui: &crate::ui::Ui,
) -> crate::Result<()> {
    let (repo, tag) = reference::split_tag(reference);
    let tag = tag.ok_or_else(|| crate::Error::input(format!("{reference}: no tag to push")))?;
    let creds = auth::lookup_credentials(repo).await?;
    let mut req = PushRequest::new(repo, tag);
    req.progress = mode;
    let pushed = push(docker, &req, creds.as_ref(), &mut std::io::stderr()).await?;
    ui.note(format!("Pushed {} ({})", pushed.reference, pushed.digest));
    Ok(())
}

/// An image ID as `docker images` shows it: 12 hex digits, without `sha256:`.
pub(crate) fn short_image_id(id: &str) -> &str {
    crate::text::short_id(id, 12)
}
