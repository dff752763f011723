//! Controllers (Job, StatefulSet, MPI Operator), the kubelet and pod logs.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::Duration;

const PODS: &str = "/api/v1/namespaces/default/pods";

fn log(fc: &FakeCluster, pod: &str, query: &str) -> Resp {
    get(fc, &format!("{PODS}/{pod}/log?{query}"))
}

fn lines(r: &Resp) -> Vec<String> {
    r.text().lines().map(String::from).collect()
}

#[test]
fn kubelet_phases_and_container_statuses() {
    let fc = start(false);
    fc.create(pod(
        "p",
        &[
            ("FAKE_KUBELET_LINES", "3"),
            ("FAKE_KUBELET_RATE", "20"),
            ("FAKE_KUBELET_EXIT", "3"),
        ],
    ))
    .unwrap();
    let p = wait_until("scheduled", Duration::from_secs(30), || {
        fc.get("pods", "default", "p")
            .filter(|p| p["spec"]["nodeName"].is_string())
    });
    assert!(
        p["spec"]["nodeName"]
            .as_str()
            .unwrap()
            .starts_with("fake-node-")
    );
    // Running lasts 150 ms for `p`, and a late kubelet pass may go from Pending straight to
    // Failed (as the real kubelet's status manager may): a container that runs until the test
    // deletes it shows the running state.
    fc.create(pod("long", &[])).unwrap();
    let long = fc
        .wait_for("pods", "default", "long", Duration::from_secs(60), |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .expect("a silent container runs")
        .unwrap();
    assert!(
        long["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.244.")
    );
    assert_eq!(long["status"]["containerStatuses"][0]["ready"], true);
    assert!(long["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
    wait_until("failed", Duration::from_secs(30), || {
        phase_is(&fc, "p", "Failed")
    });
    let p = fc.get("pods", "default", "p").unwrap();
    let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 3);
    assert_eq!(t["reason"], "Error");
    // Events of the pod.
    let evs = fc.list("events", Some("default"), "");
    let reasons: Vec<&str> = evs
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "p")
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    for r in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.contains(&r), "{r} missing in {reasons:?}");
    }
    // Waiting pods refuse logs like the kubelet.
    let slow = FakeCluster::start(Options {
        kubelet_delay: Duration::from_secs(30),
        ..Default::default()
    })
    .unwrap();
    slow.create(pod("w", &[])).unwrap();
    let r = log(&slow, "w", "");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "container \"main\" in pod \"w\" is waiting to start: ContainerCreating"
    );
    assert_eq!(
        slow.get("pods", "default", "w").unwrap()["status"]["phase"],
        "Pending"
    );
}

#[test]
fn restarts_previous_logs_and_restart_policy() {
    let fc = start(false);
    let mut p = pod(
        "r",
        &[
            ("FAKE_KUBELET_LINES", "4"),
            ("FAKE_KUBELET_RATE", "100"),
            ("FAKE_KUBELET_RESTARTS", "2"),
        ],
    );
    p["spec"]["restartPolicy"] = json!("OnFailure");
    fc.create(p).unwrap();
    let r = log(&fc, "r", "previous=true");
    assert!(r.status == 400 || r.status == 200, "{}", r.text());
    wait_until("succeeded", Duration::from_secs(60), || {
        phase_is(&fc, "r", "Succeeded")
    });
    let p = fc.get("pods", "default", "r").unwrap();
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 2);
    assert_eq!(cs["state"]["terminated"]["reason"], "Completed");
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(cs["lastState"]["terminated"]["reason"], "Error");
    let cur = lines(&log(&fc, "r", ""));
    assert_eq!(
        cur,
        (1..=4)
            .map(|i| format!("pod=r container=main restart=2 line {i}"))
            .collect::<Vec<_>>()
    );
    let prev = lines(&log(&fc, "r", "previous=true"));
    assert_eq!(
        prev.last().unwrap(),
        "pod=r container=main restart=1 line 4"
    );
    assert!(
        fc.list("events", Some("default"), "")
            .iter()
            .any(|e| e["reason"] == "BackOff" && e["involvedObject"]["name"] == "r")
    );

    // Never: no restart, so no previous instance.
    fc.create(pod("n", &[("FAKE_KUBELET_LINES", "2")])).unwrap();
    wait_until("done", Duration::from_secs(30), || {
        phase_is(&fc, "n", "Succeeded")
    });
    let r = log(&fc, "n", "previous=true");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "previous terminated container \"main\" in pod \"n\" not found"
    );
}

