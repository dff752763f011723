//! `hvdctl build` with BuildKit on the test daemon (Debian's dockerd 20.10, API 1.41): a
//! cache mount kept across builds, a rebuild after touching only the training script that
//! reuses every step before its `COPY`, a failing third step named with its last lines, and
//! `--builder legacy` refusing BuildKit-only syntax as the classic builder does. The context
//! goes through the session's file sync: `.dockerignore` applies to the Dockerfile and
//! itself as with the classic builder, a rebuild transfers only the file that changed, and
//! links, hard links, an empty directory and modes arrive as they are.

use crate::util::*;
use std::path::Path;

/// An app in `dir` with `dockerfile`, on the busybox base; `hvdctl build` there returns
/// its output.
fn app(dir: &Path, dockerfile: &str) {
    write_tree(
        dir,
        &[
            (
                "hvdctl.yaml",
                "name: bk\nimage: hvdctl-test/buildkit\ncommand: [/bin/true]\n",
            ),
            ("Dockerfile", dockerfile),
            ("train.py", "print('epoch 1')\n"),
            ("requirements.txt", "numpy\n"),
        ],
    );
}

fn build(dir: &Path, host: &str, args: &[&str]) -> Out {
    let mut c = hvdctl_in(dir);
    c.env("DOCKER_HOST", host)
        .env_remove("DOCKER_CONTEXT")
        .args(["build", "--progress", "plain"])
        .args(args);
    run(c)
}

