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
    wait_until("pods running", Duration::from_secs(30), || {
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
    // Running, or already done on a busy machine: either way `logs -f` prints it whole.
    wait_until("launcher started", Duration::from_secs(30), || {
        matches!(
            phase(&fc, &launcher).as_deref(),
            Some("Running" | "Succeeded")
        )
        .then_some(())
    });
    let t0 = Instant::now();
    let logs = k.ok(&["logs", "-f", &launcher]);
    let want: Vec<String> = (1..=20)
        .map(|i| format!("pod={launcher} container=launcher restart=0 line {i}"))
        .collect();
    assert_eq!(logs.lines().collect::<Vec<_>>(), want);
    // It ended with the container (20 lines, 2 s), not at some timeout of its own.
    assert!(t0.elapsed() < Duration::from_secs(30));

    // By label with prefixes (the workers have finished their 3 lines).
    wait_until("workers done", Duration::from_secs(30), || {
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
    wait_until("children collected", Duration::from_secs(30), || {
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
    let end = Instant::now() + Duration::from_secs(60);
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

fn gpu_pod(name: &str, gpus: u32, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n{extra}  containers:\n  - {{name: c, image: hvd, resources: {{limits: {{nvidia.com/gpu: {gpus}, cpu: 500m, memory: 1Gi}}}}}}\n---\n"
    )
}

fn scheduled_cond(fc: &FakeCluster, pod: &str) -> (String, String) {
    let p = fc.get("pods", "default", pod).unwrap();
    let c = p["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or_default().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// Nodes with capacity, the scheduler's bindings and refusals, seen through kubectl.
#[test]
fn kubectl_nodes_and_scheduling() {
    let fc = FakeCluster::start(Options {
        kubelet_delay: Duration::from_millis(20),
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 2,
            cpu: "2".into(),
            memory: "4Gi".into(),
            gpus: 1,
            taints: vec![],
        },
        ..Default::default()
    })
    .unwrap();
    let Some(k) = Kubectl::new(&fc) else { return };
    let rows = table_rows(&k.ok(&["get", "nodes"]));
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][..3], ["fake-node-0", "Ready", "<none>"]);
    assert_eq!(rows[1][4], "v1.32.0-fake");
    let alloc = k.ok(&[
        "get",
        "node",
        "fake-node-1",
        "-o",
        "jsonpath={.status.allocatable}",
    ]);
    let alloc: serde_json::Value = serde_json::from_str(&alloc).unwrap();
    assert_eq!(alloc["nvidia.com/gpu"], "1");
    assert_eq!(alloc["cpu"], "2");
    // Two GPUs in the cluster: two one-GPU pods run (one per node), the third waits.
    let file = k.write(
        "gpu.yaml",
        &format!(
            "{}{}{}",
            gpu_pod("g1", 1, ""),
            gpu_pod("g2", 1, ""),
            gpu_pod("g3", 1, "")
        ),
    );
    k.ok(&["apply", "-f", &file]);
    let phase = |p: &str| {
        fc.get("pods", "default", p).unwrap()["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    wait_until("g1, g2 running", Duration::from_secs(30), || {
        (phase("g1") == "Running" && phase("g2") == "Running").then_some(())
    });
    let node = |p: &str| {
        fc.get("pods", "default", p).unwrap()["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut nodes = [node("g1"), node("g2")];
    nodes.sort();
    assert_eq!(nodes, ["fake-node-0", "fake-node-1"]);
    let want = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.";
    wait_until("g3 unschedulable", Duration::from_secs(30), || {
        (scheduled_cond(&fc, "g3") == ("False".into(), want.into())).then_some(())
    });
    let p3 = fc.get("pods", "default", "g3").unwrap();
    assert_eq!(p3["status"]["phase"], "Pending");
    assert_eq!(node("g3"), "");
    let c = p3["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .unwrap()
        .clone();
    assert_eq!(c["reason"], "Unschedulable");
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=FailedScheduling",
    ]);
    assert!(
        events.contains("Warning") && events.contains("pod/g3") && events.contains(want),
        "{events}"
    );
    let describe = k.ok(&["describe", "node", &node("g1")]);
    assert!(
        describe.contains("nvidia.com/gpu:     1")
            && describe.contains("Non-terminated Pods:          (1 in total)")
            && describe.contains("g1"),
        "{describe}"
    );
    // Freeing a GPU lets the waiting pod in.
    let freed = node("g1");
    k.ok(&["delete", "pod", "g1"]);
    wait_until("g3 bound after g1 left", Duration::from_secs(30), || {
        (node("g3") == freed).then_some(())
    });
    wait_until("g3 running", Duration::from_secs(30), || {
        (phase("g3") == "Running").then_some(())
    });
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=g3",
    ]);
    assert!(
        events.contains(&format!("Successfully assigned default/g3 to {freed}")),
        "{events}"
    );
    // Reasons combine per node, sorted as "<count> <reason>" strings: a selector that
    // matches only one node (full) and CPU that fits nowhere.
    let file = k.write(
        "misfits.yaml",
        &format!(
            "{}{}",
            gpu_pod(
                "sel",
                1,
                &format!("  nodeSelector: {{kubernetes.io/hostname: {freed}}}\n")
            ),
            gpu_pod("cpu", 0, "").replace("cpu: 500m", "cpu: \"3\"")
        ),
    );
    k.ok(&["apply", "-f", &file]);
    wait_until("misfits refused", Duration::from_secs(30), || {
        (scheduled_cond(&fc, "sel").1
            == "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
            && scheduled_cond(&fc, "cpu").1
                == "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")
            .then_some(())
    });
    // Taints (all nodes) keep out pods without a matching toleration.
    let tainted = FakeCluster::start(Options {
        kubelet_delay: Duration::from_millis(20),
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 1,
            taints: vec!["dedicated=ml:NoSchedule".into()],
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let kt = Kubectl::new(&tainted).unwrap();
    let tol = "  tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]\n";
    let file = kt.write(
        "taint.yaml",
        &format!("{}{}", gpu_pod("plain", 0, ""), gpu_pod("tolerant", 0, tol)),
    );
    kt.ok(&["apply", "-f", &file]);
    wait_until("taint honoured", Duration::from_secs(30), || {
        (scheduled_cond(&tainted, "plain").1
            == "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
            && tainted.get("pods", "default", "tolerant").unwrap()["spec"]["nodeName"] == "fake-node-0")
            .then_some(())
    });
    assert!(
        kt.ok(&["describe", "node", "fake-node-0"])
            .contains("Taints:             dedicated=ml:NoSchedule")
    );
}

/// The Docker kubelet, through the real `kubectl` (exec, logs, delete) and the library.
mod docker {
    use super::*;
    use fake_cluster::KubeletMode;
    use serde_json::{Value, json};
    use std::time::Instant;

    const BUSYBOX: &str = "hvdctl-test/busybox:latest";
    const DEBIAN: &str = "hvdctl-test/debian:bookworm";

    fn image(env: &str, default: &str) -> String {
        std::env::var(env)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    }

    pub fn busybox() -> String {
        image("HVDCTL_TEST_BUSYBOX_IMAGE", BUSYBOX)
    }

    fn debian() -> String {
        image("HVDCTL_TEST_DEBIAN_IMAGE", DEBIAN)
    }

    /// A fake cluster with the Docker kubelet; `None` (skipped, with a note) when no daemon
    /// answers, unless `CI` is set: then the test fails.
    pub fn cluster() -> Option<FakeCluster> {
        cluster_with(|_| {})
    }

    /// `cluster()` with options changed by `f`.
    pub fn cluster_with(f: impl FnOnce(&mut Options)) -> Option<FakeCluster> {
        let mut opts = Options {
            kubelet: KubeletMode::Docker,
            pause_image: Some(busybox()),
            restart_backoff: Duration::from_millis(300),
            ..Default::default()
        };
        f(&mut opts);
        match FakeCluster::start(opts) {
            Ok(fc) => Some(fc),
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "the Docker kubelet needs a Docker daemon in CI: {e}"
                );
                eprintln!("SKIPPED: no Docker daemon answers ({e})");
                None
            }
        }
    }

    fn ready(fc: &FakeCluster, name: &str) -> Value {
        match fc.wait_for("pods", "default", name, Duration::from_secs(120), |p| {
            p.and_then(|p| p.pointer("/status/conditions"))
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        }) {
            Ok(p) => p.unwrap(),
            // The first line says what was seen last (a repetition tool reports only it),
            // the whole pod and its events follow.
            Err(p) => panic!(
                "pod {name} not ready after 120 s: {}\n{p:#?}\nevents: {:#?}",
                pod_summary(p.as_ref()),
                fc.list("events", Some("default"), "")
                    .iter()
                    .filter(|e| e["involvedObject"]["name"] == name)
                    .map(|e| format!("{} {}: {}", e["type"], e["reason"], e["message"]))
                    .collect::<Vec<_>>()
            ),
        }
    }

    /// One line: the pod's phase, each container's state, restarts and readiness, and the
    /// reasons of its conditions that are not True.
    fn pod_summary(p: Option<&Value>) -> String {
        let Some(p) = p else {
            return "no such pod".into();
        };
        let containers: Vec<String> = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let state = c["state"].as_object().and_then(|s| s.iter().next());
                let state = match state {
                    Some((k, v)) => format!(
                        "{k}{}",
                        [&v["reason"], &v["exitCode"], &v["message"]]
                            .iter()
                            .filter(|x| !x.is_null())
                            .map(|x| format!(" {x}"))
                            .collect::<String>()
                    ),
                    None => "no state".into(),
                };
                format!(
                    "{} {state} restarts={} ready={}",
                    c["name"], c["restartCount"], c["ready"]
                )
            })
            .collect();
        let conds: Vec<String> = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "True")
            .map(|c| format!("{}={} {}", c["type"], c["status"], c["reason"]))
            .collect();
        format!(
            "phase {}; containers [{}]; conditions not True [{}]",
            p["status"]["phase"],
            containers.join("; "),
            conds.join("; ")
        )
    }

    fn exec(k: &Kubectl, pod: &str, container: &str, script: &str) -> String {
        k.ok(&["exec", pod, "-c", container, "--", "sh", "-c", script])
    }

    fn docker_cli(args: &[&str]) -> Option<String> {
        let o = Command::new("docker").args(args).output().ok()?;
        assert!(
            o.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// What carries this cluster's id label: containers, networks, volumes (one name a line).
    fn owned(id: &str) -> Option<String> {
        let f = format!("label=io.hvdctl.fake-cluster.id={id}");
        let mut out = String::new();
        for what in [
            ["ps", "-a"].as_slice(),
            &["network", "ls"],
            &["volume", "ls"],
        ] {
            let mut args = what.to_vec();
            args.extend(["--filter", &f, "-q"]);
            out.push_str(&docker_cli(&args)?);
        }
        Some(out)
    }

    #[test]
    fn docker_pod_spec_semantics_through_kubectl_exec() {
        let Some(fc) = cluster() else { return };
        let Some(k) = Kubectl::new(&fc) else { return };
        let t0 = Instant::now();
        let yaml = format!(
            r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg}}
data: {{a: alpha, b: beta}}
---
apiVersion: v1
kind: Secret
metadata: {{name: sec}}
stringData: {{key: s3cret}}
---
apiVersion: v1
kind: Pod
metadata: {{name: spec}}
spec:
  securityContext: {{runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000}}
  volumes:
  - {{name: cfg, configMap: {{name: cfg, defaultMode: 0400, items: [{{key: a, path: dir/a.txt, mode: 0600}}, {{key: b, path: b}}]}}}}
  - {{name: sec, secret: {{secretName: sec, defaultMode: 0600}}}}
  - {{name: shared, emptyDir: {{}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 8Mi}}}}
  containers:
  - name: main
    image: {bb}
    command: [sh, -c]
    args: ['echo "$GREETING"; exec sleep 3600']
    workingDir: /tmp
    env:
    - {{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: NS, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: GREETING, value: "hello $(POD)"}}
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
    - {{name: sec, mountPath: /etc/sec}}
    - {{name: shared, mountPath: /shared}}
    - {{name: mem, mountPath: /mem}}
  - name: sidecar
    image: {bb}
    command: [sh, -c, 'echo from-sidecar > /shared/note; exec httpd -f -p 8080 -h /shared']
    securityContext: {{runAsUser: 1001}}
    volumeMounts: [{{name: shared, mountPath: /shared}}]
"#,
            bb = busybox()
        );
        let file = k.write("spec.yaml", &yaml);
        k.ok(&["apply", "-f", &file]);
        let pod = ready(&fc, "spec");
        eprintln!(
            "2-container busybox pod Running+Ready after {:?}",
            t0.elapsed()
        );
        let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
        assert!(!ip.is_empty() && !ip.starts_with("10.244."), "{ip}");
        // Modes (items' own mode, defaultMode; fsGroup adds group read), ownership, user.
        let out = exec(
            &k,
            "spec",
            "main",
            "stat -c '%a %g' /etc/cfg/dir/a.txt /etc/cfg/b /etc/sec/key; id -u; id -g; id -G; pwd",
        );
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(l[0..3], ["640 2000", "440 2000", "640 2000"], "{out}");
        assert_eq!(l[3], "1000", "{out}");
        assert_eq!(l[4], "3000", "{out}");
        assert!(
            l[5].split(' ').any(|g| g == "2000"),
            "fsGroup is a supplementary group: {out}"
        );
        assert_eq!(l[6], "/tmp", "{out}");
        assert_eq!(exec(&k, "spec", "sidecar", "id -u").trim(), "1001");
        assert_eq!(exec(&k, "spec", "main", "cat /etc/sec/key"), "s3cret");
        // Env: values with $(VAR) expansion, fieldRefs.
        let env = exec(&k, "spec", "main", "echo $POD $NS $IP");
        assert_eq!(env.trim(), format!("spec default {ip}"));
        // Ready says the containers started, not that their first command ran: wait for
        // the line, then it is the only one.
        let logs = wait_until("main's greeting", Duration::from_secs(60), || {
            let l = k.ok(&["logs", "spec", "-c", "main"]);
            (!l.is_empty()).then_some(l)
        });
        assert_eq!(logs.trim(), "hello spec");
        // One network namespace: the sidecar's server answers on localhost; the emptyDir
        // is shared.
        // (the sidecar writes the note, then starts its server: wait until it answers)
        let got = wait_until("the sidecar's server", Duration::from_secs(60), || {
            let o = k.run(&[
                "exec",
                "spec",
                "-c",
                "main",
                "--",
                "sh",
                "-c",
                "wget -q -O - http://127.0.0.1:8080/note",
            ]);
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        });
        assert_eq!(got.trim(), "from-sidecar");
        assert_eq!(exec(&k, "spec", "main", "hostname -i").trim(), ip);
        // emptyDir medium Memory: a tmpfs of the size limit, shared.
        let df = exec(&k, "spec", "main", "df -k /mem | tail -1");
        assert!(df.starts_with("tmpfs") && df.contains(" 8192 "), "{df}");
        // A ConfigMap changed through the API reaches the running container.
        let t = Instant::now();
        k.ok(&[
            "patch",
            "configmap",
            "cfg",
            "-p",
            r#"{"data":{"b":"BETA2"}}"#,
        ]);
        wait_until("configmap update visible", Duration::from_secs(90), || {
            (exec(&k, "spec", "main", "cat /etc/cfg/b") == "BETA2").then_some(())
        });
        eprintln!(
            "ConfigMap change visible in the container after {:?}",
            t.elapsed()
        );
        // Exec round trip.
        let t = Instant::now();
        for _ in 0..5 {
            exec(&k, "spec", "main", "true");
        }
        eprintln!("kubectl exec round trip: {:?}", t.elapsed() / 5);
        // A non-zero exit reaches kubectl.
        let o = k.run(&["exec", "spec", "-c", "main", "--", "sh", "-c", "exit 7"]);
        assert_eq!(o.status.code(), Some(7));
        // stdin.
        let mut c = k.cmd(&[
            "exec",
            "-i",
            "spec",
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z",
        ]);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        {
            use std::io::Write;
            let mut si = child.stdin.take().unwrap();
            si.write_all(b"shout\n").unwrap();
        }
        let o = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "SHOUT\n");
    }

    #[test]
    fn docker_hostnames_and_headless_services_resolve() {
        let Some(fc) = cluster() else { return };
        let Some(k) = Kubectl::new(&fc) else { return };
        let pod = |i: u32| {
            format!(
                r#"apiVersion: v1
kind: Pod
metadata: {{name: w{i}, labels: {{app: dns}}}}
spec:
  hostname: h{i}
  subdomain: grp
  terminationGracePeriodSeconds: 0
  containers:
  - {{name: c, image: {img}, command: [sleep, "3600"]}}
"#,
                img = debian()
            )
        };
        let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: grp}\nspec: {clusterIP: None, selector: {app: dns}}\n";
        let file = k.write("dns.yaml", &format!("{svc}---\n{}---\n{}", pod(0), pod(1)));
        k.ok(&["apply", "-f", &file]);
        let ip0 = ready(&fc, "w0")["status"]["podIP"]
            .as_str()
            .unwrap()
            .to_string();
        let ip1 = ready(&fc, "w1")["status"]["podIP"]
            .as_str()
            .unwrap()
            .to_string();
        let q = |name: &str| {
            exec(
                &k,
                "w0",
                "c",
                &format!("getent hosts {name} | cut -d' ' -f1"),
            )
        };
        assert_eq!(q("h1.grp.default.svc").trim(), ip1);
        assert_eq!(q("h1.grp.default.svc.cluster.local").trim(), ip1);
        assert_eq!(q("h1.grp").trim(), ip1);
        assert_eq!(q("h0.grp.default.svc").trim(), ip0);
        let all = exec(
            &k,
            "w0",
            "c",
            "getent ahostsv4 grp.default.svc | awk '{print $1}' | sort -u",
        );
        let mut want = vec![ip0.clone(), ip1.clone()];
        want.sort();
        assert_eq!(all.lines().collect::<Vec<_>>(), want, "{all}");
        // Kept current as pods come and go.
        k.ok(&["apply", "-f", &k.write("w2.yaml", &pod(2))]);
        let ip2 = ready(&fc, "w2")["status"]["podIP"]
            .as_str()
            .unwrap()
            .to_string();
        wait_until("w2 resolvable from w0", Duration::from_secs(30), || {
            (q("h2.grp.default.svc").trim() == ip2).then_some(())
        });
        k.ok(&["delete", "pod", "w2"]);
        wait_until("w2 gone from w0's hosts", Duration::from_secs(30), || {
            q("h2.grp.default.svc").trim().is_empty().then_some(())
        });
    }

    #[test]
    fn docker_restarts_oom_logs_and_pull_policy() {
        let Some(fc) = cluster() else { return };
        let Some(k) = Kubectl::new(&fc) else { return };
        let yaml = format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: flaky}}
