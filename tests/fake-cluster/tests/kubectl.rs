//! The machine's real `kubectl` against the fake cluster: the proof it speaks Kubernetes.
//! Skipped (with a printed reason) only when kubectl is absent; with `CI` set, absence fails.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn kubectl_path() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("kubectl"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "kubectl is required in CI but was not found on PATH"
        );
        eprintln!("SKIPPED: kubectl not found on PATH");
    }
    found
}

struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(fc: &FakeCluster) -> Option<Kubectl> {
        let bin = kubectl_path()?;
        let dir = tempfile::tempdir().unwrap();
        fc.write_kubeconfig(&dir.path().join("kubeconfig")).unwrap();
        Some(Kubectl { bin, dir })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        let cache = self.dir.path().join("cache");
        c.env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("KUBECACHEDIR", &cache)
            .env("HOME", self.dir.path())
            .arg("--cache-dir")
            .arg(&cache)
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run kubectl")
    }

    /// Runs and asserts success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

const MPIJOB: &str = r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: train
  labels:
    hvdctl.io/run: r7
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata:
          labels:
            hvdctl.io/run: r7
        spec:
          containers:
          - name: launcher
            image: horovod
            env:
            - name: FAKE_KUBELET_LINES
              value: "20"
            - name: FAKE_KUBELET_RATE
              value: "40"
    Worker:
      replicas: 2
      template:
        metadata:
          labels:
            hvdctl.io/run: r7
        spec:
          containers:
          - name: worker
            image: horovod
            env:
            - name: FAKE_KUBELET_LINES
              value: "3"
"#;

fn table_rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn kubectl_get_apply_logs_delete() {
    let fc = start(true);
    let Some(k) = Kubectl::new(&fc) else { return };
    let ns = k.ok(&["get", "namespaces"]);
    assert!(ns.starts_with("NAME"), "{ns}");
    assert!(ns.contains("default") && ns.contains("kube-system"), "{ns}");
    assert!(k.ok(&["get", "pods"]).is_empty());

    let file = k.write("mpijob.yaml", MPIJOB);
    let out = k.ok(&["apply", "--server-side", "-f", &file]);
    assert_eq!(out.trim(), "mpijob.kubeflow.org/train serverside-applied");
    // Applying again is a no-op that still succeeds.
    k.ok(&["apply", "--server-side", "-f", &file]);
    assert_eq!(
        fc.get("mpijobs", "default", "train").unwrap()["metadata"]["managedFields"][0]["manager"],
        "kubectl"
    );

    let out = k.ok(&["get", "mpijobs"]);
    assert_eq!(table_rows(&out)[0][0], "train", "{out}");
    wait_until("pods running", Duration::from_secs(5), || {
        (fc.list("pods", Some("default"), "hvdctl.io/run=r7").len() == 3).then_some(())
    });
    let pods = k.ok(&["get", "pods", "-l", "hvdctl.io/run=r7", "-o", "wide"]);
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        &header[..5],
        &["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    let names: Vec<String> = table_rows(&pods)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(
        names.contains(&"train-worker-0".to_string())
            && names.contains(&"train-worker-1".to_string()),
        "{pods}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("train-launcher-")),
        "{pods}"
    );
    let jobs = k.ok(&["get", "jobs"]);
    assert!(jobs.contains("train-launcher"), "{jobs}");
    let json = k.ok(&[
        "get",
        "mpijob",
        "train",
        "-o",
        "jsonpath={.status.conditions[0].type}",
    ]);
    assert_eq!(json, "Created");

    // Follow the launcher until it ends: every line, in order, then exit 0.
    let launcher = names
        .iter()
        .find(|n| n.starts_with("train-launcher-"))
        .unwrap()
        .clone();
    wait_until("launcher running", Duration::from_secs(5), || {
        (phase(&fc, &launcher).as_deref() == Some("Running")).then_some(())
    });
    let t0 = Instant::now();
    let logs = k.ok(&["logs", "-f", &launcher]);
    let want: Vec<String> = (1..=20)
        .map(|i| format!("pod={launcher} container=launcher restart=0 line {i}"))
        .collect();
    assert_eq!(logs.lines().collect::<Vec<_>>(), want);
    assert!(t0.elapsed() < Duration::from_secs(5));

    // By label with prefixes (the workers have finished their 3 lines).
    wait_until("workers done", Duration::from_secs(5), || {
        fc.list(
            "pods",
            Some("default"),
            "training.kubeflow.org/job-role=worker",
        )
        .iter()
        .all(|p| p["status"]["phase"] == "Succeeded")
        .then_some(())
    });
    let out = k.ok(&[
        "logs",
        "-l",
        "training.kubeflow.org/job-role=worker",
        "--prefix",
        "--timestamps",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    for w in ["train-worker-0", "train-worker-1"] {
        let mine: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with(&format!("[pod/{w}/worker] ")))
            .collect();
        assert_eq!(mine.len(), 3, "{out}");
        assert!(mine[2].ends_with(" line 3"));
    }
    let tail = k.ok(&["logs", &launcher, "--tail", "2"]);
    assert_eq!(tail.lines().count(), 2);
    assert!(tail.ends_with("line 20\n"));

    // Errors come back as real Status messages.
    let o = k.run(&["get", "pod", "nope"]);
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "Error from server (NotFound): pods \"nope\" not found"
    );

    // Delete waits for the object to be gone (it watches with a field selector).
    let out = k.ok(&["delete", "mpijob", "train", "--timeout=10s"]);
    assert_eq!(out.trim(), "mpijob.kubeflow.org \"train\" deleted");
    assert!(fc.get("mpijobs", "default", "train").is_none());
    wait_until("children collected", Duration::from_secs(5), || {
        fc.list("pods", Some("default"), "hvdctl.io/run=r7")
            .is_empty()
            .then_some(())
    });
}

