//! Every template × backend: `init --no-input` then `deploy --dry-run` gives manifests that
//! parse into typed objects with nothing unknown, carry hvdctl's labels, and match snapshots.

use crate::util::*;
use hvdctl::render::manifests;

fn dry_run(dir: &std::path::Path, backend: &str, format: &str) -> Out {
    let mut c = hvdctl();
    c.arg("-C").arg(dir).args([
        "deploy",
        "--dry-run",
        "--run-id",
        "r1234",
        "--backend",
        backend,
        "-o",
        format,
    ]);
    run(c)
}

#[test]
fn every_template_and_backend_renders_valid_typed_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    for t in TEMPLATES {
        let dir = init_app(tmp.path(), &format!("app-{t}"), t);
        // Every built-in backend (a new one is covered by its registration alone).
        for backend in hvdctl::backend::BUILTIN {
            let b = &backend.name();
            let o = dry_run(&dir, b, "yaml");
            if (*t, *b) == ("horovod-elastic", "trainjob") {
                // Kubeflow Trainer runs no elastic Horovod: refused before rendering.
                assert_eq!(o.code, 2, "{t}/{b}: {}", o.stderr);
                assert!(
                    o.stderr.contains("cannot run elastic Horovod"),
                    "{}",
                    o.stderr
                );
                continue;
            }
            assert_eq!(o.code, 0, "{t}/{b}: {}", o.stderr);
            // Typed round trip of the printed output: nothing unknown, every kind known.
            let objects =
                manifests::parse("dry-run output", &o.stdout, &hvdctl::backend::all_kinds())
                    .unwrap_or_else(|e| panic!("{t}/{b}: {e}"));
            assert!(!objects.is_empty());
            for obj in &objects {
                let v = obj.to_value();
                let labels = &v["metadata"]["labels"];
                assert_eq!(labels["app.kubernetes.io/managed-by"], "hvdctl", "{t}/{b}");
                // Objects the app's runs share carry no run's label.
                let run = if backend.shared_kinds().contains(&obj.api_kind()) {
                    serde_json::Value::Null
                } else {
                    "r1234".into()
                };
                assert_eq!(labels["hvdctl.io/run"], run, "{t}/{b}");
                assert_eq!(labels["hvdctl.io/app"], format!("app-{t}"), "{t}/{b}");
            }
            // The backend's job object is there, and every object is of a kind it may create.
            let (job_kind, job_name) = backend.job_object(&format!("app-{t}-r1234"));
            assert!(
                objects
                    .iter()
                    .any(|o| o.api_kind() == job_kind && o.name() == job_name),
                "{t}/{b}: no {job_kind} {job_name}"
            );
            let mut allowed = hvdctl::kinds::BUILTIN.to_vec();
            allowed.extend(backend.kinds());
            assert!(
                objects
                    .iter()
                    .all(|o| allowed.iter().any(|k| k.api == o.api_kind())),
                "{t}/{b}"
            );
            let kinds: Vec<&str> = objects.iter().map(|o| o.kind()).collect();
            match *b {
                "mpijob" => assert_eq!(kinds, ["MPIJob"], "{t}"),
                "trainjob" => assert_eq!(kinds, ["TrainingRuntime", "TrainJob"], "{t}"),
                "native" => {
                    assert_eq!(kinds.first(), Some(&"Secret"), "{t}");
                    assert_eq!(kinds.last(), Some(&"Job"), "{t}");
                    assert!(
                        kinds.contains(&"Service")
                            && kinds.contains(&"ConfigMap")
                            && kinds.contains(&"Pod")
                    );
                }
                _ => {}
            }
            // The JSON form is the same object set.
            let j = dry_run(&dir, b, "json");
            assert_eq!(j.code, 0);
            let list: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
            assert_eq!(list["kind"], "List");
            assert_eq!(list["items"].as_array().unwrap().len(), objects.len());
            insta::assert_snapshot!(format!("{t}-{b}"), o.stdout);
        }
    }
}

