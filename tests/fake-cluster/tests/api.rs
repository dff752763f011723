//! The REST API: discovery, CRUD, validation, patches, server-side apply, selectors,
//! watch (+ 410), garbage collection, faults and the control endpoints.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::Duration;

const PODS: &str = "/api/v1/namespaces/default/pods";

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

#[test]
fn discovery_depends_on_mpi_operator() {
    let fc = start(false);
    let apis = get(&fc, "/apis").json();
    let names: Vec<&str> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["apps", "batch"]);
    assert_eq!(get(&fc, "/apis/kubeflow.org/v2beta1").status, 404);
    assert_eq!(
        get(&fc, "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs").status,
        404
    );
    let core = get(&fc, "/api/v1").json();
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["kind"], "Pod");
    assert!(
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/log")
    );
    assert_eq!(get(&fc, "/version").json()["major"], "1");

    let fc = start(true);
    let mpi = get(&fc, "/apis/kubeflow.org/v2beta1").json();
    assert_eq!(mpi["resources"][0]["name"], "mpijobs");
    assert_eq!(mpi["resources"][0]["namespaced"], true);
    assert_eq!(
        get(&fc, "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs").json()["kind"],
        "MPIJobList"
    );
}

#[test]
fn crud_and_errors() {
    let fc = start(false);
    let path = "/api/v1/namespaces/default/configmaps";
    let r = post(&fc, path, &cm("one", json!({"a": "1"})));
    assert_eq!(r.status, 201, "{}", r.text());
    let created = r.json();
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(created["metadata"]["creationTimestamp"].is_string());
    let rv1: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let dup = post(&fc, path, &cm("one", json!({})));
    assert_eq!(dup.status, 409);
    let st = dup.json();
    assert_eq!(
        (
            st["kind"].as_str(),
            st["reason"].as_str(),
            st["code"].as_i64()
        ),
        (Some("Status"), Some("AlreadyExists"), Some(409))
    );
    assert_eq!(st["message"], "configmaps \"one\" already exists");
    assert_eq!(st["details"]["name"], "one");

    let missing_ns = post(
        &fc,
        "/api/v1/namespaces/nope/configmaps",
        &cm("x", json!({})),
    );
    assert_eq!(missing_ns.status, 404);
    assert_eq!(
        missing_ns.json()["message"],
        "namespaces \"nope\" not found"
    );

    let bad = post(&fc, path, &cm("Bad_Name", json!({})));
    assert_eq!(bad.status, 422);
    assert_eq!(bad.json()["reason"], "Invalid");
    assert!(
        bad.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value")
    );
    let noname = post(
        &fc,
        path,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
    );
    assert_eq!(noname.status, 422);
    let badlabel = post(&fc, path, &cm("bl", json!({"a": "has space"})));
    assert_eq!(badlabel.status, 422);

    let malformed = req(&fc, "POST", path, "application/json", Some("{not json"));
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.json()["kind"], "Status");
    let bad_yaml = req(&fc, "POST", path, "application/yaml", Some("a: [unclosed"));
    assert_eq!(bad_yaml.status, 400);
    let yaml = req(
        &fc,
        "POST",
        path,
        "application/yaml",
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  x: \"1\"\n"),
    );
    assert_eq!(yaml.status, 201, "{}", yaml.text());
    let wrong_kind = post(
        &fc,
        path,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w"}}),
    );
    assert_eq!(wrong_kind.status, 400);

    // generateName
    let g = post(&fc, path, &json!({"metadata": {"generateName": "gen-"}}));
    assert_eq!(g.status, 201);
    assert!(
        g.json()["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );

    // get / 404
    assert_eq!(get(&fc, &format!("{path}/one")).json()["data"]["k"], "v");
    let nf = get(&fc, &format!("{path}/zzz"));
    assert_eq!(nf.status, 404);
    assert_eq!(nf.json()["message"], "configmaps \"zzz\" not found");

    // update with a stale resourceVersion conflicts; with the current one it succeeds.
    let mut upd = created.clone();
    upd["data"]["k"] = json!("v2");
    let ok = req(
        &fc,
        "PUT",
        &format!("{path}/one"),
        "application/json",
        Some(&upd.to_string()),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let rv2: u64 = ok.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    let stale = req(
        &fc,
        "PUT",
        &format!("{path}/one"),
        "application/json",
        Some(&upd.to_string()),
    );
    assert_eq!(stale.status, 409);
    assert_eq!(stale.json()["reason"], "Conflict");

    // merge patch, strategic (as merge), JSON patch
    let mp = req(
        &fc,
        "PATCH",
        &format!("{path}/one"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"labels":{"b":"2"}},"data":{"k":null,"n":"1"}}"#),
    );
    assert_eq!(mp.status, 200, "{}", mp.text());
    assert_eq!(mp.json()["data"], json!({"n": "1"}));
    assert_eq!(mp.json()["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    let sp = req(
        &fc,
        "PATCH",
        &format!("{path}/one"),
        "application/strategic-merge-patch+json",
        Some(r#"{"data":{"s":"1"}}"#),
    );
    assert_eq!(sp.json()["data"]["s"], "1");
    let jp = req(
        &fc,
        "PATCH",
        &format!("{path}/one"),
        "application/json-patch+json",
        Some(r#"[{"op":"replace","path":"/data/s","value":"2"}]"#),
    );
    assert_eq!(jp.json()["data"]["s"], "2");
    let badp = req(
        &fc,
        "PATCH",
        &format!("{path}/one"),
        "application/merge-patch+json",
        Some("[1,"),
    );
    assert_eq!(badp.status, 400);
    let unknown_ct = req(
        &fc,
        "PATCH",
        &format!("{path}/one"),
        "text/plain",
        Some("{}"),
    );
    assert_eq!(unknown_ct.status, 415);

    // dry-run create persists nothing
    let dry = post(&fc, &format!("{path}?dryRun=All"), &cm("dry", json!({})));
    assert_eq!(dry.status, 201);
    assert!(fc.get("configmaps", "default", "dry").is_none());

    // delete (dry-run first)
    let dd = req(&fc, "DELETE", &format!("{path}/one?dryRun=All"), "", None);
    assert_eq!(dd.status, 200);
    assert!(fc.get("configmaps", "default", "one").is_some());
    assert_eq!(
        req(&fc, "DELETE", &format!("{path}/one"), "", None).status,
        200
    );
    assert_eq!(get(&fc, &format!("{path}/one")).status, 404);
    assert_eq!(
        req(&fc, "DELETE", &format!("{path}/one"), "", None).status,
        404
    );
}

#[test]
fn server_side_apply() {
    let fc = start(false);
    let path = "/api/v1/namespaces/default/configmaps/app";
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  labels: {a: \"1\"}\ndata:\n  k: v\n  old: o\n";
    let no_manager = req(
        &fc,
        "PATCH",
        path,
        "application/apply-patch+yaml",
        Some(body),
    );
    assert_eq!(no_manager.status, 400);
    let dry = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m1&dryRun=All"),
        "application/apply-patch+yaml",
        Some(body),
    );
    assert_eq!(dry.status, 201, "{}", dry.text());
    assert!(fc.get("configmaps", "default", "app").is_none());
    let created = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m1"),
        "application/apply-patch+yaml",
        Some(body),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let obj = created.json();
    assert_eq!(obj["metadata"]["managedFields"][0]["manager"], "m1");
    assert_eq!(obj["metadata"]["managedFields"][0]["operation"], "Apply");
    assert_eq!(
        fc.get("configmaps", "default", "app").unwrap()["metadata"]["managedFields"][0]["manager"],
        "m1"
    );

    // m1 re-applies without `old`: removed; maps merge deeply.
    let body2 = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app","labels":{"a":"1"}},"data":{"k":"v"}}"#;
    let r = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m1"),
        "application/apply-patch+yaml",
        Some(body2),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"], json!({"k": "v"}));

    // Another manager: conflict, then force.
    let other =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"k":"theirs"}}"#;
    let c = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m2"),
        "application/apply-patch+yaml",
        Some(other),
    );
    assert_eq!(c.status, 409);
    assert!(
        c.json()["message"]
            .as_str()
            .unwrap()
            .contains("conflict with \"m1\": .data.k"),
        "{}",
        c.text()
    );
    let f = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m2&force=true"),
        "application/apply-patch+yaml",
        Some(other),
    );
    assert_eq!(f.status, 200);
    assert_eq!(f.json()["data"]["k"], "theirs");

    // A wrong name in the body is refused.
    let wrong = req(
        &fc,
        "PATCH",
        &format!("{path}?fieldManager=m1"),
        "application/apply-patch+yaml",
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"zzz"}}"#),
    );
    assert_eq!(wrong.status, 400);
}