/// The state BuildKit's plain output gives the step whose name contains `name`: `CACHED`,
/// `DONE …`, `ERROR: …`, or `None` when it did not end.
fn step_state(out: &str, name: &str) -> Option<String> {
    let n = out.lines().find_map(|l| {
        let (num, rest) = l.split_once(' ')?;
        (num.starts_with('#') && rest.contains(name)).then(|| num.to_string())
    })?;
    out.lines().find_map(|l| {
        let rest = l.strip_prefix(&format!("{n} "))?;
        (rest == "CACHED" || rest.starts_with("DONE ") || rest.starts_with("ERROR"))
            .then(|| rest.to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_mounts_persist_and_a_script_edit_reuses_every_step_before_copy() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A unique cache id: a rerun of the test starts from an empty cache.
    let cache = unique("hvdctl-test-pip");
    app(
        dir,
        &format!(
            "FROM {base}\n\
             ARG ROUND=1\n\
             COPY requirements.txt /app/\n\
             RUN --mount=type=cache,id={cache},target=/root/.cache/pip \\\n    \
             if [ -f /root/.cache/pip/wheel ]; then echo \"cache hit: $(cat /root/.cache/pip/wheel)\"; \\\n    \
             else echo cache empty; fi; echo \"round $ROUND\" > /root/.cache/pip/wheel\n\
             COPY train.py /app/\n",
            base = busybox_image()
        ),
    );
    let first = build(dir, &host, &["--tag", "one", "--build-arg", "ROUND=1"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stderr.contains("with BuildKit"), "{}", first.stderr);
    assert!(first.stderr.contains("cache empty"), "{}", first.stderr);

    // The RUN step runs again (another ROUND) and finds what the first build left in the
    // cache mount — which is not in any image layer.
    let second = build(dir, &host, &["--tag", "two", "--build-arg", "ROUND=2"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains("cache hit: round 1"),
        "{}",
        second.stderr
    );

    // Touch only the training script: every step before `COPY train.py` is reused.
    std::fs::write(dir.join("train.py"), "print('epoch 2')\n").unwrap();
    let third = build(dir, &host, &["--tag", "three", "--build-arg", "ROUND=2"]);
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert_eq!(
        step_state(&third.stderr, "COPY requirements.txt").as_deref(),
        Some("CACHED"),
        "{}",
        third.stderr
    );
    assert_eq!(
        step_state(&third.stderr, "RUN --mount=type=cache").as_deref(),
        Some("CACHED"),
        "{}",
        third.stderr
    );
    let copy = step_state(&third.stderr, "COPY train.py").unwrap_or_default();
    assert!(copy.starts_with("DONE"), "{copy}: {}", third.stderr);
}

/// An app without a `.dockerignore` that copies its whole directory: what `hvdctl build`
/// records in `.hvdctl/` between two builds does not make `COPY .` run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_all_is_cached_across_builds_despite_hvdctls_own_records() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    app(dir, &format!("FROM {}\nCOPY . /app/\n", busybox_image()));
    let first = build(dir, &host, &["--tag", "all"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(dir.join(".hvdctl").is_dir(), "the build is recorded");
    let second = build(dir, &host, &["--tag", "all"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        step_state(&second.stderr, "COPY . /app/").as_deref(),
        Some("CACHED"),
        "{}",
        second.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_third_step_is_named_with_its_last_lines() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    app(
        dir,
        &format!(
            "FROM {}\nRUN echo step two\nRUN echo installing; echo 'no such package: nump' >&2; exit 3\nRUN echo never\n",
            busybox_image()
        ),
    );
    let out = build(dir, &host, &["--tag", "fail", "--builder", "buildkit"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("failed at step") && out.stderr.contains("3/4] RUN echo installing"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("  | no such package: nump"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("exit code: 3"), "{}", out.stderr);
    // The fourth step never ran: no output line of it.
    assert!(
        !out.stderr
            .lines()
            .any(|l| l.starts_with('#') && l.ends_with(" never") && !l.contains("RUN")),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_builder_is_chosen_by_flag() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    app(
        dir,
        &format!("FROM {}\nRUN echo classic\n", busybox_image()),
    );
    let out = build(dir, &host, &["--tag", "legacy", "--builder", "legacy"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("Step 2/"), "{}", out.stderr);
    assert!(!out.stderr.contains("with BuildKit"), "{}", out.stderr);
    // BuildKit-only syntax fails on the classic builder, naming the step.
    app(
        dir,
        &format!(
            "FROM {}\nRUN --mount=type=cache,target=/c true\n",
            busybox_image()
        ),
    );
    let out = build(dir, &host, &["--tag", "legacy2", "--builder", "legacy"]);
    assert_ne!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("--mount"), "{}", out.stderr);
}

/// Whether a process whose command line holds `marker` runs on this machine (BuildKit runs
/// a step's processes with runc on the daemon's host: here, this machine).
fn process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| {
                        String::from_utf8_lossy(&c)
                            .replace('\0', " ")
                            .contains(marker)
                    })
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_build_on_the_daemon() {
    use std::io::{BufRead, BufReader};
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A step that would run for an hour, with a number of seconds no other process uses.
    let secs = 3600 + rand::random::<u16>() as u32 % 10_000;
    let marker = format!("sleep {secs}");
    app(
        dir,
        &format!(
            "FROM {}\nRUN echo step-started; {marker}\n",
            busybox_image()
        ),
    );
    let mut c = hvdctl_process();
    c.current_dir(dir)
        .env("DOCKER_HOST", &host)
        .env_remove("DOCKER_CONTEXT")
        .args([
            "build",
            "--progress",
            "plain",
            "--no-cache",
            "--tag",
            "cancel",
        ])
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref().map_while(Result::ok) {
        let started = line.ends_with(" step-started");
        seen.push(line);
        if started {
            break;
        }
    }
    // The rest of stderr is read on (what hvdctl says as it stops).
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    assert!(
        seen.last().is_some_and(|l| l.ends_with(" step-started")),
        "{}",
        seen.join("\n")
    );
    assert!(process_with(&marker), "the step's process runs");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let rest = rest.join().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "{}\n{}",
        seen.join("\n"),
        rest.join("\n")
    );
    // The daemon stops the step once the client is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while process_with(&marker) {
        assert!(
            std::time::Instant::now() < deadline,
            "`{marker}` still runs a minute after Ctrl-C"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_its_step_and_nothing_else() {
    let Some((docker, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("app");
    let value = unique("s3cr3t");
    let token = tmp.path().join("token");
    std::fs::write(&token, &value).unwrap();
    app(
        &dir,
        &format!(
            "FROM {}\n\
             RUN --mount=type=secret,id=token,required sha256sum < /run/secrets/token\n\
             RUN ls /run/secrets 2>/dev/null | wc -l > /left\n",
            busybox_image()
        ),
    );
    let secret = format!("id=token,src={}", token.display());
    let out = build(
        &dir,
        &host,
        &["--tag", "secret", "--no-cache", "--secret", &secret],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The step read the file's contents (its digest is printed), never the value itself.
    use sha2::Digest;
    let digest = format!("{:x}", sha2::Sha256::digest(value.as_bytes()));
    assert!(out.stderr.contains(&digest), "{}", out.stderr);
    assert!(!out.stderr.contains(&value), "{}", out.stderr);
    // Nothing of it is in the image: no file under /run/secrets, no layer holding it.
    let image = "hvdctl-test/buildkit:secret";
    let history = docker.bollard().image_history(image).await.unwrap();
    assert!(!history.is_empty());
    let saved = util_save(&host, image);
    assert!(
        !saved.windows(value.len()).any(|w| w == value.as_bytes()),
        "the secret is in the saved image"
    );

    // A required secret that is not given: the step fails, named.
    let out = build(&dir, &host, &["--tag", "nosecret", "--no-cache"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("failed at step"), "{}", out.stderr);
    // A secret file that does not exist: exit 2 naming it, before anything is built.
    let out = build(
        &dir,
        &host,
        &["--tag", "x", "--secret", "id=token,src=/nonexistent/token"],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("/nonexistent/token"), "{}", out.stderr);
    // The classic builder has no secrets.
    let out = build(
        &dir,
        &host,
        &["--tag", "x", "--builder", "legacy", "--secret", &secret],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
}

/// `docker save IMAGE` as bytes (layers included).
fn util_save(host: &str, image: &str) -> Vec<u8> {
    let out = std::process::Command::new("docker")
        .args(["save", image])
        .env("DOCKER_HOST", host)
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// The `#N` output lines of the step whose name contains `name`, without the prefix.
fn step_lines(out: &str, name: &str) -> Vec<String> {
    let Some(n) = out.lines().find_map(|l| {
        let (num, rest) = l.split_once(' ')?;
        (num.starts_with('#') && rest.contains(name)).then(|| num.to_string())
    }) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| l.strip_prefix(&format!("{n} ")))
        .filter(|l| !l.contains(name))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_dockerfile_and_dockerignore_stay_out_of_copy_with_both_builders() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_tree(
        dir,
        &[
            (
                "hvdctl.yaml",
                "name: bk\nimage: hvdctl-test/buildkit\ncommand: [/bin/true]\n",
            ),
            (
                "Dockerfile",
                &format!(
                    "FROM {}\nCOPY . /ctx\nRUN cd /ctx && find . | sort\n",
                    busybox_image()
                ),
            ),
            (
                ".dockerignore",
                "Dockerfile\n.dockerignore\n*.log\n.hvdctl\n",
            ),
            ("train.py", "print(1)\n"),
            ("debug.log", "x\n"),
        ],
    );
    for builder in ["buildkit", "legacy"] {
        let out = build(
            dir,
            &host,
            &["--tag", "ignored", "--no-cache", "--builder", builder],
        );
        assert_eq!(out.code, 0, "{builder}: {}", out.stderr);
        let listed: Vec<String> = if builder == "buildkit" {
            step_lines(&out.stderr, "RUN cd /ctx")
        } else {
            out.stderr.lines().map(str::to_string).collect()
        };
        let listed: Vec<&str> = listed
            .iter()
            .map(|l| l.trim())
            .filter(|l| l.starts_with("./") || *l == ".")
            .collect();
        assert_eq!(
            listed,
            [".", "./hvdctl.yaml", "./train.py"],
            "{builder}: {}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_transfers_only_the_file_that_changed() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_tree(
        dir,
        &[
            (
                "hvdctl.yaml",
                "name: bk\nimage: hvdctl-test/buildkit\ncommand: [/bin/true]\n",
            ),
            (
                "Dockerfile",
                &format!(
                    "FROM {}\nCOPY . /ctx\nRUN wc -c /ctx/data/07 && du -sk /ctx/data\n",
                    busybox_image()
                ),
            ),
            // hvdctl records each build under .hvdctl/: kept out so only data changes.
            (".dockerignore", ".hvdctl\n"),
        ],
    );
    // 32 files of 256 KiB: 8 MiB of context.
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let block: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    for i in 0..32 {
        std::fs::write(dir.join(format!("data/{i:02}")), &block).unwrap();
    }
    let sent = |out: &Out| -> (u64, u64) {
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with("sent build context: "))
            .unwrap_or_else(|| panic!("no context line: {}", out.stderr));
        let inner = line.split_once('(').unwrap().1;
        let mut words = inner.split_whitespace();
        let bytes = words.next().unwrap().parse().unwrap();
        let files = words.nth(2).unwrap().parse().unwrap();
        (bytes, files)
    };
    let first = build(dir, &host, &["--tag", "sync", "--builder", "buildkit"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let (bytes, files) = sent(&first);
    assert!(bytes >= 32 * 256 * 1024, "{}", first.stderr);
    assert!(files >= 33, "{}", first.stderr);

    // One file changes (another size): that file alone crosses, and the image has it. Its
    // contents are new to the daemon (a rerun of the test must not find them cached).
    let mut changed = unique("changed").into_bytes();
    changed.resize(100_003, b'7');
    std::fs::write(dir.join("data/07"), &changed).unwrap();
    let second = build(dir, &host, &["--tag", "sync", "--builder", "buildkit"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(sent(&second), (100_003, 1), "{}", second.stderr);
    assert!(
        step_lines(&second.stderr, "RUN wc -c")
            .iter()
            .any(|l| l.trim() == "100003 /ctx/data/07"),
        "{}",
        second.stderr
    );

    // Nothing changed: nothing crosses, and COPY is reused.
    let third = build(dir, &host, &["--tag", "sync", "--builder", "buildkit"]);
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert_eq!(sent(&third), (0, 0), "{}", third.stderr);
    assert_eq!(
        step_state(&third.stderr, "COPY . /ctx").as_deref(),
        Some("CACHED"),
        "{}",
        third.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_empty_dirs_and_modes_survive_the_sync() {
    let Some((_, host)) = docker_with(&busybox_image()).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_tree(
        dir,
        &[
            (
                "hvdctl.yaml",
                "name: bk\nimage: hvdctl-test/buildkit\ncommand: [/bin/true]\n",
            ),
            (
                "Dockerfile",
                &format!(
                    "FROM {}\nCOPY . /ctx\nRUN cd /ctx && stat -c '%a %F %h %N' run.sh secret.key suid link empty private private/f hard && cat link\n",
                    busybox_image()
                ),
            ),
            (".dockerignore", ".hvdctl\n"),
            ("run.sh", "#!/bin/sh\necho run\n"),
            ("secret.key", "k\n"),
            ("suid", "s\n"),
            ("private/f", "f\n"),
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode("run.sh", 0o750);
    mode("secret.key", 0o600);
    mode("suid", 0o4755);
    mode("private", 0o700);
    std::os::unix::fs::symlink("run.sh", dir.join("link")).unwrap();
    std::fs::hard_link(dir.join("suid"), dir.join("hard")).unwrap();
    std::fs::create_dir(dir.join("empty")).unwrap();
    mode("empty", 0o755);
    mode("private/f", 0o644);
    let out = build(
        dir,
        &host,
        &["--tag", "modes", "--no-cache", "--builder", "buildkit"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<String> = step_lines(&out.stderr, "RUN cd /ctx")
        .into_iter()
        .filter(|l| !l.starts_with("DONE"))
        .collect();
    assert_eq!(
        lines,
        [
            "750 regular file 1 run.sh",
            "600 regular file 1 secret.key",
            "4755 regular file 2 suid",
            "777 symbolic link 1 'link' -> 'run.sh'",
            "755 directory 2 empty",
            "700 directory 2 private",
            "644 regular file 1 private/f",
            "4755 regular file 2 hard",
            "#!/bin/sh",
            "echo run",
        ],
        "{}",
        out.stderr
    );
}

/// A real `ssh-agent` (its socket in `dir`), stopped when dropped.
struct Agent {
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl Agent {
    fn start(dir: &Path) -> Agent {
        let socket = dir.join("agent.sock");
        let mut child = std::process::Command::new("ssh-agent")
            .args(["-D", "-a"])
            .arg(&socket)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("ssh-agent (openssh-client)");
        // In the foreground it prints its environment once the socket is listening.
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut first,
        )
        .unwrap();
        assert!(first.starts_with("SSH_AUTH_SOCK="), "{first}");
        Agent { child, socket }
    }

    /// `ssh-add ARGS` against this agent: exit code and output.
    fn add(&self, args: &[&str]) -> (i32, String) {
        let o = std::process::Command::new("ssh-add")
            .args(args)
            .env("SSH_AUTH_SOCK", &self.socket)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code().unwrap_or(-1), text)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--ssh`: steps list and use the agent's key (by its default id and by another), cannot
/// remove it, and a required mount whose id was not given fails its step, named.
#[test]
fn an_ssh_agent_is_lent_read_only_to_its_steps() {
    let Some(docker) = docker() else { return };
    let Some(base) = horovod_base(&docker) else {
        return;
    };
    let Some((_, host)) = rt().block_on(docker_with(&base)) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(tmp.path());
    let dir = tmp.path().join("app");
    std::fs::create_dir(&dir).unwrap();
    let key = dir.join("key");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "hvdctl-test", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let (code, out) = agent.add(&[key.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_file(&key).unwrap(); // only the public half is in the context
    let (_, listed) = agent.add(&["-l"]);
    let fingerprint = listed.split_whitespace().nth(1).unwrap().to_string();
    assert!(fingerprint.starts_with("SHA256:"), "{listed}");
    app(
        &dir,
        &format!(
            "FROM {base}\n\
             COPY key.pub /key.pub\n\
             RUN --mount=type=ssh ssh-add -l\n\
             RUN --mount=type=ssh,id=git echo data > /d && ssh-keygen -Y sign -n file -f /key.pub /d && head -1 /d.sig\n\
             RUN --mount=type=ssh ssh-add -D; echo \"remove: exit $?\"\n"
        ),
    );
    let socket = agent.socket.to_str().unwrap().to_string();
    let build_with = |ssh: &[&str]| {
        let mut c = hvdctl_in(&dir);
        c.env("DOCKER_HOST", &host)
            .env("SSH_AUTH_SOCK", &socket)
            .args(["build", "--progress", "plain", "--tag", "ssh", "--no-cache"])
            .args(ssh);
        run(c)
    };
    // The output of the step whose name holds `step` has a line holding `what`.
    let step_says = |out: &Out, step: &str, what: &str| {
        let lines = step_lines(&out.stderr, step);
        assert!(
            lines.iter().any(|l| l.contains(what)),
            "{step}: {lines:?}\n{}",
            out.stderr
        );
    };
    let out = build_with(&["--ssh", "default", "--ssh", &format!("git={socket}")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    step_says(&out, "ssh-add -l", &fingerprint);
    step_says(&out, "ssh-keygen -Y sign", "BEGIN SSH SIGNATURE");
    step_says(&out, "ssh-add -D", "remove: exit 1");
    // The agent still holds the key.
    let (code, after) = agent.add(&["-l"]);
    assert_eq!(code, 0, "{after}");
    assert!(after.contains(&fingerprint), "{after}");

    // A required mount whose id no --ssh gave: its step fails, naming the id (one that is
    // not required has no socket: BuildKit's rule).
    std::fs::write(
        dir.join("Dockerfile"),
        format!("FROM {base}\nRUN --mount=type=ssh,id=deploy,required ssh-add -l\n"),
    )
    .unwrap();
    let out = build_with(&["--ssh", "default"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("unset ssh forward key deploy"),
        "{}",
        out.stderr
    );
    // hvdctl.yaml's build.ssh gives it (what `dev`'s rebuilds use too), the flag the rest.
    let yaml = std::fs::read_to_string(dir.join("hvdctl.yaml")).unwrap();
    std::fs::write(
        dir.join("hvdctl.yaml"),
        format!("{yaml}build:\n  ssh: [\"deploy={socket}\"]\n"),
    )
    .unwrap();
    let out = build_with(&["--ssh", "default"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    step_says(&out, "ssh-add -l", &fingerprint);
    std::fs::write(dir.join("hvdctl.yaml"), yaml).unwrap();

    // Refused before anything is built: a key file, no agent at all, the classic builder.
    std::fs::write(dir.join("id_ed25519"), "not a socket").unwrap();
    for (args, env, says) in [
        (
            vec!["--ssh", "default=id_ed25519"],
            None,
            "not an ssh-agent's socket",
        ),
        (vec!["--ssh", "default"], None, "SSH_AUTH_SOCK is not set"),
        (
            vec!["--ssh", "default", "--builder", "legacy"],
            Some(socket.as_str()),
            "--ssh needs BuildKit",
        ),
    ] {
        let mut c = hvdctl_in(&dir);
        c.env("DOCKER_HOST", &host)
            .env_remove("SSH_AUTH_SOCK")
            .args(["build", "--tag", "ssh"])
            .args(&args);
        if let Some(s) = env {
            c.env("SSH_AUTH_SOCK", s);
        }
        let out = run(c);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}