#[test]
fn log_parameters() {
    let fc = start(false);
    fc.create(pod("l", &[("FAKE_KUBELET_LINES", "1000")]))
        .unwrap();
    wait_until("done", Duration::from_secs(30), || {
        phase_is(&fc, "l", "Succeeded")
    });
    let all = log(&fc, "l", "timestamps=true");
    assert_eq!(all.status, 200);
    assert_eq!(all.header("Content-Type"), Some("text/plain"));
    let all = lines(&all);
    assert_eq!(all.len(), 1000);
    let mut stamps = Vec::new();
    for (i, l) in all.iter().enumerate() {
        let (ts, text) = l.split_once(' ').unwrap();
        assert_eq!(ts.len(), "2026-11-22T10:00:00.123456789Z".len(), "{ts}");
        assert!(text.ends_with(&format!(" {}", i + 1)));
        stamps.push(jiff::Timestamp::from_str_helper(ts));
    }
    assert!(
        stamps.windows(2).all(|w| w[0] < w[1]),
        "timestamps strictly increase"
    );

    let tail = lines(&log(&fc, "l", "tailLines=3"));
    assert_eq!(
        tail,
        vec![
            "pod=l container=main restart=0 line 998",
            "pod=l container=main restart=0 line 999",
            "pod=l container=main restart=0 line 1000"
        ]
    );
    assert!(log(&fc, "l", "tailLines=0").body.is_empty());

    // sinceTime: lines at or after the instant.
    let ts500 = all[499].split_once(' ').unwrap().0;
    let since = lines(&log(&fc, "l", &format!("sinceTime={ts500}")));
    assert_eq!(since.len(), 501);
    assert!(since[0].ends_with(" 500"));
    let floored = &ts500[..19];
    let since_floor = lines(&log(
        &fc,
        "l",
        &format!("sinceTime={floored}Z&timestamps=true"),
    ));
    assert!(since_floor.len() >= 501);
    assert_eq!(log(&fc, "l", "sinceTime=garbage").status, 400);
    assert_eq!(
        log(&fc, "l", "sinceSeconds=3600").text().lines().count(),
        1000
    );

    let limited = log(&fc, "l", "limitBytes=10");
    assert_eq!(limited.body.len(), 10);

    assert_eq!(log(&fc, "nope", "").status, 404);
    assert_eq!(log(&fc, "l", "container=other").status, 400);

    // Several containers: the container must be named.
    let mut two = pod("two", &[]);
    two["spec"]["containers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]);
    fc.create(two).unwrap();
    wait_until("two running", Duration::from_secs(30), || {
        phase_is(&fc, "two", "Running")
    });
    let r = log(&fc, "two", "");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "a container name must be specified for pod two, choose one of: [a b]"
    );
    assert_eq!(log(&fc, "two", "container=b").status, 200);

    // A deleted pod's logs are gone.
    fc.delete("pods", "default", "l", None).unwrap();
    assert_eq!(log(&fc, "l", "").status, 404);
}

trait FromStrHelper {
    fn from_str_helper(s: &str) -> jiff::Timestamp;
}
impl FromStrHelper for jiff::Timestamp {
    fn from_str_helper(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }
}

