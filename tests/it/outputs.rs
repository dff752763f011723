//! The command line read the same way everywhere: `-o json|yaml` on every command that prints
//! data, `status -o wide`, named arguments in help, bare `hvdctl`, `-V` only at the top.

use crate::util::*;

#[test]
fn data_commands_print_json_and_yaml() {
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "demo", "mpi-hello");
    let hv = |args: &[&str]| {
        let mut c = e.hv(&dir);
        c.args(args);
        run(c)
    };
    let d = hv(&[
        "deploy",
        "--backend",
        "native",
        "--run-id",
        "out1",
        "--set",
        "env.FAKE_KUBELET_LINES=2",
        "--wait",
    ]);
    assert_eq!(d.code, 0, "{}", d.stderr);

    // status -o wide: the text report with each pod's IP, the same IPs as -o json.
    let j = hv(&["status", "out1", "-o", "json"]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let report: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let pods = report["pods"].as_array().unwrap();
    assert!(!pods.is_empty(), "{report}");
    let w = hv(&["status", "out1", "-o", "wide"]);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let header = w.stdout.lines().find(|l| l.starts_with("NAME")).unwrap();
    assert!(header.contains(" IP "), "{}", w.stdout);
    for p in pods {
        let ip = p["ip"]
            .as_str()
            .expect("every pod of a waited-for run has an IP");
        let line = w
            .stdout
            .lines()
            .find(|l| l.starts_with(p["name"].as_str().unwrap()))
            .unwrap();
        assert!(line.contains(ip), "{line} lacks {ip}");
    }
    let t = hv(&["status", "out1"]);
    assert!(!t.stdout.contains(" IP "), "{}", t.stdout);

    // events: a JSON array, a YAML list, the text table; the same events in each.
    let ej = hv(&["events", "out1", "-o", "json"]);
    assert_eq!(ej.code, 0, "{}", ej.stderr);
    let events: Vec<serde_json::Value> = serde_json::from_str(&ej.stdout).unwrap();
    assert!(
        events
            .iter()
            .any(|ev| ev["reason"] == "Scheduled" && ev["object"] == "Pod/demo-out1-worker-0"),
        "{}",
        ej.stdout
    );
    for k in ["time", "type", "reason", "object", "message", "count"] {
        assert!(events[0].get(k).is_some(), "event lacks {k}: {}", events[0]);
    }
    // The same events in each form: three reads, compared when no event came between them
    // (events are written as the cluster acts, also after the run ended).
    let count = |o: &Out| {
        serde_json::from_str::<Vec<serde_json::Value>>(&o.stdout)
            .unwrap()
            .len()
    };
    let mut before = events.len();
    for attempt in 1.. {
        let ey = hv(&["events", "out1", "-o", "yaml"]);
        assert_eq!(ey.code, 0, "{}", ey.stderr);
        let listed: Vec<serde_json::Value> = serde_norway::from_str(&ey.stdout).unwrap();
        let et = hv(&["events", "out1"]);
        let after = count(&hv(&["events", "out1", "-o", "json"]));
        if before == after || attempt == 20 {
            assert_eq!(listed.len(), before, "{}", ey.stdout);
            assert_eq!(et.stdout.lines().count(), before + 1, "{}", et.stdout);
            break;
        }
        before = after;
    }

    // version and templates as YAML; runs and doctor take yaml too.
    let v = hv(&["version", "-o", "yaml"]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    let v: serde_json::Value = serde_norway::from_str(&v.stdout).unwrap();
    assert_eq!(v["client"], env!("CARGO_PKG_VERSION"));
    assert!(v["server"].as_str().unwrap().starts_with("v1."), "{v}");
    let t = hv(&["templates", "-o", "yaml"]);
    let t: Vec<serde_json::Value> = serde_norway::from_str(&t.stdout).unwrap();
    assert!(t.iter().any(|x| x["name"] == "horovod"), "{t:?}");
    let r = hv(&["runs", "-o", "yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r: Vec<serde_json::Value> = serde_norway::from_str(&r.stdout).unwrap();
    assert!(r.iter().any(|x| x["run"] == "out1"), "{r:?}");
}

#[test]
fn help_and_version_read_the_same_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let hv = |args: &[&str]| {
        let mut c = hvdctl_in(tmp.path());
        c.args(args);
        run(c)
    };
    let bare = hv(&[]);
    assert_eq!(bare.code, 0, "{}", bare.stderr);
    assert!(bare.stdout.contains("Usage: hvdctl"), "{}", bare.stdout);
    let v = hv(&["-V"]);
    assert_eq!((v.code, v.stdout.trim()), (0, "hvdctl 0.1.0"));
    for sub in ["deploy", "status", "logs", "version"] {
        let o = hv(&[sub, "-V"]);
        assert_eq!(o.code, 2, "{sub} -V: {}", o.stdout);
    }
    let cp = hv(&["cp", "--help"]);
    for want in [
        "Usage: hvdctl cp [OPTIONS] [RUN] SRC DEST",
        "  SRC ",
        "  DEST ",
    ] {
        assert!(cp.stdout.contains(want), "{want}: {}", cp.stdout);
    }
    let pf = hv(&["port-forward", "--help"]);
    for want in ["[RUN] [LOCAL:]REMOTE", "  [LOCAL:]REMOTE "] {
        assert!(pf.stdout.contains(want), "{want}: {}", pf.stdout);
    }
    assert!(!pf.stdout.contains("<ARG>"), "{}", pf.stdout);
}

/// A reader that went away is not a crash: `hvdctl templates | head -0` (stdout closed before
/// anything is written) ends with exit 0 and says nothing; a closed stderr loses the error
/// message but not the exit code. The pipes' read ends are closed before the process starts,
/// so every write fails, whatever the machine's load.
#[test]
fn a_closed_stdout_or_stderr_is_not_a_panic() {
    let closed = || {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        writer
    };
    let out = hvdctl_process()
        .arg("templates")
        .stdout(closed())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("hvdctl runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout closed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An error with stderr closed: still its exit code (2, bad input), not 101.
    let out = hvdctl_process()
        .args(["-C", "/nonexistent-app-dir", "deploy"])
        .stdout(std::process::Stdio::null())
        .stderr(closed())
        .output()
        .expect("hvdctl runs");
    assert_eq!(out.status.code(), Some(2));
}
