//! Docker hosts as the docker CLI reads them, against a second dockerd this test starts:
//! TCP with `--tlsverify` and certificates made here with openssl, reached through
//! `DOCKER_HOST` + `DOCKER_TLS_VERIFY` + `DOCKER_CERT_PATH` and through a Docker context
//! (`currentContext` in `config.json`, the context's TLS files); `hvdctl build` and a
//! `--backend local` run through each; a wrong CA, an unknown context and a daemon that is
//! not there are clear errors naming the host or context.
//!
//! Needs root (dockerd, a bridge), `openssl`, and the shared test daemon's `mpi-hello` app
//! image (loaded into the second daemon with `docker save | docker load`). The shared daemon
//! is never stopped or reconfigured, and the second one never touches its `docker0`.

use crate::util::*;
use hvdctl::image::docker::{DockerClient, Endpoint};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A dockerd of the test's own: data root, exec root and pid file in a temp dir, TCP with TLS.
struct SecondDaemon {
    child: Child,
    /// Its own bridge (made here, removed after it stops): a daemon started with
    /// `--bridge none` deletes the machine's `docker0`, which the shared daemon uses.
    bridge: String,
    port: u16,
    /// ca.pem, cert.pem, key.pem of a client the daemon trusts.
    client: PathBuf,
    /// The same client files with another CA's ca.pem.
    wrong_ca: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for SecondDaemon {
    fn drop(&mut self) {
        // SIGTERM to this daemon's pid only; it stops its containers and its containerd.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
        let _ = Command::new("iptables").args(forward_rule("-D")).status();
        // Mounts under the data root are gone once the daemon stopped; whatever is left is
        // removed with the temp dir.
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

/// The shared daemon's FORWARD policy drops bridged traffic it did not set up: the second
/// daemon's networks (its own address pool) are let through in `DOCKER-USER`, the chain
/// Docker keeps for users' rules.
fn forward_rule(op: &str) -> [&str; 8] {
    [
        op,
        "DOCKER-USER",
        "-s",
        "10.213.0.0/16",
        "-d",
        "10.213.0.0/16",
        "-j",
        "ACCEPT",
    ]
}

fn sh(script: &str, dir: &Path) {
    let out = Command::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .output()
        .expect("running sh");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, with openssl.
fn make_certs(dir: &Path) {
    let ca = |name: &str| {
        format!(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
             -keyout {name}-key.pem -out {name}.pem -subj /CN={name} 2>/dev/null"
        )
    };
    let signed = |name: &str, ext: &str| {
        format!(
            "printf '{ext}\\n' > {name}.ext; \
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
               -keyout {name}-key.pem -out {name}.csr -subj /CN={name} 2>/dev/null; \
             openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
               -days 2 -out {name}-cert.pem -extfile {name}.ext 2>/dev/null"
        )
    };
    sh(
        &[
            ca("ca"),
            ca("other-ca"),
            signed(
                "server",
                "subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth",
            ),
            signed("client", "extendedKeyUsage=clientAuth"),
            "mkdir client wrong-ca; cp ca.pem client/ca.pem; cp other-ca.pem wrong-ca/ca.pem; \
             for d in client wrong-ca; do cp client-cert.pem $d/cert.pem; cp client-key.pem $d/key.pem; done"
                .into(),
        ]
        .join("; "),
        dir,
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl SecondDaemon {
    /// Starts it and waits for its "API listen on" line; `None` (a failure under CI) when
    /// this machine cannot run one.
    fn start() -> Option<SecondDaemon> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return unavailable("a second dockerd", "the test must run as root");
        }
        for tool in ["dockerd", "openssl", "docker", "ip", "iptables"] {
            if which(tool).is_none() {
                return unavailable("a second dockerd", format!("{tool} is not on PATH"));
            }
        }
        // Short paths: containerd's sockets live under the exec root.
        let dir = tempfile::Builder::new()
            .prefix("hvdd")
            .tempdir_in("/tmp")
            .unwrap();
        make_certs(dir.path());
        let port = free_port();
        let d = dir.path();
        let bridge = format!("hvdd{port}");
        sh(
            &format!(
                "ip link add {bridge} type bridge; ip addr add 10.213.255.1/24 dev {bridge}; \
                 ip link set {bridge} up"
            ),
            d,
        );
        let _ = Command::new("iptables").args(forward_rule("-I")).status();
        let mut child = Command::new("dockerd")
            .args([
                "--data-root",
                d.join("data").to_str().unwrap(),
                "--exec-root",
                d.join("x").to_str().unwrap(),
                "--pidfile",
                d.join("dockerd.pid").to_str().unwrap(),
                "-H",
                &format!("tcp://127.0.0.1:{port}"),
                "--tlsverify",
                "--tlscacert",
                d.join("ca.pem").to_str().unwrap(),
                "--tlscert",
                d.join("server-cert.pem").to_str().unwrap(),
                "--tlskey",
                d.join("server-key.pem").to_str().unwrap(),
                // Nothing shared with the machine's daemon: a default bridge of its own, no
                // iptables rules, networks from a pool of their own.
                "--bridge",
                &bridge,
                "--iptables=false",
                "--ip-masq=false",
                "--default-address-pool",
                "base=10.213.0.0/16,size=24",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting dockerd");
        let (tx, rx) = mpsc::channel::<String>();
        let stderr = child.stderr.take().unwrap();
        let log = dir.path().join("dockerd.log");
        std::thread::spawn(move || {
            let mut f = std::fs::File::create(log).unwrap();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
                let _ = tx.send(line);
            }
        });
        let want = format!("API listen on 127.0.0.1:{port}");
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(180)) {
                Ok(line) if line.contains(&want) => break,
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = Command::new("ip").args(["link", "del", &bridge]).status();
                    panic!(
                        "the second dockerd did not listen on {port}:\n{}",
                        seen.join("\n")
                    );
                }
            }
        }
        Some(SecondDaemon {
            child,
            bridge,
            port,
            client: dir.path().join("client"),
            wrong_ca: dir.path().join("wrong-ca"),
            dir,
        })
    }

    fn host(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// The environment that reaches it with `certs` (a directory of ca/cert/key.pem).
    fn env(&self, certs: &Path) -> Vec<(String, String)> {
        vec![
            ("DOCKER_HOST".into(), self.host()),
            ("DOCKER_TLS_VERIFY".into(), "1".into()),
            ("DOCKER_CERT_PATH".into(), certs.display().to_string()),
        ]
    }

    /// A Docker config directory whose current context is this daemon.
    fn context_config(&self, name: &str) -> PathBuf {
        let cfg = self.dir.path().join("docker-config");
        let id = sha256_hex(name);
        let meta = cfg.join("contexts/meta").join(&id);
        let tls = cfg.join("contexts/tls").join(&id).join("docker");
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::write(
            meta.join("meta.json"),
            serde_json::json!({
                "Name": name,
                "Metadata": {"Description": "hvdctl's TLS test daemon"},
                "Endpoints": {"docker": {"Host": self.host(), "SkipTLSVerify": false}}
            })
            .to_string(),
        )
        .unwrap();
        for f in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::copy(self.client.join(f), tls.join(f)).unwrap();
        }
        std::fs::write(
            cfg.join("config.json"),
            serde_json::json!({ "currentContext": name }).to_string(),
        )
        .unwrap();
        cfg
    }
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(s.as_bytes()))
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}

/// `docker save IMAGE` from the shared daemon piped into `docker load` on `daemon`.
fn copy_image(image: &str, daemon: &SecondDaemon) {
    let shared = services_docker_host();
    let mut save = Command::new("docker")
        .args(["save", image])
        .env("DOCKER_HOST", &shared)
        .env_remove("DOCKER_CONTEXT")
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker save");
    let mut load = Command::new("docker");
    load.arg("load")
        .env_remove("DOCKER_CONTEXT")
        .stdin(Stdio::from(save.stdout.take().unwrap()));
    for (k, v) in daemon.env(&daemon.client) {
        load.env(k, v);
    }
    let out = load.output().expect("docker load");
    assert!(save.wait().unwrap().success(), "docker save {image} failed");
    assert!(
        out.status.success(),
        "docker load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn services_docker_host() -> String {
    std::fs::read_to_string("/tmp/hvdctl-services/env")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("DOCKER_HOST=").map(str::to_string))
        })
        .or_else(|| std::env::var("DOCKER_HOST").ok())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into())
}

