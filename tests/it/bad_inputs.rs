//! A corpus of bad inputs, one row each: the files of an app directory, the command line,
//! the exit code and the first line of the error. Every row is run and checked on its own and
//! the failures are reported together; each checks that nothing was written anywhere under
//! the test's directory. Rows with exit 0 hold inputs that look odd but are right.

use crate::util::*;
use std::path::Path;
use std::time::Duration;

const BASE: &str =
    "name: demo\nimage: example.com/demo\ncommand: [python3, /app/train.py]\nworkers: 2\n";

/// A kubeconfig naming one context, `real` (namespace `ml`), whose server is never contacted
/// by the rows that use it.
const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: real\n  context: {cluster: c, user: u, namespace: ml}\ncurrent-context: real\n";

/// One row of the corpus.
struct Case {
    name: String,
    /// Files of the row's app directory (`{dir}`), written before anything runs.
    files: Vec<(String, Vec<u8>)>,
    /// The command line: `{dir}` is the row's directory, `{root}` the test's.
    args: Vec<String>,
    /// Environment variables: the same placeholders.
    env: Vec<(String, String)>,
    code: i32,
    /// Part of the first line of stderr.
    first: String,
    /// Somewhere in stderr (a hint).
    also: Option<String>,
    /// Nowhere in stdout or stderr.
    never: Option<String>,
    /// Files of the row's directory that are not data: FIFOs, symbolic links, sparse files.
    specials: Vec<(String, Special)>,
}

/// A file no reader should wait on or read whole.
#[derive(Clone)]
enum Special {
    /// A named pipe nobody writes to: an open for reading that blocks never returns.
    Fifo,
    /// A symbolic link to this target (e.g. `/dev/zero`, endless).
    Link(String),
    /// A sparse file of this many bytes (a GiB costs no disk).
    Sized(u64),
}

impl Case {
    fn also(mut self, s: &str) -> Case {
        self.also = Some(s.into());
        self
    }
    fn never(mut self, s: &str) -> Case {
        self.never = Some(s.into());
        self
    }
    fn env(mut self, k: &str, v: &str) -> Case {
        self.env.push((k.into(), v.into()));
        self
    }
    fn file(mut self, path: &str, data: impl Into<Vec<u8>>) -> Case {
        self.files.push((path.into(), data.into()));
        self
    }
    /// `path` as a FIFO (replacing a file of that name given before).
    fn fifo(mut self, path: &str) -> Case {
        self.files.retain(|(p, _)| p != path);
        self.specials.push((path.into(), Special::Fifo));
        self
    }
    /// `path` as a symbolic link to `target` (replacing a file of that name given before).
    fn link(mut self, path: &str, target: &str) -> Case {
        self.files.retain(|(p, _)| p != path);
        self.specials
            .push((path.into(), Special::Link(target.into())));
        self
    }
    /// `path` as a sparse file of `len` bytes (replacing a file of that name given before).
    fn sized(mut self, path: &str, len: u64) -> Case {
        self.files.retain(|(p, _)| p != path);
        self.specials.push((path.into(), Special::Sized(len)));
        self
    }
}

/// A row running `hvdctl ARGS` with `hvdctl.yaml` holding `yaml` (none when `None`).
fn cmd(name: &str, yaml: Option<&[u8]>, args: &[&str], code: i32, first: &str) -> Case {
    Case {
        name: name.into(),
        files: yaml
            .map(|y| vec![("hvdctl.yaml".to_string(), y.to_vec())])
            .unwrap_or_default(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: Vec::new(),
        code,
        first: first.into(),
        also: None,
        never: None,
        specials: Vec::new(),
    }
}

/// A row running `hvdctl -C DIR deploy --dry-run ARGS` on an app file.
fn dry(name: &str, yaml: impl AsRef<[u8]>, args: &[&str], code: i32, first: &str) -> Case {
    let mut all = vec!["-C", "{dir}", "deploy", "--dry-run"];
    all.extend_from_slice(args);
    cmd(name, Some(yaml.as_ref()), &all, code, first)
}

fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

/// Runs every row; returns what went wrong, one entry per failed row.
fn run_cases(root: &Path, cases: &[Case]) -> Vec<String> {
    let dir_of = |i: usize| root.join(format!("case-{i:03}"));
    for (i, c) in cases.iter().enumerate() {
        let dir = dir_of(i);
        std::fs::create_dir_all(&dir).unwrap();
        for (path, data) in &c.files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        }
        for (path, special) in &c.specials {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            match special {
                Special::Fifo => {
                    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
                }
                Special::Link(target) => std::os::unix::fs::symlink(target, &p).unwrap(),
                Special::Sized(len) => std::fs::File::create(&p).unwrap().set_len(*len).unwrap(),
            }
        }
    }
    let before = tree(root);
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let dir = dir_of(i);
        let fill = |s: &str| {
            s.replace("{dir}", &dir.display().to_string())
                .replace("{root}", &root.display().to_string())
        };
        let mut command = hvdctl();
        command.current_dir(&dir);
        for (k, v) in &c.env {
            command.env(k, fill(v));
        }
        command.args(c.args.iter().map(|a| fill(a)));
        // A row is a second's work: one that hangs (a FIFO read) is killed and fails.
        let o = run_for(command, Duration::from_secs(60));
        let mut wrong = Vec::new();
        let first = o.stderr.lines().next().unwrap_or_default();
        if o.code != c.code {
            wrong.push(format!("exit {} (want {})", o.code, c.code));
        }
        if !first.contains(&fill(&c.first)) {
            wrong.push(format!("first line lacks {:?}", fill(&c.first)));
        }
        if c.code != 0 && !o.stderr.starts_with("error:") {
            wrong.push("stderr does not start with `error:`".into());
        }
        if c.code != 0 && !o.stdout.is_empty() {
            wrong.push("printed to stdout".into());
        }
        if let Some(a) = &c.also
            && !o.stderr.contains(&fill(a))
        {
            wrong.push(format!("stderr lacks {:?}", fill(a)));
        }
        if let Some(n) = &c.never
            && (o.stderr.contains(n.as_str()) || o.stdout.contains(n.as_str()))
        {
            wrong.push(format!("says {n:?}"));
        }
        if o.stderr.contains("panicked") {
            wrong.push("panicked".into());
        }
        let after = tree(root);
        if after != before {
            let made: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
            let gone: Vec<&String> = before.iter().filter(|p| !after.contains(p)).collect();
            wrong.push(format!("files changed: made {made:?}, removed {gone:?}"));
            // Put the tree back so the next rows are judged on their own.
            for p in made.iter().rev() {
                let p = root.join(p);
                let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{} (`hvdctl {}`): {}\n  stderr: {}",
                c.name,
                c.args.join(" "),
                wrong.join("; "),
                o.stderr.trim_end().replace('\n', "\n          ")
            ));
        }
    }
    failures
}

/// The alias bomb of the bug report: each level a list of nine aliases of the one before.
fn alias_bomb(levels: usize) -> String {
    let mut s = String::from(BASE);
    s.push_str("x0: &x0 [a, a, a, a, a, a, a, a, a]\n");
    for i in 1..levels {
        let p = i - 1;
        s.push_str(&format!(
            "x{i}: &x{i} [*x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}, *x{p}]\n"
        ));
    }
    s
}

