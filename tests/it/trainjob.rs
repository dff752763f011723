//! The `trainjob` backend (Kubeflow Trainer v2.3) against `fake-cluster --trainer`, which
//! plays the Trainer and JobSet: on the synthetic kubelet the objects, status, roles,
//! undeploy and the app's shared TrainingRuntime lifecycle; a runtime the app names;
//! MPICH/Intel refused; on the Docker kubelet mpi-hello prints every rank and the `horovod`
//! template trains.

use crate::util::*;
use fake_cluster::{KubeletMode, Options};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn trainer_cluster(kubelet: KubeletMode) -> Cluster {
    Cluster::start(Options {
        trainer: true,
        pause_image: (kubelet == KubeletMode::Docker).then(busybox_image),
        kubelet,
        ..Default::default()
    })
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The env value `name` of the first container of `pod`.
fn env_of<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// The object once the fake's controllers made it (they run on their own loop).
fn appears(e: &Cluster, resource: &str, name: &str) -> Value {
    e.fc.wait_for(
        resource,
        "default",
        name,
        std::time::Duration::from_secs(60),
        |o| o.is_some(),
    )
    .unwrap_or_else(|_| panic!("{resource} {name} never appeared"))
    .unwrap()
}

fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o["metadata"]["labels"][k].as_str()
}

