//! Build and push against the real daemon and registry from `scripts/dev-services.sh`.

use crate::util;

use std::process::Command;

use hvdctl::image::ProgressMode;
use hvdctl::image::auth::{DockerConfig, registry_of};
use hvdctl::image::build::{BuildRequest, build};
use hvdctl::image::docker::{DockerClient, Endpoint, Host, endpoint_error};
use hvdctl::image::push::{PushRequest, push, tag_exists};

/// GET a manifest from the registry's HTTP API with basic auth; returns (status, headers, body).
fn registry_get_manifest(
    registry: &str,
    user: &str,
    password: &str,
    name: &str,
    tag: &str,
) -> (u16, String, String) {
    let url = format!("http://{registry}/v2/{name}/manifests/{tag}");
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "-", "-w", "\n%{http_code}"])
        .args([
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
        ])
        .args(["-H", "Accept: application/vnd.oci.image.manifest.v1+json"])
        .args(["-u", &format!("{user}:{password}"), &url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (rest, code) = text.rsplit_once('\n').unwrap();
    let (headers, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
    (
        code.trim().parse().unwrap(),
        headers.to_string(),
        body.to_string(),
    )
}

fn app_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    util::write_tree(
        d.path(),
        &[
            (
                "Dockerfile",
                "FROM hvdctl-test/busybox:latest\nARG GREETING=unset\nCOPY app.sh /app.sh\nRUN sh /app.sh \"$GREETING\" > /out.txt\nCMD [\"cat\", \"/out.txt\"]\n",
            ),
            ("app.sh", "echo \"greeting=$1\"\n"),
            (".dockerignore", "*.secret\n"),
            ("x.secret", "must not be sent"),
        ],
    );
    d
}

#[tokio::test]
async fn no_daemon_is_a_clear_error() {
    let host = Endpoint::parse("unix:///nonexistent.sock").unwrap();
    let e = DockerClient::connect_to(&host).await.unwrap_err();
    assert_eq!(e.exit_code(), 1);
    let text = e.to_string();
    assert!(text.contains("unix:///nonexistent.sock"), "{text}");
    assert!(
        text.contains("sudo systemctl start docker") && text.contains("dockerd"),
        "{text}"
    );

    // A TCP address where nothing listens: the address is named too.
    let host = Endpoint::parse("tcp://127.0.0.1:9").unwrap();
    let e = DockerClient::connect_to(&host).await.unwrap_err();
    assert!(e.to_string().contains("tcp://127.0.0.1:9"), "{e}");
    assert!(e.to_string().to_lowercase().contains("refused"), "{e}");

    // Unsupported schemes are input errors.
    assert_eq!(
        endpoint_error(Endpoint::parse("fd://").unwrap_err()).exit_code(),
        2
    );
    assert_eq!(
        Endpoint::parse("tcp://h").unwrap().host,
        Host::Tcp("h:2375".into())
    );
}

#[tokio::test]
async fn build_push_and_read_the_manifest_back() {
    let Some(svc) = util::services().await else {
        return;
    };
    let dir = app_dir();
    let name = util::unique("hvdctl-tests/app");
    let repo = format!("{}/{name}", svc.registry);
    let ctx = hvdctl::image::BuildContext::open(dir.path(), "Dockerfile").unwrap();
    let tag = hvdctl::image::tag::default_tag(&ctx).unwrap();
    assert!(ctx.files().unwrap().iter().all(|f| f != "x.secret"));

    let mut req = BuildRequest::new(dir.path(), &repo, &tag);
    req.build_args
        .insert("GREETING".into(), "hello-from-arg".into());
    req.labels.insert("hvdctl.io/app".into(), "test-app".into());
    req.progress = ProgressMode::Plain;
    // The classic builder's output is checked here; BuildKit's in image::buildkit.
    req.builder = hvdctl::image::Builder::Legacy;
    let mut log = Vec::new();
    let built = build(&svc.docker, &req, &mut log)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let log_text = String::from_utf8_lossy(&log);
    assert!(
        log_text.contains("Step 1/6 : FROM hvdctl-test/busybox:latest"),
        "{log_text}"
    );
    assert!(log_text.contains("sent build context"), "{log_text}");
    assert!(built.id.starts_with("sha256:"), "{built:?}");
    assert_eq!(built.reference, format!("{repo}:{tag}"));
    assert!(built.context_bytes > 0);
    let out = util::docker_cli(&svc.docker_host, &["run", "--rm", &built.reference], &[]);
    assert_eq!(out.trim(), "greeting=hello-from-arg");
    let inspect = svc
        .docker
        .bollard()
        .inspect_image(&built.reference)
        .await
        .unwrap();
    assert_eq!(inspect.id.as_deref(), Some(built.id.as_str()));
    let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(
        labels.get("hvdctl.io/app").map(String::as_str),
        Some("test-app")
    );
    let ls = util::docker_cli(
        &svc.docker_host,
        &["run", "--rm", &built.reference, "ls", "/"],
        &[],
    );
    assert!(!ls.contains("x.secret"));

    // Not pushed yet.
    let config_dir = util::docker_config_with_auth(&svc.registry, &svc.user, &svc.password);
    let creds = DockerConfig::load_from(config_dir.path())
        .unwrap()
        .credentials_for(&registry_of(&repo))
        .unwrap();
    assert!(creds.is_some());
    assert!(
        !tag_exists(&svc.docker, &repo, &tag, creds.as_ref())
            .await
            .unwrap()
    );

    let mut push_log = Vec::new();
    let mut preq = PushRequest::new(&repo, &tag);
    preq.progress = ProgressMode::Plain;
    let pushed = push(&svc.docker, &preq, creds.as_ref(), &mut push_log)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let push_text = String::from_utf8_lossy(&push_log);
    assert!(pushed.digest.starts_with("sha256:"), "{pushed:?}");
    // Plain progress: every layer announced reaches a final state.
    let layers: Vec<&str> = push_text
        .lines()
        .filter_map(|l| l.strip_suffix(": Preparing"))
        .collect();
    assert!(!layers.is_empty(), "{push_text}");
    for id in layers {
        assert!(
            ["Pushed", "Layer already exists", "Mounted from"]
                .iter()
                .any(|s| push_text.contains(&format!("{id}: {s}"))),
            "layer {id} never finished:\n{push_text}"
        );
    }
    assert!(!push_text.contains(&svc.password));

    // The registry has it, under the digest the push reported.
    let (status, headers, body) =
        registry_get_manifest(&svc.registry, &svc.user, &svc.password, &name, &tag);
    assert_eq!(status, 200, "{headers}\n{body}");
    let digest_header = headers
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("docker-content-digest:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    assert_eq!(digest_header, pushed.digest);
    let manifest: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(manifest["schemaVersion"], 2);
    assert!(
        manifest["layers"].as_array().is_some_and(|l| l.len() >= 2),
        "{manifest}"
    );
    assert!(
        tag_exists(&svc.docker, &repo, &tag, creds.as_ref())
            .await
            .unwrap()
    );
    assert!(
        !tag_exists(&svc.docker, &repo, "never-pushed", creds.as_ref())
            .await
            .unwrap()
    );

    // Pushing again is quick and reports the same digest.
    let again = push(&svc.docker, &preq, creds.as_ref(), &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(again.digest, pushed.digest);
    util::remove_image(&svc, &built.reference).await;
}

#[tokio::test]
async fn wrong_password_is_a_clear_error_that_shows_no_password() {
    let Some(svc) = util::services().await else {
        return;
    };
    let dir = app_dir();
    let repo = format!("{}/{}", svc.registry, util::unique("hvdctl-tests/denied"));
    let mut req = BuildRequest::new(dir.path(), &repo, "v1");
    req.progress = ProgressMode::Plain;
    let built = build(&svc.docker, &req, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let wrong = format!("Wr0ng-{}-pw", rand::random::<u32>());
    let config_dir = util::docker_config_with_auth(&svc.registry, &svc.user, &wrong);
    let creds = DockerConfig::load_from(config_dir.path())
        .unwrap()
        .credentials_for(&svc.registry)
        .unwrap();
    let mut log = Vec::new();
    let mut preq = PushRequest::new(&repo, "v1");
    preq.progress = ProgressMode::Plain;
    let e = push(&svc.docker, &preq, creds.as_ref(), &mut log)
        .await
        .unwrap_err();
    let everything = format!("{e}\n{e:?}\n{}\n{creds:?}", String::from_utf8_lossy(&log));
    assert_eq!(e.exit_code(), 1);
    assert!(e.message.contains(&svc.registry), "{e}");
    assert!(
        e.message.contains("authentication required / unauthorized"),
        "{e}"
    );
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains(&format!("docker login {}", svc.registry)),
        "{e}"
    );
    assert!(
        !everything.contains(&wrong),
        "the password leaked:\n{everything}"
    );
    assert!(!everything.contains(&svc.password));

    // The existence check says the same, not "absent".
    let e = tag_exists(&svc.docker, &repo, "v1", creds.as_ref())
        .await
        .unwrap_err();
    assert!(
        e.message.contains("authentication required / unauthorized"),
        "{e}"
    );
    assert!(!format!("{e:?}").contains(&wrong));

    // Without any credentials: also an authentication error, naming the registry.
    let e = push(&svc.docker, &preq, None, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(
        e.message.contains("authentication required / unauthorized")
            && e.message.contains(&svc.registry),
        "{e}"
    );
    util::remove_image(&svc, &built.reference).await;
}

#[tokio::test]
async fn failing_run_step_shows_its_output() {
    let Some(svc) = util::services().await else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    util::write_tree(
        d.path(),
        &[(
            "Dockerfile",
            "FROM hvdctl-test/busybox:latest\nRUN echo fine-step\nRUN echo before-the-failure && echo on-stderr >&2 && exit 3\nRUN echo never-runs\n",
        )],
    );
    let mut req = BuildRequest::new(d.path(), util::unique("hvdctl-tests/fails"), "t");
    req.progress = ProgressMode::Plain;
    req.builder = hvdctl::image::Builder::Legacy;
    req.no_cache = true;
    let mut log = Vec::new();
    let e = build(&svc.docker, &req, &mut log).await.unwrap_err();
    assert_eq!(e.exit_code(), 1);
    let m = &e.message;
    assert!(m.contains("Step 3/4 : RUN echo before-the-failure"), "{m}");
    assert!(
        m.contains("before-the-failure\n") || m.contains("| before-the-failure"),
        "{m}"
    );
    assert!(m.contains("on-stderr"), "{m}");
    assert!(m.contains("returned a non-zero code: 3"), "{m}");
    assert!(
        !m.contains("fine-step\n") && !m.contains("| fine-step"),
        "only the failing step's output: {m}"
    );
    assert!(!String::from_utf8_lossy(&log).contains("never-runs"));
}

#[tokio::test]
async fn dockerfile_errors_and_missing_images_are_reported() {
    let Some(svc) = util::services().await else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    util::write_tree(
        d.path(),
        &[(
            "Dockerfile",
            "FROM hvdctl-test/busybox:latest\nNOTANINSTRUCTION x\n",
        )],
    );
    let mut req = BuildRequest::new(d.path(), "hvdctl-tests/bad", "t");
    req.progress = ProgressMode::Plain;
    let e = build(&svc.docker, &req, &mut Vec::new()).await.unwrap_err();
    assert!(e.message.to_lowercase().contains("notaninstruction"), "{e}");

    // Pushing an image that was never built.
    let preq = PushRequest {
        repo: format!("{}/hvdctl-tests/never-built", svc.registry),
        tag: "x".into(),
        progress: ProgressMode::Plain,
    };
    let e = push(&svc.docker, &preq, None, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(e.message.contains("does not exist locally"), "{e}");
    assert!(e.hint.as_deref().unwrap_or("").contains("build"), "{e}");

    // Bad names are input errors before anything is sent.
    let bad = BuildRequest::new(d.path(), "Upper/Case", "t");
    assert_eq!(
        build(&svc.docker, &bad, &mut Vec::new())
            .await
            .unwrap_err()
            .exit_code(),
        2
    );
}

#[tokio::test]
async fn push_with_a_credential_helper() {
    let Some(svc) = util::services().await else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let answer = serde_json::json!({"ServerURL": svc.registry, "Username": svc.user, "Secret": svc.password});
    let script = d.path().join("docker-credential-hvdtest");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncat >/dev/null\necho '{answer}'\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.path().join("config.json"), r#"{"credsStore": "hvdtest"}"#).unwrap();
    let mut cfg = DockerConfig::load_from(d.path()).unwrap();
    cfg.set_helper_path(d.path());
    let creds = cfg.credentials_for(&svc.registry).unwrap();

    let dir = app_dir();
    let repo = format!("{}/{}", svc.registry, util::unique("hvdctl-tests/helper"));
    let mut req = BuildRequest::new(dir.path(), &repo, "h1");
    req.progress = ProgressMode::Plain;
    let built = build(&svc.docker, &req, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut preq = PushRequest::new(&repo, "h1");
    preq.progress = ProgressMode::Plain;
    let pushed = push(&svc.docker, &preq, creds.as_ref(), &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(pushed.digest.starts_with("sha256:"));
    util::remove_image(&svc, &built.reference).await;
}

/// A TCP listener on 127.0.0.1 that forwards every connection to the daemon's unix socket,
/// so the `tcp://` code paths run against the real daemon.
async fn tcp_to_unix_proxy(socket: std::path::PathBuf) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_host_over_tcp() {
    let Some(svc) = util::services().await else {
        return;
    };
    let Host::Unix(socket) = Endpoint::parse(&svc.docker_host).unwrap().host else {
        panic!("the test daemon is expected on a unix socket");
    };
    let addr = tcp_to_unix_proxy(socket).await;
    let tcp = DockerClient::connect_to(&Endpoint::parse(&format!("tcp://{addr}")).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tcp.api_version(), svc.docker.api_version());
    assert!(!tcp.server_version().is_empty());

    // Build (bollard over HTTP) and push (hvdctl's own request over TCP).
    let dir = app_dir();
    let repo = format!("{}/{}", svc.registry, util::unique("hvdctl-tests/tcp"));
    let mut req = BuildRequest::new(dir.path(), &repo, "tcp");
    req.progress = ProgressMode::Plain;
    let built = build(&tcp, &req, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let config_dir = util::docker_config_with_auth(&svc.registry, &svc.user, &svc.password);
    let creds = DockerConfig::load_from(config_dir.path())
        .unwrap()
        .credentials_for(&svc.registry)
        .unwrap();
    let mut preq = PushRequest::new(&repo, "tcp");
    preq.progress = ProgressMode::Plain;
    let pushed = push(&tcp, &preq, creds.as_ref(), &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tag_exists(&tcp, &repo, "tcp", creds.as_ref())
            .await
            .unwrap()
    );
    assert!(pushed.digest.starts_with("sha256:"));
    util::remove_image(&svc, &built.reference).await;
}

#[tokio::test]
async fn multi_stage_target() {
    let Some(svc) = util::services().await else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    util::write_tree(
        d.path(),
        &[(
            "Dockerfile",
            "FROM hvdctl-test/busybox:latest AS first\nRUN echo first > /stage\n\
             FROM hvdctl-test/busybox:latest AS second\nRUN echo second > /stage\n",
        )],
    );
    let mut req = BuildRequest::new(d.path(), util::unique("hvdctl-tests/stages"), "t");
    req.progress = ProgressMode::Plain;
    req.target = Some("first".into());
    let built = build(&svc.docker, &req, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = util::docker_cli(
        &svc.docker_host,
        &["run", "--rm", &built.reference, "cat", "/stage"],
        &[],
    );
    assert_eq!(out.trim(), "first");
    util::remove_image(&svc, &built.reference).await;
}
