//! The `horovod` template trains for real on the Horovod base built here
//! (`scripts/dev-services.sh horovod`): on the local backend and through Kubernetes manifests
//! executed by the fake cluster's Docker kubelet (`native`, `mpijob`, `trainjob`), with both launchers
//! (`mpirun`, `horovodrun`) and both shapes (2 workers × 1 slot, 1 worker × 2 slots). Every
//! rank starts and joins the allreduce, rank 0's loss falls, it checkpoints, and a second run
//! on the same checkpoint directory (a hostPath volume) starts at the next epoch.
//!
//! Each training holds `one_training_at_a_time`: a few tens of seconds of two busy ranks.

use crate::local::{kubelet_leftovers, leftovers};
use crate::util::*;
use hvdctl::image::docker::DockerClient;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a training runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum On {
    Local,
    Native,
    MpiJob,
    TrainJob,
}

impl On {
    fn backend(self) -> &'static str {
        match self {
            On::Local => "local",
            On::Native => "native",
            On::MpiJob => "mpijob",
            On::TrainJob => "trainjob",
        }
    }

    /// The host name of worker `i` of job `job`: a Trainer node is JobSet's
    /// `<job>-node-0-<i>`.
    fn worker_host(self, job: &str, i: u32) -> String {
        match self {
            On::TrainJob => format!("{job}-node-0-{i}"),
            _ => format!("{job}-worker-{i}"),
        }
    }
}

/// One training: where, how launched, its shape, its epochs, its checkpoint directory on
/// the host (mounted at /checkpoints) or none (the image's /tmp/checkpoints).
struct Training<'a> {
    on: On,
    launcher: &'a str,
    workers: u32,
    slots: u32,
    epochs: u32,
    checkpoints: Option<&'a Path>,
}

/// What a finished training printed and where it ran.
struct Trained {
    id: String,
    job: String,
    out: String,
}

/// A Docker daemon, the Horovod base and the `horovod` app's image built on it (or `None`:
/// the test fails when it cannot be made).
fn horovod_app(docker: &DockerClient) -> Option<String> {
    let base = horovod_base(docker)?;
    Some(template_image(docker, "horovod", &base))
}

/// `hvdctl deploy --logs` of the `horovod` app in `dir` with the training's settings, to the
/// job's end; asserts exit 0 and gives what it printed.
fn train(dir: &Path, image: &str, kubeconfig: Option<&Path>, t: &Training) -> Trained {
    let id = run_id("t");
    let job = format!("hvd-{id}");
    let mut c = hvdctl_in(dir);
    if let Some(kc) = kubeconfig {
        c.env("KUBECONFIG", kc);
    }
    c.args(["deploy", "--backend", t.on.backend(), "--run-id", &id])
        .args(["--image", image, "--no-push", "--logs"])
        .arg("--set")
        .arg(format!("mpi.launcher={}", t.launcher))
        .arg("--set")
        .arg(format!("workers={}", t.workers))
        .arg("--set")
        .arg(format!("slotsPerWorker={}", t.slots))
        .arg("--set")
        .arg(format!("parameters.epochs={}", t.epochs))
        // Small and quick: 2000 samples, one thread per rank (two ranks share two cores).
        .args(["--set", "env.SYNTHETIC_SAMPLES=2000"])
        .args(["--set", "env.OMP_NUM_THREADS=1"]);
    if let Some(host_dir) = t.checkpoints {
        c.args(["--set", "parameters.checkpoint-dir=/checkpoints"])
            .args(["--set", "volumes[0].name=checkpoints"])
            .args(["--set", "volumes[0].mountPath=/checkpoints"])
            .arg("--set")
            .arg(format!("volumes[0].hostPath.path={}", host_dir.display()))
            .args(["--set", "volumes[0].hostPath.type=DirectoryOrCreate"]);
    }
    let started = Instant::now();
    let o = c.timeout(Duration::from_secs(600)).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    eprintln!(
        "horovod {:?} {} {}x{} {} epochs: {:.1?}",
        t.on,
        t.launcher,
        t.workers,
        t.slots,
        t.epochs,
        started.elapsed()
    );
    assert_eq!(o.status.code(), Some(0), "deploy --logs:\n{out}\n{err}");
    assert!(!out.contains("PRIVATE KEY") && !err.contains("PRIVATE KEY"));
    Trained { id, job, out }
}

