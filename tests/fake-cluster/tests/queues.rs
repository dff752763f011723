//! Queued workloads: the fake's Kueue (`--kueue`) with the MPI Operator, the Trainer and
//! Kueue's pod-group integration, and the fake's Volcano (`--volcano`). Seen through the
//! library and through the machine's real `kubectl`.

mod common;

use common::*;
use fake_cluster::kueue::Quota;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

fn kueue(quota: &str, f: impl FnOnce(&mut Options)) -> FakeCluster {
    let mut o = Options {
        kueue: Some(Quota::parse(quota).unwrap()),
        kubelet_delay: Duration::from_millis(20),
        restart_backoff: Duration::from_millis(50),
        ..Default::default()
    };
    f(&mut o);
    FakeCluster::start(o).expect("start fake cluster")
}

fn cond<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn cond_is(v: Option<&Value>, t: &str, status: &str) -> bool {
    v.and_then(|v| cond(v, t))
        .is_some_and(|c| c["status"] == status)
}

fn events(fc: &FakeCluster, ns: &str, uid: &str) -> Vec<(String, String)> {
    fc.list("events", Some(ns), "")
        .into_iter()
        .filter(|e| e["involvedObject"]["uid"] == uid)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// An MPIJob labelled for LocalQueue `queue`: a launcher (1 cpu, ends after a few lines
/// unless `hang`) and one worker (1 cpu).
fn mpijob(name: &str, queue: &str, hang: bool) -> Value {
    let lines = if hang { "100000" } else { "3" };
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"slotsPerWorker": 1, "launcherCreationPolicy": "WaitForWorkersReady", "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "launcher", "image": "hvd",
                "resources": {"requests": {"cpu": "1"}},
                "env": [{"name": "FAKE_KUBELET_LINES", "value": lines}, {"name": "FAKE_KUBELET_RATE", "value": "20"}]}]}}},
            "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "worker", "image": "hvd",
                "resources": {"limits": {"cpu": "1"}}}]}}}}}
    })
}

fn workload_of(fc: &FakeCluster, owner_uid: &str) -> Option<Value> {
    fc.list("workloads", Some("default"), "")
        .into_iter()
        .find(|w| w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == owner_uid)
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

/// kubectl with a kubeconfig for `fc`; `None` (skipped) only when kubectl is absent outside CI.
fn kubectl(fc: &FakeCluster, dir: &std::path::Path, args: &[&str]) -> Option<String> {
    let bin = ["/usr/bin/kubectl", "/usr/local/bin/kubectl"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file());
    let Some(bin) = bin else {
        assert!(
            std::env::var_os("CI").is_none(),
            "kubectl is required in CI"
        );
        eprintln!("SKIPPED: kubectl not found");
        return None;
    };
    fc.write_kubeconfig(&dir.join("kubeconfig")).unwrap();
    let out = Command::new(bin)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("HOME", dir)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(args)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every stored object of `resource` — status included, as the fake wrote it — validates
/// strictly against the CRD schema `fixture` of `tests/fixtures/crds/`; returns how many.
fn assert_valid(fc: &FakeCluster, resource: &str, fixture: &str) -> usize {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/crds")
        .join(format!("{fixture}.schema.json"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let schema = fake_cluster::schema::of_fixture(&doc);
    let items = fc.list(resource, None, "");
    for o in &items {
        let errs = fake_cluster::schema::errors(schema, o);
        assert!(
            errs.is_empty(),
            "{resource} {} against {fixture}: {errs:#?}",
            o["metadata"]["name"]
        );
    }
    // The check bites: a status field the CRD does not declare is refused.
    if let Some(o) = items.first() {
        let mut bad = o.clone();
        bad["status"]["notInTheCrd"] = json!(1);
        assert!(!fake_cluster::schema::errors(schema, &bad).is_empty());
    }
    items.len()
}

/// Kueue's objects against Kueue v0.19.2's CRDs.
fn assert_kueue_valid(fc: &FakeCluster) {
    for (r, f) in [
        ("workloads", "kueue-v0.19.2-workloads"),
        ("localqueues", "kueue-v0.19.2-localqueues"),
        ("clusterqueues", "kueue-v0.19.2-clusterqueues"),
        ("resourceflavors", "kueue-v0.19.2-resourceflavors"),
    ] {
        assert!(assert_valid(fc, r, f) > 0, "no {r}");
    }
}

#[test]
fn kueue_start_objects_and_local_queue_per_namespace() {
    let fc = kueue("cpu=8,nvidia.com/gpu=4", |_| {});
    assert!(fc.get("resourceflavors", "", "default-flavor").is_some());
    let cq = fc.get("clusterqueues", "", "gpu").unwrap();
    assert_eq!(cq["spec"]["namespaceSelector"], json!({}));
    assert_eq!(cq["spec"]["queueingStrategy"], "BestEffortFIFO");
    let rg = &cq["spec"]["resourceGroups"][0];
    assert_eq!(rg["coveredResources"], json!(["cpu", "nvidia.com/gpu"]));
    assert_eq!(rg["flavors"][0]["name"], "default-flavor");
    assert_eq!(
        rg["flavors"][0]["resources"][1],
        json!({"name": "nvidia.com/gpu", "nominalQuota": "4"})
    );
    for ns in ["default", "kube-system"] {
        let lq = fc.get("localqueues", ns, "team-a").unwrap();
        assert_eq!(lq["spec"]["clusterQueue"], "gpu");
    }
    fc.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}}))
        .unwrap();
    fc.wait_for("localqueues", "later", "team-a", WAIT, |l| l.is_some())
        .expect("a LocalQueue in a namespace created later");
    fc.wait_for("localqueues", "later", "team-a", WAIT, |l| {
        l.is_some_and(|l| cond_is(Some(l), "Active", "True"))
    })
    .expect("active");
    // `--kueue` alone: cpu=8.
    assert_eq!(Quota::default(), Quota::parse("cpu=8").unwrap());
}