#[test]
fn mpijob_has_the_operator_essentials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "gpu", "horovod");
    let mut c = hvdctl();
    c.arg("-C").arg(&dir).args([
        "deploy",
        "--dry-run",
        "-o",
        "json",
        "--set",
        "workers=3",
        "--set",
        "slotsPerWorker=2",
    ]);
    c.args([
        "--set",
        "gpusPerWorker=2",
        "--set",
        "securityContext.runAsUser=1000",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let job = &v["items"][0];
    assert_eq!(job["spec"]["runPolicy"]["cleanPodPolicy"], "Running");
    assert_eq!(job["spec"]["slotsPerWorker"], 2);
    assert_eq!(job["spec"]["sshAuthMountPath"], "/home/mpiuser/.ssh");
    let worker = &job["spec"]["mpiReplicaSpecs"]["Worker"];
    assert_eq!(worker["replicas"], 3);
    let wc = &worker["template"]["spec"]["containers"][0];
    assert_eq!(wc["resources"]["limits"]["nvidia.com/gpu"], "2");
    let launcher = &job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0];
    let cmd: Vec<&str> = launcher["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let np = cmd.iter().position(|a| *a == "-np").expect("-np");
    assert_eq!(cmd[np + 1], "6", "np = workers x slots: {cmd:?}");
    assert!(
        !cmd.contains(&"--allow-run-as-root"),
        "non-root runs do not pass --allow-run-as-root"
    );
    assert_eq!(
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn elastic_uses_the_discovery_script() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "el", "horovod-elastic");
    let mut c = hvdctl();
    c.arg("-C")
        .arg(&dir)
        .args(["deploy", "--dry-run", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let cmd = v["items"][0]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"].to_string();
    for needle in [
        "horovodrun",
        "--min-np",
        "--max-np",
        "--slots-per-host",
        "/etc/mpi/discover_hosts.sh",
    ] {
        assert!(cmd.contains(needle), "{needle} missing from {cmd}");
    }
}

#[test]
fn native_secret_is_redacted_in_dry_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "nat", "mpi-hello");
    let o = dry_run(&dir, "native", "yaml");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stdout.contains("PRIVATE KEY"),
        "a private key reached dry-run output"
    );
    assert!(o.stdout.contains("redacted"));
    // hostfile names every worker through the headless service
    assert!(
        o.stdout
            .contains("nat-r1234-worker-1.nat-r1234.default.svc slots=1"),
        "{}",
        o.stdout
    );
}

#[test]
fn templates_write_composite_scalars_literally() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "mnist", "mpi-hello");
    let tpl = dir.join("k8s/native.yaml.hbs");
    let text = std::fs::read_to_string(&tpl)
        .unwrap()
        .replace("- name: worker\n", "- name: {{app.name}}-worker\n")
        .replace(
            "  publishNotReadyAddresses: true\n",
            "  publishNotReadyAddresses: true\n  externalName: \"{{job.name}}.{{job.namespace}}\"\n",
        );
    std::fs::write(&tpl, text).unwrap();
    let mut c = hvdctl();
    c.arg("-C").arg(&dir).args([
        "deploy",
        "--dry-run",
        "--run-id",
        "ab12c",
        "--backend",
        "native",
        "-o",
        "json",
        // A value that would add a key if it were pasted into the YAML.
        "--set",
        "name=mnist",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    let pod = items.iter().find(|i| i["kind"] == "Pod").unwrap();
    assert_eq!(pod["spec"]["containers"][0]["name"], "mnist-worker");
    let svc = items.iter().find(|i| i["kind"] == "Service").unwrap();
    assert_eq!(svc["spec"]["externalName"], "mnist-ab12c.default");
}

#[test]
fn namespace_comes_from_flag_then_app() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "ns", "mpi-hello");
    let mut c = hvdctl();
    c.arg("-C")
        .arg(&dir)
        .args(["-n", "team-a", "deploy", "--dry-run", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("\"namespace\": \"team-a\""));
    let mut c = hvdctl();
    c.arg("-C").arg(&dir).args([
        "deploy",
        "--dry-run",
        "-o",
        "json",
        "--set",
        "namespace=team-b",
    ]);
    assert!(run(c).stdout.contains("\"namespace\": \"team-b\""));
}

#[test]
fn local_dry_run_is_stable_and_holds_no_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "loc", "mpi-hello");
    let outs: Vec<String> = (0..3)
        .map(|_| {
            let o = dry_run(&dir, "local", "json");
            assert_eq!(o.code, 0, "{}", o.stderr);
            o.stdout
        })
        .collect();
    assert!(
        outs.windows(2).all(|w| w[0] == w[1]),
        "local dry-run output changes between runs"
    );
    assert!(!outs[0].contains("PRIVATE KEY"));
    let v: serde_json::Value = serde_json::from_str(&outs[0]).unwrap();
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        4,
        "network + 2 workers + launcher"
    );
}
