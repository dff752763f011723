//! Building an image (`POST /build`): with BuildKit when the daemon has it (see
//! [`super::buildkit`]), else with the classic builder, which this file drives.
//! [`Builder`] forces one; `Auto` says once, on the log, when it falls back to the classic
//! builder and why.
//!
//! The classic builder gets the context tarred while it is uploaded
//! ([`BuildContext::tar_stream`]); BuildKit fetches it through a session. Output goes to
//! stderr as live progress on a terminal (the step running, its last line of output, the
//! context upload), or as the daemon's lines verbatim otherwise ([`ProgressMode::Plain`] or
//! no terminal). A failing step becomes an [`Error`] holding the daemon's message and the last
//! [`FAILED_STEP_LINES`] lines that step printed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::query_parameters::BuildImageOptions;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::auth::DockerConfig;
use super::context::BuildContext;
use super::docker::{DockerClient, describe_bollard};
use super::progress::{ProgressMode, human_bytes};
use super::tag::{validate_repo, validate_tag};
use crate::error::{Error, Result};

use super::progress::FAILED_STEP_LINES;

/// Proxy variables passed from the environment as build args (the builder accepts them
/// without an `ARG` and keeps them out of the image history).
pub const PROXY_VARS: [&str; 10] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
    "ftp_proxy",
    "FTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
];

/// Which builder of the daemon builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Builder {
    /// BuildKit when the daemon has it (API ≥ 1.39 on Linux), else the classic builder.
    #[default]
    Auto,
    /// BuildKit, or an error when the daemon cannot.
    BuildKit,
    /// The classic builder (deprecated by Docker 23; no `RUN --mount`).
    Legacy,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// The build context directory.
    pub context_dir: PathBuf,
    /// The Dockerfile, relative to the context (`Dockerfile` by default).
    pub dockerfile: String,
    /// Image repository, e.g. `127.0.0.1:5000/team/mnist`.
    pub repo: String,
    /// Image tag, e.g. `abc1234` (see [`super::tag::default_tag`]).
    pub tag: String,
    /// `--build-arg`s. Proxy variables from the environment are added unless set here.
    pub build_args: BTreeMap<String, String>,
    /// Do not use the build cache.
    pub no_cache: bool,
    /// Always pull newer versions of the `FROM` images.
    pub pull: bool,
    /// Build only up to this stage of a multi-stage Dockerfile (`--target`).
    pub target: Option<String>,
    /// Labels set on the image.
    pub labels: BTreeMap<String, String>,
    pub progress: ProgressMode,
    pub builder: Builder,
    /// `--secret`s: served to BuildKit's `RUN --mount=type=secret` through a session.
    pub secrets: Vec<super::session::SecretSpec>,
    /// `--ssh` agents: lent read-only to `RUN --mount=type=ssh` through the session.
    pub ssh: Vec<super::sshforward::SshSpec>,
}

impl BuildRequest {
    /// A request with the defaults: `Dockerfile`, no build args or labels, cache on, no pull,
    /// no target, `Auto` progress.
    pub fn new(
        context_dir: impl Into<PathBuf>,
        repo: impl Into<String>,
        tag: impl Into<String>,
    ) -> Self {
        BuildRequest {
            context_dir: context_dir.into(),
            dockerfile: "Dockerfile".into(),
            repo: repo.into(),
            tag: tag.into(),
            build_args: BTreeMap::new(),
            no_cache: false,
            pull: false,
            target: None,
            labels: BTreeMap::new(),
            progress: ProgressMode::Auto,
            builder: Builder::Auto,
            secrets: Vec::new(),
            ssh: Vec::new(),
        }
    }

    /// `repo:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.repo, self.tag)
    }
}

/// A built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// The image id (`sha256:…`).
    pub id: String,
    /// `repo:tag`.
    pub reference: String,
    pub repo: String,
    pub tag: String,
    /// Bytes of the context sent to the daemon: the whole tar archive with the classic
    /// builder; with BuildKit only the contents of the files the daemon did not have.
    pub context_bytes: u64,
}

/// The build args actually sent: `user`'s plus the proxy variables set (non-empty) in the
/// environment that `user` does not set.
pub fn effective_build_args(user: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    effective_build_args_from(user, |k| std::env::var(k).ok())
}

fn effective_build_args_from(
    user: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut args = user.clone();
    for var in PROXY_VARS {
        if args.contains_key(var) {
            continue;
        }
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            args.insert(var.to_string(), v);
        }
    }
    args
}

