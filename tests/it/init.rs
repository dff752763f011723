//! `init`, `templates`, `completions`, `--version`: the scaffolding contract.

use crate::util::*;

#[test]
fn init_in_the_current_directory_names_the_app_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("My_Project");
    std::fs::create_dir_all(dir.join(".git")).unwrap(); // dotfiles only: still "empty"
    std::fs::write(dir.join(".envrc"), "x").unwrap();
    let mut c = hvdctl();
    // No --no-input and no CI, but stdin is not a terminal: defaults, never a prompt.
    c.env_remove("CI")
        .current_dir(&dir)
        .args(["init", "--template", "horovod"])
        .write_stdin("");
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let yaml = std::fs::read_to_string(dir.join("hvdctl.yaml")).unwrap();
    assert!(yaml.contains("name: \"my-project\""), "{yaml}");
    assert!(yaml.contains("image: \"my-project\""), "{yaml}");
    for f in [
        "Dockerfile",
        ".dockerignore",
        "README.md",
        "train.py",
        "k8s/mpijob.yaml.hbs",
        "k8s/native.yaml.hbs",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    assert!(
        !dir.join("template.yaml").exists(),
        "catalog metadata is not app content"
    );
    // The scaffolded app deploys (dry run) as it is.
    let mut c = hvdctl();
    c.current_dir(&dir).args(["deploy", "--dry-run"]);
    assert_eq!(run(c).code, 0);
}

#[test]
fn template_defaults_to_horovod_and_flags_fill_values() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = hvdctl();
    c.arg("init").arg(tmp.path().join("x")).args([
        "--name",
        "mnist",
        "--image",
        "registry.example.com/ml/mnist",
        "--no-input",
    ]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let yaml = std::fs::read_to_string(tmp.path().join("x/hvdctl.yaml")).unwrap();
    assert!(
        yaml.contains("name: \"mnist\"")
            && yaml.contains("image: \"registry.example.com/ml/mnist\"")
    );
    assert!(
        tmp.path().join("x/train.py").is_file(),
        "the default template is horovod (PyTorch)"
    );
}

#[test]
fn force_writes_into_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", "mpi-hello", "--no-input", "--force"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stderr.contains("replaced"),
        "nothing was replaced: {}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );
    // Again: now every file of the template is replaced, and each is listed.
    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", "mpi-hello", "--no-input", "--force"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for f in [
        "Dockerfile",
        "hello.py",
        "hvdctl.yaml",
        "k8s/native.yaml.hbs",
    ] {
        let line = format!("replaced {}", dir.join(f).display());
        assert!(o.stderr.lines().any(|l| l == line), "{line}: {}", o.stderr);
    }
    assert!(dir.join("hello.py").is_file());
}

#[test]
fn dotfiles_the_template_writes_are_never_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dots");
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join(".dockerignore"), "mine\n").unwrap();
    std::fs::write(dir.join(".envrc"), "export X=1\n").unwrap();
    let before = tree(&dir);
    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", "mpi-hello", "--no-input"]);
    let o = run(c);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("already has .dockerignore") && o.stderr.contains("--force"),
        "{}",
        o.stderr
    );
    assert_eq!(tree(&dir), before, "nothing written");
    assert_eq!(
        std::fs::read_to_string(dir.join(".dockerignore")).unwrap(),
        "mine\n"
    );

    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", "mpi-hello", "--no-input", "--force"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let replaced: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("replaced "))
        .collect();
    assert_eq!(
        replaced,
        [format!("replaced {}", dir.join(".dockerignore").display())],
        "{}",
        o.stderr
    );
    assert_ne!(
        std::fs::read_to_string(dir.join(".dockerignore")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(".envrc")).unwrap(),
        "export X=1\n",
        "files the template does not write are kept"
    );
}

