//! `hvdctl build` and `hvdctl push`: the app's image through the Docker Engine API.

use super::block_on;
use crate::app;
use crate::cli::{BuildArgs, Global, ProgressChoice, PushArgs};
use crate::error::{Error, Result};
use crate::image::{self, BuildContext, BuildRequest, DockerClient, ProgressMode};
use crate::state::{self, ImageRecord};
use crate::ui::Ui;
use std::collections::BTreeMap;

fn progress(p: ProgressChoice) -> ProgressMode {
    match p {
        ProgressChoice::Auto => ProgressMode::Auto,
        ProgressChoice::Plain => ProgressMode::Plain,
    }
}

pub fn run(g: &Global, ui: &Ui, a: BuildArgs) -> Result<u8> {
    let loaded = app::load(&g.app_dir, &a.set)?;
    block_on(build(&loaded, &a, ui))?;
    Ok(0)
}

/// Builds the app's image as `a` says, records it in `.hvdctl/` (pushed with `--push`);
/// the image reference. Shared by `build` and `dev`'s rebuilds.
pub(crate) async fn build(loaded: &app::Loaded, a: &BuildArgs, ui: &Ui) -> Result<String> {
    let app = &loaded.app;
    let mut build_args: BTreeMap<String, String> = app.build.args.clone();
    for kv in &a.build_arg {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::input(format!("--build-arg {kv}: expected KEY=VALUE")))?;
        if k.is_empty() {
            return Err(Error::input(format!("--build-arg {kv}: the key is empty")));
        }
        build_args.insert(k.to_string(), v.to_string());
    }
    let context_dir = loaded.dir.join(&app.build.context);
    let (repo, image_tag) = image::tag::split_reference(&app.image);
    let tag = match a.tag.clone().or(image_tag.map(str::to_owned)) {
        Some(t) => {
            image::tag::validate_tag(&t)?;
            t
        }
        None => image::tag::default_tag(&BuildContext::open(&context_dir, &app.build.dockerfile)?)?,
    };
    let mut req = BuildRequest::new(&context_dir, repo, &tag);
    req.dockerfile = app.build.dockerfile.clone();
    req.build_args = build_args;
    req.no_cache = a.no_cache;
    req.pull = a.pull;
    req.progress = progress(a.progress);
    req.labels.insert("hvdctl.io/app".into(), app.name.clone());
    {
        let docker = DockerClient::connect().await?;
        let built = image::build(&docker, &req, &mut std::io::stderr()).await?;
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
            short_id(&built.id)
        ));
        if a.push {
            image::push_reference(&docker, &built.reference, req.progress, ui).await?;
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
}

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..hex.len().min(12)]
}

/// Pushes `reference` with the credentials Docker would use for its registry.
pub fn push_cmd(g: &Global, ui: &Ui, a: PushArgs) -> Result<u8> {
    let recorded = state::image(&g.app_dir)?;
    let reference = match (&a.tag, &recorded) {
        (Some(t), _) => {
            let app = app::load(&g.app_dir, &[])?.app;
            let (repo, _) = image::tag::split_reference(&app.image);
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