#[test]
fn synthetic_runs_share_the_apps_runtime_until_the_last_is_undeployed() {
    let e = trainer_cluster(KubeletMode::Synthetic);
    let dir = init_app(&e.root, "tj", "mpi-hello");
    // `lines`: the launcher prints that many lines and ends; none: every pod runs silently
    // until undeployed.
    let deploy = |id: &str, lines: Option<u32>| {
        let mut c = e.hv(&dir);
        c.args(["deploy", "--backend", "trainjob", "--run-id", id, "--wait"]);
        if let Some(n) = lines {
            // Nodes run sshd until the launcher is done (the synthetic kubelet ends only the
            // launcher's container).
            c.args(["--set", "env.FAKE_KUBELET_ONLY=launcher", "--set"])
                .arg(format!("env.FAKE_KUBELET_LINES={n}"));
        }
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stderr.contains(&format!("Deployed tj-{id}")),
            "{}",
            o.stderr
        );
    };
    deploy("a1", Some(3));

    // What hvdctl made: the TrainJob (the run's) and the app's runtime (no run label).
    let tj = e.fc.get("trainjobs", "default", "tj-a1").expect("TrainJob");
    assert_eq!(label(&tj, "hvdctl.io/run"), Some("a1"));
    assert_eq!(tj["spec"]["runtimeRef"]["kind"], "TrainingRuntime");
    assert_eq!(tj["spec"]["runtimeRef"]["name"], "hvdctl-tj");
    let rt =
        e.fc.get("trainingruntimes", "default", "hvdctl-tj")
            .expect("TrainingRuntime");
    assert_eq!(label(&rt, "hvdctl.io/app"), Some("tj"));
    assert_eq!(label(&rt, "hvdctl.io/run"), None, "{rt}");
    assert_eq!(rt["spec"]["mlPolicy"]["mpi"]["numProcPerNode"], 1);
    assert_eq!(rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"], false);

    // What the fake Trainer and JobSet made from them.
    let js = appears(&e, "jobsets", "tj-a1");
    assert_eq!(label(&js, "hvdctl.io/run"), None, "{js}");
    let hostfile = appears(&e, "configmaps", "tj-a1-mpi-hostfile");
    assert_eq!(
        hostfile["data"]["hostfile"],
        "tj-a1-node-0-0.tj-a1 slots=1\ntj-a1-node-0-1.tj-a1 slots=1\n"
    );
    let secret = appears(&e, "secrets", "tj-a1-mpi-ssh-auth");
    assert_eq!(secret["type"], "kubernetes.io/ssh-auth");

    // status --wait: Succeeded; the pods' roles come from JobSet's replicated job label.
    let mut c = e.hv(&dir);
    c.args(["status", "a1", "--wait", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["state"], "Succeeded", "{v}");
    assert_eq!(v["backend"], "trainjob");
    // JobSet deletes the Jobs still active once it is finished: the nodes go (their pods
    // with the garbage collector's next pass, after Complete was written), the launcher's
    // pod stays.
    let end = std::time::Instant::now() + Duration::from_secs(60);
    let mut v = v;
    while v["pods"].as_array().unwrap().len() > 1 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
        let mut c = e.hv(&dir);
        c.args(["status", "a1", "-o", "json"]);
        v = json(&run(c).stdout);
    }
    let pods = v["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{v}");
    assert_eq!(pods[0]["role"], "launcher", "{v}");
    let tj = e.fc.get("trainjobs", "default", "tj-a1").unwrap();
    let types: Vec<&str> = tj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Complete"], "{tj}");

    // logs by role: the launcher's lines.
    let mut c = e.hv(&dir);
    c.args(["logs", "a1", "--role", "launcher"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("launcher"), "{}", o.stdout);

    // A second run (running until undeployed) shares the runtime; its pods, running, have
    // their roles and indices from JobSet's and the Job controller's labels.
    deploy("a2", None);
    let mut c = e.hv(&dir);
    c.args(["status", "a2", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["state"], "Running", "{v}");
    let mut roles: Vec<String> = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}{}", p["role"].as_str().unwrap(), p["index"]))
        .collect();
    roles.sort();
    assert_eq!(roles, ["launchernull", "worker0", "worker1"], "{v}");
    // The pods, as JobSet and the Job controller made them.
    let pods = e.fc.list("pods", Some("default"), "hvdctl.io/run=a2");
    let launcher = pods
        .iter()
        .find(|p| label(p, "jobset.sigs.k8s.io/replicatedjob-name") == Some("launcher"))
        .expect("launcher pod");
    assert_eq!(
        env_of(launcher, "OMPI_MCA_orte_default_hostfile"),
        Some("/etc/mpi/hostfile")
    );
    assert_eq!(env_of(launcher, "HVDCTL_RUN"), Some("a2"));
    let mut hosts: Vec<String> = pods
        .iter()
        .filter(|p| label(p, "jobset.sigs.k8s.io/replicatedjob-name") == Some("node"))
        .map(|p| {
            format!(
                "{}.{}",
                p["spec"]["hostname"].as_str().unwrap(),
                p["spec"]["subdomain"].as_str().unwrap()
            )
        })
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["tj-a2-node-0-0.tj-a2", "tj-a2-node-0-1.tj-a2"]);

    // events: the pods', and those of the Jobs JobSet made for the run.
    let mut c = e.hv(&dir);
    c.args(["events", "a2"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("Pod/tj-a2-node-0-1-") && o.stdout.contains("Job/tj-a2-node-0"),
        "{}",
        o.stdout
    );
    // Undeploying the first run keeps the runtime the second uses.
    let mut c = e.hv(&dir);
    c.args(["undeploy", "a1"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(e.fc.get("trainjobs", "default", "tj-a1").is_none());
    assert!(
        e.fc.get("trainingruntimes", "default", "hvdctl-tj")
            .is_some(),
        "the runtime went with a run while another used it"
    );
    for r in [
        "pods",
        "jobs",
        "jobsets",
        "secrets",
        "configmaps",
        "services",
    ] {
        let left =
            e.fc.list(r, Some("default"), "jobset.sigs.k8s.io/jobset-name=tj-a1");
        assert!(left.is_empty(), "{r} of tj-a1 left: {left:?}");
    }
    assert!(
        e.fc.get("secrets", "default", "tj-a1-mpi-ssh-auth")
            .is_none()
    );

    // runs lists the live run only.
    let mut c = e.hv(&dir);
    c.args(["runs", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rows = json(&o.stdout);
    let live: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "engine")
        .collect();
    assert_eq!(live.len(), 1, "{rows}");
    assert_eq!(live[0]["run"], "a2", "{rows}");

    // The last run takes the runtime with it.
    let mut c = e.hv(&dir);
    c.args(["undeploy", "--all", "--yes"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(e.fc.get("trainjobs", "default", "tj-a2").is_none());
    assert!(
        e.fc.get("trainingruntimes", "default", "hvdctl-tj")
            .is_none(),
        "the runtime outlived the app's last run"
    );
    assert!(
        e.fc.list("trainingruntimes", None, "hvdctl.io/app=tj")
            .is_empty()
            && e.fc.list("pods", None, "hvdctl.io/app=tj").is_empty()
    );
}

#[test]
fn a_runtime_the_app_names_is_used_checked_and_left_alone() {
    let e = trainer_cluster(KubeletMode::Synthetic);
    let dir = init_app(&e.root, "nr", "mpi-hello");
    let set = ["--set", "trainjob.runtime=team-mpi"];

    // Missing: deploy refuses (nothing created), doctor says so.
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "trainjob", "--run-id", "b1"])
        .args(set);
    let o = run(c);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("ClusterTrainingRuntime team-mpi (named in trainjob.runtime) does not exist"),
        "{}",
        o.stderr
    );
    assert!(e.fc.list("trainjobs", None, "").is_empty());
    let mut c = e.hv(&dir);
    c.args(["doctor", "--backend", "trainjob", "-o", "json"])
        .args(set);
    let o = run(c);
    let checks = json(&o.stdout);
    let check = checks["checks"]
        .as_array()
        .or(checks.as_array())
        .unwrap()
        .iter()
        .find(|c| c["check"] == "trainjob.runtime")
        .cloned()
        .unwrap_or_else(|| panic!("no trainjob.runtime check: {checks}"));
    assert_eq!(check["status"], "fail", "{check}");

    // Installed by the admin (a ClusterTrainingRuntime of the same shape as hvdctl's).
    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "trainjob",
        "--run-id",
        "x",
        "--dry-run",
        "-o",
        "json",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let list = json(&o.stdout);
    let mut rt = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "TrainingRuntime")
        .unwrap()
        .clone();
    rt["kind"] = "ClusterTrainingRuntime".into();
    rt["metadata"] = serde_json::json!({"name": "team-mpi"});
    e.fc.create(rt).expect("ClusterTrainingRuntime created");

    let mut c = e.hv(&dir);
    c.args([
        "deploy",
        "--backend",
        "trainjob",
        "--run-id",
        "b2",
        "--set",
        "env.FAKE_KUBELET_ONLY=launcher",
        "--wait",
    ])
    .args(set);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let tj = e.fc.get("trainjobs", "default", "nr-b2").unwrap();
    assert_eq!(tj["spec"]["runtimeRef"]["kind"], "ClusterTrainingRuntime");
    assert_eq!(tj["spec"]["runtimeRef"]["name"], "team-mpi");
    assert!(
        e.fc.list("trainingruntimes", None, "").is_empty(),
        "hvdctl made a runtime though the app names one"
    );
    let mut c = e.hv(&dir);
    c.args(["doctor", "--backend", "trainjob", "-o", "json"])
        .args(set);
    let o = run(c);
    assert!(
        o.stdout.contains("ClusterTrainingRuntime team-mpi exists"),
        "{}",
        o.stdout
    );
    let mut c = e.hv(&dir);
    c.args(["undeploy", "b2"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        e.fc.get("clustertrainingruntimes", "", "team-mpi")
            .is_some()
    );
}

#[test]
fn mpich_and_intel_are_refused_at_render_time() {
    let e = trainer_cluster(KubeletMode::Synthetic);
    let dir = init_app(&e.root, "mp", "mpi-hello");
    for (imp, dry) in [("MPICH", true), ("Intel", false)] {
        let mut c = e.hv(&dir);
        c.args(["deploy", "--backend", "trainjob", "--set"])
            .arg(format!("mpi.implementation={imp}"));
        if dry {
            c.arg("--dry-run");
        }
        let o = run(c);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(
            o.stderr.contains(&format!("mpi.implementation: {imp}"))
                && o.stderr.contains("kubeflow/trainer#3712"),
            "{}",
            o.stderr
        );
        assert!(o.stdout.is_empty(), "{}", o.stdout);
    }
    assert!(e.fc.list("trainjobs", None, "").is_empty());
    assert!(e.fc.list("trainingruntimes", None, "").is_empty());
}

/// mpi-hello on `fake-cluster --trainer --kubelet docker`: the Trainer's Secret, hostfile
/// and JobSet's pods as real containers, 2 nodes × 2 slots. Every rank reports from its
/// node (ranks by slot: 0 and 1 on node 0), `logs` read through JobSet's role label, status
/// says Succeeded; undeploy leaves no container and, the app's last run, no runtime.
#[test]
fn mpi_hello_prints_every_rank_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = trainer_cluster(KubeletMode::Docker);
    let dir = init_app(&e.root, "hello", "mpi-hello");
    let id = "tk1";
    let job = format!("hello-{id}");
    let started = std::time::Instant::now();
    let d = e
        .hv(&dir)
        .args([
            "deploy",
            "--backend",
            "trainjob",
            "--run-id",
            id,
            "--image",
            &img,
            "--no-push",
            "--logs",
        ])
        .args(["--set", "workers=2", "--set", "slotsPerWorker=2"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr),
    );
    eprintln!(
        "trainjob 2x2 on the docker kubelet: {:.1?}",
        started.elapsed()
    );
    assert_eq!(d.status.code(), Some(0), "{out}\n{err}");
    for (r, node) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        assert!(
            out.contains(&format!("rank {r} of 4 on {job}-node-0-{node}")),
            "rank {r}: {out}\n{err}"
        );
    }
    assert!(out.contains("= 6 (expected 6) OK"), "{out}");
    // The ranks' lines are the launcher's, read as such.
    assert!(
        out.lines()
            .any(|l| l.starts_with("launcher r0 |") && l.contains("rank 0 of 4")),
        "{out}"
    );
    let s = e
        .hv(&dir)
        .args(["status", id, "-o", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["state"], "Succeeded", "{v}");
    let u = e.hv(&dir).args(["undeploy", id]).output().unwrap();
    assert_eq!(
        u.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&u.stderr)
    );
    assert_eq!(
        crate::local::kubelet_leftovers(&docker, &e.fc, &job),
        Vec::<String>::new()
    );
    assert!(e.fc.list("trainingruntimes", None, "").is_empty());
}

/// What hvdctl renders for the trainjob backend — every template, plain and with GPUs, a
/// volume, a non-root user, tolerations and a deadline — validates strictly against
/// Trainer v2.3.0's CRDs (`tests/fixtures/crds/`, checked by `fake_cluster::schema`); the
/// checker refuses an undeclared field, a wrong type and a bad enum value.
#[test]
fn rendered_trainer_objects_validate_strictly_against_the_crds() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crds");
    let schema = |k: &str| -> Value {
        let p = fixtures.join(format!("trainer-v2.3.0-{k}.schema.json"));
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        fake_cluster::schema::of_fixture(&v).clone()
    };
    let (tj_schema, rt_schema) = (schema("trainjobs"), schema("trainingruntimes"));
    let tmp = tempfile::tempdir().unwrap();
    let extra: &[&str] = &[
        "gpusPerWorker=1",
        "volumes[0]={name: data, mountPath: /data, nfs: {server: nfs.example.com, path: /exports}}",
        "securityContext.runAsUser=1000",
        "securityContext.fsGroup=1000",
        "tolerations[0]={key: gpu, operator: Exists, effect: NoSchedule}",
        "nodeSelector.pool=train",
        "runPolicy.activeDeadlineSeconds=600",
        "imagePullSecrets=[regcred]",
    ];
    let mut checked = 0;
    // Elastic Horovod is refused on this backend (see the render test).
    let templates: Vec<&&str> = TEMPLATES
        .iter()
        .filter(|t| **t != "horovod-elastic")
        .collect();
    for t in &templates {
        let dir = init_app(tmp.path(), &format!("v-{t}"), t);
        for sets in [&[][..], extra] {
            let mut c = hvdctl();
            c.arg("-C").arg(&dir).args([
                "deploy",
                "--dry-run",
                "-o",
                "json",
                "--backend",
                "trainjob",
                "--run-id",
                "r1",
            ]);
            for s in sets {
                c.args(["--set", s]);
            }
            let o = run(c);
            assert_eq!(o.code, 0, "{t}: {}", o.stderr);
            let list = json(&o.stdout);
            for obj in list["items"].as_array().unwrap() {
                let schema = match obj["kind"].as_str() {
                    Some("TrainJob") => &tj_schema,
                    Some("TrainingRuntime") => &rt_schema,
                    other => panic!("{t}: unexpected {other:?}"),
                };
                let errors = fake_cluster::schema::errors(schema, obj);
                assert_eq!(errors, Vec::<String>::new(), "{t} {sets:?}: {obj}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, templates.len() * 4);
    // The checker finds what it must.
    let bad = serde_json::json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "x"}, "spec": {"runtimeRef": {"name": "r"}, "trainer": {"numNodes": "2", "imagee": "i"}}});
    let mut errors = fake_cluster::schema::errors(&tj_schema, &bad);
    errors.sort();
    assert_eq!(
        errors,
        [
            ".spec.trainer.imagee: not declared by the schema",
            ".spec.trainer.numNodes: \"2\" is not of type \"integer\""
        ]
    );
    let mut rt = serde_json::json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "x"}, "spec": {"mlPolicy": {"mpi": {"mpiImplementation": "MPICH"}}, "template": {}}});
    let errors = fake_cluster::schema::errors(&rt_schema, &rt);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("mpiImplementation: \"MPICH\" is not one of")),
        "{errors:?}"
    );
    rt["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "OpenMPI".into();
    let errors = fake_cluster::schema::errors(&rt_schema, &rt);
    assert_eq!(errors, Vec::<String>::new());
}

