//! Is the image in its registry? A manifest `HEAD` through the registry API v2, with the
//! user's Docker credentials (`crate::image::auth`): basic auth, or the bearer token the
//! registry's `WWW-Authenticate` points to. Only a 404 from a registry that answered means
//! the image is not there; anything else (unreachable, unauthorised) is "cannot tell".

use crate::image::auth::{self, Credentials};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// What the registry said about the image's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifest {
    Present,
    /// A 404 from the registry: definitively not there.
    Missing(String),
    /// The registry refused the credentials (or there were none).
    Unauthorized(String),
    /// No answer (connection, TLS, timeout, an unexpected status).
    Unreachable(String),
}

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
const TIMEOUT: Duration = Duration::from_secs(5);

/// An image reference split for the registry API: host, repository path, tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    /// The host requests go to (`registry-1.docker.io` for Docker Hub).
    pub host: String,
    pub path: String,
    pub reference: String,
}

impl Reference {
    pub fn parse(image: &str) -> Reference {
        let (name, digest) = match image.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (image, None),
        };
        let (name, tag) = match name.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, Some(t)),
            _ => (name, None),
        };
        let registry = auth::registry_of(name);
        let hub = registry == auth::registry_of("x");
        let path = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                rest.to_string()
            }
            _ => name.to_string(),
        };
        let path = if hub && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        Reference {
            host: if hub {
                "registry-1.docker.io".into()
            } else {
                registry.clone()
            },
            registry,
            path,
            reference: digest.or(tag).unwrap_or("latest").to_string(),
        }
    }

    fn scheme(&self) -> &'static str {
        let host = self
            .host
            .rsplit_once(':')
            .map_or(self.host.as_str(), |(h, _)| h);
        if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
            "http"
        } else {
            "https"
        }
    }

    fn url(&self) -> String {
        format!(
            "{}://{}/v2/{}/manifests/{}",
            self.scheme(),
            self.host,
            self.path,
            self.reference
        )
    }
}

type Http = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

fn client() -> Result<Http, String> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("no TLS root certificates: {e}"))?
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
) -> Result<(StatusCode, hyper::HeaderMap, Bytes), String> {
    let mut req = Request::builder()
        .method(method)
        .uri(url)
        .header("Accept", ACCEPT)
        .header("User-Agent", concat!("hvdctl/", env!("CARGO_PKG_VERSION")));
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(TIMEOUT, http.request(req))
        .await
        .map_err(|_| format!("no answer in {} s", TIMEOUT.as_secs()))?
        .map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg = format!("{msg}: {s}");
                src = s.source();
            }
            msg
        })?;
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(TIMEOUT, body.collect())
        .await
        .map_err(|_| "the body took too long".to_string())?
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
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
    r: &Reference,
    www_authenticate: &str,
    creds: Option<&Credentials>,
) -> Result<Option<String>, String> {
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
    let mut url = format!("{realm}?scope=repository:{}:pull", r.path);
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
    let r = Reference::parse(image);
    let http = match client() {
        Ok(h) => h,
        Err(e) => return Manifest::Unreachable(e),
    };
    // A helper that fails is named where it matters: when the registry wants credentials.
    let (creds, creds_error) = match auth::lookup_credentials(image).await {
        Ok(c) => (c, None),
        Err(e) => (None, Some(e.message)),
    };
    let url = r.url();
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
            Err(e) => return Manifest::Unreachable(e),
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
            r.registry, r.path, r.reference
        )),
        Ok((s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN), _, _)) => {
            Manifest::Unauthorized(format!("{} answered {s} {who}", r.registry))
        }
        Ok((s, _, _)) => Manifest::Unreachable(format!("{} answered {s}", r.registry)),
        Err(e) => Manifest::Unreachable(format!("{}: {e}", r.registry)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = Reference::parse("127.0.0.1:5000/team/app:v1");
        assert_eq!(
            (
                r.host.as_str(),
                r.path.as_str(),
                r.reference.as_str(),
                r.url()
            ),
            (
                "127.0.0.1:5000",
                "team/app",
                "v1",
                "http://127.0.0.1:5000/v2/team/app/manifests/v1".to_string()
            )
        );
        let r = Reference::parse("busybox");
        assert_eq!(
            (r.host.as_str(), r.path.as_str(), r.reference.as_str()),
            ("registry-1.docker.io", "library/busybox", "latest")
        );
        let r = Reference::parse("ghcr.io/x/y@sha256:abc");
        assert_eq!(r.url(), "https://ghcr.io/v2/x/y/manifests/sha256:abc");
        let r = Reference::parse("horovod/horovod:0.28.1");
        assert_eq!(r.path, "horovod/horovod");
    }
}
