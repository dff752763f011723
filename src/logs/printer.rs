//! Presentation: how one line looks (text with a coloured prefix, or one JSON object), and the
//! single writer that owns stdout. Streams format whole lines into batches and send them over
//! one bounded channel; the printer writes them through a large buffer and flushes whenever
//! the channel is momentarily empty. A batch only ever holds complete lines, so lines from
//! different pods never interleave mid-line, and memory is bounded by the channel's capacity.

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
    /// Prefix lines with the pod's short name (text only).
    pub prefix: bool,
    /// Print each line's timestamp (text only; JSON always has `time`).
    pub timestamps: bool,
    /// ANSI colour on the prefix.
    pub color: bool,
}

/// Batches in flight between the streams and the printer. A batch holds the lines of one chunk
/// of a response (the API server's chunks are at most a few tens of KB).
pub const CHANNEL: usize = 32;
/// Bytes a stream may collect before handing a batch to the printer.
pub const BATCH: usize = 64 * 1024;

/// Formats the lines of one target; made once per target so the per-line work is copying.
#[derive(Debug, Clone)]
pub struct LineFormat {
    style: Style,
    /// Text: the (coloured) prefix and separator. JSON: `,"engine":…,"pod":…,"container":…,
    /// "role":…,"index":…,"rank":…,"message":` (the same keys for every engine).
    head: Vec<u8>,
}

impl LineFormat {
    pub fn new(t: &Target, style: Style) -> LineFormat {
        let mut head = Vec::new();
        match style.format {
            Format::Text if style.prefix => {
                if style.color {
                    head.extend_from_slice(
                        format!("\x1b[{}m{}\x1b[0m | ", t.color(), t.prefix).as_bytes(),
                    );
                } else {
                    head.extend_from_slice(t.prefix.as_bytes());
                    head.extend_from_slice(b" | ");
                }
            }
            Format::Text => {}
            Format::Json => {
                let s = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into());
                let n = |v: Option<u32>| v.map_or_else(|| "null".to_string(), |v| v.to_string());
                head.extend_from_slice(
                    format!(
                        ",\"engine\":{},\"pod\":{},\"container\":{},\"role\":{},\"index\":{},\"rank\":{},\"message\":",
                        s(t.engine.as_str()),
                        s(&t.pod),
                        s(&t.container),
                        s(&t.role),
                        n(t.index),
                        n(t.rank),
                    )
                    .as_bytes(),
                );
            }
        }
        LineFormat { style, head }
    }

    /// Appends one line (without its `\n`) stamped `ts` (the raw RFC 3339 text, may be empty).
    pub fn push(&self, out: &mut Vec<u8>, ts: &[u8], msg: &[u8]) {
        let msg = msg.strip_suffix(b"\r").unwrap_or(msg);
        match self.style.format {
            Format::Text => {
                out.extend_from_slice(&self.head);
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
                out.extend_from_slice(&self.head);
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

#[cfg(test)]
mod tests {
    use super::super::target::Engine;
    use super::*;

    fn target() -> Target {
        Target {
            engine: Engine::Kubernetes,
            pod: "mnist-ab1-worker-3".into(),
            uid: "u".into(),
            container: "worker".into(),
            role: "worker".into(),
            index: Some(3),
            rank: None,
            prefix: "worker-3".into(),
        }
    }

    fn style(format: Format) -> Style {
        Style {
            format,
            prefix: true,
            timestamps: false,
            color: false,
        }
    }

    #[test]
    fn text_lines() {
        let mut out = Vec::new();
        let f = LineFormat::new(&target(), style(Format::Text));
        f.push(&mut out, b"2026-01-01T00:00:00.5Z", b"hello\r");
        let f = LineFormat::new(
            &target(),
            Style {
                timestamps: true,
                ..style(Format::Text)
            },
        );
        f.push(&mut out, b"2026-01-01T00:00:00.5Z", b"again");
        let f = LineFormat::new(
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
        let f = LineFormat::new(
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
    fn json_lines_are_valid_json() {
        let mut out = Vec::new();
        let f = LineFormat::new(&target(), style(Format::Json));
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
        assert_eq!(
            keys,
            [
                "time",
                "engine",
                "pod",
                "container",
                "role",
                "index",
                "rank",
                "message"
            ]
        );
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