#[test]
fn kueue_admits_mpijobs_in_order_against_the_quota() {
    let fc = kueue("cpu=2", |o| o.mpi_operator = true);
    let first = fc.create(mpijob("first", "team-a", true)).unwrap();
    // The webhook suspended it at creation.
    assert_eq!(first["spec"]["runPolicy"]["suspend"], true);
    let first_uid = uid(&first);
    let wl1 = fc
        .wait_for("mpijobs", "default", "first", WAIT, |_| {
            workload_of(&fc, &first_uid).is_some_and(|w| cond_is(Some(&w), "Admitted", "True"))
        })
        .map(|_| workload_of(&fc, &first_uid).unwrap())
        .expect("first admitted");
    let name1 = wl1["metadata"]["name"].as_str().unwrap().to_string();
    // Made after the first was admitted: creation times have whole seconds, and Kueue
    // orders equal ones by uid.
    let second = fc.create(mpijob("second", "team-a", false)).unwrap();
    let second_uid = uid(&second);
    assert!(name1.starts_with("mpijob-first-") && name1.len() == "mpijob-first-".len() + 5);
    assert_eq!(wl1["spec"]["queueName"], "team-a");
    assert_eq!(
        wl1["metadata"]["ownerReferences"][0]["uid"],
        first_uid.as_str()
    );
    assert_eq!(wl1["metadata"]["ownerReferences"][0]["controller"], true);
    let ps: Vec<&str> = wl1["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ps, ["launcher", "worker"]);
    let qr = cond(&wl1, "QuotaReserved").unwrap();
    assert_eq!(
        (qr["reason"].as_str(), qr["message"].as_str()),
        (
            Some("QuotaReserved"),
            Some("Quota reserved in ClusterQueue gpu")
        )
    );
    assert_eq!(
        cond(&wl1, "Admitted").unwrap()["message"],
        "The workload is admitted"
    );
    let adm = &wl1["status"]["admission"];
    assert_eq!(adm["clusterQueue"], "gpu");
    assert_eq!(
        adm["podSetAssignments"][1],
        json!({"name": "worker", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": "1"}, "count": 1})
    );
    assert!(events(&fc, "default", &first_uid).contains(&(
        "CreatedWorkload".into(),
        format!("Created Workload: default/{name1}")
    )));

    // The first runs: unsuspended with the pod-set labels, its pods scheduled.
    let mj = fc
        .wait_for("mpijobs", "default", "first", WAIT, |j| {
            cond_is(j, "Running", "True")
        })
        .expect("first running")
        .unwrap();
    assert_eq!(mj["spec"]["runPolicy"]["suspend"], false);
    let wt = &mj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"];
    assert_eq!(wt["kueue.x-k8s.io/podset"], "worker");
    assert_eq!(wt["kueue.x-k8s.io/local-queue-name"], "team-a");
    assert_eq!(wt["kueue.x-k8s.io/cluster-queue-name"], "gpu");
    let w0 = fc.get("pods", "default", "first-worker-0").unwrap();
    assert_eq!(w0["metadata"]["labels"]["kueue.x-k8s.io/podset"], "worker");
    assert!(
        events(&fc, "default", &first_uid)
            .contains(&("Started".into(), "Admitted by clusterQueue gpu".into()))
    );

    // The second waits with Kueue's message; suspended, its launcher Job exists already
    // (suspended, no workers: mpi-operator #615).
    let msg = "couldn't assign flavors to pod set launcher: insufficient unused quota for cpu in flavor default-flavor, 1 more needed";
    fc.wait_for("mpijobs", "default", "second", WAIT, |_| {
        workload_of(&fc, &second_uid)
            .is_some_and(|w| cond(&w, "QuotaReserved").is_some_and(|c| c["message"] == msg))
    })
    .expect("second pending");
    let wl2 = workload_of(&fc, &second_uid).unwrap();
    let name2 = wl2["metadata"]["name"].as_str().unwrap().to_string();
    let qr = cond(&wl2, "QuotaReserved").unwrap();
    assert_eq!(
        (qr["status"].as_str(), qr["reason"].as_str()),
        (Some("False"), Some("Pending"))
    );
    assert!(cond(&wl2, "Admitted").is_none());
    assert_eq!(
        wl2["status"]["resourceRequests"][0],
        json!({"name": "launcher", "resources": {"cpu": "1"}})
    );
    // The Warning event follows the condition.
    let wl2_uid = uid(&wl2);
    wait_until("the Pending event", WAIT, || {
        events(&fc, "default", &wl2_uid)
            .contains(&("Pending".into(), msg.into()))
            .then_some(())
    });
    let mj2 = fc
        .wait_for("mpijobs", "default", "second", WAIT, |j| {
            cond_is(j, "Suspended", "True")
        })
        .expect("second suspended")
        .unwrap();
    let s = cond(&mj2, "Suspended").unwrap();
    assert_eq!(
        (s["reason"].as_str(), s["message"].as_str()),
        (Some("MPIJobSuspended"), Some("MPIJob suspended"))
    );
    assert_eq!(
        cond(&mj2, "Running").unwrap()["message"],
        "MPIJob default/second is suspended."
    );
    let launcher = fc
        .wait_for("jobs", "default", "second-launcher", WAIT, |j| j.is_some())
        .expect("launcher made while suspended")
        .unwrap();
    assert_eq!(launcher["spec"]["suspend"], true);
    assert!(fc.get("pods", "default", "second-worker-0").is_none());
    assert!(
        fc.list("pods", Some("default"), "job-name=second-launcher")
            .is_empty()
    );

    // Visibility: position 0 in both queues (0-based), through kubectl too.
    let dir = tempfile::tempdir().unwrap();
    // The queues' status counts it (written at the end of the same pass).
    fc.wait_for("localqueues", "default", "team-a", WAIT, |l| {
        l.is_some_and(|l| {
            l["status"]["pendingWorkloads"] == 1 && l["status"]["admittedWorkloads"] == 1
        })
    })
    .expect("LocalQueue counts");
    let lq_path = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/team-a/pendingworkloads";
    let r = get(&fc, lq_path);
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["kind"], "PendingWorkloadsSummary");
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["items"][0]["metadata"]["name"], name2.as_str());
    assert_eq!(v["items"][0]["positionInClusterQueue"], 0);
    assert_eq!(v["items"][0]["positionInLocalQueue"], 0);
    assert_eq!(v["items"][0]["localQueueName"], "team-a");
    assert_eq!(
        v["items"][0]["metadata"]["ownerReferences"][0]["kind"],
        "MPIJob"
    );
    if let Some(raw) = kubectl(&fc, dir.path(), &["get", "--raw", lq_path]) {
        let v: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["items"][0]["positionInLocalQueue"], 0);
        let cq: Value = serde_json::from_str(
            &kubectl(
                &fc,
                dir.path(),
                &[
                    "get",
                    "--raw",
                    "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/gpu/pendingworkloads",
                ],
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(cq["items"][0]["metadata"]["name"], name2.as_str());
        let table = kubectl(
            &fc,
            dir.path(),
            &["get", "workloads,localqueues,clusterqueues"],
        )
        .unwrap();
        let row1 = table
            .lines()
            .find(|l| l.contains(&name1))
            .unwrap_or_default();
        let cells: Vec<&str> = row1.split_whitespace().collect();
        assert_eq!(&cells[1..4], ["team-a", "gpu", "True"], "{table}");
        let row2 = table
            .lines()
            .find(|l| l.contains(&name2))
            .unwrap_or_default();
        assert_eq!(row2.split_whitespace().nth(1), Some("team-a"), "{table}");
        assert!(table.contains("CLUSTERQUEUE"), "{table}");
        let lq_row = table
            .lines()
            .find(|l| l.starts_with("localqueue.kueue.x-k8s.io/team-a"))
            .unwrap_or_default();
        assert_eq!(
            lq_row.split_whitespace().collect::<Vec<_>>(),
            ["localqueue.kueue.x-k8s.io/team-a", "gpu", "1", "1"],
            "{table}"
        );
    }
    let r = get(
        &fc,
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/nope/pendingworkloads",
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["reason"], "NotFound");

    // The first finishes (its launcher Job completes): its Workload Finished, the second
    // admitted and run.
    fc.mutate("jobs", "default", "first-launcher", |j| {
        let now = j["metadata"]["creationTimestamp"].clone();
        j["status"]["conditions"] = json!([
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]);
        j["status"]["completionTime"] = now;
    })
    .unwrap();
    // Finished, then (the next pass, as Kueue's) its finalizer removed.
    fc.wait_for("workloads", "default", &name1, WAIT, |w| {
        cond_is(w, "Finished", "True")
            && w.is_some_and(|w| w["metadata"].get("finalizers").is_none())
    })
    .expect("first finished");
    let wl1 = fc.get("workloads", "default", &name1).unwrap();
    assert_eq!(cond(&wl1, "Finished").unwrap()["reason"], "Succeeded");
    assert!(wl1["metadata"].get("finalizers").is_none());
    let mj2 = fc
        .wait_for("mpijobs", "default", "second", WAIT, |j| {
            cond_is(j, "Succeeded", "True")
        })
        .expect("second admitted and done")
        .unwrap();
    let s = cond(&mj2, "Suspended").unwrap();
    assert_eq!(
        (s["status"].as_str(), s["reason"].as_str()),
        (Some("False"), Some("MPIJobResumed"))
    );
    assert!(cond_is(
        fc.get("workloads", "default", &name2).as_ref(),
        "Admitted",
        "True"
    ));
    let v = get(&fc, lq_path).json();
    assert_eq!(v["items"], json!([]));

    assert_kueue_valid(&fc);
    // A deleted job takes its Workload with it.
    fc.delete("mpijobs", "default", "first", None).unwrap();
    fc.wait_for("workloads", "default", &name1, WAIT, |w| w.is_none())
        .expect("workload removed with its job");
}

#[test]
fn kueue_unknown_local_queue_is_inadmissible() {
    let fc = kueue("cpu=2", |o| o.mpi_operator = true);
    let j = fc.create(mpijob("lost", "team-x", false)).unwrap();
    let juid = uid(&j);
    fc.wait_for("mpijobs", "default", "lost", WAIT, |_| {
        workload_of(&fc, &juid).is_some_and(|w| cond(&w, "QuotaReserved").is_some())
    })
    .expect("inadmissible");
    let wl = workload_of(&fc, &juid).unwrap();
    let c = cond(&wl, "QuotaReserved").unwrap();
    assert_eq!(
        (
            c["status"].as_str(),
            c["reason"].as_str(),
            c["message"].as_str()
        ),
        (
            Some("False"),
            Some("Inadmissible"),
            Some("LocalQueue team-x doesn't exist")
        )
    );
    assert_eq!(
        fc.get("mpijobs", "default", "lost").unwrap()["spec"]["runPolicy"]["suspend"],
        true
    );
    // A resource the ClusterQueue does not cover blocks (BlockUndeclared).
    let mut m = mpijob("mem", "team-a", false);
    m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1", "memory": "1Gi"}});
    let muid = uid(&fc.create(m).unwrap());
    let msg =
        "couldn't assign flavors to pod set worker: resource memory unavailable in ClusterQueue";
    fc.wait_for("mpijobs", "default", "mem", WAIT, |_| {
        workload_of(&fc, &muid)
            .is_some_and(|w| cond(&w, "QuotaReserved").is_some_and(|c| c["message"] == msg))
    })
    .expect("memory unavailable");
    // More than the quota can ever hold: the "maximum capacity" message.
    let mut big = mpijob("big", "team-a", false);
    big["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = json!(3);
    let buid = uid(&fc.create(big).unwrap());
    let msg = "couldn't assign flavors to pod set worker: insufficient quota for cpu in flavor default-flavor, previously considered podsets requests (1) + current podset request (3) > maximum capacity (2)";
    fc.wait_for("mpijobs", "default", "big", WAIT, |_| {
        workload_of(&fc, &buid)
            .is_some_and(|w| cond(&w, "QuotaReserved").is_some_and(|c| c["message"] == msg))
    })
    .expect("maximum capacity");
    assert_kueue_valid(&fc);
}

/// The native backend's shape: a launcher Job (no queue label) whose pods are labelled, and
/// worker pods, one pod group of workers + 1.
#[test]
fn kueue_pod_group_gated_then_released() {
    let fc = kueue("cpu=4", |_| {});
    let meta = |role: &str| {
        let mut m = json!({"labels": {"kueue.x-k8s.io/queue-name": "team-a", "role": role},
            "annotations": {"kueue.x-k8s.io/pod-group-name": "run1", "kueue.x-k8s.io/pod-group-total-count": "3"}});
        if role == "worker" {
            m["annotations"]["kueue.x-k8s.io/retriable-in-group"] = json!("false");
        }
        m
    };
    let container = |lines: &str| {
        json!([{"name": "c", "image": "hvd", "resources": {"requests": {"cpu": "1"}},
        "env": [{"name": "FAKE_KUBELET_LINES", "value": lines}, {"name": "FAKE_KUBELET_RATE", "value": "20"}]}])
    };
    for i in 0..2 {
        let mut m = meta("worker");
        m["name"] = json!(format!("run1-worker-{i}"));
        m["namespace"] = json!("default");
        fc.create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": m,
            "spec": {"containers": [{"name": "w", "image": "hvd", "resources": {"requests": {"cpu": "1"}}}]}}))
            .unwrap();
    }
    let p = fc.get("pods", "default", "run1-worker-0").unwrap();
    assert_eq!(p["metadata"]["labels"]["kueue.x-k8s.io/managed"], "true");
    assert_eq!(
        p["metadata"]["finalizers"],
        json!(["kueue.x-k8s.io/managed"])
    );
    assert_eq!(
        p["spec"]["schedulingGates"],
        json!([{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}])
    );
    let ps = cond(&p, "PodScheduled").unwrap();
    assert_eq!(
        (ps["status"].as_str(), ps["reason"].as_str()),
        (Some("False"), Some("SchedulingGated"))
    );
    let puid = uid(&p);
    // Two of three: no Workload yet, the pods say why.
    fc.wait_for("pods", "default", "run1-worker-0", WAIT, |_| {
        events(&fc, "default", &puid).contains(&(
            "ErrWorkloadCompose".into(),
            "'run1' group has fewer runnable pods than expected".into(),
        ))
    })
    .expect("fewer pods than expected");
    assert!(fc.get("workloads", "default", "run1").is_none());
    assert_eq!(
        fc.get("pods", "default", "run1-worker-0").unwrap()["status"]["phase"],
        "Pending"
    );

    let mut tmeta = meta("launcher");
    tmeta.as_object_mut().unwrap().remove("name");
    fc.create(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run1", "namespace": "default"},
        "spec": {"backoffLimit": 0, "template": {"metadata": tmeta, "spec": {"restartPolicy": "Never", "containers": container("3")}}}}))
        .unwrap();
    assert_eq!(
        fc.get("jobs", "default", "run1").unwrap()["spec"]["suspend"],
        false
    );
    let wl = fc
        .wait_for("workloads", "default", "run1", WAIT, |w| {
            cond_is(w, "Admitted", "True")
        })
        .expect("group admitted")
        .unwrap();
    assert_eq!(
        wl["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"],
        "true"
    );
    assert_eq!(
        wl["metadata"]["ownerReferences"].as_array().unwrap().len(),
        3
    );
    let counts: i64 = wl["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_i64().unwrap())
        .sum();
    assert_eq!(counts, 3);
    // Released: gates gone, the pods run.
    fc.wait_for("pods", "default", "run1-worker-1", WAIT, |p| {
        p.is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .expect("worker runs");
    let p = fc.get("pods", "default", "run1-worker-1").unwrap();
    assert!(p["spec"].get("schedulingGates").is_none());
    assert_eq!(
        p["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"],
        "gpu"
    );
    // The launcher ends, the workers are deleted: the group is finished and nothing is left.
    fc.wait_for("jobs", "default", "run1", WAIT, |j| {
        cond_is(j, "Complete", "True")
    })
    .expect("launcher done");
    assert_kueue_valid(&fc);
    for i in 0..2 {
        fc.delete("pods", "default", &format!("run1-worker-{i}"), None)
            .unwrap();
    }
    let wl = fc
        .wait_for("workloads", "default", "run1", WAIT, |w| {
            cond_is(w, "Finished", "True")
        })
        .expect("group finished")
        .unwrap();
    assert_eq!(
        cond(&wl, "Finished").unwrap()["message"],
        "Pods succeeded: 1/3."
    );
    fc.wait_for("pods", "default", "run1-worker-0", WAIT, |p| p.is_none())
        .expect("finalizer removed, pod gone");
}

fn runtime() -> Value {
    let node = |lines: &str| {
        json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "hvd",
        "resources": {"requests": {"cpu": "1"}},
        "env": [{"name": "FAKE_KUBELET_LINES", "value": lines}, {"name": "FAKE_KUBELET_RATE", "value": "20"}]}]}})
    };
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
    "metadata": {"name": "mpi", "namespace": "default"},
    "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/root/.ssh"}},
        "template": {"spec": {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]}, "replicatedJobs": [
            {"name": "launcher", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": node("3")}}},
            {"name": "node", "template": {"spec": {"template": node("100000")}}},
        ]}}}})
}

