//! A Kubernetes backend defined in this test alone — its own custom kind, served and
//! reconciled by its own fake-cluster operator — deploys, reports, scales, is diagnosed by
//! `doctor` with its own RBAC list, and undeploys. Adding it took what `docs/architecture.md`'s
//! recipe lists: the backend's module (here [`rankjob`]), its template, its fake controller
//! ([`operator`]) and one registration; nothing in hvdctl knows its name.
//!
//! The kind is made to differ from the built-in backends' where hvdctl used to guess: its
//! group is neither `kubeflow.org` nor a built-in one, its pods are named `<job>-boss` and
//! `<job>-r<i>` (no `-worker-`), and a worker's index is in a label of its own.

use crate::util::*;
use fake_cluster::Options;
use futures::StreamExt;
use std::sync::Arc;

/// The label the operator puts a worker's index in.
const RANK_LABEL: &str = "test.hvdctl.io/rank";

/// The backend, as a backend module would be: its kind, its trait implementation.
mod rankjob {
    use super::RANK_LABEL;
    use hvdctl::backend::{KubeBackend, Launch, Requirement, Scaling, conditions, is_true};
    use hvdctl::kinds::{ApiKind, JobCondition, Kind, KindDef};
    use hvdctl::types::{Identity, JobState, LABEL_ROLE, ROLE_LAUNCHER, ROLE_WORKER};
    use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Serialize};

    /// `test.hvdctl.io/v1` RankJob: one launcher and `workers` workers.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct RankJob {
        pub metadata: ObjectMeta,
        pub spec: RankJobSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<serde_json::Value>,
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct RankJobSpec {
        pub workers: u32,
        pub launcher: PodTemplateSpec,
        pub worker: PodTemplateSpec,
    }

    impl k8s_openapi::Resource for RankJob {
        const API_VERSION: &'static str = "test.hvdctl.io/v1";
        const GROUP: &'static str = "test.hvdctl.io";
        const KIND: &'static str = "RankJob";
        const VERSION: &'static str = "v1";
        const URL_PATH_SEGMENT: &'static str = "rankjobs";
        type Scope = k8s_openapi::NamespaceResourceScope;
    }

    impl k8s_openapi::Metadata for RankJob {
        type Ty = ObjectMeta;
        fn metadata(&self) -> &ObjectMeta {
            &self.metadata
        }
        fn metadata_mut(&mut self) -> &mut ObjectMeta {
            &mut self.metadata
        }
    }

    impl Kind for RankJob {
        const ORDER: u8 = 6;
        fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
            vec![
                (
                    ROLE_LAUNCHER,
                    self.spec
                        .launcher
                        .metadata
                        .get_or_insert_with(Default::default),
                ),
                (
                    ROLE_WORKER,
                    self.spec
                        .worker
                        .metadata
                        .get_or_insert_with(Default::default),
                ),
            ]
        }
    }

    pub struct RankBackend;

    /// Its template (a real backend's is `templates/k8s/<name>.yaml.hbs`).
    const TEMPLATE: &str = "apiVersion: test.hvdctl.io/v1
kind: RankJob
metadata:
  name: {{job.name}}
spec:
  workers: {{json workers}}
  launcher:
    spec:
      restartPolicy: Never
      containers:
      - name: launcher
        image: {{image}}
        command: {{json launcher.command}}
        env: {{json env}}
  worker:
    spec:
      containers:
      - name: worker
        image: {{image}}
        command: {{json worker.command}}
        env: {{json env}}