/// Builds `req` on `docker`; plain progress lines are written to `log` (the caller passes
/// stderr; tests pass a buffer). Returns the built image, tagged `repo:tag`.
pub async fn build(
    docker: &DockerClient,
    req: &BuildRequest,
    log: &mut (dyn Write + Send),
) -> Result<BuiltImage> {
    validate_repo(&req.repo)?;
    validate_tag(&req.tag)?;
    let ctx = BuildContext::open(&req.context_dir, &req.dockerfile)?;
    let reference = req.reference();
    let job = Job {
        req,
        reference: &reference,
        build_args: effective_build_args(&req.build_args).into_iter().collect(),
        credentials: from_credentials(log).await?,
        ctx,
    };
    let attached = super::session::Attached::of(&req.secrets, &req.ssh)?;
    let (id, context_bytes, with) = if use_buildkit(docker, req.builder, &attached, log).await? {
        let built = job.with_buildkit(docker, attached, log).await?;
        (built.image_id, built.context_bytes, " with BuildKit")
    } else {
        let (id, sent) = job.classic(docker, log).await?;
        (id, sent, "")
    };
    let _ = writeln!(
        log,
        "built {reference} ({}){with}",
        super::short_image_id(&id)
    );
    Ok(BuiltImage {
        id,
        reference,
        repo: req.repo.clone(),
        tag: req.tag.clone(),
        context_bytes,
    })
}

/// One build: the request and what is read once for it.
struct Job<'a> {
    req: &'a BuildRequest,
    reference: &'a str,
    build_args: HashMap<String, String>,
    /// Credentials for `FROM` images, by registry server.
    credentials: Option<HashMap<String, DockerCredentials>>,
    ctx: BuildContext,
}

/// Credentials for FROM images in private registries, best effort: what cannot be read is
/// a warning. Helpers are programs waited for: on the blocking pool.
async fn from_credentials(
    log: &mut (dyn Write + Send),
) -> Result<Option<HashMap<String, DockerCredentials>>> {
    let loaded =
        tokio::task::spawn_blocking(|| DockerConfig::load().map(|cfg| cfg.all_credentials()))
            .await
            .map_err(|e| Error::failure(format!("reading registry credentials stopped: {e}")))?;
    Ok(match loaded {
        Ok((found, failed)) => {
            for f in failed {
                let _ = writeln!(log, "warning: not using registry credentials: {f}");
            }
            let all: HashMap<String, DockerCredentials> = found
                .into_iter()
                .map(|c| (c.server().to_string(), c.bollard()))
                .collect();
            (!all.is_empty()).then_some(all)
        }
        Err(e) => {
            let _ = writeln!(log, "warning: not using registry credentials: {e}");
            None
        }
    })
}

/// Whether to build with BuildKit: `--builder`, what the daemon can do, and whether the
/// build needs secrets or ssh mounts (BuildKit's alone).
async fn use_buildkit(
    docker: &DockerClient,
    builder: Builder,
    attached: &super::session::Attached,
    log: &mut (dyn Write + Send),
) -> Result<bool> {
    Ok(match builder {
        Builder::Legacy if let Some(flags) = attached.flags() => {
            return Err(Error::input(format!(
                "{flags} needs BuildKit: the classic builder has no build secrets or ssh mounts"
            ))
            .hint("drop --builder legacy"));
        }
        Builder::Legacy => false,
        Builder::BuildKit => {
            super::buildkit::supported(docker).await.map_err(|why| {
                Error::failure(format!(
                    "--builder buildkit: the daemon at {} cannot build with BuildKit: {why}",
                    docker.host()
                ))
                .hint("build with --builder legacy, or use a newer Docker daemon")
            })?;
            true
        }
        Builder::Auto => match super::buildkit::supported(docker).await {
            Ok(()) => true,
            Err(why) if let Some(flags) = attached.flags() => {
                return Err(Error::failure(format!(
                    "{flags} needs BuildKit, and the daemon at {} cannot build with it: {why}",
                    docker.host()
                )));
            }
            Err(why) => {
                let _ = writeln!(log, "note: building with the classic builder: {why}");
                false
            }
        },
    })
}