spec:
  restartPolicy: OnFailure
  volumes: [{{name: state, emptyDir: {{}}}}]
  containers:
  - name: c
    image: {bb}
    volumeMounts: [{{name: state, mountPath: /state}}]
    command: [sh, -c, 'n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; for i in 1 2 3; do echo "run $n line $i"; done; [ $n -ge 3 ]']
---
apiVersion: v1
kind: Pod
metadata: {{name: oom}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: {bb}
    command: [sh, -c, 'echo allocating; exec tail /dev/zero']
    resources: {{limits: {{memory: 16Mi, cpu: 500m}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: never}}
spec:
  containers: [{{name: c, image: "absent.invalid/none:1", imagePullPolicy: Never}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: pull}}
spec:
  containers: [{{name: c, image: "absent.invalid/none:1"}}]
"#,
            bb = busybox()
        );
        let since = fc.resource_version();
        k.ok(&["apply", "-f", &k.write("pods.yaml", &yaml)]);
        let done = fc
            .wait_for("pods", "default", "flaky", Duration::from_secs(120), |p| {
                p.and_then(|p| p.pointer("/status/phase")) == Some(&json!("Succeeded"))
            })
            .unwrap_or_else(|p| panic!("{p:#?}"))
            .unwrap();
        let cs = &done["status"]["containerStatuses"][0];
        assert_eq!(cs["restartCount"], 2, "{cs:#}");
        assert_eq!(cs["state"]["terminated"]["reason"], "Completed");
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(cs["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(
            k.ok(&["logs", "flaky"]),
            "run 3 line 1\nrun 3 line 2\nrun 3 line 3\n"
        );
        assert_eq!(
            k.ok(&["logs", "flaky", "--previous"]),
            "run 2 line 1\nrun 2 line 2\nrun 2 line 3\n"
        );
        assert_eq!(k.ok(&["logs", "flaky", "--tail", "1"]), "run 3 line 3\n");
        let ts = k.ok(&["logs", "flaky", "--timestamps"]);
        let stamps: Vec<&str> = ts.lines().map(|l| l.split(' ').next().unwrap()).collect();
        for s in &stamps {
            assert_eq!(s.len(), 30, "kubelet format, 9 digits: {s}");
        }
        // sinceTime is exact: from the third line's stamp on.
        let r = get(
            &fc,
            &format!(
                "/api/v1/namespaces/default/pods/flaky/log?sinceTime={}",
                stamps[2]
            ),
        );
        assert_eq!(r.text(), "run 3 line 3\n", "sinceTime is exact");
        assert_eq!(
            k.ok(&["logs", "flaky", "-f"]),
            "run 3 line 1\nrun 3 line 2\nrun 3 line 3\n",
            "follow ends with the container"
        );
        // OOM is real.
        let p = fc
            .wait_for("pods", "default", "oom", Duration::from_secs(120), |p| {
                p.and_then(|p| p.pointer("/status/phase")) == Some(&json!("Failed"))
            })
            .unwrap_or_else(|p| panic!("{p:#?}"))
            .unwrap();
        let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(t["reason"], "OOMKilled", "{t:#}");
        assert_eq!(t["exitCode"], 137);
        // The kernel's record of the kill, which the kubelet reads when Docker's flag missed it.
        let cid = t["containerID"]
            .as_str()
            .unwrap()
            .trim_start_matches("docker://");
        assert!(fake_cluster::docker::kernel_saw_oom(cid), "{t:#}");
        // Image pull policy. ErrImagePull lasts until the next pass turns it into
        // ImagePullBackOff: every status written counts, not only the one a poll catches.
        let waiting = |name: &str, reason: &str| {
            fc.wait_seen(
                "pods",
                "default",
                name,
                since,
                Duration::from_secs(120),
                |p| {
                    p.pointer("/status/containerStatuses/0/state/waiting/reason")
                        == Some(&json!(reason))
                },
            )
            .unwrap_or_else(|seen| panic!("{name} never {reason}; written: {seen:#?}"))
        };
        let p = waiting("never", "ErrImageNeverPull");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
            "Container image \"absent.invalid/none:1\" is not present with pull policy of Never"
        );
        let p = waiting("pull", "ErrImagePull");
        let msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            msg.starts_with("Failed to pull image \"absent.invalid/none:1\": ")
                && msg.contains("absent.invalid"),
            "{msg}"
        );
        let p = waiting("pull", "ImagePullBackOff");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
            "Back-off pulling image \"absent.invalid/none:1\""
        );
        assert_eq!(p["status"]["phase"], "Pending");
    }

    #[test]
    fn docker_graceful_deletion_and_cleanup() {
        let Some(fc) = cluster() else { return };
        let Some(k) = Kubectl::new(&fc) else { return };
        let id = fc.docker_id().unwrap().to_string();
        let yaml = format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: stubborn}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {{name: c, image: {bb}, command: [sh, -c, 'trap "echo ignored" TERM; while :; do sleep 0.1; done']}}