#[test]
fn kueue_trainjob_queued_then_admitted() {
    let fc = kueue("cpu=3", |o| o.trainer = true);
    fc.create(runtime()).unwrap();
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"runtimeRef": {"name": "mpi", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}, "trainer": {"numNodes": 2}}});
    let created = fc.create(tj).unwrap();
    assert_eq!(created["spec"]["suspend"], true);
    assert_eq!(
        created["spec"]["runtimePatches"][0]["manager"],
        "kueue.x-k8s.io/manager"
    );
    let tuid = uid(&created);
    fc.wait_for("trainjobs", "default", "tj", WAIT, |_| {
        workload_of(&fc, &tuid).is_some_and(|w| cond_is(Some(&w), "Admitted", "True"))
    })
    .expect("trainjob admitted");
    let wl = workload_of(&fc, &tuid).unwrap();
    assert!(
        wl["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("trainjob-tj-")
    );
    let sets: Vec<(String, i64)> = wl["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sets, [("launcher".to_string(), 1), ("node".to_string(), 2)]);
    let t = fc
        .wait_for("trainjobs", "default", "tj", WAIT, |t| {
            cond_is(t, "Complete", "True")
        })
        .expect("trainjob ran to completion")
        .unwrap();
    assert_eq!(t["spec"]["suspend"], false);
    let patch = &t["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"];
    assert_eq!(
        patch[1]["template"]["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"],
        "node"
    );
    // The Trainer rebuilt the suspended JobSet with Kueue's patch before it ran.
    let js = fc.get("jobsets", "default", "tj").unwrap();
    let rj = &js["spec"]["replicatedJobs"][1];
    assert_eq!(rj["name"], "node");
    assert_eq!(
        rj["template"]["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"],
        "node"
    );
    // The Trainer writes Suspended only from what it observed (trainjob_controller.go's
    // setSuspendedCondition: True while it sees spec.suspend, then Resumed, and nothing when
    // Kueue admitted the TrainJob before the Trainer's first look). So: if it was written,
    // the run ended resumed.
    if let Some(s) = cond(&t, "Suspended") {
        assert_eq!(
            (s["status"].as_str(), s["reason"].as_str()),
            (Some("False"), Some("Resumed"))
        );
    }
    fc.wait_for(
        "workloads",
        "default",
        wl["metadata"]["name"].as_str().unwrap(),
        WAIT,
        |w| cond_is(w, "Finished", "True"),
    )
    .expect("workload finished");
    assert_kueue_valid(&fc);
    assert_eq!(assert_valid(&fc, "jobsets", "jobset-v0.12.0-jobsets"), 1);
}

#[test]
fn suspended_batch_job_and_gated_pod_wait() {
    let fc = common::start(false);
    fc.create(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "s", "namespace": "default"},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i",
            "env": [{"name": "FAKE_KUBELET_LINES", "value": "1"}]}]}}}}))
        .unwrap();
    let j = fc
        .wait_for("jobs", "default", "s", WAIT, |j| {
            cond_is(j, "Suspended", "True")
        })
        .expect("suspended")
        .unwrap();
    assert!(j["status"].get("startTime").is_none());
    assert!(fc.list("pods", Some("default"), "job-name=s").is_empty());
    fc.mutate("jobs", "default", "s", |j| {
        j["spec"]["suspend"] = json!(false)
    });
    let j = fc
        .wait_for("jobs", "default", "s", WAIT, |j| {
            cond_is(j, "Complete", "True")
        })
        .expect("resumed and done")
        .unwrap();
    assert_eq!(cond(&j, "Suspended").unwrap()["reason"], "JobResumed");
    fc.create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "g", "namespace": "default"},
        "spec": {"schedulingGates": [{"name": "example.com/hold"}], "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap();
    // A pod for Volcano on a cluster without it waits too.
    let mut v = pod("for-volcano", &[]);
    v["spec"]["schedulerName"] = json!("volcano");
    fc.create(v).unwrap();
    // An ungated pod made after them runs; the others, seen in the same kubelet passes, stay
    // Pending and unbound.
    fc.create(pod("after", &[])).unwrap();
    fc.wait_for("pods", "default", "after", WAIT, |p| {
        p.is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .expect("ungated pod runs");
    let v = fc.get("pods", "default", "for-volcano").unwrap();
    assert_eq!(v["status"]["phase"], "Pending");
    assert!(v["spec"].get("nodeName").is_none());
    let p = fc.get("pods", "default", "g").unwrap();
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["spec"].get("nodeName").is_none());
    let c = cond(&p, "PodScheduled").unwrap();
    assert_eq!(
        (c["reason"].as_str(), c["message"].as_str()),
        (
            Some("SchedulingGated"),
            Some("Scheduling is blocked due to non-empty scheduling gates")
        )
    );
    // Removing the gate through the API is allowed; adding one is not.
    let ct = "application/merge-patch+json";
    let r = req(
        &fc,
        "PATCH",
        "/api/v1/namespaces/default/pods/g",
        ct,
        Some(r#"{"spec":{"schedulingGates":[{"name":"example.com/hold"},{"name":"x/y"}]}}"#),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let r = req(
        &fc,
        "PATCH",
        "/api/v1/namespaces/default/pods/g",
        ct,
        Some(r#"{"spec":{"schedulingGates":null}}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    fc.wait_for("pods", "default", "g", WAIT, |p| {
        p.is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .expect("runs once the gate is gone");
}

fn volcano(f: impl FnOnce(&mut Options)) -> FakeCluster {
    let mut o = Options {
        volcano: true,
        kubelet_delay: Duration::from_millis(20),
        restart_backoff: Duration::from_millis(50),
        ..Default::default()
    };
    f(&mut o);
    FakeCluster::start(o).expect("start fake cluster")
}

/// An MPIJob for Volcano: `workers` workers of 1 cpu, a launcher of 500m.
fn gang_mpijob(name: &str, workers: i64) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default", "annotations": {"scheduling.volcano.sh/queue-name": "ignored"}},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"schedulingPolicy": {"queue": "default"}}, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "launcher", "image": "hvd",
                "resources": {"requests": {"cpu": "500m"}}}]}}},
            "Worker": {"replicas": workers, "template": {"spec": {"containers": [{"name": "worker", "image": "hvd",
                "resources": {"requests": {"cpu": "1"}}}]}}}}}
    })
}