/// exec, cp and port-forward reach a TrainJob's pods on the Docker kubelet: a node by its
/// index (its hostname is JobSet's), the launcher by default, its one container `node`.
#[test]
fn exec_cp_and_port_forward_reach_the_trainjobs_pods() {
    let Some(docker) = docker() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = trainer_cluster(KubeletMode::Docker);
    let dir = init_app(&e.root, "inner", "mpi-hello");
    let (id, job) = ("tx1", "inner-tx1");
    let kc = Some(e.kubeconfig.as_path());
    let d = hv(
        &dir,
        kc,
        &[
            "deploy",
            "--backend",
            "trainjob",
            "--run-id",
            id,
            "--image",
            &img,
            "--no-push",
            "--wait",
            "--set",
            "command=[sleep, \"300\"]",
        ],
    );
    assert_eq!(d.code, 0, "{}", d.stderr);
    let o = hv(
        &dir,
        kc,
        &[
            "exec",
            id,
            "--index",
            "1",
            "--",
            "sh",
            "-c",
            "hostname; exit 3",
        ],
    );
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), format!("{job}-node-0-1"));
    let o = hv(
        &dir,
        kc,
        &["exec", id, "--", "sh", "-c", "echo $HVDCTL_RUN"],
    );
    assert_eq!((o.code, o.stdout.trim()), (0, id), "{}", o.stderr);
    let o = hv(&dir, kc, &["exec", id, "-c", "nope", "--", "true"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("it has node"), "{}", o.stderr);
    let o = hv(&dir, kc, &["exec", id, "--index", "2", "--", "true"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("no worker 2: its workers are 0, 1"),
        "{}",
        o.stderr
    );

    // cp to a node and back.
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("payload");
    let token = format!("{}\n", unique("payload"));
    std::fs::write(&file, &token).unwrap();
    let o = hv(
        &dir,
        kc,
        &["cp", id, file.to_str().unwrap(), "worker-0:/tmp/payload"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let back = work.path().join("back");
    let o = hv(
        &dir,
        kc,
        &["cp", id, "worker-0:/tmp/payload", back.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), token);

    // port-forward to node 1's sshd.
    let f = crate::inner::port_forward(&dir, kc, &[id, "--index", "1", ":22"]);
    assert!(crate::inner::ssh_hello(f.port).starts_with("SSH-2.0-"));
    drop(f);

    let u = hv(&dir, kc, &["undeploy", id]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(
        crate::local::kubelet_leftovers(&docker, &e.fc, job),
        Vec::<String>::new()
    );
}

/// doctor for a trainjob app: the Trainer's kinds served, RBAC for trainjobs and
/// trainingruntimes (a forbidden verb named), and a cluster without the Trainer refused by
/// deploy with what to install.
#[test]
fn doctor_checks_the_trainers_kinds_and_rbac() {
    let e = trainer_cluster(KubeletMode::Synthetic);
    let dir = init_app(&e.root, "doc", "mpi-hello");
    let o = hv(
        &dir,
        Some(&e.kubeconfig),
        &["doctor", "--backend", "trainjob", "-o", "json"],
    );
    let v = json(&o.stdout);
    let checks = v["checks"].as_array().or(v.as_array()).unwrap().clone();
    let check = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check: {v}"))
    };
    assert_eq!(check("kinds")["status"], "ok", "{v}");
    let kinds = check("kinds")["message"].as_str().unwrap().to_string();
    assert!(
        kinds.contains("TrainJob served") && kinds.contains("TrainingRuntime served"),
        "{kinds}"
    );
    assert_eq!(check("rbac")["status"], "ok", "{v}");

    e.fc.set_faults(fake_cluster::Faults {
        forbid: vec!["create:trainingruntimes".into()],
        ..Default::default()
    });
    let o = hv(
        &dir,
        Some(&e.kubeconfig),
        &["doctor", "--backend", "trainjob", "-o", "json"],
    );
    e.fc.set_faults(fake_cluster::Faults::default());
    let v = json(&o.stdout);
    let rbac = v["checks"]
        .as_array()
        .or(v.as_array())
        .unwrap()
        .iter()
        .find(|c| c["check"] == "rbac")
        .cloned()
        .unwrap();
    assert_eq!(rbac["status"], "fail", "{rbac}");
    assert!(
        rbac["message"]
            .as_str()
            .unwrap()
            .contains("create trainingruntimes.trainer.kubeflow.org"),
        "{rbac}"
    );
    let o = hv(
        &dir,
        Some(&e.kubeconfig),
        &["doctor", "--backend", "trainjob", "--print-role"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("resources: [\"trainjobs\"]")
            && o.stdout.contains("resources: [\"trainingruntimes\"]"),
        "{}",
        o.stdout
    );

    // Without the Trainer.
    let bare = Cluster::synthetic(false);
    let o = hv(
        &dir,
        Some(&bare.kubeconfig),
        &["deploy", "--backend", "trainjob"],
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("Kubeflow Trainer is not installed")
            && o.stderr.contains("TrainJob is not served"),
        "{}",
        o.stderr
    );
    assert!(bare.fc.list("pods", None, "").is_empty());
}

/// A launcher that fails: its Job fails (backoffLimit 0), JobSet fails, the TrainJob's
/// Failed condition follows, and `status --wait` ends with exit 1 and the reason read from
/// the launcher's pod.
#[test]
fn a_failed_launcher_fails_the_run_with_the_pods_reason() {
    let e = trainer_cluster(KubeletMode::Synthetic);
    let dir = init_app(&e.root, "bad", "mpi-hello");
    let mut c = e.hv(&dir);
    c.args(["deploy", "--backend", "trainjob", "--run-id", "f1"])
        .args(["--set", "env.FAKE_KUBELET_ONLY=launcher"])
        .args(["--set", "env.FAKE_KUBELET_LINES=2"])
        .args(["--set", "env.FAKE_KUBELET_EXIT=3"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut c = e.hv(&dir);
    c.args(["status", "f1", "--wait", "-o", "json"]);
    let o = run(c);
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["state"], "Failed", "{v}");
    let failed = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or_else(|| panic!("no Failed condition: {v}"));
    assert_eq!(failed["status"], "True");
    assert!(
        v["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("launcher ") && r.contains("exited with code 3")),
        "{v}"
    );
}

/// The official Kubeflow Trainer SDK (`kubeflow` 0.5.0, `TrainerClient`, in a venv:
/// [`kubeflow_sdk`]) reads an hvdctl run — mpi-hello, 2 workers, on
/// `fake-cluster --trainer --kubelet docker` — as it reads its own: the Trainer's version
/// from `kubeflow-system/kubeflow-trainer-public` (no warning), hvdctl's runtime among the
/// runtimes (`mpi`), the run among the jobs, its steps with their pods while every pod runs
/// (the SDK's MPI naming: the launcher is `node-0`, node I is `node-(I+1)`) and each step's
/// log holding the lines `hvdctl logs` gives for that pod, `wait_for_job_status` returning
/// Complete, and the run's events, which `hvdctl events` lists too (the JobSet's aside). The ranks wait for a file
/// the test makes once the SDK has seen every pod running: JobSet deletes the nodes' Jobs as
/// soon as the launcher is done. Then the SDK deletes the TrainJob and `hvdctl status`/`logs`
/// say the run is gone (exit 1, no panic), and `undeploy` takes the app's runtime.
///
/// The SDK reads a device from every pod's resource limits and refuses limits without a
/// device it knows (`memory` alone: "Unknown device type"), so the run sets a CPU limit.
#[test]
fn the_kubeflow_sdk_reads_a_run_and_hvdctl_sees_the_sdk_delete_it() {
    let Some(docker) = docker() else { return };
    let Some(python) = kubeflow_sdk() else { return };
    let img = template_image(&docker, "mpi-hello", &debian_image());
    let e = trainer_cluster(KubeletMode::Docker);
    // An app name of its own: its `undeploy --all` takes every run of the app, on every
    // engine — other tests' `hello` runs on this machine's Docker engine included.
    let dir = init_app(&e.root, "sdkapp", "mpi-hello");
    let id = "sdk1";
    let job = format!("sdkapp-{id}");
    let d = e
        .hv(&dir)
        .args(["deploy", "--backend", "trainjob", "--run-id", id])
        .args(["--image", &img, "--no-push"])
        .args(["--set", "workers=2"])
        .args(["--set", "resources.worker.limits.cpu=1"])
        .args(["--set", "resources.launcher.limits.cpu=1"])
        .args([
            "--set",
            "command=[sh, -c, 'until [ -e /tmp/go ]; do sleep 0.2; done; exec python3 /app/hello.py']",
        ])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    assert_eq!(
        d.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&d.stderr)
    );

    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow-sdk/read_run.py");
    let sdk = |args: &[&str]| -> Value {
        let o = std::process::Command::new(&python)
            .arg(&script)
            .arg(&e.kubeconfig)
            .args(["default", &job])
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = json(&out);
        assert_eq!(v["errors"], serde_json::json!({}), "{v:#}");
        // No warning: the Trainer's version was read, every runtime parsed.
        assert_eq!(v["warnings"], serde_json::json!([]), "{v:#}");
        v
    };
    // hvdctl's lines of `pod` against the SDK's log of its step: a node's are the same lines;
    // each of the launcher's is in the SDK's text once Open MPI's rank tags are taken out
    // (hvdctl reads a line's tag and shows the rest, and glues the pieces of a rank's line
    // that Open MPI relayed apart, which may come after other ranks' lines).
    let tags = regex::Regex::new(r"\[\d+,\d+\]<(stdout|stderr)>:").unwrap();
    let same_lines = |v: &Value, step: &str, pod: &str| {
        let h = e
            .hv(&dir)
            .args(["logs", id, "-o", "json"])
            .output()
            .unwrap();
        assert_eq!(
            h.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&h.stderr)
        );
        let ours: Vec<String> = String::from_utf8_lossy(&h.stdout)
            .lines()
            .map(json)
            .filter(|l| l["pod"] == pod)
            .map(|l| l["message"].as_str().unwrap().to_string())
            .collect();
        let theirs: Vec<String> = v["logs"][step]
            .as_array()
            .unwrap_or_else(|| panic!("no logs for {step}: {v:#}"))
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect();
        assert!(!ours.is_empty(), "hvdctl has no lines of {pod}");
        if step != "node-0" {
            assert_eq!(ours, theirs, "{step}");
            return;
        }
        let text = tags.replace_all(&theirs.join(""), "").into_owned();
        for o in &ours {
            assert!(
                text.contains(o.as_str()),
                "{step}: {o:?} not in the SDK's {theirs:?}"
            );
        }
    };
    let steps_of = |v: &Value| -> Vec<(String, String)> {
        v["job"]["steps"]
            .as_array()
            .unwrap_or_else(|| panic!("{v:#}"))
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["pod"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };

    // While every pod runs.
    let v = sdk(&["running", "2"]);
    let rt = v["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "hvdctl-sdkapp")
        .unwrap_or_else(|| panic!("hvdctl's runtime not listed: {v:#}"));
    assert_eq!(rt["framework"], "mpi", "{v:#}");
    assert_eq!(v["jobs"], serde_json::json!([job]), "{v:#}");
    assert_eq!(v["job"]["num_nodes"], 2, "{v:#}");
    assert_eq!(v["job"]["runtime"], "hvdctl-sdkapp", "{v:#}");
    let steps = steps_of(&v);
    let names: Vec<&str> = steps.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["node-0", "node-1", "node-2"], "{v:#}");
    for (step, pod) in &steps {
        let want = if step == "node-0" {
            format!("{job}-launcher-0-0-")
        } else {
            let i: u32 = step["node-".len()..].parse().unwrap();
            format!("{job}-node-0-{}-", i - 1)
        };
        assert!(pod.starts_with(&want), "{step}: {pod} ({v:#})");
        assert_eq!(
            v["job"]["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == step.as_str())
                .unwrap()["device"],
            "cpu",
            "{v:#}"
        );
        if step != "node-0" {
            // A node's sshd line.
            same_lines(&v, step, pod);
        }
    }

    // The ranks go; the SDK waits for the end.
    for i in ["0", "1"] {
        let o = e
            .hv(&dir)
            .args(["exec", id, "--index", i, "--", "touch", "/tmp/go"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let v = sdk(&["done"]);
    assert_eq!(v["waited"], "Complete", "{v:#}");
    assert_eq!(v["job"]["status"], "Complete", "{v:#}");
    let steps = steps_of(&v);
    let launcher = steps
        .iter()
        .find(|s| s.0 == "node-0")
        .unwrap_or_else(|| panic!("{v:#}"));
    same_lines(&v, "node-0", &launcher.1);
    let log = v["logs"]["node-0"].to_string();
    assert!(log.contains("= 1 (expected 1) OK"), "{v:#}");

    // Events of the TrainJob, its JobSet and pods (the SDK's choice).
    let events = v["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|ev| ev["kind"] == "Pod" && ev["reason"] == "Started"),
        "{v:#}"
    );
    assert!(
        events
            .iter()
            .any(|ev| ev["kind"] == "TrainJob" && ev["reason"] == "Completed"),
        "{v:#}"
    );
    let o = e
        .hv(&dir)
        .args(["events", id, "-o", "json"])
        .output()
        .unwrap();
    let hv_events = String::from_utf8_lossy(&o.stdout).to_string();
    // Those of the objects still there (JobSet deletes the nodes' Jobs as the run ends,
    // and their pods go with them, maybe after the SDK read their events; hvdctl lists the
    // events of the TrainJob, its Jobs and pods, not the JobSet's).
    let kept = |ev: &&Value| ev["kind"] == "TrainJob" || ev["name"] == launcher.1.as_str();
    for ev in events.iter().filter(kept) {
        assert!(
            hv_events.contains(&serde_json::to_string(&ev["message"]).unwrap()),
            "{ev} not in hvdctl's events: {hv_events}"
        );
    }

    // The SDK deletes the run; hvdctl then says it is gone.
    let v = sdk(&["delete"]);
    assert_eq!(v["deleted"], true, "{v:#}");
    e.fc.wait_for("trainjobs", "default", &job, Duration::from_secs(60), |o| {
        o.is_none()
    })
    .unwrap();
    // The garbage collector takes the JobSet, its Jobs and pods.
    let end = std::time::Instant::now() + Duration::from_secs(120);
    let selector = format!("jobset.sigs.k8s.io/jobset-name={job}");
    while !e.fc.list("pods", Some("default"), &selector).is_empty() {
        assert!(
            std::time::Instant::now() < end,
            "the run's pods outlived its TrainJob"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for args in [vec!["status", id], vec!["logs", id]] {
        let o = e.hv(&dir).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        eprintln!(
            "{args:?} after the SDK's delete: exit {:?}\n{}\n{err}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: run `{id}` ({job}) not found")),
            "{args:?}: {err}"
        );
    }
    // The app's runtime outlived the TrainJob the SDK deleted; hvdctl's undeploy takes it.
    assert!(
        e.fc.get("trainingruntimes", "default", "hvdctl-sdkapp")
            .is_some()
    );
    let o = e
        .hv(&dir)
        .args(["undeploy", "--all", "--yes"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("deleted what its runs shared: TrainingRuntime/hvdctl-sdkapp"),
        "{err}"
    );
    // Deleted in the foreground: gone once the garbage collector has had its pass.
    e.fc.wait_for(
        "trainingruntimes",
        "default",
        "hvdctl-sdkapp",
        Duration::from_secs(60),
        |o| o.is_none(),
    )
    .unwrap();
}
