//! Working inside a run: `exec`, `cp` and `port-forward`, for both engines. What does not
//! depend on the engine lives here; the engines' halves are `crate::engine::kubernetes::remote`
//! (pods through the exec and port-forward WebSocket APIs) and `crate::engine::docker::remote`
//! (containers through Docker exec, the archive API and the run's network).
//!
//! * this file: which pod/container a command means (`--role`, `--index`, `-c`, or the
//!   `launcher:`/`worker-I:` of a `cp` path), chosen among the run's log targets
//!   ([`crate::logs::target`], the one model of "which pod is worker 1");
//! * [`path`]: `cp`'s arguments (`launcher:PATH`, `worker-I:PATH`, local paths) and where a
//!   copy lands (`docker cp`'s rules);
//! * [`archive`]: tar streams both ways — packed while sent, unpacked while received — with
//!   a byte count for the progress bar;
//! * [`stdio`]: the local end of `exec` (stdin, stdout, stderr, raw terminal, window size,
//!   exit codes);
//! * [`forward`]: the local listener of `port-forward`.

pub mod archive;
pub mod forward;
pub mod path;
pub mod stdio;
pub mod tensorboard;

use crate::error::{Error, Result};
use crate::kinds::{ROLE_LAUNCHER, ROLE_WORKER};
use crate::logs::target::Target;

/// The launcher or one worker of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Launcher,
    Worker(u32),
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Which::Launcher => f.write_str("launcher"),
            Which::Worker(i) => write!(f, "worker-{i}"),
        }
    }
}

/// Which pod/container of a run a command works in, and (Kubernetes) which of its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub which: Which,
    pub container: Option<String>,
}

/// Rank 0's pod/container: worker 0 (mpirun and horovodrun place rank 0 on the first host
/// of the hostfile, which is worker 0; the launcher runs no rank). Where rank 0 writes what
/// hvdctl reads back: TensorBoard's event files, Horovod's timeline.
pub fn rank0() -> Pick {
    Pick::pod(Which::Worker(0))
}

impl Pick {
    /// `which`'s pod, in its main container.
    pub fn pod(which: Which) -> Pick {
        Pick {
            which,
            container: None,
        }
    }

    /// From `--role` and `--index`: the launcher by default; `--index` alone means a worker;
    /// `--role worker` alone means worker 0.
    pub fn from_flags(
        role: Option<crate::options::TargetRole>,
        index: Option<u32>,
        container: Option<String>,
    ) -> Result<Pick> {
        use crate::options::TargetRole;
        let which = match (role, index) {
            (Some(TargetRole::Launcher), Some(i)) => {
                return Err(Error::input(format!(
                    "--index {i} names a worker, but --role is launcher (a run has one launcher)"
                ))
                .hint("drop --index, or use --role worker --index I"));
            }
            (None | Some(TargetRole::Launcher), None) => Which::Launcher,
            (None | Some(TargetRole::Worker), Some(i)) => Which::Worker(i),
            (Some(TargetRole::Worker), None) => Which::Worker(0),
        };
        Ok(Pick { which, container })
    }
}