---
apiVersion: v1
kind: Pod
metadata: {{name: polite}}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - {{name: c, image: {bb}, command: [sh, -c, 'trap "exit 0" TERM; while :; do sleep 0.1; done']}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: writer}}
spec:
  restartPolicy: Never
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}, {{name: m, emptyDir: {{medium: Memory}}}}]
  containers:
  - {{name: c, image: {bb}, command: [sh, -c, 'echo kept > /d/f'], volumeMounts: [{{name: d, mountPath: /d}}, {{name: m, mountPath: /m}}]}}
"#,
            bb = busybox()
        );
        k.ok(&["apply", "-f", &k.write("g.yaml", &yaml)]);
        ready(&fc, "stubborn");
        ready(&fc, "polite");
        assert_eq!(
            fc.get("pvc", "default", "data").unwrap()["status"]["phase"],
            "Bound"
        );
        // TERM ignored: killed after the grace period; the pod shows Terminating meanwhile.
        let t = Instant::now();
        let child = k.cmd(&["delete", "pod", "stubborn"]).output().unwrap();
        let took = t.elapsed();
        assert!(child.status.success());
        assert!(
            // (the upper bound only tells "killed after its 2 s" from a hang: generous)
            took >= Duration::from_millis(1900) && took < Duration::from_secs(25),
            "{took:?}"
        );
        // TERM handled: gone at once, long before its 30 s grace period.
        let t = Instant::now();
        k.ok(&["delete", "pod", "polite"]);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        // A claim outlives its pods: a second pod reads what the first wrote.
        fc.wait_for("pods", "default", "writer", Duration::from_secs(120), |p| {
            p.and_then(|p| p.pointer("/status/phase")) == Some(&json!("Succeeded"))
        })
        .unwrap();
        let reader = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: reader}}\nspec:\n  restartPolicy: Never\n  volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]\n  containers:\n  - {{name: c, image: {bb}, command: [cat, /d/f], volumeMounts: [{{name: d, mountPath: /d}}]}}\n",
            bb = busybox()
        );
        k.ok(&["apply", "-f", &k.write("r.yaml", &reader)]);
        fc.wait_for("pods", "default", "reader", Duration::from_secs(120), |p| {
            p.and_then(|p| p.pointer("/status/phase")) == Some(&json!("Succeeded"))
        })
        .unwrap();
        assert_eq!(k.ok(&["logs", "reader"]), "kept\n");
        let Some(before) = owned(&id) else {
            assert!(std::env::var_os("CI").is_none(), "docker CLI needed in CI");
            return;
        };
        assert!(
            before.lines().count() >= 3,
            "containers, network, volumes: {before}"
        );
        drop(fc);
        assert_eq!(
            owned(&id).unwrap(),
            "",
            "everything of the fake cluster is removed at drop"
        );
    }

    #[test]
    fn docker_start_removes_only_dead_clusters_leftovers() {
        if docker_cli(&["version", "-f", "{{.Server.Version}}"]).is_none() {
            assert!(std::env::var_os("CI").is_none(), "docker CLI needed in CI");
            return;
        }
        let bb = busybox();
        let make = |name: &str, pid: &str| {
            let _ = Command::new("docker").args(["rm", "-f", name]).output();
            docker_cli(&[
                "create",
                "--name",
                name,
                "--label",
                "io.hvdctl.fake-cluster.id=leftover-test",
                "--label",
                &format!("io.hvdctl.fake-cluster.pid={pid}"),
                &bb,
                "true",
            ])
        };
        // A pid that cannot exist (above pid_max), and this live process.
        let dead = format!("fc-leftover-dead-{}", std::process::id());
        let live = format!("fc-leftover-live-{}", std::process::id());
        make(&dead, "4294967").unwrap();
        make(&live, &std::process::id().to_string()).unwrap();
        let Some(fc) = cluster() else { return };
        let names = docker_cli(&[
            "ps",
            "-a",
            "--filter",
            "label=io.hvdctl.fake-cluster.id=leftover-test",
            "--format",
            "{{.Names}}",
        ])
        .unwrap();
        let _ = Command::new("docker").args(["rm", "-f", &live]).output();
        assert!(!names.contains(&dead), "{names}");
        assert!(names.contains(&live), "{names}");
        drop(fc);
    }

    /// An MPIJob `name` whose launcher and workers run `image`; `launcher`/`worker` are the
    /// containers' commands as YAML (empty: none, so workers get the operator's sshd).
    fn mpijob_yaml(name: &str, image: &str, workers: u32, launcher: &str, worker: &str) -> String {
        let cmd = |c: &str| {
            if c.is_empty() {
                String::new()
            } else {
                format!("\n            command: {c}")
            }
        };
        format!(
            r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: {name}}}
