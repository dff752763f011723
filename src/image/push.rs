//! Pushing an image, and asking a registry whether a tag is already there.
//!
//! The daemon does the registry work (so its insecure-registry settings and proxies apply);
//! hvdctl hands it the credentials in `X-Registry-Auth` and shows its progress: one bar per
//! layer on a terminal, a line per layer state change otherwise. An authentication failure
//! becomes a [`Kind::Failure`](crate::error::Kind) naming the registry, with a `docker login`
//! hint; the secret never appears in any output or error.

use std::collections::HashMap;
use std::io::Write;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;

use super::auth::{Credentials, registry_of};
use super::docker::DockerClient;
use super::progress::ProgressMode;
use super::tag::{validate_repo, validate_tag};
use crate::error::{Error, Result};

/// What to push.
#[derive(Debug, Clone)]
pub struct PushRequest {
    /// Image repository, e.g. `127.0.0.1:5000/team/mnist`.
    pub repo: String,
    pub tag: String,
    pub progress: ProgressMode,
}

impl PushRequest {
    pub fn new(repo: impl Into<String>, tag: impl Into<String>) -> Self {
        PushRequest {
            repo: repo.into(),
            tag: tag.into(),
            progress: ProgressMode::Auto,
        }
    }

    /// `repo:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.repo, self.tag)
    }
}

/// A pushed image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedImage {
    /// `repo:tag`.
    pub reference: String,
    /// The manifest digest the registry stored (`sha256:…`).
    pub digest: String,
    /// The manifest size in bytes.
    pub size: u64,
}

#[derive(Debug, Deserialize)]
struct PushMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default, rename = "progressDetail")]
    progress: Option<ProgressDetail>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorDetail")]
    error_detail: Option<ErrorDetail>,
    #[serde(default)]
    aux: Option<PushAux>,
}

#[derive(Debug, Default, Deserialize)]
struct ProgressDetail {
    #[serde(default)]
    current: Option<u64>,
    #[serde(default)]
    total: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PushAux {
    #[serde(default, rename = "Digest")]
    digest: Option<String>,
    #[serde(default, rename = "Size")]
    size: Option<u64>,
}

fn auth_header(credentials: Option<&Credentials>) -> String {
    use base64::Engine;
    match credentials {
        Some(c) => c.registry_auth_header(),
        // The daemon insists on the header; an empty auth config means anonymous.
        None => base64::engine::general_purpose::URL_SAFE.encode("{}"),
    }
}

fn path_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Pushes `repo:tag` with `credentials` (see [`super::auth::credentials_for_repo`]); plain
/// progress lines go to `log`. Returns the digest the registry stored.
pub async fn push(
    docker: &DockerClient,
    req: &PushRequest,
    credentials: Option<&Credentials>,
    log: &mut (dyn Write + Send),
) -> Result<PushedImage> {
    validate_repo(&req.repo)?;
    validate_tag(&req.tag)?;
    let reference = req.reference();
    let registry = registry_of(&req.repo);
    let redact = |s: &str| {
        credentials
            .map(|c| c.redact(s))
            .unwrap_or_else(|| s.to_string())
    };
    let path = format!(
        "/images/{}/push?tag={}",
        path_escape(&req.repo),
        path_escape(&req.tag)
    );
    let mut lines = docker
        .json_stream::<PushMessage>(
            hyper::Method::POST,
            &path,
            &[("X-Registry-Auth", auth_header(credentials))],
        )
        .await
        .map_err(|e| push_error(&reference, &registry, credentials, &redact(&e.message)))?;

    let mut ui = PushUi::new(req.progress);
    let mut digest = None;
    let mut size = 0;
    let outcome: Result<()> = loop {
        let msg = match lines.next().await {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.context(format!("pushing {reference}"))),
        };
        if let Some(err) = msg.error_detail.and_then(|d| d.message).or(msg.error) {
            break Err(push_error(
                &reference,
                &registry,
                credentials,
                &redact(&err),
            ));
        }
        if let Some(aux) = msg.aux {
            if let Some(d) = aux.digest {
                digest = Some(d);
                size = aux.size.unwrap_or(0);
            }
            continue;
        }
        if let Some(status) = msg.status {
            ui.update(
                log,
                msg.id.as_deref(),
                &redact(&status),
                msg.progress.unwrap_or_default(),
            );
        }
    };
    ui.finish();
    outcome?;
    let Some(digest) = digest else {
        return Err(Error::failure(format!(
            "pushing {reference}: the daemon ended without reporting a digest"
        )));
    };
    let _ = writeln!(log, "pushed {reference} ({digest})");
    Ok(PushedImage {
        reference,
        digest,
        size,
    })
}

