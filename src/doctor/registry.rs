//! Is the image in its registry? A manifest `HEAD` through the registry API v2, with the
//! user's Docker credentials (`crate::image::auth`): basic auth, or the bearer token the
//! registry's `WWW-Authenticate` points to. Only a 404 from a registry that answered means
//! the image is not there; anything else (unreachable, unauthorised) is "cannot tell".

use crate::error::{Error, Result};
use crate::image::auth::{self, Credentials};
use crate::image::reference::ImageRef;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// What the registry said about the image's manifest.
#[derive(Debug, Clone)]
pub enum Manifest {
    Present,
    /// A 404 from the registry: definitively not there.
    Missing(String),
    /// The registry refused the credentials (or there were none).
    Unauthorized(String),
    /// No answer (connection, TLS, timeout, an unexpected status); the error keeps what it
    /// came from (`-v` shows the chain).
    Unreachable(Error),
}

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
const TIMEOUT: Duration = Duration::from_secs(5);

/// `http` for a registry on this machine (as docker treats it), else `https`.
fn scheme(r: &ImageRef) -> &'static str {
    let host = r
        .api_host()
        .rsplit_once(':')
        .map_or(r.api_host(), |(h, _)| h);
    if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
        "http"
    } else {
        "https"
    }
}

/// The manifest's address in the registry's API.
fn manifest_url(r: &ImageRef) -> String {
    format!(
        "{}://{}/v2/{}/manifests/{}",
        scheme(r),
        r.api_host(),
        r.api_path(),
        r.reference()
    )
}

type Http = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

fn client() -> Result<Http> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| Error::failure(format!("no TLS root certificates: {e}")).caused_by(e))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

async fn send(
    http: &Http,
    method: Method,
    url: &str,
    authorization: Option<&str>,
) -> Result<(StatusCode, hyper::HeaderMap, Bytes)> {
    let mut req = Request::builder()
        .method(method)
        .uri(url)
        .header("Accept", ACCEPT)
        .header("User-Agent", concat!("hvdctl/", env!("CARGO_PKG_VERSION")));
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    let req = req
        .body(Empty::new())
        .map_err(|e| Error::failure(format!("{url}: {e}")).caused_by(e))?;
    let resp = tokio::time::timeout(TIMEOUT, http.request(req))
        .await
        .map_err(|_| Error::failure(format!("no answer in {} s", TIMEOUT.as_secs())))?
        // hyper's own words ("client error (Connect)") say little: the message is the
        // deepest cause's; `-v` shows the whole chain.
        .map_err(|e| Error::failure(deepest_cause(&e)).caused_by(e))?;
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(TIMEOUT, body.collect())
        .await
        .map_err(|_| Error::failure("the body took too long"))?
        .map_err(|e| Error::failure(deepest_cause(&e)).caused_by(e))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// The last error of `e`'s chain (the operating system's or the TLS library's words).
fn deepest_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// `key="value"` pairs of a `WWW-Authenticate: Bearer …` header.
fn challenge(h: &str) -> Option<(String, Vec<(String, String)>)> {
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = Vec::new();
    for part in rest.split(',') {
        if let Some((k, v)) = part.trim().split_once('=') {
            params.push((k.trim().to_string(), v.trim().trim_matches('"').to_string()));
        }
    }
    Some((scheme.to_ascii_lowercase(), params))
}

/// The `Authorization` value for a retry after a 401 with `www_authenticate`.
async fn authorize(
    http: &Http,
    r: &ImageRef,
    www_authenticate: &str,
    creds: Option<&Credentials>,
) -> Result<Option<String>> {
    let basic = creds.and_then(Credentials::basic_authorization);
    let Some((scheme, params)) = challenge(www_authenticate) else {
        return Ok(None);
    };
    if scheme == "basic" {
        return Ok(basic);
    }
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let Some(realm) = get("realm") else {
        return Ok(None);
    };
    let mut url = format!("{realm}?scope=repository:{}:pull", r.api_path());
    if let Some(service) = get("service") {
        url.push_str(&format!("&service={service}"));
    }
    let (status, _, body) = send(http, Method::GET, &url, basic.as_deref()).await?;
    if !status.is_success() {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    Ok(v.get("token")
        .or_else(|| v.get("access_token"))
        .and_then(|t| t.as_str())
        .map(|t| format!("Bearer {t}")))
}

/// Asks the image's registry for its manifest.
pub async fn manifest(image: &str) -> Manifest {
    let r = match ImageRef::parse(image) {
        Ok(r) => r,
        Err(e) => return Manifest::Unreachable(Error::input(format!("{image}: {e}"))),
    };
    let http = match client() {
        Ok(h) => h,
        Err(e) => return Manifest::Unreachable(e),
    };
    // A helper that fails is named where it matters: when the registry wants credentials.
    let (creds, creds_error) = match auth::lookup_credentials(image).await {
        Ok(c) => (c, None),
        Err(e) => (None, Some(e.message)),
    };
    let url = manifest_url(&r);
    let mut result = send(&http, Method::HEAD, &url, None).await;
    if let Ok((StatusCode::UNAUTHORIZED, headers, _)) = &result {
        let www = headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        match authorize(&http, &r, &www, creds.as_ref()).await {
            Ok(Some(a)) => result = send(&http, Method::HEAD, &url, Some(&a)).await,
            Ok(None) => {}
            Err(e) => return Manifest::Unreachable(e.context(r.registry())),
        }
    }
    let who = match (&creds, creds_error) {
        (Some(c), _) => format!("as {}", c.username().unwrap_or("an identity token")),
        (None, Some(e)) => format!("without credentials, which could not be read: {e}"),
        (None, None) => "without credentials".into(),
    };
    match result {
        Ok((s, _, _)) if s.is_success() => Manifest::Present,
        Ok((StatusCode::NOT_FOUND, _, _)) => Manifest::Missing(format!(
            "{} answered 404 for {}:{} (asked {who})",
            r.registry(),
            r.api_path(),
            r.reference()
        )),
        Ok((s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN), _, _)) => {
            Manifest::Unauthorized(format!("{} answered {s} {who}", r.registry()))
        }
        Ok((s, _, _)) => {
            Manifest::Unreachable(Error::failure(format!("{} answered {s}", r.registry())))
        }
        Err(e) => Manifest::Unreachable(e.context(r.registry())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_addresses() {
        let url = |s| manifest_url(&ImageRef::parse(s).unwrap());
        assert_eq!(
            url("127.0.0.1:5000/team/app:v1"),
            "http://127.0.0.1:5000/v2/team/app/manifests/v1"
        );
        assert_eq!(
            url("busybox"),
            "https://registry-1.docker.io/v2/library/busybox/manifests/latest"
        );
        let sha = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            url(&format!("ghcr.io/x/y@{sha}")),
            format!("https://ghcr.io/v2/x/y/manifests/{sha}")
        );
    }
}
