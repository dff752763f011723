//! Rank-aware logs on real containers: every MPI's rank tags read from the launcher's lines
//! (Open MPI `--tag-output` on the local backend, MPICH `-prepend-rank` and horovodrun's own
//! tags through Kubernetes pods on the Docker kubelet), shown as `launcher rN | …` with the
//! tag stripped, lines relayed in pieces put back together, `logs --rank N`, and the `rank`
//! of `-o json` lines.
//!
//! Needs `scripts/dev-services.sh start` (and `scripts/dev-services.sh horovod` for the
//! horovodrun test). Without them each test fails, saying what is missing.

use crate::local::{kubelet_containers, kubelet_leftovers, mpich_image};
use crate::util::*;
use futures::TryStreamExt;
use hvdctl::image::docker::DockerClient;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What Docker has of a container's log (stdout and stderr, as the launcher wrote them).
fn raw_log(docker: &DockerClient, container: &str) -> String {
    let opts = bollard::query_parameters::LogsOptions {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let frames: Vec<_> = rt()
        .block_on(
            docker
                .bollard()
                .logs(container, Some(opts))
                .try_collect::<Vec<_>>(),
        )
        .expect("the container's log");
    frames
        .into_iter()
        .map(|f| String::from_utf8_lossy(&f.into_bytes()).into_owned())
        .collect()
}

/// The container the Docker kubelet runs for the launcher pod of `job`.
fn kubelet_launcher(docker: &DockerClient, fc: &fake_cluster::FakeCluster, job: &str) -> String {
    kubelet_containers(docker, fc, job)
        .into_iter()
        .find(|(pod, _)| pod.starts_with(&format!("default/{job}-launcher")))
        .map(|(_, id)| id)
        .expect("the launcher's container")
}

/// Raw launcher lines that carry more than one tag of `tag` (a regex): lines relayed in
/// pieces, which hvdctl must show whole. Says how many, and the first.
fn glued(raw: &str, tag: &str) -> usize {
    let tag = Regex::new(tag).unwrap();
    let lines: Vec<&str> = raw
        .lines()
        .filter(|l| tag.find_iter(l).count() > 1)
        .collect();
    eprintln!(
        "{} raw launcher lines carry several tags, e.g. {:?}",
        lines.len(),
        lines.first()
    );
    lines.len()
}

/// `launcher rN | message` lines of a text log: (N, message); other lines are None.
fn ranked(out: &str) -> Vec<Option<(u32, &str)>> {
    let re = Regex::new(r"^launcher r(\d+) \| (.*)$").unwrap();
    out.lines()
        .map(|l| {
            re.captures(l)
                .map(|c| (c[1].parse().unwrap(), c.get(2).unwrap().as_str()))
        })
        .collect()
}

/// mpi-hello (Open MPI) on the local backend, 2 workers × 2 slots, every rank first writing
/// three lines in two pieces, every rank's first piece written before any rank's second
/// (MPI barriers: so Open MPI relays the pieces apart, glued to other ranks' pieces, however
/// the ranks' starts fall), then hello.py: every line is shown whole, with the rank of its tag.
#[test]
fn open_mpi_ranks_on_the_local_backend_are_tagged_filtered_and_in_json() {
    let Some(docker) = docker() else { return };
    let image = template_image(&docker, "mpi-hello", &debian_image());
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hello", "mpi-hello");
    let yaml = std::fs::read_to_string(dir.join("hvdctl.yaml")).unwrap();
    let pieces = r#"command:
  - python3
  - -c
  - |
    import os, runpy, sys, time
    from mpi4py import MPI
    r = os.environ["OMPI_COMM_WORLD_RANK"]
    for i in range(3):
        MPI.COMM_WORLD.Barrier()
        sys.stdout.write("piece %s.%d " % (r, i))
        sys.stdout.flush()
        MPI.COMM_WORLD.Barrier()
        time.sleep(0.2)
        sys.stdout.write("whole\n")
        sys.stdout.flush()
    runpy.run_path("/app/hello.py", run_name="__main__")
"#;
    let yaml = yaml.replace("command: [python3, /app/hello.py]\n", pieces);
    assert!(yaml.contains("OMPI_COMM_WORLD_RANK"), "{yaml}");
    std::fs::write(dir.join("hvdctl.yaml"), yaml).unwrap();
    let id = run_id("k");
    let job = format!("hello-{id}");
    let d = hv(
        &dir,
        None,
        &[
            "deploy",
            "--backend",
            "local",
            "--image",
            &image,
            "--run-id",
            &id,
            "--set",
            "slotsPerWorker=2",
        ],
    );
    assert_eq!(d.code, 0, "deploy: {}", d.stderr);
    let t = Instant::now();
    let all = hv(&dir, None, &["logs", "-f", &id]);
    eprintln!("logs -f took {:.1?}", t.elapsed());
    let one = hv(&dir, None, &["logs", &id, "--rank", "1"]);
    let json = hv(&dir, None, &["logs", &id, "-o", "json"]);
    let worker = hv(
        &dir,
        None,
        &["logs", &id, "--rank", "1", "--role", "worker"],
    );
    let raw = raw_log(&docker, &format!("{job}-launcher"));
    let u = hv(&dir, None, &["undeploy", &id]);
    assert_eq!(u.code, 0, "undeploy: {}", u.stderr);

    assert_eq!(all.code, 0, "logs -f: {}\n{}", all.stdout, all.stderr);
    // The pieces did travel apart: Open MPI glued them to other ranks' pieces.
    let tag = r"\[\d+,\d+\]<std(out|err)>:";
    let glued_raw = glued(&raw, tag);
    assert!(glued_raw > 0, "nothing was relayed in pieces:\n{raw}");
    assert!(!all.stdout.contains("<stdout>:"), "{}", all.stdout);
    let lines = ranked(&all.stdout);
    let mut by_rank: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (r, m) in lines.iter().flatten() {
        by_rank.entry(*r).or_default().push(m);
    }
    assert_eq!(
        by_rank.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{}",
        all.stdout
    );
    for (r, ms) in &by_rank {
        for i in 0..3 {
            let whole = format!("piece {r}.{i} whole");
            assert_eq!(
                ms.iter().filter(|m| **m == whole).count(),
                1,
                "rank {r}: {whole:?} once, whole:\n{}",
                all.stdout
            );
        }
        // Its hello line, tagged with its own rank (ranks 0, 1 on worker 0; 2, 3 on 1).
        let hello = format!("rank {r} of 4 on {job}-worker-{}", r / 2);
        assert!(ms.contains(&hello.as_str()), "{hello}:\n{}", all.stdout);
        // Nothing else of another rank under this one.
        assert!(
            ms.iter()
                .all(|m| !m.starts_with("piece ") || m.starts_with(&format!("piece {r}."))),
            "rank {r}: {ms:?}"
        );
    }
    assert!(
        by_rank[&0].contains(&"sum of ranks 0..3 = 6 (expected 6) OK"),
        "{}",
        all.stdout
    );
    // The launcher's own lines are not tagged.
    assert!(
        all.stdout
            .lines()
            .any(|l| l.starts_with("launcher | hvdctl: training command exited with code 0")),
        "{}",
        all.stdout
    );

    // --rank 1: rank 1's lines, nothing else (no worker, no other rank, no untagged line).
    assert_eq!(one.code, 0, "{}", one.stderr);
    let shown = ranked(&one.stdout);
    assert!(!shown.is_empty());
    assert!(
        shown.iter().all(|l| matches!(l, Some((1, _)))),
        "{}",
        one.stdout
    );
    let mine: Vec<&str> = shown.iter().flatten().map(|(_, m)| *m).collect();
    assert_eq!(mine, by_rank[&1], "{}", one.stdout);

    // -o json: each line's rank (null for the launcher's own lines and the workers').
    assert_eq!(json.code, 0, "{}", json.stderr);
    let objs: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let hello = Regex::new(r"^rank (\d+) of 4 on ").unwrap();
    let mut seen = 0;
    for o in &objs {
        let msg = o["message"].as_str().unwrap();
        if let Some(c) = hello.captures(msg) {
            assert_eq!(o["rank"], c[1].parse::<u32>().unwrap(), "{o}");
            assert_eq!(o["role"], "launcher", "{o}");
            seen += 1;
        }
        if msg.starts_with("hvdctl: ") || o["role"] == "worker" {
            assert_eq!(o["rank"], Value::Null, "{o}");
        }
        assert!(!msg.contains("<stdout>:"), "{o}");
    }
    assert_eq!(seen, 4, "{}", json.stdout);

    // No worker line has a rank: asking for both is bad input.
    assert_eq!(worker.code, 2, "{}", worker.stderr);
    assert!(worker.stderr.contains("--role worker"), "{}", worker.stderr);
}

/// MPICH (Hydra's `-prepend-rank`) through the native backend on the Docker kubelet: the
/// tags of a Kubernetes launcher pod read the same way.
#[test]
fn mpich_ranks_through_kubernetes_pods_are_tagged_and_filtered() {
    let Some(docker) = docker() else { return };
    let img = mpich_image(&docker);
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(false);
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hello", "mpi-hello");
    let id = run_id("p");
    let job = format!("hello-{id}");
    let logs = |args: &[&str]| {
        let mut c = hvdctl_in(&dir);
        c.env("KUBECONFIG", &kc).arg("logs").arg(&id).args(args);
        run(c)
    };
    let mut c = hvdctl_in(&dir);
    c.env("KUBECONFIG", &kc)
        .args(["deploy", "--backend", "native", "--run-id", &id])
        .args(["--image", &img, "--no-push"])
        .args(["--set", "mpi.implementation=MPICH", "--set", "workers=3"])
        .args(["--set", "command=[/app/hello]"]);
    let d = run(c);
    assert_eq!(d.code, 0, "{}", d.stderr);
    // As in the MPICH test of local.rs: the job's end is not awaited (MPICH 4.0.2 may spin
    // in MPI_Finalize after everything is printed).
    let t0 = Instant::now();
    let all = loop {
        let l = logs(&["--role", "launcher"]);
        // Every rank's line and the sum: each rank's output comes through its own Hydra
        // proxy, so rank 2's line may reach the launcher after rank 0's sum.
        let whole = l.stdout.contains("mpich sum")
            && (0..3).all(|r| l.stdout.contains(&format!("mpich rank {r} of 3")));
        if whole || t0.elapsed() > Duration::from_secs(90) {
            break l;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let one = logs(&["--rank", "2"]);
    let json = logs(&["--rank", "0", "-o", "json"]);
    let raw = raw_log(&docker, &kubelet_launcher(&docker, &fc, &job));
    let mut c = hvdctl_in(&dir);
    c.env("KUBECONFIG", &kc).args(["undeploy", &id]);
    let u = run(c);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());

    // Hydra did tag them, hvdctl stripped the tags.
    assert!(raw.contains("[0] mpich rank 0 of 3"), "{raw}");
    let lines = ranked(&all.stdout);
    for r in 0..3 {
        let want = format!("mpich rank {r} of 3 on {job}-worker-{r}");
        assert!(
            lines.contains(&Some((r, want.as_str()))),
            "{want}:\n{}",
            all.stdout
        );
    }
    assert!(
        lines.contains(&Some((0, "mpich sum 3 (expected 3)"))),
        "{}",
        all.stdout
    );
    assert!(
        all.stdout.lines().all(|l| !l.contains("] mpich")),
        "{}",
        all.stdout
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(
        one.stdout,
        format!("launcher r2 | mpich rank 2 of 3 on {job}-worker-2\n"),
        "{}",
        one.stderr
    );
    assert_eq!(json.code, 0, "{}", json.stderr);
    let objs: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        objs.iter()
            .any(|o| o["message"] == "mpich sum 3 (expected 3)" && o["rank"] == 0),
        "{}",
        json.stdout
    );
    assert!(
        objs.iter()
            .all(|o| o["rank"] == 0 && o["engine"] == "kubernetes"),
        "{}",
        json.stdout
    );
}

/// The horovod template with `mpi.launcher: horovodrun` through the mpijob backend: rank 0
/// prints each of its lines with one `print` (text, then newline: two writes with
/// `PYTHONUNBUFFERED=1`), which Open MPI under horovodrun may relay apart; every line of rank 0
/// is shown as one whole line.
#[test]
fn horovodrun_lines_of_rank_0_are_whole() {
    let Some(docker) = docker() else { return };
    let Some(base) = horovod_base(&docker) else {
        return;
    };
    let image = template_image(&docker, "horovod", &base);
    let _training = one_training_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hvd", "horovod");
    let Cluster {
        fc,
        dir: _tmp,
        kubeconfig: kc,
        ..
    } = Cluster::docker_kubelet(true);
    let id = run_id("r");
    let job = format!("hvd-{id}");
    let started = Instant::now();
    let mut c = hvdctl_in(&dir);
    c.env("KUBECONFIG", &kc)
        .args(["deploy", "--backend", "mpijob", "--run-id", &id])
        .args(["--image", &image, "--no-push", "--logs"])
        .args(["--set", "mpi.launcher=horovodrun", "--set", "workers=2"])
        .args(["--set", "parameters.epochs=2"])
        .args(["--set", "env.SYNTHETIC_SAMPLES=2000"])
        .args(["--set", "env.OMP_NUM_THREADS=1"]);
    let d = run(c);
    eprintln!("horovodrun, 2 ranks, 2 epochs: {:.1?}", started.elapsed());
    let logs = |args: &[&str]| {
        let mut c = hvdctl_in(&dir);
        c.env("KUBECONFIG", &kc).arg("logs").arg(&id).args(args);
        run(c)
    };
    let one = logs(&["--rank", "1"]);
    let json = logs(&["-o", "json"]);
    let raw = raw_log(&docker, &kubelet_launcher(&docker, &fc, &job));
    let mut c = hvdctl_in(&dir);
    c.env("KUBECONFIG", &kc).args(["undeploy", &id]);
    let u = run(c);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(kubelet_leftovers(&docker, &fc, &job), Vec::<String>::new());

    let out = &d.stdout;
    assert_eq!(d.code, 0, "{out}\n{}", d.stderr);
    glued(&raw, r"\[\d+,\d+\]<std(out|err)>:");
    assert!(raw.contains("[1,0]<stdout>:"), "horovodrun tags: {raw}");
    assert!(
        !out.contains("<stdout>:") && !out.contains("<stderr>:"),
        "{out}"
    );
    // Every line of rank 0 that train.py prints, each exactly as one whole line.
    let whole: [(&str, &str, usize); 6] = [
        (
            "rank ",
            r"^rank 0 of 2 \(local rank 0\) on \S+, device cpu$",
            1,
        ),
        ("data:", r"^data: synthetic MNIST-shaped \(.+\)$", 1),
        (
            "training:",
            r"^training: 2 epochs from epoch 1, \d+ samples, batch \d+ x 2 ranks, lr [0-9.e-]+$",
            1,
        ),
        (
            "epoch ",
            r"^epoch [12]/2: train_loss=\d+\.\d{4} test_loss=\d+\.\d{4} test_accuracy=\d\.\d{4} time=\d+\.\ds samples/s=\d+$",
            2,
        ),
        (
            "checkpoint:",
            r"^checkpoint: /tmp/checkpoints/checkpoint-000[12]\.pt$",
            2,
        ),
        ("done", r"^done$", 1),
    ];
    let lines = ranked(out);
    let rank0: Vec<&str> = lines
        .iter()
        .flatten()
        .filter(|(r, _)| *r == 0)
        .map(|(_, m)| *m)
        .collect();
    for (start, re, n) in whole {
        let re = Regex::new(re).unwrap();
        let these: Vec<&&str> = rank0.iter().filter(|m| m.starts_with(start)).collect();
        assert_eq!(these.len(), n, "{start}: {these:?}\n{out}");
        assert!(these.iter().all(|m| re.is_match(m)), "{these:?}\n{out}");
    }
    assert!(
        lines.contains(&Some((
            1,
            format!("rank 1 of 2 (local rank 0) on {job}-worker-1, device cpu").as_str()
        ))),
        "{out}"
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    let shown = ranked(&one.stdout);
    assert!(
        !shown.is_empty() && shown.iter().all(|l| matches!(l, Some((1, _)))),
        "{}",
        one.stdout
    );
    assert_eq!(json.code, 0, "{}", json.stderr);
    let done: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|o| o["message"] == "done")
        .collect();
    assert_eq!(done.len(), 1, "{}", json.stdout);
    assert_eq!(done[0]["rank"], 0);
}