/// The target `pick` names among `candidates` (every container of every pod of the run,
/// preferred pods first: a running launcher before a finished one). A worker index or a
/// container the run does not have is bad input (exit 2), naming what it has; a launcher
/// that does not exist (yet, or any more) is "not found" (exit 1).
pub fn choose(candidates: &[Target], pick: &Pick, job: &str) -> Result<Target> {
    let of_role = |role: &'static str| candidates.iter().filter(move |t| t.role == role);
    let pod_targets: Vec<&Target> = match pick.which {
        Which::Launcher => {
            let first = of_role(ROLE_LAUNCHER).next().ok_or_else(|| {
                Error::not_found(format!("{job} has no launcher (not created yet, or gone)"))
                    .hint("see `hvdctl status` for the run's pods")
            })?;
            of_role(ROLE_LAUNCHER)
                .filter(|t| t.pod == first.pod)
                .collect()
        }
        Which::Worker(i) => {
            let found: Vec<&Target> = of_role(ROLE_WORKER)
                .filter(|t| t.index == Some(i))
                .collect();
            if found.is_empty() {
                let mut have: Vec<u32> = of_role(ROLE_WORKER).filter_map(|t| t.index).collect();
                have.sort_unstable();
                have.dedup();
                let have = if have.is_empty() {
                    "it has no worker".to_string()
                } else {
                    let list: Vec<String> = have.iter().map(u32::to_string).collect();
                    format!("its workers are {}", list.join(", "))
                };
                return Err(Error::input(format!("{job} has no worker {i}: {have}")));
            }
            // A pod re-created under the same name: the first (preferred) one.
            let pod = found[0].pod.clone();
            found.into_iter().filter(|t| t.pod == pod).collect()
        }
    };
    match &pick.container {
        None => Ok(pod_targets[0].clone()),
        Some(c) => pod_targets
            .iter()
            .find(|t| &t.container == c)
            .map(|t| (*t).clone())
            .ok_or_else(|| {
                let names: Vec<&str> = pod_targets.iter().map(|t| t.container.as_str()).collect();
                Error::input(format!(
                    "the {} of {job} ({}) has no container {c:?}: it has {}",
                    pick.which,
                    pod_targets[0].pod,
                    names.join(", ")
                ))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::logs::target::Engine;
    use crate::options::TargetRole;

    fn t(pod: &str, container: &str, role: &str, index: Option<u32>) -> Target {
        Target {
            engine: Engine::Kubernetes,
            pod: pod.into(),
            uid: format!("uid-{pod}"),
            container: container.into(),
            role: role.into(),
            index,
            ranks: crate::logs::rank::TagForms::NONE,
            prefix: String::new(),
        }
    }

    fn run() -> Vec<Target> {
        vec![
            t("j-launcher-a", "launcher", "launcher", None),
            t("j-launcher-old", "launcher", "launcher", None),
            t("j-worker-0", "worker", "worker", Some(0)),
            t("j-worker-1", "worker", "worker", Some(1)),
            t("j-worker-1", "sidecar", "worker", Some(1)),
        ]
    }

    fn pick(role: Option<TargetRole>, index: Option<u32>, c: Option<&str>) -> Result<Pick> {
        Pick::from_flags(role, index, c.map(String::from))
    }

    #[test]
    fn flags_name_the_launcher_or_a_worker() {
        assert_eq!(pick(None, None, None).unwrap().which, Which::Launcher);
        assert_eq!(pick(None, Some(2), None).unwrap().which, Which::Worker(2));
        let w = pick(Some(TargetRole::Worker), None, None).unwrap();
        assert_eq!(w.which, Which::Worker(0));
        let e = pick(Some(TargetRole::Launcher), Some(1), None).unwrap_err();
        assert_eq!(e.kind, Kind::Input);
    }

    #[test]
    fn chooses_the_first_launcher_a_worker_and_a_container() {
        let c = run();
        let p = |w, c: Option<&str>| Pick {
            which: w,
            container: c.map(String::from),
        };
        assert_eq!(
            choose(&c, &p(Which::Launcher, None), "j").unwrap().pod,
            "j-launcher-a"
        );
        let w1 = choose(&c, &p(Which::Worker(1), None), "j").unwrap();
        assert_eq!(
            (w1.pod.as_str(), w1.container.as_str()),
            ("j-worker-1", "worker")
        );
        let side = choose(&c, &p(Which::Worker(1), Some("sidecar")), "j").unwrap();
        assert_eq!(side.container, "sidecar");
    }

    #[test]
    fn a_missing_index_or_container_is_bad_input_naming_what_exists() {
        let c = run();
        let e = choose(
            &c,
            &Pick {
                which: Which::Worker(7),
                container: None,
            },
            "j",
        )
        .unwrap_err();
        assert_eq!(e.kind, Kind::Input);
        assert!(
            e.message.contains("no worker 7: its workers are 0, 1"),
            "{e}"
        );
        let e = choose(
            &c,
            &Pick {
                which: Which::Worker(0),
                container: Some("nope".into()),
            },
            "j",
        )
        .unwrap_err();
        assert_eq!(e.kind, Kind::Input);
        assert!(e.message.contains("it has worker"), "{e}");
        let none: Vec<Target> = Vec::new();
        let e = choose(
            &none,
            &Pick {
                which: Which::Launcher,
                container: None,
            },
            "j",
        )
        .unwrap_err();
        assert_eq!(e.kind, Kind::NotFound);
    }
}
