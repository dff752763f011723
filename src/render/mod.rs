//! Template rendering: handlebars in strict mode. In YAML templates every value is written as
//! data: a scalar holding values becomes one quoted string ([`scalars`], [`quote`]); other
//! templates (a README) get values as they are. Rendered manifests are then parsed into typed
//! objects ([`manifests`]).

pub mod manifests;
pub mod quote;
pub mod scalars;
pub mod yaml_out;

use crate::error::{Error, Result};
use handlebars::{
    Context, Handlebars, Helper, HelperResult, Output, RenderContext, RenderErrorReason,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// `{{json value}}`: any value as a one-line YAML flow literal, strings safely quoted.
fn json_helper(
    h: &Helper,
    _: &Handlebars,
    _: &Context,
    _: &mut RenderContext,
    out: &mut dyn Output,
) -> HelperResult {
    let param = h
        .param(0)
        .ok_or_else(|| RenderErrorReason::ParamNotFoundForIndex("json", 0))?;
    if param.is_value_missing() {
        let name = param.relative_path().cloned().unwrap_or_default();
        return Err(RenderErrorReason::MissingVariable(Some(name)).into());
    }
    out.write(&quote::flow(param.value()))?;
    Ok(())
}

/// What a template produces, which decides how `{{value}}` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML: a scalar that holds values is written as one quoted string ([`scalars`]).
    Yaml,
    /// Anything else (README, scripts): values are written as they are.
    Text,
}

impl Format {
    /// The format of a rendered file by its name (`*.yaml`, `*.yml`, with or without `.hbs`).
    pub fn of(path: &str) -> Format {
        let name = path.strip_suffix(".hbs").unwrap_or(path);
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            Format::Yaml
        } else {
            Format::Text
        }
    }
}

/// A handlebars registry for hvdctl's templates: strict (a missing value is an error), no HTML
/// escaping, `{{json}}`; every `{{value}}` is written as it is. [`render`] replaces the escape
/// function for YAML.
pub fn registry() -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.register_helper("json", Box::new(json_helper));
    hb
}

/// Renders one YAML template text (see [`scalars`] for how values are written). `name` (a
/// file path) is used in errors.
pub fn render(name: &str, template: &str, values: &Value) -> Result<String> {
    render_as(Format::Yaml, name, template, values)
}

/// Renders one template text as `format`. `name` (a file path) is used in errors.
pub fn render_as(format: Format, name: &str, template: &str, values: &Value) -> Result<String> {
    let line_of = |pos: usize| template[..pos].matches('\n').count() + 1;
    let mut hb = registry();
    let written: Arc<Mutex<Vec<String>>> = Arc::default();
    if format == Format::Yaml {
        if let Some(pos) = template.find("{{{").or_else(|| template.find("{{&")) {
            return Err(Error::input(format!(
                "{name}:{}: raw output (`{{{{{{` or `{{{{&`) is not allowed: values must be written as data",
                line_of(pos)
            ))
            .hint("use {{value}} for strings and {{json value}} for numbers, lists and maps"));
        }
        if let Some(pos) = template.find([scalars::OPEN, scalars::CLOSE]) {
            return Err(Error::input(format!(
                "{name}:{}: the characters U+E000 and U+E001 are reserved for hvdctl",
                line_of(pos)
            )));
        }
        let store = Arc::clone(&written);
        hb.register_escape_fn(move |s: &str| {
            let mut values = store.lock().unwrap_or_else(|p| p.into_inner());
            values.push(s.to_string());
            scalars::placeholder(values.len() - 1)
        });
    }
    hb.register_template_string(name, template).map_err(|e| {
        let at = match e.pos() {
            Some((line, col)) => format!("{name}:{line}:{col}"),
            None => name.to_string(),
        };
        Error::input(format!("{at}: invalid template: {}", e.reason()))
    })?;
    let text = hb
        .render(name, values)
        .map_err(|e| render_error(name, &e, values))?;
    if format == Format::Text {
        return Ok(text);
    }
    let written = std::mem::take(&mut *written.lock().unwrap_or_else(|p| p.into_inner()));
    scalars::merge(&text, &written).map_err(|e| {
        Error::input(format!(
            "{name}: rendered line {} column {}: {}",
            e.line, e.col, e.message
        ))
        .hint(
            "a template must produce YAML; values must be written with {{value}} or {{json value}}",
        )
    })
}

/// A rendering error for people: a missing value is named, with its place and the closest
/// value that exists.
fn render_error(name: &str, e: &handlebars::RenderError, values: &Value) -> Error {
    let at = match (e.line_no, e.column_no) {
        (Some(l), Some(c)) => format!("{name}:{l}:{c}"),
        (Some(l), None) => format!("{name}:{l}"),
        _ => name.to_string(),
    };
    const LISTED: &str = "template values are listed in docs/config.md (\"Template values\")";
    match e.reason() {
        RenderErrorReason::MissingVariable(Some(path)) => {
            let known = value_names(values);
            let refs: Vec<&str> = known.iter().map(String::as_str).collect();
            let e = Error::input(format!("{at}: `{path}` is not a template value"));
            match crate::text::did_you_mean(path, &refs) {
                Some(s) => e.hint(format!("did you mean `{s}`? ({LISTED})")),
                None => e.hint(LISTED),
            }
        }
        RenderErrorReason::MissingVariable(None) => {
            Error::input(format!("{at}: a value used here is not defined")).hint(LISTED)
        }
        reason => Error::input(format!("{at}: {reason}")).hint(LISTED),
    }
}