#[test]
fn follow_streams_until_the_container_ends() {
    let fc = start(false);
    fc.create(pod(
        "f",
        &[("FAKE_KUBELET_LINES", "6"), ("FAKE_KUBELET_RATE", "20")],
    ))
    .unwrap();
    // Started: Running, or already done when the kubelet's pass came late (a 300 ms run).
    wait_until("started", Duration::from_secs(60), || {
        matches!(phase(&fc, "f").as_deref(), Some("Running" | "Succeeded")).then_some(())
    });
    let mut s = open(
        &fc,
        "GET",
        &format!("{PODS}/f/log?follow=true&timestamps=true"),
        &[],
        None,
    );
    assert_eq!(s.status, 200);
    let mut p = Vec::new();
    let mut got = Vec::new();
    while got.len() < 6 {
        let l = s.lines(1, Duration::from_secs(60), &mut p);
        assert_eq!(
            l.len(),
            1,
            "line {} of 6 within 60 s: {got:?}",
            got.len() + 1
        );
        // Lines appear as their time comes: none is served before the instant it carries.
        let now = jiff::Timestamp::now();
        let (ts, _) = l[0].split_once(' ').unwrap();
        let ts = jiff::Timestamp::from_str_helper(ts);
        assert!(ts <= now, "{} served at {now}", l[0]);
        got.extend(l);
    }
    assert!(got[5].ends_with("line 6"));
    let r = s.read_to_end();
    assert!(!r.truncated, "follow ends with a clean end of body");

    // A silent container: follow waits until the pod is deleted.
    fc.create(pod("silent", &[])).unwrap();
    wait_until("running", Duration::from_secs(30), || {
        phase_is(&fc, "silent", "Running")
    });
    let s = open(
        &fc,
        "GET",
        &format!("{PODS}/silent/log?follow=true"),
        &[],
        None,
    );
    let fc2 = &fc;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            fc2.delete("pods", "default", "silent", None).unwrap();
        });
        let t0 = std::time::Instant::now();
        let r = s.read_to_end();
        assert!(r.body.is_empty());
        assert!(t0.elapsed() >= Duration::from_millis(150));
    });
}

#[test]
fn cut_logs_alternate_clean_and_abrupt_and_log_faults() {
    let fc = start(false);
    fc.create(pod("c", &[("FAKE_KUBELET_LINES", "50")]))
        .unwrap();
    wait_until("done", Duration::from_secs(30), || {
        phase_is(&fc, "c", "Succeeded")
    });
    fc.set_faults(Faults {
        cut_logs_every: 10,
        ..Default::default()
    });
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let r = log(&fc, "c", "timestamps=true");
        assert_eq!(r.status, 200);
        let text = r.text();
        let complete = text.matches('\n').count();
        assert_eq!(complete, 10, "{text}");
        let partial = !text.ends_with('\n');
        assert_eq!(partial, r.truncated, "a mid-line cut is a broken body");
        kinds.push(r.truncated);
    }
    assert!(kinds.contains(&true) && kinds.contains(&false), "{kinds:?}");
    assert!(
        kinds.windows(2).all(|w| w[0] != w[1]),
        "alternates: {kinds:?}"
    );

    fc.set_faults(Faults {
        log_fail_rate: 1.0,
        ..Default::default()
    });
    let r = log(&fc, "c", "");
    assert!(r.status == 500 || r.status == 429);
    assert_eq!(get(&fc, &format!("{PODS}/c")).status, 200, "only logs fail");
}

