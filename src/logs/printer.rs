//! Presentation: how one line looks (text with a coloured prefix, or one JSON object), and the
//! single writer that owns stdout. Streams format whole lines into batches and send them over
//! one bounded channel; the printer writes them through a large buffer and flushes whenever
//! the channel is momentarily empty. A batch only ever holds complete lines, so lines from
//! different pods never interleave mid-line, and memory is bounded by the channel's capacity.

use super::rank::Ranks;
use super::target::Target;
use std::io::{self, Write};
use tokio::sync::mpsc;

/// Output format of `hvdctl logs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// How lines are printed (from the flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub format: Format,
    /// Prefix lines with the pod's short name, and the rank of a launcher's tagged lines
    /// (text only).
    pub prefix: bool,
    /// Print each line's timestamp (text only; JSON always has `time`).
    pub timestamps: bool,
    /// ANSI colour on the prefix.
    pub color: bool,
    /// `--rank`: only the launcher's lines tagged with this MPI rank.
    pub rank: Option<u32>,
}

/// Batches in flight between the streams and the printer. A batch holds the lines of one chunk
/// of a response (the API server's chunks are at most a few tens of KB).
pub const CHANNEL: usize = 32;
/// Bytes a stream may collect before handing a batch to the printer.
pub const BATCH: usize = 64 * 1024;

/// Formats the lines of one target; made once per target so the per-line work is copying.
/// A launcher's lines go through its [`Ranks`] first: tags read and stripped, lines written in
/// pieces put back together.
#[derive(Debug)]
pub struct LineFormat {
    head: Head,
    ranks: Ranks,
}

/// What comes before a line's message, fixed per target.
#[derive(Debug)]
struct Head {
    style: Style,
    /// Text: the (coloured) prefix up to where a rank goes. JSON: `,"engine":…,"pod":…,
    /// "container":…,"role":…,"index":…,"rank":` (the same keys for every engine).
    start: Vec<u8>,
    /// Text: the end of the prefix (colour reset, ` | `). JSON: `,"message":`.
    end: Vec<u8>,
    /// Text: what comes before a rank in the prefix: `r` (the rank), or `s` when the tags
    /// are the processes' start ranks (elastic horovodrun, see [`super::rank::TagForms`]).
    rank_mark: char,
}

impl LineFormat {
    pub fn new(t: &Target, style: Style) -> LineFormat {
        let (mut start, mut end) = (Vec::new(), Vec::new());
        match style.format {
            Format::Text if style.prefix => {
                if style.color {
                    start.extend_from_slice(format!("\x1b[{}m{}", t.color(), t.prefix).as_bytes());
                    end.extend_from_slice(b"\x1b[0m | ");
                } else {
                    start.extend_from_slice(t.prefix.as_bytes());
                    end.extend_from_slice(b" | ");
                }
            }
            Format::Text => {}
            Format::Json => {
                let s = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into());
                let n = |v: Option<u32>| v.map_or_else(|| "null".to_string(), |v| v.to_string());
                start.extend_from_slice(
                    format!(
                        ",\"engine\":{},\"pod\":{},\"container\":{},\"role\":{},\"index\":{},\"{}\":",
                        s(t.engine.as_str()),
                        s(&t.pod),
                        s(&t.container),
                        s(&t.role),
                        n(t.index),
                        if t.ranks.start_ranks {
                            "startRank"
                        } else {
                            "rank"
                        },
                    )
                    .as_bytes(),
                );
                end.extend_from_slice(b",\"message\":");
            }
        }
        LineFormat {
            head: Head {
                style,
                start,
                end,
                rank_mark: if t.ranks.start_ranks { 's' } else { 'r' },
            },
            ranks: Ranks::new(t.ranks),
        }
    }

    /// Lines of attempt `n` of `hvdctl dev`: text `#n ` before the prefix, JSON `attempt`.
    pub fn with_attempt(mut self, n: u32) -> LineFormat {
        let start = match self.head.style.format {
            Format::Text => format!("#{n} "),
            Format::Json => format!(",\"attempt\":{n}"),
        };
        self.head.start.splice(0..0, start.into_bytes());
        self
    }

    /// Appends what one line of the log (without its `\n`) stamped `ts` (the raw RFC 3339
    /// text, may be empty) gives: itself, or for a launcher the lines of ranks it completes
    /// (none while a rank's line is still in pieces, none of other ranks with `--rank`).
    /// Returns how many lines were appended.
    pub fn push(&mut self, out: &mut Vec<u8>, ts: &[u8], msg: &[u8]) -> u64 {
        let msg = msg.strip_suffix(b"\r").unwrap_or(msg);
        let head = &self.head;
        if !self.ranks.reads_tags() {
            if head.style.rank.is_some() {
                return 0;
            }
            head.line(out, ts, None, msg);
            return 1;
        }
        let mut n = 0;
        self.ranks.split(ts, msg, &mut |ts, rank, text| {
            n += head.shown(out, ts, rank, text);
        });
        n
    }

    /// The end of the log: appends the pieces of lines still held (a rank that never ended
    /// its last line). Returns how many lines were appended.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> u64 {
        let head = &self.head;
        let mut n = 0;
        self.ranks.finish(&mut |ts, rank, text| {
            n += head.shown(out, ts, rank, text);
        });
        n
    }
}

