//! A corpus of bad inputs: each gives a clear error naming where, exit code 2, no panic, and
//! no file written.

use crate::util::*;
use std::path::Path;

const BASE: &str =
    "name: demo\nimage: example.com/demo\ncommand: [python3, /app/train.py]\nworkers: 2\n";

fn check(out: &Out, case: &str, needle: &str) {
    assert_eq!(
        out.code, 2,
        "{case}: exit {} (stderr: {})",
        out.code, out.stderr
    );
    assert!(
        out.stderr.starts_with("error:"),
        "{case}: stderr does not start with error: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("panicked"),
        "{case}: panic: {}",
        out.stderr
    );
    assert!(
        out.stdout.is_empty(),
        "{case}: printed to stdout: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains(needle),
        "{case}: expected {needle:?} in: {}",
        out.stderr
    );
}

/// Writes hvdctl.yaml, runs `deploy --dry-run` with extra args, checks the error and that the
/// app directory is untouched.
fn bad_app(tmp: &Path, case: &str, yaml: &str, args: &[&str], needle: &str) {
    let dir = tmp.join(case.replace([' ', '/'], "_"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hvdctl.yaml"), yaml).unwrap();
    let before = tree(&dir);
    let mut c = hvdctl();
    c.arg("-C")
        .arg(&dir)
        .args(["deploy", "--dry-run"])
        .args(args);
    check(&run(c), case, needle);
    assert_eq!(tree(&dir), before, "{case}: files changed");
}

#[test]
fn bad_app_files_and_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let with = |extra: &str| format!("{BASE}{extra}");
    let cases: Vec<(&str, String, Vec<&str>, &str)> = vec![
        (
            "malformed yaml",
            "name: [unclosed\n".into(),
            vec![],
            "hvdctl.yaml:",
        ),
        (
            "bad indentation",
            "name: a\n  image: b: c\n".into(),
            vec![],
            "invalid YAML",
        ),
        ("empty file", "".into(), vec![], "is empty"),
        (
            "list root",
            "- a\n- b\n".into(),
            vec![],
            "must be a mapping",
        ),
        (
            "duplicate key",
            with("workers: 3\n"),
            vec![],
            "duplicate key `workers`",
        ),
        (
            "unknown key",
            with("wrokers: 2\n"),
            vec![],
            "did you mean `workers`",
        ),
        (
            "nested unknown key",
            with("resources:\n  worker:\n    limit: {cpu: 1}\n"),
            vec![],
            "hvdctl.yaml:7:5: unknown key `limit`",
        ),
        (
            "zero workers",
            BASE.replace("workers: 2", "workers: 0"),
            vec![],
            "hvdctl.yaml:4:10: workers: must be at least 1",
        ),
        (
            "negative workers",
            BASE.replace("workers: 2", "workers: -1"),
            vec![],
            "hvdctl.yaml:4:10: workers",
        ),
        (
            "workers not a number",
            BASE.replace("workers: 2", "workers: many"),
            vec![],
            "expected a whole number",
        ),
        (
            "zero slots",
            with("slotsPerWorker: 0\n"),
            vec![],
            "slotsPerWorker: must be at least 1",
        ),
        (
            "uppercase name",
            BASE.replace("name: demo", "name: Bad_Name"),
            vec![],
            "hvdctl.yaml:1:7: name:",
        ),
        (
            "name starts with digit",
            BASE.replace("name: demo", "name: 1abc"),
            vec![],
            "not a valid app name",
        ),
        (
            "name too long",
            BASE.replace("name: demo", &format!("name: {}", "a".repeat(60))),
            vec![],
            "must be at most",
        ),
        (
            "bad image",
            BASE.replace("image: example.com/demo", "image: UPPER/Case"),
            vec![],
            "not a valid image reference",
        ),
        (
            "bad namespace",
            with("namespace: Bad NS\n"),
            vec![],
            "not a valid namespace name",
        ),
        (
            "bad cpu quantity",
            with("resources:\n  worker:\n    limits: {cpu: lots}\n"),
            vec![],
            "not a Kubernetes quantity",
        ),
        (
            "bad memory quantity",
            with("resources:\n  worker:\n    requests: {memory: 4GB}\n"),
            vec![],
            "`4GB` is not a Kubernetes quantity",
        ),
        (
            "request above limit",
            with("resources:\n  worker:\n    requests: {cpu: '4'}\n    limits: {cpu: '2'}\n"),
            vec![],
            "below the request",
        ),
        (
            "clean pod policy",
            with("runPolicy: {cleanPodPolicy: Sometimes}\n"),
            vec![],
            "Running, All, None",
        ),
        (
            "mpi implementation",
            with("mpi: {implementation: LAM}\n"),
            vec![],
            "OpenMPI, Intel, MPICH",
        ),
        (
            "mpi launcher",
            with("mpi: {launcher: srun}\n"),
            vec![],
            "mpirun, horovodrun",
        ),
        (
            "two volume sources",
            with(
                "volumes:\n- {name: d, mountPath: /d, pvc: {claimName: c}, nfs: {server: s, path: /p}}\n",
            ),
            vec![],
            "exactly one of pvc, nfs, hostPath",
        ),
        (
            "no volume source",
            with("volumes:\n- {name: d, mountPath: /d}\n"),
            vec![],
            "found 0",
        ),
        (
            "relative mount path",
            with("volumes:\n- {name: d, mountPath: data, pvc: {claimName: c}}\n"),
            vec![],
            "must be an absolute path",
        ),
        (
            "toleration operator",
            with("tolerations:\n- {key: k, operator: Maybe}\n"),
            vec![],
            "Equal, Exists",
        ),
        (
            "env name",
            with("env: {1BAD: x}\n"),
            vec![],
            "not a valid environment variable name",
        ),
        (
            "reserved label",
            with("labels: {hvdctl.io/run: mine}\n"),
            vec![],
            "cannot be overridden",
        ),
        (
            "elastic min above max",
            with("elastic: {minWorkers: 4, maxWorkers: 2}\nmpi: {launcher: horovodrun}\n"),
            vec![],
            "must be at least minWorkers",
        ),
        (
            "elastic with mpirun",
            with("elastic: {minWorkers: 1, maxWorkers: 4}\n"),
            vec![],
            "elastic runs need `horovodrun`",
        ),
        (
            "relative tensorboard log dir",
            with("tensorboard: {logDir: runs/tb}\n"),
            vec![],
            "tensorboard.logDir",
        ),
        (
            "tensorboard without logDir",
            with("tensorboard: {}\n"),
            vec![],
            "logDir",
        ),
        (
            "empty command",
            BASE.replace("command: [python3, /app/train.py]", "command: []"),
            vec![],
            "command: must name the program",
        ),
        (
            "negative uid",
            with("securityContext: {runAsUser: -5}\n"),
            vec![],
            "securityContext.runAsUser",
        ),
        (
            "parameter clashes with env",
            with("env: {EPOCHS: '1'}\nparameters: {epochs: 2}\n"),
            vec![],
            "also set in env",
        ),
        (
            "wrong type for map",
            with("env: [a, b]\n"),
            vec![],
            "expected a mapping",
        ),
        (
            "backend in the file",
            with("backend: bogus\n"),
            vec![],
            "backend: `bogus` is not one of mpijob, native, local",
        ),
        (
            "toleration effect",
            with("tolerations:\n- {key: k, effect: NoSchedul}\n"),
            vec![],
            "not one of NoSchedule, PreferNoSchedule, NoExecute (did you mean `NoSchedule`?)",
        ),
        (
            "host path type",
            with("volumes:\n- {name: d, mountPath: /d, hostPath: {path: /x, type: Dir}}\n"),
            vec![],
            "hvdctl.yaml:6:55: volumes[0].hostPath.type: `Dir` is not one of DirectoryOrCreate",
        ),
        (
            "set creates a nested unknown key",
            BASE.into(),
            vec!["--set", "resources.worker.limit.cpu=1"],
            "error: --set resources.worker.limit.cpu=1: unknown key `limit` in `resources.worker`",
        ),
        (
            "set creates an incomplete mapping",
            BASE.into(),
            vec!["--set", "elastic.minWorkers=2"],
            "error: --set elastic.minWorkers=2: `elastic` needs the key `maxWorkers`",
        ),
        (
            "set bad number",
            BASE.into(),
            vec!["--set", "workers=abc"],
            "--set workers=abc",
        ),
        (
            "set unknown key",
            BASE.into(),
            vec!["--set", "wrokers=3"],
            "--set wrokers=3",
        ),
        (
            "set past end of list",
            BASE.into(),
            vec!["--set", "volumes[5].name=x"],
            "past the end of the list",
        ),
        (
            "set empty key",
            BASE.into(),
            vec!["--set", "=x"],
            "--set =x",
        ),
        (
            "set without value",
            BASE.into(),
            vec!["--set", "novalue"],
            "expected KEY=VALUE",
        ),
        (
            "set into a string",
            BASE.into(),
            vec!["--set", "name.sub=1"],
            "not a mapping",
        ),
        (
            "set bad path",
            BASE.into(),
            vec!["--set", "env..X=1"],
            "empty path segment",
        ),
        (
            "bad backend flag",
            BASE.into(),
            vec!["--backend", "bogus"],
            "invalid value 'bogus'",
        ),
        (
            "bad run id",
            BASE.into(),
            vec!["--run-id", "BAD!"],
            "--run-id",
        ),
        (
            "bad image flag",
            BASE.into(),
            vec!["--image", "Bad Image"],
            "--image Bad Image",
        ),
        (
            "bad namespace flag",
            BASE.into(),
            vec!["-n", "Bad_NS"],
            "-n Bad_NS",
        ),
    ];
    assert!(cases.len() >= 30);
    for (case, yaml, args, needle) in &cases {
        bad_app(t, case, yaml, args, needle);
    }
}

#[test]
fn every_problem_is_listed_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!("{BASE}wrokers: 2\nmpi: {{implementation: LAM}}\nslotsPerWorker: 0\n");
    let args = [
        "--set",
        "gpusPerWorker=many",
        "--set",
        "resources.worker.limit.cpu=1",
    ];
    bad_app(
        tmp.path(),
        "several",
        &yaml,
        &args,
        "hvdctl.yaml:5:1: unknown key `wrokers`",
    );
    let dir = tmp.path().join("several");
    let mut c = hvdctl();
    c.arg("-C")
        .arg(&dir)
        .args(["deploy", "--dry-run"])
        .args(args);
    let o = run(c);
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| !l.starts_with("  hint:"))
        .collect();
    let file = dir.join("hvdctl.yaml").display().to_string();
    let expected = [
        format!("error: {file}:5:1: unknown key `wrokers`"),
        format!("{file}:6:23: mpi.implementation: `LAM` is not one of OpenMPI, Intel, MPICH"),
        format!("{file}:7:17: slotsPerWorker: must be at least 1"),
        "--set gpusPerWorker=many: gpusPerWorker: invalid type: string \"many\", expected a whole number (0 or more)".into(),
        "--set resources.worker.limit.cpu=1: unknown key `limit` in `resources.worker`".into(),
    ];
    assert_eq!(lines, expected, "{}", o.stderr);
}

