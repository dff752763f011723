//! A plain successful run says nothing is wrong: `deploy --logs` of a template's app on every
//! backend — mpijob, native and trainjob on the fake cluster's Docker kubelet, local on
//! Docker — exits 0 with the output the app prints, and no line of hvdctl's stderr is a
//! warning; nor is one of `status`, `logs` of the finished run, or `undeploy`. The workers of
//! an mpijob run are deleted by the MPI Operator when its launcher finishes
//! (`cleanPodPolicy: Running`), after their one line was read: that is not a loss.
//!
//! Each assertion is on what the run guarantees once `deploy --logs` has returned (its exit
//! code, the lines its ranks print, the absence of warnings); nothing waits on time.

use super::*;
use crate::local::kubelet_leftovers;
use fake_cluster::KubeletMode;
use hvdctl::image::docker::DockerClient;

/// Where a run goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    Local,
    Native,
    MpiJob,
    TrainJob,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Native => "native",
            Backend::MpiJob => "mpijob",
            Backend::TrainJob => "trainjob",
        }
    }

    /// The fake cluster the backend needs (Docker kubelet), none for local runs.
    fn cluster(self) -> Option<Cluster> {
        (self != Backend::Local).then(|| {
            Cluster::start(Options {
                kubelet: KubeletMode::Docker,
                pause_image: Some(busybox_image()),
                mpi_operator: self == Backend::MpiJob,
                trainer: self == Backend::TrainJob,
                ..Default::default()
            })
        })
    }
}

/// The lines of `stderr` that warn (hvdctl's `warning: …`, whatever the case).
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("warning:"))
        .collect()
}

/// hvdctl in `dir` against `cluster` (none: no kubeconfig), to its end.
fn hv_run(dir: &Path, cluster: Option<&Cluster>, args: &[&str]) -> Out {
    hv(dir, cluster.map(|c| c.kubeconfig.as_path()), args)
}

/// Asserts that `what` ended with exit 0 and warned of nothing.
fn quiet(what: &str, o: &Out) {
    assert_eq!(
        o.code, 0,
        "{what}: exit {}\n{}\n{}",
        o.code, o.stdout, o.stderr
    );
    assert_eq!(
        warnings(&o.stderr),
        Vec::<&str>::new(),
        "{what} warned on a plain successful run; stderr:\n{}",
        o.stderr
    );
}

/// `deploy --logs` of `template`'s app (built on `base`) with `settings` on `backend`, then
/// `status`, `logs` and `undeploy` of the run: every one exits 0 without a warning, and
/// `deploy --logs` printed every line of `expected`. Returns what it printed.
fn plain_run(
    backend: Backend,
    template: &str,
    base: &str,
    settings: &[&str],
    expected: &[String],
) -> String {
    let Some(docker) = docker() else {
        return String::new();
    };
    let image = template_image(&docker, template, base);
    let cluster = backend.cluster();
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "plain", template);
    let id = run_id("p");
    let job = format!("plain-{id}");
    // The image is in the engine the pods run on (as a kind or minikube cluster has an image
    // loaded), which its pods are told to use: no registry is asked.
    let mut args = vec![
        "deploy",
        "--backend",
        backend.name(),
        "--run-id",
        &id,
        "--image",
        &image,
        "--no-push",
        "--logs",
        "--set",
        "imagePullPolicy=Never",
    ];
    for s in settings {
        args.extend(["--set", s]);
    }
    let started = Instant::now();
    let d = hv_run(&dir, cluster.as_ref(), &args);
    eprintln!(
        "{template} on {}: deploy --logs {:.1?}; stderr:\n{}",
        backend.name(),
        started.elapsed(),
        d.stderr
    );
    quiet("deploy --logs", &d);
    for line in expected {
        assert!(
            d.stdout.contains(line.as_str()),
            "`{line}` missing from deploy --logs:\n{}\n{}",
            d.stdout,
            d.stderr
        );
    }
    let s = hv_run(&dir, cluster.as_ref(), &["status", &id, "-o", "json"]);
    quiet("status", &s);
    let v: Value = serde_json::from_str(&s.stdout).unwrap_or_else(|e| panic!("{e}: {}", s.stdout));
    assert_eq!(v["state"], "Succeeded", "{v}");
    let l = hv_run(&dir, cluster.as_ref(), &["logs", &id]);
    quiet("logs of the finished run", &l);
    let u = hv_run(&dir, cluster.as_ref(), &["undeploy", &id]);
    quiet("undeploy", &u);
    if let Some(c) = &cluster {
        assert_eq!(
            kubelet_leftovers(&docker, &c.fc, &job),
            Vec::<String>::new()
        );
    } else {
        assert_eq!(crate::local::leftovers(&docker, &job, &id), (0, 0, 0));
    }
    d.stdout
}