impl Head {
    /// Appends the line unless `--rank` wants another rank; 1 if appended.
    fn shown(&self, out: &mut Vec<u8>, ts: &[u8], rank: Option<u32>, msg: &[u8]) -> u64 {
        if self.style.rank.is_some() && self.style.rank != rank {
            return 0;
        }
        self.line(out, ts, rank, msg);
        1
    }

    fn line(&self, out: &mut Vec<u8>, ts: &[u8], rank: Option<u32>, msg: &[u8]) {
        match self.style.format {
            Format::Text => {
                out.extend_from_slice(&self.start);
                if let Some(r) = rank.filter(|_| self.style.prefix) {
                    out.extend_from_slice(format!(" {}{r}", self.rank_mark).as_bytes());
                }
                out.extend_from_slice(&self.end);
                if self.style.timestamps && !ts.is_empty() {
                    out.extend_from_slice(ts);
                    out.push(b' ');
                }
                out.extend_from_slice(msg);
                out.push(b'\n');
            }
            Format::Json => {
                out.extend_from_slice(b"{\"time\":");
                push_json_str(out, ts);
                out.extend_from_slice(&self.start);
                match rank {
                    Some(r) => out.extend_from_slice(r.to_string().as_bytes()),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(&self.end);
                push_json_str(out, msg);
                out.extend_from_slice(b"}\n");
            }
        }
    }
}

/// Appends `s` as a JSON string (invalid UTF-8 replaced).
fn push_json_str(out: &mut Vec<u8>, s: &[u8]) {
    let s = String::from_utf8_lossy(s);
    out.push(b'"');
    for (i, ch) in s.char_indices() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            _ => out.extend_from_slice(&s.as_bytes()[i..i + ch.len_utf8()]),
        }
    }
    out.push(b'"');
}

/// What the printer did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Printed {
    pub bytes: u64,
    /// stdout was closed by the reader (e.g. `| head`); not an error.
    pub closed: bool,
}

/// Writes batches to `out` until every sender is gone. Runs on a blocking thread: writes may
/// block on a slow terminal or pipe, which then back-pressures the streams through the channel.
pub fn print_all(mut rx: mpsc::Receiver<Vec<u8>>, out: impl Write) -> io::Result<Printed> {
    let mut w = io::BufWriter::with_capacity(256 * 1024, out);
    let mut done = Printed::default();
    let write = |w: &mut io::BufWriter<_>, b: &[u8]| -> io::Result<bool> {
        match w.write_all(b) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e),
        }
    };
    while let Some(batch) = rx.blocking_recv() {
        done.bytes += batch.len() as u64;
        if !write(&mut w, &batch)? {
            done.closed = true;
            return Ok(done);
        }
        // Drain what is already queued, then flush while the streams are quiet.
        while let Ok(batch) = rx.try_recv() {
            done.bytes += batch.len() as u64;
            if !write(&mut w, &batch)? {
                done.closed = true;
                return Ok(done);
            }
        }
        match w.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                done.closed = true;
                return Ok(done);
            }
            Err(e) => return Err(e),
        }
    }
    match w.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(done),
    }
}

/// The keys of a JSON line, in order: the same for both engines (tests hold every JSON line
/// to it).
#[cfg(test)]
pub(crate) const JSON_KEYS: [&str; 8] = [
    "time",
    "engine",
    "pod",
    "container",
    "role",
    "index",
    "rank",
    "message",
];

