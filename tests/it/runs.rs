//! The run ledger: `hvdctl runs` over a local run and mpijob and native runs on the fake
//! cluster's Docker kubelet (real containers, the `mpi-hello` app): every key of the JSON
//! contract, the image digest against `docker image inspect`, the phase times against the
//! containers' and pods' own timestamps (read with the docker CLI and kubectl), rows that do
//! not change when `.hvdctl/` is deleted, and no `env` value in any annotation or label.
//! Bad input: no app, `-w -o json`, no engine reachable.

use crate::util::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const SECRET: &str = "ledger-secret-value-93f1";

const KEYS: &[&str] = &[
    "run",
    "job",
    "app",
    "backend",
    "engine",
    "context",
    "namespace",
    "state",
    "created",
    "image",
    "imageDigest",
    "gitCommit",
    "gitDirty",
    "workers",
    "slotsPerWorker",
    "phases",
    "startLatencySeconds",
    "source",
    "queue",
];

fn ts(s: &str) -> jiff::Timestamp {
    s.parse()
        .unwrap_or_else(|e| panic!("`{s}` is not RFC 3339: {e}"))
}

fn max(v: impl IntoIterator<Item = jiff::Timestamp>) -> jiff::Timestamp {
    v.into_iter().max().expect("at least one time")
}

fn min(v: impl IntoIterator<Item = jiff::Timestamp>) -> jiff::Timestamp {
    v.into_iter().min().expect("at least one time")
}

/// The time of the training command's first line in a launcher's log printed with
/// timestamps (`<RFC 3339> <text>`): its earliest line that is not one of the `hvdctl: `
/// lines hvdctl's launcher script writes while it waits for the workers.
fn first_training_stamp(log: &str) -> Option<jiff::Timestamp> {
    log.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, text)| !text.starts_with("hvdctl: "))
        .filter_map(|(t, _)| t.parse::<jiff::Timestamp>().ok())
        .min()
}

/// The latest `hvdctl: worker ... is ready` line of a launcher's log with timestamps.
fn last_ready_stamp(log: &str) -> Option<jiff::Timestamp> {
    log.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, text)| text.starts_with("hvdctl: worker ") && text.ends_with(" is ready"))
        .filter_map(|(t, _)| t.parse::<jiff::Timestamp>().ok())
        .max()
}

/// The phase `key` of a row, parsed.
fn phase(row: &Value, key: &str) -> jiff::Timestamp {
    ts(row["phases"][key]
        .as_str()
        .unwrap_or_else(|| panic!("phase {key} missing: {row}")))
}

/// `hvdctl runs -o json` in `dir` (against `kc`), the rows of `ids`, by id.
fn rows(dir: &Path, kc: &Path, ids: &[&str]) -> Vec<Value> {
    let o = hv(dir, Some(kc), &["runs", "-o", "json"]);
    assert_eq!(o.code, 0, "runs: {}", o.stderr);
    let all: Vec<Value> = serde_json::from_str(&o.stdout).expect("runs -o json is a JSON array");
    // Newest first.
    let created: Vec<jiff::Timestamp> = all
        .iter()
        .map(|r| ts(r["created"].as_str().unwrap()))
        .collect();
    assert!(
        created.windows(2).all(|w| w[0] >= w[1]),
        "not newest first: {created:?}"
    );
    ids.iter()
        .map(|id| {
            all.iter()
                .find(|r| r["run"] == *id)
                .unwrap_or_else(|| panic!("run {id} not listed: {}", o.stdout))
                .clone()
        })
        .collect()
}

