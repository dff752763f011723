//! The run ledger: one row per run for `hvdctl runs` — where it ran, its state, its phase
//! times and where it came from — built from the engine's report of a live run (labels,
//! annotations, pods/containers), never from `.hvdctl/`.

use crate::cluster::status::JobState;
use crate::phases::Phases;
use crate::report::StatusReport;
use crate::types::EngineKind;
use serde::Serialize;

pub mod record;

pub use crate::types::Source;

/// What `hvdctl runs -o json` prints per run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    pub run: String,
    pub job: String,
    pub app: String,
    pub backend: String,
    pub engine: EngineKind,
    /// Null for Docker runs.
    pub context: Option<String>,
    /// Null for Docker runs.
    pub namespace: Option<String>,
    pub state: JobState,
    /// RFC 3339.
    pub created: String,
    pub image: String,
    pub image_digest: Option<String>,
    pub git_commit: Option<String>,
    pub git_dirty: Option<String>,
    pub workers: u32,
    /// Null for a run deployed without provenance.
    pub slots_per_worker: Option<u32>,
    pub phases: Phases,
    pub start_latency_seconds: Option<f64>,
    pub source: Source,
    /// The queue the run waits (or waited) in, or null.
    pub queue: Option<crate::cluster::queue::Queue>,
}

impl RunRow {
    /// The row of a run from its status report (`created`: the engine's creation time when
    /// no phase says it).
    pub fn of(r: &StatusReport, created: &str) -> RunRow {
        let p = r.provenance.clone().unwrap_or_default();
        let workers = if r.provenance.is_some() {
            p.workers
        } else {
            r.pods
                .iter()
                .filter(|p| p.role == crate::kinds::ROLE_WORKER)
                .count() as u32
        };
        RunRow {
            run: r.run.clone(),
            job: r.job.clone(),
            app: r.app.clone(),
            backend: r.backend.clone(),
            engine: r.engine,
            context: r.context.clone(),
            namespace: r.namespace.clone(),
            state: r.state,
            created: r
                .phases
                .created
                .clone()
                .unwrap_or_else(|| created.to_string()),
            image: p.image,
            image_digest: p.image_digest,
            git_commit: p.git_commit,
            git_dirty: p.git_dirty,
            workers,
            slots_per_worker: r.provenance.as_ref().map(|p| p.slots_per_worker),
            phases: r.phases.clone(),
            start_latency_seconds: r.start_latency_seconds,
            source: r.source,
            queue: r.queue.clone(),
        }
    }

    /// `context/namespace`, or `docker`.
    fn place(&self) -> String {
        match (&self.context, &self.namespace) {
            (Some(c), Some(n)) => format!("{c}/{n}"),
            _ => self.engine.to_string(),
        }
    }
}

/// Newest first.
pub fn sort(rows: &mut [RunRow]) {
    let key = |r: &RunRow| r.created.parse::<jiff::Timestamp>().ok();
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| b.run.cmp(&a.run)));
}

/// `42s`, `3m`, `5h`, `2d` (a duration in whole seconds).
pub use crate::text::human_seconds;

/// The text table of `hvdctl runs` (`app` column with `--all-apps`).
pub fn table(rows: &[RunRow], with_app: bool) -> String {
    let mut lines: Vec<Vec<String>> = vec![
        [
            "RUN", "APP", "BACKEND", "WHERE", "STATE", "AGE", "DURATION", "LATENCY", "WORKERS",
            "DIGEST", "COMMIT", "SOURCE",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    ];
    let now = jiff::Timestamp::now().as_second();
    for r in rows {
        let age = r
            .created
            .parse::<jiff::Timestamp>()
            .map_or("-".into(), |t| human_seconds(now - t.as_second()));
        let commit = match (&r.git_commit, &r.git_dirty) {
            (Some(c), d) => format!(
                "{}{}",
                crate::text::short_id(c, 7),
                match d.as_deref() {
                    Some(crate::provenance::DIRTY_UNKNOWN) => "+?",
                    Some(_) => "+dirty",
                    None => "",
                }
            ),
            _ => "-".into(),
        };
        lines.push(vec![
            r.run.clone(),
            r.app.clone(),
            r.backend.clone(),
            r.place(),
            r.state.to_string(),
            age,
            r.phases
                .duration_seconds()
                .map_or("-".into(), human_seconds),
            r.start_latency_seconds
                .map_or("-".into(), |l| format!("{l:.1}s")),
            format!(
                "{}x{}",
                r.workers,
                r.slots_per_worker.map_or("-".into(), |s| s.to_string())
            ),
            r.image_digest
                .as_deref()
                .map_or("-".into(), crate::report::short_digest),
            commit,
            match r.source {
                Source::Engine => "engine".into(),
                Source::Record => "record".into(),
            },
        ]);
    }
    if !with_app {
        for l in &mut lines {
            l.remove(1);
        }
    }
    let cols = lines[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for l in &lines {
        let mut s = String::new();
        for (i, cell) in l.iter().enumerate() {
            if i + 1 == cols {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, created: &str) -> RunRow {
        RunRow {
            run: run.into(),
            job: format!("a-{run}"),
            app: "a".into(),
            backend: "local".into(),
            engine: EngineKind::Docker,
            context: None,
            namespace: None,
            state: JobState::Succeeded,
            created: created.into(),
            image: "i".into(),
            image_digest: Some("sha256:0123456789abcdef".into()),
            git_commit: Some("89abcdef0123".into()),
            git_dirty: Some("sha256:ff".into()),
            workers: 2,
            slots_per_worker: Some(1),
            phases: Phases::default(),
            start_latency_seconds: Some(1.25),
            source: Source::Engine,
            queue: None,
        }
    }

    #[test]
    fn newest_first_and_a_table_row_per_run() {
        let mut rows = vec![
            row("old", "2026-01-01T00:00:00Z"),
            row("new", "2026-01-02T00:00:00.5Z"),
        ];
        sort(&mut rows);
        assert_eq!(rows[0].run, "new");
        let t = table(&rows, false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("RUN  BACKEND"), "{t}");
        assert!(lines[1].contains("sha256:0123456789ab "), "{t}");
        assert!(lines[1].contains("89abcde+dirty"), "{t}");
        assert!(lines[1].contains("2x1"), "{t}");
        assert!(
            lines[1].contains("1.2s") || lines[1].contains("1.3s"),
            "{t}"
        );
        assert!(!t.contains("APP"), "{t}");
    }
}