#[test]
fn bad_inputs_each_give_their_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::write(root.join("kubeconfig"), KUBECONFIG).unwrap();
    std::fs::write(root.join("a-file"), "x").unwrap();
    std::fs::write(
        root.join("kubeconfig-password"),
        KUBECONFIG.replace("https://127.0.0.1:1", "https://user:PASSWORD@127.0.0.1:1"),
    )
    .unwrap();
    let kc = ("KUBECONFIG", "{root}/kubeconfig");
    let nfs = with("volumes:\n- {name: d, mountPath: /d, nfs: {server: s, path: /p}}\n");
    let vol = |path: &str| {
        with(&format!(
            "volumes:\n- {{name: d, mountPath: {path}, pvc: {{claimName: c}}}}\n"
        ))
    };
    let long_name = "a".repeat(100);
    let mut cases = vec![
        // --- the app file as a file --------------------------------------------------------
        cmd("no hvdctl.yaml", None, &["deploy", "--dry-run"], 2, "no hvdctl.yaml in"),
        dry("malformed yaml", "name: [unclosed\n", &[], 2, "hvdctl.yaml:"),
        dry("bad indentation", "name: a\n  image: b: c\n", &[], 2, "invalid YAML"),
        dry("empty file", "", &[], 2, "is empty"),
        dry("list root", "- a\n- b\n", &[], 2, "must be a mapping"),
        dry("duplicate key", with("workers: 3\n"), &[], 2, "hvdctl.yaml:5:1: invalid YAML: duplicate key `workers`"),
        dry("binary file", b"\x00\x01\x02\x03\x04".as_slice(), &[], 2, "hvdctl.yaml: not text (YAML): byte 0 (line 1, column 1) is 0x00")
            .never("is empty"),
        dry("control character", "name: demo\nimage: a\x07\n", &[], 2, "byte 19 (line 2, column 9) is 0x07, a control character"),
        dry("not UTF-8", b"name: demo\nimage: \xff\xfe\n".as_slice(), &[], 2, "byte 18 (line 2, column 8) is 0xff, not UTF-8"),
        dry("byte order mark", format!("\u{feff}{BASE}"), &[], 0, "").never("\u{feff}"),
        dry("byte order mark and a typo", format!("\u{feff}{BASE}wrokers: 2\n"), &[], 2, "hvdctl.yaml:5:1: unknown key `wrokers`")
            .never("\\ufeff"),
        dry("larger than 128 KiB", format!("{BASE}{}", "# padding\n".repeat(13_200)), &[], 2, "larger than 128 KiB"),
        cmd("hvdctl.yaml is a directory", None, &["deploy", "--dry-run"], 2, "is a directory")
            .file("hvdctl.yaml/x", "x"),
        // --- aliases and nesting: refused while reading -------------------------------------
        dry("alias bomb, 9 levels", alias_bomb(9), &[], 2, "hvdctl.yaml:9:10: invalid YAML: aliases nested 4 deep"),
        dry("alias bomb, 7 levels", alias_bomb(7), &[], 2, "aliases nested 4 deep").never("unknown key"),
        dry("101 aliases", format!("{BASE}x: &x a\ny: [{}]\n", vec!["*x"; 101].join(", ")), &[], 2, "more than 100 aliases"),
        dry("aliases expanding to 12000 values", format!("{BASE}x: &x [{}]\ny: [{}]\n", vec!["a"; 199].join(", "), vec!["*x"; 60].join(", ")), &[], 2, "would expand to more than 10000 values"),
        dry("an alias used as it should be", with("resources:\n  worker:\n    requests: &r {cpu: '1', memory: 1Gi}\n    limits: *r\n"), &[], 0, ""),
        dry("nesting 10 deep", format!("{BASE}x: {}{}\n", "[".repeat(10), "]".repeat(10)), &[], 2, "hvdctl.yaml:5:11: invalid YAML: mappings and lists nested more than 8 deep"),
        dry("11000 values", format!("{BASE}x: [{}]\n", vec!["a"; 11_000].join(", ")), &[], 2, "more than 10000 values; an app file holds a few hundred"),
        dry("anchors nested in anchors", format!("{BASE}x: {}{}{}\n", (0..7).map(|i| format!("&a{i} [")).collect::<String>(), vec!["a"; 2000].join(", "), "]".repeat(7)), &[], 2, "anchors (`&name`) hold more than 10000 values together"),
        // --- keys and values ----------------------------------------------------------------
        dry("unknown key", with("wrokers: 2\n"), &[], 2, "hvdctl.yaml:5:1: unknown key `wrokers`").also("did you mean `workers`"),
        dry("nested unknown key", with("resources:\n  worker:\n    limit: {cpu: 1}\n"), &[], 2, "hvdctl.yaml:7:5: unknown key `limit`"),
        dry("missing name", "image: example.com/demo\ncommand: [x]\n", &[], 2, "hvdctl.yaml: the app needs the key `name`")
            .never("1:6"),
        dry("missing key of a mapping", with("elastic:\n  minWorkers: 1\nmpi: {launcher: horovodrun}\n"), &[], 2, "hvdctl.yaml:5:1: `elastic` needs the key `maxWorkers`"),
        dry("zero workers", BASE.replace("workers: 2", "workers: 0"), &[], 2, "hvdctl.yaml:4:10: workers: must be at least 1"),
        dry("negative workers", BASE.replace("workers: 2", "workers: -3"), &[], 2, "hvdctl.yaml:4:10: workers: must be at least 1 (not -3)")
            .never("0 or more"),
        dry("workers beyond 64 bits", BASE.replace("workers: 2", "workers: 99999999999999999999"), &[], 2, "workers: `99999999999999999999` is too large (at most 10000)")
            .never("floating point"),
        dry("workers beyond 32 bits", BASE.replace("workers: 2", "workers: 5000000000"), &[], 2, "workers: `5000000000` is too large (at most 10000)"),
        dry("workers above the most", BASE.replace("workers: 2", "workers: 10001"), &[], 2, "workers: must be at most 10000"),
        dry("negative slots", with("slotsPerWorker: -1\n"), &[], 2, "slotsPerWorker: must be at least 1 (not -1)"),
        dry("negative gpus", with("gpusPerWorker: -2\n"), &[], 2, "gpusPerWorker: must be at least 0 (not -2)"),
        dry("workers not a number", BASE.replace("workers: 2", "workers: many"), &[], 2, "expected a whole number"),
        dry("zero slots", with("slotsPerWorker: 0\n"), &[], 2, "slotsPerWorker: must be at least 1"),
        dry("uppercase name", BASE.replace("name: demo", "name: Bad_Name"), &[], 2, "hvdctl.yaml:1:7: name:"),
        dry("name starts with digit", BASE.replace("name: demo", "name: 1abc"), &[], 2, "not a valid app name"),
        dry("name too long", BASE.replace("name: demo", &format!("name: {}", "a".repeat(60))), &[], 2, "must be at most"),
        dry("name of 100 characters", BASE.replace("name: demo", &format!("name: {long_name}")), &[], 2, "is 100 characters")
            .never("use lowercase"),
        dry("bad image", BASE.replace("image: example.com/demo", "image: UPPER/Case"), &[], 2, "not a valid image reference"),
        dry("bad namespace", with("namespace: Bad NS\n"), &[], 2, "not a valid namespace name"),
        dry("bad cpu quantity", with("resources:\n  worker:\n    limits: {cpu: lots}\n"), &[], 2, "not a Kubernetes quantity"),
        dry("bad memory quantity", with("resources:\n  worker:\n    requests: {memory: 4GB}\n"), &[], 2, "`4GB` is not a Kubernetes quantity"),
        dry("request above limit", with("resources:\n  worker:\n    requests: {cpu: '4'}\n    limits: {cpu: '2'}\n"), &[], 2, "resources.worker.requests.cpu: the API server would refuse it: Invalid value: \"4\": must be less than or equal to cpu limit of 2"),
        // --- what the API server refuses and a schema check passes (pkg/apis/core/validation) ---
        dry("hugepages without cpu or memory", with("resources:\n  worker:\n    limits: {hugepages-2Mi: 4Mi}\n"), &[], 2, "hvdctl.yaml:7:11: resources.worker: the API server would refuse it: Forbidden: HugePages require cpu or memory"),
        dry("hugepages request unlike its limit", with("resources:\n  worker:\n    requests: {hugepages-2Mi: 2Mi, memory: 1Gi}\n    limits: {hugepages-2Mi: 4Mi}\n"), &[], 2, "resources.worker.requests.hugepages-2Mi: the API server would refuse it: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi"),
        dry("extended resource request unlike its limit", with("resources:\n  worker:\n    requests: {example.com/foo: 2}\n    limits: {example.com/foo: 1}\n"), &[], 2, "must be equal to example.com/foo limit of 1"),
        dry("extended resource requested without a limit", with("resources:\n  worker:\n    requests: {example.com/fpga: 1}\n"), &[], 2, "Limit must be set for non overcommitable resources"),
        dry("half an extended resource", with("resources:\n  worker:\n    limits: {example.com/foo: 0.5}\n"), &[], 2, "the API server would refuse it: Invalid value: \"0.5\": must be an integer"),
        dry("toleration value that is not a label value", with("tolerations: [{key: k, value: not a label}]\n"), &[], 2, "tolerations[0].value: is not a label value, which the API server requires"),
        dry("claim of size 0", with("storage: [{name: data, size: 0, mountPath: /data}]\n"), &[], 2, "storage[0].size: the API server would refuse the claim: Invalid value: \"0\": must be greater than zero"),
        dry("ReadWriteOncePod beside another access mode", with("storage: [{name: data, size: 1Gi, mountPath: /data, accessModes: [ReadWriteOncePod, ReadWriteOnce]}]\n"), &[], 2, "storage[0].accessModes: the API server would refuse the claim: Forbidden: may not use ReadWriteOncePod with other access modes"),
        dry("annotations over 256 KiB together", BASE, &["--set", &format!("annotations.a={}", "x".repeat(100_000)), "--set", &format!("annotations.b={}", "x".repeat(100_000)), "--set", &format!("annotations.c={}", "x".repeat(100_000))], 2, "annotations: 300003 bytes together: the API server takes at most 262144 bytes"),
        dry("a template making two objects of one kind and name", BASE, &[], 2, "k8s/mpijob.yaml.hbs: the rendered objects cannot be applied as they are:")
            .also("ConfigMap extra: the template makes two objects of this kind and name")
            .file("k8s/mpijob.yaml.hbs", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: '1'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: '2'}\n"),
        // --- resource names -------------------------------------------------------------------
        dry("resource cpuu", with("resources:\n  worker:\n    requests:\n      cpuu: 250m\n"), &[], 2, "hvdctl.yaml:8:13: resources.worker.requests.cpuu: `cpuu` is not a resource name")
            .also("did you mean `cpu`?"),
        dry("resource memroy", with("resources:\n  worker:\n    requests:\n      memroy: 512Mi\n"), &[], 2, "resources.worker.requests.memroy: `memroy` is not a resource name")
            .also("did you mean `memory`?"),
        dry("resource memroy on the local backend", with("backend: local\nresources:\n  worker:\n    limits:\n      memroy: 512Mi\n"), &[], 2, "`memroy` is not a resource name"),
        dry("resource typo by --set", BASE, &["--set", "resources.launcher.limits.cpuu=1"], 2, "--set resources.launcher.limits.cpuu=1: resources.launcher.limits.cpuu: `cpuu` is not a resource name"),
        dry("resource in the kubernetes.io domain", with("resources:\n  worker:\n    limits: {kubernetes.io/gpu: 1}\n"), &[], 2, "is not a resource name: an extended resource is named by its vendor's domain"),
        dry("hugepages without a size", with("resources:\n  worker:\n    limits: {hugepages-big: 1}\n"), &[], 2, "a hugepages resource is `hugepages-<size>`"),
        dry("every kind of resource name", with("resources:\n  worker:\n    requests: {cpu: 1, memory: 1Gi, ephemeral-storage: 1Gi}\n    limits: {nvidia.com/gpu: 1, hugepages-2Mi: 4Mi, example.com/fpga: 1}\n"), &[], 0, ""),
        // --- policies, sets -------------------------------------------------------------------
        dry("clean pod policy", with("runPolicy: {cleanPodPolicy: Sometimes}\n"), &[], 2, "Running, All, None"),
        dry("mpi implementation", with("mpi: {implementation: LAM}\n"), &[], 2, "OpenMPI, Intel, MPICH"),
        dry("mpi launcher", with("mpi: {launcher: srun}\n"), &[], 2, "mpirun, horovodrun"),
        dry("toleration operator", with("tolerations:\n- {key: k, operator: Maybe}\n"), &[], 2, "Equal, Exists"),
        dry("toleration effect", with("tolerations:\n- {key: k, effect: NoSchedul}\n"), &[], 2, "not one of NoSchedule, PreferNoSchedule, NoExecute (did you mean `NoSchedule`?)"),
        dry("backend in the file", with("backend: bogus\n"), &[], 2, "backend: `bogus` is not one of mpijob, native, trainjob, local"),
        // --- volumes ----------------------------------------------------------------------------
        dry("two volume sources", with("volumes:\n- {name: d, mountPath: /d, pvc: {claimName: c}, nfs: {server: s, path: /p}}\n"), &[], 2, "exactly one of pvc, nfs, hostPath"),
        dry("no volume source", with("volumes:\n- {name: d, mountPath: /d}\n"), &[], 2, "found none"),
        dry("relative mount path", vol("data"), &[], 2, "must be an absolute path"),
        dry("host path type", with("volumes:\n- {name: d, mountPath: /d, hostPath: {path: /x, type: Dir}}\n"), &[], 2, "hvdctl.yaml:6:55: volumes[0].hostPath.type: `Dir` is not one of DirectoryOrCreate"),
        dry("volume at /etc/mpi", vol("/etc/mpi"), &[], 2, "hvdctl.yaml:6:24: volumes[0].mountPath: `/etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("volume under /etc/mpi", vol("/etc/mpi/extra"), &[], 2, "clashes with hvdctl's own mount at /etc/mpi"),
        dry("volume at /etc/hvdctl/ssh", vol("/etc/hvdctl/ssh/"), &[], 2, "clashes with hvdctl's own mount at /etc/hvdctl"),
        dry("volume at root's .ssh", vol("/root/.ssh"), &[], 2, "clashes with hvdctl's own mount at /root/.ssh (the ssh keys (mpi.sshAuthMountPath))"),
        dry("volume at the non-root .ssh", format!("{}securityContext: {{runAsUser: 1000}}\n", vol("/home/mpiuser/.ssh")), &[], 2, "clashes with hvdctl's own mount at /home/mpiuser/.ssh"),
        dry("volume at sshAuthMountPath", format!("{}mpi: {{sshAuthMountPath: /keys}}\n", vol("/keys")), &[], 2, "clashes with hvdctl's own mount at /keys"),
        dry("volume by --set at /etc/mpi", BASE, &["--set", "volumes[0].name=d", "--set", "volumes[0].mountPath=/etc/mpi", "--set", "volumes[0].pvc.claimName=c"], 2, "--set volumes[0].mountPath=/etc/mpi: volumes[0].mountPath: `/etc/mpi` clashes"),
        dry("volume beside hvdctl's paths", vol("/etc/mpi-data"), &[], 0, ""),
        dry("volume at /etc/mpi through ..", vol("/data/../etc/mpi"), &[], 2, "volumes[0].mountPath: `/data/../etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("volume at //etc/mpi", vol("//etc/mpi"), &[], 2, "volumes[0].mountPath: `//etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("volume at /etc/./mpi", vol("/etc/./mpi"), &[], 2, "volumes[0].mountPath: `/etc/./mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("storage under /etc/hvdctl through ..", with("storage: [{name: data, size: 1Gi, mountPath: /x/../etc/hvdctl/y}]\n"), &[], 2, "storage[0].mountPath: `/x/../etc/hvdctl/y` clashes with hvdctl's own mount at /etc/hvdctl"),
        dry("sshAuthMountPath at /etc/mpi", with("mpi: {sshAuthMountPath: /etc/mpi}\n"), &[], 2, "mpi.sshAuthMountPath: `/etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("sshAuthMountPath at /etc/mpi through ..", with("mpi: {sshAuthMountPath: /root/../etc/mpi}\n"), &[], 2, "mpi.sshAuthMountPath: `/root/../etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("two volumes at one path, written apart", with("volumes:\n- {name: a, mountPath: /d, emptyDir: {}}\n- {name: b, mountPath: /x/../d/, emptyDir: {}}\n"), &[], 2, "volumes[1].mountPath: `/x/../d/` is mounted by another volume"),
        dry("hostPath with ..", with("volumes:\n- {name: d, mountPath: /d, hostPath: {path: /srv/../etc}}\n"), &[], 2, "volumes[0].hostPath.path: `/srv/../etc` must not contain `..`"),
        dry("set past end of a list", format!("{}\n", vol("/d").trim_end()), &["--set", "volumes[5].readOnly=true"], 2, "--set volumes[5].readOnly=true: `volumes[5]` is past the end of the list (1 items; use [1] to append)")
            .never("invalid type: null"),
        dry("set past end of no list", BASE, &["--set", "volumes[5].readOnly=true"], 2, "--set volumes[5].readOnly=true: `volumes[5]` is past the end of the list (0 items")
            .never("invalid type: null"),
        dry("set empties nfs.server", nfs.clone(), &["--set", "volumes[0].nfs.server="], 2, "--set volumes[0].nfs.server=: volumes[0].nfs.server: must not be empty")
            .never("hvdctl.yaml:"),
        dry("relative nfs path", nfs.replace("/p}", "p}"), &[], 2, "hvdctl.yaml:6:51: volumes[0].nfs.path: `p` must be an absolute path"),
        // --- pod options: pull policy, shm, Secret/ConfigMap/emptyDir volumes, storage, ssh port --
        dry("pull policy misspelt", BASE, &["--set", "imagePullPolicy=never"], 2, "--set imagePullPolicy=never: imagePullPolicy: `never` is not one of Always, IfNotPresent, Never (did you mean `Never`?)"),
        dry("pull policy Always on local", BASE, &["--backend", "local", "--set", "imagePullPolicy=Always"], 2, "error: --set imagePullPolicy=Always: imagePullPolicy `Always`: the local backend never pulls").also("(backend local, from --backend)"),
        dry("shm not a quantity", with("shm: 2GB\n"), &[], 2, "hvdctl.yaml:5:6: shm: `2GB` is not a Kubernetes quantity"),
        dry("volume at /dev/shm with shm", with("shm: 1Gi\nvolumes: [{name: s, mountPath: /dev/shm, emptyDir: {}}]\n"), &[], 2, "volumes[0].mountPath: clashes with `shm`, which mounts /dev/shm"),
        dry("two sources", with("volumes: [{name: s, mountPath: /s, emptyDir: {}, secret: {secretName: x}}]\n"), &[], 2, "volume `s` needs exactly one of pvc, nfs, hostPath, secret, configMap, emptyDir (found secret, emptyDir)"),
        dry("secret name", BASE, &["--set", "volumes[0]={name: s, mountPath: /s, secret: {secretName: Bad_Name}}"], 2, "volumes[0].secret.secretName: `Bad_Name` is not a valid secret name"),
        dry("secret mode 0999", with("volumes: [{name: s, mountPath: /s, secret: {secretName: x, defaultMode: 0999}}]\n"), &[], 2, "volumes[0].secret.defaultMode: `0999` is not a file mode between 0000 and 0777"),
        dry("configMap item path with ..", with("volumes: [{name: c, mountPath: /c, configMap: {name: x, items: [{key: k, path: ../k}]}}]\n"), &[], 2, "volumes[0].configMap.items[0].path: `../k` must be a relative path without `..`"),
        dry("secret on local", with("volumes: [{name: s, mountPath: /s, secret: {secretName: aws}}]\n"), &["--backend", "local"], 2, "hvdctl.yaml:5:11: volume `s` (volumes[].secret) mounts the Secret `aws`: the local backend has no Kubernetes Secrets or ConfigMaps"),
        dry("emptyDir medium misspelt", with("volumes: [{name: m, mountPath: /m, emptyDir: {medium: memory}}]\n"), &[], 2, "`memory` is not one of Memory, HugePages (did you mean `Memory`?)"),
        dry("storage size", BASE, &["--set", "storage[0]={name: data, size: lots, mountPath: /data}"], 2, "storage[0].size: `lots` is not a Kubernetes quantity"),
        dry("storage access mode", with("storage: [{name: data, size: 1Gi, mountPath: /data, accessModes: [ReadWriteSometimes]}]\n"), &[], 2, "`ReadWriteSometimes` is not one of ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod"),
        dry("storage at /etc/mpi", with("storage: [{name: data, size: 1Gi, mountPath: /etc/mpi}]\n"), &[], 2, "storage[0].mountPath: `/etc/mpi` clashes with hvdctl's own mount at /etc/mpi"),
        dry("storage on local", with("storage: [{name: data, size: 1Gi, mountPath: /data}]\n"), &["--backend", "local"], 2, "hvdctl.yaml:5:11: storage `data`: the local backend has no PersistentVolumeClaims to create"),
        dry("pvc on local, the second volume", with("volumes:\n- {name: w, mountPath: /w, emptyDir: {}}\n- {name: v, mountPath: /v, pvc: {claimName: c}}\n"), &["--backend", "local"], 2, "hvdctl.yaml:7:3: volume `v` is a PersistentVolumeClaim (pvc)"),
        dry("ssh port 0", BASE, &["--set", "mpi.sshPort=0"], 2, "--set mpi.sshPort=0: mpi.sshPort: must be between 1 and 65535"),
        dry("ssh port too big", BASE, &["--set", "mpi.sshPort=70000"], 2, "--set mpi.sshPort=70000: mpi.sshPort:"),
        dry("ssh port with Hydra under the operator", BASE, &["--backend", "mpijob", "--set", "mpi.implementation=MPICH", "--set", "mpi.sshPort=2200"], 2, "error: --set mpi.sshPort=2200: mpi.sshPort: the mpijob backend's launcher has no ssh_config hvdctl writes").also("(backend mpijob, from --backend)"),
        dry("ssh port with Hydra, the default backend", with("mpi:\n  implementation: MPICH\n  sshPort: 2200\n"), &[], 2, "hvdctl.yaml:7:12: mpi.sshPort: the mpijob backend's launcher").also("(backend mpijob, the default)"),
        dry("ssh port with Hydra on native", BASE, &["--backend", "native", "--set", "mpi.implementation=MPICH", "--set", "mpi.sshPort=2200"], 0, ""),
        // --- queues: Kueue (queue) and Volcano (scheduling.volcano) ---------------------------------
        dry("queue empty", with("queue: ''\n"), &[], 2, "hvdctl.yaml:5:8: queue: must not be empty"),
        dry("queue not a name", with("queue: Team_A\n"), &[], 2, "queue: `Team_A` is not a valid LocalQueue name"),
        dry("queue too long", BASE, &["--set", &format!("queue={}", "q".repeat(64))], 2, "queue: `qqqq"),
        dry("queue on local", with("queue: team-a\n"), &["--backend", "local"], 2, "hvdctl.yaml:5:8: queue `team-a`: a Kueue LocalQueue applies to Kubernetes backends").also("remove `queue` for local runs"),
        dry("queue on local, the backend in the file", with("queue: team-a\nbackend: local\n"), &[], 2, "hvdctl.yaml:5:8: queue `team-a`: a Kueue LocalQueue").also("(backend local, from {dir}/hvdctl.yaml:6:10)"),
        dry("volcano on local", with("scheduling: {volcano: {}}\n"), &["--backend", "local"], 2, "hvdctl.yaml:5:23: scheduling.volcano: Volcano applies to Kubernetes backends"),
        dry("queue and volcano together", with("queue: team-a\nscheduling: {volcano: {queue: q}}\n"), &[], 2, "scheduling.volcano: cannot be used together with `queue`: a run waits in one queue system").also("not both"),
        dry("volcano key misspelt", with("scheduling: {volcano: {minAvaliable: 2}}\n"), &[], 2, "minAvaliable"),
        dry("volcano minAvailable 0", with("scheduling: {volcano: {minAvailable: 0}}\n"), &[], 2, "scheduling.volcano.minAvailable: must be"),
        dry("volcano minAvailable above the pods", with("scheduling: {volcano: {minAvailable: 4}}\n"), &[], 2, "scheduling.volcano.minAvailable: 4 is more than the run's 3 pods (2 workers and the launcher)"),
        dry("volcano minAvailable a word", with("scheduling: {volcano: {minAvailable: all}}\n"), &[], 2, "scheduling.volcano.minAvailable"),
        dry("volcano queue empty", with("scheduling: {volcano: {queue: ''}}\n"), &[], 2, "scheduling.volcano.queue: must not be empty"),
        dry("volcano queue not a name", with("scheduling: {volcano: {queue: 'a b'}}\n"), &[], 2, "scheduling.volcano.queue: `a b` is not a valid Volcano queue name"),
        dry("volcano priorityClass not a name", with("scheduling: {volcano: {priorityClass: High}}\n"), &[], 2, "scheduling.volcano.priorityClass: `High` is not a valid PriorityClass name"),
        dry("volcano minAvailable under trainjob", with("scheduling: {volcano: {minAvailable: 2}}\n"), &["--backend", "trainjob"], 2, "hvdctl.yaml:5:38: scheduling.volcano.minAvailable: 2: under the trainjob backend Kubeflow Trainer v2.3 makes the PodGroup with every pod a member (3 here)"),
        dry("volcano priorityClass with a named runtime", with("trainjob: {runtime: mpi}\nscheduling: {volcano: {priorityClass: high}}\n"), &["--backend", "trainjob"], 2, "scheduling.volcano.priorityClass: high: the PodGroup's priority comes from the pod templates of runtime `mpi`"),
        dry("queue by --set", BASE, &["--set", "queue=team-a"], 0, ""),
        dry("volcano with every key", with("scheduling: {volcano: {queue: q1, minAvailable: 3, priorityClass: high}}\n"), &["--backend", "native"], 0, ""),
        // --- env and parameters -----------------------------------------------------------------
        dry("env name", with("env: {1BAD: x}\n"), &[], 2, "not a valid environment variable name"),
        dry("env HVDCTL_RUN", with("env:\n  HVDCTL_RUN: mine\n"), &[], 2, "hvdctl.yaml:6:15: env.HVDCTL_RUN: `HVDCTL_RUN` is reserved: hvdctl sets the HVDCTL_* variables itself"),
        dry("env HVDCTL_SSH_PORT by --set", BASE, &["--set", "env.HVDCTL_SSH_PORT=2200"], 2, "--set env.HVDCTL_SSH_PORT=2200: env.HVDCTL_SSH_PORT: `HVDCTL_SSH_PORT` is reserved"),
        dry("env HVDCTL_DISCOVERY_RECHECK, the user's to tune", with("env: {HVDCTL_DISCOVERY_RECHECK: '5'}\n"), &[], 0, ""),
        dry("parameter named into HVDCTL_", with("parameters: {hvdctl-run: x}\n"), &[], 2, "its environment variable `HVDCTL_RUN` is reserved"),
        dry("parameter clashes with env", with("env: {EPOCHS: '1'}\nparameters: {epochs: 2}\n"), &[], 2, "also set in env"),
        dry("two parameters, one variable", with("parameters: {a.b: 1, a-b: 2}\n"), &[], 2, "hvdctl.yaml:5:19: parameters[\"a.b\"]: its environment variable `A_B` is also the one of parameters.a-b; keep one"),
        dry("two parameters, one variable by case", with("parameters: {lr: 1, LR: 2}\n"), &[], 2, "parameters.lr: its environment variable `LR` is also the one of parameters.LR"),
        dry("env TENSORBOARD_LOG_DIR with tensorboard", with("env: {TENSORBOARD_LOG_DIR: /x}\ntensorboard: {logDir: /tb}\n"), &[], 2, "env.TENSORBOARD_LOG_DIR: `TENSORBOARD_LOG_DIR` is also set by `tensorboard.logDir`"),
        dry("env HOROVOD_TIMELINE with timeline", with("env: {HOROVOD_TIMELINE: /x}\ntimeline: true\n"), &[], 2, "env.HOROVOD_TIMELINE: `HOROVOD_TIMELINE` is set by `timeline`; keep one"),
        dry("env HOROVOD_TIMELINE with --timeline", with("env: {HOROVOD_TIMELINE: /x}\n"), &["--timeline"], 2, "--timeline sets `HOROVOD_TIMELINE`, which hvdctl.yaml's `env` sets too"),
        dry("timeline not a boolean", with("timeline: yes please\n"), &[], 2, "expected true, false or a mapping such as {markCycles: true}"),
        dry("timeline unknown key", with("timeline: {markCycle: true}\n"), &[], 2, "unknown key `markCycle` in `timeline`"),
        dry("parameter TENSORBOARD_LOG_DIR with tensorboard", with("parameters: {tensorboard_log_dir: /x}\ntensorboard: {logDir: /tb}\n"), &[], 2, "parameters.tensorboard_log_dir: its environment variable `TENSORBOARD_LOG_DIR` is also set by `tensorboard.logDir`"),
        dry("reserved label", with("labels: {hvdctl.io/run: mine}\n"), &[], 2, "cannot be overridden"),
        dry("wrong type for map", with("env: [a, b]\n"), &[], 2, "expected a mapping"),
        // --- elastic, tensorboard, command, security ------------------------------------------
        dry("elastic min above max", with("elastic: {minWorkers: 4, maxWorkers: 2}\nmpi: {launcher: horovodrun}\n"), &[], 2, "workers: must be between elastic.minWorkers (4) and elastic.maxWorkers (2)").also("elastic.maxWorkers: must be at least minWorkers (4)"),
        dry("elastic with mpirun", with("elastic: {minWorkers: 1, maxWorkers: 4}\n"), &[], 2, "elastic runs need `horovodrun`"),
        dry("relative tensorboard log dir", with("tensorboard: {logDir: runs/tb}\n"), &[], 2, "tensorboard.logDir"),
        dry("tensorboard without logDir", with("tensorboard: {}\n"), &[], 2, "logDir"),
        dry("empty command", BASE.replace("command: [python3, /app/train.py]", "command: []"), &[], 2, "command: must name the program"),
        dry("negative uid", with("securityContext: {runAsUser: -5}\n"), &[], 2, "securityContext.runAsUser"),
        // --- --set ------------------------------------------------------------------------------
        dry("set creates a nested unknown key", BASE, &["--set", "resources.worker.limit.cpu=1"], 2, "error: --set resources.worker.limit.cpu=1: unknown key `limit` in `resources.worker`"),
        dry("set creates an incomplete mapping", BASE, &["--set", "elastic.minWorkers=2"], 2, "error: --set elastic.minWorkers=2: `elastic` needs the key `maxWorkers`"),
        dry("set bad number", BASE, &["--set", "workers=abc"], 2, "--set workers=abc"),
        dry("set negative number", BASE, &["--set", "workers=-1"], 2, "--set workers=-1: workers: must be at least 1 (not -1)"),
        dry("set unknown key", BASE, &["--set", "wrokers=3"], 2, "--set wrokers=3"),
        dry("set empty key", BASE, &["--set", "=x"], 2, "--set =x"),
        dry("set without value", BASE, &["--set", "novalue"], 2, "expected KEY=VALUE"),
        dry("set into a string", BASE, &["--set", "name.sub=1"], 2, "not a mapping"),
        dry("set bad path", BASE, &["--set", "env..X=1"], 2, "empty path segment"),
        // --- deploy's flags -----------------------------------------------------------------------
        dry("bad backend flag", BASE, &["--backend", "bogus"], 2, "invalid value 'bogus'"),
        dry("bad run id", BASE, &["--run-id", "BAD!"], 2, "--run-id"),
        dry("bad image flag", BASE, &["--image", "Bad Image"], 2, "--image Bad Image"),
        dry("bad namespace flag", BASE, &["-n", "Bad_NS"], 2, "-n Bad_NS"),
        dry("--dry-run with an unknown context", BASE, &["--context", "nosuch"], 2, "context `nosuch` is not in the kubeconfig")
            .env(kc.0, kc.1).also("pick one with --context: real"),
        cmd("--dry-run=server with an unknown context", Some(BASE.as_bytes()), &["-C", "{dir}", "deploy", "--dry-run=server", "--context", "nosuch"], 2, "context `nosuch` is not in the kubeconfig")
            .env(kc.0, kc.1),
        dry("--dry-run with a misspelt context", BASE, &["--context", "reel"], 2, "context `reel` is not in the kubeconfig")
            .env(kc.0, kc.1).also("did you mean `real`?"),
        dry("--dry-run with a context and no kubeconfig", BASE, &["--context", "nope"], 2, "context `nope` (--context) cannot be used: no kubeconfig: KUBECONFIG is not set"),
        dry("--dry-run with a known context", BASE, &["--context", "real"], 0, "").env(kc.0, kc.1),
        // --- files that are not files, or too large: refused at once, never waited on ---------
        cmd("hvdctl.yaml is a FIFO", None, &["-C", "{dir}", "deploy", "--dry-run"], 2, "{dir}/hvdctl.yaml is a FIFO (named pipe), not a regular file: the app file is read only from a file")
            .fifo("hvdctl.yaml"),
        cmd("hvdctl.yaml is /dev/zero", None, &["-C", "{dir}", "deploy", "--dry-run"], 2, "{dir}/hvdctl.yaml is a character device, not a regular file")
            .link("hvdctl.yaml", "/dev/zero"),
        dry("template is a FIFO", BASE, &[], 2, "{dir}/k8s/mpijob.yaml.hbs is a FIFO (named pipe), not a regular file: a manifest template is read only from a file")
            .fifo("k8s/mpijob.yaml.hbs"),
        dry("template is /dev/zero", BASE, &["--backend", "native"], 2, "{dir}/k8s/native.yaml.hbs is a character device, not a regular file")
            .link("k8s/native.yaml.hbs", "/dev/zero"),
        dry("template of 1 GiB", BASE, &[], 2, "{dir}/k8s/mpijob.yaml.hbs: larger than 1 MiB; a manifest template is a few KiB, so this one is not read")
            .sized("k8s/mpijob.yaml.hbs", 1 << 30),
        cmd("--kubeconfig is a FIFO", Some(BASE.as_bytes()), &["-C", "{dir}", "status", "--kubeconfig", "{dir}/kc"], 2, "{dir}/kc is a FIFO (named pipe), not a regular file: a kubeconfig is read only from a file")
            .fifo("kc"),
        cmd("KUBECONFIG is a FIFO", Some(BASE.as_bytes()), &["-C", "{dir}", "status"], 2, "{dir}/kc is a FIFO (named pipe), not a regular file")
            .env("KUBECONFIG", "{dir}/kc").fifo("kc"),
        cmd("KUBECONFIG is /dev/zero", Some(BASE.as_bytes()), &["-C", "{dir}", "deploy", "--dry-run"], 2, "{dir}/kc is a character device, not a regular file")
            .env("KUBECONFIG", "{dir}/kc").link("kc", "/dev/zero"),
        cmd("KUBECONFIG of 1 GiB", Some(BASE.as_bytes()), &["-C", "{dir}", "status"], 2, "{dir}/kc: larger than 16 MiB; a kubeconfig is a few KiB per cluster")
            .env("KUBECONFIG", "{dir}/kc").sized("kc", 1 << 30),
        // --- -v: the cause under the error ----------------------------------------------------
        cmd("-v: a file error's cause", Some(BASE.as_bytes()), &["-v", "-C", "{dir}", "deploy", "--dry-run"], 2, "error: cannot read {dir}/hvdctl.yaml: Input/output error")
            .link("hvdctl.yaml", "/proc/self/mem").also("  caused by: Input/output error (os error 5)"),
        dry("a bad image recorded by build", BASE, &[], 2, "error: {dir}/.hvdctl/image.json: image `UPPER/Case` (recorded by the last `hvdctl build`) is not a valid image reference")
            .file(".hvdctl/image.json", r#"{"image": "UPPER/Case", "built": "2026-11-26T00:00:00Z"}"#)
            .also("run `hvdctl build` again").never("--image"),
        dry(".hvdctl/image.json is a FIFO", BASE, &[], 2, "{dir}/.hvdctl/image.json is a FIFO (named pipe), not a regular file")
            .fifo(".hvdctl/image.json"),
        dry(".hvdctl/image.json is /dev/zero", BASE, &[], 2, "{dir}/.hvdctl/image.json is a character device, not a regular file")
            .link(".hvdctl/image.json", "/dev/zero"),
        dry(".hvdctl/image.json of 1 GiB", BASE, &[], 2, "{dir}/.hvdctl/image.json: larger than 4 MiB")
            .sized(".hvdctl/image.json", 1 << 30),
        cmd("init: a template's template.yaml is a FIFO", None, &["init", "{root}/n7", "--template", "t", "--template-dir", "{dir}/cat", "--no-input"], 2, "{dir}/cat/t/template.yaml is a FIFO (named pipe), not a regular file")
            .fifo("cat/t/template.yaml"),
        // --- bytes no terminal should get: shown escaped; NUL refused where it goes -----------
        dry("escape in the name", BASE.replace("name: demo", "name: \"\\e[2J\\e[H\""), &[], 2, "hvdctl.yaml:1:7: name: `\\x1b[2J\\x1b[H` is not a valid app name")
            .never("\x1b"),
        dry("escape in an unknown key", with("\"\\e[2J\": 1\n"), &[], 2, "unknown key `\\x1b[2J`")
            .never("\x1b"),
        dry("escape by --set", BASE, &["--set", "name=\x1b[2J\r"], 2, "--set name=\\x1b[2J\\r: name: `\\x1b[2J\\r`")
            .never("\x1b"),
        dry("C1 control in an env name", with("env: {\"A\\u009bB\": x}\n"), &[], 2, "`A\\u{9b}B` is not a valid environment variable name")
            .never("\u{9b}"),
        dry("NUL in an env value", with("env: {A: \"a\\0b\"}\n"), &[], 2, "hvdctl.yaml:5:10: env.A: contains a NUL character"),
        dry("NUL in a parameter", with("parameters: {lr: \"0.1\\0\"}\n"), &[], 2, "hvdctl.yaml:5:18: parameters.lr: contains a NUL character"),
        dry("NUL in args", with("args: [--epochs, \"3\\0\"]\n"), &[], 2, "hvdctl.yaml:5:18: args[1]: contains a NUL character"),
        dry("NUL in command", BASE.replace("/app/train.py]", "\"/app/train\\0.py\"]"), &[], 2, "hvdctl.yaml:3:20: command[1]: contains a NUL character"),
        dry("NUL in mpi.extraArgs", with("mpi: {extraArgs: [\"-x\\0\"]}\n"), &[], 2, "mpi.extraArgs[0]: contains a NUL character"),
        // --- secrets in addresses: never printed ---------------------------------------------------
        cmd("DOCKER_HOST with a password over tcp", Some(BASE.as_bytes()), &["-C", "{dir}", "build"], 2, "DOCKER_HOST=tcp://***@127.0.0.1:1: a user or password in a tcp:// address is not supported")
            .env("DOCKER_HOST", "tcp://user:PASSWORD@127.0.0.1:1").never("PASSWORD").file("Dockerfile", "FROM scratch\n"),
        cmd("DOCKER_HOST with a password over ssh", Some(BASE.as_bytes()), &["-C", "{dir}", "build"], 2, "DOCKER_HOST=ssh://***@build.example: a password in an ssh:// address is not supported")
            .env("DOCKER_HOST", "ssh://user:PASSWORD@build.example").never("PASSWORD").file("Dockerfile", "FROM scratch\n"),
        cmd("kubeconfig server with a password, unreachable", Some(BASE.as_bytes()), &["-C", "{dir}", "deploy", "--dry-run=server"], 1, "https://***@127.0.0.1:1")
            .env("KUBECONFIG", "{root}/kubeconfig-password").never("PASSWORD"),
        // --- other commands -------------------------------------------------------------------------
        cmd("-C a directory that is not there", None, &["-C", "{root}/nonexistent", "deploy", "--dry-run"], 2, "-C {root}/nonexistent: no such directory"),
        cmd("-C a file", None, &["-C", "{root}/a-file", "status"], 2, "-C {root}/a-file: not a directory"),
        cmd("status with a context and no kubeconfig", Some(BASE.as_bytes()), &["status", "--context", "nope"], 2, "context `nope` (--context) cannot be used: no kubeconfig")
            .never("no runs"),
        cmd("runs with a context and no kubeconfig", Some(BASE.as_bytes()), &["runs", "--context", "nope"], 2, "context `nope` (--context) cannot be used: no kubeconfig")
            .never("No runs"),
        cmd("undeploy --all -y with a context and no kubeconfig", Some(BASE.as_bytes()), &["undeploy", "--all", "-y", "--context", "nope"], 2, "context `nope` (--context) cannot be used: no kubeconfig")
            .never("Nothing to delete"),
        cmd("undeploy --all without -y and no terminal", Some(BASE.as_bytes()), &["undeploy", "--all"], 2, "--all deletes every run of the app and needs a confirmation")
            .also("add --yes (-y)"),
        cmd("undeploy --all without -y, before reading a broken app", Some(b"name: [".as_slice()), &["undeploy", "--all"], 2, "needs a confirmation"),
        cmd("scale to 0 workers", Some(BASE.as_bytes()), &["scale", "--workers", "0"], 2, "invalid value '0' for '--workers <N>': must be at least 1"),
        cmd("scale to -1 workers", Some(BASE.as_bytes()), &["scale", "--workers", "-1"], 2, "invalid value '-1' for '--workers <N>': must be at least 1")
            .never("-- -1"),
        cmd("logs --rank -1", Some(BASE.as_bytes()), &["logs", "--rank", "-1"], 2, "invalid value '-1' for '--rank <N>': must be 0 or more")
            .never("-- -1"),
        cmd("exec --index -1", Some(BASE.as_bytes()), &["exec", "--index", "-1", "--", "ls"], 2, "invalid value '-1' for '--index <I>': must be 0 or more")
            .never("-- -1"),
        cmd("port-forward --index -2", Some(BASE.as_bytes()), &["port-forward", "--index", "-2", "8080"], 2, "invalid value '-2' for '--index <I>': must be 0 or more"),
        cmd("dev --debounce -5", Some(BASE.as_bytes()), &["dev", "--debounce", "-5"], 2, "invalid value '-5' for '--debounce <MS>': must be 10 to 10000")
            .never("-- -5"),
        cmd("logs --rank of another kind", Some(BASE.as_bytes()), &["logs", "--rank", "x"], 2, "invalid value 'x' for '--rank <N>': not a whole number"),
        cmd("-V after a subcommand", Some(BASE.as_bytes()), &["deploy", "-V"], 2, "unexpected argument '-V'"),
        // --- init ---------------------------------------------------------------------------------
        cmd("init: unknown template", None, &["init", "{root}/n1", "--template", "horovd", "--no-input"], 2, "unknown template `horovd`")
            .also("did you mean `horovod`"),
        cmd("init: non-empty dir", None, &["init", "{dir}", "--no-input"], 2, "is not empty").file("notes.txt", "mine"),
        cmd("init: bad name", None, &["init", "{root}/n2", "--name", "Bad_Name", "--no-input"], 2, "--name Bad_Name"),
        cmd("init: name of 100 characters", None, &["init", "{root}/n3", "--name", &long_name, "--no-input"], 2, "100 characters is too long: an app name is at most 48")
            .never("use lowercase"),
        cmd("init: bad image", None, &["init", "{root}/n4", "--image", "UP", "--no-input"], 2, "--image UP"),
        cmd("init: missing template dir", None, &["init", "{root}/n5", "--template-dir", "{root}/nope", "--no-input"], 2, "--template-dir {root}/nope: no such directory"),
        cmd("init: template dir is a file", None, &["init", "{root}/n6", "--template-dir", "{root}/a-file", "--no-input"], 2, "--template-dir {root}/a-file: not a directory"),
        cmd("templates: missing template dir", None, &["templates", "--template-dir", "{root}/nope"], 2, "--template-dir {root}/nope: no such directory"),
        cmd("init: target is a file", None, &["init", "{root}/a-file", "--no-input"], 2, "is not a directory"),
        cmd("init: underivable name", None, &["init", "{root}/___", "--no-input"], 2, "cannot derive an app name").also("pass --name"),
    ];
    assert!(cases.len() >= 120, "{} rows", cases.len());
    // Every row's name is its own, so a failure names one row.
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&String> = cases.iter().map(|c| &c.name).collect();
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "duplicate row names");
    let failures = run_cases(root, &cases);
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// What a process cost: its exit code, CPU time (user + system) and peak resident memory.
struct Cost {
    code: i32,
    cpu_ms: f64,
    peak_kib: u64,
}

/// Runs `c` to its end and measures it. The peak is the process's own `VmHWM`, read while it
/// stops at its exit under ptrace: `wait4`'s `ru_maxrss` would also count the memory of this
/// (large, multi-threaded) test process, which the child is forked from.
fn measure(mut c: std::process::Command) -> Cost {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped below by wait4, which also gives its CPU time.
    #[allow(clippy::zombie_processes)]
    let child = c.spawn().expect("hvdctl starts");
    let pid = child.id() as libc::pid_t;
    let mut peak_kib = None;
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut first = true;
    loop {
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            break;
        }
        assert!(libc::WIFSTOPPED(status), "status {status:#x}");
        let mut signal = 0;
        if first {
            // Stopped at exec: ask to stop again at exit.
            first = false;
            let r = unsafe {
                libc::ptrace(
                    libc::PTRACE_SETOPTIONS,
                    pid,
                    0,
                    libc::PTRACE_O_TRACEEXIT as libc::c_long,
                )
            };
            assert_eq!(r, 0, "ptrace: {}", std::io::Error::last_os_error());
        } else if status >> 8 == (libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8)) {
            // Exiting, its memory still there.
            let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            peak_kib = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
        } else {
            signal = libc::WSTOPSIG(status);
        }
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) };
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    Cost {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        },
        cpu_ms: ms(usage.ru_utime) + ms(usage.ru_stime),
        peak_kib: peak_kib.expect("VmHWM read at exit"),
    }
}