/// Rank 0's train loss of `epoch` of `epochs`.
fn loss(out: &str, epoch: u32, epochs: u32) -> f64 {
    let line = out
        .lines()
        .find(|l| l.contains(&format!("epoch {epoch}/{epochs}: ")))
        .unwrap_or_else(|| panic!("no epoch {epoch}/{epochs} line:\n{out}"));
    line.split("train_loss=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no train_loss in {line:?}"))
}

/// Every rank reported on its worker, the ranks trained together from epoch `first`, the loss
/// fell, rank 0 checkpointed every epoch in `checkpoint_dir` and said done.
fn check(t: &Training, r: &Trained, first: u32, checkpoint_dir: &str) {
    let (n, out) = (t.workers * t.slots, &r.out);
    for rank in 0..n {
        // Open MPI and horovodrun fill a worker's slots before the next (`-map-by slot`).
        let (worker, local) = (rank / t.slots, rank % t.slots);
        let line = format!(
            "rank {rank} of {n} (local rank {local}) on {}",
            t.on.worker_host(&r.job, worker)
        );
        assert!(out.contains(&line), "no {line:?}:\n{out}");
    }
    assert!(
        out.contains(&format!(
            "training: {} epochs from epoch {first}, 2000 samples, batch 64 x {n} ranks",
            t.epochs
        )),
        "{out}"
    );
    assert!(out.contains("first step: epoch "), "{out}");
    for epoch in first..=t.epochs {
        loss(out, epoch, t.epochs);
        let saved = format!("checkpoint: {checkpoint_dir}/checkpoint-{epoch:04}.pt");
        assert!(out.contains(&saved), "no {saved:?}:\n{out}");
    }
    for epoch in 1..first {
        assert!(
            !out.contains(&format!("epoch {epoch}/{}: ", t.epochs)),
            "epoch {epoch} was trained again:\n{out}"
        );
    }
    if t.epochs > first {
        assert!(
            loss(out, t.epochs, t.epochs) < loss(out, first, t.epochs),
            "the loss does not fall:\n{out}"
        );
    }
    assert!(out.lines().any(|l| l == "launcher r0 | done"), "{out}");
}

/// The `horovod` app (hvdctl.yaml as `init` writes it), in a temporary directory.
pub(crate) fn horovod_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hvd", "horovod");
    (tmp, dir)
}

/// A host directory for checkpoints that any container user can write.
fn checkpoint_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `undeploy` of a finished local run leaves no container, network or private directory.
fn undeploy_local(docker: &DockerClient, dir: &Path, r: &Trained) {
    let u = run({
        let mut c = hvdctl_in(dir);
        c.args(["undeploy", &r.id]);
        c
    });
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(leftovers(docker, &r.job, &r.id), (0, 0, 0));
}

/// Local: train 2 epochs, then deploy again with 3 epochs on the same checkpoint directory:
/// the second run resumes from epoch 2's checkpoint and trains epoch 3 only. Undeploy
/// leaves nothing.
fn local_trains_and_resumes(launcher: &str, workers: u32, slots: u32) {
    let Some(docker) = docker() else { return };
    let Some(image) = horovod_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let (_tmp, dir) = horovod_dir();
    let ckpt = checkpoint_dir();
    let mut t = Training {
        on: On::Local,
        launcher,
        workers,
        slots,
        epochs: 2,
        checkpoints: Some(ckpt.path()),
    };
    let first = train(&dir, &image, None, &t);
    check(&t, &first, 1, "/checkpoints");
    assert_eq!(
        checkpoint_files(ckpt.path()),
        ["checkpoint-0001.pt", "checkpoint-0002.pt"]
    );

    t.epochs = 3;
    let second = train(&dir, &image, None, &t);
    assert!(
        second
            .out
            .contains("resuming from /checkpoints/checkpoint-0002.pt (epoch 2 done)"),
        "{}",
        second.out
    );
    check(&t, &second, 3, "/checkpoints");
    assert_eq!(
        checkpoint_files(ckpt.path()),
        [
            "checkpoint-0001.pt",
            "checkpoint-0002.pt",
            "checkpoint-0003.pt"
        ]
    );

    // `logs` after the end shows the same training; `status` agrees it succeeded.
    let l = run({
        let mut c = hvdctl_in(&dir);
        c.args(["logs", &second.id, "--role", "launcher"]);
        c
    });
    assert_eq!(l.code, 0, "{}", l.stderr);
    assert!(l.stdout.contains("epoch 3/3: "), "{}", l.stdout);
    let s = run({
        let mut c = hvdctl_in(&dir);
        c.args(["status", &second.id, "-o", "json"]);
        c
    });
    let v: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["state"], "Succeeded", "{v}");

    for r in [&first, &second] {
        undeploy_local(&docker, &dir, r);
    }
}