fn is_auth_failure(message: &str) -> bool {
    let m = message.to_lowercase();
    [
        "unauthorized",
        "authentication required",
        "no basic auth credentials",
        "denied",
        "401",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// The registry refused `credentials` (or there were none).
fn auth_error(
    reference: &str,
    registry: &str,
    credentials: Option<&Credentials>,
    message: &str,
) -> Error {
    let who = match credentials.and_then(|c| c.username()) {
        Some(user) => format!("the credentials of user {user:?} were rejected"),
        None if credentials.is_some() => "the identity token was rejected".to_string(),
        None => "no credentials for this registry were found in the Docker config".to_string(),
    };
    Error::failure(format!(
        "pushing {reference}: registry {registry}: authentication required / unauthorized ({who}): {message}"
    ))
    .hint(format!("log in with `docker login {registry}` (hvdctl reads the credentials it stores), then push again"))
}

fn push_error(
    reference: &str,
    registry: &str,
    credentials: Option<&Credentials>,
    message: &str,
) -> Error {
    // A push's progress stream carries only the registry's words: no status to read.
    if is_auth_failure(message) {
        return auth_error(reference, registry, credentials, message);
    }
    let mut err = Error::failure(format!("pushing {reference} to {registry}: {message}"));
    let m = message.to_lowercase();
    if m.contains("does not exist locally") || m.contains("no such image") {
        err = err.hint("build the image first (hvdctl build)");
    } else if m.contains("connection refused")
        || m.contains("no such host")
        || m.contains("i/o timeout")
    {
        err = err.hint(format!(
            "is the registry {registry} up and reachable from the Docker daemon?"
        ));
    } else if m.contains("server gave http response to https client") {
        err = err.hint(format!(
            "the registry speaks plain HTTP: add \"{registry}\" to \"insecure-registries\" in the daemon's daemon.json"
        ));
    }
    err
}

/// Is `repo:tag` already in its registry? Asks through the daemon (`GET /distribution/…`),
/// so the daemon's registry settings apply. Unknown tag or repository → `false`; rejected
/// credentials → an authentication error as for [`push`].
pub async fn tag_exists(
    docker: &DockerClient,
    repo: &str,
    tag: &str,
    credentials: Option<&Credentials>,
) -> Result<bool> {
    validate_repo(repo)?;
    validate_tag(tag)?;
    let reference = format!("{repo}:{tag}");
    let registry = registry_of(repo);
    let asked = docker
        .bollard()
        .inspect_registry_image(&reference, credentials.map(Credentials::bollard))
        .await;
    let (status, message) = match asked {
        Ok(_) => return Ok(true),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        }) => (status_code, message),
        Err(e) => {
            return Err(Error::failure(format!(
                "looking up {reference} through the Docker daemon at {}: {}",
                docker.host().describe(),
                super::docker::describe_bollard(&e)
            ))
            .caused_by(e));
        }
    };
    let message = credentials.map(|c| c.redact(&message)).unwrap_or(message);
    // The daemon's status says it; an older daemon relays the registry's MANIFEST_UNKNOWN or
    // NAME_UNKNOWN error code (the distribution API's "no such tag / repository") with a 500.
    let code = message.to_ascii_lowercase();
    if status == 404 || code.contains("manifest unknown") || code.contains("name unknown") {
        return Ok(false);
    }
    let err = if matches!(status, 401 | 403) {
        auth_error(&reference, &registry, credentials, &message)
    } else {
        push_error(&reference, &registry, credentials, &message)
    };
    Err(Error {
        message: err.message.replacen("pushing", "looking up", 1),
        ..err
    })
}

/// Terminal bars or plain lines for one push.
struct PushUi {
    multi: Option<MultiProgress>,
    bars: HashMap<String, ProgressBar>,
    last: HashMap<String, String>,
}

impl PushUi {
    fn new(mode: ProgressMode) -> PushUi {
        let multi = mode
            .use_bars()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        PushUi {
            multi,
            bars: HashMap::new(),
            last: HashMap::new(),
        }
    }

    fn update(
        &mut self,
        log: &mut dyn Write,
        id: Option<&str>,
        status: &str,
        detail: ProgressDetail,
    ) {
        let Some(multi) = &self.multi else {
            // Plain: one line per change of state; byte counts are left to the terminal UI.
            let key = id.unwrap_or("").to_string();
            if self.last.get(&key).map(String::as_str) != Some(status) {
                self.last.insert(key, status.to_string());
                let _ = match id {
                    Some(id) => writeln!(log, "{id}: {status}"),
                    None => writeln!(log, "{status}"),
                };
            }
            return;
        };
        let Some(id) = id else {
            let _ = multi.println(status);
            return;
        };
        let bar = self.bars.entry(id.to_string()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(0));
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} {bar:30.cyan/blue} {bytes:>10}/{total_bytes:10} {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(id.to_string());
            bar
        });
        if let Some(total) = detail.total {
            bar.set_length(total);
        }
        if let Some(current) = detail.current {
            bar.set_position(current);
        }
        bar.set_message(status.to_string());
        let done = status.starts_with("Pushed")
            || status.starts_with("Layer already exists")
            || status.starts_with("Mounted from");
        if done {
            if bar.length().unwrap_or(0) > 0 {
                bar.set_position(bar.length().unwrap_or(0));
            }
            bar.finish_with_message(status.to_string());
        }
    }

    /// Leaves every layer's last state on screen.
    fn finish(&mut self) {
        for bar in self.bars.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_errors_name_the_registry_and_hide_the_secret() {
        let c = Credentials::basic("127.0.0.1:5000", "hvdctl", "s3cr3t-pw");
        let e = push_error(
            "127.0.0.1:5000/a:t",
            "127.0.0.1:5000",
            Some(&c),
            "unauthorized: authentication required",
        );
        let text = e.to_string();
        assert!(text.contains("127.0.0.1:5000"), "{text}");
        assert!(
            text.contains("authentication required / unauthorized"),
            "{text}"
        );
        assert!(text.contains("docker login 127.0.0.1:5000"), "{text}");
        assert!(!text.contains("s3cr3t-pw"));
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn escapes_paths() {
        assert_eq!(path_escape("127.0.0.1:5000/a_b/c"), "127.0.0.1:5000/a_b/c");
        assert_eq!(path_escape("a b?"), "a%20b%3F");
    }
}
