//! Registry credentials, found the way the Docker CLI finds them.
//!
//! The config file is `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`; a missing
//! file means "no credentials". For a registry:
//!
//! 1. a `credHelpers` entry for that registry names a helper; else
//! 2. a `credsStore` names the helper for every registry; the helper is run as
//!    `docker-credential-<name> get` with the server address on stdin and answers
//!    `{"ServerURL":…,"Username":…,"Secret":…}` (username `<token>` means an identity token);
//!    "credentials not found" means none;
//! 3. otherwise the `auths` entry: `auth` is base64 `user:password`, `identitytoken` a token.
//!
//! Entries match by host: `https://127.0.0.1:5000/v2/`, `http://127.0.0.1:5000` and
//! `127.0.0.1:5000` are the same registry. Docker Hub answers to `docker.io`,
//! `index.docker.io`, `registry-1.docker.io` and `https://index.docker.io/v1/` (the key
//! `docker login` writes and the address helpers are asked for).
//!
//! [`Credentials`] keep the secret out of `Debug`/`Display` and never serialize it except into
//! the daemon's `X-Registry-Auth` header.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde::Deserialize;

use super::reference::{DOCKER_HUB, ImageRef, is_docker_hub_host};
use crate::error::{Error, Result};

/// The key Docker Hub credentials are stored under, and the address helpers are asked for.
pub const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";

/// A secret string: compared and used, never shown.
#[derive(Clone, PartialEq, Eq)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Clone, PartialEq, Eq)]
enum SecretKind {
    Password,
    IdentityToken,
}

/// Credentials for one registry. `Debug` and `Display` show the registry and user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    server: String,
    username: Option<String>,
    secret: Secret,
    kind: SecretKind,
}

impl Credentials {
    /// User name and password for `server` (a host such as `127.0.0.1:5000`).
    pub fn basic(
        server: impl Into<String>,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Credentials {
            server: server.into(),
            username: Some(username.into()),
            secret: Secret(password.into()),
            kind: SecretKind::Password,
        }
    }

    /// An OAuth identity (refresh) token for `server`.
    pub fn identity_token(server: impl Into<String>, token: impl Into<String>) -> Self {
        Credentials {
            server: server.into(),
            username: None,
            secret: Secret(token.into()),
            kind: SecretKind::IdentityToken,
        }
    }

    /// The server address these credentials are for.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The user name, if any (identity tokens have none).
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// True for an identity token rather than a password.
    pub fn is_identity_token(&self) -> bool {
        self.kind == SecretKind::IdentityToken
    }

    /// The `Authorization` value for HTTP basic auth (`Basic base64(user:password)`); None
    /// for an identity token, which is exchanged through OAuth instead.
    pub fn basic_authorization(&self) -> Option<String> {
        use base64::Engine;
        let user = self.username.as_deref()?;
        (self.kind == SecretKind::Password).then(|| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{user}:{}", self.secret.0))
            )
        })
    }

    /// Replaces every occurrence of the secret in `text` with `***` (a last line of defence
    /// for messages that came from elsewhere).
    pub fn redact(&self, text: &str) -> String {
        if self.secret.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.secret.0, "***")
        }
    }

    /// The value of the Engine API's `X-Registry-Auth` header (URL-safe base64 of the JSON
    /// auth config, as the Docker CLI sends it).
    pub(crate) fn registry_auth_header(&self) -> String {
        URL_SAFE.encode(self.auth_json().to_string())
    }

    /// The credentials as bollard sends them (its `X-Registry-Auth`/`X-Registry-Config`).
    pub(crate) fn bollard(&self) -> bollard::auth::DockerCredentials {
        let (username, password, identitytoken) = match self.kind {
            SecretKind::Password => (
                Some(self.username.clone().unwrap_or_default()),
                Some(self.secret.0.clone()),
                None,
            ),
            SecretKind::IdentityToken => (None, None, Some(self.secret.0.clone())),
        };
        bollard::auth::DockerCredentials {
            username,
            password,
            identitytoken,
            serveraddress: Some(self.server.clone()),
            ..Default::default()
        }
    }

    pub(crate) fn auth_json(&self) -> serde_json::Value {
        match self.kind {
            SecretKind::Password => serde_json::json!({
                "username": self.username.clone().unwrap_or_default(),
                "password": self.secret.0,
                "serveraddress": self.server,
            }),
            SecretKind::IdentityToken => serde_json::json!({
                "identitytoken": self.secret.0,
                "serveraddress": self.server,
            }),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("username", &self.username)
            .field(
                "secret",
                &match self.kind {
                    SecretKind::Password => "<password redacted>",
                    SecretKind::IdentityToken => "<identity token redacted>",
                },
            )
            .finish()
    }
}

impl fmt::Display for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.username {
            Some(u) => write!(f, "{u}@{}", crate::text::redact_url(&self.server)),
            None => write!(
                f,
                "identity token for {}",
                crate::text::redact_url(&self.server)
            ),
        }
    }
}