/// The alias bomb of the report is refused while it is read, in a few milliseconds of CPU
/// and a few MiB, where it took 1.1 s and 1.2 GB (7 levels) or aborted (9 levels) before.
/// CPU time, not wall-clock time: a busy machine stretches the latter.
#[test]
fn the_alias_bomb_is_refused_cheaply() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bomb");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("hvdctl.yaml"), alias_bomb(9)).unwrap();
    let err = tmp.path().join("stderr");
    let mut c = hvdctl_process();
    c.arg("-C")
        .arg(&dir)
        .args(["deploy", "--dry-run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let cost = measure(c);
    let stderr = std::fs::read_to_string(&err).unwrap();
    eprintln!(
        "alias bomb (9 levels): exit {}, {:.1} ms of CPU, peak RSS {:.1} MiB",
        cost.code,
        cost.cpu_ms,
        cost.peak_kib as f64 / 1024.0
    );
    assert_eq!(cost.code, 2, "{stderr}");
    assert!(stderr.contains("aliases nested 4 deep"), "{stderr}");
    assert!(cost.cpu_ms < 50.0, "{:.1} ms of CPU", cost.cpu_ms);
    assert!(
        cost.peak_kib < 50 * 1024,
        "peak RSS {} KiB is not under 50 MiB",
        cost.peak_kib
    );
}

/// Files built to make a YAML reader spend, each at the size limit: every one is refused
/// within the same memory bound as the alias bomb (and a valid dry run).
#[test]
fn hostile_app_files_stay_small() {
    let tmp = tempfile::tempdir().unwrap();
    let limit = 128 * 1024;
    let fill = |prefix: &str, unit: &str, suffix: &str| {
        let n = (limit - BASE.len() - prefix.len() - suffix.len() - 2) / unit.len();
        format!("{BASE}{prefix}{}{suffix}\n", unit.repeat(n))
    };
    let nested = |n: usize| "[".repeat(n);
    let anchored: String = (0..7).map(|i| format!("&a{i} [")).collect();
    let files = [
        (
            "a flow list 7 deep",
            fill(
                &format!("x: {}", nested(7)),
                "a, ",
                &format!("a{}", "]".repeat(7)),
            ),
        ),
        ("a flat flow list", fill("x: [", "a, ", "a]")),
        (
            "anchors in anchors",
            fill(
                &format!("x: {anchored}"),
                "a, ",
                &format!("a{}", "]".repeat(7)),
            ),
        ),
        ("a flow mapping", fill("x: {", "k: {a: [b]}, ", "k: v}")),
        ("many aliases", fill("x: &x [a, a, a]\ny: [", "*x, ", "*x]")),
    ];
    for (what, text) in files {
        assert!(text.len() <= limit, "{what}: {} bytes", text.len());
        let dir = tmp.path().join(what.replace(' ', "-"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("hvdctl.yaml"), &text).unwrap();
        let mut c = hvdctl_process();
        c.arg("-C")
            .arg(&dir)
            .args(["deploy", "--dry-run"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let cost = measure(c);
        eprintln!(
            "{what} ({} KiB): exit {}, {:.1} ms of CPU, peak RSS {:.1} MiB",
            text.len() >> 10,
            cost.code,
            cost.cpu_ms,
            cost.peak_kib as f64 / 1024.0
        );
        assert_eq!(cost.code, 2, "{what}");
        assert!(
            cost.peak_kib < 50 * 1024,
            "{what}: peak RSS {} KiB",
            cost.peak_kib
        );
        assert!(cost.cpu_ms < 2000.0, "{what}: {:.1} ms of CPU", cost.cpu_ms);
    }
}

/// Checks a failed run: exit 2, `error:` first, no panic, nothing on stdout, `needle` said.
fn check(out: &Out, case: &str, needle: &str) {
    assert_eq!(
        out.code, 2,
        "{case}: exit {} (stderr: {})",
        out.code, out.stderr
    );
    assert!(out.stderr.starts_with("error:"), "{case}: {}", out.stderr);
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

/// A password in an address — the kubeconfig's `server` (`https://user:PASSWORD@host`), a
/// `DOCKER_HOST` — is never printed: every command that talks to the cluster, with `-v`'s
/// request log, its errors, `doctor`'s report and `--dry-run=server`, on stdout and stderr.
#[test]
fn no_command_prints_a_password_from_an_address() {
    const PASSWORD: &str = "PASSWORD";
    let e = Cluster::synthetic(true);
    let dir = init_app(&e.root, "pw", "mpi-hello");
    let text = std::fs::read_to_string(&e.kubeconfig).unwrap();
    let (_, after) = text.split_once("server: http").unwrap();
    let url = format!("http{}", after.lines().next().unwrap());
    let with_pw = url.replacen("://", &format!("://user:{PASSWORD}@"), 1);
    let kc = e.root.join("kubeconfig-pw");
    std::fs::write(&kc, text.replace(&url, &with_pw)).unwrap();
    // The same server, unreachable (a closed port): its errors name it.
    let dead = e.root.join("kubeconfig-dead");
    std::fs::write(
        &dead,
        text.replace(&url, &format!("https://user:{PASSWORD}@127.0.0.1:1")),
    )
    .unwrap();
    let id = run_id("p");
    let cases: Vec<(&Path, Vec<&str>)> = vec![
        (&kc, vec!["deploy", "--dry-run=server", "-v"]),
        (&kc, vec!["deploy", "--run-id", &id, "-v", "--skip-checks"]),
        (&kc, vec!["status", &id, "-v"]),
        (&kc, vec!["status", "--all", "-o", "json"]),
        (&kc, vec!["events", &id, "-v"]),
        (&kc, vec!["runs", "-v"]),
        (&kc, vec!["doctor", "-v"]),
        (&kc, vec!["doctor", "-o", "json"]),
        (&kc, vec!["version"]),
        (&kc, vec!["logs", &id, "-v"]),
        (&kc, vec!["undeploy", &id, "-v"]),
        (&dead, vec!["status", "-v"]),
        (&dead, vec!["deploy", "--dry-run=server", "-v"]),
        (&dead, vec!["doctor"]),
        (&dead, vec!["runs"]),
        (&dead, vec!["version"]),
    ];
    let mut said = Vec::new();
    let mut masked = 0;
    for (kubeconfig, args) in &cases {
        let mut c = hvdctl();
        c.current_dir(&dir)
            .env("KUBECONFIG", kubeconfig)
            .env("DOCKER_HOST", format!("tcp://user:{PASSWORD}@127.0.0.1:1"))
            .args(args);
        let o = run_for(c, Duration::from_secs(120));
        let all = format!("{}{}", o.stdout, o.stderr);
        if all.contains(PASSWORD) {
            said.push(format!(
                "hvdctl {} (exit {}):\n{all}",
                args.join(" "),
                o.code
            ));
        }
        if all.contains("***@") {
            masked += 1;
        }
        assert!(!all.contains("panicked"), "{args:?}: {all}");
    }
    assert!(
        said.is_empty(),
        "the password was printed:\n{}",
        said.join("\n")
    );
    // The address itself is still shown where it helps (masked).
    assert!(masked >= 3, "{masked} commands showed a masked address");
}

/// 10,000 `--set` flags with distinct keys: each costs its own path, not the document's size
/// (each cloned and scanned the whole document before: 2,000 flags took 1.0 s, 10,000 took
/// 32 s). The figure is in docs/benchmarks.md; the bound here is only far from both.
#[test]
fn ten_thousand_set_flags_take_linear_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sets");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("hvdctl.yaml"), BASE).unwrap();
    let mut c = hvdctl_process();
    c.arg("-C").arg(&dir).args(["deploy", "--dry-run"]);
    for i in 0..10_000 {
        c.arg("--set").arg(format!("parameters.p{i}={i}"));
    }
    let out = tmp.path().join("out");
    c.stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::process::Stdio::null());
    let cost = measure(c);
    eprintln!(
        "10,000 --set flags: exit {}, {:.1} ms of CPU",
        cost.code, cost.cpu_ms
    );
    assert_eq!(cost.code, 0);
    let manifest = std::fs::read_to_string(&out).unwrap();
    assert!(
        manifest.contains("P9999"),
        "the last flag's variable is there"
    );
    assert!(cost.cpu_ms < 15_000.0, "{:.1} ms of CPU", cost.cpu_ms);
}

/// `-v` shows what an error came from, down to the system's word: here a closed port.
#[test]
fn verbose_shows_why_the_api_server_cannot_be_reached() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("kubeconfig"), KUBECONFIG).unwrap();
    std::fs::write(tmp.path().join("hvdctl.yaml"), BASE).unwrap();
    let out = hvdctl_in(tmp.path())
        .env("KUBECONFIG", tmp.path().join("kubeconfig"))
        .args([
            "-v",
            "deploy",
            "--skip-checks",
            "--image",
            "example.com/demo:1",
        ])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = &stderr[stderr.find("error: ").expect(&stderr)..];
    assert!(
        error.contains("cannot reach the API server at https://127.0.0.1:1 (context `real`)"),
        "{stderr}"
    );
    // The chain, in order, after the hint: kube's words, hyper's, the socket's.
    let causes: Vec<&str> = error
        .lines()
        .filter_map(|l| l.strip_prefix("  caused by: "))
        .collect();
    assert_eq!(
        causes.last(),
        Some(&"Connection refused (os error 111)"),
        "{stderr}"
    );
    assert!(causes.contains(&"tcp connect error"), "{stderr}");
    // Without -v the chain is not shown.
    let quiet = hvdctl_in(tmp.path())
        .env("KUBECONFIG", tmp.path().join("kubeconfig"))
        .args(["deploy", "--skip-checks", "--image", "example.com/demo:1"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("caused by"));
}

/// `doctor` keeps the chain of a check that could not tell: the registry's (the image's
/// registry does not answer) and the API server's, in `-o json` always and in the text with
/// `-v` only.
#[test]
fn doctor_keeps_why_the_registry_and_the_api_server_cannot_be_reached() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("kubeconfig"), KUBECONFIG).unwrap();
    std::fs::write(tmp.path().join("hvdctl.yaml"), BASE).unwrap();
    let doctor = |args: &[&str]| {
        let out = hvdctl_in(tmp.path())
            .env("KUBECONFIG", tmp.path().join("kubeconfig"))
            .env("DOCKER_CONFIG", tmp.path())
            .args([
                "doctor",
                "--backend",
                "native",
                "--image",
                "127.0.0.1:1/demo:1",
            ])
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&doctor(&["-o", "json"])).unwrap();
    let causes = |check: &str| -> Vec<String> {
        let c = json
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == check)
            .unwrap_or_else(|| panic!("no {check} check in {json}"));
        serde_json::from_value(c["causes"].clone()).unwrap_or_else(|_| panic!("{c}"))
    };
    for check in ["image", "cluster"] {
        let chain = causes(check);
        assert_eq!(
            chain.last().map(String::as_str),
            Some("Connection refused (os error 111)"),
            "{check}: {chain:?}"
        );
        assert!(
            chain.iter().any(|c| c == "tcp connect error"),
            "{check}: {chain:?}"
        );
    }
    let text = doctor(&["-v"]);
    let shown = text.lines().filter(|l| l.contains("caused by: ")).count();
    assert_eq!(
        shown,
        causes("image").len() + causes("cluster").len(),
        "{text}"
    );
    assert!(!doctor(&[]).contains("caused by"));
}
