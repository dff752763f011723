//! hvdctl's integration tests, one test binary (every extra binary is another link step of
//! a large crate): each module is an area, `util` is what they share. The whole-process
//! memory tests are binaries of their own (`tests/image_memory*.rs`).
//!
//! `cargo test --test it cluster::` runs one area.

mod util;

// Bad hvdctl.yaml, flags and init requests: exit 2, a clear error, nothing written.
mod bad_inputs;
// hvdctl doctor and the checks deploy runs before creating anything.
mod doctor;
// deploy, status, events, undeploy against the fake cluster, faults, interruptions.
mod cluster;
// hvdctl dev: the edit loop in local and Docker-kubelet runs (real containers).
mod dev;
// Image building and pushing: Docker config auth, build contexts, .dockerignore, tags.
mod image;
// Elastic Horovod: lost workers, below minWorkers, `scale` (real containers).
mod elastic;
// init, templates, completions, version.
mod init;
// exec, cp, port-forward inside local and Docker-kubelet runs: real containers.
mod inner;
// The local backend and the fake cluster's Docker kubelet: real containers.
mod local;
// hvdctl logs: lossless under faults, bad situations.
mod logs;
mod ranks;
// Why a run failed: status, logs -f, deploy --wait/--logs on every backend.
mod reasons;
// -o json|yaml on every data command, status -o wide, help and version alike everywhere.
mod outputs;
// The pods' options (Secret/ConfigMap/emptyDir volumes, shm, ssh port, pull policy,
// storage claims, non-root) and stuck pods' reasons, in real containers.
mod podopts;
// Queued runs: Kueue (quota, position, Inadmissible) and Volcano (gangs) on every backend.
mod queues;
// A backend registered by the tests alone: its custom kind, fake operator, RBAC, scale.
mod registered;
// Rendered manifests of every template × backend (insta snapshots).
mod render;
// hvdctl runs: provenance and phase times of local, mpijob and native runs (real containers).
mod runs;
// hvdctl tensorboard: a real TensorBoard in rank 0's container of a training local run.
mod tensorboard;
// The trainjob backend (Kubeflow Trainer v2) on fake-cluster --trainer, both kubelets.
mod trainjob;
// The horovod template training for real: local and docker kubelet, both launchers.
mod training;
// Values are data: any string given to --set or hvdctl.yaml stays one value.
mod values_as_data;