#[test]
fn missing_app_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = hvdctl();
    c.arg("-C").arg(tmp.path()).args(["deploy", "--dry-run"]);
    check(&run(c), "no hvdctl.yaml", "no hvdctl.yaml in");
    assert!(tree(tmp.path()).is_empty());
}

#[test]
fn bad_init_requests_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let occupied = t.join("occupied");
    std::fs::create_dir_all(&occupied).unwrap();
    std::fs::write(occupied.join("notes.txt"), "mine").unwrap();
    std::fs::write(t.join("a-file"), "x").unwrap();
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "unknown template",
            vec![
                "init".into(),
                t.join("n1").display().to_string(),
                "--template".into(),
                "horovd".into(),
            ],
            "did you mean `horovod`",
        ),
        (
            "non-empty dir",
            vec!["init".into(), occupied.display().to_string()],
            "is not empty",
        ),
        (
            "bad name",
            vec![
                "init".into(),
                t.join("n2").display().to_string(),
                "--name".into(),
                "Bad_Name".into(),
            ],
            "--name Bad_Name",
        ),
        (
            "bad image",
            vec![
                "init".into(),
                t.join("n3").display().to_string(),
                "--image".into(),
                "UP".into(),
            ],
            "--image UP",
        ),
        (
            "missing template dir",
            vec![
                "init".into(),
                t.join("n4").display().to_string(),
                "--template-dir".into(),
                t.join("nope").display().to_string(),
            ],
            "nope",
        ),
        (
            "target is a file",
            vec!["init".into(), t.join("a-file").display().to_string()],
            "is not a directory",
        ),
        (
            "underivable name",
            vec!["init".into(), t.join("___").display().to_string()],
            "pass --name",
        ),
    ];
    let before = tree(t);
    for (case, args, needle) in &cases {
        let mut c = hvdctl();
        c.args(args).arg("--no-input");
        check(&run(c), case, needle);
        assert_eq!(tree(t), before, "{case}: files changed");
    }
    assert_eq!(
        std::fs::read_to_string(occupied.join("notes.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn broken_user_templates_are_input_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // A user's catalog whose hvdctl.yaml.hbs renders an invalid app.
    let cat = tmp.path().join("catalog/broken");
    std::fs::create_dir_all(&cat).unwrap();
    std::fs::write(cat.join("template.yaml"), "description: broken\n").unwrap();
    std::fs::write(
        cat.join("hvdctl.yaml.hbs"),
        "name: {{name}}\nimage: {{image}}\ncommand: [x]\nworkers: 0\n",
    )
    .unwrap();
    let target = tmp.path().join("out");
    let mut c = hvdctl();
    c.arg("init")
        .arg(&target)
        .args(["--template", "broken", "--template-dir"])
        .arg(tmp.path().join("catalog"));
    check(
        &run(c),
        "template renders a bad app",
        "workers: must be at least 1",
    );
    assert!(!target.exists());

    // User-edited manifest templates: an unknown field, raw output, a missing value.
    let dir = init_app(tmp.path(), "edited", "mpi-hello");
    let tpl = dir.join("k8s/native.yaml.hbs");
    let orig = std::fs::read_to_string(&tpl).unwrap();
    for (case, text, needle) in [
        (
            "unknown field",
            orig.replace(
                "restartPolicy: OnFailure",
                "restartPolicy: OnFailure\n  hostNetwrk: true",
            ),
            "`spec.hostNetwrk`",
        ),
        (
            "raw output",
            orig.replace("{{job.name}}", "{{{job.name}}}"),
            "raw output",
        ),
        (
            "missing value",
            orig.replace("{{job.name}}", "{{job.nam}}"),
            "/k8s/native.yaml.hbs:12:9: `job.nam` is not a template value\n  hint: did you mean `job.name`?",
        ),
        (
            "misspelt value in a comment",
            orig.replace("{{json workers}}", "{{json wrkers}}").replace(
                "subdomain: {{job.name}}",
                "subdomain: {{job.name}}\n  # {{wrkers}}",
            ),
            "`wrkers` is not a template value\n  hint: did you mean `workers`?",
        ),
        (
            "value in an anchor",
            orig.replace("clusterIP: None", "clusterIP: &{{job.name}} None"),
            "outside a YAML scalar",
        ),
        (
            "not yaml",
            orig.replace("clusterIP: None", "clusterIP: [None"),
            "not valid YAML",
        ),
    ] {
        std::fs::write(&tpl, &text).unwrap();
        let mut c = hvdctl();
        c.arg("-C")
            .arg(&dir)
            .args(["deploy", "--dry-run", "--backend", "native"]);
        check(&run(c), case, needle);
    }
}
