//! `hvdctl build` and `hvdctl push`: the app's image through the Docker Engine API.

use super::block_on;
use crate::app;
use crate::cli::{BuildArgs, BuilderChoice, Global, ProgressChoice, PushArgs};
use crate::error::{Error, Result};
use crate::image::{self, DockerClient, ProgressMode};
use crate::state::{self, ImageRecord};
use crate::ui::Ui;

fn progress(p: ProgressChoice) -> ProgressMode {
    match p {
        ProgressChoice::Auto => ProgressMode::Auto,
        ProgressChoice::Plain => ProgressMode::Plain,
        ProgressChoice::Tty => ProgressMode::Tty,
    }
}

pub fn run(g: &Global, ui: &Ui, a: BuildArgs) -> Result<u8> {
    let loaded = app::load(&g.app_dir, &a.set)?;
    let opts = options(&a)?;
    block_on(image::build_app(&loaded, &opts, ui))?;
    Ok(0)
}

/// `hvdctl build`'s flags as the image module's options.
fn options(a: &BuildArgs) -> Result<image::AppBuild> {
    let secrets = a
        .secret
        .iter()
        .map(|s| image::session::SecretSpec::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let auth_sock = std::env::var_os("SSH_AUTH_SOCK");
    let ssh = a
        .ssh
        .iter()
        .map(|s| image::sshforward::SshSpec::parse(s, auth_sock.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    Ok(image::AppBuild {
        push: a.push,
        tag: a.tag.clone(),
        build_args: a.build_arg.clone(),
        no_cache: a.no_cache,
        pull: a.pull,
        progress: progress(a.progress),
        builder: match a.builder {
            BuilderChoice::Auto => image::Builder::Auto,
            BuilderChoice::Buildkit => image::Builder::BuildKit,
            BuilderChoice::Legacy => image::Builder::Legacy,
        },
        secrets,
        ssh,
    })
}

/// Pushes `reference` with the credentials Docker would use for its registry.
pub fn push_cmd(g: &Global, ui: &Ui, a: PushArgs) -> Result<u8> {
    let recorded = state::image(&g.app_dir)?;
    let reference = match (&a.tag, &recorded) {
        (Some(t), _) => {
            let app = app::load(&g.app_dir, &[])?.app;
            let (repo, _) = image::reference::split_tag(&app.image);
            format!("{repo}:{t}")
        }
        (None, Some(r)) => r.image.clone(),
        (None, None) => {
            return Err(
                Error::input("nothing to push: no image was built in this app directory")
                    .hint("run `hvdctl build` first, or pass --tag TAG"),
            );
        }
    };
    block_on(async {
        let docker = DockerClient::connect().await?;
        image::push_reference(&docker, &reference, progress(a.progress), ui).await?;
        if recorded.as_ref().is_some_and(|r| r.image == reference) {
            state::record_image(
                &g.app_dir,
                &ImageRecord {
                    image: reference.clone(),
                    pushed: true,
                    built: state::now(),
                },
            )?;
        }
        Ok(0)
    })
}
