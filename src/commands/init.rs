use crate::app::validate;
use crate::cli::{Global, InitArgs};
use crate::error::Result;
use crate::scaffold::init::{self, InitRequest};
use crate::scaffold::{Catalog, DEFAULT_TEMPLATE};
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: InitArgs) -> Result<u8> {
    let catalog = Catalog::new(a.template_dir.as_deref());
    let dir = a.dir.clone().unwrap_or_else(|| g.app_dir.clone());
    let mut req = InitRequest {
        dir: dir.clone(),
        template: a
            .template
            .clone()
            .unwrap_or_else(|| DEFAULT_TEMPLATE.into()),
        name: a.name.clone(),
        image: a.image.clone(),
        force: a.force,
        catalog: catalog.clone(),
        base: a.base.unwrap_or_default(),
    };
    // Refuse a non-empty directory before asking anything.
    init::check_target(&dir, a.force)?;
    if ui.interactive {
        prompt_missing(&a, &catalog, &mut req)?;
    }
    let plan = init::plan(&req)?;
    let written = init::write(&plan)?;
    for p in plan.replaced() {
        crate::errln!("replaced {}", p.display());
    }
    let shown = if dir.as_os_str() == "." {
        ".".to_string()
    } else {
        dir.display().to_string()
    };
    ui.note(format!(
        "Created app `{}` from template `{}` in {shown} ({} files)",
        plan.name,
        req.template,
        written.len()
    ));
    if !ui.quiet {
        let cd = if shown == "." {
            String::new()
        } else {
            format!("  cd {shown}\n")
        };
        crate::errln!("Next:\n{cd}  hvdctl build --push\n  hvdctl deploy\n  hvdctl logs -f");
    }
    Ok(0)
}

fn prompt_missing(a: &InitArgs, catalog: &Catalog, req: &mut InitRequest) -> Result<()> {
    use crate::ui::prompt;
    if a.template.is_none() {
        let list = catalog.list()?;
        let items: Vec<String> = list
            .iter()
            .map(|t| format!("{} — {}", t.name, t.description))
            .collect();
        let default = list
            .iter()
            .position(|t| t.name == DEFAULT_TEMPLATE)
            .unwrap_or(0);
        let i = prompt::select("Template", &items, default)?;
        req.template = list[i].name.clone();
    }
    if a.name.is_none() {
        let default = init::name_from_dir(&req.dir);
        let name = prompt::input("App name", default.as_deref(), |s| {
            if !validate::is_app_name_spelling(s) {
                Err(crate::Error::input(
                    "lowercase letters, digits and `-`, starting with a letter",
                ))
            } else if let Some(why) = validate::name_too_long(s) {
                Err(crate::Error::input(why))
            } else {
                Ok(())
            }
        })?;
        req.name = Some(name);
    }
    if a.image.is_none() {
        let default = req.name.clone().unwrap_or_default();
        let image = prompt::input("Image repository", Some(&default), |s| {
            if validate::is_image_ref(s) {
                Ok(())
            } else {
                Err(crate::Error::input("not a valid image reference"))
            }
        })?;
        req.image = Some(image);
    }
    Ok(())
}