#[cfg(unix)]
#[test]
fn force_replaces_a_symlink_not_what_it_points_to() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside.txt");
    std::fs::write(&outside, "precious\n").unwrap();
    let dir = tmp.path().join("linked");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join(".dockerignore")).unwrap();
    let mut c = hvdctl();
    c.arg("init")
        .arg(&dir)
        .args(["--template", "mpi-hello", "--no-input", "--force"]);
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("replaced "), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious\n");
    assert!(
        !std::fs::symlink_metadata(dir.join(".dockerignore"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn app_names_from_directories_keep_their_digits() {
    let tmp = tempfile::tempdir().unwrap();
    for (dir, name) in [
        ("resnet50", "resnet50"),
        ("resnet101", "resnet101"),
        ("app-v2", "app-v2"),
        ("bert_base_2", "bert-base-2"),
    ] {
        let d = init_app(tmp.path(), dir, "mpi-hello");
        let yaml = std::fs::read_to_string(d.join("hvdctl.yaml")).unwrap();
        assert!(
            yaml.contains(&format!("name: \"{name}\"\n")),
            "{dir}: {yaml}"
        );
        let mut c = hvdctl();
        c.arg("-C")
            .arg(&d)
            .args(["deploy", "--dry-run", "-o", "json", "--run-id", "ab12c"]);
        let o = run(c);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout.contains(&format!("\"hvdctl.io/app\": \"{name}\"")),
            "{dir}"
        );
    }
}

#[test]
fn templates_lists_the_catalog() {
    let o = run({
        let mut c = hvdctl();
        c.args(["templates", "-o", "json"]);
        c
    });
    assert_eq!(o.code, 0);
    let v: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).unwrap();
    let names: Vec<&str> = v.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "horovod",
            "horovod-elastic",
            "horovod-tensorflow",
            "mpi-hello"
        ]
    );
    assert!(
        v.iter()
            .all(|t| !t["description"].as_str().unwrap().is_empty())
    );
    let text = run({
        let mut c = hvdctl();
        c.arg("templates");
        c
    });
    assert_eq!(text.stdout.lines().count(), 4);
}

#[test]
fn a_users_own_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let cat = tmp.path().join("cat/tiny");
    std::fs::create_dir_all(cat.join("src")).unwrap();
    std::fs::write(cat.join("template.yaml"), "description: the smallest app\n").unwrap();
    std::fs::write(
        cat.join("hvdctl.yaml.hbs"),
        "name: {{name}}\nimage: {{image}}\ncommand: [/bin/true]\n",
    )
    .unwrap();
    std::fs::write(cat.join("src/main.sh"), "echo {{not rendered}}\n").unwrap();
    // Not YAML: values as they are, no quoting.
    std::fs::write(
        cat.join("README.md.hbs"),
        "# {{name}}\n\nBuilt as `{{image}}:latest`, job `{{name}}-<run id>`.\n",
    )
    .unwrap();
    std::fs::write(cat.join("run.sh.hbs"), "#!/bin/sh\nexec {{name}} \"$@\"\n").unwrap();
    let mut c = hvdctl();
    c.arg("init")
        .arg(tmp.path().join("t"))
        .args(["--template", "tiny", "--no-input", "--template-dir"])
        .arg(tmp.path().join("cat"));
    let o = run(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("t/src/main.sh")).unwrap(),
        "echo {{not rendered}}\n"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("t/README.md")).unwrap(),
        "# t\n\nBuilt as `t:latest`, job `t-<run id>`.\n"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("t/run.sh")).unwrap(),
        "#!/bin/sh\nexec t \"$@\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("t/hvdctl.yaml")).unwrap(),
        "name: \"t\"\nimage: \"t\"\ncommand: [/bin/true]\n"
    );
    assert!(
        tmp.path().join("t/k8s/native.yaml.hbs").is_file(),
        "shared manifest templates are added"
    );
}

#[test]
fn version_and_completions() {
    let o = run({
        let mut c = hvdctl();
        c.arg("--version");
        c
    });
    assert_eq!(o.code, 0);
    assert!(o.stdout.starts_with("hvdctl "));
    for shell in ["bash", "zsh", "fish"] {
        let o = run({
            let mut c = hvdctl();
            c.args(["completions", shell]);
            c
        });
        assert_eq!(o.code, 0);
        // The script asks hvdctl itself for completions as the user types.
        assert!(
            o.stdout.contains("COMPLETE") && o.stdout.contains("hvdctl"),
            "{shell}: {}",
            o.stdout
        );
    }
}

#[test]
fn the_debian_base_replaces_the_dockerfile_of_horovod_apps_only() {
    let tmp = tempfile::tempdir().unwrap();
    for t in ["horovod", "horovod-elastic", "horovod-tensorflow"] {
        let dir = tmp.path().join(t);
        let o = run({
            let mut c = hvdctl();
            c.arg("init")
                .arg(&dir)
                .args(["--template", t, "--base", "debian", "--no-input"]);
            c
        });
        assert_eq!(o.code, 0, "{}", o.stderr);
        let docker = std::fs::read_to_string(dir.join("Dockerfile")).unwrap();
        assert!(
            docker.contains("Horovod 0.28.1 source distribution"),
            "{t}: {docker}"
        );
        assert!(docker.contains("FROM ${BASE_IMAGE} AS horovod"), "{t}");
        let yaml = std::fs::read_to_string(dir.join("hvdctl.yaml")).unwrap();
        assert!(yaml.contains("BASE_IMAGE: debian:bookworm"), "{t}: {yaml}");
        assert!(!yaml.contains("horovod/horovod:0.28.1"), "{t}: {yaml}");
        // The Dockerfile builds one framework: the TensorFlow app asks for TensorFlow.
        assert_eq!(
            yaml.contains("FRAMEWORK: tensorflow"),
            t == "horovod-tensorflow",
            "{t}: {yaml}"
        );
    }
    let o = run({
        let mut c = hvdctl();
        c.arg("init").arg(tmp.path().join("m")).args([
            "--template",
            "mpi-hello",
            "--base",
            "debian",
            "--no-input",
        ]);
        c
    });
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("the mpi-hello template has no Debian base"),
        "{}",
        o.stderr
    );
    assert!(!tmp.path().join("m").exists(), "nothing written");
}

