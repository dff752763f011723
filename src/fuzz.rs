//! Entry points of the fuzz targets in `fuzz/` (cargo-fuzz; see docs/architecture.md): each
//! takes the fuzzer's bytes through the code hvdctl runs on the same input for real, and
//! panics only where that code broke a promise (a panic of its own, or an oracle below that
//! failed). The inputs the fuzzers found are kept under `fuzz/regressions/TARGET/` and
//! replayed through these entries by the regular tests (`tests` below).
//!
//! Inputs that carry several parts (a file and flags, patterns and paths) split them at NUL
//! bytes, which none of these inputs can hold.

use crate::backend::{Backend, Run};
use std::path::Path;

/// The parts of `data` between NUL bytes.
fn parts(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|b| *b == 0)
}

/// `hvdctl.yaml` then `--set` flags: loaded as `deploy` loads them; an app that loads is
/// rendered for every backend as `deploy --dry-run` renders it. Oracle: hvdctl's own
/// (built-in) templates never fail on an app hvdctl accepted — their output parses and passes
/// the API server's rules ([`crate::backend::admission`]).
pub fn app_file(data: &[u8]) {
    let mut parts = parts(data);
    let file = parts.next().unwrap_or_default();
    let sets: Vec<String> = parts
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let Ok((app, _)) = crate::app::load::from_bytes(file, "hvdctl.yaml", &sets) else {
        return;
    };
    for name in ["mpijob", "native", "trainjob", "local"] {
        let backend: Backend = name.parse().expect("a backend hvdctl names");
        let run = Run {
            app: &app,
            backend,
            run_id: "fz0".into(),
            namespace: "default".into(),
            image: "example.com/fuzz:1".into(),
        };
        let result = match backend {
            Backend::Kubernetes(_) => {
                crate::backend::objects(&run, Path::new("/nonexistent/app"), None).map(|_| ())
            }
            Backend::Local => {
                let dir = crate::local::rundir::RunDir::at("/nonexistent/run".into());
                crate::local::spec::plan(&run, &dir, "").map(|_| ())
            }
        };
        if let Err(e) = result {
            assert!(
                !e.message.contains("(built-in)"),
                "the {name} backend's built-in template failed on an app hvdctl accepted: {e}"
            );
        }
    }
}

/// A `.dockerignore`, then paths: the patterns as `build` reads them, each path matched as
/// one path alone and as the build's walk matches it, from the root down. (The two may
/// disagree, as they do in moby: the walk carries its parents' results.)
pub fn dockerignore(data: &[u8]) {
    use crate::image::dockerignore::{Matcher, clean, parse};
    let mut parts = parts(data);
    let text = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let Ok(m) = Matcher::new(parse(&text)) else {
        return;
    };
    for p in parts {
        let path = clean(&String::from_utf8_lossy(p));
        let _ = m.is_excluded(&path);
        let mut parent = None;
        let mut at = String::new();
        for seg in path.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(seg);
            let (_, info) = m.walk_match(&at, parent.as_ref());
            let _ = m.exception_may_reach_into(&at);
            parent = Some(info);
        }
    }
}

/// A kubeconfig file's bytes, read as hvdctl reads `~/.kube/config`, and the files its
/// current context names checked.
pub fn kubeconfig(data: &[u8]) {
    let path = Path::new("/nonexistent/.kube/config");
    if let Ok(kc) = crate::kubeconfig::parse(data.to_vec(), path)
        && let Some(ctx) = kc.current_context.clone()
    {
        let _ = crate::kubeconfig::check_named_files(&kc, &ctx);
    }
}

/// A Docker context's `meta.json`: the endpoint it names.
pub fn context_meta(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = docker_endpoint::fuzz_context_meta(text);
    }
}

/// The answer of the daemon's `POST /build` under BuildKit: JSON lines (cut into the chunks
/// the fuzzer chose at NUL bytes), each read as the build reads it, then the failure message
/// a build would give.
pub fn buildkit_status(data: &[u8]) {
    use crate::image::buildkit::{Message, Trace};
    let mut lines = crate::image::docker::LineBuf::default();
    let mut trace = Trace::default();
    let read = |line: &[u8], trace: &mut Trace| {
        if let Ok(msg) = serde_json::from_slice::<Message>(line) {
            let _ = trace.read(msg);
        }
    };
    for chunk in parts(data) {
        lines.push(chunk);
        while let Ok(Some(line)) = lines.line() {
            read(&line, &mut trace);
        }
    }
    read(&lines.rest(), &mut trace);
    let _ = trace.error("example.com/fuzz:1", "the build failed");
}

