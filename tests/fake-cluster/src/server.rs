//! The HTTP layer: routing, content negotiation, fault injection, watch streams, the
//! `/fake/` control endpoints.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult, success_status};
use crate::logs::{self, LogParams};
use crate::resources::{self, PODS, ResId, res};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{EventType, PatchKind, WriteOpts};
use crate::table::{self, IncludeObject};
use crate::{Faults, Inner};

pub type Body = BoxBody<Bytes, io::Error>;

/// A response body fed by a channel (log and watch streams).
struct ChannelBody(mpsc::Receiver<Result<Bytes, io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(full(body))
        .expect("valid response")
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert("Retry-After", s.to_string().parse().expect("header value"));
    }
    r
}

fn stream_response(
    content_type: &str,
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("Content-Type", content_type)
        .header("Cache-Control", "no-cache, private")
        .body(ChannelBody(rx).boxed())
        .expect("valid response")
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("1" | "true" | "True"))
}

#[derive(Debug)]
enum Route {
    Json(Value),
    NotFound,
    Resource {
        res_id: ResId,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
        watch_path: bool,
    },
}

fn route(path: &str, inner: &Inner) -> Route {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let custom = inner.store.custom.as_slice();
    match segs.as_slice() {
        ["version"] => return Route::Json(resources::version()),
        ["api"] => return Route::Json(resources::api_versions(&inner.addr)),
        ["apis"] => return Route::Json(resources::api_group_list(custom)),
        ["api", "v1"] => return Route::Json(resources::api_resource_list("", "v1", custom)),
        ["apis", g] => {
            return resources::api_group(g, custom)
                .map(Route::Json)
                .unwrap_or(Route::NotFound);
        }
        ["apis", g, v] if resources::group_served(g, v, custom) => {
            return Route::Json(resources::api_resource_list(g, v, custom));
        }
        ["openapi", "v3"] => return Route::Json(resources::openapi_v3_root(custom)),
        ["openapi", "v3", "api", v] => {
            return resources::openapi_v3_gv("", v, custom)
                .map(Route::Json)
                .unwrap_or(Route::NotFound);
        }
        ["openapi", "v3", "apis", g, v] => {
            return resources::openapi_v3_gv(g, v, custom)
                .map(Route::Json)
                .unwrap_or(Route::NotFound);
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    if !resources::group_served(group, version, custom) {
        return Route::NotFound;
    }
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let find = |plural: &str| resources::find(group, version, plural, custom);
    let namespaced_form =
        matches!(rest, ["namespaces", _, r, ..] if find(r).is_some_and(|id| res(id).namespaced));
    let (ns, rest) = if namespaced_form {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let Some((plural, tail)) = rest.split_first() else {
        return Route::NotFound;
    };
    let Some(res_id) = find(plural) else {
        return Route::NotFound;
    };
    if ns.is_none() && res(res_id).namespaced && !tail.is_empty() {
        return Route::NotFound;
    }
    match tail {
        [] => Route::Resource {
            res_id,
            ns,
            name: None,
            sub: None,
            watch_path,
        },
        [name] => Route::Resource {
            res_id,
            ns,
            name: Some(name.to_string()),
            sub: None,
            watch_path,
        },
        [name, sub] if !watch_path => Route::Resource {
            res_id,
            ns,
            name: Some(name.to_string()),
            sub: Some(sub.to_string()),
            watch_path,
        },
        _ => Route::NotFound,
    }
}

/// The RBAC verb of a request.
fn verb_of(method: &Method, name: Option<&str>, watch: bool) -> &'static str {
    match (method.as_str(), name.is_some()) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// A SelfSubjectAccessReview answered from the `--forbid` rules: `status.allowed` is false
/// for a verb and resource (`pods/log` with a subresource) a rule forbids.
fn access_review(rules: &[String], mut review: Value) -> Value {
    let attrs = review
        .pointer("/spec/resourceAttributes")
        .cloned()
        .unwrap_or_default();
    let get = |k: &str| attrs.get(k).and_then(Value::as_str).unwrap_or("");
    let resource = match get("subresource") {
        "" => get("resource").to_string(),
        sub => format!("{}/{sub}", get("resource")),
    };
    let ns = Some(get("namespace")).filter(|n| !n.is_empty());
    let denied = forbidden(rules, get("verb"), &resource, get("group"), ns, None);
    review["status"] = match denied {
        Some(e) => json!({"allowed": false, "denied": true, "reason": e.message}),
        None => {
            json!({"allowed": true, "reason": "fake-cluster allows everything --forbid does not name"})
        }
    };
    review
}

fn forbidden(
    rules: &[String],
    verb: &str,
    resource: &str,
    group: &str,
    ns: Option<&str>,
    name: Option<&str>,
) -> Option<ApiError> {
    let hit = rules.iter().any(|r| {
        let (v, res) = r.split_once(':').unwrap_or((r.as_str(), "*"));
        (v == "*" || v == verb) && (res == "*" || res == resource)
    });
    if !hit {
        return None;
    }
    let what = match name {
        Some(n) => format!("{resource} \"{n}\""),
        None => resource.to_string(),
    };
    let scope = match ns {
        Some(n) => format!("in the namespace \"{n}\""),
        None => "at the cluster scope".to_string(),
    };
    let main = resource.split('/').next().unwrap_or(resource);
    let mut details = json!({"kind": main});
    if let Some(n) = name {
        details["name"] = json!(n);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    Some(
        ApiError::new(403, "Forbidden", format!("{what} is forbidden: User \"fake\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"))
            .with_details(details),
    )
}

pub async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/fake" || path.starts_with("/fake/") {
        return Ok(control(&inner, req).await);
    }
    let query = parse_query(req.uri().query());
    let faults = inner.faults();
    if path == SSAR_PATH && req.method() == Method::POST {
        inner.stats.count("create", "selfsubjectaccessreviews");
        return Ok(
            match read_body(req).await.and_then(|(ct, b)| parse_body(&ct, &b)) {
                Ok(review) => json_response(201, &access_review(&faults.forbid, review)),
                Err(e) => error_response(&e),
            },
        );
    }
    if req.method() == Method::GET {
        let segs: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(percent_decode)
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        if let Some(r) = inner
            .operators
            .iter()
            .find_map(|o| o.get_path(&inner.store, &segs))
        {
            inner.stats.count("get", &path);
            return Ok(match r {
                Ok(v) => json_response(200, &v),
                Err(e) => error_response(&e),
            });
        }
    }
    let route = route(&path, &inner);
    let (verb, resource_key) = match &route {
        Route::Resource {
            res_id,
            name,
            sub,
            watch_path,
            ..
        } => {
            let v = verb_of(
                req.method(),
                name.as_deref(),
                *watch_path || truthy(query.get("watch")),
            );
            let r = res(*res_id).plural;
            (
                v,
                sub.as_ref()
                    .map(|s| format!("{r}/{s}"))
                    .unwrap_or_else(|| r.to_string()),
            )
        }
        _ => ("discovery", path.clone()),
    };
    inner.stats.count(verb, &resource_key);
    if faults.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.delay_ms)).await;
    }
    let is_log = resource_key == "pods/log";
    let rate = if is_log {
        faults.fail_rate.max(faults.log_fail_rate)
    } else {
        faults.fail_rate
    };
    let unreachable = is_log
        && match &route {
            Route::Resource { name: Some(n), .. } => inner.pod_log_refused(&faults, n),
            _ => false,
        };
    if unreachable {
        return Ok(error_response(&ApiError::internal(
            "fake-cluster: the pod's node does not answer (injected)",
        )));
    }
    if rate > 0.0 && rand::random::<f64>() < rate {
        let e = if rand::random::<bool>() {
            ApiError::internal("fake-cluster injected failure")
        } else {
            ApiError::too_many_requests()
        };
        return Ok(error_response(&e));
    }
    let resp = match route {
        Route::Json(v) => {
            if req.method() != Method::GET && req.method() != Method::HEAD {
                error_response(&ApiError::method_not_allowed())
            } else {
                json_response(200, &v)
            }
        }
        Route::NotFound => {
            if path.starts_with("/openapi/") {
                error_response(
                    &ApiError::new(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    )
                    .with_details(json!({})),
                )
            } else {
                error_response(&ApiError::path_not_found())
            }
        }
        Route::Resource {
            res_id,
            ns,
            name,
            sub,
            watch_path,
        } => {
            let def = res(res_id);
            if let Some(e) = forbidden(
                &faults.forbid,
                verb,
                &resource_key,
                def.group,
                ns.as_deref(),
                name.as_deref(),
            ) {
                return Ok(error_response(&e));
            }
            match resource_request(
                &inner, req, res_id, ns, name, sub, watch_path, query, &faults,
            )
            .await
            {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
    };
    Ok(resp)
}

async fn read_body(req: Request<Incoming>) -> ApiResult<(String, Bytes)> {
    let ct = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let limited = http_body_util::Limited::new(req.into_body(), 64 << 20);
    let bytes = limited
        .collect()
        .await
        .map_err(|e| {
            ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("reading the request body: {e}"),
            )
        })?
        .to_bytes();
    Ok((ct, bytes))
}

