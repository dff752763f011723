//! `hvdctl deploy`: flags + hvdctl.yaml → a [`Plan`]; the engine its backend names deploys it.

use crate::app;
use crate::backend;
use crate::cli::{DeployArgs, DryRun, Global};
use crate::engine::{self, DeployOptions, Env, Plan};
use crate::error::{Error, Result};
use crate::state;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: DeployArgs) -> Result<u8> {
    let mut loaded = app::load(&g.app_dir, &a.app.set)?;
    // `--timeline`: the file's own `timeline:` settings (markCycles) if it has some.
    if a.timeline && loaded.app.timeline.is_none() {
        if let Some(v) = app::validate::timeline_env_clash(&loaded.app) {
            return Err(Error::input(format!(
                "--timeline sets `{v}`, which hvdctl.yaml's `env` sets too; keep one"
            )));
        }
        loaded.app.timeline = Some(Default::default());
    }
    let app = &loaded.app;
    let run_id = match &a.run_id {
        Some(id) => {
            backend::check_run_id(id).map_err(|e| Error::input(format!("--run-id: {e}")))?;
            id.clone()
        }
        None => backend::new_run_id(),
    };
    let (image, unpushed) = image(&loaded, a.image.as_deref())?;
    let plan = Plan {
        app,
        dir: &loaded.dir,
        backend: super::backend(a.app.backend, app)?,
        run_id,
        image,
        unpushed,
        sets: &a.app.set,
    };
    let env = Env::with_app(g, ui, Some(app.clone()));
    // What a backend refuses names the key's line (or flag) and where the backend came from.
    let locate = |e| loaded.locate(e, a.app.backend);
    if a.dry_run() == Some(DryRun::Client) {
        crate::out!(
            "{}",
            engine::dry_run(&env, &plan, a.output).map_err(locate)?
        );
        return Ok(0);
    }
    let opts = DeployOptions {
        create_namespace: a.create_namespace,
        server_dry_run: a.dry_run() == Some(DryRun::Server),
        no_push: a.no_push,
        skip_checks: a.skip_checks,
    };
    // Ctrl-C is handled inside: a deploy cleans up before exiting.
    super::runtime(true)?.block_on(async {
        match engine::deploy(&env, &plan, opts).await.map_err(locate)? {
            Some(run) => engine::after_deploy(&env, &run, a.logs, a.wait).await,
            None => Ok(0),
        }
    })
}

/// The image a run gets: `--image`, else the last one `hvdctl build` made here, else
/// hvdctl.yaml's; and that image again when it was built here and not pushed yet.
pub(crate) fn image(loaded: &app::Loaded, flag: Option<&str>) -> Result<(String, Option<String>)> {
    let recorded = match flag {
        Some(_) => None,
        None => state::image(&loaded.dir)?,
    };
    let image = match (flag, &recorded) {
        (Some(i), _) => i.to_string(),
        (None, Some(r)) => r.image.clone(),
        (None, None) => loaded.app.image.clone(),
    };
    if !app::validate::is_image_ref(&image) {
        // Each source named as the user would find it: the flag, the record `hvdctl build`
        // left, or the app file (whose value the load already checked).
        return Err(match (flag, &recorded) {
            (Some(_), _) => Error::input(format!("--image {image}: not a valid image reference")),
            (None, Some(_)) => Error::input(format!(
                "{}: image `{image}` (recorded by the last `hvdctl build`) is not a valid image reference",
                state::image_record_path(&loaded.dir).display()
            ))
            .hint("run `hvdctl build` again to record the image it makes, or delete that file to use hvdctl.yaml's `image`"),
            (None, None) => Error::input(format!(
                "{}: image `{image}`: not a valid image reference",
                loaded.dir.join(app::load::APP_FILE).display()
            )),
        });
    }
    Ok((image, recorded.filter(|r| !r.pushed).map(|r| r.image)))
}