/// A launcher's log under each tag form: every line split into ranks as `logs` splits it.
/// Oracle: nothing is made up — what is shown is never more than what was read.
pub fn rank_tags(data: &[u8]) {
    use crate::logs::rank::{Ranks, TagForms};
    let Some((&pick, log)) = data.split_first() else {
        return;
    };
    let forms = TagForms {
        open_mpi: pick & 1 != 0,
        gloo: pick & 2 != 0,
        hydra: pick & 4 != 0,
        start_ranks: pick & 8 != 0,
    };
    let mut ranks = Ranks::new(forms);
    let mut shown = 0usize;
    let mut emit = |_ts: &[u8], _rank: Option<u32>, text: &[u8]| shown += text.len();
    for line in log.split(|b| *b == b'\n') {
        ranks.split(b"2026-11-26T00:00:00Z", line, &mut emit);
    }
    ranks.finish(&mut emit);
    assert!(
        shown <= log.len(),
        "{shown} bytes shown of a {}-byte log",
        log.len()
    );
}

/// A log line's timestamp as the kubelet writes it. Oracles: a timestamp read is written
/// back (as RFC 3339) and read again as the same instant; where jiff reads the same text as
/// an RFC 3339 instant too, both agree.
pub fn log_timestamp(data: &[u8]) {
    use crate::logs::tail::{parse_ts, split_ts};
    let (ts_text, _) = split_ts(data);
    let Some(ts) = parse_ts(ts_text) else {
        return;
    };
    let again = ts.to_string();
    if again.ends_with('Z') {
        assert_eq!(
            parse_ts(again.as_bytes()),
            Some(ts),
            "{:?} read as {again}",
            String::from_utf8_lossy(ts_text)
        );
    }
    if let Some(t) = std::str::from_utf8(ts_text)
        .ok()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
    {
        assert_eq!(
            crate::logs::tail::Ts::from_jiff(t),
            ts,
            "{:?}: jiff reads {t}",
            String::from_utf8_lossy(ts_text)
        );
    }
}

/// A target's entry.
pub type Entry = fn(&[u8]);

/// Every target by name, for the regression replay.
pub const TARGETS: [(&str, Entry); 7] = [
    ("app_file", app_file),
    ("dockerignore", dockerignore),
    ("kubeconfig", kubeconfig),
    ("context_meta", context_meta),
    ("buildkit_status", buildkit_status),
    ("rank_tags", rank_tags),
    ("log_timestamp", log_timestamp),
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every input kept under `fuzz/seeds/TARGET/` (where each fuzzer starts) and
    /// `fuzz/regressions/TARGET/` (what a fuzzer found) goes through its target's entry: a
    /// finding stays fixed, and the seeds still reach the code they were written for.
    #[test]
    fn the_seeds_and_what_the_fuzzers_found_pass() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        for (name, entry) in super::TARGETS {
            let mut replayed = 0;
            for kept in ["seeds", "regressions"] {
                let Ok(files) = std::fs::read_dir(root.join(kept).join(name)) else {
                    continue;
                };
                for f in files {
                    let path = f.unwrap().path();
                    let data = std::fs::read(&path).unwrap();
                    let r = std::panic::catch_unwind(|| entry(&data));
                    assert!(r.is_ok(), "{} fails", path.display());
                    replayed += 1;
                }
            }
            assert!(replayed > 0, "no seed for fuzz target {name}");
        }
    }

    /// The seeds of the app file load: the fuzzer starts from apps hvdctl accepts (and
    /// renders), not from the first error.
    #[test]
    fn the_app_seeds_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/app_file");
        for f in std::fs::read_dir(&dir).unwrap() {
            let path = f.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let mut parts = super::parts(&data);
            let file = parts.next().unwrap();
            let sets: Vec<String> = parts
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            if let Err(e) = crate::app::load::from_bytes(file, "hvdctl.yaml", &sets) {
                panic!("{}: {e}", path.display());
            }
        }
    }
}
