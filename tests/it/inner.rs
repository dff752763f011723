//! Inside a run: `hvdctl exec`, `hvdctl cp` and `hvdctl port-forward` against real
//! containers — a local run (Docker exec, the archive API, the run's network) and a run on
//! the fake cluster's Docker kubelet (the exec and port-forward WebSocket APIs), with
//! `kubectl exec` and `kubectl cp` against the same pods to keep the fake honest.
//!
//! The runs are the `mpi-hello` app sleeping (`command=[sleep, "300"]`: the launcher's
//! mpirun and every worker's sshd stay up), so each worker serves ssh on port 22 — the
//! server port-forward reaches. Needs `scripts/dev-services.sh start`; fails without it.

use crate::local::{kubelet_leftovers, leftovers};
use crate::util::*;
use hvdctl::image::docker::DockerClient;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `mpi-hello` image (sshd, Open MPI), built once per content.
fn image(docker: &DockerClient) -> String {
    template_image(docker, "mpi-hello", &debian_image())
}

/// A fresh `mpi-hello` app in a temp dir.
fn new_app() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "inner", "mpi-hello");
    (tmp, dir)
}

/// hvdctl with `input` on its stdin.
fn hv_stdin(dir: &Path, kubeconfig: Option<&Path>, args: &[&str], input: &str) -> Out {
    let mut c = hvdctl_in(dir);
    if let Some(kc) = kubeconfig {
        c.env("KUBECONFIG", kc);
    }
    c.args(args).write_stdin(input.to_string());
    run(c)
}

/// A random token, so an echo cannot be a hard-coded answer.
fn token() -> String {
    format!("tok-{:016x}", rand::random::<u64>())
}