/// mpi-hello, 2 workers × 2 slots: every rank's line and the launcher's sum.
fn mpi_hello(backend: Backend) {
    let mut expected: Vec<String> = (0..4).map(|r| format!("rank {r} of 4 on ")).collect();
    expected.push("sum of ranks 0..3 = 6 (expected 6) OK".into());
    plain_run(
        backend,
        "mpi-hello",
        &debian_image(),
        &["workers=2", "slotsPerWorker=2"],
        &expected,
    );
}

#[test]
fn mpi_hello_on_mpijob_warns_of_nothing() {
    mpi_hello(Backend::MpiJob);
}

#[test]
fn mpi_hello_on_native_warns_of_nothing() {
    mpi_hello(Backend::Native);
}

#[test]
fn mpi_hello_on_trainjob_warns_of_nothing() {
    mpi_hello(Backend::TrainJob);
}

#[test]
fn mpi_hello_on_local_warns_of_nothing() {
    mpi_hello(Backend::Local);
}

/// A Horovod template on its base (`base`), one short epoch with `settings` (one training at
/// a time): what it prints is checked for `expected`.
fn training(
    backend: Backend,
    template: &str,
    base: fn(&DockerClient) -> Option<String>,
    settings: &[&str],
    expected: &[&str],
) {
    let Some(docker) = docker() else { return };
    let Some(base) = base(&docker) else { return };
    let _training = one_training_at_a_time();
    let mut all = vec![
        "workers=2",
        "parameters.epochs=1",
        "env.SYNTHETIC_SAMPLES=2000",
        "env.OMP_NUM_THREADS=1",
    ];
    all.extend(settings);
    let expected: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
    let out = plain_run(backend, template, &base, &all, &expected);
    eprintln!("{out}");
}

/// The horovod template on the Horovod base, 2 workers × 1 slot, one short epoch: both ranks
/// start and rank 0 reports the epoch.
fn horovod(backend: Backend) {
    training(
        backend,
        "horovod",
        horovod_base,
        &["slotsPerWorker=1"],
        &["rank 0 of 2 ", "rank 1 of 2 ", "epoch 1/1: "],
    );
}

#[test]
fn horovod_on_mpijob_warns_of_nothing() {
    horovod(Backend::MpiJob);
}

#[test]
fn horovod_on_native_warns_of_nothing() {
    horovod(Backend::Native);
}

#[test]
fn horovod_on_trainjob_warns_of_nothing() {
    horovod(Backend::TrainJob);
}

#[test]
fn horovod_on_local_warns_of_nothing() {
    horovod(Backend::Local);
}

/// horovod-tensorflow on its TensorFlow base, 2 workers × 1 slot, one short epoch.
fn horovod_tensorflow(backend: Backend) {
    training(
        backend,
        "horovod-tensorflow",
        horovod_tensorflow_base,
        &["slotsPerWorker=1"],
        &["rank 0 of 2 ", "rank 1 of 2 ", "epoch 1/1: "],
    );
}

#[test]
fn horovod_tensorflow_on_mpijob_warns_of_nothing() {
    horovod_tensorflow(Backend::MpiJob);
}

#[test]
fn horovod_tensorflow_on_native_warns_of_nothing() {
    horovod_tensorflow(Backend::Native);
}

#[test]
fn horovod_tensorflow_on_trainjob_warns_of_nothing() {
    horovod_tensorflow(Backend::TrainJob);
}

/// horovod-elastic, 2 workers (min 2, max 3) × 1 slot, one short epoch, no pause: the
/// elastic driver's run ends "done". (The trainjob backend refuses elastic apps.)
fn horovod_elastic(backend: Backend) {
    training(
        backend,
        "horovod-elastic",
        horovod_base,
        &[
            "elastic.minWorkers=2",
            "elastic.maxWorkers=3",
            "parameters.batches-per-commit=5",
        ],
        &["epoch 1/1: ranks=2"],
    );
}

#[test]
fn horovod_elastic_on_mpijob_warns_of_nothing() {
    horovod_elastic(Backend::MpiJob);
}

#[test]
fn horovod_elastic_on_native_warns_of_nothing() {
    horovod_elastic(Backend::Native);
}