#[test]
fn local_two_workers_by_one_slot_trains_with_mpirun_and_resumes() {
    local_trains_and_resumes("mpirun", 2, 1);
}

#[test]
fn local_one_worker_by_two_slots_trains_with_horovodrun_and_resumes() {
    local_trains_and_resumes("horovodrun", 1, 2);
}

/// The other two corners of launcher × shape, once each (no resume).
#[test]
fn local_trains_with_horovodrun_across_workers_and_mpirun_within_one() {
    let Some(docker) = docker() else { return };
    let Some(image) = horovod_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let (_tmp, dir) = horovod_dir();
    for (launcher, workers, slots) in [("horovodrun", 2, 1), ("mpirun", 1, 2)] {
        let t = Training {
            on: On::Local,
            launcher,
            workers,
            slots,
            epochs: 2,
            checkpoints: None,
        };
        let r = train(&dir, &image, None, &t);
        check(&t, &r, 1, "/tmp/checkpoints");
        undeploy_local(&docker, &dir, &r);
    }
}

/// Through Kubernetes manifests on the Docker kubelet: both launchers on `on`'s backend,
/// 2 workers × 1 slot; the `horovodrun` run keeps its checkpoints on a hostPath volume and
/// a second run resumes from them. `status` says Succeeded; undeploy leaves no container.
fn kubernetes_trains(on: On) {
    let Some(docker) = docker() else { return };
    let Some(image) = horovod_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let cluster = Cluster::start(fake_cluster::Options {
        kubelet: fake_cluster::KubeletMode::Docker,
        pause_image: Some(busybox_image()),
        mpi_operator: on == On::MpiJob,
        trainer: on == On::TrainJob,
        ..Default::default()
    });
    let kc = cluster.kubeconfig.clone();
    let (_tmp, dir) = horovod_dir();
    let ckpt = checkpoint_dir();
    let finish = |r: &Trained| {
        let s = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args(["status", &r.id, "-o", "json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&s.stdout).unwrap();
        assert_eq!(v["state"], "Succeeded", "{v}");
        let u = hvdctl_in(&dir)
            .env("KUBECONFIG", &kc)
            .args(["undeploy", &r.id])
            .output()
            .unwrap();
        assert_eq!(
            u.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&u.stderr)
        );
        assert_eq!(
            kubelet_leftovers(&docker, &cluster.fc, &r.job),
            Vec::<String>::new()
        );
    };

    let mut t = Training {
        on,
        launcher: "mpirun",
        workers: 2,
        slots: 1,
        epochs: 2,
        checkpoints: None,
    };
    let r = train(&dir, &image, Some(&kc), &t);
    check(&t, &r, 1, "/tmp/checkpoints");
    finish(&r);

    t.launcher = "horovodrun";
    t.checkpoints = Some(ckpt.path());
    let r = train(&dir, &image, Some(&kc), &t);
    check(&t, &r, 1, "/checkpoints");
    finish(&r);
    t.epochs = 3;
    let r = train(&dir, &image, Some(&kc), &t);
    assert!(
        r.out
            .contains("resuming from /checkpoints/checkpoint-0002.pt (epoch 2 done)"),
        "{}",
        r.out
    );
    check(&t, &r, 3, "/checkpoints");
    finish(&r);
    assert_eq!(
        checkpoint_files(ckpt.path()),
        [
            "checkpoint-0001.pt",
            "checkpoint-0002.pt",
            "checkpoint-0003.pt"
        ]
    );
}

#[test]
fn native_backend_trains_with_both_launchers_and_resumes() {
    kubernetes_trains(On::Native);
}

#[test]
fn mpijob_backend_trains_with_both_launchers_and_resumes() {
    kubernetes_trains(On::MpiJob);
}

/// Kubeflow Trainer v2 (`fake-cluster --trainer`): the TrainJob's launcher and JobSet's
/// nodes train with both launchers.
#[test]
fn trainjob_backend_trains_with_both_launchers_and_resumes() {
    kubernetes_trains(On::TrainJob);
}

/// `horovod-tensorflow` on the Debian TensorFlow base (tensorflow-cpu 2.12 + Horovod built
/// here): 2 workers × 1 slot on the local backend with mpirun, 2 epochs, Keras checkpoints on
/// a hostPath volume, then a second run with 3 epochs resumes from them.
#[test]
fn horovod_tensorflow_trains_on_the_local_backend_and_resumes() {
    let Some(docker) = docker() else { return };
    let Some(base) = horovod_tensorflow_base(&docker) else {
        return;
    };
    let image = template_image(&docker, "horovod-tensorflow", &base);
    let _training = one_training_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hvd", "horovod-tensorflow");
    let ckpt = checkpoint_dir();
    let mut t = Training {
        on: On::Local,
        launcher: "mpirun",
        workers: 2,
        slots: 1,
        epochs: 2,
        checkpoints: Some(ckpt.path()),
    };
    // Keras' loss of `epoch` (" loss=", not "val_loss=").
    let keras_loss = |out: &str, epoch: u32, epochs: u32| -> f64 {
        let line = out
            .lines()
            .find(|l| l.contains(&format!("epoch {epoch}/{epochs}: ")))
            .unwrap_or_else(|| panic!("no epoch {epoch}/{epochs}:\n{out}"));
        line.split(" loss=")
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no loss in {line:?}"))
    };
    let first = train(&dir, &image, None, &t);
    for rank in 0..2 {
        let line = format!(
            "rank {rank} of 2 (local rank 0) on {}-worker-{rank}",
            first.job
        );
        assert!(first.out.contains(&line), "no {line:?}:\n{}", first.out);
    }
    assert!(
        first
            .out
            .contains("training: 2 epochs from epoch 1, 2000 samples, batch 64 x 2 ranks"),
        "{}",
        first.out
    );
    assert!(
        keras_loss(&first.out, 2, 2) < keras_loss(&first.out, 1, 2),
        "the loss does not fall:\n{}",
        first.out
    );
    assert!(
        first.out.lines().any(|l| l == "launcher r0 | done"),
        "{}",
        first.out
    );
    assert_eq!(
        checkpoint_files(ckpt.path()),
        ["checkpoint-0001.weights.h5", "checkpoint-0002.weights.h5"]
    );

    t.epochs = 3;
    let second = train(&dir, &image, None, &t);
    assert!(
        second
            .out
            .contains("resuming from /checkpoints/checkpoint-0002.weights.h5"),
        "{}",
        second.out
    );
    assert!(
        second.out.contains("training: 3 epochs from epoch 3,")
            && second.out.contains("epoch 3/3: "),
        "{}",
        second.out
    );
    assert!(!second.out.contains("epoch 1/3: "), "{}", second.out);
    for r in [&first, &second] {
        undeploy_local(&docker, &dir, r);
    }
}

/// The test's own training, in place of the template's: `STEPS` steps of two small
/// allreduces, rank `SLOW_RANK` sleeping 50 ms before each (-1: nobody).
const SLOWED: &str = r#"command: [python3, -c, "import os, time, torch\nimport horovod.torch as hvd\nhvd.init()\nslow = int(os.environ['SLOW_RANK'])\nfor step in range(int(os.environ['STEPS'])):\n    if hvd.rank() == slow:\n        time.sleep(0.05)\n    hvd.allreduce(torch.ones(4), name='grad_w')\n    hvd.allreduce(torch.ones(2), name='grad_b')\nprint('rank', hvd.rank(), 'of', hvd.size(), 'done', flush=True)\n"]"#;

/// `hvdctl` in `dir`, against `kc`'s cluster when given.
fn hvdctl_at(dir: &Path, kc: Option<&Path>) -> assert_cmd::Command {
    let mut c = hvdctl_in(dir);
    if let Some(kc) = kc {
        c.env("KUBECONFIG", kc);
    }
    c
}

/// The `horovod` app with [`SLOWED`] as its command.
fn slowed_app() -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir) = horovod_dir();
    let file = dir.join("hvdctl.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let yaml = yaml.replace("command: [python3, /app/train.py]", SLOWED);
    assert!(yaml.contains("SLOW_RANK"));
    std::fs::write(&file, yaml).unwrap();
    (tmp, dir)
}