impl Job<'_> {
    fn labels(&self) -> HashMap<String, String> {
        self.req
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A BuildKit build through the daemon's session (see [`super::buildkit`]).
    async fn with_buildkit(
        &self,
        docker: &DockerClient,
        attached: super::session::Attached,
        log: &mut (dyn Write + Send),
    ) -> Result<super::buildkit::Built> {
        let registry_config = self.credentials.as_ref().and_then(|c| {
            use base64::Engine;
            serde_json::to_vec(c)
                .ok()
                .map(|j| base64::engine::general_purpose::URL_SAFE.encode(j))
        });
        let labels = self.labels();
        let params = super::buildkit::Params {
            reference: self.reference,
            context: &self.ctx,
            build_args: &self.build_args,
            labels: &labels,
            target: self.req.target.as_deref(),
            no_cache: self.req.no_cache,
            pull: self.req.pull,
            registry_config,
            progress: self.req.progress,
            attached,
        };
        super::buildkit::build(docker, params, log).await
    }

    /// A classic build: the context's tar streamed as the request's body, the answer's
    /// steps and pulls shown. The image's ID and the bytes of context sent.
    async fn classic(
        self,
        docker: &DockerClient,
        log: &mut (dyn Write + Send),
    ) -> Result<(String, u64)> {
        let req = self.req;
        let reference = self.reference;
        let options = BuildImageOptions {
            dockerfile: self.ctx.dockerfile().to_string(),
            t: Some(reference.to_string()),
            nocache: req.no_cache,
            pull: req.pull.then(|| "1".to_string()),
            rm: true,
            forcerm: true,
            buildargs: (!self.build_args.is_empty()).then(|| self.build_args.clone()),
            labels: (!req.labels.is_empty()).then(|| self.labels()),
            target: req.target.clone().unwrap_or_default(),
            ..Default::default()
        };
        let sent = Arc::new(AtomicU64::new(0));
        let tar = self.ctx.tar_stream();
        let tar_error = tar.error_slot();
        let counter = sent.clone();
        let body = tar.map(move |chunk| {
            if let Ok(b) = &chunk {
                counter.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            chunk
        });
        let mut ui = BuildUi::new(req.progress, sent.clone());
        let stream = docker.bollard().build_image(
            options,
            self.credentials,
            Some(bollard::body_try_stream(body)),
        );
        let mut steps = StepLog::default();
        let result = read_answer(stream, reference, &mut ui, &mut steps, log).await;
        steps.flush();
        ui.finish();
        if let Some(e) = tar_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e.context(format!(
                "sending the build context {}",
                self.ctx.root().display()
            )));
        }
        let id = match result? {
            Some(id) => id,
            // Older daemons only print "Successfully built <id>".
            None => docker
                .bollard()
                .inspect_image(reference)
                .await
                .map_err(|e| {
                    Error::failure(format!(
                        "the build of {reference} ended, but the image is not there: {}",
                        describe_bollard(&e)
                    ))
                })?
                .id
                .unwrap_or_default(),
        };
        Ok((id, sent.load(Ordering::Relaxed)))
    }
}

/// The classic builder's answer: steps and pull progress shown as they come; the image's ID
/// when the daemon names it.
async fn read_answer(
    mut stream: impl futures::Stream<
        Item = std::result::Result<bollard::models::BuildInfo, bollard::errors::Error>,
    > + Unpin,
    reference: &str,
    ui: &mut BuildUi,
    steps: &mut StepLog,
    log: &mut (dyn Write + Send),
) -> Result<Option<String>> {
    let mut image_id: Option<String> = None;
    let mut pulls: HashMap<String, String> = HashMap::new();
    while let Some(msg) = stream.next().await {
        ui.context_done(log);
        let info = msg.map_err(|e| build_error(reference, &describe_bollard(&e), steps))?;
        if let Some(text) = &info.stream {
            for line in steps.push(text) {
                ui.line(log, &line, steps.current.as_deref());
            }
        }
        if let Some(status) = &info.status {
            // Pull progress of FROM images: one line per layer and state change.
            let id = info.id.clone().unwrap_or_default();
            if pulls.get(&id) != Some(status) {
                pulls.insert(id.clone(), status.clone());
                let line = if id.is_empty() {
                    status.clone()
                } else {
                    format!("{id}: {status}")
                };
                ui.line(log, &line, steps.current.as_deref());
            }
        }
        if let Some(id) = info.aux.as_ref().and_then(|aux| aux.id.as_ref()) {
            image_id = Some(id.clone());
        }
    }
    Ok(image_id)
}

fn build_error(reference: &str, message: &str, steps: &mut StepLog) -> Error {
    steps.flush();
    let mut text = match &steps.current {
        Some(step) => format!("building {reference} failed at {step}\n{message}"),
        None => format!("building {reference} failed: {message}"),
    };
    let output: Vec<&String> = steps
        .output
        .iter()
        .filter(|l| !l.starts_with(" ---> ") && !l.starts_with("Removing intermediate container"))
        .collect();
    if !output.is_empty() {
        text.push_str(&format!(
            "\noutput of that step (last {} lines):",
            output.len()
        ));
        for line in output {
            text.push_str("\n  | ");
            text.push_str(line);
        }
    }
    let hint = if steps.current.is_some() {
        "fix that step of the Dockerfile and build again"
    } else {
        "check the Dockerfile and the build context"
    };
    Error::failure(text).hint(hint)
}

/// Drops terminal escape sequences (the classic builder colours a step's stderr red).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    out
}