/// The registry part of an image repository: `127.0.0.1:5000/team/app` → `127.0.0.1:5000`,
/// `ghcr.io/x/y` → `ghcr.io`, `team/app`, `app` and `docker.io/x` → `docker.io`
/// ([`ImageRef::registry`]; what is not a reference is Docker Hub's, as docker would ask).
pub fn registry_of(repo: &str) -> String {
    ImageRef::parse(repo).map_or_else(|_| DOCKER_HUB.to_string(), |r| r.registry().to_string())
}

/// The host of a registry address: drops `http(s)://` and any path. `https://index.docker.io/v1/`
/// → `index.docker.io`.
pub fn hostname_of(server: &str) -> &str {
    let s = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))
        .unwrap_or(server);
    s.split('/').next().unwrap_or(s)
}

fn is_hub(host: &str) -> bool {
    is_docker_hub_host(hostname_of(host))
}

fn same_registry(a: &str, b: &str) -> bool {
    let (ha, hb) = (hostname_of(a), hostname_of(b));
    ha == hb || (is_hub(ha) && is_hub(hb))
}

#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    #[serde(default)]
    auths: BTreeMap<String, RawAuth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
struct RawAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

impl fmt::Debug for RawAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawAuth(<redacted>)")
    }
}

/// The credential parts of a Docker CLI config file.
#[derive(Debug, Default)]
pub struct DockerConfig {
    path: Option<PathBuf>,
    raw: RawConfig,
    helper_path: Option<OsString>,
}

