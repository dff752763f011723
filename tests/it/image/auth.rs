//! Registry credentials from Docker config files: `auths`, `credsStore`, `credHelpers`, host
//! matching, and secrets that never show.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine;
use hvdctl::image::auth::{DockerConfig, registry_of};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn config(json: serde_json::Value) -> (tempfile::TempDir, DockerConfig) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
    let cfg = DockerConfig::load_from(dir.path()).unwrap();
    (dir, cfg)
}

/// A fake `docker-credential-<name>` that records its stdin and answers `answer` (or fails
/// with `fail` on stdout and exit 1).
fn helper(dir: &Path, name: &str, answer: &str, fail: Option<&str>) {
    let log = dir.join(format!("{name}.stdin"));
    let body = match fail {
        Some(msg) => format!(
            "#!/bin/sh\ncat > '{}'\necho '{msg}'\nexit 1\n",
            log.display()
        ),
        None => format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 9\ncat > '{}'\necho '{answer}'\n",
            log.display()
        ),
    };
    let path = dir.join(format!("docker-credential-{name}"));
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn auths_entry_with_base64_auth() {
    let (_d, cfg) =
        config(serde_json::json!({"auths": {"127.0.0.1:5000": {"auth": b64("alice:pa:ss")}}}));
    let c = cfg.credentials_for("127.0.0.1:5000").unwrap().unwrap();
    assert_eq!(c.username(), Some("alice"));
    assert_eq!(c.server(), "127.0.0.1:5000");
    assert!(!c.is_identity_token());
    // The password (with its colon) is kept whole but shown nowhere.
    assert_eq!(c.redact("x pa:ss y"), "x *** y");
    assert!(!format!("{c:?}{c}").contains("pa:ss"));
    assert!(cfg.credentials_for("127.0.0.1:5001").unwrap().is_none());
    assert!(cfg.credentials_for("docker.io").unwrap().is_none());
}

#[test]
fn entries_match_with_or_without_scheme_and_path() {
    for key in [
        "https://reg.example:5000/v2/",
        "http://reg.example:5000",
        "reg.example:5000",
        "reg.example:5000/",
    ] {
        let (_d, cfg) = config(serde_json::json!({"auths": {key: {"auth": b64("u:p")}}}));
        let c = cfg.credentials_for("reg.example:5000").unwrap();
        assert_eq!(
            c.as_ref().and_then(|c| c.username()),
            Some("u"),
            "key {key}"
        );
        assert!(
            cfg.credentials_for("reg.example").unwrap().is_none(),
            "port matters for {key}"
        );
    }
}

#[test]
fn docker_hub_aliases() {
    for key in [
        "https://index.docker.io/v1/",
        "docker.io",
        "index.docker.io",
        "registry-1.docker.io",
    ] {
        let (_d, cfg) =
            config(serde_json::json!({"auths": {key: {"auth": b64("hubuser:hubpass")}}}));
        for registry in [
            "docker.io",
            "index.docker.io",
            "https://index.docker.io/v1/",
            &registry_of("library/busybox"),
        ] {
            let c = cfg
                .credentials_for(registry)
                .unwrap()
                .unwrap_or_else(|| panic!("{key} vs {registry}"));
            assert_eq!(c.username(), Some("hubuser"));
            assert_eq!(c.server(), "https://index.docker.io/v1/");
        }
        assert!(cfg.credentials_for("ghcr.io").unwrap().is_none());
    }
}

#[test]
fn identity_token_entry() {
    let (_d, cfg) = config(
        serde_json::json!({"auths": {"ghcr.io": {"auth": "", "identitytoken": "tok-123-secret"}}}),
    );
    let c = cfg.credentials_for("ghcr.io").unwrap().unwrap();
    assert!(c.is_identity_token());
    assert_eq!(c.username(), None);
    assert!(!format!("{c:?} {c}").contains("tok-123-secret"));
}

#[test]
fn creds_store_helper_is_asked_with_the_server_address() {
    let (d, mut cfg) = config(
        serde_json::json!({"credsStore": "fake", "auths": {"127.0.0.1:5000": {"auth": b64("ignored:ignored")}}}),
    );
    helper(
        d.path(),
        "fake",
        r#"{"ServerURL":"127.0.0.1:5000","Username":"helperuser","Secret":"helper-secret"}"#,
        None,
    );
    cfg.set_helper_path(d.path());
    let c = cfg.credentials_for("127.0.0.1:5000").unwrap().unwrap();
    assert_eq!(c.username(), Some("helperuser"));
    assert_eq!(
        std::fs::read_to_string(d.path().join("fake.stdin")).unwrap(),
        "127.0.0.1:5000"
    );
    assert!(!format!("{c:?}").contains("helper-secret"));
    // Docker Hub is asked for under its v1 address.
    cfg.credentials_for("docker.io").unwrap().unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("fake.stdin")).unwrap(),
        "https://index.docker.io/v1/"
    );
}

