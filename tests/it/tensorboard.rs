//! `hvdctl tensorboard` against real containers: the `horovod` template trains with
//! `tensorboard.logDir` set — on the local backend, and with the `native` backend on the fake
//! cluster's Docker kubelet — in an image that is the template's plus a real TensorBoard
//! (installed from the wheels `scripts/dev-services.sh horovod` downloads: Debian does not
//! package it); rank 0 writes its scalars, `hvdctl tensorboard` starts TensorBoard in worker 0
//! and forwards a local port, and TensorBoard's own HTTP API lists the loss tag. Bad inputs
//! use the cheap `mpi-hello` image sleeping. Fails without the services, the Horovod base
//! or the wheels.

use crate::local::{kubelet_leftovers, leftovers};
use crate::training::horovod_dir;
use crate::util::*;
use hvdctl::image::docker::DockerClient;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The `horovod` app's image with TensorBoard installed from `wheels` (pip keeps Debian's
/// numpy), built once per content (the Dockerfile, the wheels' names and the app image).
fn tensorboard_image(docker: &DockerClient, app_image: &str, wheels: &Path) -> String {
    let ctx = tempfile::tempdir().unwrap();
    let dockerfile = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY wheels /tmp/wheels\n\
        RUN pip install --no-cache-dir --break-system-packages --no-index --find-links /tmp/wheels tensorboard \
        && rm -rf /tmp/wheels && tensorboard --version\n";
    std::fs::write(ctx.path().join("Dockerfile"), dockerfile).unwrap();
    std::fs::create_dir(ctx.path().join("wheels")).unwrap();
    let mut names: Vec<String> = Vec::new();
    for e in std::fs::read_dir(wheels).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".whl") {
            std::fs::copy(e.path(), ctx.path().join("wheels").join(&name)).unwrap();
            names.push(name);
        }
    }
    names.sort();
    let mut inputs: Vec<&[u8]> = vec![dockerfile.as_bytes()];
    inputs.extend(names.iter().map(|n| n.as_bytes()));
    image_built_once_on(
        docker,
        "hvdctl-test/app-horovod-tensorboard",
        ctx.path(),
        &inputs,
        app_image,
    )
}