/// Splits the daemon's `stream` text into lines and keeps the current step's last lines.
#[derive(Default)]
struct StepLog {
    partial: String,
    /// `Step 3/5 : RUN make`.
    current: Option<String>,
    output: VecDeque<String>,
}

impl StepLog {
    fn push(&mut self, text: &str) -> Vec<String> {
        self.partial.push_str(text);
        let mut lines = Vec::new();
        while let Some(pos) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=pos).collect();
            let line = strip_ansi(line.trim_end_matches(['\n', '\r']));
            self.record(&line);
            lines.push(line);
        }
        lines
    }

    fn flush(&mut self) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.record(&strip_ansi(line.trim_end()));
        }
    }

    fn record(&mut self, line: &str) {
        if line.starts_with("Step ") && line.contains(" : ") {
            self.current = Some(line.to_string());
            self.output.clear();
        } else {
            if self.output.len() == FAILED_STEP_LINES {
                self.output.pop_front();
            }
            self.output.push_back(line.to_string());
        }
    }
}

/// Terminal or plain progress for one build.
struct BuildUi {
    bar: Option<ProgressBar>,
    sent: Arc<AtomicU64>,
    uploading: bool,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl BuildUi {
    fn new(mode: ProgressMode, sent: Arc<AtomicU64>) -> BuildUi {
        if !mode.use_bars() {
            return BuildUi {
                bar: None,
                sent,
                uploading: true,
                ticker: None,
            };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg:.dim}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_prefix("sending build context");
        let (b, s) = (bar.clone(), sent.clone());
        let ticker = tokio::spawn(async move {
            loop {
                b.set_message(human_bytes(s.load(Ordering::Relaxed)));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        BuildUi {
            bar: Some(bar),
            sent,
            uploading: true,
            ticker: Some(ticker),
        }
    }

    /// The daemon answered: the whole context has been received.
    fn context_done(&mut self, log: &mut dyn Write) {
        if !self.uploading {
            return;
        }
        self.uploading = false;
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        let line = format!(
            "sent build context: {}",
            human_bytes(self.sent.load(Ordering::Relaxed))
        );
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.set_prefix("");
                bar.set_message("");
            }
            None => {
                let _ = writeln!(log, "{line}");
            }
        }
    }

    fn line(&mut self, log: &mut dyn Write, line: &str, step: Option<&str>) {
        match &self.bar {
            Some(bar) => {
                if line.starts_with("Step ") && line.contains(" : ") {
                    bar.println(console::style(line).bold().to_string());
                    bar.set_prefix(line.to_string());
                    bar.set_message("");
                } else if !line.trim().is_empty() {
                    bar.set_prefix(step.unwrap_or("").to_string());
                    bar.set_message(line.trim().to_string());
                }
            }
            None => {
                let _ = writeln!(log, "{line}");
            }
        }
    }

    fn finish(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for BuildUi {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_from_env_unless_set() {
        let env = |k: &str| match k {
            "http_proxy" => Some("http://proxy:3128".to_string()),
            "HTTPS_PROXY" => Some("http://secure:3128".to_string()),
            "no_proxy" => Some(String::new()),
            _ => None,
        };
        let mut user = BTreeMap::new();
        user.insert("HTTPS_PROXY".to_string(), "mine".to_string());
        user.insert("A".to_string(), "1".to_string());
        let args = effective_build_args_from(&user, env);
        assert_eq!(
            args.get("http_proxy").map(String::as_str),
            Some("http://proxy:3128")
        );
        assert_eq!(args.get("HTTPS_PROXY").map(String::as_str), Some("mine"));
        assert_eq!(args.get("A").map(String::as_str), Some("1"));
        assert!(
            !args.contains_key("no_proxy"),
            "empty values are not passed"
        );
        assert_eq!(args.len(), 3);
    }

    #[test]
    fn step_log_keeps_the_failing_step() {
        let mut s = StepLog::default();
        s.push("Step 1/2 : FROM x\n ---> abc\nStep 2/2 : RUN ma");
        s.push("ke\nline one\nline ");
        s.push("two\n");
        assert_eq!(s.current.as_deref(), Some("Step 2/2 : RUN make"));
        assert_eq!(s.output, ["line one", "line two"]);
        s.push("\u{1b}[91mred\n\u{1b}[0mplain\n");
        assert_eq!(s.output, ["line one", "line two", "red", "plain"]);
        let e = build_error(
            "r:t",
            "The command '/bin/sh -c make' returned a non-zero code: 2",
            &mut s,
        );
        assert!(e.message.contains("Step 2/2 : RUN make"), "{}", e.message);
        assert!(e.message.contains("line two"));
        assert!(e.message.contains("non-zero code: 2"));
    }
}
