use crate::cli::{ListFormat, TemplatesArgs};
use crate::error::Result;
use crate::scaffold::Catalog;
use crate::ui::Ui;

pub fn run(_ui: &Ui, a: TemplatesArgs) -> Result<u8> {
    let list = Catalog::new(a.template_dir.as_deref()).list()?;
    match a.output {
        ListFormat::Json => crate::out!("{}", crate::text::json(&list)?),
        ListFormat::Yaml => crate::out!("{}", crate::text::yaml(&list)?),
        ListFormat::Text => {
            let width = list.iter().map(|t| t.name.len()).max().unwrap_or(0);
            let default = crate::scaffold::catalog::DEFAULT_TEMPLATE;
            for t in &list {
                let mark = if t.name == default { " (default)" } else { "" };
                crate::outln!("{:width$}  {}{mark}", t.name, t.description);
            }
        }
    }
    Ok(0)
}