#[cfg(test)]
mod tests {
    use super::super::target::Engine;
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            engine: Engine::Kubernetes,
            pod: "mnist-ab1-worker-3".into(),
            uid: "u".into(),
            container: "worker".into(),
            role: "worker".into(),
            index: Some(3),
            ranks: Default::default(),
            prefix: "worker-3".into(),
        }
    }

    fn style(format: Format) -> Style {
        Style {
            format,
            prefix: true,
            timestamps: false,
            color: false,
            rank: None,
        }
    }

    #[test]
    fn text_lines() {
        let mut out = Vec::new();
        let mut f = LineFormat::new(&target(), style(Format::Text));
        f.push(&mut out, b"2026-01-01T00:00:00.5Z", b"hello\r");
        let mut f = LineFormat::new(
            &target(),
            Style {
                timestamps: true,
                ..style(Format::Text)
            },
        );
        f.push(&mut out, b"2026-01-01T00:00:00.5Z", b"again");
        let mut f = LineFormat::new(
            &target(),
            Style {
                prefix: false,
                ..style(Format::Text)
            },
        );
        f.push(&mut out, b"t", b"bare");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "worker-3 | hello\nworker-3 | 2026-01-01T00:00:00.5Z again\nbare\n"
        );
        let mut f = LineFormat::new(
            &target(),
            Style {
                color: true,
                ..style(Format::Text)
            },
        );
        let mut out = Vec::new();
        f.push(&mut out, b"", b"x");
        assert!(out.starts_with(b"\x1b["), "{out:?}");
    }

    #[test]
    fn attempt_lines_carry_their_number() {
        let mut out = Vec::new();
        LineFormat::new(&target(), style(Format::Text))
            .with_attempt(3)
            .push(&mut out, b"", b"hi");
        assert_eq!(String::from_utf8(out).unwrap(), "#3 worker-3 | hi\n");
        let mut out = Vec::new();
        LineFormat::new(&target(), style(Format::Json))
            .with_attempt(3)
            .push(&mut out, b"t", b"hi");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["attempt"].clone(), v["message"].clone()),
            (json!(3), json!("hi"))
        );
    }

    #[test]
    fn json_lines_are_valid_json() {
        let mut out = Vec::new();
        let mut f = LineFormat::new(&target(), style(Format::Json));
        f.push(
            &mut out,
            b"2026-01-01T00:00:00.5Z",
            b"say \"hi\"\t\\ \x01 \xff \xe2\x80\xa8 ok",
        );
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["time"], "2026-01-01T00:00:00.5Z");
        assert_eq!(v["pod"], "mnist-ab1-worker-3");
        assert_eq!(v["container"], "worker");
        assert_eq!(v["role"], "worker");
        assert_eq!(v["engine"], "kubernetes");
        assert_eq!(v["index"], 3);
        assert_eq!(v["rank"], serde_json::Value::Null);
        assert_eq!(v["message"], "say \"hi\"\t\\ \u{1} \u{fffd} \u{2028} ok");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, JSON_KEYS);
        // A local run's launcher: same keys, Docker, no index.
        let launcher = Target {
            engine: Engine::Docker,
            pod: "mnist-ab1-launcher".into(),
            container: "launcher".into(),
            role: "launcher".into(),
            index: None,
            prefix: "launcher".into(),
            ..target()
        };
        let mut out = Vec::new();
        LineFormat::new(&launcher, style(Format::Json)).push(&mut out, b"t", b"m");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["engine"], "docker");
        assert_eq!(v["index"], serde_json::Value::Null);
        let keys2: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys2, keys);
    }

    #[test]
    fn a_launchers_tagged_lines_show_their_rank() {
        let launcher = Target {
            pod: "j-launcher".into(),
            container: "launcher".into(),
            role: "launcher".into(),
            index: None,
            ranks: super::super::rank::TagForms::OPEN_MPI,
            prefix: "launcher".into(),
            ..target()
        };
        let log: [&[u8]; 4] = [
            b"[1,0]<stdout>:zero",
            b"mpirun: not tagged\r",
            b"[1,1]<stdout>:one [1,0]<stdout>:glued[1,0]<stdout>:",
            b"[1,1]<stdout>:end",
        ];
        let run = |style: Style| {
            let mut f = LineFormat::new(&launcher, style);
            let mut out = Vec::new();
            let n: u64 = log.iter().map(|l| f.push(&mut out, b"t", l)).sum();
            let text = String::from_utf8(out).unwrap();
            assert_eq!(n as usize, text.lines().count());
            text
        };
        assert_eq!(
            run(style(Format::Text)),
            "launcher r0 | zero\nlauncher | mpirun: not tagged\nlauncher r0 | glued\nlauncher r1 | one end\n"
        );
        assert_eq!(
            run(Style {
                prefix: false,
                ..style(Format::Text)
            }),
            "zero\nmpirun: not tagged\nglued\none end\n"
        );
        let coloured = run(Style {
            color: true,
            ..style(Format::Text)
        });
        assert!(
            coloured.starts_with(&format!(
                "\x1b[{}mlauncher r0\x1b[0m | zero\n",
                launcher.color()
            )),
            "{coloured:?}"
        );
        assert_eq!(
            run(Style {
                rank: Some(1),
                ..style(Format::Text)
            }),
            "launcher r1 | one end\n"
        );
        assert_eq!(
            run(Style {
                rank: Some(7),
                ..style(Format::Text)
            }),
            ""
        );
        let json = run(style(Format::Json));
        let ranks: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["rank"].clone())
            .collect();
        assert_eq!(ranks, [json!(0), json!(null), json!(0), json!(1)]);
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["message"], "zero");
        // A worker (no tags read) under --rank shows nothing; without it, everything as is.
        let mut f = LineFormat::new(
            &target(),
            Style {
                rank: Some(0),
                ..style(Format::Text)
            },
        );
        let mut out = Vec::new();
        assert_eq!(f.push(&mut out, b"t", b"[1,0]<stdout>:x"), 0);
        let mut f = LineFormat::new(&target(), style(Format::Text));
        assert_eq!(f.push(&mut out, b"t", b"[1,0]<stdout>:x"), 1);
        assert_eq!(out, b"worker-3 | [1,0]<stdout>:x\n");
        // Held pieces come out at the end.
        let mut f = LineFormat::new(&launcher, style(Format::Text));
        let mut out = Vec::new();
        assert_eq!(
            f.push(&mut out, b"t", b"[1,2]<stdout>:half[1,0]<stdout>:x"),
            1
        );
        assert_eq!(f.finish(&mut out), 1);
        assert_eq!(out, b"launcher r0 | x\nlauncher r2 | half\n");
    }

    #[test]
    fn an_elastic_launchers_lines_say_their_ranks_are_start_ranks() {
        let launcher = Target {
            pod: "j-launcher".into(),
            container: "launcher".into(),
            role: "launcher".into(),
            index: None,
            ranks: super::super::rank::TagForms::HOROVODRUN_ELASTIC,
            prefix: "launcher".into(),
            ..target()
        };
        let log: [&[u8]; 3] = [
            b"[1]<stdout>:Total img/sec on 2 GPU(s)",
            b"hvdctl: training command exited with code 0",
            // Not elastic horovodrun's form: shown as it is.
            b"[1,0]<stdout>:x",
        ];
        let run = |style: Style| {
            let mut f = LineFormat::new(&launcher, style);
            let mut out = Vec::new();
            for l in log {
                f.push(&mut out, b"t", l);
            }
            f.finish(&mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            run(style(Format::Text)),
            "launcher s1 | Total img/sec on 2 GPU(s)\nlauncher | hvdctl: training command exited with code 0\nlauncher | [1,0]<stdout>:x\n"
        );
        // --rank N is the start rank here too.
        assert_eq!(
            run(Style {
                rank: Some(1),
                ..style(Format::Text)
            }),
            "launcher s1 | Total img/sec on 2 GPU(s)\n"
        );
        let json = run(style(Format::Json));
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["startRank"], 1, "{json}");
        assert!(first.get("rank").is_none(), "{json}");
        let second: serde_json::Value = serde_json::from_str(json.lines().nth(1).unwrap()).unwrap();
        assert_eq!(second["startRank"], serde_json::Value::Null, "{json}");
    }

    #[test]
    fn printer_writes_every_batch_in_order() {
        let (tx, rx) = mpsc::channel(2);
        let writer = std::thread::spawn(move || {
            let mut out = Vec::new();
            let p = print_all(rx, &mut out).unwrap();
            (p, out)
        });
        for i in 0..100 {
            tx.blocking_send(format!("line {i}\n").into_bytes())
                .unwrap();
        }
        drop(tx);
        let (p, out) = writer.join().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 100);
        assert!(
            text.lines()
                .enumerate()
                .all(|(i, l)| l == format!("line {i}"))
        );
        assert_eq!(p.bytes as usize, text.len());
    }
}
