//! Property: any string set through `--set` or hvdctl.yaml, in any string field that reaches a
//! manifest, lands verbatim as that field's value and adds nothing else to the object set; and
//! a value written inside a larger scalar of any style is part of that one scalar. A value
//! with a NUL, which no container's argv or environment can hold, is refused instead.

use hvdctl::app::load::from_text;
use hvdctl::app::set;
use hvdctl::backend::Backend;
use hvdctl::backend::{Run, objects};
use hvdctl::render::{self, manifests, quote::quote};
use proptest::prelude::*;
use serde_json::Value;

const PLACEHOLDER: &str = "PLACEHOLDER-VALUE";

/// An app whose string fields (env, annotation, parameter, arg, command item) hold `v`.
fn app_text(v: &str) -> String {
    let q = quote(v);
    format!(
        "name: demo\nimage: example.com/demo\ncommand: [python3, {q}]\nargs: [{q}]\nenv: {{NOTE: {q}}}\n\
         annotations: {{example.com/note: {q}}}\nparameters: {{note2: {q}}}\nworkers: 2\n"
    )
}

fn render(text: &str, sets: &[String], backend: Backend) -> Value {
    let flags: Vec<_> = sets.iter().map(|s| set::parse(s).unwrap()).collect();
    let app = from_text(text, "hvdctl.yaml", &flags).expect("valid app");
    let run = Run {
        app: &app,
        backend,
        run_id: "r1".into(),
        namespace: "default".into(),
        image: "example.com/demo:1".into(),
    };
    let tmp = std::path::Path::new("/nonexistent-app-dir");
    let objs = objects(&run, tmp, None).expect("renders");
    // Through the printed YAML and back, as users and kubectl would read it.
    let yaml = manifests::to_yaml_stream(&objs);
    let back = manifests::parse("out", &yaml, &hvdctl::backend::all_kinds()).expect("reparses");
    Value::Array(back.iter().map(|o| o.to_value()).collect())
}

/// Same shape; leaves equal except where the baseline has the placeholder. Returns how many
/// placeholder leaves were checked.
fn same_but_value(base: &Value, got: &Value, v: &str, path: &str) -> Result<usize, String> {
    match (base, got) {
        (Value::String(b), Value::String(g)) if b == PLACEHOLDER => {
            if g == v {
                Ok(1)
            } else {
                Err(format!("{path}: {g:?} != {v:?}"))
            }
        }
        (Value::Object(b), Value::Object(g)) => {
            if b.keys().ne(g.keys()) {
                return Err(format!(
                    "{path}: keys differ: {:?} vs {:?}",
                    b.keys().collect::<Vec<_>>(),
                    g.keys().collect::<Vec<_>>()
                ));
            }
            b.iter()
                .map(|(k, bv)| same_but_value(bv, &g[k], v, &format!("{path}.{k}")))
                .sum()
        }
        (Value::Array(b), Value::Array(g)) if b.len() == g.len() => b
            .iter()
            .zip(g)
            .enumerate()
            .map(|(i, (bv, gv))| same_but_value(bv, gv, v, &format!("{path}[{i}]")))
            .sum(),
        (b, g) if b == g => Ok(0),
        (b, g) => Err(format!("{path}: {b} vs {g}")),
    }
}

fn check(v: &str) -> Result<(), TestCaseError> {
    if v.contains('\0') {
        // A NUL can be in no argv or environment: the app is refused where it is written.
        let e = from_text(&app_text(v), "hvdctl.yaml", &[]).expect_err("a NUL is refused");
        prop_assert!(
            e.message.contains("contains a NUL character"),
            "{}",
            e.message
        );
        return Ok(());
    }
    for backend in hvdctl::backend::BUILTIN
        .iter()
        .map(|b| Backend::Kubernetes(*b))
    {
        let base = render(&app_text(PLACEHOLDER), &[], backend);
        // Through hvdctl.yaml.
        let got = render(&app_text(v), &[], backend);
        let n = same_but_value(&base, &got, v, "").map_err(TestCaseError::fail)?;
        prop_assert!(n >= 5, "only {n} placeholder fields reached the manifests");
        // Through --set, over a file holding the placeholder.
        let sets: Vec<String> = [
            "env.NOTE",
            "annotations[\"example.com/note\"]",
            "parameters.note2",
            "args[0]",
            "command[1]",
        ]
        .iter()
        .map(|k| format!("{k}={v}"))
        .collect();
        let got = render(&app_text(PLACEHOLDER), &sets, backend);
        let m = same_but_value(&base, &got, v, "").map_err(TestCaseError::fail)?;
        prop_assert_eq!(m, n);
    }
    Ok(())
}

