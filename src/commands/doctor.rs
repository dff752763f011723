//! `hvdctl doctor`: flags + hvdctl.yaml → a [`crate::doctor::Subject`]; every check at once,
//! one line each (or a JSON array); exit 1 when any failed.

use super::block_on;
use crate::app;
use crate::cli::{DoctorArgs, Global, ListFormat};
use crate::doctor::{self, Subject};
use crate::engine::Env;
use crate::error::Result;
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: DoctorArgs) -> Result<u8> {
    let loaded = app::load(&g.app_dir, &a.app.set)?;
    let app = &loaded.app;
    let backend = super::backend(a.app.backend, app)?;
    let env = Env::with_app(g, ui, Some(app.clone()));
    let namespace = if backend.is_kubernetes() {
        env.namespace()?
    } else {
        String::new()
    };
    if a.print_role {
        let crate::backend::Backend::Kubernetes(kb) = backend else {
            return Err(crate::Error::input(
                "--print-role: the local backend runs Docker containers and needs no Kubernetes role",
            )
            .hint("pass --backend with a Kubernetes backend (e.g. --backend native)"));
        };
        crate::out!("{}", doctor::kube::role_yaml(kb, &namespace));
        return Ok(0);
    }
    let (image, _) = super::deploy::image(&loaded, a.image.as_deref())?;
    let subject = Subject {
        app,
        backend,
        image,
        namespace: namespace.clone(),
    };
    let checks = block_on(async {
        let connect = async { Ok(env.kube(Some(namespace.clone())).await?.cluster) };
        Ok(doctor::run(&subject, connect).await)
    })?;
    match a.output {
        ListFormat::Text => crate::out!(
            "{}",
            crate::text::for_terminal(&doctor::render_text(&checks, ui.verbose > 0))
        ),
        ListFormat::Json => crate::out!("{}", crate::text::json(&checks)?),
        ListFormat::Yaml => crate::out!("{}", crate::text::yaml(&checks)?),
    }
    Ok(doctor::exit_code(&checks))
}