";

    impl KubeBackend for RankBackend {
        fn name(&self) -> &'static str {
            "rankjob"
        }
        fn about(&self) -> &'static str {
            "test.hvdctl.io/v1 RankJob for the rank operator (test only)"
        }
        fn kinds(&self) -> Vec<KindDef> {
            vec![KindDef::of::<RankJob>()]
        }
        fn requires(&self) -> Vec<Requirement> {
            vec![Requirement {
                kind: ApiKind::of::<RankJob>(),
                provider: "the rank operator",
                hint: "start the fake cluster with the rank operator",
            }]
        }
        fn launch(&self) -> Launch {
            Launch::Operator {
                hostfile: "/etc/rank/hostfile",
                worker_command: Some(&["sleep", "infinity"]),
            }
        }
        fn builtin_template(&self) -> std::borrow::Cow<'static, str> {
            TEMPLATE.into()
        }
        fn job_object(&self, job: &str) -> (ApiKind, String) {
            (ApiKind::of::<RankJob>(), job.to_string())
        }
        fn state(
            &self,
            job: Option<&serde_json::Value>,
            _pods: &[Pod],
        ) -> hvdctl::Result<(JobState, Vec<JobCondition>)> {
            let Some(job) = job else {
                return Ok((JobState::Unknown, vec![]));
            };
            let conds = conditions(job, "the RankJob")?;
            let state = if is_true(&conds, "Succeeded") {
                JobState::Succeeded
            } else if is_true(&conds, "Failed") {
                JobState::Failed
            } else if is_true(&conds, "Running") {
                JobState::Running
            } else {
                JobState::Pending
            };
            Ok((state, conds))
        }
        fn identity(&self) -> Identity {
            Identity {
                role_label: LABEL_ROLE,
                index_label: RANK_LABEL,
                index_offset: 0,
                worker_value: ROLE_WORKER,
            }
        }
        fn scaling(&self) -> Scaling {
            Scaling::Patch(|n| serde_json::json!({"spec": {"workers": n}}))
        }
    }

    /// The one registration.
    pub fn register() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| hvdctl::backend::register(&RankBackend).expect("rankjob registers"));
    }
}

/// The fake controller: what an operator of RankJobs would do, through the fake cluster's
/// one controller interface.
mod operator {
    use super::RANK_LABEL;
    use fake_cluster::controllers::{
        Controllers, Operator, all, deleting, owned_by, phase, pod_from_template, set_condition,
    };
    use fake_cluster::resources::{self, PODS, ResourceDef};
    use fake_cluster::util::{fmt_time, name_of, ns_of, s, uid_of};
    use serde_json::{Value, json};

    pub static RANKJOBS: ResourceDef = ResourceDef {
        group: "test.hvdctl.io",
        version: "v1",
        kind: "RankJob",
        plural: "rankjobs",
        singular: "rankjob",
        namespaced: true,
        short_names: &[],
        status_sub: true,
        custom: true,
        categories: &["all"],
        validate: None,
    };

    #[derive(Debug)]
    pub struct RankOperator;

    impl Operator for RankOperator {
        fn name(&self) -> &'static str {
            "rank-operator"
        }

        fn resources(&self) -> Vec<&'static ResourceDef> {
            vec![&RANKJOBS]
        }

        /// A launcher pod `<job>-boss`; workers `<job>-r<i>` carrying their index in
        /// [`RANK_LABEL`], added or removed to match `spec.workers`; `Running` once all run.
        /// A RankJob annotated `test.hvdctl.io/paused` is left alone.
        fn reconcile(&self, ctl: &Controllers, now: i64) {
            let id = resources::register(&RANKJOBS);
            let (ls, fs) = all();
            let (jobs, _) = ctl.store.list(id, None, &ls, &fs);
            if jobs.is_empty() {
                return;
            }
            let (pods, _) = ctl.store.list(PODS, None, &ls, &fs);
            for rj in jobs {
                // Paused (the test writes a status of its own): left as it is.
                if deleting(&rj) || s(&rj, "/metadata/annotations/test.hvdctl.io~1paused").is_some()
                {
                    continue;
                }
                let (ns, name, uid) = (ns_of(&rj), name_of(&rj), uid_of(&rj));
                let mine: Vec<_> = owned_by(&pods, uid).filter(|p| !deleting(p)).collect();
                let index = |p: &Value| -> Option<u64> {
                    s(
                        p,
                        &format!("/metadata/labels/{}", RANK_LABEL.replace('/', "~1")),
                    )?
                    .parse()
                    .ok()
                };
                let workers = rj
                    .pointer("/spec/workers")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let launcher = format!("{name}-boss");
                if !mine.iter().any(|p| name_of(p) == launcher) {
                    let t = rj.pointer("/spec/launcher").cloned().unwrap_or(json!({}));
                    let pod = pod_from_template(&t, &launcher, ns, &[], &rj);
                    ctl.create(PODS, ns, pod, &rj, "launcher pod");
                }
                let template = rj.pointer("/spec/worker").cloned().unwrap_or(json!({}));
                for i in 0..workers {
                    if mine.iter().any(|p| index(p) == Some(i)) {
                        continue;
                    }
                    let extra = [(RANK_LABEL, i.to_string())];
                    let pod =
                        pod_from_template(&template, &format!("{name}-r{i}"), ns, &extra, &rj);
                    ctl.create(PODS, ns, pod, &rj, "worker pod");
                }
                for p in &mine {
                    if index(p).is_some_and(|i| i >= workers) {
                        ctl.store.remove(PODS, ns, name_of(p), "Background");
                    }
                }
                let running = mine.iter().filter(|p| phase(p) == "Running").count() as u64;
                let mut status = rj
                    .get("status")
                    .cloned()
                    .filter(Value::is_object)
                    .unwrap_or(json!({}));
                let (is, why) = if running == workers + 1 {
                    ("True", "AllRunning")
                } else {
                    ("False", "Starting")
                };
                set_condition(&mut status, "Running", is, why, "", &fmt_time(now));
                if rj.get("status") != Some(&status) {
                    ctl.store
                        .mutate(id, ns, name, |o| o["status"] = status.clone());
                }
            }
        }
    }
}