#[test]
fn known_nasty_values() {
    for v in [
        "a\nhostNetwork: true",
        "#",
        "a: b",
        "{",
        "*alias",
        "&anchor x",
        "\u{7f}",
        "\u{85}\u{9f}",
        "\u{2028}\u{2029}",
        "\u{feff}",
        "\u{fffe}\u{ffff}",
        "- item",
        "'single' \"double\"",
        "--- \n...",
        "",
        " leading and trailing ",
        "null",
        "true",
        "0x10",
        "😀 ✓",
        "\t\r\u{0}",
        "!!binary x",
        "%YAML 1.2",
        "{{job.name}}",
        "\u{e000}0\u{e001}",
        "\u{e000}",
        "x\u{e001}",
    ] {
        check(v).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        composite(v).unwrap_or_else(|e| panic!("{v:?}: {e}"));
    }
}

/// A template with values inside larger scalars of every style: each scalar is read back as
/// the template's text with the value in it, and nothing else appears.
fn composite(v: &str) -> Result<(), TestCaseError> {
    let template = "name: {{v}}-data\nlist: [a-{{v}}, {{v}}, '{{v}}''s']\nquoted: \"<{{v}}>\"\nblock: |\n  x {{v}}\n  y\nlast: {{v}}{{v}}\n";
    let out = render::render("t.yaml.hbs", template, &serde_json::json!({ "v": v }))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: Value =
        serde_norway::from_str(&out).map_err(|e| TestCaseError::fail(format!("{e}: {out}")))?;
    let want = serde_json::json!({
        "name": format!("{v}-data"),
        "list": [format!("a-{v}"), v, format!("{v}'s")],
        "quoted": format!("<{v}>"),
        "block": format!("x {v}\ny\n"),
        "last": format!("{v}{v}"),
    });
    prop_assert_eq!(back, want, "{}", out);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn any_string_is_data(v in prop_oneof![
        any::<String>(),
        "[\\n\\r\\t#:{}*&!|>'\"%@`, \\-\\[\\]\u{7f}\u{85}\u{2028}\u{2029}\u{feff}a-z]{0,24}",
    ]) {
        check(&v)?;
        composite(&v)?;
    }
}

/// A fake API server for the property below, started once; it applies the real one's rules
/// beyond the schema (resource pairs, tolerations, claims, annotation size).
fn api_server() -> &'static fake_cluster::FakeCluster {
    static FC: std::sync::OnceLock<fake_cluster::FakeCluster> = std::sync::OnceLock::new();
    FC.get_or_init(|| {
        fake_cluster::FakeCluster::start(fake_cluster::Options {
            mpi_operator: true,
            trainer: true,
            ..Default::default()
        })
        .expect("start fake cluster")
    })
}