impl DockerConfig {
    /// Loads `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`; a missing file gives an
    /// empty config.
    pub fn load() -> Result<DockerConfig> {
        let dir = match std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(h) => PathBuf::from(h).join(".docker"),
                None => return Ok(DockerConfig::default()),
            },
        };
        DockerConfig::load_from(&dir)
    }

    /// Loads `dir/config.json`; a missing file gives an empty config.
    pub fn load_from(dir: &Path) -> Result<DockerConfig> {
        let path = dir.join("config.json");
        let kind = crate::files::DOCKER_CONFIG;
        let text = match crate::files::read_text(&path, kind) {
            Ok(t) => t,
            Err(crate::files::Refused::Missing) => {
                return Ok(DockerConfig {
                    path: None,
                    ..Default::default()
                });
            }
            Err(r) => return Err(r.error(&path, kind)),
        };
        DockerConfig::parse(&text, Some(path))
    }

    /// Parses config.json text (`path` is only used in messages).
    pub fn parse(text: &str, path: Option<PathBuf>) -> Result<DockerConfig> {
        let where_ = path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "docker config".into());
        // serde_json's messages quote no values, only positions, so no secret leaks here.
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_json::from_str(text).map_err(|e| {
                Error::input(format!("{where_}: not a valid Docker config file: {e}"))
            })?
        };
        Ok(DockerConfig {
            path,
            raw,
            helper_path: None,
        })
    }

    /// The file this config came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Looks credential helpers up in `path` (a `PATH`-style list) instead of `$PATH`.
    pub fn set_helper_path(&mut self, path: impl Into<OsString>) {
        self.helper_path = Some(path.into());
    }

    /// The credential helper that serves `registry`, if any (`credHelpers` first, then
    /// `credsStore`).
    pub fn helper_for(&self, registry: &str) -> Option<&str> {
        self.raw
            .cred_helpers
            .iter()
            .find(|(k, _)| same_registry(k, registry))
            .map(|(_, v)| v.as_str())
            .or(self.raw.creds_store.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// Credentials for `registry` (a host like `127.0.0.1:5000`, `docker.io`, or any key form
    /// Docker accepts), or `None` if the config has none for it.
    pub fn credentials_for(&self, registry: &str) -> Result<Option<Credentials>> {
        let hub = is_hub(registry);
        let server = if hub {
            DOCKER_HUB_SERVER.to_string()
        } else {
            hostname_of(registry).to_string()
        };
        if let Some(helper) = self.helper_for(registry) {
            return self.ask_helper(helper, &server);
        }
        let entry = self
            .raw
            .auths
            .get(&server)
            .map(|a| (server.as_str(), a))
            .or_else(|| {
                self.raw
                    .auths
                    .iter()
                    .find(|(k, _)| same_registry(k, registry))
                    .map(|(k, a)| (k.as_str(), a))
            });
        let Some((key, auth)) = entry else {
            return Ok(None);
        };
        let where_ = || {
            format!(
                "{}: auths[{key:?}]",
                self.path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "docker config".into())
            )
        };
        if let Some(token) = auth.identitytoken.as_deref().filter(|t| !t.is_empty()) {
            return Ok(Some(Credentials::identity_token(server, token)));
        }
        if let Some(encoded) = auth.auth.as_deref().filter(|a| !a.is_empty()) {
            let decoded = STANDARD
                .decode(encoded.trim())
                .map_err(|_| Error::input(format!("{}: \"auth\" is not valid base64", where_())))?;
            let decoded = String::from_utf8(decoded)
                .map_err(|_| Error::input(format!("{}: \"auth\" is not UTF-8 text", where_())))?;
            let Some((user, pass)) = decoded.split_once(':') else {
                return Err(Error::input(format!(
                    "{}: \"auth\" must be base64 of \"user:password\"",
                    where_()
                )));
            };
            return Ok(Some(Credentials::basic(server, user, pass)));
        }
        if let (Some(u), Some(p)) = (&auth.username, &auth.password) {
            return Ok(Some(Credentials::basic(server, u.clone(), p.clone())));
        }
        Ok(None)
    }

    /// Credentials for every registry the config names explicitly (`auths` and `credHelpers`
    /// keys), for builds whose `FROM` images need them, and why each registry left out (its
    /// helper failed) is left out.
    pub fn all_credentials(&self) -> (Vec<Credentials>, Vec<String>) {
        let mut keys: Vec<&String> = self
            .raw
            .auths
            .keys()
            .chain(self.raw.cred_helpers.keys())
            .collect();
        keys.sort();
        keys.dedup();
        let mut out: Vec<Credentials> = Vec::new();
        let mut failed = Vec::new();
        for key in keys {
            match self.credentials_for(key) {
                Ok(Some(c)) if !out.iter().any(|o| o.server == c.server) => out.push(c),
                Ok(_) => {}
                Err(e) => failed.push(e.message),
            }
        }
        (out, failed)
    }

    fn ask_helper(&self, helper: &str, server: &str) -> Result<Option<Credentials>> {
        let shown = crate::text::redact_url(server);
        let program = format!("docker-credential-{helper}");
        let resolved = find_program(&program, self.helper_path.as_ref());
        let Some(resolved) = resolved else {
            return Err(Error::failure(format!(
                "the Docker config names the credential helper {helper:?} for {shown}, but {program} is not on PATH"
            ))
            .hint(format!("install {program}, or remove \"{helper}\" from credsStore/credHelpers in your Docker config")));
        };
        let timeout = crate::program::HELPER_TIMEOUT;
        let out = crate::program::output(
            Command::new(&resolved).arg("get"),
            Some(server.as_bytes()),
            timeout,
        )
        .map_err(|e| {
            let err = Error::failure(format!("credential helper {program} for {shown}: {e}"));
            match e {
                crate::program::Failed::TimedOut(_) => err.hint(format!(
                    "run `echo {shown} | {program} get` to see what it waits for (an unlocked keychain, a login)"
                )),
                _ => err,
            }
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let said = format!(
                "{} {}",
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            if said.to_lowercase().contains("credentials not found") {
                return Ok(None);
            }
            return Err(Error::failure(format!(
                "credential helper {program} failed for {shown} ({}): {}",
                out.status,
                said.trim()
            )));
        }
        #[derive(Deserialize)]
        struct HelperAnswer {
            #[serde(rename = "Username", default)]
            username: String,
            #[serde(rename = "Secret", default)]
            secret: String,
        }
        let answer: HelperAnswer = serde_json::from_str(stdout.trim()).map_err(|_| {
            // Not echoing the output: it may hold the secret.
            Error::failure(format!("credential helper {program} gave an answer that is not the expected JSON for {shown}"))
        })?;
        if answer.secret.is_empty() && answer.username.is_empty() {
            return Ok(None);
        }
        if answer.username == "<token>" {
            return Ok(Some(Credentials::identity_token(server, answer.secret)));
        }
        Ok(Some(Credentials::basic(
            server,
            answer.username,
            answer.secret,
        )))
    }
}

/// Credentials for the registry of image repository `repo`, from the user's Docker config.
/// Blocking (a credential helper is a program it waits for): async code calls
/// [`lookup_credentials`].
pub fn credentials_for_repo(repo: &str) -> Result<Option<Credentials>> {
    DockerConfig::load()?.credentials_for(&registry_of(repo))
}

/// [`credentials_for_repo`] on the runtime's blocking pool.
pub async fn lookup_credentials(repo: &str) -> Result<Option<Credentials>> {
    let repo = repo.to_string();
    tokio::task::spawn_blocking(move || credentials_for_repo(&repo))
        .await
        .map_err(|e| Error::failure(format!("looking up registry credentials stopped: {e}")))?
}

fn find_program(name: &str, path: Option<&OsString>) -> Option<PathBuf> {
    let path = path.cloned().or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_of_repos() {
        assert_eq!(registry_of("127.0.0.1:5000/team/app"), "127.0.0.1:5000");
        assert_eq!(registry_of("localhost/app"), "localhost");
        assert_eq!(registry_of("ghcr.io/a/b"), "ghcr.io");
        assert_eq!(registry_of("team/app"), "docker.io");
        assert_eq!(registry_of("app"), "docker.io");
        assert_eq!(registry_of("index.docker.io/library/app"), "docker.io");
    }

    #[test]
    fn secrets_stay_hidden() {
        let c = Credentials::basic("r.example:5000", "me", "hunter2-secret");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(!format!("{c}").contains("hunter2"));
        assert_eq!(c.redact("x hunter2-secret y"), "x *** y");
        let t = Credentials::identity_token("r.example", "tok-secret");
        assert!(!format!("{t:?} {t}").contains("tok-secret"));
    }
}