#[test]
fn job_controller_backoff_and_completion() {
    let fc = start(false);
    let job = |name: &str, env: Value, backoff: i64| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
               "spec": {"backoffLimit": backoff, "template": {"metadata": {"labels": {"mine": name}},
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "env": env}]}}}})
    };
    let j = fc
        .create(job(
            "ok",
            json!([{"name": "FAKE_KUBELET_LINES", "value": "2"}]),
            6,
        ))
        .unwrap();
    let uid = j["metadata"]["uid"].as_str().unwrap().to_string();
    let done = fc
        .wait_for("jobs", "default", "ok", Duration::from_secs(60), |j| {
            j.is_some_and(|j| j["status"]["succeeded"] == 1)
        })
        .expect("job completes")
        .unwrap();
    let conds: Vec<(&str, &str)> = done["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert!(conds.contains(&("Complete", "True")), "{conds:?}");
    assert!(
        done["status"]["completionTime"].is_string() && done["status"]["startTime"].is_string()
    );
    let pods = fc.list("pods", Some("default"), "mine=ok");
    assert_eq!(pods.len(), 1);
    let p = &pods[0];
    let name = p["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with("ok-") && name.len() == "ok-".len() + 5,
        "{name}"
    );
    for k in ["batch.kubernetes.io/job-name", "job-name"] {
        assert_eq!(p["metadata"]["labels"][k], "ok");
    }
    for k in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
        assert_eq!(p["metadata"]["labels"][k], uid.as_str());
    }
    assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
    assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);

    // backoffLimit 2 with a failing pod: 3 pods, then Failed.
    fc.create(job("bad", json!([{"name": "FAKE_KUBELET_LINES", "value": "1"}, {"name": "FAKE_KUBELET_EXIT", "value": "2"}]), 2)).unwrap();
    let failed = fc
        .wait_for("jobs", "default", "bad", Duration::from_secs(60), |j| {
            j.is_some_and(|j| {
                j["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Failed" && c["status"] == "True")
                })
            })
        })
        .expect("job fails")
        .unwrap();
    assert_eq!(failed["status"]["failed"], 3);
    let c = failed["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(c["reason"], "BackoffLimitExceeded");
    assert_eq!(fc.list("pods", Some("default"), "mine=bad").len(), 3);

    // Deleting a Job with no policy orphans its pods (batch/v1 default); Background collects them.
    fc.delete("jobs", "default", "bad", None).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fc.list("pods", Some("default"), "mine=bad").len(), 3);
    let r = req(
        &fc,
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/ok?propagationPolicy=Background",
        "",
        None,
    );
    assert_eq!(r.status, 200);
    wait_until("pods of ok collected", Duration::from_secs(30), || {
        fc.list("pods", Some("default"), "mine=ok")
            .is_empty()
            .then_some(())
    });
}

#[test]
fn statefulset_controller() {
    let fc = start(false);
    fc.create(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
        "spec": {"replicas": 3, "serviceName": "svc", "podManagementPolicy": "Parallel", "selector": {"matchLabels": {"app": "s"}},
                 "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
    .unwrap();
    let s = fc
        .wait_for(
            "statefulsets",
            "default",
            "s",
            Duration::from_secs(60),
            |s| s.is_some_and(|s| s["status"]["readyReplicas"] == 3),
        )
        .expect("ready")
        .unwrap();
    assert_eq!(s["status"]["replicas"], 3);
    let p = fc.get("pods", "default", "s-2").unwrap();
    assert_eq!(p["spec"]["hostname"], "s-2");
    assert_eq!(p["spec"]["subdomain"], "svc");
    assert_eq!(p["metadata"]["labels"]["app"], "s");
    fc.delete("pods", "default", "s-1", None).unwrap();
    wait_until("recreated", Duration::from_secs(30), || {
        fc.get("pods", "default", "s-1")
    });
}

fn mpijob(name: &str, workers: i64, launcher_env: Value, clean: Option<&str>) -> Value {
    let mut j = json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default", "labels": {"hvdctl.io/run": "r1"}},
        "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"metadata": {"labels": {"hvdctl.io/run": "r1", "hvdctl.io/role": "launcher"}},
                "spec": {"containers": [{"name": "launcher", "image": "hvd", "env": launcher_env}]}}},
            "Worker": {"replicas": workers, "template": {"metadata": {"labels": {"hvdctl.io/run": "r1"}},
                "spec": {"containers": [{"name": "worker", "image": "hvd"}]}}}}}
    });
    if let Some(c) = clean {
        j["spec"]["runPolicy"] = json!({"cleanPodPolicy": c});
    }
    j
}

fn cond(v: &Value, t: &str) -> Option<String> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
}