#[test]
fn volcano_gang_pending_when_it_does_not_fit_running_when_it_does() {
    let fc = volcano(|o| {
        o.mpi_operator = true;
        o.nodes.count = 1;
        o.nodes.cpu = "2".into();
    });
    let q = fc.get("queues", "", "default").unwrap();
    assert_eq!(q["status"]["state"], "Open");
    // 500m + 2 × 1 cpu does not fit a 2-cpu node: the whole group waits.
    fc.create(gang_mpijob("big", 2)).unwrap();
    let msg = "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; Pending: 3 Unschedulable";
    let pg = fc
        .wait_for("podgroups", "default", "big", WAIT, |g| {
            g.and_then(|g| cond(g, "Unschedulable"))
                .is_some_and(|c| c["message"] == msg)
        })
        .expect("unschedulable group")
        .unwrap();
    assert_eq!(pg["status"]["phase"], "Pending");
    let c = cond(&pg, "Unschedulable").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("NotEnoughResources"))
    );
    assert_eq!(pg["spec"]["minMember"], 3);
    assert_eq!(pg["spec"]["queue"], "default");
    assert_eq!(pg["spec"]["minResources"], json!({"cpu": "2500m"}));
    assert_eq!(pg["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
    let w = fc.get("pods", "default", "big-worker-1").unwrap();
    assert_eq!(w["spec"]["schedulerName"], "volcano");
    assert_eq!(
        w["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "big"
    );
    assert!(w["spec"].get("nodeName").is_none());
    assert_eq!(cond(&w, "PodScheduled").unwrap()["reason"], "Unschedulable");
    let pg_uid = uid(&pg);
    assert!(events(&fc, "default", &pg_uid).contains(&("Unschedulable".into(), msg.into())));

    // 500m + 1 cpu fits: Inqueue, then Running, and the job runs.
    fc.create(gang_mpijob("small", 1)).unwrap();
    let pg = fc
        .wait_for("podgroups", "default", "small", WAIT, |g| {
            g.is_some_and(|g| g["status"]["phase"] == "Running" && g["status"]["running"] == 2)
        })
        .expect("group running")
        .unwrap();
    assert_eq!(pg["spec"]["minMember"], 2);
    assert!(cond(&pg, "Unschedulable").is_none());
    fc.wait_for("mpijobs", "default", "small", WAIT, |j| {
        cond_is(j, "Running", "True")
    })
    .expect("small runs");
    let ev = events(
        &fc,
        "default",
        &uid(&fc.get("pods", "default", "small-worker-0").unwrap()),
    );
    assert!(
        ev.contains(&(
            "Scheduled".into(),
            "Successfully assigned default/small-worker-0 to fake-node-0".into()
        )),
        "{ev:?}"
    );
    // Still waiting, and seen through kubectl.
    assert_eq!(
        fc.get("podgroups", "default", "big").unwrap()["status"]["phase"],
        "Pending"
    );
    let dir = tempfile::tempdir().unwrap();
    if let Some(out) = kubectl(&fc, dir.path(), &["get", "podgroups"]) {
        let row = out
            .lines()
            .find(|l| l.starts_with("big "))
            .unwrap_or_default();
        assert_eq!(
            row.split_whitespace().take(3).collect::<Vec<_>>(),
            ["big", "Pending", "3"],
            "{out}"
        );
    }
    assert_eq!(
        assert_valid(&fc, "podgroups", "volcano-v1.15.1-podgroups"),
        2
    );
    assert_eq!(assert_valid(&fc, "queues", "volcano-v1.15.1-queues"), 1);
}

#[test]
fn volcano_trainjob_pod_group_from_the_runtime() {
    let fc = volcano(|o| o.trainer = true);
    let mut rt = runtime();
    rt["spec"]["podGroupPolicy"] = json!({"volcano": {}});
    for i in 0..2 {
        rt["spec"]["template"]["spec"]["replicatedJobs"][i]["template"]["spec"]["template"]["spec"]
            ["schedulerName"] = json!("volcano");
    }
    // The launcher keeps running: the group stays Running while the test looks.
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        [0]["env"][0]["value"] = json!("100000");
    fc.create(rt).unwrap();
    fc.create(json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "team-v"}, "spec": {"weight": 1}}))
        .unwrap();
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tv", "namespace": "default", "annotations": {"scheduling.volcano.sh/queue-name": "not-this"}},
        "spec": {"runtimeRef": {"name": "mpi", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}, "trainer": {"numNodes": 2},
            "runtimePatches": [{"manager": "hvdctl.io/hvdctl", "trainingRuntimeSpec": {"template": {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "team-v"}}}}}]}});
    fc.create(tj).unwrap();
    let pg = fc
        .wait_for("podgroups", "default", "tv", WAIT, |g| {
            g.is_some_and(|g| g["status"]["phase"] == "Running")
        })
        .expect("trainjob's group runs")
        .unwrap();
    assert_eq!(pg["spec"]["minMember"], 3);
    assert_eq!(pg["spec"]["queue"], "team-v");
    assert_eq!(pg["spec"]["minResources"], json!({"cpu": "3"}));
    assert_eq!(pg["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
    let pods = fc.list("pods", Some("default"), "jobset.sigs.k8s.io/jobset-name=tv");
    assert_eq!(pods.len(), 3);
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "tv")
    );
    assert_eq!(
        assert_valid(&fc, "podgroups", "volcano-v1.15.1-podgroups"),
        1
    );
    assert_eq!(assert_valid(&fc, "jobsets", "jobset-v0.12.0-jobsets"), 1);
}