fn parse_body(ct: &str, bytes: &[u8]) -> ApiResult<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    if ct.contains("protobuf") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (fake-cluster does not decode {ct})"
            ),
        ));
    }
    let trimmed = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| &bytes[i..])
        .unwrap_or(bytes);
    if trimmed.first() == Some(&b'{') || trimmed.first() == Some(&b'[') || !ct.contains("yaml") {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => return Ok(v),
            Err(e) if !ct.contains("yaml") => {
                return Err(ApiError::bad_request(format!(
                    "couldn't decode the request body as JSON: {e}"
                )));
            }
            Err(_) => {}
        }
    }
    serde_norway::from_slice::<Value>(bytes)
        .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}")))
}

fn dry_run(query: &HashMap<String, String>, body: Option<&Value>) -> ApiResult<bool> {
    let mut vals: Vec<String> = query
        .get("dryRun")
        .map(|v| vec![v.clone()])
        .unwrap_or_default();
    if let Some(a) = body.and_then(|b| b.get("dryRun")).and_then(Value::as_array) {
        vals.extend(a.iter().filter_map(|v| v.as_str().map(String::from)));
    }
    for v in &vals {
        if v != "All" {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {v:?}: supported values: \"All\""
            )));
        }
    }
    Ok(!vals.is_empty())
}

