//! Manifest rendering: handlebars in strict mode where every value is written as data
//! ([`quote`]), then the rendered YAML is parsed into typed objects ([`manifests`]).

pub mod manifests;
pub mod quote;
pub mod yaml_out;

use crate::error::{Error, Result};
use handlebars::{
    Context, Handlebars, Helper, HelperResult, Output, RenderContext, RenderErrorReason,
};
use serde_json::Value;

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

/// A handlebars registry for hvdctl's templates: strict (a missing value is an error), no HTML
/// escaping, and every `{{value}}` quoted as a YAML string.
pub fn registry() -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(quote::quote);
    hb.register_helper("json", Box::new(json_helper));
    hb
}

/// Renders one template text. `name` (a file path) is used in errors.
pub fn render(name: &str, template: &str, values: &Value) -> Result<String> {
    if let Some(pos) = template.find("{{{").or_else(|| template.find("{{&")) {
        let line = template[..pos].lines().count().max(1);
        return Err(Error::input(format!(
            "{name}:{line}: raw output (`{{{{{{` or `{{{{&`) is not allowed: values must be written as data"
        ))
        .hint("use {{value}} for strings and {{json value}} for numbers, lists and maps"));
    }
    let mut hb = registry();
    hb.register_template_string(name, template).map_err(|e| {
        let at = match e.pos() {
            Some((line, col)) => format!("{name}:{line}:{col}"),
            None => name.to_string(),
        };
        Error::input(format!("{at}: invalid template: {}", e.reason()))
    })?;
    hb.render(name, values).map_err(|e| {
        let at = match (e.line_no, e.column_no) {
            (Some(l), Some(c)) => format!("{name}:{l}:{c}"),
            _ => name.to_string(),
        };
        Error::input(format!("{at}: {}", e.reason()))
            .hint("template values are listed in docs/config.md (\"Template values\")")
    })
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
    }
}