#[test]
fn cred_helpers_win_over_creds_store_and_tokens_are_recognised() {
    let (d, mut cfg) =
        config(serde_json::json!({"credsStore": "store", "credHelpers": {"gcr.io": "gcr"}}));
    helper(
        d.path(),
        "store",
        r#"{"Username":"storeuser","Secret":"s1"}"#,
        None,
    );
    helper(
        d.path(),
        "gcr",
        r#"{"Username":"<token>","Secret":"refresh-token"}"#,
        None,
    );
    cfg.set_helper_path(d.path());
    let g = cfg.credentials_for("gcr.io").unwrap().unwrap();
    assert!(g.is_identity_token());
    assert_eq!(
        cfg.credentials_for("quay.io").unwrap().unwrap().username(),
        Some("storeuser")
    );
}

#[test]
fn helper_not_found_answer_means_no_credentials() {
    let (d, mut cfg) = config(serde_json::json!({"credsStore": "empty"}));
    helper(
        d.path(),
        "empty",
        "",
        Some("credentials not found in native keychain"),
    );
    cfg.set_helper_path(d.path());
    assert!(cfg.credentials_for("127.0.0.1:5000").unwrap().is_none());
}

#[test]
fn failing_or_missing_helper_is_a_clear_failure() {
    let (d, mut cfg) =
        config(serde_json::json!({"credsStore": "broken", "credHelpers": {"x.io": "absent"}}));
    helper(d.path(), "broken", "", Some("keyring locked"));
    cfg.set_helper_path(d.path());
    let e = cfg.credentials_for("127.0.0.1:5000").unwrap_err();
    assert_eq!(e.exit_code(), 1);
    assert!(
        e.message.contains("docker-credential-broken") && e.message.contains("keyring locked"),
        "{}",
        e.message
    );
    let e = cfg.credentials_for("x.io").unwrap_err();
    assert!(
        e.message.contains("docker-credential-absent") && e.message.contains("not on PATH"),
        "{}",
        e.message
    );
    assert!(e.hint.is_some());
}

#[test]
fn bad_helper_json_does_not_echo_the_secret() {
    let (d, mut cfg) = config(serde_json::json!({"credsStore": "weird"}));
    helper(d.path(), "weird", "Username=me Secret=leaky-secret", None);
    cfg.set_helper_path(d.path());
    let e = cfg.credentials_for("127.0.0.1:5000").unwrap_err();
    assert!(!e.to_string().contains("leaky-secret"), "{e}");
}

#[test]
fn malformed_config_and_auth_are_input_errors_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), "{\"auths\": {").unwrap();
    let e = DockerConfig::load_from(dir.path()).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("config.json"), "{}", e.message);

    let (_d, cfg) =
        config(serde_json::json!({"auths": {"r.io": {"auth": b64("no-colon-secret")}}}));
    let e = cfg.credentials_for("r.io").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(!e.to_string().contains("no-colon-secret"), "{e}");
}

#[test]
fn missing_config_means_no_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DockerConfig::load_from(dir.path()).unwrap();
    assert!(cfg.path().is_none());
    assert!(cfg.credentials_for("127.0.0.1:5000").unwrap().is_none());
    let (found, failed) = cfg.all_credentials();
    assert!(found.is_empty() && failed.is_empty());
}

/// A build's credentials for every registry: one whose helper fails is named, not dropped
/// in silence; the others are still there.
#[test]
fn every_registrys_credentials_name_the_helpers_that_failed() {
    let (d, mut cfg) = config(serde_json::json!({
        "auths": {"ok.example": {"auth": b64("alice:pw")}},
        "credHelpers": {"bad.example": "broken"},
    }));
    helper(d.path(), "broken", "", Some("the keychain is locked"));
    cfg.set_helper_path(d.path());
    let (found, failed) = cfg.all_credentials();
    assert_eq!(
        found.iter().map(|c| c.server()).collect::<Vec<_>>(),
        ["ok.example"]
    );
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("bad.example"), "{failed:?}");
    assert!(failed[0].contains("the keychain is locked"), "{failed:?}");
}