/// A local tree to copy: `data/` with a 0600 key, a subdirectory with a 0700 mode and a
/// 3 MB file of random bytes.
fn local_tree(root: &Path) -> PathBuf {
    let data = root.join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("key"), token()).unwrap();
    std::fs::set_permissions(data.join("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let big: Vec<u8> = (0..3_000_000).map(|_| rand::random::<u8>()).collect();
    std::fs::write(data.join("sub/big.bin"), big).unwrap();
    std::fs::set_permissions(data.join("sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
    data
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `a` and `b` hold the same files with the same contents and modes.
fn assert_same_tree(a: &Path, b: &Path) {
    assert_eq!(tree(a), tree(b), "{} vs {}", a.display(), b.display());
    for rel in tree(a) {
        let (x, y) = (a.join(&rel), b.join(&rel));
        assert_eq!(mode(&x), mode(&y), "mode of {rel}");
        if x.is_file() {
            assert!(
                std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap(),
                "content of {rel}"
            );
        }
    }
}

/// A running `hvdctl port-forward`, killed when dropped.
pub(crate) struct Forward {
    child: std::process::Child,
    pub(crate) port: u16,
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `hvdctl port-forward ARGS` and reads the local port from its first line.
pub(crate) fn port_forward(dir: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Forward {
    let mut c = hvdctl_process();
    c.current_dir(dir)
        .arg("port-forward")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(kc) = kubeconfig {
        c.env("KUBECONFIG", kc);
    }
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let port = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok());
    let Some(port) = port else {
        let _ = child.kill();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("port-forward {args:?} printed {line:?}; stderr: {err}");
    };
    Forward { child, port }
}

/// A conversation with sshd through `127.0.0.1:port`: its banner line, then, after ours,
/// the first bytes of its key exchange (both directions of the forward carry data). Returns
/// the banner.
pub(crate) fn ssh_hello(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut banner = String::new();
    reader.read_line(&mut banner).unwrap();
    s.write_all(b"SSH-2.0-hvdctl-test\r\n").unwrap();
    let mut kex = [0u8; 64];
    let n = reader.read(&mut kex).unwrap();
    assert!(n > 5, "sshd answered our banner with {n} bytes");
    banner
}

/// `hvdctl exec -it` on a real terminal (util-linux `script` gives it a pseudo-terminal of
/// 97 columns × 31 rows): the command has a terminal of that size and reads our keys. The
/// size is set just after the command starts (as with kubectl and docker), so the command
/// waits up to 5 s for it.
fn exec_on_a_terminal(dir: &Path, kc: Option<&Path>, id: &str) {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        return unavailable::<()>("util-linux `script`", "not installed").unwrap_or(());
    }
    let hv = hvdctl_process();
    let bin = hv.get_program().to_string_lossy().into_owned();
    let line = format!(
        "stty cols 97 rows 31; {bin} exec {id} -it -- sh -c 'tty; i=0; while [ \"$(stty size)\" = \"0 0\" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; stty size; read x; echo got:$x'"
    );
    let mut c = std::process::Command::new("script");
    for (k, v) in hv.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(kc) = kc {
        c.env("KUBECONFIG", kc);
    }
    let t = token();
    let mut child = c
        .args(["-qec", &line, "/dev/null"])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{t}\n").as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("/dev/pts/"), "no terminal: {out}");
    assert!(out.contains("31 97"), "the window's size: {out}");
    assert!(out.contains(&format!("got:{t}")), "keys: {out}");
}

/// Everything a run must answer on either engine: exec exit codes, stdin and a terminal, cp
/// both ways with a directory and a 0600 file, bad roles, indexes, containers and paths, a
/// port-forward to worker 1's sshd and a local port already in use.
fn exercise(dir: &Path, kc: Option<&Path>, id: &str, job: &str, container: &str) {
    // exec: the command's exit code, output, stderr, stdin.
    let o = hv(
        dir,
        kc,
        &[
            "exec",
            id,
            "--index",
            "1",
            "--",
            "sh",
            "-c",
            "hostname; echo oops >&2; exit 3",
        ],
    );
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), format!("{job}-worker-1"));
    assert!(o.stderr.contains("oops"), "{}", o.stderr);
    let o = hv(dir, kc, &["exec", id, "--", "true"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = hv(dir, kc, &["exec", id, "--", "no-such-command"]);
    assert!([126, 127].contains(&o.code), "{} {}", o.code, o.stderr);
    exec_on_a_terminal(dir, kc, id);
    let t = token();
    let o = hv_stdin(
        dir,
        kc,
        &["exec", id, "-i", "--", "sh", "-c", "cat; echo end"],
        &t,
    );
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, format!("{t}end\n").as_str()),
        "{}",
        o.stderr
    );

    // Bad input: exit 2 naming what the run has.
    let o = hv(dir, kc, &["exec", id, "--index", "7", "--", "true"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("no worker 7: its workers are 0, 1"),
        "{}",
        o.stderr
    );
    let o = hv(dir, kc, &["exec", id, "-c", "nope", "--", "true"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("it has {container}")),
        "{}",
        o.stderr
    );
    let o = hv(dir, kc, &["exec", "zzzz9", "--", "true"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("`zzzz9` not found"), "{}", o.stderr);

    // cp both ways: a directory with a 0600 file keeps contents and modes.
    let work = tempfile::tempdir().unwrap();
    let data = local_tree(work.path());
    let o = hv(
        dir,
        kc,
        &["cp", id, data.to_str().unwrap(), "launcher:/tmp"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = hv(
        dir,
        kc,
        &[
            "exec",
            id,
            "--",
            "stat",
            "-c",
            "%a %s %n",
            "/tmp/data/key",
            "/tmp/data/sub",
            "/tmp/data/sub/big.bin",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(
        lines[0].starts_with("600 ") && lines[1].starts_with("700 "),
        "{}",
        o.stdout
    );
    assert_eq!(lines[2], "644 3000000 /tmp/data/sub/big.bin");
    let back = work.path().join("back");
    let o = hv(
        dir,
        kc,
        &["cp", id, "launcher:/tmp/data", back.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_same_tree(&data, &back);
    // Into an existing directory: it lands under its own name; to a worker, a single file
    // renamed.
    let o = hv(
        dir,
        kc,
        &[
            "cp",
            id,
            &data.join("key").display().to_string(),
            "worker-1:/tmp/renamed",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = hv(
        dir,
        kc,
        &["cp", id, "worker-1:/tmp/renamed", back.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read(back.join("renamed")).unwrap(),
        std::fs::read(data.join("key")).unwrap()
    );
    assert_eq!(mode(&back.join("renamed")), 0o600);

    // cp's bad input: a bad role or index is 2; a missing remote path is 1, named.
    for (args, code, says) in [
        (["cp", id, "worker-7:/tmp", "x"], 2, "no worker 7"),
        (
            ["cp", id, "worker-x:/tmp", "x"],
            2,
            "\"worker-x\" is not a worker",
        ),
        (
            ["cp", id, "launcher:/tmp/no-such-file", "x"],
            1,
            "/tmp/no-such-file does not exist in",
        ),
        (
            ["cp", id, "hvdctl.yaml", "launcher:/no/such/dir/x"],
            1,
            "/no/such/dir does not exist in",
        ),
    ] {
        let o = hv(dir, kc, &args);
        assert_eq!(o.code, code, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
    }

    // port-forward: worker 1's sshd answers through it, twice (a stream per connection).
    let f = port_forward(dir, kc, &[id, "--index", "1", ":22"]);
    for _ in 0..2 {
        let g = ssh_hello(f.port);
        assert!(g.starts_with("SSH-2.0-"), "{g:?}");
    }
    // The same local port again: in use, exit 1 naming it.
    let taken = f.port.to_string();
    let o = hv(
        dir,
        kc,
        &["port-forward", id, "--index", "1", &format!("{taken}:22")],
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("local port {taken}")) && o.stderr.contains("in use"),
        "{}",
        o.stderr
    );
}

/// A local run: exec, cp both ways and port-forward through the Docker Engine API.
#[test]
fn exec_cp_and_port_forward_in_a_local_run() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let (_tmp, dir) = new_app();
    let id = run_id("e");
    let job = format!("inner-{id}");
    let d = hv(
        &dir,
        None,
        &[
            "deploy",
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--wait",
            "--set",
            "workers=2",
            "--set",
            "command=[sleep, \"300\"]",
        ],
    );
    assert_eq!(d.code, 0, "{}", d.stderr);
    exercise(&dir, None, &id, &job, "launcher");
    let u = hv(&dir, None, &["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(leftovers(&docker, &job, &id), (0, 0, 0));
}

/// A finished local run's containers are stopped: cp still copies a result out of them
/// (the archive API reads stopped containers), exec says it cannot.
#[test]
fn cp_copies_results_out_of_a_finished_local_run() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let (tmp, dir) = new_app();
    let id = run_id("f");
    let job = format!("inner-{id}");
    let t = token();
    let script = format!(
        "mkdir -p /tmp/out/d && echo {t} > /tmp/out/d/result && chmod 600 /tmp/out/d/result"
    );
    let d = hv(
        &dir,
        None,
        &[
            "deploy",
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--logs",
            "--set",
            "workers=1",
            "--set",
            &format!("command=[sh, -c, {script:?}]"),
        ],
    );
    assert_eq!(d.code, 0, "{}\n{}", d.stdout, d.stderr);
    let s = hv(&dir, None, &["status", &id, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["state"], "Succeeded", "{v}");
    let out = tmp.path().join("results");
    let o = hv(
        &dir,
        None,
        &["cp", "worker-0:/tmp/out", out.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(out.join("d/result")).unwrap(),
        format!("{t}\n")
    );
    assert_eq!(mode(&out.join("d/result")), 0o600);
    let o = hv(&dir, None, &["exec", "--index", "0", "--", "true"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("is not running (Succeeded)"),
        "{}",
        o.stderr
    );
    let u = hv(&dir, None, &["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(leftovers(&docker, &job, &id), (0, 0, 0));
}

/// A run on the fake cluster's Docker kubelet: the same verbs through the API server's exec
/// and port-forward WebSockets; kubectl exec and kubectl cp work against the same pods and
/// agree with hvdctl.
#[test]
fn exec_cp_and_port_forward_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let cluster = Cluster::docker_kubelet(false);
    let kc = cluster.kubeconfig.clone();
    let (_tmp, dir) = new_app();
    let id = run_id("x");
    let job = format!("inner-{id}");
    let d = hv(
        &dir,
        Some(&kc),
        &[
            "deploy",
            "--backend",
            "native",
            "--run-id",
            &id,
            "--image",
            &img,
            "--no-push",
            "--wait",
            "--set",
            "workers=2",
            "--set",
            "command=[sleep, \"300\"]",
        ],
    );
    assert_eq!(d.code, 0, "{}", d.stderr);
    exercise(&dir, Some(&kc), &id, &job, "launcher");

    if kubectl_available() {
        let pod = format!("{job}-worker-0");
        // kubectl exec: the same exit code through the fake's status channel.
        let o = cluster
            .kubectl_process(&["exec", &pod, "--", "sh", "-c", "exit 5"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(5),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // kubectl cp reads what hvdctl cp wrote, and the other way round.
        let work = tempfile::tempdir().unwrap();
        let data = local_tree(work.path());
        let o = hv(
            &dir,
            Some(&kc),
            &["cp", &id, data.to_str().unwrap(), "worker-0:/tmp"],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let via_kubectl = work.path().join("via-kubectl");
        cluster
            .kubectl(&[
                "cp",
                &format!("{pod}:/tmp/data"),
                via_kubectl.to_str().unwrap(),
            ])
            .unwrap();
        assert_eq!(tree(&data), tree(&via_kubectl));
        let key = std::fs::read(data.join("key")).unwrap();
        assert!(std::fs::read(via_kubectl.join("key")).unwrap() == key);
        cluster
            .kubectl(&[
                "cp",
                data.join("key").to_str().unwrap(),
                &format!("{pod}:/tmp/from-kubectl"),
            ])
            .unwrap();
        let back = work.path().join("from-kubectl");
        let o = hv(
            &dir,
            Some(&kc),
            &[
                "cp",
                &id,
                "worker-0:/tmp/from-kubectl",
                back.to_str().unwrap(),
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(std::fs::read(&back).unwrap() == key);
        // kubectl port-forward: SPDY tunnelled through the fake's WebSocket.
        let mut child = cluster
            .kubectl_process(&["port-forward", &pod, ":22"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // kubectl prints a line per connection: keep reading, or it dies of SIGPIPE.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let port: Option<u16> = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok());
        let banners: Vec<String> = match port {
            Some(p) => (0..2).map(|_| ssh_hello(p)).collect(),
            None => Vec::new(),
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(port.is_some(), "kubectl port-forward printed {line:?}");
        assert!(
            banners.iter().all(|b| b.starts_with("SSH-2.0-")),
            "{banners:?}"
        );
    }

    let u = hv(&dir, Some(&kc), &["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(
        kubelet_leftovers(&docker, &cluster.fc, &job),
        Vec::<String>::new()
    );
}