/// hvdctl in `dir` with `env` on top of the clean test environment (no DOCKER_* inherited).
fn hv_env(dir: &Path, env: &[(String, String)], args: &[&str]) -> Out {
    let mut c = hvdctl_in(dir);
    for k in [
        "DOCKER_HOST",
        "DOCKER_TLS_VERIFY",
        "DOCKER_CERT_PATH",
        "DOCKER_CONTEXT",
        "DOCKER_CONFIG",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args);
    run(c)
}

/// Build the app, run it on the local backend with one worker, read its logs, undeploy:
/// everything through `env`'s daemon. Returns the image built.
fn build_and_run(dir: &Path, env: &[(String, String)], base: &str, tag: &str) -> String {
    let b = hv_env(
        dir,
        env,
        &[
            "build",
            "--tag",
            tag,
            "--progress",
            "plain",
            "--build-arg",
            &format!("BASE_IMAGE={base}"),
        ],
    );
    assert_eq!(b.code, 0, "build: {}", b.stderr);
    let image = format!("hvdctl-test/tls-hello:{tag}");
    assert!(b.stderr.contains(&image), "{}", b.stderr);

    let id = run_id("t");
    let d = hv_env(
        dir,
        env,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "workers=1",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    let logs = hv_env(dir, env, &["logs", "-f", &id]);
    assert_eq!(logs.code, 0, "logs: {}\n{}", logs.stdout, logs.stderr);
    assert!(
        logs.stdout.contains("sum of ranks") && logs.stdout.contains("OK"),
        "{}",
        logs.stdout
    );
    let u = hv_env(dir, env, &["undeploy", &id]);
    assert_eq!(u.code, 0, "undeploy: {}", u.stderr);
    image
}

#[test]
fn a_tls_daemon_through_docker_host_and_through_a_context() {
    let Some(daemon) = SecondDaemon::start() else {
        return;
    };
    // The mpi-hello app's image as the base: it has everything, so the build needs no
    // network, and what it builds runs as an MPI app.
    let rt = rt();
    let shared = rt
        .block_on(DockerClient::connect_to(
            &Endpoint::parse(&services_docker_host()).unwrap(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let base = template_image(&shared, "mpi-hello", &debian_image());
    copy_image(&base, &daemon);

    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "tls-hello", "mpi-hello");
    let yaml = dir.join("hvdctl.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("image:") {
                "image: hvdctl-test/tls-hello".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&yaml, text).unwrap();

    // DOCKER_HOST + DOCKER_TLS_VERIFY + DOCKER_CERT_PATH.
    let env = daemon.env(&daemon.client);
    let image = build_and_run(&dir, &env, &base, "env");

    // The image is on the second daemon, not on the shared one.
    let mut tls = Endpoint::parse(&daemon.host()).unwrap();
    tls.tls = Some(docker_endpoint::TlsFiles {
        dir: daemon.client.clone(),
        ca: Some(daemon.client.join("ca.pem")),
        cert: Some(daemon.client.join("cert.pem")),
        key: Some(daemon.client.join("key.pem")),
    });
    let second = rt
        .block_on(DockerClient::connect_to(&tls))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rt.block_on(second.bollard().inspect_image(&image)).is_ok());
    assert!(
        rt.block_on(shared.bollard().inspect_image(&image)).is_err(),
        "{image} was built on the shared daemon"
    );

    // The same through a Docker context: `currentContext` in config.json, its TLS files.
    let cfg = daemon.context_config("hvdctl-tls-test");
    let ctx_env = vec![("DOCKER_CONFIG".to_string(), cfg.display().to_string())];
    let image = build_and_run(&dir, &ctx_env, &base, "ctx");
    assert!(rt.block_on(second.bollard().inspect_image(&image)).is_ok());
    let doctor = hv_env(&dir, &ctx_env, &["doctor", "--backend", "local"]);
    assert!(
        doctor
            .stdout
            .contains(&format!("daemon at {} (TLS", daemon.host()))
            && doctor.stdout.contains("context \"hvdctl-tls-test\""),
        "{}\n{}",
        doctor.stdout,
        doctor.stderr
    );

    // A CA that did not sign the daemon's certificate: exit 1 naming the host and the CA.
    let wrong = daemon.env(&daemon.wrong_ca);
    let b = hv_env(
        &dir,
        &wrong,
        &["build", "--tag", "wrong", "--progress", "plain"],
    );
    assert_eq!(b.code, 1, "{}", b.stderr);
    assert!(b.stderr.contains(&daemon.host()), "{}", b.stderr);
    assert!(
        b.stderr.contains(&format!(
            "not signed by the CA in {}",
            daemon.wrong_ca.join("ca.pem").display()
        )),
        "{}",
        b.stderr
    );
    // No client certificate: the daemon refuses the handshake; the host is named.
    let none = tmp.path().join("ca-only");
    std::fs::create_dir_all(&none).unwrap();
    std::fs::copy(daemon.client.join("ca.pem"), none.join("ca.pem")).unwrap();
    let b = hv_env(
        &dir,
        &daemon.env(&none),
        &["build", "--tag", "x", "--progress", "plain"],
    );
    assert_eq!(b.code, 1, "{}", b.stderr);
    assert!(b.stderr.contains(&daemon.host()), "{}", b.stderr);
    // Plain TCP to a TLS daemon: the host is named and TLS is suggested.
    let plain = vec![("DOCKER_HOST".to_string(), daemon.host())];
    let b = hv_env(
        &dir,
        &plain,
        &["build", "--tag", "x", "--progress", "plain"],
    );
    assert_eq!(b.code, 1, "{}", b.stderr);
    assert!(b.stderr.contains(&daemon.host()), "{}", b.stderr);

    // An unknown context: exit 2 naming it.
    let gone = vec![
        ("DOCKER_CONFIG".to_string(), cfg.display().to_string()),
        ("DOCKER_CONTEXT".to_string(), "no-such-context".to_string()),
    ];
    let b = hv_env(&dir, &gone, &["build", "--tag", "x"]);
    assert_eq!(b.code, 2, "{}", b.stderr);
    assert!(
        b.stderr.contains("\"no-such-context\"") && b.stderr.contains("DOCKER_CONTEXT"),
        "{}",
        b.stderr
    );
    // A bad cert file: exit 2 naming it.
    let bad = tmp.path().join("bad-certs");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("ca.pem"), "not a certificate").unwrap();
    let b = hv_env(&dir, &daemon.env(&bad), &["build", "--tag", "x"]);
    assert_eq!(b.code, 2, "{}", b.stderr);
    assert!(
        b.stderr.contains(&bad.join("ca.pem").display().to_string()),
        "{}",
        b.stderr
    );
}