/// hvdctl as kubectl's plugin, as krew installs one: `kubectl-hvd` on PATH, a link to the
/// built binary. The real kubectl finds it (`kubectl plugin list`) and runs it for `kubectl hvd
/// …`: `version --client` and, against a fake cluster, `version` answer; help, usage lines and
/// errors say `kubectl hvd`; and with `kubectl_complete-hvd` beside it, kubectl's own
/// completion (`kubectl __complete hvd …`, what its shell scripts call) completes hvdctl's
/// commands and flags. Run as `hvdctl`, everything still says `hvdctl`.
#[test]
fn kubectl_runs_hvdctl_as_its_hvd_plugin() {
    if !kubectl_available() {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let hvdctl_bin = assert_cmd::cargo::cargo_bin("hvdctl");
    for name in ["kubectl-hvd", "kubectl_complete-hvd"] {
        std::os::unix::fs::symlink(&hvdctl_bin, bin.path().join(name)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |kubeconfig: Option<&std::path::Path>, args: &[&str]| -> Out {
        let mut c = std::process::Command::new("kubectl");
        c.args(args)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env("CI", "true")
            .env("HOME", bin.path())
            .env_remove("KUBECONFIG");
        if let Some(kc) = kubeconfig {
            c.env("KUBECONFIG", kc);
        }
        run(assert_cmd::Command::from_std(c))
    };
    let o = kubectl(None, &["plugin", "list"]);
    assert!(
        o.stdout.contains("kubectl-hvd"),
        "{}\n{}",
        o.stdout,
        o.stderr
    );

    let o = kubectl(None, &["hvd", "version", "--client"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains(env!("CARGO_PKG_VERSION")), "{}", o.stdout);
    let cluster = Cluster::synthetic(true);
    let o = kubectl(Some(&cluster.kubeconfig), &["hvd", "version", "-o", "json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(v["server"].is_string(), "{v}");
    assert_eq!(v["mpiJobVersions"], serde_json::json!(["v2beta1"]), "{v}");

    let o = kubectl(None, &["hvd", "--help"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("Usage: kubectl hvd [OPTIONS] [COMMAND]"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("kubectl hvd init mnist --template horovod"),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains("hvdctl init"), "{}", o.stdout);
    for (sub, usage) in [
        ("logs", "Usage: kubectl hvd logs [OPTIONS] [RUN]"),
        ("cp", "Usage: kubectl hvd cp [OPTIONS] [RUN] SRC DEST"),
        ("exec", "kubectl hvd exec -- nvidia-smi"),
    ] {
        let o = kubectl(None, &["hvd", sub, "--help"]);
        assert_eq!(o.code, 0, "{sub}: {}", o.stderr);
        assert!(o.stdout.contains(usage), "{sub}: {}", o.stdout);
    }
    let o = kubectl(None, &["hvd", "--no-such-flag"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("Usage: kubectl hvd [OPTIONS] [COMMAND]"),
        "{}",
        o.stderr
    );
    let o = kubectl(None, &["hvd", "completions", "bash"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("kubectl_complete-hvd") && o.stdout.contains("kubectl completion bash"),
        "{}",
        o.stdout
    );

    // kubectl's completion of the plugin's words, through kubectl_complete-hvd.
    let o = kubectl(None, &["__complete", "hvd", "lo"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.lines().any(|l| l.starts_with("logs")),
        "{}\n{}",
        o.stdout,
        o.stderr
    );
    let o = kubectl(None, &["__complete", "hvd", "logs", "--fo"]);
    assert!(
        o.stdout.lines().any(|l| l.starts_with("--follow")),
        "{}\n{}",
        o.stdout,
        o.stderr
    );

    // Run as hvdctl, it is hvdctl.
    let o = run({
        let mut c = hvdctl();
        c.arg("--help");
        c
    });
    assert!(
        o.stdout.contains("Usage: hvdctl [OPTIONS] [COMMAND]")
            && o.stdout.contains("hvdctl init mnist"),
        "{}",
        o.stdout
    );
}