fn selectors(query: &HashMap<String, String>) -> ApiResult<(LabelSelector, FieldSelector)> {
    let ls = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fs = FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((ls, fs))
}

fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn list_object(res_id: ResId, items: &[Arc<Value>], rv: u64) -> Value {
    let def = res(res_id);
    json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items.iter().map(|v| (**v).clone()).collect::<Vec<_>>(),
    })
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
    inner: &Arc<Inner>,
    req: Request<Incoming>,
    res_id: ResId,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_path: bool,
    query: HashMap<String, String>,
    faults: &Faults,
) -> ApiResult<Response<Body>> {
    let def = res(res_id);
    let store = &inner.store;
    let method = req.method().clone();
    let accept = req
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let ns_str = ns.clone().unwrap_or_default();
    let field_manager = query.get("fieldManager").cloned();
    match (&method, name.as_deref(), sub.as_deref()) {
        (&Method::GET, None, None) => {
            let (mut ls, mut fs) = selectors(&query)?;
            if watch_path || truthy(query.get("watch")) {
                return watch(
                    inner,
                    res_id,
                    ns,
                    std::mem::take(&mut ls),
                    std::mem::take(&mut fs),
                    &query,
                    wants_table(&accept),
                    faults,
                );
            }
            let (items, rv) = store.list(res_id, ns.as_deref(), &ls, &fs);
            if wants_table(&accept) {
                let inc = IncludeObject::parse(query.get("includeObject").map(String::as_str));
                return Ok(json_response(
                    200,
                    &table::table(def, items.iter().map(|a| &**a), rv, inc, true),
                ));
            }
            Ok(json_response(200, &list_object(res_id, &items, rv)))
        }
        (&Method::GET, Some(n), None) if watch_path => {
            let (ls, _) = selectors(&query)?;
            let fs = FieldSelector::parse(&format!("metadata.name={n}"))
                .map_err(ApiError::bad_request)?;
            watch(
                inner,
                res_id,
                ns,
                ls,
                fs,
                &query,
                wants_table(&accept),
                faults,
            )
        }
        (&Method::GET, Some(n), None | Some("status")) => {
            let obj = store
                .get(res_id, &ns_str, n)
                .ok_or_else(|| ApiError::not_found(def, n))?;
            if wants_table(&accept) {
                let inc = IncludeObject::parse(query.get("includeObject").map(String::as_str));
                let rv = store.resource_version();
                return Ok(json_response(
                    200,
                    &table::table(def, [&*obj], rv, inc, true),
                ));
            }
            Ok(json_response(200, &obj))
        }
        (&Method::GET, Some(n), Some("log")) if res_id == PODS => {
            let p = log_params(&query)?;
            if let Some(k) = &inner.docker {
                let rx = crate::docker::logs::open(k, store, &ns_str, n, &p)?;
                return Ok(stream_response("text/plain", rx));
            }
            let cut = (faults.cut_logs_every > 0).then_some(faults.cut_logs_every);
            let rx = logs::open(
                store,
                &inner.kubelet,
                &ns_str,
                n,
                &p,
                cut,
                inner.cuts.clone(),
            )?;
            Ok(stream_response("text/plain", rx))
        }
        (&Method::POST, None, None) => {
            let (ct, bytes) = read_body(req).await?;
            let body = parse_body(&ct, &bytes)?;
            let opts = WriteOpts {
                dry_run: dry_run(&query, None)?,
                field_manager,
                status: false,
            };
            let created = store.create(res_id, &ns_str, body, &opts)?;
            Ok(json_response(201, &created))
        }
        (&Method::PUT, Some(n), None | Some("status")) => {
            let (ct, bytes) = read_body(req).await?;
            let body = parse_body(&ct, &bytes)?;
            let opts = WriteOpts {
                dry_run: dry_run(&query, None)?,
                field_manager,
                status: sub.is_some(),
            };
            Ok(json_response(
                200,
                &store.update(res_id, &ns_str, n, body, &opts)?,
            ))
        }
        (&Method::PATCH, Some(n), None | Some("status")) => {
            let (ct, bytes) = read_body(req).await?;
            let base = ct.split(';').next().unwrap_or("").trim();
            let kind = match base {
                "application/merge-patch+json" => PatchKind::Merge,
                "application/strategic-merge-patch+json" => PatchKind::Strategic,
                "application/json-patch+json" => PatchKind::Json,
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                    let force = truthy(query.get("force"));
                    PatchKind::Apply { force }
                }
                other => return Err(ApiError::unsupported_media(other)),
            };
            if matches!(kind, PatchKind::Apply { .. }) && base.ends_with("cbor") {
                return Err(ApiError::unsupported_media(base));
            }
            if !matches!(kind, PatchKind::Apply { .. }) && query.contains_key("force") {
                return Err(ApiError::bad_request(
                    "force flag is only supported for apply patches",
                ));
            }
            let body = if matches!(kind, PatchKind::Apply { .. }) {
                parse_body("application/yaml", &bytes)?
            } else {
                parse_body("application/json", &bytes)?
            };
            let opts = WriteOpts {
                dry_run: dry_run(&query, None)?,
                field_manager,
                status: sub.is_some(),
            };
            let (obj, created) = store.patch(res_id, &ns_str, n, kind, &body, &opts)?;
            Ok(json_response(if created { 201 } else { 200 }, &obj))
        }
        (&Method::DELETE, Some(n), None) => {
            let (ct, bytes) = read_body(req).await?;
            let body = if bytes.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(parse_body(&ct, &bytes)?)
            };
            let policy = propagation(&query, body.as_ref())?;
            let dry = dry_run(&query, body.as_ref())?;
            let grace = match body.as_ref().and_then(|b| b.get("gracePeriodSeconds")) {
                Some(g) => g.as_i64(),
                None => query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()),
            };
            let (obj, pending) = store.delete_grace(
                res_id,
                &ns_str,
                n,
                policy.as_deref(),
                body.as_ref().and_then(|b| b.get("preconditions")),
                dry,
                grace,
            )?;
            Ok(json_response(if pending { 202 } else { 200 }, &obj))
        }
        (&Method::DELETE, None, None) => {
            let (ct, bytes) = read_body(req).await?;
            let body = if bytes.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(parse_body(&ct, &bytes)?)
            };
            let policy = propagation(&query, body.as_ref())?;
            let dry = dry_run(&query, body.as_ref())?;
            let (ls, fs) = selectors(&query)?;
            let deleted =
                store.delete_collection(res_id, ns.as_deref(), &ls, &fs, policy.as_deref(), dry)?;
            let arcs: Vec<Arc<Value>> = deleted.into_iter().map(Arc::new).collect();
            Ok(json_response(
                200,
                &list_object(res_id, &arcs, store.resource_version()),
            ))
        }
        (&Method::GET | &Method::POST, Some(n), Some(sub @ ("exec" | "portforward")))
            if res_id == PODS =>
        {
            let Some(k) = &inner.docker else {
                return Err(ApiError::bad_request(format!(
                    "pods/{sub} needs real containers: start fake-cluster with --kubelet docker"
                )));
            };
            if sub == "exec" {
                crate::docker::stream::exec(k, store, req, &ns_str, n)
            } else {
                crate::docker::stream::portforward(k, store, req, &ns_str, n)
            }
        }
        (_, Some(_), Some(s)) if s != "status" && s != "log" => Err(ApiError::path_not_found()),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn propagation(query: &HashMap<String, String>, body: Option<&Value>) -> ApiResult<Option<String>> {
    let mut p = query.get("propagationPolicy").cloned();
    if let Some(b) = body {
        if let Some(x) = b.get("propagationPolicy").and_then(Value::as_str) {
            p = Some(x.to_string());
        }
        if let Some(o) = b.get("orphanDependents").and_then(Value::as_bool) {
            if p.is_some() {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"orphanDependents\": orphanDependents and deletionPropagation cannot be both set",
                ));
            }
            p = Some(if o { "Orphan" } else { "Background" }.to_string());
        }
    }
    if let Some(o) = query.get("orphanDependents") {
        p = Some(if o == "true" { "Orphan" } else { "Background" }.to_string());
    }
    Ok(p)
}

