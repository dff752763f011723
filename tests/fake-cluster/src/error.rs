//! Kubernetes `Status` errors, shaped like the real apiserver's.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// An API error that is answered as a `kind: Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<Value>>,
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", def.qualified(), name),
        )
        .with_details(details(def, name))
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", def.qualified(), name),
        )
        .with_details(details(def, name))
    }

    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                def.qualified(),
                name,
                why
            ),
        )
        .with_details(details(def, name))
    }

    /// 422 Invalid with one cause.
    pub fn invalid(
        def: &ResourceDef,
        name: &str,
        field: &str,
        cause_reason: &str,
        detail: &str,
    ) -> Self {
        Self::new(
            422,
            "Invalid",
            format!(
                "{} \"{}\" is invalid: {}: {}",
                def.kind, name, field, detail
            ),
        )
        .with_details(json!({
            "name": name,
            "group": def.group,
            "kind": def.kind,
            "causes": [{"reason": cause_reason, "message": detail, "field": field}],
        }))
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
        .with_details(json!({"causes": [{"message": "injected by fake-cluster"}]}))
    }

    pub fn too_many_requests() -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has temporarily limited the number of requests; please try again later",
        )
        .with_details(json!({"retryAfterSeconds": 1}));
        e.retry_after = Some(1);
        e
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// The `Status` object for the body.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = (**d).clone();
        }
        v
    }
}

fn details(def: &ResourceDef, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": def.plural});
    if !def.group.is_empty() {
        d["group"] = json!(def.group);
    }
    d
}

/// A `Status` object for successful deletes of collections etc.
pub fn success_status(details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}