/// An app with these worker resources, one toleration value and one claim.
fn app_with(res: &[(bool, &str, &str)], toleration: &str, size: &str, modes: &[&str]) -> String {
    let map = |req: bool| {
        res.iter()
            .filter(|(r, _, _)| *r == req)
            .map(|(_, n, q)| format!("{n}: '{q}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "name: demo\nimage: example.com/demo\ncommand: [python3, /app/train.py]\nworkers: 2\n\
         resources:\n  worker:\n    requests: {{{}}}\n    limits: {{{}}}\n\
         tolerations: [{{key: k, value: {}}}]\n\
         storage: [{{name: data, size: '{size}', mountPath: /data, accessModes: [{}]}}]\n",
        map(true),
        map(false),
        quote(toleration),
        modes.join(", ")
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    /// Whatever hvdctl accepts, the API server accepts: every object a valid app renders, on
    /// every Kubernetes backend, is created by a fake API server that applies the real one's
    /// rules (a refusal by hvdctl — in the app or over the rendered objects — is fine).
    #[test]
    fn what_hvdctl_accepts_the_api_server_accepts(
        res in proptest::collection::vec((
            any::<bool>(),
            prop_oneof![Just("cpu"), Just("memory"), Just("hugepages-2Mi"), Just("example.com/foo"), Just("nvidia.com/gpu")],
            prop_oneof![Just("0"), Just("1"), Just("2"), Just("0.5"), Just("500m"), Just("1000m"), Just("2Mi"), Just("4Mi"), Just("1Gi")],
        ), 0..5),
        toleration in prop_oneof![Just(String::new()), "[a-z0-9]{1,8}", "[ -~]{0,8}"],
        size in prop_oneof![Just("0"), Just("1Gi"), Just("500m"), Just("10Gi")],
        modes in prop_oneof![
            Just(vec!["ReadWriteOnce"]),
            Just(vec!["ReadWriteOncePod"]),
            Just(vec!["ReadWriteOncePod", "ReadWriteMany"]),
        ],
    ) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let text = app_with(&res, &toleration, size, &modes);
        let Ok(app) = from_text(&text, "hvdctl.yaml", &[]) else { return Ok(()) };
        for kb in hvdctl::backend::BUILTIN {
            let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let run = Run {
                app: &app,
                backend: Backend::Kubernetes(*kb),
                run_id: format!("p{n}"),
                namespace: "default".into(),
                image: "example.com/demo:1".into(),
            };
            let Ok(objs) = objects(&run, std::path::Path::new("/nonexistent-app-dir"), None) else {
                continue;
            };
            for o in &objs {
                let mut v = o.to_value();
                // Claims and runtimes are shared by an app's runs: one per case here.
                if matches!(o.kind(), "PersistentVolumeClaim" | "TrainingRuntime") {
                    v["metadata"]["name"] = Value::String(format!("{}-{n}", o.name()));
                }
                if let Err(e) = api_server().create(v) {
                    prop_assert!(false, "{} {}: {}\nfrom:\n{text}", o.kind(), o.name(), e.message);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// A quantity hvdctl accepts means the same size wherever it is read: what the
    /// Kubernetes backends count for fit and quotas, what the local backend gives Docker, and
    /// what the fake cluster's kubelet, scheduler and Kueue read.
    #[test]
    fn a_quantity_means_the_same_on_every_backend(
        q in "[+]?[0-9]{0,12}(\\.[0-9]{0,12})?([eE][-+]?[0-9]{1,2}|[numkMGTPE]|[KMGTPE]i)?"
    ) {
        prop_assume!(hvdctl::app::validate::is_quantity(&q));
        let spec = hvdctl::app::spec::ResourceSpec {
            limits: [("memory".to_string(), q.clone()), ("cpu".to_string(), q.clone())].into(),
            ..Default::default()
        };
        let fit = hvdctl::fit::requests(&spec, 0);
        let (memory, cpu) = (fit["memory"], fit["cpu"]);
        let as_json = Value::String(q.clone());
        // Memory: whole bytes, rounded up.
        let bytes = i64::try_from(memory.value()).ok();
        prop_assert_eq!(fake_cluster::docker::spec::parse_bytes(&q), bytes);
        if let Some(b) = bytes.filter(|b| *b > 0) {
            prop_assert_eq!(hvdctl::local::spec::bytes(&q), Some(b));
            prop_assert_eq!(fake_cluster::scheduler::amount("memory", &as_json), b);
        }
        // CPU: nano-CPUs for Docker, millicores (rounded up) for the scheduler.
        let nanos = i64::try_from(cpu.nanos()).ok();
        prop_assert_eq!(fake_cluster::docker::spec::parse_nano_cpus(&q), nanos);
        if let Some(n) = nanos.filter(|n| *n > 0) {
            prop_assert_eq!(hvdctl::local::spec::nano_cpus(&q), Some(n));
            prop_assert_eq!(fake_cluster::scheduler::amount("cpu", &as_json), (n + 999_999) / 1_000_000);
        }
    }
}
