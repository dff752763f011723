//! `hvdctl dev`: flags + hvdctl.yaml → a warm deploy and the edit loop of [`crate::dev`].

use crate::app;
use crate::cli::{DevArgs, Global, LogFormat};
use crate::dev::{self, Options};
use crate::engine::{DeployOptions, Env};
use crate::error::{Error, Result};
use crate::logs::printer::{Format, Style};
use crate::ui::Ui;
use std::time::Duration;

pub fn run(g: &Global, ui: &Ui, a: DevArgs) -> Result<u8> {
    let mut loaded = app::load(&g.app_dir, &a.app.set)?;
    let run_id = match &a.run_id {
        Some(id) => {
            crate::backend::check_run_id(id).map_err(|e| Error::input(format!("--run-id: {e}")))?;
            id.clone()
        }
        None => crate::backend::new_run_id(),
    };
    loaded.app.warm = true;
    let (image, unpushed) = super::deploy::image(&loaded, a.image.as_deref())?;
    let opts = Options {
        backend: super::backend(a.app.backend, &loaded.app)?,
        run_id,
        image,
        unpushed,
        sets: a.app.set.clone(),
        debounce: Duration::from_millis(a.debounce),
        style: Style {
            format: match a.output {
                LogFormat::Text => Format::Text,
                LogFormat::Json => Format::Json,
            },
            prefix: true,
            timestamps: false,
            color: ui.color_stdout,
            rank: None,
        },
        deploy: DeployOptions {
            create_namespace: a.create_namespace,
            server_dry_run: false,
            no_push: false,
            skip_checks: a.skip_checks,
        },
    };
    let env = Env::with_app(g, ui, Some(loaded.app.clone()));
    // Ctrl-C and SIGTERM are handled inside: the run is undeployed before exiting (130).
    super::runtime(true)?
        .block_on(dev::run(&env, &loaded, opts))
        .map_err(|e| loaded.locate(e, a.app.backend))
}