/// `hvdctl deploy --timeline` of [`SLOWED`] on `on` (3 workers, `steps` steps, rank `slow`
/// slowed), then `until` (`--logs` or `--wait`); asserts exit 0 and gives the run id and
/// what it printed.
fn deploy_slowed(
    dir: &Path,
    image: &str,
    kc: Option<&Path>,
    (on, launcher): (On, &str),
    (steps, slow): (u32, i32),
    until: &str,
) -> (String, String) {
    let id = run_id("l");
    let d = run({
        let mut c = hvdctl_at(dir, kc);
        c.args(["deploy", "--backend", on.backend(), "--run-id", &id])
            .args(["--timeline", "--image", image, "--no-push", until])
            .args(["--set", "workers=3", "--set", "env.OMP_NUM_THREADS=1"])
            .arg("--set")
            .arg(format!("mpi.launcher={launcher}"))
            // The MPI Operator deletes running workers when the launcher ends: kept here, so
            // that worker 0's timeline is there to read after the run.
            .args(["--set", "runPolicy.cleanPodPolicy=None"])
            .arg("--set")
            .arg(format!("env.STEPS={steps}"))
            .arg("--set")
            .arg(format!("env.SLOW_RANK={slow}"));
        c
    });
    assert_eq!(d.code, 0, "{}\n{}", d.stdout, d.stderr);
    (id, d.stdout)
}