fn check_common(row: &Value, image: &str, id_of_image: &str) {
    for k in KEYS {
        assert!(row.get(*k).is_some(), "key {k} missing: {row}");
    }
    assert_eq!(row["app"], "hello", "{row}");
    assert_eq!(row["state"], "Succeeded", "{row}");
    assert_eq!(row["image"], image, "{row}");
    assert_eq!(row["imageDigest"], id_of_image, "{row}");
    // The app directory is a temp dir, not in a git repository.
    assert_eq!(row["gitCommit"], Value::Null, "{row}");
    assert_eq!(row["gitDirty"], Value::Null, "{row}");
    assert_eq!(row["workers"], 2, "{row}");
    assert_eq!(row["slotsPerWorker"], 1, "{row}");
    assert_eq!(row["source"], "engine", "{row}");
    assert_eq!(ts(row["created"].as_str().unwrap()), phase(row, "created"));
    let latency = phase(row, "firstLog")
        .duration_since(phase(row, "created"))
        .as_secs_f64();
    let got = row["startLatencySeconds"].as_f64().expect("a latency");
    assert!((got - latency).abs() < 0.002, "{got} vs {latency}: {row}");
}

/// Deploys run `id` of the app in `dir` with `args`, waits for its end with `status --wait`.
fn deploy_and_wait(dir: &Path, kc: &Path, id: &str, args: &[&str]) {
    let mut a = vec!["deploy", "--run-id", id, "--wait"];
    a.extend(args);
    a.extend(["--set", "workers=2", "--set"]);
    let secret = format!("env.LEDGER_TOKEN={SECRET}");
    a.push(&secret);
    let d = hv(dir, Some(kc), &a);
    assert_eq!(d.code, 0, "deploy {args:?}: {}", d.stderr);
    let w = hv(dir, Some(kc), &["status", "--wait", id]);
    assert_eq!(w.code, 0, "status --wait: {}\n{}", w.stdout, w.stderr);
}

