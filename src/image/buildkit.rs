//! Building with BuildKit through the Engine API: `POST /build?version=2&remote=client-session`
//! with an empty body and a session of hvdctl's own ([`super::session`]) that serves the
//! context as the Docker CLI does, through BuildKit's file sync ([`super::filesync`]): the
//! daemon applies `.dockerignore` itself (a Dockerfile or `.dockerignore` the patterns exclude
//! does not reach `COPY .`) and keeps its copy of the context between builds, so a rebuild
//! transfers only the files that changed. The daemon answers with JSON lines whose
//! `moby.buildkit.trace` messages carry BuildKit's progress as protobuf
//! (`moby.buildkit.v1.StatusResponse`: vertexes, their statuses and logs), decoded here by
//! hand — four small messages do not justify a protobuf and gRPC stack in the binary.
//!
//! Output is `docker buildx --progress plain`'s: `#N name` when a step appears, `#N line`
//! for its output, `#N DONE 1.2s` / `#N CACHED` / `#N ERROR: …` when it ends, then
//! `sent build context: …` (the file bytes this build transferred). A failed build
//! is an [`Error`] naming the failing step (its vertex name, e.g. `[stage-0 3/4] RUN make`),
//! the daemon's message and the step's last [`FAILED_STEP_LINES`] lines.
//! Dropping the build (Ctrl-C) closes the connection, which cancels the build on the daemon.

use super::proto::{Value, fields};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::BodyExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::context::BuildContext;
use super::docker::DockerClient;
use super::filesync::{Dirs, Transfer};
use super::progress::FAILED_STEP_LINES;
use super::progress::{ProgressMode, human_bytes};
use crate::error::{Error, Result};

/// The least API version whose `/build` takes `version=2`.
pub const MIN_API: (u32, u32) = (1, 39);

