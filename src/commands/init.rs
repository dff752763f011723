use crate::app::validate;
use crate::cli::{Global, InitArgs};
use crate::error::{Error, Result};
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
    };
    // Refuse a non-empty directory before asking anything.
    init::check_target(&dir, a.force)?;
    if ui.interactive {
        prompt_missing(&a, &catalog, &mut req)?;
    }
    let plan = init::plan(&req)?;
    let written = init::write(&plan)?;
    for p in plan.replaced() {
        eprintln!("replaced {}", p.display());
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
        eprintln!("Next:\n{cd}  hvdctl build --push\n  hvdctl deploy\n  hvdctl logs -f");
    }
    Ok(0)
}

fn prompt_missing(a: &InitArgs, catalog: &Catalog, req: &mut InitRequest) -> Result<()> {
    use dialoguer::{Input, Select};
    let prompt_err = |e: dialoguer::Error| Error::input(format!("prompt failed: {e}"));
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
        let i = Select::new()
            .with_prompt("Template")
            .items(&items)
            .default(default)
            .interact()
            .map_err(prompt_err)?;
        req.template = list[i].name.clone();
    }
    if a.name.is_none() {
        let mut input = Input::<String>::new().with_prompt("App name");
        if let Some(d) = init::name_from_dir(&req.dir) {
            input = input.default(d);
        }
        let name = input
            .validate_with(|s: &String| {
                if validate::is_dns1035_label(s) {
                    Ok(())
                } else {
                    Err("lowercase letters, digits and `-`, starting with a letter")
                }
            })
            .interact_text()
            .map_err(prompt_err)?;
        req.name = Some(name);
    }
    if a.image.is_none() {
        let default = req.name.clone().unwrap_or_default();
        let image = Input::<String>::new()
            .with_prompt("Image repository")
            .default(default)
            .validate_with(|s: &String| {
                if validate::is_image_ref(s) {
                    Ok(())
                } else {
                    Err("not a valid image reference")
                }
            })
            .interact_text()
            .map_err(prompt_err)?;
        req.image = Some(image);
    }
    Ok(())
}