#[test]
fn selectors_and_all_namespaces() {
    let fc = start(false);
    assert_eq!(
        post(
            &fc,
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "other"}})
        )
        .status,
        201
    );
    for (name, ns, env) in [
        ("a", "default", "prod"),
        ("b", "default", "dev"),
        ("c", "other", "prod"),
    ] {
        let r = post(
            &fc,
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            &cm(name, json!({"env": env, "tier": name})),
        );
        assert_eq!(r.status, 201);
    }
    post(
        &fc,
        "/api/v1/namespaces/default/configmaps",
        &cm("nolabel", json!({})),
    );
    let names = |q: &str| -> Vec<String> {
        let r = get(&fc, &format!("/api/v1/configmaps?labelSelector={q}"));
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        let mut v: Vec<String> = r.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("env%3Dprod"), vec!["a", "c"]);
    assert_eq!(names("env%3D%3Dprod"), vec!["a", "c"]);
    assert_eq!(names("env!%3Dprod"), vec!["b", "nolabel"]);
    assert_eq!(names("tier%20in%20(a%2Cb)"), vec!["a", "b"]);
    assert_eq!(names("tier%20notin%20(a%2Cb)"), vec!["c", "nolabel"]);
    assert_eq!(names("env"), vec!["a", "b", "c"]);
    assert_eq!(names("!env"), vec!["nolabel"]);
    assert_eq!(
        get(&fc, "/api/v1/configmaps?labelSelector=a%20in%20(").status,
        400
    );
    let by_name = get(
        &fc,
        "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Db",
    )
    .json();
    assert_eq!(by_name["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        get(&fc, "/api/v1/namespaces/other/configmaps").json()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Deleting a namespace deletes its objects.
    assert_eq!(
        req(&fc, "DELETE", "/api/v1/namespaces/other", "", None).status,
        200
    );
    assert!(fc.get("configmaps", "other", "c").is_none());
    // deletecollection with a selector
    let r = req(
        &fc,
        "DELETE",
        "/api/v1/namespaces/default/configmaps?labelSelector=env",
        "",
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    assert!(fc.get("configmaps", "default", "nolabel").is_some());
}

fn watch_lines(s: &mut Stream, n: usize, pending: &mut Vec<u8>) -> Vec<Value> {
    s.lines(n, Duration::from_secs(5), pending)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn watch_from_resource_version_and_gone() {
    let fc = FakeCluster::start(Options {
        history_limit: 20,
        ..Default::default()
    })
    .unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let first = post(&fc, path, &cm("w0", json!({"w": "1"}))).json();
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut s = open(
        &fc,
        "GET",
        &format!("{path}?watch=1&resourceVersion={rv}&labelSelector=w"),
        &[],
        None,
    );
    assert_eq!(s.status, 200);
    post(&fc, path, &cm("w1", json!({"w": "1"})));
    post(&fc, path, &cm("ignored", json!({})));
    req(
        &fc,
        "PATCH",
        &format!("{path}/w1"),
        "application/merge-patch+json",
        Some(r#"{"data":{"k":"2"}}"#),
    );
    // Losing the label looks like a deletion to this watch.
    req(
        &fc,
        "PATCH",
        &format!("{path}/w0"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"labels":{"w":null}}}"#),
    );
    req(&fc, "DELETE", &format!("{path}/w1"), "", None);
    let mut pending = Vec::new();
    let ev = watch_lines(&mut s, 4, &mut pending);
    let got: Vec<(&str, &str)> = ev
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("ADDED", "w1"),
            ("MODIFIED", "w1"),
            ("DELETED", "w0"),
            ("DELETED", "w1")
        ]
    );
    let rvs: Vec<u64> = ev
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");

    // Without a resourceVersion: synthetic ADDED for what exists.
    let mut s0 = open(&fc, "GET", &format!("{path}?watch=true"), &[], None);
    let mut p0 = Vec::new();
    let ev = watch_lines(&mut s0, 2, &mut p0);
    assert!(ev.iter().all(|e| e["type"] == "ADDED"), "{ev:?}");

    // Push the old version out of the bounded history: ERROR with a 410 Status.
    for i in 0..30 {
        post(&fc, path, &cm(&format!("fill{i}"), json!({})));
    }
    let mut old = open(
        &fc,
        "GET",
        &format!("{path}?watch=1&resourceVersion={rv}"),
        &[],
        None,
    );
    assert_eq!(old.status, 200);
    let mut p = Vec::new();
    let ev = watch_lines(&mut old, 1, &mut p);
    assert_eq!(ev[0]["type"], "ERROR");
    assert_eq!(ev[0]["object"]["code"], 410);
    assert_eq!(ev[0]["object"]["reason"], "Expired");
    assert!(
        ev[0]["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version")
    );
    assert!(old.lines(1, Duration::from_secs(2), &mut p).is_empty());
    assert!(old.is_done());
}

#[test]
fn watch_timeout_bookmarks_and_expiry() {
    let fc = FakeCluster::start(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let rv = fc.resource_version();
    let t0 = std::time::Instant::now();
    let mut s = open(
        &fc,
        "GET",
        &format!("{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1"),
        &[],
        None,
    );
    let mut p = Vec::new();
    let ev = watch_lines(&mut s, 1, &mut p);
    assert_eq!(ev[0]["type"], "BOOKMARK");
    assert_eq!(ev[0]["object"]["kind"], "ConfigMap");
    let r = s.read_to_end();
    assert!(!r.truncated);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );

    fc.set_faults(Faults {
        watch_expire_secs: 0.3,
        ..Default::default()
    });
    let t0 = std::time::Instant::now();
    let s = open(
        &fc,
        "GET",
        &format!("{path}?watch=1&resourceVersion={}", fc.resource_version()),
        &[],
        None,
    );
    let _ = s.read_to_end();
    // It expired (the 0.3 s fault), it did not hang.
    assert!(t0.elapsed() < Duration::from_secs(10));
    post(&fc, path, &cm("x", json!({})));
    let rv = fc.resource_version() - 1;
    std::thread::sleep(Duration::from_millis(400));
    let mut s = open(
        &fc,
        "GET",
        &format!("{path}?watch=1&resourceVersion={rv}"),
        &[],
        None,
    );
    let mut p = Vec::new();
    let ev = watch_lines(&mut s, 1, &mut p);
    assert_eq!(ev[0]["object"]["code"], 410);
}

fn owned_cm(name: &str, owner: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]}})
}