#[test]
fn mpi_operator_end_to_end() {
    let fc = start(true);
    // The launcher of `m` runs until the MPIJob is deleted: Running is a state the test holds,
    // not one a late pass may skip (the operator writes Running only when it sees the launcher
    // pod running, mpi_job_controller.go's updateMPIJobStatus). `d` runs to the end.
    fc.create(mpijob("m", 2, json!([]), Some("Running")))
        .unwrap();
    fc.create(mpijob("d", 1, json!([{"name": "FAKE_KUBELET_LINES", "value": "5"}, {"name": "FAKE_KUBELET_RATE", "value": "10"}]), Some("Running"))).unwrap();
    let uid = fc.get("mpijobs", "default", "m").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let running = fc
        .wait_for("mpijobs", "default", "m", Duration::from_secs(60), |j| {
            j.and_then(|j| cond(j, "Running")).as_deref() == Some("True")
        })
        .expect("running")
        .unwrap();
    assert_eq!(cond(&running, "Created").as_deref(), Some("True"));
    assert_eq!(running["status"]["replicaStatuses"]["Worker"]["active"], 2);

    let secret = fc.get("secrets", "default", "m-ssh").unwrap();
    assert_eq!(secret["type"], "kubernetes.io/ssh-auth");
    // A real key pair: the private key parses and its public half is the published one.
    let b64 = |k: &str| {
        let v = fake_cluster::util::base64_decode(secret["data"][k].as_str().unwrap()).unwrap();
        String::from_utf8(v).unwrap()
    };
    let private = ssh_key::PrivateKey::from_openssh(b64("ssh-privatekey")).expect("OpenSSH key");
    assert_eq!(
        private.public_key().to_openssh().unwrap() + "\n",
        b64("ssh-publickey")
    );
    assert_eq!(secret["metadata"]["labels"]["app"], "m");
    let cm = fc.get("configmaps", "default", "m-config").unwrap();
    assert_eq!(
        cm["data"]["hostfile"],
        "m-worker-0.m.default.svc slots=2\nm-worker-1.m.default.svc slots=2\n"
    );
    // Only Running workers, no slot counts (the operator's form).
    assert_eq!(
        cm["data"]["discover_hosts.sh"],
        "#!/bin/sh\necho m-worker-0.m.default.svc\necho m-worker-1.m.default.svc\n"
    );
    let svc = fc.get("services", "default", "m").unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], false);
    assert_eq!(
        svc["spec"]["selector"],
        json!({"training.kubeflow.org/job-name": "m", "training.kubeflow.org/operator-name": "mpi-operator"})
    );
    let launcher_job = fc.get("jobs", "default", "m-launcher").unwrap();
    assert_eq!(
        launcher_job["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );

    let workers = fc.list(
        "pods",
        Some("default"),
        "training.kubeflow.org/job-role=worker,training.kubeflow.org/job-name=m",
    );
    assert_eq!(workers.len(), 2);
    for w in &workers {
        let l = &w["metadata"]["labels"];
        assert_eq!(l["training.kubeflow.org/job-name"], "m");
        assert_eq!(l["training.kubeflow.org/operator-name"], "mpi-operator");
        assert_eq!(l["hvdctl.io/run"], "r1", "template labels are copied");
        let idx = l["training.kubeflow.org/replica-index"].as_str().unwrap();
        assert_eq!(w["metadata"]["name"], format!("m-worker-{idx}"));
        assert_eq!(w["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
        assert_eq!(w["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(w["spec"]["restartPolicy"], "Never");
        assert_eq!(w["spec"]["subdomain"], "m");
        assert_eq!(w["spec"]["hostname"], w["metadata"]["name"]);
        let c = &w["spec"]["containers"][0];
        assert_eq!(c["command"], json!(["/usr/sbin/sshd", "-De"]));
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "ssh-auth", "mountPath": "/root/.ssh"}])
        );
        assert_eq!(w["spec"]["volumes"][0]["secret"]["defaultMode"], 0o600);
        assert_eq!(w["spec"]["volumes"].as_array().unwrap().len(), 1);
    }
    let launcher = fc.list(
        "pods",
        Some("default"),
        "hvdctl.io/run=r1,training.kubeflow.org/job-role=launcher,training.kubeflow.org/job-name=m",
    );
    assert_eq!(launcher.len(), 1);
    assert_eq!(
        launcher[0]["metadata"]["labels"]["hvdctl.io/role"],
        "launcher"
    );
    assert_eq!(launcher[0]["metadata"]["labels"]["job-name"], "m-launcher");
    assert_eq!(launcher[0]["spec"]["hostname"], "m-launcher");
    let lc = &launcher[0]["spec"]["containers"][0];
    let env: Vec<(String, String)> = lc["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (k, v) in [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "2"),
        ("NVIDIA_VISIBLE_DEVICES", ""),
    ] {
        assert!(
            env.contains(&(k.to_string(), v.to_string())),
            "{k}={v} in {env:?}"
        );
    }
    assert_eq!(
        lc["volumeMounts"],
        json!([{"name": "ssh-auth", "mountPath": "/root/.ssh"}, {"name": "mpi-job-config", "mountPath": "/etc/mpi"}])
    );
    assert_eq!(launcher_job["metadata"]["labels"], json!({"app": "m"}));

    let done = fc
        .wait_for("mpijobs", "default", "d", Duration::from_secs(60), |j| {
            j.and_then(|j| cond(j, "Succeeded")).as_deref() == Some("True")
        })
        .expect("succeeds")
        .unwrap();
    // Running turns False with success where it was written (the operator's
    // filterOutCondition); a launcher that ended before the operator saw it running leaves none.
    assert_ne!(cond(&done, "Running").as_deref(), Some("True"));
    assert!(
        done["status"]["completionTime"].is_string() && done["status"]["startTime"].is_string()
    );
    // cleanPodPolicy Running: the still-running workers are deleted.
    wait_until("workers cleaned", Duration::from_secs(60), || {
        fc.list(
            "pods",
            Some("default"),
            "training.kubeflow.org/job-role=worker,training.kubeflow.org/job-name=d",
        )
        .is_empty()
        .then_some(())
    });
    assert_eq!(
        fc.list(
            "pods",
            Some("default"),
            "training.kubeflow.org/job-role=launcher,training.kubeflow.org/job-name=d"
        )
        .len(),
        1
    );

    // Deleting the MPIJob collects everything it owns.
    fc.delete("mpijobs", "default", "m", Some("Foreground"))
        .unwrap();
    wait_until("all collected", Duration::from_secs(30), || {
        (fc.get("mpijobs", "default", "m").is_none()
            && fc.get("jobs", "default", "m-launcher").is_none()
            && fc.get("configmaps", "default", "m-config").is_none()
            && fc
                .list("pods", Some("default"), "training.kubeflow.org/job-name=m")
                .is_empty())
        .then_some(())
    });
}

#[test]
fn mpi_operator_failure_and_clean_none() {
    let fc = start(true);
    let mut j = mpijob(
        "f",
        1,
        json!([{"name": "FAKE_KUBELET_LINES", "value": "1"}, {"name": "FAKE_KUBELET_EXIT", "value": "1"}]),
        None, // the operator defaults cleanPodPolicy to None
    );
    j["spec"]["runPolicy"]["backoffLimit"] = json!(0);
    fc.create(j).unwrap();
    let failed = fc
        .wait_for("mpijobs", "default", "f", Duration::from_secs(60), |j| {
            j.and_then(|j| cond(j, "Failed")).as_deref() == Some("True")
        })
        .expect("fails")
        .unwrap();
    let c = failed["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(c["reason"], "MPIJobFailed");
    assert!(c["lastUpdateTime"].is_string());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        fc.list(
            "pods",
            Some("default"),
            "training.kubeflow.org/job-role=worker"
        )
        .len(),
        1,
        "cleanPodPolicy None keeps workers"
    );

    // Not installed: no MPIJobs at all.
    let plain = start(false);
    assert!(plain.create(mpijob("x", 1, json!([]), None)).is_err());
}
