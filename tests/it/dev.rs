//! `hvdctl dev` against real containers: a local run and native/mpijob runs on the fake
//! cluster's Docker kubelet. Each test drives `hvdctl dev` as a child process, edits the
//! `mpi-hello` script twice (two successive attempts show the new lines), breaks it (the
//! attempt fails, the loop goes on) and mends it; the pods/containers stay the same across
//! attempts and the saved file's hash is on every one of them; Ctrl-C (SIGINT) undeploys and
//! exits 130, leaving nothing.
//!
//! Needs `scripts/dev-services.sh start`; fails without it.

use crate::local::{kubelet_containers, kubelet_leftovers, leftovers};
use crate::util::*;
use hvdctl::image::docker::DockerClient;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `mpi-hello` image, built once per content.
fn image(docker: &DockerClient) -> String {
    template_image(docker, "mpi-hello", &debian_image())
}

/// A random token, so a line cannot be a hard-coded answer.
fn token() -> String {
    format!("tok{:012x}", rand::random::<u64>() >> 16)
}

/// `hvdctl dev` running, its stdout read line by line.
pub(crate) struct Dev {
    child: std::process::Child,
    /// (stderr?, line) of both streams, as they come.
    lines: mpsc::Receiver<(bool, String)>,
    seen: Vec<String>,
    seen_err: Vec<String>,
}

impl Dev {
    pub(crate) fn start(dir: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Dev {
        let mut c = hvdctl_process();
        c.arg("-C").arg(dir).arg("dev").args(args);
        if let Some(kc) = kubeconfig {
            c.env("KUBECONFIG", kc);
        }
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let pipe = |r: Box<dyn Read + Send>, err: bool, tx: mpsc::Sender<(bool, String)>| {
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send((err, l)).is_err() {
                        break;
                    }
                }
            })
        };
        pipe(Box::new(child.stdout.take().unwrap()), false, tx.clone());
        pipe(Box::new(child.stderr.take().unwrap()), true, tx);
        Dev {
            child,
            lines,
            seen: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    /// Waits for a stderr line `pred` accepts.
    pub(crate) fn wait_for_stderr(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) {
        if self.seen_err.iter().any(|l| pred(l)) {
            return;
        }
        let deadline = Instant::now() + timeout;
        while let Some(l) = self.next(deadline, what, timeout) {
            if l.0 && pred(&l.1) {
                return;
            }
        }
    }

    /// The next line of either stream (kept in `seen`/`seen_err`); panics after `deadline`.
    fn next(&mut self, deadline: Instant, what: &str, timeout: Duration) -> Option<(bool, String)> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok((err, l)) => {
                match err {
                    true => self.seen_err.push(l.clone()),
                    false => self.seen.push(l.clone()),
                }
                Some((err, l))
            }
            Err(_) => {
                panic!(
                    "no line {what} within {timeout:?}; stdout:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.seen_err.join("\n")
                );
            }
        }
    }

    /// Waits for a stdout line `pred` accepts (lines already read count); the line and
    /// when it came.
    pub(crate) fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> (String, Instant) {
        if let Some(l) = self.seen.iter().find(|l| pred(l)) {
            return (l.clone(), Instant::now());
        }
        let deadline = Instant::now() + timeout;
        while let Some((err, l)) = self.next(deadline, what, timeout) {
            if !err && pred(&l) {
                return (l, Instant::now());
            }
        }
        unreachable!("next panics at the deadline")
    }

    /// The lines of attempt `n` read so far (text output: `#n …`).
    pub(crate) fn attempt(&self, n: u32) -> Vec<&str> {
        let p = format!("#{n} ");
        self.seen
            .iter()
            .filter(|l| l.starts_with(&p))
            .map(String::as_str)
            .collect()
    }

    /// SIGINT, then the exit code and stderr.
    pub(crate) fn interrupt(mut self) -> (i32, String) {
        self.stop()
    }

    fn stop(&mut self) -> (i32, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok((err, l)) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if err {
                self.seen_err.push(l);
            }
        }
        (status.code().unwrap_or(-1), self.seen_err.join("\n"))
    }
}