#[test]
fn garbage_collection() {
    let fc = start(false);
    let path = "/api/v1/namespaces/default/configmaps";
    // Background: dependents go after the owner.
    let owner = post(&fc, path, &cm("owner", json!({}))).json();
    post(&fc, path, &owned_cm("dep", &owner));
    assert_eq!(
        req(
            &fc,
            "DELETE",
            &format!("{path}/owner"),
            "application/json",
            Some(r#"{"propagationPolicy":"Background"}"#)
        )
        .status,
        200
    );
    wait_until("dependent collected", Duration::from_secs(30), || {
        fc.get("configmaps", "default", "dep")
            .is_none()
            .then_some(())
    });

    // Orphan: dependents stay, without the owner reference.
    let owner = post(&fc, path, &cm("owner2", json!({}))).json();
    post(&fc, path, &owned_cm("dep2", &owner));
    assert_eq!(
        req(
            &fc,
            "DELETE",
            &format!("{path}/owner2?propagationPolicy=Orphan"),
            "",
            None
        )
        .status,
        200
    );
    std::thread::sleep(Duration::from_millis(100));
    let dep = fc
        .get("configmaps", "default", "dep2")
        .expect("orphan kept");
    assert!(dep["metadata"].get("ownerReferences").is_none());

    // Foreground: the owner stays, marked, until its dependents are gone.
    let owner = post(&fc, path, &cm("owner3", json!({}))).json();
    let dep = post(&fc, path, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dep3", "finalizers": ["test/hold"], "ownerReferences": owned_cm("x", &owner)["metadata"]["ownerReferences"]}})).json();
    assert_eq!(dep["metadata"]["finalizers"][0], "test/hold");
    let r = req(
        &fc,
        "DELETE",
        &format!("{path}/owner3"),
        "application/json",
        Some(r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#),
    );
    assert_eq!(r.status, 202);
    // The collector marks the dependent deleted in a pass of its own: wait for that, then
    // both are still there (the dependent's finalizer holds it, and it holds the owner).
    wait_until(
        "the dependent marked deleted",
        Duration::from_secs(60),
        || {
            fc.get("configmaps", "default", "dep3")
                .filter(|d| d["metadata"]["deletionTimestamp"].is_string())
        },
    );
    let o = fc
        .get("configmaps", "default", "owner3")
        .expect("owner waits for dependents");
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(o["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert!(
        fc.get("configmaps", "default", "dep3").is_some(),
        "held by its finalizer"
    );
    // Removing the dependent's finalizer lets both go.
    let r = req(
        &fc,
        "PATCH",
        &format!("{path}/dep3"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"finalizers":null}}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_until("foreground owner deleted", Duration::from_secs(30), || {
        fc.get("configmaps", "default", "owner3")
            .is_none()
            .then_some(())
    });
    assert!(fc.get("configmaps", "default", "dep3").is_none());
}

#[test]
fn faults_and_control_endpoint() {
    let fc = start(false);
    fc.set_faults(Faults {
        fail_rate: 1.0,
        ..Default::default()
    });
    let mut codes = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let r = get(&fc, "/api/v1/namespaces/default/configmaps");
        codes.insert(r.status);
        let st = r.json();
        assert_eq!(st["kind"], "Status");
        if r.status == 429 {
            assert_eq!(r.header("Retry-After"), Some("1"));
            assert_eq!(st["reason"], "TooManyRequests");
        } else {
            assert_eq!(st["reason"], "InternalError");
        }
    }
    assert_eq!(codes.into_iter().collect::<Vec<_>>(), vec![429, 500]);
    // The control endpoint is never faulted; it merges partial updates.
    let r = req(
        &fc,
        "POST",
        "/fake/faults",
        "application/json",
        Some(r#"{"fail_rate":0,"forbid":["list:pods"],"delay_ms":50}"#),
    );
    assert_eq!(r.status, 200);
    assert_eq!(fc.faults().forbid, vec!["list:pods".to_string()]);
    let t0 = std::time::Instant::now();
    let r = get(&fc, PODS);
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "pods is forbidden: User \"fake\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(r.json()["reason"], "Forbidden");
    assert_eq!(
        get(&fc, "/api/v1/pods").json()["message"],
        "pods is forbidden: User \"fake\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
    assert_eq!(
        get(&fc, &format!("{PODS}/x")).status,
        404,
        "get is not forbidden"
    );
    assert_eq!(
        req(
            &fc,
            "POST",
            "/fake/faults",
            "application/json",
            Some("{bad")
        )
        .status,
        400
    );

    req(
        &fc,
        "POST",
        "/fake/faults",
        "application/json",
        Some(r#"{"forbid":[],"delay_ms":0}"#),
    );
    fc.reset_request_counts();
    get(&fc, PODS);
    get(&fc, &format!("{PODS}/nope"));
    get(&fc, "/api");
    assert_eq!(fc.request_count(), 3);
    let counts = fc.request_counts();
    assert_eq!(counts.get("list"), Some(&1));
    assert_eq!(counts.get("get pods"), Some(&1));
    assert_eq!(counts.get("discovery"), Some(&1));
    let stats = get(&fc, "/fake/stats").json();
    assert_eq!(stats["total"], 3);
}

#[test]
fn binary_prints_url_and_writes_kubeconfig() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--mpi-operator",
            "--cut-logs-every",
            "5",
            "--fail-rate",
            "0",
            "--nodes",
            "3",
            "--node-cpu",
            "4",
            "--node-memory=8Gi",
            "--node-gpus",
            "2",
            "--node-taint",
            "gpu=yes:NoSchedule",
            "--node-taint",
            "spot:PreferNoSchedule",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first.trim().to_string();
    let config = std::fs::read_to_string(&kc).unwrap();
    let nodes = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
        c.write_all(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        text
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(config.contains(&format!("server: {url}")));
    assert!(config.contains("current-context: fake-cluster"));
    assert!(config.contains("namespace: default"));
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
        .args(["--fail-rate", "2"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let body = &nodes[nodes.find("\r\n\r\n").unwrap() + 4..];
    let list: Value = serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {nodes}"));
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[2]["metadata"]["name"], "fake-node-2");
    assert_eq!(
        items[0]["status"]["allocatable"],
        json!({"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "2"})
    );
    assert_eq!(
        items[1]["spec"]["taints"],
        json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}, {"key": "spot", "effect": "PreferNoSchedule"}])
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
        .args(["--nodes", "1", "--node-taint", "gpu=yes:Sometimes"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("effect must be NoSchedule"));
}