fn log_params(q: &HashMap<String, String>) -> ApiResult<LogParams> {
    let int = |k: &str| -> ApiResult<Option<i64>> {
        q.get(k)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("{k}: Invalid value: {v:?}: must be an integer"))
                })
            })
            .transpose()
    };
    let since_time = match q.get("sinceTime") {
        Some(t) => Some(crate::util::parse_time(t).ok_or_else(|| {
            ApiError::bad_request(format!("parsing time {t:?} as RFC3339: cannot parse"))
        })?),
        None => None,
    };
    let since_seconds = int("sinceSeconds")?;
    if since_seconds.is_some() && since_time.is_some() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PodLogOptions \"\" is invalid: sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    if since_seconds.is_some_and(|s| s < 1) {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PodLogOptions \"\" is invalid: sinceSeconds: Invalid value: must be greater than 0",
        ));
    }
    let tail = int("tailLines")?;
    if tail.is_some_and(|t| t < 0) {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PodLogOptions \"\" is invalid: tailLines: Invalid value: must be greater than or equal to 0",
        ));
    }
    let limit = int("limitBytes")?;
    if limit.is_some_and(|l| l < 1) {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PodLogOptions \"\" is invalid: limitBytes: Invalid value: must be greater than 0",
        ));
    }
    Ok(LogParams {
        container: q.get("container").cloned(),
        follow: truthy(q.get("follow")),
        timestamps: truthy(q.get("timestamps")),
        since_time,
        since_seconds,
        tail_lines: tail,
        limit_bytes: limit.map(|l| l as u64),
        previous: truthy(q.get("previous")),
    })
}