/// A running `hvdctl tensorboard`, killed when dropped.
struct Served {
    child: std::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `hvdctl tensorboard ARGS` in `dir` (with `kubeconfig` when given) and reads the
/// URL from its first line.
fn serve(dir: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Served {
    let mut c = hvdctl_process();
    if let Some(kc) = kubeconfig {
        c.env("KUBECONFIG", kc);
    }
    c.current_dir(dir)
        .arg("tensorboard")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .map(str::to_string);
    let Some(url) = url else {
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        panic!("tensorboard {args:?} printed {line:?}; stderr: {err}");
    };
    Served { child, url }
}

/// `GET path` from `http://127.0.0.1:port` (HTTP/1.0, so the body ends with the
/// connection): the status line and the body.
fn get(port: u16, path: &str) -> std::io::Result<(String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// A local port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Where the training of [`serves_loss`] runs.
enum On<'a> {
    Local,
    /// The `native` backend on a fake cluster whose kubelet runs pods as containers.
    DockerKubelet(&'a Cluster),
}

/// A training with `tensorboard.logDir` (many epochs: it still runs while TensorBoard is
/// asked); `hvdctl tensorboard` serves rank 0's scalars on a local port, TensorBoard's
/// scalars API lists `train_loss` for run `.` (the log directory itself) with a value for
/// epoch 1; a second `hvdctl tensorboard` on the same local port is exit 1. Undeploy leaves
/// nothing (TensorBoard ends with its container).
fn serves_loss(docker: &DockerClient, image: &str, on: On) {
    let (_tmp, dir) = horovod_dir();
    let id = run_id("b");
    let job = format!("hvd-{id}");
    let kc = match &on {
        On::Local => None,
        On::DockerKubelet(cluster) => Some(cluster.kubeconfig.clone()),
    };
    let hv = |args: &[&str]| {
        let mut c = hvdctl_in(&dir);
        if let Some(kc) = &kc {
            c.env("KUBECONFIG", kc);
        }
        c.args(args);
        run(c)
    };
    let backend = match on {
        On::Local => "local",
        On::DockerKubelet(_) => "native",
    };
    let d = hv(&[
        "deploy",
        "--backend",
        backend,
        "--run-id",
        &id,
        "--image",
        image,
        "--no-push",
        "--wait",
        "--set",
        "parameters.epochs=200",
        "--set",
        "env.SYNTHETIC_SAMPLES=2000",
        "--set",
        "env.OMP_NUM_THREADS=1",
        "--set",
        "tensorboard.logDir=/tmp/tensorboard",
    ]);
    assert_eq!(d.code, 0, "{}", d.stderr);

    let port = free_port();
    let started = Instant::now();
    let served = serve(&dir, kc.as_deref(), &[&id, "--port", &port.to_string()]);
    eprintln!(
        "{backend}: TensorBoard served at {} after {:.1?}",
        served.url,
        started.elapsed()
    );
    assert_eq!(served.url, format!("http://127.0.0.1:{port}/"));

    // The same local port again: in use, exit 1.
    let again = hv(&["tensorboard", &id, "--port", &port.to_string()]);
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(again.stderr.contains("in use"), "{}", again.stderr);

    // Rank 0 writes after each epoch and TensorBoard reloads every few seconds.
    let deadline = Instant::now() + Duration::from_secs(300);
    let body = loop {
        let (status, body) = get(port, "/data/plugin/scalars/tags").unwrap_or_default();
        if status.contains(" 200") && body.contains("\"train_loss\"") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no train_loss tag after 300 s: {status} {body}"
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!("{backend}: tags after {:.1?}: {body}", started.elapsed());
    let tags: serde_json::Value = serde_json::from_str(&body).unwrap();
    for tag in ["train_loss", "test_loss", "test_accuracy"] {
        assert!(tags["."][tag].is_object(), "no {tag} for run `.`: {tags}");
    }
    let (status, points) = get(port, "/data/plugin/scalars/scalars?run=.&tag=train_loss").unwrap();
    assert!(status.contains(" 200"), "{status} {points}");
    let points: serde_json::Value = serde_json::from_str(&points).unwrap();
    let first = &points[0];
    assert_eq!(first[1], 1, "the first point is epoch 1: {points}");
    let loss = first[2].as_f64().unwrap();
    assert!(loss.is_finite() && loss > 0.0, "{points}");
    drop(served);

    // Rank 0 said where it writes.
    let l = hv(&["logs", &id, "--role", "launcher"]);
    assert!(
        l.stdout
            .contains("tensorboard: writing scalars to /tmp/tensorboard"),
        "{}",
        l.stdout
    );

    let u = hv(&["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    match on {
        On::Local => assert_eq!(leftovers(docker, &job, &id), (0, 0, 0)),
        On::DockerKubelet(cluster) => assert_eq!(
            kubelet_leftovers(docker, &cluster.fc, &job),
            Vec::<String>::new()
        ),
    }
}

/// The `horovod` app's image with TensorBoard (the test fails when it cannot be made).
fn tensorboard_app(docker: &DockerClient) -> Option<String> {
    let base = horovod_base(docker)?;
    let wheels = tensorboard_wheels()?;
    let app_image = template_image(docker, "horovod", &base);
    Some(tensorboard_image(docker, &app_image, &wheels))
}

#[test]
fn tensorboard_serves_rank_0s_loss_from_a_local_training() {
    let Some(docker) = docker() else { return };
    let Some(image) = tensorboard_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    serves_loss(&docker, &image, On::Local);
}

/// The same through Kubernetes: exec and port-forward over the API server's WebSockets to
/// worker 0's pod, run as a container by the fake cluster's Docker kubelet.
#[test]
fn tensorboard_serves_rank_0s_loss_from_a_native_training_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let Some(image) = tensorboard_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let cluster = Cluster::docker_kubelet(false);
    serves_loss(&docker, &image, On::DockerKubelet(&cluster));
}

/// Bad inputs, on the `mpi-hello` image sleeping (no TensorBoard in it): an unknown run is
/// exit 1; a run without `tensorboard.logDir` is exit 2 with a hint; a run with it, on an
/// image without TensorBoard, is exit 1 saying so.
#[test]
fn tensorboard_refuses_unknown_runs_runs_without_a_log_dir_and_images_without_it() {
    let Some(docker) = docker() else { return };
    let image = template_image(&docker, "mpi-hello", &debian_image());
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "tbbad", "mpi-hello");
    let hv = |args: &[&str]| {
        let mut c = hvdctl_in(&dir);
        c.args(args);
        run(c)
    };

    let unknown = hv(&["tensorboard", "zzzzz", "--port", "0"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("zzzzz"), "{}", unknown.stderr);

    let deploy = |id: &str, extra: &[&str]| {
        let mut args = vec![
            "deploy",
            "--backend",
            "local",
            "--run-id",
            id,
            "--image",
            &image,
            "--no-push",
            "--wait",
            "--set",
            "command=[sleep, \"300\"]",
        ];
        args.extend_from_slice(extra);
        let d = hv(&args);
        assert_eq!(d.code, 0, "{}", d.stderr);
    };
    let plain = run_id("n");
    deploy(&plain, &[]);
    let no_dir = hv(&["tensorboard", &plain, "--port", "0"]);
    assert_eq!(no_dir.code, 2, "{}", no_dir.stderr);
    assert!(
        no_dir.stderr.contains("TENSORBOARD_LOG_DIR"),
        "{}",
        no_dir.stderr
    );
    assert!(
        no_dir.stderr.contains("tensorboard.logDir"),
        "{}",
        no_dir.stderr
    );

    let with_dir = run_id("w");
    deploy(&with_dir, &["--set", "tensorboard.logDir=/tmp/tb"]);
    let no_tb = hv(&["tensorboard", &with_dir, "--port", "0"]);
    assert_eq!(no_tb.code, 1, "{}", no_tb.stderr);
    assert!(
        no_tb.stderr.contains("no `tensorboard` program"),
        "{}",
        no_tb.stderr
    );

    for id in [&plain, &with_dir] {
        let u = hv(&["undeploy", id]);
        assert_eq!(u.code, 0, "{}", u.stderr);
        assert_eq!(leftovers(&docker, &format!("tbbad-{id}"), id), (0, 0, 0));
    }
}