/// Waits on a watch of the run's pods until `workers` workers run.
async fn workers_running(env: &hvdctl::engine::Env<'_>, run: &str, workers: usize) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{WatchStreamExt, watcher};
    let kube = env.kube(Some("default".into())).await.unwrap();
    let api: kube::Api<Pod> = kube::Api::namespaced(kube.cluster.client.clone(), "default");
    let selector = format!("hvdctl.io/run={run},hvdctl.io/role=worker");
    let mut pods = watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut seen: std::collections::BTreeMap<String, bool> = Default::default();
    let wait = async {
        while let Some(p) = pods.next().await {
            let p = p.unwrap();
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let gone = p.metadata.deletion_timestamp.is_some();
            seen.insert(p.metadata.name.unwrap_or_default(), running && !gone);
            if seen.values().filter(|r| **r).count() == workers {
                return;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("{workers} workers of {run} did not run within 60 s: {seen:?}"));
}

#[test]
fn a_backend_with_its_own_custom_kind_deploys_reports_scales_is_diagnosed_and_undeploys() {
    use clap::Parser;
    rankjob::register();
    let e = Cluster::start(Options {
        operators: vec![Arc::new(operator::RankOperator)],
        ..Default::default()
    });
    let dir = init_app(&e.root, "demo", "horovod-elastic");
    let kc = e.kubeconfig.display().to_string();
    let d = dir.display().to_string();
    let cmd = |args: &[&str]| {
        let mut all = vec!["hvdctl", "-C", &d, "-q"];
        all.extend_from_slice(args);
        hvdctl::commands::run(hvdctl::cli::Cli::try_parse_from(all).expect("parses"))
    };
    // deploy: --backend offers it; exactly its kind is created, labelled as hvdctl's.
    let deployed = cmd(&[
        "deploy",
        "--kubeconfig",
        &kc,
        "--backend",
        "rankjob",
        "--run-id",
        "rk1",
        "--no-push",
        "--skip-checks",
        "--image",
        "127.0.0.1:5000/demo:1",
        "--set",
        "workers=2",
    ]);
    assert_eq!(deployed.unwrap(), 0);
    let jobs = e.fc.list("rankjobs", Some("default"), "hvdctl.io/run=rk1");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0]["metadata"]["labels"]["hvdctl.io/backend"],
        "rankjob"
    );
    // The operator's launch: the launcher runs horovodrun (elastic bounds on its command
    // line), workers the backend's command.
    let launcher_cmd = jobs[0]["spec"]["launcher"]["spec"]["containers"][0]["command"].to_string();
    assert!(launcher_cmd.contains("--min-np"), "{launcher_cmd}");
    assert_eq!(
        jobs[0]["spec"]["worker"]["spec"]["containers"][0]["command"],
        serde_json::json!(["sleep", "infinity"])
    );
    assert!(
        e.ours("hvdctl.io/run=rk1")
            .iter()
            .all(|o| o.starts_with("pods/"))
    );

    // status: found from labels alone (another directory, no record); state, roles and
    // indices read the backend's way.
    let other = e.root.join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let g = hvdctl::cli::Global {
        app_dir: other,
        context: None,
        namespace: None,
        kubeconfig: Some(e.kubeconfig.clone()),
        verbose: 0,
        quiet: true,
        color: hvdctl::ui::ColorChoice::Never,
        no_input: true,
    };
    let ui = hvdctl::ui::Ui::plain();
    let env = hvdctl::engine::Env::new(&g, &ui).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let run = env.run(Some("demo-rk1")).await.unwrap();
        assert_eq!(run.info().backend, "rankjob");
        let report = run.wait_running(&ui).await.unwrap();
        assert_eq!(report.backend, "rankjob");
        assert_eq!(report.state, hvdctl::types::JobState::Running);
        let rows: Vec<(String, String, Option<u32>)> = report
            .pods
            .iter()
            .map(|p| (p.name.clone(), p.role.clone(), p.index))
            .collect();
        assert_eq!(
            rows,
            [
                ("demo-rk1-boss".into(), "launcher".into(), None),
                ("demo-rk1-r0".into(), "worker".into(), Some(0)),
                ("demo-rk1-r1".into(), "worker".into(), Some(1)),
            ]
        );
        assert_eq!(
            report.elastic.map(|b| (b.min_workers, b.max_workers)),
            Some((1, 4))
        );

        // scale: the backend's patch; its operator adds the worker, indexed by its label.
        let scaled = run.scale(3).await.unwrap();
        assert_eq!((scaled.before, scaled.after), (2, 3));
        workers_running(&env, "rk1", 3).await;
        let report = run.status().await.unwrap();
        let indices: Vec<Option<u32>> = report
            .pods
            .iter()
            .filter(|p| p.role == "worker")
            .map(|p| p.index)
            .collect();
        assert_eq!(indices, [Some(0), Some(1), Some(2)], "{report:?}");
        assert_eq!(
            e.fc.get("rankjobs", "default", "demo-rk1").unwrap()["spec"]["workers"],
            3
        );
        // Outside its bounds: refused before anything changes.
        let err = run.scale(5).await.unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");

        // doctor: its kind is served here, and its RBAC list is its own.
        let backend: &'static dyn hvdctl::backend::KubeBackend = &rankjob::RankBackend;
        let c = env.kube(Some("default".into())).await.unwrap().cluster;
        let kinds = hvdctl::doctor::kube::kinds(&c, backend).await;
        assert_eq!(kinds.status, hvdctl::doctor::Status::Ok, "{kinds:?}");
        assert!(kinds.message.contains("RankJob served: test.hvdctl.io/v1"), "{kinds:?}");
        let role = hvdctl::doctor::kube::role_yaml(backend, "default");
        assert!(
            role.contains("- apiGroups: [\"test.hvdctl.io\"]\n  resources: [\"rankjobs\"]\n  verbs: [\"create\", \"get\", \"list\", \"patch\", \"delete\"]"),
            "{role}"
        );
        assert!(!role.contains("mpijobs") && !role.contains("\"jobs\""), "{role}");
        let ok = hvdctl::doctor::kube::rbac(&c, "default", backend).await;
        assert_eq!(ok.status, hvdctl::doctor::Status::Ok, "{ok:?}");
        e.fc.set_faults(fake_cluster::Faults {
            forbid: vec!["create:rankjobs".into()],
            ..Default::default()
        });
        let denied = hvdctl::doctor::kube::rbac(&c, "default", backend).await;
        e.fc.set_faults(fake_cluster::Faults::default());
        assert_eq!(denied.status, hvdctl::doctor::Status::Fail, "{denied:?}");
        assert!(
            denied.message.contains("create rankjobs.test.hvdctl.io"),
            "{denied:?}"
        );
    });

    // A cluster without its operator: doctor and deploy name what is missing.
    let bare = Cluster::synthetic(false);
    let kc2 = bare.kubeconfig.display().to_string();
    let g2 = hvdctl::cli::Global {
        kubeconfig: Some(bare.kubeconfig.clone()),
        ..g.clone()
    };
    let env2 = hvdctl::engine::Env::new(&g2, &ui).unwrap();
    rt.block_on(async {
        let c = env2.kube(Some("default".into())).await.unwrap().cluster;
        let kinds = hvdctl::doctor::kube::kinds(&c, &rankjob::RankBackend).await;
        assert_eq!(kinds.status, hvdctl::doctor::Status::Fail, "{kinds:?}");
        assert!(
            kinds.message.contains(
                "test.hvdctl.io/v1 RankJob is not served: the rank operator is not installed"
            ),
            "{kinds:?}"
        );
    });
    let refused = cmd(&[
        "deploy",
        "--kubeconfig",
        &kc2,
        "--backend",
        "rankjob",
        "--run-id",
        "rk2",
        "--no-push",
        "--image",
        "127.0.0.1:5000/demo:1",
    ])
    .unwrap_err();
    assert!(
        refused
            .message
            .contains("the rank operator is not installed"),
        "{refused}"
    );
    assert!(bare.ours("hvdctl.io/run=rk2").is_empty());

    // What a backend cannot read is an error naming it, never a guess: conditions that are
    // not conditions, and a run labelled with a backend this hvdctl does not know.
    let conditions = e.fc.mutate("rankjobs", "default", "demo-rk1", |o| {
        o["metadata"]["annotations"]["test.hvdctl.io/paused"] = serde_json::json!("true");
        o["status"]["conditions"] = serde_json::json!("all good");
    });
    assert!(conditions.is_some());
    e.fc.create(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "demo-zz9-boss", "labels": {
            "app.kubernetes.io/managed-by": "hvdctl", "hvdctl.io/app": "demo",
            "hvdctl.io/run": "zz9", "hvdctl.io/backend": "trainjob-v9"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    rt.block_on(async {
        let run = env.run(Some("demo-rk1")).await.unwrap();
        let err = run.status().await.unwrap_err();
        assert!(
            err.message
                .contains("the status conditions of the RankJob cannot be read"),
            "{err}"
        );
        let err = env
            .run(Some("demo-zz9"))
            .await
            .err()
            .expect("an unknown backend");
        assert!(
            err.message.contains("run zz9") && err.message.contains("`trainjob-v9`"),
            "{err}"
        );
        // The unreadable run hides none of the others: listed beside it, and the app's
        // newest run it can read is what a command without RUN means.
        // (The cluster's runs: another test's local `demo` run on this machine's Docker
        // engine is listed too, and is not this test's.)
        let (runs, _) = env.every_run(false, Some("demo")).await.unwrap();
        let ids: Vec<&str> = runs
            .iter()
            .filter(|r| matches!(r, hvdctl::engine::Run::Kubernetes(_)))
            .map(|r| r.info().run_id.as_str())
            .collect();
        assert_eq!(ids, ["rk1"]);
    });
    // (rk1's conditions are still unreadable: reaching them shows rk1 was the run chosen.)
    let status = cmd(&["status", "--kubeconfig", &kc]).unwrap_err();
    assert!(
        status.message.contains("conditions of the RankJob"),
        "{status}"
    );
    // undeploy --all deletes nothing rather than all runs but one it cannot read.
    let err = cmd(&["undeploy", "--kubeconfig", &kc, "--all", "--yes"]).unwrap_err();
    assert!(err.message.contains("run zz9"), "{err}");
    assert!(!e.fc.list("rankjobs", None, "hvdctl.io/run=rk1").is_empty());
    e.fc.delete("pods", "default", "demo-zz9-boss", None)
        .unwrap();

    // undeploy: its custom objects and the pods its operator made, all gone.
    assert_eq!(cmd(&["undeploy", "--kubeconfig", &kc, "rk1"]).unwrap(), 0);
    assert!(e.fc.list("rankjobs", None, "hvdctl.io/run=rk1").is_empty());
    assert!(
        e.ours("hvdctl.io/run=rk1").is_empty(),
        "{:?}",
        e.ours("hvdctl.io/run=rk1")
    );
}