/// The binary's flags: `--kueue --kueue-quota Q --volcano`; a quota without `--kueue` means
/// nothing; a bad quota is exit 2 naming it.
#[test]
fn binary_kueue_and_volcano_flags() {
    use std::io::{BufRead, Read, Write};
    let serve = |args: &[&str], paths: &[&str]| -> Vec<(u16, Value)> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first.trim().trim_start_matches("http://").to_string();
        let out = paths
            .iter()
            .map(|p| {
                let mut c = std::net::TcpStream::connect(&addr).unwrap();
                c.write_all(
                    format!("GET {p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
                )
                .unwrap();
                let mut text = String::new();
                c.read_to_string(&mut text).unwrap();
                let code = text[9..12].parse().unwrap();
                let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
                (
                    code,
                    serde_json::from_str(body.trim()).unwrap_or(Value::Null),
                )
            })
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        out
    };
    let cq = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/gpu";
    let q = "/apis/scheduling.volcano.sh/v1beta1/queues/default";
    let r = serve(
        &[
            "--kueue",
            "--kueue-quota",
            "cpu=8,nvidia.com/gpu=4",
            "--volcano",
        ],
        &[cq, q],
    );
    assert_eq!(r[0].0, 200);
    assert_eq!(
        r[0].1["spec"]["resourceGroups"][0]["flavors"][0]["resources"],
        json!([{"name": "cpu", "nominalQuota": "8"}, {"name": "nvidia.com/gpu", "nominalQuota": "4"}])
    );
    assert_eq!(r[1].0, 200);
    let r = serve(&["--kueue"], &[cq]);
    assert_eq!(
        r[0].1["spec"]["resourceGroups"][0]["coveredResources"],
        json!(["cpu"])
    );
    let r = serve(&["--kueue-quota", "cpu=2"], &[cq, q]);
    assert_eq!((r[0].0, r[1].0), (404, 404));
    let bad = Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
        .args(["--kueue", "--kueue-quota", "cpu"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("--kueue-quota: quota \"cpu\": expected RESOURCE=QUANTITY")
    );
}

/// A deleted job's Workload goes with it and frees the quota for the next.
#[test]
fn kueue_deleted_job_frees_its_quota() {
    let fc = kueue("cpu=2", |o| o.mpi_operator = true);
    let a = uid(&fc.create(mpijob("a", "team-a", true)).unwrap());
    fc.wait_for("mpijobs", "default", "a", WAIT, |_| {
        workload_of(&fc, &a).is_some_and(|w| cond_is(Some(&w), "Admitted", "True"))
    })
    .expect("a admitted");
    let b = uid(&fc.create(mpijob("b", "team-a", true)).unwrap());
    fc.wait_for("mpijobs", "default", "b", WAIT, |_| {
        workload_of(&fc, &b)
            .is_some_and(|w| cond(&w, "QuotaReserved").is_some_and(|c| c["reason"] == "Pending"))
    })
    .expect("b pending");
    fc.delete("mpijobs", "default", "a", None).unwrap();
    fc.wait_for("mpijobs", "default", "b", WAIT, |j| {
        cond_is(j, "Running", "True")
    })
    .expect("b admitted and running once a is gone");
    assert!(workload_of(&fc, &a).is_none());
    assert!(cond_is(workload_of(&fc, &b).as_ref(), "Admitted", "True"));
}

/// With Node objects the scheduler, too, leaves a gated pod alone.
#[test]
fn scheduler_leaves_gated_pods_pending() {
    let fc = FakeCluster::start(Options {
        nodes: fake_cluster::scheduler::NodeSpec {
            count: 1,
            ..Default::default()
        },
        kubelet_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .unwrap();
    let mut g = pod("gated", &[]);
    g["spec"]["schedulingGates"] = json!([{"name": "example.com/hold"}]);
    fc.create(g).unwrap();
    fc.create(pod("free", &[])).unwrap();
    fc.wait_for("pods", "default", "free", WAIT, |p| {
        p.is_some_and(|p| p["spec"]["nodeName"] == "fake-node-0")
    })
    .expect("the free pod is bound");
    let p = fc.get("pods", "default", "gated").unwrap();
    assert!(p["spec"].get("nodeName").is_none());
    assert_eq!(
        cond(&p, "PodScheduled").unwrap()["reason"],
        "SchedulingGated"
    );
    fc.mutate("pods", "default", "gated", |p| {
        p["spec"].as_object_mut().unwrap().remove("schedulingGates");
    });
    fc.wait_for("pods", "default", "gated", WAIT, |p| {
        p.is_some_and(|p| p["spec"]["nodeName"] == "fake-node-0")
    })
    .expect("bound once ungated");
}