#[test]
fn kubectl_get_watch_and_forbidden() {
    let fc = start(false);
    let Some(k) = Kubectl::new(&fc) else { return };
    let mut child = k
        .cmd(&["get", "configmaps", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // Give kubectl time to list and start watching, then change things.
    std::thread::sleep(Duration::from_millis(800));
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}, "data": {"a": "1"}});
    fc.create(cm).unwrap();
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end && !seen.iter().any(|l: &String| l.starts_with("watched")) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(l);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.iter().any(|l| l.starts_with("watched ")),
        "kubectl get -w printed: {seen:?}"
    );
    assert!(seen[0].starts_with("NAME"), "{seen:?}");

    fc.set_faults(Faults {
        forbid: vec!["list:pods".into()],
        ..Default::default()
    });
    let o = k.run(&["get", "pods"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Error from server (Forbidden): pods is forbidden: User \"fake\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""), "{err}");
}

#[test]
fn kubectl_without_mpi_operator_and_client_side_apply() {
    let fc = start(false);
    let Some(k) = Kubectl::new(&fc) else { return };
    let o = k.run(&["get", "mpijobs"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("the server doesn't have a resource type \"mpijobs\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let file = k.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  a: \"1\"\n",
    );
    assert_eq!(
        k.ok(&["apply", "-f", &file]).trim(),
        "configmap/plain created"
    );
    std::fs::write(
        Path::new(&file),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  a: \"2\"\n",
    )
    .unwrap();
    assert_eq!(
        k.ok(&["apply", "-f", &file]).trim(),
        "configmap/plain configured"
    );
    assert_eq!(
        fc.get("configmaps", "default", "plain").unwrap()["data"]["a"],
        "2"
    );
    // (`kubectl create namespace NAME` would send protobuf, which the fake does not decode.)
    let ns = k.write(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n",
    );
    assert_eq!(
        k.ok(&["create", "-f", &ns]).trim(),
        "namespace/team created"
    );
    let o = k.run(&["create", "-f", &ns]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Error from server (AlreadyExists)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        k.ok(&["delete", "namespace", "team"]).trim(),
        "namespace \"team\" deleted"
    );
}
