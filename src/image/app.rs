//! An app's image: its build as `hvdctl build` and `hvdctl dev`'s rebuilds make it (the app's
//! defaults, the options of [`AppBuild`]), recorded in `.hvdctl/`.

use super::sshforward::SshSpec;
use super::{BuildContext, BuildRequest, Builder, DockerClient, ProgressMode};
use crate::app;
use crate::error::{Error, Result};
use crate::state::{self, ImageRecord};
use crate::ui::Ui;
use std::collections::BTreeMap;

/// How to build an app's image (what `hvdctl build`'s flags say; `dev` uses the defaults).
#[derive(Debug, Clone)]
pub struct AppBuild {
    /// Push the image once built.
    pub push: bool,
    /// The tag (default: the image's own tag in hvdctl.yaml, else one from git and the
    /// context's contents).
    pub tag: Option<String>,
    /// `KEY=VALUE` build arguments over the app's `build.args`.
    pub build_args: Vec<String>,
    pub no_cache: bool,
    pub pull: bool,
    pub progress: ProgressMode,
    pub builder: Builder,
    /// `--secret`s for BuildKit.
    pub secrets: Vec<super::session::SecretSpec>,
    /// `--ssh` agents for BuildKit, over the app's `build.ssh`.
    pub ssh: Vec<SshSpec>,
}

impl Default for AppBuild {
    /// What `dev` rebuilds with: the app's defaults, plain progress lines.
    fn default() -> Self {
        AppBuild {
            push: false,
            tag: None,
            build_args: Vec::new(),
            no_cache: false,
            pull: false,
            progress: ProgressMode::Plain,
            builder: Builder::Auto,
            secrets: Vec::new(),
            ssh: Vec::new(),
        }
    }
}

/// Builds the app's image as `a` says, records it in `.hvdctl/` (pushed with `push`);
/// returns the image reference.
pub async fn build_app(loaded: &app::Loaded, a: &AppBuild, ui: &Ui) -> Result<String> {
    let app = &loaded.app;
    let mut build_args: BTreeMap<String, String> = app.build.args.clone();
    for kv in &a.build_args {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::input(format!("--build-arg {kv}: expected KEY=VALUE")))?;
        if k.is_empty() {
            return Err(Error::input(format!("--build-arg {kv}: the key is empty")));
        }
        build_args.insert(k.to_string(), v.to_string());
    }
    let context_dir = loaded.dir.join(&app.build.context);
    let (repo, image_tag) = super::reference::split_tag(&app.image);
    let tag = match a.tag.clone().or(image_tag.map(str::to_owned)) {
        Some(t) => {
            super::tag::validate_tag(&t)?;
            t
        }
        None => {
            // git and a hash of every file of the context: on the blocking pool.
            let (dir, dockerfile) = (context_dir.clone(), app.build.dockerfile.clone());
            tokio::task::spawn_blocking(move || {
                super::tag::default_tag(&BuildContext::open(&dir, &dockerfile)?)
            })
            .await
            .map_err(|e| Error::failure(format!("choosing the image's tag stopped: {e}")))??
        }
    };
    let mut req = BuildRequest::new(&context_dir, repo, &tag);
    req.dockerfile = app.build.dockerfile.clone();
    req.build_args = build_args;
    req.no_cache = a.no_cache;
    req.pull = a.pull;
    req.progress = a.progress;
    req.builder = a.builder;
    req.secrets = a.secrets.clone();
    let auth_sock = std::env::var_os("SSH_AUTH_SOCK");
    let from_app = app
        .build
        .ssh
        .iter()
        .enumerate()
        .map(|(i, s)| SshSpec::from_app(i, s, auth_sock.as_deref(), &loaded.dir))
        .collect::<Result<Vec<_>>>()?;
    req.ssh = super::sshforward::merged(from_app, &a.ssh);
    req.labels.insert("hvdctl.io/app".into(), app.name.clone());
    let docker = DockerClient::connect().await?;
    let built = super::build(&docker, &req, &mut std::io::stderr()).await?;
    state::record_image(
        &loaded.dir,
        &ImageRecord {
            image: built.reference.clone(),
            pushed: false,
            built: state::now(),
        },
    )?;
    ui.note(format!(
        "Built {} ({})",
        built.reference,
        super::short_image_id(&built.id)
    ));
    if a.push {
        super::push_reference(&docker, &built.reference, req.progress, ui).await?;
        state::record_image(
            &loaded.dir,
            &ImageRecord {
                image: built.reference.clone(),
                pushed: true,
                built: state::now(),
            },
        )?;
    }
    Ok(built.reference)
}