spec:
  slotsPerWorker: 2
  runPolicy: {{cleanPodPolicy: Running, backoffLimit: 0}}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          terminationGracePeriodSeconds: 0
          containers:
          - name: launcher
            image: {image}{lc}
    Worker:
      replicas: {workers}
      template:
        spec:
          terminationGracePeriodSeconds: 0
          containers:
          - name: worker
            image: {image}{wc}
"#,
            lc = cmd(launcher),
            wc = cmd(worker),
        )
    }

    fn role_pod(fc: &FakeCluster, job: &str, role: &str) -> String {
        wait_until(
            &format!("{job}'s {role} pod"),
            Duration::from_secs(120),
            || {
                fc.list(
                    "pods",
                    Some("default"),
                    &format!(
                        "training.kubeflow.org/job-name={job},training.kubeflow.org/job-role={role}"
                    ),
                )
                .first()
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            },
        )
    }

    #[test]
    fn docker_mpijob_ssh_secret_hostfile_env_and_hostnames() {
        let Some(fc) = cluster_with(|o| o.mpi_operator = true) else {
            return;
        };
        let Some(k) = Kubectl::new(&fc) else { return };
        let sleep = r#"[sleep, "3600"]"#;
        let file = k.write("pi.yaml", &mpijob_yaml("pi", &debian(), 2, sleep, sleep));
        k.ok(&["apply", "-f", &file]);
        let launcher = role_pod(&fc, "pi", "launcher");
        ready(&fc, &launcher);
        let ips: Vec<String> = (0..2)
            .map(|i| {
                ready(&fc, &format!("pi-worker-{i}"))["status"]["podIP"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        // The ssh Secret's items and modes at sshAuthMountPath (default /root/.ssh, 0600),
        // the ConfigMap's at /etc/mpi (launcher only).
        let modes = exec(
            &k,
            &launcher,
            "launcher",
            "cd /root/.ssh && stat -L -c '%a %n' * && cd /etc/mpi && stat -L -c '%a %n' *",
        );
        assert_eq!(
            modes,
            "600 authorized_keys\n600 id_rsa\n600 id_rsa.pub\n444 discover_hosts.sh\n444 hostfile\n"
                .replace("444 discover", "555 discover"),
        );
        let worker_files = exec(
            &k,
            "pi-worker-1",
            "worker",
            "stat -L -c '%a %n' /root/.ssh/*; ls /etc/mpi 2>&1 || true",
        );
        assert!(
            worker_files.starts_with(
                "600 /root/.ssh/authorized_keys\n600 /root/.ssh/id_rsa\n600 /root/.ssh/id_rsa.pub\n"
            ) && worker_files.contains("No such file"),
            "{worker_files}"
        );
        let keys = exec(
            &k,
            &launcher,
            "launcher",
            "cmp /root/.ssh/id_rsa.pub /root/.ssh/authorized_keys && head -1 /root/.ssh/id_rsa && cut -d' ' -f1 /root/.ssh/id_rsa.pub",
        );
        assert_eq!(keys, "-----BEGIN OPENSSH PRIVATE KEY-----\nssh-ed25519\n");
        let hostfile = exec(&k, &launcher, "launcher", "cat /etc/mpi/hostfile");
        assert_eq!(
            hostfile,
            "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n"
        );
        // Every hostfile line resolves, from the launcher, to that worker's pod IP.
        for (i, line) in hostfile.lines().enumerate() {
            let host = line.split(' ').next().unwrap();
            let got = exec(&k, &launcher, "launcher", &format!("getent hosts {host}"));
            assert_eq!(
                got.split_whitespace().next(),
                Some(ips[i].as_str()),
                "{got}"
            );
        }
        let env = exec(
            &k,
            &launcher,
            "launcher",
            "env | grep -E '^(OMPI_|K_MPI|NVIDIA_)' | sort",
        );
        assert_eq!(
            env,
            "K_MPI_JOB_ROLE=launcher\nNVIDIA_DRIVER_CAPABILITIES=\nNVIDIA_VISIBLE_DEVICES=\nOMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile\nOMPI_MCA_orte_keep_fqdn_hostnames=true\nOMPI_MCA_orte_set_default_slots=2\nOMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10\n"
        );
        assert_eq!(
            exec(
                &k,
                "pi-worker-0",
                "worker",
                "echo $K_MPI_JOB_ROLE; hostname"
            ),
            "worker\npi-worker-0\n"
        );
        let discover = || exec(&k, &launcher, "launcher", "/etc/mpi/discover_hosts.sh");
        assert_eq!(
            discover(),
            "pi-worker-0.pi.default.svc\npi-worker-1.pi.default.svc\n"
        );
        // Scaling down: the hostfile and discover_hosts.sh follow in the running launcher.
        let t = Instant::now();
        k.ok(&[
            "patch",
            "mpijob",
            "pi",
            "--type=merge",
            "-p",
            r#"{"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":1}}}}"#,
        ]);
        wait_until("launcher sees one worker", Duration::from_secs(60), || {
            (discover() == "pi-worker-0.pi.default.svc\n"
                && exec(&k, &launcher, "launcher", "cat /etc/mpi/hostfile")
                    == "pi-worker-0.pi.default.svc slots=2\n")
                .then_some(())
        });
        eprintln!("scale-down visible in the launcher after {:?}", t.elapsed());
        // The Service is `<job>` and selects the launcher too.
        let svc = exec(
            &k,
            &launcher,
            "launcher",
            "getent ahostsv4 pi.default.svc | awk '{print $1}' | sort -u | wc -l",
        );
        assert_eq!(svc.trim(), "2", "launcher + the remaining worker");
        k.ok(&["delete", "mpijob", "pi"]);
    }

    /// A small image with sshd and Open MPI, built from the Debian test image (needs Debian's
    /// apt mirrors). `None` (skipped, with a note) when it cannot be built and `CI` is unset.
    fn openmpi_image() -> Option<String> {
        let tag = "fake-cluster-test/openmpi:bookworm";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Dockerfile"),
            format!(
                "FROM {}\n\
                 RUN apt-get update && apt-get install -y --no-install-recommends openssh-server openssh-client openmpi-bin && rm -rf /var/lib/apt/lists/*\n\
                 RUN mkdir -p /run/sshd && sed -i 's/^#\\?StrictModes .*/StrictModes no/' /etc/ssh/sshd_config \
                 && printf 'StrictHostKeyChecking no\\nUserKnownHostsFile /dev/null\\nLogLevel ERROR\\n' >> /etc/ssh/ssh_config\n",
                debian()
            ),
        )
        .unwrap();
        let o = Command::new("docker")
            .args(["build", "-q", "-t", tag])
            .arg(dir.path())
            .output()
            .expect("run docker build");
        if !o.status.success() {
            let why = String::from_utf8_lossy(&o.stderr);
            assert!(
                std::env::var_os("CI").is_none(),
                "building {tag} failed: {why}"
            );
            eprintln!("SKIPPED: cannot build {tag} (no apt mirror?): {why}");
            return None;
        }
        Some(tag.to_string())
    }

    #[test]
    fn docker_mpijob_mpirun_over_ssh() {
        let Some(fc) = cluster_with(|o| o.mpi_operator = true) else {
            return;
        };
        let Some(k) = Kubectl::new(&fc) else { return };
        let t = Instant::now();
        let Some(image) = openmpi_image() else { return };
        eprintln!("image ready after {:?}", t.elapsed());
        let t = Instant::now();
        // Workers have no command: the operator's `/usr/sbin/sshd -De` runs. The launcher
        // waits until ssh with the Secret's key reaches every hostfile host (as a launcher
        // script waits for the workers' sshd), then mpirun reads the operator's env and
        // hostfile and starts its ranks on the workers over ssh.
        let launcher = r#"[sh, -c, 'for h in $(cut -d" " -f1 /etc/mpi/hostfile); do n=0; until ssh -o ConnectTimeout=2 $h true; do n=$((n+1)); [ $n -lt 100 ] || exit 3; sleep 0.2; done; done; exec mpirun --allow-run-as-root -np 4 hostname']"#;
        let file = k.write("mpi.yaml", &mpijob_yaml("mpi", &image, 2, launcher, ""));
        k.ok(&["apply", "-f", &file]);
        let done = fc
            .wait_for("mpijobs", "default", "mpi", Duration::from_secs(60), |j| {
                j.and_then(|j| j.pointer("/status/conditions"))
                    .and_then(Value::as_array)
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            (c["type"] == "Succeeded" || c["type"] == "Failed")
                                && c["status"] == "True"
                        })
                    })
            })
            .map(|j| j.unwrap())
            .unwrap_or_else(|j| panic!("MPIJob did not finish: {j:#?}"));
        let pod = role_pod(&fc, "mpi", "launcher");
        let mut logs = k.ok(&["logs", &pod]);
        for w in ["mpi-worker-0", "mpi-worker-1"] {
            if let Some(p) = fc.get("pods", "default", w) {
                logs.push_str(&format!(
                    "\n[{w}: {}]\n",
                    p["status"]["containerStatuses"][0]["state"]
                ));
            }
        }
        eprintln!("mpirun over ssh finished after {:?}", t.elapsed());
        let mut hosts: Vec<&str> = logs
            .lines()
            .filter(|l| l.starts_with("mpi-worker-"))
            .collect();
        hosts.sort_unstable();
        assert_eq!(
            hosts,
            [
                "mpi-worker-0",
                "mpi-worker-0",
                "mpi-worker-1",
                "mpi-worker-1"
            ],
            "{logs}"
        );
        let succeeded = done["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Succeeded" && c["status"] == "True");
        assert!(succeeded, "{done:#?}\n{logs}");
        // cleanPodPolicy Running: the workers' sshd are stopped once the launcher is done.
        wait_until("workers removed", Duration::from_secs(120), || {
            fc.list(
                "pods",
                Some("default"),
                "training.kubeflow.org/job-role=worker",
            )
            .is_empty()
            .then_some(())
        });
    }

    #[test]
    fn docker_scheduler_binds_what_fits_and_runs_nothing_else() {
        let Some(fc) = cluster_with(|o| {
            o.nodes = fake_cluster::scheduler::NodeSpec {
                count: 2,
                cpu: "1".into(),
                memory: "2Gi".into(),
                ..Default::default()
            }
        }) else {
            return;
        };
        let Some(k) = Kubectl::new(&fc) else { return };
        let pod = |name: &str, limits: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - {{name: c, image: {}, command: [sleep, \"3600\"], resources: {{limits: {{{limits}}}}}}}\n---\n",
                busybox()
            )
        };
        let file = k.write(
            "pods.yaml",
            &format!(
                "{}{}{}",
                pod("small", "cpu: 600m, memory: 64Mi"),
                pod("second", "cpu: 600m, memory: 64Mi"),
                pod("gpu", "nvidia.com/gpu: 1, memory: 64Mi"),
            ),
        );
        k.ok(&["apply", "-f", &file]);
        let a = ready(&fc, "small");
        let b = ready(&fc, "second");
        // 600m each on 1-CPU nodes: one per node.
        assert_ne!(a["spec"]["nodeName"], b["spec"]["nodeName"]);
        let wide = k.ok(&["get", "pod", "small", "-o", "wide"]);
        assert!(
            wide.contains(a["spec"]["nodeName"].as_str().unwrap()),
            "{wide}"
        );
        wait_until("gpu pod refused", Duration::from_secs(60), || {
            let p = fc.get("pods", "default", "gpu").unwrap();
            let c = p["status"]["conditions"].as_array().and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                    .cloned()
            })?;
            Some(c["message"].as_str().unwrap().to_string())
        });
        let msg = k.ok(&[
            "get",
            "pod",
            "gpu",
            "-o",
            "jsonpath={.status.conditions[0].message}",
        ]);
        assert_eq!(
            msg,
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        );
        // Nothing of the refused pod reached Docker.
        let id = fc.docker_id().unwrap().to_string();
        let names = docker_cli(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=io.hvdctl.fake-cluster.id={id}"),
            "--format",
            "{{.Label \"io.hvdctl.fake-cluster.pod\"}}",
        ])
        .unwrap();
        assert!(names.contains("small") && !names.contains("gpu"), "{names}");
        k.ok(&["delete", "pod", "gpu", "small", "second"]);
    }
}