/// A test that fails half way still undeploys: `hvdctl dev` is interrupted as by Ctrl-C.
impl Drop for Dev {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// Rewrites `hello.py` so every rank prints `line` first (after the imports).
fn edit(dir: &Path, line: &str) {
    edit_script(dir, "hello.py", "from mpi4py", line)
}

/// Rewrites `script` with `line` after the line starting with `after` (and without the
/// lines earlier edits put in).
fn edit_script(dir: &Path, script: &str, after: &str, line: &str) {
    let p = dir.join(script);
    let text = std::fs::read_to_string(&p).unwrap();
    let mut kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("print(\"edit ") && !l.starts_with("def broken("))
        .collect();
    let at = kept.iter().position(|l| l.starts_with(after)).unwrap() + 1;
    kept.insert(at, line);
    std::fs::write(&p, kept.join("\n") + "\n").unwrap();
}

fn sha256(p: &Path) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(std::fs::read(p).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256sum` of `path` in the launcher and in workers 0..workers, through `hvdctl exec`.
fn hashes(dir: &Path, kc: Option<&Path>, id: &str, workers: u32, path: &str) -> Vec<String> {
    let mut places: Vec<Vec<String>> = vec![vec![]];
    places.extend((0..workers).map(|i| vec!["--index".to_string(), i.to_string()]));
    places
        .iter()
        .map(|p| {
            let mut args = vec!["exec", id];
            args.extend(p.iter().map(String::as_str));
            args.extend(["--", "sha256sum", path]);
            let o = hv(dir, kc, &args);
            assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
            o.stdout
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The containers of local run `id`: name → id.
fn local_containers(docker: &DockerClient, id: &str) -> HashMap<String, String> {
    let filters = HashMap::from([("label".to_string(), vec![format!("hvdctl.io/run={id}")])]);
    rt().block_on(docker.bollard().list_containers(Some(
        bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        },
    )))
    .unwrap()
    .into_iter()
    .map(|c| {
        (
            c.names.unwrap_or_default().join(","),
            c.id.unwrap_or_default(),
        )
    })
    .collect()
}

/// Where the run is, for the identity checks.
enum On<'a> {
    Local(&'a DockerClient),
    Kubelet(&'a DockerClient, &'a Cluster),
}

impl On<'_> {
    fn kc(&self) -> Option<&Path> {
        match self {
            On::Local(_) => None,
            On::Kubelet(_, c) => Some(&c.kubeconfig),
        }
    }

    /// Pods (or containers) and what identifies them: the container ids, and on a cluster
    /// the pod UIDs kubectl reports (when it is installed).
    fn identity(&self, job: &str, id: &str) -> Vec<String> {
        let mut v: Vec<String> = match self {
            On::Local(d) => local_containers(d, id)
                .into_iter()
                .map(|(n, i)| format!("{n}={i}"))
                .collect(),
            On::Kubelet(d, c) => {
                let mut v: Vec<String> = kubelet_containers(d, &c.fc, job)
                    .into_iter()
                    .map(|(p, i)| format!("{p}={i}"))
                    .collect();
                if let Some(uids) = c.kubectl(&[
                    "get",
                    "pods",
                    "-l",
                    &format!("hvdctl.io/run={id}"),
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{\"\\n\"}{end}",
                ]) {
                    v.extend(uids.lines().map(|l| format!("pod {l}")));
                }
                v
            }
        };
        v.sort();
        v
    }

    fn leftovers(&self, job: &str, id: &str) -> bool {
        match self {
            On::Local(d) => leftovers(d, job, id) == (0, 0, 0),
            On::Kubelet(d, c) => kubelet_leftovers(d, &c.fc, job).is_empty(),
        }
    }
}

/// The edit loop on the `mpi-hello` app (2 workers): attempt 1 as deployed; two successive
/// edits, each seen on both ranks in its own attempt; a broken script (the attempt fails,
/// the loop goes on); the mend; every pod the same throughout; Ctrl-C leaves nothing.
fn edit_loop(on: On, backend: &str, prefix: &str) {
    let docker = match &on {
        On::Local(d) | On::Kubelet(d, _) => *d,
    };
    let img = image(docker);
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "dev", "mpi-hello");
    let id = run_id(prefix);
    let job = format!("dev-{id}");
    let kc = on.kc();
    let mut dev = Dev::start(
        &dir,
        kc,
        &[
            "--backend",
            backend,
            "--run-id",
            &id,
            "--image",
            &img,
            "--set",
            "workers=2",
        ],
    );
    let ok = |n: u32| {
        move |l: &str| {
            l.starts_with(&format!(
                "#{n} launcher r0 | sum of ranks 0..1 = 1 (expected 1) OK"
            ))
        }
    };
    dev.wait_for("of attempt 1's sum", Duration::from_secs(180), ok(1));
    let pods = on.identity(&job, &id);
    let names: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| p.trim_start_matches("pod ").split('=').next().unwrap())
        .map(|p| p.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "a launcher and 2 workers: {pods:?}");

    let mut tokens = Vec::new();
    for n in [2, 3] {
        let t = token();
        tokens.push(t.clone());
        edit(&dir, &format!("print(\"edit {t}\", flush=True)"));
        for r in [0, 1] {
            let want = format!("#{n} launcher r{r} | edit {t}");
            dev.wait_for(&want, Duration::from_secs(60), |l| l == want);
        }
        dev.wait_for("of the sum", Duration::from_secs(60), ok(n));
        let want = sha256(&dir.join("hello.py"));
        assert_eq!(hashes(&dir, kc, &id, 2, "/app/hello.py"), vec![want; 3]);
    }
    assert!(
        dev.attempt(3).iter().all(|l| !l.contains(&tokens[0])),
        "attempt 3 printed attempt 2's edit: {:?}",
        dev.attempt(3)
    );

    // Broken: a syntax error. The attempt fails; the loop waits for the next save.
    edit(&dir, "def broken(:");
    dev.wait_for("SyntaxError of attempt 4", Duration::from_secs(60), |l| {
        l.starts_with("#4 launcher") && l.contains("SyntaxError")
    });
    dev.wait_for_stderr("of attempt 4's end", Duration::from_secs(60), |l| {
        l.starts_with("attempt #4 exited with code ")
            && !l.starts_with("attempt #4 exited with code 0")
    });
    let t = token();
    edit(&dir, &format!("print(\"edit {t}\", flush=True)"));
    let want = format!("#5 launcher r1 | edit {t}");
    dev.wait_for(&want, Duration::from_secs(60), |l| l == want);
    dev.wait_for("of attempt 5's sum", Duration::from_secs(60), ok(5));
    // A file in a directory the containers do not have yet, then that directory deleted.
    std::fs::create_dir_all(dir.join("pkg/sub")).unwrap();
    std::fs::write(dir.join("pkg/sub/data.txt"), token()).unwrap();
    dev.wait_for("of attempt 6's sum", Duration::from_secs(60), ok(6));
    let want = sha256(&dir.join("pkg/sub/data.txt"));
    assert_eq!(
        hashes(&dir, kc, &id, 2, "/app/pkg/sub/data.txt"),
        vec![want; 3]
    );
    std::fs::remove_dir_all(dir.join("pkg")).unwrap();
    dev.wait_for("of attempt 7's sum", Duration::from_secs(60), ok(7));
    for place in [vec![], vec!["--index", "0"], vec!["--index", "1"]] {
        let mut args = vec!["exec", id.as_str()];
        args.extend(place);
        args.extend(["--", "test", "!", "-e", "/app/pkg"]);
        let o = hv(&dir, kc, &args);
        assert_eq!(o.code, 0, "{args:?}: /app/pkg is still there {}", o.stderr);
    }
    assert_eq!(
        on.identity(&job, &id),
        pods,
        "the pods changed across attempts"
    );

    let (code, stderr) = dev.interrupt();
    assert_eq!(code, 130, "{stderr}");
    assert!(on.leftovers(&job, &id), "Ctrl-C left something of {job}");
    assert!(!stderr.contains("PRIVATE KEY"));
}

#[test]
fn dev_picks_up_edits_in_a_local_run() {
    let Some(docker) = docker() else { return };
    edit_loop(On::Local(&docker), "local", "d");
}

#[test]
fn dev_picks_up_edits_in_a_native_run_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let cluster = Cluster::docker_kubelet(false);
    edit_loop(On::Kubelet(&docker, &cluster), "native", "n");
}

#[test]
fn dev_picks_up_edits_in_an_mpijob_run_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let cluster = Cluster::docker_kubelet(true);
    edit_loop(On::Kubelet(&docker, &cluster), "mpijob", "m");
}

#[test]
fn dev_picks_up_edits_in_a_trainjob_run_on_the_docker_kubelet() {
    let Some(docker) = docker() else { return };
    let cluster = Cluster::start(fake_cluster::Options {
        kubelet: fake_cluster::KubeletMode::Docker,
        pause_image: Some(busybox_image()),
        trainer: true,
        ..Default::default()
    });
    edit_loop(On::Kubelet(&docker, &cluster), "trainjob", "t");
}

/// Bad input: exit 2 and what is wrong, before anything is deployed.
#[test]
fn dev_refuses_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "dev", "mpi-hello");
    for (args, says) in [
        (
            vec!["dev", "--backend", "local", "--set", "dev.syncTo=app"],
            "dev.syncTo",
        ),
        (
            vec!["dev", "--backend", "local", "--run-id", "NOPE!"],
            "--run-id",
        ),
        (
            vec!["dev", "--backend", "local", "--debounce", "0"],
            "--debounce",
        ),
        (
            vec!["dev", "--backend", "local", "--image", "Bad Image"],
            "--image",
        ),
    ] {
        let o = hv(&dir, None, &args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
    }
    let missing = dir.join("missing");
    let o = hv(&dir, None, &["-C", missing.to_str().unwrap(), "dev"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

/// A change to the Dockerfile builds a new image and replaces the run (new containers, the
/// attempt count going on); `-o json` lines carry `attempt` and the keys of `hvdctl logs`.
#[test]
fn dev_rebuilds_on_a_dockerfile_change_in_a_local_run() {
    let Some(docker) = docker() else { return };
    let img = image(&docker);
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "dev", "mpi-hello");
    let id = run_id("r");
    let job = format!("dev-{id}");
    let base = format!("build.args.BASE_IMAGE={}", debian_image());
    let mut dev = Dev::start(
        &dir,
        None,
        &[
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--set",
            "workers=2",
            "--set",
            &base,
            "-o",
            "json",
        ],
    );
    let json = |l: &str| serde_json::from_str::<serde_json::Value>(l).ok();
    let says = |n: u64, rank: u64, text: String| {
        move |l: &str| {
            json(l).is_some_and(|v| {
                v["attempt"] == n
                    && v["rank"] == rank
                    && v["role"] == "launcher"
                    && v["message"].as_str().is_some_and(|m| m.contains(&text))
            })
        }
    };
    dev.wait_for(
        "of attempt 1",
        Duration::from_secs(120),
        says(1, 0, "sum of ranks".into()),
    );
    let before = on_local(&docker, &id);
    edit(
        &dir,
        "print(\"edit rebuilt=\" + (open(\"/opt/dev-rebuilt\").read().strip() if os.path.exists(\"/opt/dev-rebuilt\") else \"no\"), flush=True)",
    );
    dev.wait_for(
        "of attempt 2",
        Duration::from_secs(60),
        says(2, 1, "edit rebuilt=no".into()),
    );
    let t = token();
    let dockerfile = dir.join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(
        &dockerfile,
        format!("{text}RUN echo {t} > /opt/dev-rebuilt\n"),
    )
    .unwrap();
    let want = format!("edit rebuilt={t}");
    dev.wait_for(
        "of attempt 3 on the new image",
        Duration::from_secs(240),
        says(3, 0, want.clone()),
    );
    dev.wait_for(
        "of attempt 3 on the new image",
        Duration::from_secs(60),
        says(3, 1, want),
    );
    let after = on_local(&docker, &id);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        after.iter().all(|c| !before.contains(c)),
        "the run was not replaced: {before:?} {after:?}"
    );
    // hvdctl.yaml says what runs: a change to it deploys the run again (same image) and the
    // next attempt runs with it, env passed on to every rank.
    edit(
        &dir,
        "print(\"edit env=\" + os.environ.get(\"DEV_TOKEN\", \"none\"), flush=True)",
    );
    dev.wait_for(
        "of attempt 4",
        Duration::from_secs(60),
        says(4, 1, "edit env=none".into()),
    );
    let t = token();
    let yaml = dir.join("hvdctl.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let text = text.replacen("env:\n", &format!("env:\n  DEV_TOKEN: \"{t}\"\n"), 1);
    std::fs::write(&yaml, text).unwrap();
    for rank in [0, 1] {
        dev.wait_for(
            "of attempt 5 with the new env",
            Duration::from_secs(120),
            says(5, rank, format!("edit env={t}")),
        );
    }
    let again = on_local(&docker, &id);
    assert_eq!(again.len(), 3, "{again:?}");
    assert!(
        again.iter().all(|c| !after.contains(c)),
        "the run was not deployed again: {after:?} {again:?}"
    );
    // Ctrl-C while a rebuild runs a step of a minute: heard at once, the run undeployed.
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(&dockerfile, format!("{text}RUN sleep 60\n")).unwrap();
    dev.wait_for_stderr("of the slow rebuild", Duration::from_secs(60), |l| {
        l.contains("RUN sleep 60")
    });
    let asked = std::time::Instant::now();
    let (code, stderr) = dev.interrupt();
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "Ctrl-C during the build took {:?}",
        asked.elapsed()
    );
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("Dockerfile changed"), "{stderr}");
    assert!(
        stderr.contains("hvdctl.yaml changed: deploying the run again"),
        "{stderr}"
    );
    assert_eq!(leftovers(&docker, &job, &id), (0, 0, 0));
    // The image the rebuild made (recorded by hvdctl build's code) goes too.
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(".hvdctl/image.json")).unwrap()).unwrap();
    if let Some(image) = rec["image"].as_str() {
        let _ = rt().block_on(docker.bollard().remove_image(
            image,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        ));
    }
}

/// The ids of local run `id`'s containers.
fn on_local(docker: &DockerClient, id: &str) -> Vec<String> {
    local_containers(docker, id).into_values().collect()
}

/// The horovod template (PyTorch, horovodrun, 2 workers) on the Horovod base, locally:
/// attempt 1 trains its epoch; the edited train.py runs in attempt 2 on both ranks to its
/// end (it resumes from attempt 1's checkpoint, left in the same containers); the file's hash
/// is on every container and the containers are the same.
#[test]
fn dev_picks_up_an_edit_of_the_horovod_template_in_a_local_run() {
    let Some(docker) = docker() else { return };
    let Some(base) = horovod_base(&docker) else {
        return;
    };
    let img = template_image(&docker, "horovod", &base);
    let _training = one_training_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = init_app(tmp.path(), "hvd", "horovod");
    let id = run_id("h");
    let job = format!("hvd-{id}");
    let mut dev = Dev::start(
        &dir,
        None,
        &[
            "--backend",
            "local",
            "--run-id",
            &id,
            "--image",
            &img,
            "--set",
            "workers=2",
            "--set",
            "mpi.launcher=horovodrun",
            "--set",
            "parameters.epochs=1",
            "--set",
            "env.SYNTHETIC_SAMPLES=2000",
            "--set",
            "env.OMP_NUM_THREADS=1",
        ],
    );
    let epoch = |n: u32| {
        move |l: &str| l.starts_with(&format!("#{n} launcher r0 | epoch 1/1: train_loss="))
    };
    dev.wait_for("of attempt 1's epoch", Duration::from_secs(300), epoch(1));
    let pods = local_containers(&docker, &id);
    let t = token();
    edit_script(
        &dir,
        "train.py",
        "import horovod.torch",
        &format!("print(\"edit {t}\", flush=True)"),
    );
    for r in [0, 1] {
        let want = format!("#2 launcher r{r} | edit {t}");
        dev.wait_for(&want, Duration::from_secs(60), |l| l == want);
    }
    // Attempt 1's checkpoint is in rank 0's container: attempt 2 resumes and ends at once.
    let done = "#2 launcher r0 | done";
    dev.wait_for(done, Duration::from_secs(300), |l| l == done);
    let want = sha256(&dir.join("train.py"));
    assert_eq!(hashes(&dir, None, &id, 2, "/app/train.py"), vec![want; 3]);
    assert_eq!(
        local_containers(&docker, &id),
        pods,
        "the containers changed"
    );
    let (code, stderr) = dev.interrupt();
    assert_eq!(code, 130, "{stderr}");
    assert_eq!(leftovers(&docker, &job, &id), (0, 0, 0));
}
