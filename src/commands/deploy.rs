use crate::app;
use crate::backend::{self, Run};
use crate::cli::{DeployArgs, Global, ManifestFormat};
use crate::error::{Error, Result};
use crate::kinds::Object;
use crate::ui::Ui;

pub fn run(g: &Global, _ui: &Ui, a: DeployArgs) -> Result<u8> {
    let loaded = app::load(&g.app_dir, &a.app.set)?;
    let app = &loaded.app;
    let backend = a.app.backend.unwrap_or(app.backend);
    let run_id = match &a.run_id {
        Some(id) => {
            backend::check_run_id(id).map_err(|e| Error::input(format!("--run-id: {e}")))?;
            id.clone()
        }
        None => backend::new_run_id(),
    };
    let image = a.image.clone().unwrap_or_else(|| app.image.clone());
    if !app::validate::is_image_ref(&image) {
        return Err(Error::input(format!(
            "--image {image}: not a valid image reference"
        )));
    }
    if !a.dry_run {
        return Err(Error::input(
            "deploying to a cluster is not available in this build yet; use --dry-run",
        ));
    }
    let namespace = crate::kubeconfig::namespace(g, app.namespace.as_deref())?;
    let run = Run {
        app,
        backend,
        run_id,
        namespace,
        image,
    };
    let objects = backend::objects(&run, &loaded.dir, None)?;
    print!("{}", format_objects(&objects, a.output));
    Ok(0)
}

/// Objects as a YAML stream (`---` between documents) or a JSON `v1 List`, like kubectl.
pub fn format_objects(objects: &[Object], format: ManifestFormat) -> String {
    match format {
        ManifestFormat::Yaml => {
            let mut out = String::new();
            for o in objects {
                out.push_str("---\n");
                out.push_str(&serde_norway::to_string(&o.to_value()).unwrap_or_default());
            }
            out
        }
        ManifestFormat::Json => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": objects.iter().map(Object::to_value).collect::<Vec<_>>(),
            });
            let mut s = serde_json::to_string_pretty(&list).unwrap_or_default();
            s.push('\n');
            s
        }
    }
}