/// What a strict schema check passes and the real apiserver refuses
/// (pkg/apis/core/validation/validation.go, apimachinery's ValidateAnnotationsSize): 422
/// Invalid with the apiserver's field path and wording, for pods, pod templates and claims,
/// and through kubectl as a user sees it.
#[test]
fn apiserver_rules_a_schema_passes() {
    let fc = start(true);
    let pod = |res: serde_json::Value, extra: serde_json::Value| {
        let mut p = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": res}]}});
        if let Some(m) = extra.as_object() {
            for (k, v) in m {
                p["spec"][k] = v.clone();
            }
        }
        p
    };
    let refused = |obj: serde_json::Value| -> String {
        let e = fc.create(obj).expect_err("refused");
        assert_eq!(e.code, 422, "{e:?}");
        e.message.clone()
    };
    let none = serde_json::json!({});
    for (res, extra, want) in [
        (
            serde_json::json!({"limits": {"hugepages-2Mi": "4Mi"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
        ),
        (
            serde_json::json!({"requests": {"hugepages-2Mi": "2Mi", "memory": "1Gi"}, "limits": {"hugepages-2Mi": "4Mi"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi",
        ),
        (
            serde_json::json!({"requests": {"example.com/foo": "2"}, "limits": {"example.com/foo": "1"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2\": must be equal to example.com/foo limit of 1",
        ),
        (
            serde_json::json!({"requests": {"example.com/fpga": "1"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
        ),
        (
            serde_json::json!({"limits": {"example.com/foo": "0.5"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources.limits[example.com/foo]: Invalid value: \"0.5\": must be an integer",
        ),
        (
            serde_json::json!({"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}),
            none.clone(),
            "Pod \"p\" is invalid: spec.containers[0].resources.requests: Invalid value: \"4\": must be less than or equal to cpu limit of 2",
        ),
        (
            none.clone(),
            serde_json::json!({"tolerations": [{"key": "k", "value": "not a label"}]}),
            "Pod \"p\" is invalid: spec.tolerations[0].operator: Invalid value: \"not a label\": a valid label must be an empty string",
        ),
    ] {
        let m = refused(pod(res, extra));
        assert!(m.starts_with(want), "{m}\nwanted: {want}");
    }
    // What fits: equal extended request and limit written two ways, hugepages beside memory.
    fc.create(pod(
        serde_json::json!({"requests": {"example.com/foo": "1000m"}, "limits": {"example.com/foo": "1", "hugepages-2Mi": "4Mi", "memory": "1Gi"}}),
        none.clone(),
    ))
    .expect("valid");
    // A Job's pod template, an MPIJob's worker template.
    let mut job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i", "resources": {"limits": {"example.com/foo": "0.5"}}}]}}}});
    assert!(refused(job.clone()).contains("spec.template.spec.containers[0].resources.limits[example.com/foo]: Invalid value: \"0.5\": must be an integer"));
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = serde_json::json!({});
    job["metadata"]["annotations"] = serde_json::json!({"a": "x".repeat(256 * 1024)});
    assert_eq!(
        refused(job),
        "Job \"j\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
    );
    let mj = serde_json::json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "m"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}},
            "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "w", "image": "i", "resources": {"limits": {"hugepages-1Gi": "1Gi"}}}]}}}}}});
    assert!(refused(mj).contains("spec.mpiReplicaSpecs[Worker].template.spec.containers[0].resources: Forbidden: HugePages require cpu or memory"));
    // Claims.
    let claim = |size: &str, modes: serde_json::Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}})
    };
    assert_eq!(
        refused(claim("0", serde_json::json!(["ReadWriteOnce"]))),
        "PersistentVolumeClaim \"c\" is invalid: spec.resources.requests[storage]: Invalid value: \"0\": must be greater than zero"
    );
    assert_eq!(
        refused(claim(
            "1Gi",
            serde_json::json!(["ReadWriteOncePod", "ReadWriteMany"])
        )),
        "PersistentVolumeClaim \"c\" is invalid: spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"
    );
    // Through kubectl: the same words, exit 1.
    let Some(k) = Kubectl::new(&fc) else { return };
    let file = k.write(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec:\n  containers:\n  - {name: c, image: i, resources: {limits: {hugepages-2Mi: 4Mi}}}\n",
    );
    let o = k.run(&["apply", "--server-side", "-f", &file]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Pod \"q\" is invalid: spec.containers[0].resources: Forbidden: HugePages require cpu or memory"),
        "{err}"
    );
}