#[allow(clippy::too_many_arguments)]
fn watch(
    inner: &Arc<Inner>,
    res_id: ResId,
    ns: Option<String>,
    ls: LabelSelector,
    fs: FieldSelector,
    query: &HashMap<String, String>,
    as_table: bool,
    faults: &Faults,
) -> ApiResult<Response<Body>> {
    let rv = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: {v:?}: must be an unsigned integer"
            ))
        })?),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let expire =
        (faults.watch_expire_secs > 0.0).then(|| Duration::from_secs_f64(faults.watch_expire_secs));
    let limit = match (timeout, expire) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let w = WatchSpec {
        res_id,
        ns,
        ls,
        fs,
        rv,
        bookmarks: truthy(query.get("allowWatchBookmarks")),
        initial_events_end: truthy(query.get("sendInitialEvents")),
        deadline: limit.map(|d| Instant::now() + d),
        table: as_table
            .then(|| IncludeObject::parse(query.get("includeObject").map(String::as_str))),
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run_watch(inner.clone(), w, tx));
    Ok(stream_response("application/json", rx))
}

struct WatchSpec {
    res_id: ResId,
    ns: Option<String>,
    ls: LabelSelector,
    fs: FieldSelector,
    rv: Option<u64>,
    bookmarks: bool,
    initial_events_end: bool,
    deadline: Option<Instant>,
    table: Option<IncludeObject>,
}