/// `hvdctl timeline RUN -o json --trace TRACE`: its exit code and report (when it gave one).
fn timeline_json(dir: &Path, kc: Option<&Path>, id: &str, trace: &Path) -> (Out, Option<Value>) {
    let t = run({
        let mut c = hvdctl_at(dir, kc);
        c.args(["timeline", id, "-o", "json", "--trace"]).arg(trace);
        c
    });
    let report = (t.code == 0).then(|| serde_json::from_str(&t.stdout).unwrap());
    (t, report)
}

fn undeploy_at(dir: &Path, kc: Option<&Path>, id: &str) {
    let u = run({
        let mut c = hvdctl_at(dir, kc);
        c.args(["undeploy", id]);
        c
    });
    assert_eq!(u.code, 0, "{}", u.stderr);
}

/// One run of [`SLOWED`] (40 steps) to its end, then `hvdctl timeline`: its JSON report, after
/// checking the trace is the JSON array Perfetto opens and the text report names the same
/// straggler.
fn timeline_of(
    dir: &Path,
    image: &str,
    kc: Option<&Path>,
    on: On,
    launcher: &str,
    slow: i32,
) -> Value {
    let (id, out) = deploy_slowed(dir, image, kc, (on, launcher), (40, slow), "--logs");
    assert!(out.contains("rank 2 of 3 done"), "{out}");
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.json");
    let (t, report) = timeline_json(dir, kc, &id, &trace);
    let report = report.unwrap_or_else(|| panic!("{}", t.stderr));
    eprintln!("timeline {on:?} {launcher} SLOW_RANK={slow}: {report}");
    let events: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(
        events.as_array().is_some_and(|e| e.len() > 80 * 5),
        "not a Chrome trace: {events}"
    );
    let text = run({
        let mut c = hvdctl_at(dir, kc);
        c.args(["timeline", &id, "--trace"]).arg(&trace);
        c
    });
    assert_eq!(
        text.stdout
            .contains("Straggler: rank 2 was the last one ready"),
        report["straggler"] == 2,
        "{}",
        text.stdout
    );
    undeploy_at(dir, kc, &id);
    report
}