/// Whether `docker` can build with BuildKit: API ≥ 1.39 on a Linux daemon (BuildKit is
/// built into every Linux dockerd since 18.09, Debian's docker.io too; `/_ping`'s
/// `Builder-Version` only says which builder the docker CLI should pick by default).
pub async fn supported(docker: &DockerClient) -> crate::Result<()> {
    let v = parse_api(docker.api_version());
    if v < MIN_API {
        return Err(crate::Error::failure(format!(
            "the daemon speaks API {} (BuildKit needs {}.{} or newer)",
            docker.api_version(),
            MIN_API.0,
            MIN_API.1
        )));
    }
    match docker.bollard().info().await {
        Ok(i) if i.os_type.as_deref().is_some_and(|o| o != "linux") => {
            Err(crate::Error::failure(format!(
                "the daemon runs on {} (BuildKit through the API is Linux-only)",
                i.os_type.unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

fn parse_api(v: &str) -> (u32, u32) {
    let (a, b) = v.split_once('.').unwrap_or((v, "0"));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

/// What one BuildKit build is asked.
pub(crate) struct Params<'a> {
    pub reference: &'a str,
    /// The context (and its Dockerfile), served through the session.
    pub context: &'a BuildContext,
    pub build_args: &'a HashMap<String, String>,
    pub labels: &'a HashMap<String, String>,
    pub target: Option<&'a str>,
    pub no_cache: bool,
    pub pull: bool,
    /// `X-Registry-Config` (base64url JSON of the credentials by registry), if any.
    pub registry_config: Option<String>,
    pub progress: ProgressMode,
    /// Secrets and ssh agents, served through the session.
    pub attached: super::session::Attached,
}

/// What a BuildKit build made and sent.
pub(crate) struct Built {
    pub image_id: String,
    /// File bytes the session sent (only the files the daemon did not have).
    pub context_bytes: u64,
}

/// Builds with BuildKit, the context served through a session.
pub(crate) async fn build(
    docker: &DockerClient,
    p: Params<'_>,
    log: &mut (dyn Write + Send),
) -> Result<Built> {
    let dirs = Dirs::of(p.context);
    let mut query = parameters(&p, &dirs.dockerfile_name);
    // Kept open until the build ends (dropped on return, Ctrl-C included).
    let transfer = Arc::new(Transfer::default());
    let session =
        super::session::start(docker, p.attached.clone(), Some(dirs), transfer.clone()).await?;
    query.push(("session", session.id.clone()));
    let body = request(docker, &query, p.registry_config.as_deref(), p.reference).await?;
    let mut ui = Ui::new(p.progress);
    let mut trace = Trace::default();
    let answer = read_answer(body, &mut trace, &mut ui, log).await;
    ui.finish();
    // A context that could not be read is the error to show, whatever the daemon made of it.
    let local_error = || {
        transfer
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(|e| {
                e.context(format!(
                    "sending the build context {}",
                    p.context.root().display()
                ))
            })
    };
    let image_id = match answer {
        Ok(id) => {
            drop(session);
            if let Some(e) = local_error() {
                return Err(e);
            }
            id
        }
        Err(message) => {
            return Err(local_error().unwrap_or_else(|| trace.error(p.reference, &message.message)));
        }
    };
    let context_bytes = transfer.bytes.load(Ordering::Relaxed);
    let files = transfer.files.load(Ordering::Relaxed);
    let _ = writeln!(
        log,
        "sent build context: {} ({context_bytes} bytes in {files} file{} of {} entries; the daemon had the rest)",
        human_bytes(context_bytes),
        if files == 1 { "" } else { "s" },
        transfer.entries.load(Ordering::Relaxed),
    );
    let image_id = image_id.ok_or_else(|| {
        Error::failure(format!(
            "the BuildKit build of {} ended without naming the image it made",
            p.reference
        ))
    })?;
    Ok(Built {
        image_id,
        context_bytes,
    })
}

/// The query of `POST /build` for a BuildKit build (the session's id is added by the caller).
fn parameters(p: &Params<'_>, dockerfile: &str) -> Vec<(&'static str, String)> {
    let mut q: Vec<(&str, String)> = vec![
        ("version", "2".into()),
        ("remote", "client-session".into()),
        ("t", p.reference.to_string()),
        ("dockerfile", dockerfile.to_string()),
        ("rm", "1".into()),
    ];
    if !p.build_args.is_empty() {
        q.push((
            "buildargs",
            serde_json::to_string(p.build_args).unwrap_or_default(),
        ));
    }
    if !p.labels.is_empty() {
        q.push((
            "labels",
            serde_json::to_string(p.labels).unwrap_or_default(),
        ));
    }
    if let Some(t) = p.target.filter(|t| !t.is_empty()) {
        q.push(("target", t.to_string()));
    }
    if p.no_cache {
        q.push(("nocache", "1".into()));
    }
    if p.pull {
        q.push(("pull", "1".into()));
    }
    q
}

/// Sends `POST /build` (no body: the session serves the context); the answer's body, or
/// the daemon's refusal.
async fn request(
    docker: &DockerClient,
    query: &[(&str, String)],
    registry_config: Option<&str>,
    reference: &str,
) -> Result<hyper::body::Incoming> {
    let query = serde_urlencoded::to_string(query)
        .map_err(|e| Error::failure(format!("encoding the build's parameters: {e}")))?;
    let mut headers = vec![("Content-Type", "application/x-tar".to_string())];
    if let Some(c) = registry_config {
        headers.push(("X-Registry-Config", c.to_string()));
    }
    let body = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {});
    let resp = docker
        .request_with_body(
            hyper::Method::POST,
            &format!("/build?{query}"),
            &headers,
            BodyExt::boxed(body),
        )
        .await?;
    let status = resp.status();
    if !status.is_success() {
        let message = super::docker::daemon_message(resp).await;
        return Err(Error::failure(format!(
            "building {reference} failed: {message} (HTTP {})",
            status.as_u16()
        )));
    }
    Ok(resp.into_body())
}

/// The answer's messages, shown as they come: the image's ID if the daemon named it, or
/// the daemon's word on why the build failed (or the stream broke).
async fn read_answer(
    body: hyper::body::Incoming,
    trace: &mut Trace,
    ui: &mut Ui,
    log: &mut (dyn Write + Send),
) -> crate::Result<Option<String>> {
    let mut lines = super::docker::JsonLines::<Message>::new(body);
    let mut image_id = None;
    while let Some(msg) = lines.next().await? {
        match trace.read(msg) {
            Said::Failed(detail) => return Err(crate::Error::failure(detail)),
            Said::Progress(events) => {
                for event in events {
                    ui.show(log, &event);
                }
            }
            Said::ImageId(id) => image_id = Some(id),
            Said::Stream(s) => {
                for line in s.lines().filter(|l| !l.trim().is_empty()) {
                    ui.plain(log, line);
                }
            }
        }
    }
    Ok(image_id)
}

/// What one message of the `/build` answer says.
pub(crate) enum Said {
    /// The build failed (the daemon's message).
    Failed(String),
    /// BuildKit's progress (`moby.buildkit.trace`), as steps and their lines.
    Progress(Vec<Event>),
    /// The image the build made (`moby.image.id`).
    ImageId(String),
    /// Text of the daemon's own (possibly empty).
    Stream(String),
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct Message {
    id: Option<String>,
    aux: Option<serde_json::Value>,
    stream: Option<String>,
    error: Option<String>,
    #[serde(rename = "errorDetail")]
    error_detail: Option<ErrorDetail>,
}

#[derive(serde::Deserialize, Default)]
struct ErrorDetail {
    message: Option<String>,
}

/// One thing to show.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    Started { n: usize, name: String },
    Log { n: usize, line: String },
    Done { n: usize, secs: f64 },
    Cached { n: usize },
    Failed { n: usize, error: String },
}

/// What is known of one vertex (a step of the build).
#[derive(Default)]
struct Step {
    n: usize,
    name: String,
    started: Option<f64>,
    completed: bool,
    error: Option<String>,
    /// Its last lines (the failed step's are in the error).
    tail: VecDeque<String>,
    /// A line not yet ended by a newline.
    partial: String,
}

/// The vertexes seen so far, numbered in the order they appeared.
#[derive(Default)]
pub(crate) struct Trace {
    steps: HashMap<String, Step>,
    order: Vec<String>,
}

impl Trace {
    /// Reads one message of the `/build` answer: a trace message is applied (one that is not
    /// base64 shows nothing).
    pub(crate) fn read(&mut self, msg: Message) -> Said {
        if let Some(detail) = msg.error_detail.and_then(|d| d.message).or(msg.error) {
            return Said::Failed(detail);
        }
        match (msg.id.as_deref(), msg.aux) {
            (Some("moby.buildkit.trace"), Some(serde_json::Value::String(b64))) => {
                Said::Progress(match STANDARD.decode(b64.as_bytes()) {
                    Ok(raw) => self.apply(&raw),
                    Err(_) => Vec::new(),
                })
            }
            (Some("moby.image.id"), Some(aux)) => match aux.get("ID").and_then(|v| v.as_str()) {
                Some(id) => Said::ImageId(id.to_string()),
                None => Said::Stream(String::new()),
            },
            _ => Said::Stream(msg.stream.unwrap_or_default()),
        }
    }

    /// Applies one `StatusResponse`; returns what to show.
    pub(crate) fn apply(&mut self, raw: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        for (field, value) in fields(raw) {
            match (field, value) {
                (1, Value::Bytes(v)) => self.vertex(v, &mut out),
                (3, Value::Bytes(l)) => self.log(l, &mut out),
                _ => {}
            }
        }
        out
    }

    fn step(&mut self, digest: &str) -> &mut Step {
        if !self.steps.contains_key(digest) {
            self.order.push(digest.to_string());
            let n = self.order.len();
            self.steps.insert(
                digest.to_string(),
                Step {
                    n,
                    ..Default::default()
                },
            );
        }
        self.steps.get_mut(digest).expect("inserted above")
    }

    fn vertex(&mut self, raw: &[u8], out: &mut Vec<Event>) {
        let (mut digest, mut name, mut cached, mut started, mut completed, mut error) = (
            String::new(),
            String::new(),
            false,
            None,
            None,
            String::new(),
        );
        for (field, value) in fields(raw) {
            match (field, value) {
                (1, Value::Bytes(b)) => digest = String::from_utf8_lossy(b).into_owned(),
                (3, Value::Bytes(b)) => name = String::from_utf8_lossy(b).into_owned(),
                (4, Value::Varint(v)) => cached = v != 0,
                (5, Value::Bytes(b)) => started = Some(timestamp(b)),
                (6, Value::Bytes(b)) => completed = Some(timestamp(b)),
                (7, Value::Bytes(b)) => error = String::from_utf8_lossy(b).into_owned(),
                _ => {}
            }
        }
        if digest.is_empty() {
            return;
        }
        let s = self.step(&digest);
        if s.name.is_empty() && !name.is_empty() {
            s.name = name.clone();
            out.push(Event::Started { n: s.n, name });
        }
        if started.is_some() && s.started.is_none() {
            s.started = started;
        }
        if s.completed {
            return;
        }
        if !error.is_empty() {
            s.completed = true;
            flush_partial(s, out);
            s.error = Some(error.clone());
            out.push(Event::Failed { n: s.n, error });
        } else if cached {
            s.completed = true;
            out.push(Event::Cached { n: s.n });
        } else if let Some(done) = completed {
            s.completed = true;
            flush_partial(s, out);
            let secs = (done - s.started.unwrap_or(done)).max(0.0);
            out.push(Event::Done { n: s.n, secs });
        }
    }

    fn log(&mut self, raw: &[u8], out: &mut Vec<Event>) {
        let (mut digest, mut msg) = (String::new(), Vec::new());
        for (field, value) in fields(raw) {
            match (field, value) {
                (1, Value::Bytes(b)) => digest = String::from_utf8_lossy(b).into_owned(),
                (4, Value::Bytes(b)) => msg.extend_from_slice(b),
                _ => {}
            }
        }
        if digest.is_empty() {
            return;
        }
        let s = self.step(&digest);
        s.partial.push_str(&String::from_utf8_lossy(&msg));
        while let Some(pos) = s.partial.find('\n') {
            let line: String = s.partial.drain(..=pos).collect();
            let line = line.trim_end_matches(['\n', '\r']).to_string();
            keep(&mut s.tail, &line);
            out.push(Event::Log { n: s.n, line });
        }
    }

    /// The build's failure: the failing step (the vertex with an error, else the last one
    /// that started and did not end), its last lines, the daemon's message.
    pub(crate) fn error(&self, reference: &str, message: &str) -> Error {
        let failed = self
            .order
            .iter()
            .filter_map(|d| self.steps.get(d))
            .find(|s| s.error.is_some())
            .or_else(|| {
                self.order
                    .iter()
                    .filter_map(|d| self.steps.get(d))
                    .rev()
                    .find(|s| s.started.is_some() && !s.completed)
            });
        let Some(step) = failed else {
            return Error::failure(format!("building {reference} failed: {message}"))
                .hint("check the Dockerfile and the build context");
        };
        let mut text = format!(
            "building {reference} failed at step #{} {}\n{message}",
            step.n, step.name
        );
        let mut tail: Vec<&String> = step.tail.iter().collect();
        if !step.partial.is_empty() {
            tail.push(&step.partial);
        }
        if !tail.is_empty() {
            text.push_str(&format!(
                "\noutput of that step (last {} lines):",
                tail.len()
            ));
            for l in tail {
                text.push_str("\n  | ");
                text.push_str(l);
            }
        }
        Error::failure(text).hint("fix that step of the Dockerfile and build again")
    }
}

fn flush_partial(s: &mut Step, out: &mut Vec<Event>) {
    if !s.partial.is_empty() {
        let line = std::mem::take(&mut s.partial);
        keep(&mut s.tail, &line);
        out.push(Event::Log { n: s.n, line });
    }
}

fn keep(tail: &mut VecDeque<String>, line: &str) {
    if tail.len() == FAILED_STEP_LINES {
        tail.pop_front();
    }
    tail.push_back(line.to_string());
}

/// A `google.protobuf.Timestamp` as seconds.
fn timestamp(raw: &[u8]) -> f64 {
    let (mut secs, mut nanos) = (0u64, 0u64);
    for (field, value) in fields(raw) {
        match (field, value) {
            (1, Value::Varint(v)) => secs = v,
            (2, Value::Varint(v)) => nanos = v,
            _ => {}
        }
    }
    secs as f64 + nanos as f64 / 1e9
}

/// Plain lines, or a spinner with the running step and its last line on a terminal.
struct Ui {
    bar: Option<ProgressBar>,
    names: HashMap<usize, String>,
}

impl Ui {
    fn new(mode: ProgressMode) -> Ui {
        let bar = mode.use_bars().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg:.dim}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar.set_prefix("starting the build");
            bar
        });
        Ui {
            bar,
            names: HashMap::new(),
        }
    }

    fn plain(&mut self, log: &mut dyn Write, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let _ = writeln!(log, "{line}");
            }
        }
    }

    fn show(&mut self, log: &mut dyn Write, e: &Event) {
        let line = match e {
            Event::Started { n, name } => {
                self.names.insert(*n, name.clone());
                if let Some(bar) = &self.bar {
                    bar.set_prefix(format!("#{n} {name}"));
                    bar.set_message("");
                }
                format!("#{n} {name}")
            }
            Event::Log { n, line } => {
                if let Some(bar) = &self.bar {
                    bar.set_message(line.trim().to_string());
                    return;
                }
                format!("#{n} {line}")
            }
            Event::Done { n, secs } => format!("#{n} DONE {secs:.1}s"),
            Event::Cached { n } => format!("#{n} CACHED"),
            Event::Failed { n, error } => format!("#{n} ERROR: {error}"),
        };
        match &self.bar {
            // On a terminal: a step's first and last lines stay, its output passes by.
            Some(bar) => match e {
                Event::Started { .. } => {}
                _ => {
                    let n = match e {
                        Event::Done { n, .. } | Event::Cached { n } | Event::Failed { n, .. } => *n,
                        _ => 0,
                    };
                    let name = self.names.get(&n).cloned().unwrap_or_default();
                    bar.println(format!("{line}  {name}"));
                }
            },
            None => {
                let _ = writeln!(log, "{line}");
            }
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc_varint(v: u64, out: &mut Vec<u8>) {
        super::super::proto::put_varint(out, v);
    }
    fn bytes_field(f: u64, data: &[u8], out: &mut Vec<u8>) {
        enc_varint(f << 3 | 2, out);
        enc_varint(data.len() as u64, out);
        out.extend_from_slice(data);
    }
    fn ts(secs: u64, nanos: u64) -> Vec<u8> {
        let mut t = Vec::new();
        enc_varint(1 << 3, &mut t);
        enc_varint(secs, &mut t);
        enc_varint(2 << 3, &mut t);
        enc_varint(nanos, &mut t);
        t
    }
    fn vertex(
        digest: &str,
        name: &str,
        started: Option<u64>,
        done: Option<u64>,
        err: &str,
    ) -> Vec<u8> {
        let mut v = Vec::new();
        bytes_field(1, digest.as_bytes(), &mut v);
        bytes_field(3, name.as_bytes(), &mut v);
        if let Some(s) = started {
            bytes_field(5, &ts(s, 0), &mut v);
        }
        if let Some(d) = done {
            bytes_field(6, &ts(d, 500_000_000), &mut v);
        }
        if !err.is_empty() {
            bytes_field(7, err.as_bytes(), &mut v);
        }
        let mut m = Vec::new();
        bytes_field(1, &v, &mut m);
        m
    }
    fn log(digest: &str, msg: &str) -> Vec<u8> {
        let mut l = Vec::new();
        bytes_field(1, digest.as_bytes(), &mut l);
        bytes_field(4, msg.as_bytes(), &mut l);
        let mut m = Vec::new();
        bytes_field(3, &l, &mut m);
        m
    }

    #[test]
    fn a_trace_becomes_numbered_steps_and_a_failure_names_its_step() {
        let mut t = Trace::default();
        assert_eq!(
            t.apply(&vertex("sha256:a", "[1/3] FROM base", Some(10), None, "")),
            [Event::Started {
                n: 1,
                name: "[1/3] FROM base".into()
            }]
        );
        assert_eq!(
            t.apply(&vertex(
                "sha256:a",
                "[1/3] FROM base",
                Some(10),
                Some(12),
                ""
            )),
            [Event::Done { n: 1, secs: 2.5 }]
        );
        t.apply(&vertex("sha256:b", "[2/3] RUN make", Some(12), None, ""));
        assert_eq!(
            t.apply(&log("sha256:b", "compiling\nlinking")),
            [Event::Log {
                n: 2,
                line: "compiling".into()
            }]
        );
        let events = t.apply(&vertex(
            "sha256:b",
            "[2/3] RUN make",
            Some(12),
            Some(13),
            "exit code: 2",
        ));
        assert_eq!(
            events,
            [
                Event::Log {
                    n: 2,
                    line: "linking".into()
                },
                Event::Failed {
                    n: 2,
                    error: "exit code: 2".into()
                }
            ]
        );
        let e = t.error(
            "r:t",
            "executor failed running [/bin/sh -c make]: exit code: 2",
        );
        assert!(
            e.message.contains("failed at step #2 [2/3] RUN make"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("  | compiling\n  | linking"),
            "{}",
            e.message
        );
        assert!(e.message.contains("exit code: 2"));
    }

    #[test]
    fn the_daemons_first_trace_decodes() {
        // The first `moby.buildkit.trace` message Debian's dockerd 20.10 sent for a build.
        let raw = STANDARD
            .decode("Cm8KR3NoYTI1Njo5NDhhMzk2M2MxNjNlYzI0ZWEzOWFiMDMzNDE1NjI0N2U4YWI3MzBlODdiYjJmNTViOWY2ZmM2ZDBkMzAwZjg2GiRbaW50ZXJuYWxdIGxvYWQgcmVtb3RlIGJ1aWxkIGNvbnRleHQ=")
            .unwrap();
        let mut t = Trace::default();
        assert_eq!(
            t.apply(&raw),
            [Event::Started {
                n: 1,
                name: "[internal] load remote build context".into()
            }]
        );
    }

    #[test]
    fn api_versions_compare_as_numbers() {
        assert!(parse_api("1.41") >= MIN_API);
        assert!(parse_api("1.39") >= MIN_API);
        assert!(parse_api("1.38") < MIN_API);
        assert!(parse_api("1.100") > MIN_API);
    }
}