#[test]
fn runs_lists_local_mpijob_and_native_runs_with_every_key() {
    let Some(docker) = docker() else { return };
    let image = template_image(&docker, "mpi-hello", &debian_image());
    let host = docker.host().to_string();
    let inspect = |what: &str| -> Value {
        let v: Value = serde_json::from_str(&docker_cli(&host, &["inspect", what], &[])).unwrap();
        v[0].clone()
    };
    let image_id = inspect(&image)["Id"].as_str().unwrap().to_string();
    let cluster = Cluster::docker_kubelet(true);
    let kc = cluster.kubeconfig.clone();
    let dir = init_app(&cluster.root, "hello", "mpi-hello");
    let (lid, mid, nid) = (run_id("l"), run_id("m"), run_id("n"));
    // Pods stay after the end, so every phase can be compared with them.
    let keep = ["--set", "runPolicy.cleanPodPolicy=None"];
    deploy_and_wait(&dir, &kc, &lid, &["--backend", "local", "--image", &image]);
    for (id, backend) in [(&mid, "mpijob"), (&nid, "native")] {
        let mut a = vec!["--backend", backend, "--image", &image, "--no-push"];
        a.extend(keep);
        deploy_and_wait(&dir, &kc, id, &a);
    }
    let ids = [lid.as_str(), mid.as_str(), nid.as_str()];
    let before = rows(&dir, &kc, &ids);

    // The local run: the digest is the image ID; phases are the containers' own times.
    let l = &before[0];
    check_common(l, &image, &image_id);
    assert_eq!(
        (&l["backend"], &l["engine"]),
        (&"local".into(), &"docker".into())
    );
    assert_eq!(
        (&l["context"], &l["namespace"]),
        (&Value::Null, &Value::Null)
    );
    let job = format!("hello-{lid}");
    let names: Vec<String> = ["launcher", "worker-0", "worker-1"]
        .iter()
        .map(|s| format!("{job}-{s}"))
        .collect();
    let cs: Vec<Value> = names.iter().map(|n| inspect(n)).collect();
    let at = |c: &Value, p: &str| ts(c.pointer(p).unwrap().as_str().unwrap());
    assert_eq!(
        phase(l, "created"),
        min(cs.iter().map(|c| at(c, "/Created")))
    );
    assert_eq!(phase(l, "launcherRunning"), at(&cs[0], "/State/StartedAt"));
    assert_eq!(phase(l, "finished"), at(&cs[0], "/State/FinishedAt"));
    assert_eq!(
        phase(l, "workersRunning"),
        max(cs[1..].iter().map(|c| at(c, "/State/StartedAt")))
    );
    let docker_log = |name: &str| {
        let o = std::process::Command::new("docker")
            .args(["logs", "-t", name])
            .env("DOCKER_HOST", &host)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    // firstLog is the training command's first line (a rank's), after the launcher's own
    // waiting lines and never a worker's sshd or hvdctl's line.
    let launcher_log = docker_log(&names[0]);
    assert_eq!(
        phase(l, "firstLog"),
        first_training_stamp(&launcher_log).expect("the command wrote")
    );
    assert!(
        phase(l, "firstLog") > last_ready_stamp(&launcher_log).expect("workers were waited for"),
        "{l}\n{launcher_log}"
    );
    assert!(l["phases"].get("scheduled").is_none(), "{l}");
    for c in &cs {
        let labels = c["Config"]["Labels"].to_string();
        assert!(!labels.contains(SECRET), "an env value in labels: {labels}");
        assert!(labels.contains("env.LEDGER_TOKEN"), "{labels}");
    }

    // The Kubernetes runs: phases are the job object's creation and the pods' times.
    let Some(_) = cluster.kubectl(&["version", "--client"]) else {
        return;
    };
    for (row, id, object) in [
        (&before[1], &mid, format!("mpijob/hello-{mid}")),
        (&before[2], &nid, format!("job/hello-{nid}-launcher")),
    ] {
        check_common(row, &image, &image_id);
        assert_eq!(row["engine"], "kubernetes", "{row}");
        assert_eq!(row["namespace"], "default", "{row}");
        assert!(row["context"].is_string(), "{row}");
        let get = |args: &[&str]| -> Value {
            serde_json::from_str(&cluster.kubectl(args).unwrap()).unwrap()
        };
        let job = get(&["get", &object, "-o", "json"]);
        assert_eq!(
            phase(row, "created"),
            ts(job["metadata"]["creationTimestamp"].as_str().unwrap())
        );
        let sel = format!("hvdctl.io/run={id}");
        let pods = get(&["get", "pods", "-l", &sel, "-o", "json"]);
        let pods = pods["items"].as_array().unwrap();
        let role = |p: &Value| {
            p["metadata"]["labels"]["hvdctl.io/role"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        // A container's time `k` in its state now (running or terminated).
        let state = |p: &Value, k: &str| {
            let st = &p["status"]["containerStatuses"][0]["state"];
            let t = st["terminated"][k].as_str().or(st["running"][k].as_str());
            ts(t.unwrap_or_else(|| panic!("no {k}: {p}")))
        };
        let launcher: Vec<&Value> = pods.iter().filter(|p| role(p) == "launcher").collect();
        let workers: Vec<&Value> = pods.iter().filter(|p| role(p) == "worker").collect();
        assert_eq!((launcher.len(), workers.len()), (1, 2), "{pods:?}");
        let scheduled = pods.iter().map(|p| {
            let c = p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "PodScheduled")
                .unwrap();
            ts(c["lastTransitionTime"].as_str().unwrap())
        });
        assert_eq!(phase(row, "scheduled"), max(scheduled));
        assert_eq!(
            phase(row, "workersRunning"),
            max(workers.iter().map(|p| state(p, "startedAt")))
        );
        assert_eq!(
            phase(row, "launcherRunning"),
            state(launcher[0], "startedAt")
        );
        assert_eq!(phase(row, "finished"), state(launcher[0], "finishedAt"));
        let log = |p: &Value| {
            let name = p["metadata"]["name"].as_str().unwrap();
            cluster
                .kubectl(&["logs", name, "--timestamps", "--all-containers"])
                .unwrap_or_default()
        };
        let first = launcher
            .iter()
            .filter_map(|p| first_training_stamp(&log(p)));
        assert_eq!(phase(row, "firstLog"), min(first));
        assert!(
            phase(row, "firstLog") > phase(row, "workersRunning"),
            "{row}"
        );
        // Provenance on every object, never an env value in any annotation.
        let all = get(&[
            "get",
            "mpijobs,jobs,pods,services,configmaps,secrets",
            "-l",
            &sel,
            "-o",
            "json",
        ]);
        for o in all["items"].as_array().unwrap() {
            let a = &o["metadata"]["annotations"];
            assert_eq!(a["hvdctl.io/image-digest"], image_id.as_str(), "{o}");
            let text = format!(
                "{a}{}",
                o.pointer("/spec/template/metadata/annotations")
                    .unwrap_or(&Value::Null)
            );
            assert!(
                !text.contains(SECRET),
                "an env value in annotations: {text}"
            );
            assert!(text.contains("env.LEDGER_TOKEN"), "{text}");
        }
    }

    // The rows come from the engines: without .hvdctl/ they are the same.
    std::fs::remove_dir_all(dir.join(".hvdctl")).unwrap();
    assert_eq!(rows(&dir, &kc, &ids), before);
    let t = hv(&dir, Some(&kc), &["runs"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    for id in ids {
        let line = t
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("{id} missing: {}", t.stdout));
        assert!(line.contains("Succeeded") && line.contains("2x1"), "{line}");
        assert!(line.contains(&image_id[..19]), "{line}");
    }
    // Undeployed, each run's logs come from its flight record, as the live run printed them.
    for id in ids {
        let live = hv(&dir, Some(&kc), &["logs", id]);
        assert_eq!(live.code, 0, "{}", live.stderr);
        let u = hv(&dir, Some(&kc), &["undeploy", id]);
        assert_eq!(u.code, 0, "{}", u.stderr);
        let rec = hv(&dir, Some(&kc), &["logs", id]);
        assert_eq!(rec.code, 0, "{}", rec.stderr);
        assert!(rec.stderr.contains("flight record"), "{}", rec.stderr);
        assert_eq!(
            sorted_lines(&rec.stdout),
            sorted_lines(&live.stdout),
            "{id}"
        );
        // Every worker was recorded. Their sshd logs only errors: the Kubernetes runs'
        // workers (kept running by cleanPodPolicy None) wrote nothing; a local run's worker
        // script says when it ends.
        assert!(!rec.stderr.contains("not recorded"), "{}", rec.stderr);
        if id == lid {
            assert!(rec.stdout.contains("worker-1 | "), "{}", rec.stdout);
        }
    }
}

#[test]
fn runs_bad_input_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    // Not an app directory.
    let o = hv(tmp.path(), None, &["runs"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--all-apps"), "{}", o.stderr);
    // The record's cap must be a size.
    let app = init_app(tmp.path(), "capped", "mpi-hello");
    let o = hv(
        &app,
        None,
        &["deploy", "--dry-run", "--set", "recorder.maxMB=0"],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("recorder.maxMB"), "{}", o.stderr);
    // Watching is text only.
    let o = hv(
        tmp.path(),
        None,
        &["runs", "--all-apps", "-w", "-o", "json"],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    // No engine reachable: exit 1, each named.
    let mut c = hvdctl_in(tmp.path());
    c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["runs", "--all-apps"])
        .timeout(Duration::from_secs(60));
    let o = run(c);
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("Kubernetes could not be asked"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.is_empty(), "{}", o.stdout);
}

/// `docker logs -t NAME`, stdout and stderr, one line per entry, sorted.
fn docker_lines(host: &str, name: &str) -> Vec<String> {
    let o = std::process::Command::new("docker")
        .args(["logs", "-t", name])
        .env("DOCKER_HOST", host)
        .output()
        .unwrap();
    assert!(o.status.success(), "docker logs {name}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// deploy → status --wait → undeploy → `hvdctl logs RUN` and `status RUN` from the flight
/// record: every container's lines exactly as the engine had them (workers included, none
/// twice although the run was recorded twice), the state, `source: record`; `runs` lists it
/// from the record. A worker removed before hvdctl saw it is named "not recorded". A corrupt
/// record is an error naming its file for `status RUN` and a skipped warning for `runs`.
#[test]
fn an_undeployed_run_answers_from_its_flight_record() {
    let Some(docker) = docker() else { return };
    let image = template_image(&docker, "mpi-hello", &debian_image());
    let host = docker.host().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hello", "mpi-hello");
    let id = run_id("r");
    let job = format!("hello-{id}");
    let kc = tmp.path().join("no-kubeconfig");
    let d = hv(
        &dir,
        Some(&kc),
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "workers=2",
        ],
    );
    assert_eq!(d.code, 0, "{}", d.stderr);
    let w = hv(&dir, Some(&kc), &["status", "--wait", &id]);
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert!(
        dir.join(".hvdctl/runs")
            .join(&id)
            .join("status.json")
            .is_file()
    );
    // `status --wait` ends with the launcher; the workers may still be writing their last
    // lines (sshd's disconnects): the engine's lines are compared once every container exited.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let running = || {
        let run_label = format!("label=hvdctl.io/run={id}");
        let args = [
            "ps",
            "-q",
            "--filter",
            &run_label,
            "--filter",
            "status=running",
        ];
        !docker_cli(&host, &args, &[]).trim().is_empty()
    };
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "run {id} still running after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let names: Vec<String> = ["launcher", "worker-0", "worker-1"]
        .iter()
        .map(|s| format!("{job}-{s}"))
        .collect();
    let engine_lines: Vec<Vec<String>> = names.iter().map(|n| docker_lines(&host, n)).collect();
    assert!(
        engine_lines.iter().all(|l| !l.is_empty()),
        "{engine_lines:?}"
    );
    let live = hv(&dir, Some(&kc), &["logs", &id]);
    assert_eq!(live.code, 0, "{}", live.stderr);
    let u = hv(&dir, Some(&kc), &["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert!(
        docker_cli(
            &host,
            &[
                "ps",
                "-aq",
                "--filter",
                &format!("label=hvdctl.io/run={id}")
            ],
            &[]
        )
        .trim()
        .is_empty()
    );

    // The whole log, as the live run printed it.
    let rec = hv(&dir, Some(&kc), &["logs", &id]);
    assert_eq!(rec.code, 0, "{}", rec.stderr);
    assert!(rec.stderr.contains("flight record"), "{}", rec.stderr);
    assert_eq!(sorted_lines(&rec.stdout), sorted_lines(&live.stdout));
    assert!(rec.stdout.contains("sum of ranks"), "{}", rec.stdout);
    // Each container: exactly the engine's lines, stamps included.
    for (name, lines) in names.iter().zip(&engine_lines) {
        let pattern = format!("^{name}$");
        let o = hv(
            &dir,
            Some(&kc),
            &[
                "logs",
                &id,
                "--pod",
                &pattern,
                "--no-prefix",
                "--timestamps",
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        if name.ends_with("launcher") {
            // The launcher's rank tags are read and shown as prefixes: compare line counts.
            assert_eq!(
                o.stdout.lines().count(),
                lines.len(),
                "{name}: {}",
                o.stdout
            );
        } else {
            assert_eq!(&sorted_lines(&o.stdout), lines, "{name}");
        }
    }
    let s = hv(&dir, Some(&kc), &["status", &id, "-o", "json"]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(
        (&v["source"], &v["state"], &v["run"]),
        (
            &"record".into(),
            &"Succeeded".into(),
            &Value::from(id.as_str())
        )
    );
    assert!(v["phases"]["finished"].is_string(), "{v}");
    let r = hv(&dir, Some(&kc), &["runs", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let row = rows
        .iter()
        .find(|x| x["run"] == id.as_str())
        .expect("listed");
    assert_eq!(row["source"], "record", "{row}");

    // A worker removed before hvdctl ever looked: "not recorded", never silently missing.
    let id2 = run_id("s");
    let d = hv(
        &dir,
        Some(&kc),
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id2,
            "--set",
            "workers=2",
        ],
    );
    assert_eq!(d.code, 0, "{}", d.stderr);
    docker_cli(&host, &["rm", "-f", &format!("hello-{id2}-worker-1")], &[]);
    let u = hv(&dir, Some(&kc), &["undeploy", &id2]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    let o = hv(&dir, Some(&kc), &["logs", &id2]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("not recorded: worker-1"), "{}", o.stderr);
    assert!(!o.stdout.contains("worker-1 |"), "{}", o.stdout);

    // A corrupt record: status names the file (exit 2); runs skips it with a warning.
    std::fs::write(
        dir.join(".hvdctl/runs").join(&id2).join("status.json"),
        "{not json",
    )
    .unwrap();
    let o = hv(&dir, Some(&kc), &["status", &id2]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("status.json"), "{}", o.stderr);
    let r = hv(&dir, Some(&kc), &["runs", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("corrupt flight record"), "{}", r.stderr);
    let rows: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    assert!(rows.iter().any(|x| x["run"] == id.as_str()));
    assert!(!rows.iter().any(|x| x["run"] == id2.as_str()));
    // An unknown run is not found (exit 1), with or without records.
    let o = hv(&dir, Some(&kc), &["logs", "zz9zz"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
}

/// A Kubernetes run whose image `deploy` pushed records the registry's digest (what the
/// cluster pulls), as the local engine knows it after the push — not the local image ID —
/// on the job object and its pod templates, and `runs` reports it.
#[test]
fn a_pushed_image_is_recorded_with_its_registry_digest() {
    let Some(svc) = rt().block_on(services()) else {
        return;
    };
    let host = svc.docker_host.clone();
    let repo = format!("{}/hvdctl-ledger/busybox", svc.registry);
    let reference = format!("{repo}:{}", unique("t"));
    docker_cli(&host, &["tag", &busybox_image(), &reference], &[]);
    let cluster = Cluster::synthetic(true);
    let dir = init_app(&cluster.root, "hello", "mpi-hello");
    std::fs::create_dir_all(dir.join(".hvdctl")).unwrap();
    std::fs::write(
        dir.join(".hvdctl/image.json"),
        format!(r#"{{"image": "{reference}", "pushed": false, "built": "2026-11-22T00:00:00Z"}}"#),
    )
    .unwrap();
    let auth = docker_config_with_auth(&svc.registry, &svc.user, &svc.password);
    let id = run_id("p");
    let mut c = cluster.hv(&dir);
    c.env("DOCKER_CONFIG", auth.path())
        .env("DOCKER_HOST", &host)
        .args(["deploy", "--run-id", &id]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let inspect: Value =
        serde_json::from_str(&docker_cli(&host, &["image", "inspect", &reference], &[])).unwrap();
    let pushed = inspect[0]["RepoDigests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str()?.strip_prefix(&format!("{repo}@")))
        .next()
        .expect("the push gave the image a registry digest")
        .to_string();
    assert_ne!(pushed, inspect[0]["Id"].as_str().unwrap());
    let mj = cluster
        .fc
        .get("mpijobs", "default", &format!("hello-{id}"))
        .unwrap();
    assert_eq!(
        mj["metadata"]["annotations"]["hvdctl.io/image-digest"],
        pushed.as_str()
    );
    assert_eq!(
        mj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["hvdctl.io/image-digest"],
        pushed.as_str()
    );
    let r = hv(&dir, Some(&cluster.kubeconfig), &["runs", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let row = rows
        .iter()
        .find(|x| x["run"] == id.as_str())
        .expect("listed");
    assert_eq!(row["imageDigest"], pushed.as_str(), "{row}");
    assert_eq!(row["image"], reference.as_str(), "{row}");
    let u = hv(&dir, Some(&cluster.kubeconfig), &["undeploy", &id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
}

/// A worker that crashed once and ran again: its record holds both instances' lines, though
/// the run was recorded only after the restart (Kubernetes keeps the previous instance's log).
#[test]
fn a_restarted_containers_previous_instance_is_recorded() {
    let e = Cluster::synthetic(false);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "native", "--run-id", "rs1"])
        .args(["--set", "env.FAKE_KUBELET_LINES=2"])
        .args(["--set", "env.FAKE_KUBELET_RESTARTS=1"])
        .args(["--set", "env.FAKE_KUBELET_ONLY=worker-0"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Nothing follows the run: it is first recorded by undeploy, after the restart.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let p = e.fc.get("pods", "default", "demo-rs1-worker-0").unwrap();
        let cs = &p["status"]["containerStatuses"][0];
        if cs["restartCount"] == 1 && cs["state"]["terminated"]["exitCode"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{cs:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut c = e.hv(&dir);
    c.args(["undeploy", "rs1"]);
    assert_eq!(run(c).code, 0);
    let mut c = e.hv(&dir);
    c.args(["logs", "rs1", "--pod", "worker-0$", "--no-prefix"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("flight record"), "{}", o.stderr);
    let want: Vec<String> = (0..2)
        .flat_map(|k| {
            (1..=2).map(move |i| {
                format!("pod=demo-rs1-worker-0 container=worker restart={k} line {i}")
            })
        })
        .collect();
    assert_eq!(o.stdout.lines().collect::<Vec<_>>(), want, "{}", o.stdout);
}

/// Without RUN, `logs`, `status` and `events` answer for the app's newest run wherever it
/// is: live on its engine, or — once undeployed — from its flight record, saying
/// `(recorded; undeployed <age> ago)` (no Kubernetes here: that engine cannot be asked, which
/// must not hide the record). Commands that need the run live (`cp`) say it was undeployed
/// and what reads its record; a run id that exists nowhere names the app's newest recorded
/// run. A later live run is the newest again, and `cp` copies from it once finished.
#[test]
fn the_newest_run_answers_live_or_from_its_record() {
    let Some(docker) = docker() else { return };
    let image = template_image(&docker, "mpi-hello", &debian_image());
    let tmp = tempfile::tempdir().unwrap();
    // An app name no other test uses: without RUN, commands answer for the app's newest run
    // on every engine, and other tests run `hello` apps on this machine's Docker engine.
    let dir = init_app(tmp.path(), "newest", "mpi-hello");
    let kc = tmp.path().join("no-kubeconfig");
    let deploy = |id: &str| {
        let d = hv(
            &dir,
            Some(&kc),
            &[
                "deploy",
                "--backend",
                "local",
                "--image",
                &image,
                "--run-id",
                id,
                "--set",
                "workers=2",
                "--wait",
            ],
        );
        assert_eq!(d.code, 0, "deploy {id}: {}", d.stderr);
        let w = hv(&dir, Some(&kc), &["status", "--wait", id]);
        assert_eq!(w.code, 0, "status --wait {id}: {}", w.stderr);
    };
    let a = run_id("n");
    deploy(&a);
    let u = hv(&dir, Some(&kc), &["undeploy"]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    // What went, in plurals that read as English.
    assert!(
        u.stderr
            .contains(&format!("Deleted run {a} (newest-{a}) from ")),
        "{}",
        u.stderr
    );
    assert!(
        u.stderr
            .contains("3 containers, 1 network, 1 private directory"),
        "{}",
        u.stderr
    );

    let recorded = format!("run {a} (newest-{a}) (recorded; undeployed ");
    let l = hv(&dir, Some(&kc), &["logs"]);
    assert_eq!(l.code, 0, "logs: {}", l.stderr);
    assert!(l.stderr.contains(&recorded), "{}", l.stderr);
    assert!(
        l.stderr.contains(" ago): answering from its flight record"),
        "{}",
        l.stderr
    );
    assert!(!l.stderr.contains("no runs of app"), "{}", l.stderr);
    assert!(
        l.stdout.contains("sum of ranks 0..1 = 1 (expected 1) OK"),
        "{}",
        l.stdout
    );
    let s = hv(&dir, Some(&kc), &["status"]);
    assert_eq!(s.code, 0, "status: {}", s.stderr);
    assert!(s.stderr.contains(&recorded), "{}", s.stderr);
    assert!(
        s.stdout
            .contains(&format!("Run:        {a} (job newest-{a}")),
        "{}",
        s.stdout
    );
    assert!(s.stdout.contains("State:      Succeeded"), "{}", s.stdout);
    let e = hv(&dir, Some(&kc), &["events"]);
    assert_eq!(e.code, 0, "events: {}", e.stderr);
    assert!(e.stderr.contains(&recorded), "{}", e.stderr);
    assert!(
        e.stdout
            .lines()
            .any(|l| l.contains("Completed")
                && l.contains(&format!("Container/newest-{a}-launcher"))),
        "{}",
        e.stdout
    );
    let e = hv(&dir, Some(&kc), &["events", &a]);
    assert_eq!(e.code, 0, "events RUN: {}", e.stderr);
    assert!(
        e.stdout.contains(&format!("Network/hvdctl-newest-{a}")),
        "{}",
        e.stdout
    );

    // The files went with the containers: say so, and what reads the record.
    let out = tmp.path().join("copied");
    let out_s = out.to_str().unwrap();
    let c = hv(&dir, Some(&kc), &["cp", "launcher:/etc/hostname", out_s]);
    assert_eq!(c.code, 1, "cp: {}", c.stderr);
    assert!(
        c.stderr.contains(&format!(
            "the newest run of app newest, {a} (newest-{a}), was undeployed "
        )),
        "{}",
        c.stderr
    );
    assert!(
        c.stderr.contains(&format!("hvdctl logs {a}")),
        "{}",
        c.stderr
    );
    let c = hv(
        &dir,
        Some(&kc),
        &["cp", &a, "launcher:/etc/hostname", out_s],
    );
    assert_eq!(c.code, 1, "cp RUN: {}", c.stderr);
    assert!(
        c.stderr
            .contains(&format!("run {a} (newest-{a}) was undeployed ")),
        "{}",
        c.stderr
    );
    assert!(
        c.stderr.contains(&format!("hvdctl logs {a}")),
        "{}",
        c.stderr
    );
    assert!(!out.exists());
    // A run that exists nowhere: what was found instead.
    let o = hv(&dir, Some(&kc), &["logs", "zz9zz"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "the newest run of app newest, {a}, was undeployed "
        )) && o.stderr.contains(&format!("its record: hvdctl logs {a}")),
        "{}",
        o.stderr
    );

    // A later run, live and finished: it is the newest now, and its files can be copied.
    let b = run_id("n");
    deploy(&b);
    let s = hv(&dir, Some(&kc), &["status"]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert!(
        s.stdout
            .contains(&format!("Run:        {b} (job newest-{b}")),
        "{}",
        s.stdout
    );
    assert!(!s.stderr.contains("recorded;"), "{}", s.stderr);
    let c = hv(&dir, Some(&kc), &["cp", "launcher:/etc/hostname", out_s]);
    assert_eq!(c.code, 0, "cp from a finished run: {}", c.stderr);
    assert!(out.is_file());
    // A run deployed and undeployed after it is the newest, though `b` is still there.
    let c = run_id("n");
    deploy(&c);
    let u = hv(&dir, Some(&kc), &["undeploy", &c]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    let l = hv(&dir, Some(&kc), &["logs"]);
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert!(
        l.stderr
            .contains(&format!("run {c} (newest-{c}) (recorded; undeployed ")),
        "{}",
        l.stderr
    );
    // So `undeploy` without RUN has nothing to delete, and says why; `b` stays.
    let u = hv(&dir, Some(&kc), &["undeploy"]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert!(
        u.stderr.contains(&format!(
            "Nothing to delete: the newest run of app newest, {c} (newest-{c}), was undeployed "
        )),
        "{}",
        u.stderr
    );
    let s = hv(&dir, Some(&kc), &["status", &b]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert!(!s.stderr.contains("recorded;"), "{}", s.stderr);
    let u = hv(&dir, Some(&kc), &["undeploy", &b]);
    assert_eq!(u.code, 0, "{}", u.stderr);
}