/// What every timeline of [`SLOWED`]'s 40 steps says: three ranks, two tensors negotiated 40
/// times each with every rank's ready time (`timeline:` turns Horovod's cache off), and the
/// straggler `straggler`, with rank 2 holding the others about its 50 ms when slowed.
fn check_timeline(report: &Value, straggler: Option<u64>) {
    assert_eq!(report["partial"], false, "{report}");
    assert_eq!(report["ranksSeen"], 3, "{report}");
    assert_eq!(report["negotiations"], 80, "{report}");
    assert_eq!(report["withRanks"], 80, "{report}");
    assert_eq!(report["straggler"].as_u64(), straggler, "{report}");
    if straggler.is_some() {
        assert_eq!(report["ranks"][0]["rank"], 2, "{report}");
        let held = report["ranks"][0]["heldMedianMs"].as_f64().unwrap();
        assert!((40.0..200.0).contains(&held), "{report}");
    }
}

/// Horovod's timeline, for real: rank 2 slowed on purpose is named, an even run names no
/// one — on the local backend (mpirun), and on an MPIJob through the Docker kubelet
/// (horovodrun), read after the run ended.
#[test]
fn the_timeline_names_the_rank_slowed_on_purpose_and_no_one_in_an_even_run() {
    let Some(docker) = docker() else { return };
    let Some(image) = horovod_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let (_tmp, dir) = slowed_app();
    check_timeline(
        &timeline_of(&dir, &image, None, On::Local, "mpirun", 2),
        Some(2),
    );
    check_timeline(
        &timeline_of(&dir, &image, None, On::Local, "mpirun", -1),
        None,
    );

    let cluster = Cluster::start(fake_cluster::Options {
        kubelet: fake_cluster::KubeletMode::Docker,
        pause_image: Some(busybox_image()),
        mpi_operator: true,
        ..Default::default()
    });
    let kc = Some(cluster.kubeconfig.as_path());
    check_timeline(
        &timeline_of(&dir, &image, kc, On::MpiJob, "horovodrun", 2),
        Some(2),
    );
}

/// A Trainer node pod ends with the run (JobSet's Jobs complete), so on `trainjob` the
/// timeline is read while the run runs: a long run (300 steps, rank 2 slowed), `hvdctl
/// timeline` asked until its report has 20 late negotiations — each answer the file as far as
/// Horovod has written it (it keeps it a closed JSON array as it goes) — then the run is
/// waited for and removed.
fn timeline_while_running(dir: &Path, image: &str, kc: &Path, on: On, launcher: &str) -> Value {
    let kc = Some(kc);
    let (id, _) = deploy_slowed(dir, image, kc, (on, launcher), (300, 2), "--wait");
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.json");
    let started = Instant::now();
    let report = loop {
        let (t, report) = timeline_json(dir, kc, &id, &trace);
        if let Some(r) = report.filter(|r| r["late"].as_u64() >= Some(20)) {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "no timeline with 20 late negotiations within 180 s; last answer: {}\n{}",
            t.stdout,
            t.stderr
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("timeline {on:?} {launcher} while running: {report}");
    let s = run({
        let mut c = hvdctl_at(dir, kc);
        c.args(["status", &id, "--wait"]);
        c
    });
    assert_eq!(s.code, 0, "{}\n{}", s.stdout, s.stderr);
    undeploy_at(dir, kc, &id);
    report
}

/// The timeline through the other two Kubernetes backends, rank 2 slowed: native (mpirun)
/// read after the run ended; trainjob (horovodrun) read while it runs.
#[test]
fn the_timeline_names_the_slowed_rank_on_native_and_trainjob() {
    let Some(docker) = docker() else { return };
    let Some(image) = horovod_app(&docker) else {
        return;
    };
    let _training = one_training_at_a_time();
    let (_tmp, dir) = slowed_app();
    let cluster = Cluster::start(fake_cluster::Options {
        kubelet: fake_cluster::KubeletMode::Docker,
        pause_image: Some(busybox_image()),
        trainer: true,
        ..Default::default()
    });
    let kc = cluster.kubeconfig.as_path();
    check_timeline(
        &timeline_of(&dir, &image, Some(kc), On::Native, "mpirun", 2),
        Some(2),
    );
    let r = timeline_while_running(&dir, &image, kc, On::TrainJob, "horovodrun");
    assert_eq!(r["straggler"], 2, "{r}");
    assert_eq!(r["ranks"][0]["rank"], 2, "{r}");
}