fn encode_event(w: &WatchSpec, etype: &str, obj: &Value, first: &mut bool, rv: u64) -> Vec<u8> {
    let object = match (w.table, etype) {
        (Some(inc), "ADDED" | "MODIFIED" | "DELETED") => {
            let t = table::table(res(w.res_id), [obj], rv, inc, *first);
            *first = false;
            t
        }
        _ => obj.clone(),
    };
    let mut line =
        serde_json::to_vec(&json!({"type": etype, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

fn bookmark(w: &WatchSpec, rv: u64, initial_end: bool) -> Value {
    let def = res(w.res_id);
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
}

fn gone_event(rv: u64, oldest: u64) -> Vec<u8> {
    let e = ApiError::gone(format!("too old resource version: {rv} ({})", oldest + 1));
    let mut line =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    line.push(b'\n');
    line
}

async fn run_watch(inner: Arc<Inner>, w: WatchSpec, tx: mpsc::Sender<Result<Bytes, io::Error>>) {
    let store = &inner.store;
    let mut notify = store.subscribe();
    notify.borrow_and_update();
    let mut first = true;
    let mut cur = match w.rv {
        Some(rv) => rv,
        None => {
            let (items, rv) = store.list(w.res_id, w.ns.as_deref(), &w.ls, &w.fs);
            let mut buf = Vec::new();
            for it in &items {
                buf.extend(encode_event(&w, "ADDED", it, &mut first, rv));
            }
            if w.initial_events_end && w.bookmarks {
                let mut line = serde_json::to_vec(
                    &json!({"type": "BOOKMARK", "object": bookmark(&w, rv, true)}),
                )
                .unwrap_or_default();
                line.push(b'\n');
                buf.extend(line);
            }
            if !buf.is_empty() && tx.send(Ok(Bytes::from(buf))).await.is_err() {
                return;
            }
            rv
        }
    };
    let bookmark_every = inner.bookmark_interval;
    let mut last_sent = Instant::now();
    loop {
        notify.borrow_and_update();
        match store.events_after(cur, w.res_id, w.ns.as_deref()) {
            Err(oldest) => {
                let _ = tx.send(Ok(Bytes::from(gone_event(cur, oldest)))).await;
                return;
            }
            Ok(events) => {
                let mut buf = Vec::new();
                for e in &events {
                    cur = e.rv;
                    let now_match = w.ls.matches(&e.obj) && w.fs.matches(&e.obj);
                    let old_match = e
                        .old
                        .as_ref()
                        .is_some_and(|o| w.ls.matches(o) && w.fs.matches(o));
                    let etype = match e.kind {
                        EventType::Added if now_match => "ADDED",
                        EventType::Deleted if now_match || old_match => "DELETED",
                        EventType::Modified if now_match && old_match => "MODIFIED",
                        EventType::Modified if now_match => "ADDED",
                        EventType::Modified if old_match => "DELETED",
                        _ => continue,
                    };
                    buf.extend(encode_event(&w, etype, &e.obj, &mut first, e.rv));
                }
                if !buf.is_empty() {
                    if tx.send(Ok(Bytes::from(buf))).await.is_err() {
                        return;
                    }
                    last_sent = Instant::now();
                }
            }
        }
        let now = Instant::now();
        if w.deadline.is_some_and(|d| now >= d) {
            return;
        }
        let mut wake = now + Duration::from_millis(500);
        if w.bookmarks {
            wake = wake.min(last_sent + bookmark_every);
        }
        if let Some(d) = w.deadline {
            wake = wake.min(d);
        }
        tokio::select! {
            r = notify.changed() => { if r.is_err() { return; } }
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = tx.closed() => return,
        }
        if w.bookmarks && Instant::now() >= last_sent + bookmark_every {
            let rv = store.resource_version().max(cur);
            // Only advance past events this watch has already seen.
            let rv = if store
                .events_after(cur, w.res_id, w.ns.as_deref())
                .is_ok_and(|e| e.is_empty())
            {
                rv
            } else {
                cur
            };
            let mut line =
                serde_json::to_vec(&json!({"type": "BOOKMARK", "object": bookmark(&w, rv, false)}))
                    .unwrap_or_default();
            line.push(b'\n');
            if tx.send(Ok(Bytes::from(line))).await.is_err() {
                return;
            }
            cur = rv;
            last_sent = Instant::now();
        }
    }
}

async fn control(inner: &Arc<Inner>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    match (method.as_str(), path.as_str()) {
        ("GET", "/fake/faults") => json_response(
            200,
            &serde_json::to_value(inner.faults()).unwrap_or_default(),
        ),
        ("POST" | "PUT" | "PATCH", "/fake/faults") => {
            let bytes = match read_body(req).await {
                Ok((_, b)) => b,
                Err(e) => return error_response(&e),
            };
            let patch: Value = match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    return error_response(&ApiError::bad_request(format!(
                        "invalid faults JSON: {e}"
                    )));
                }
            };
            let mut cur = serde_json::to_value(inner.faults()).unwrap_or_default();
            crate::patch::merge_patch(&mut cur, &patch);
            match serde_json::from_value::<Faults>(cur) {
                Ok(f) => {
                    inner.set_faults(f.clone());
                    json_response(200, &serde_json::to_value(f).unwrap_or_default())
                }
                Err(e) => error_response(&ApiError::bad_request(format!("invalid faults: {e}"))),
            }
        }
        ("GET", "/fake/stats") => json_response(200, &inner.stats.to_json()),
        ("POST" | "DELETE", "/fake/stats/reset") => {
            inner.stats.reset();
            json_response(200, &inner.stats.to_json())
        }
        ("GET", "/fake/healthz") => json_response(200, &success_status(json!({}))),
        _ => error_response(&ApiError::path_not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode() {
        assert_eq!(percent_decode("a%3Db%2Cc+d"), "a=b,c d");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        let q = parse_query(Some("labelSelector=app%20in%20(a%2Cb)&watch=1&x"));
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert_eq!(q["x"], "");
    }

    #[test]
    fn forbid_message() {
        let e = forbidden(
            &["list:pods".into()],
            "list",
            "pods",
            "",
            Some("default"),
            None,
        )
        .unwrap();
        assert_eq!(
            e.message,
            "pods is forbidden: User \"fake\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        assert!(
            forbidden(
                &["list:pods".into()],
                "get",
                "pods",
                "",
                Some("default"),
                Some("x")
            )
            .is_none()
        );
        let e = forbidden(
            &["*:mpijobs".into()],
            "create",
            "mpijobs",
            "kubeflow.org",
            Some("d"),
            None,
        )
        .unwrap();
        assert_eq!(e.code, 403);
        assert_eq!(e.details.unwrap()["group"], "kubeflow.org");
    }
}