/// Every name a template can use: dotted paths through maps from the top, and the keys of
/// the maps inside lists (what `{{#each}}` blocks see).
fn value_names(values: &Value) -> Vec<String> {
    fn walk(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, item) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(path.clone());
                    walk(item, &path, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, "", out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(values, "", &mut out);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_quoted_and_json_is_flow() {
        let out = render(
            "t",
            "a: {{x}}\nb: {{json y}}\n",
            &json!({"x": "1\nc: 2", "y": [1, "z"]}),
        )
        .unwrap();
        assert_eq!(out, "a: \"1\\nc: 2\"\nb: [1, \"z\"]\n");
    }

    #[test]
    fn missing_values_and_raw_output_are_errors() {
        let e = render("t.hbs", "a: {{nope}}\n", &json!({})).unwrap_err();
        assert!(e.message.starts_with("t.hbs:1:4:"), "{}", e.message);
        let e = render("t.hbs", "a: {{json nope}}\n", &json!({})).unwrap_err();
        assert!(e.message.contains("nope"), "{}", e.message);
        let e = render("t.hbs", "x\na: {{{x}}}\n", &json!({"x": 1})).unwrap_err();
        assert!(e.message.starts_with("t.hbs:2:"), "{}", e.message);
        let e = render("t.hbs", "a: {{#if x}}\n", &json!({"x": 1})).unwrap_err();
        assert!(e.message.contains("invalid template"), "{}", e.message);
        let e = render("t.hbs", "a: \u{e000}\n", &json!({})).unwrap_err();
        assert!(e.message.contains("reserved"), "{}", e.message);
    }

    #[test]
    fn a_missing_value_is_named_with_its_place_and_the_closest_one() {
        let values = json!({"workers": 2, "job": {"name": "j", "namespace": "n"},
            "env": [{"name": "A", "value": "1"}]});
        let e = render("k8s/t.yaml.hbs", "a: 1\nb: {{wrkers}}\n", &values).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.message,
            "k8s/t.yaml.hbs:2:4: `wrkers` is not a template value"
        );
        let hint = e.hint.unwrap_or_default();
        assert!(hint.starts_with("did you mean `workers`?"), "{hint}");
        assert!(!e.message.contains("Some("), "{}", e.message);
        let e = render("t", "name: {{job.nam}}-x\n", &values).unwrap_err();
        assert_eq!(e.message, "t:1:7: `job.nam` is not a template value");
        assert_eq!(
            e.hint
                .as_deref()
                .map(|h| h.starts_with("did you mean `job.name`?")),
            Some(true)
        );
        let e = render("t", "e: {{json envv}}\n", &values).unwrap_err();
        assert!(
            e.message.contains("`envv` is not a template value"),
            "{}",
            e.message
        );
        let e = render("t", "{{#each env}}- {{nme}}\n{{/each}}", &values).unwrap_err();
        assert!(e.message.starts_with("t:1:"), "{}", e.message);
        assert!(e.message.contains("`nme`"), "{}", e.message);
        assert!(e.hint.unwrap_or_default().contains("`name`"));
        let e = render("t", "x: {{zzzzzz}}\n", &values).unwrap_err();
        assert_eq!(
            e.hint.as_deref(),
            Some("template values are listed in docs/config.md (\"Template values\")")
        );
    }

    #[test]
    fn composite_scalars_yaml_and_text() {
        let values = json!({"job": {"name": "mnist-ab12c"}, "v": "a\nhostNetwork: true"});
        let out = render("t.yaml.hbs", "name: {{job.name}}-data\nx: {{v}}\n", &values).unwrap();
        assert_eq!(
            out,
            "name: \"mnist-ab12c-data\"\nx: \"a\\nhostNetwork: true\"\n"
        );
        let readme = "# {{job.name}}\n\n{{v}} `{{{job.name}}}`\n";
        let out = render_as(Format::Text, "README.md.hbs", readme, &values).unwrap();
        assert_eq!(out, "# mnist-ab12c\n\na\nhostNetwork: true `mnist-ab12c`\n");
        assert_eq!(Format::of("README.md.hbs"), Format::Text);
        assert_eq!(Format::of("Dockerfile"), Format::Text);
        assert_eq!(Format::of("hvdctl.yaml.hbs"), Format::Yaml);
        assert_eq!(Format::of("k8s/x.yml"), Format::Yaml);
        let e = render("t.yaml.hbs", "a: {{v}}\nb: [\n", &values).unwrap_err();
        assert!(
            e.message
                .starts_with("t.yaml.hbs: rendered line 3 column 1: not valid YAML"),
            "{}",
            e.message
        );
        assert!(
            !e.message.contains("hostNetwork"),
            "values stay out of errors"
        );
    }
}
