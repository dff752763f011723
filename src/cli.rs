//! The command line (clap derive): global flags and one struct per subcommand. Parsing only;
//! `commands/` turns these into work.

use crate::backend::Backend;
pub use crate::options::{
    Global, ListFormat, ManifestFormat, RoleFilter, StatusFormat, TargetRole, Watch,
};
use crate::ui::ColorChoice;
use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "hvdctl",
    version,
    about = "Distributed Horovod (MPI/Gloo) training on Kubernetes and Docker",
    long_about = long_about("hvdctl")
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    /// Cluster flags written before the subcommand (`hvdctl -n ml status`), as kubectl allows.
    #[command(flatten)]
    pub cluster: LeadingClusterArgs,
    /// Without one, hvdctl prints its help.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// The global flags: the common ones and, for commands that talk to a cluster, the
    /// cluster flags.
    pub fn global(&self) -> Global {
        let cluster = match self.command.as_ref() {
            Some(Command::Deploy(a)) => Some(&a.cluster),
            Some(Command::Dev(a)) => Some(&a.cluster),
            Some(Command::Status(a)) => Some(&a.cluster),
            Some(Command::Runs(a)) => Some(&a.cluster),
            Some(Command::Events(a)) => Some(&a.cluster),
            Some(Command::Undeploy(a)) => Some(&a.cluster),
            Some(Command::Logs(a)) => Some(&a.cluster),
            Some(Command::Scale(a)) => Some(&a.cluster),
            Some(Command::Version(a)) => Some(&a.cluster),
            Some(Command::Exec(a)) => Some(&a.cluster),
            Some(Command::Cp(a)) => Some(&a.cluster),
            Some(Command::PortForward(a)) => Some(&a.cluster),
            Some(Command::Tensorboard(a)) => Some(&a.cluster),
            Some(Command::Timeline(a)) => Some(&a.cluster),
            Some(Command::Doctor(a)) => Some(&a.cluster),
            _ => None,
        };
        let c = cluster.cloned().unwrap_or_default();
        let lead = &self.cluster;
        Global {
            app_dir: self.common.app_dir.clone(),
            context: c.context.or(lead.context.clone()),
            namespace: c.namespace.or(lead.namespace.clone()),
            kubeconfig: c.kubeconfig.or(lead.kubeconfig.clone()),
            verbose: self.common.verbose,
            quiet: self.common.quiet,
            color: self.common.color,
            no_input: self.common.no_input,
        }
    }
}

/// Options of every command.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Global options")]
pub struct Common {
    /// The app directory (holding hvdctl.yaml)
    #[arg(
        short = 'C',
        long = "app-dir",
        global = true,
        value_name = "DIR",
        default_value = "."
    )]
    pub app_dir: PathBuf,
    /// More detail on stderr: -v each API request (method, path, status, time)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors and requested output
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Colour: auto (terminal and no NO_COLOR), always, never
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
    /// Never prompt (also when CI is set or stdin is not a terminal)
    #[arg(long, global = true)]
    pub no_input: bool,
}

/// Options of the commands that talk to a cluster.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Cluster options")]
pub struct ClusterArgs {
    /// Kubeconfig context to use (default: the current context, or a recorded run's own)
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: hvdctl.yaml's, then the context's, then "default")
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// [`ClusterArgs`] before the subcommand: accepted, not shown (each command that talks to a
/// cluster lists them in its own help).
#[derive(Debug, Args, Clone, Default)]
pub struct LeadingClusterArgs {
    #[arg(long, value_name = "NAME", hide = true)]
    pub context: Option<String>,
    #[arg(short = 'n', long, value_name = "NS", hide = true)]
    pub namespace: Option<String>,
    #[arg(long, value_name = "FILE", hide = true)]
    pub kubeconfig: Option<PathBuf>,
}

/// `--backend`: the registered backends' names (see `crate::backend`).
fn backend_parser() -> impl clap::builder::TypedValueParser<Value = Backend> {
    clap::builder::PossibleValuesParser::new(crate::backend::names()).map(|s| {
        s.parse::<Backend>()
            .expect("possible values are registered backends")
    })
}

/// A whole number of at least `min`. Negative numbers reach it as values (clap would take
/// `-1` for a flag and suggest `-- -1`), so `--rank -1` is told what the flag takes.
fn at_least<T>(min: T) -> impl Fn(&str) -> crate::Result<T> + Clone + Send + Sync + 'static
where
    T: TryFrom<i128> + Into<i128> + Copy + std::fmt::Display + Send + Sync + 'static,
{
    between(min, None)
}

/// A whole number from `min` to `max` (`None`: as large as the type holds).
fn between<T>(
    min: T,
    max: Option<T>,
) -> impl Fn(&str) -> crate::Result<T> + Clone + Send + Sync + 'static
where
    T: TryFrom<i128> + Into<i128> + Copy + std::fmt::Display + Send + Sync + 'static,
{
    move |s: &str| {
        let range = match max {
            Some(max) => format!("{min} to {max}"),
            None => format!("at least {min}"),
        };
        let n: i128 = s
            .trim()
            .parse()
            .map_err(|_| crate::Error::input(format!("not a whole number ({range})")))?;
        if max.is_some_and(|m| n > m.into()) || (max.is_some() && n < min.into()) {
            return Err(crate::Error::input(format!("must be {range}")));
        }
        if n < min.into() {
            return Err(crate::Error::input(if min.into() == 0 {
                "must be 0 or more".to_string()
            } else {
                format!("must be at least {min}")
            }));
        }
        T::try_from(n).map_err(|_| crate::Error::input("too large"))
    }
}

/// Completion of RUN arguments: the runs recorded in `.hvdctl/` of the current directory,
/// newest first (nothing is contacted while typing).
fn complete_runs(current: &std::ffi::OsStr) -> Vec<clap_complete::CompletionCandidate> {
    let current = current.to_string_lossy();
    let mut runs = crate::state::runs(std::path::Path::new("."), &|_| {});
    runs.reverse();
    runs.iter()
        .flat_map(|r| {
            let about = format!("{} ({}, {})", r.job, r.backend, r.created);
            [(r.run_id.clone(), about.clone()), (r.job.clone(), about)]
        })
        .filter(|(v, _)| v.starts_with(current.as_ref()))
        .map(|(v, about)| clap_complete::CompletionCandidate::new(v).help(Some(about.into())))
        .collect()
}

/// Completion of `--template`: the built-in catalog.
fn complete_templates() -> Vec<clap_complete::CompletionCandidate> {
    crate::scaffold::Catalog::new(None)
        .list()
        .unwrap_or_default()
        .into_iter()
        .map(|t| clap_complete::CompletionCandidate::new(t.name).help(Some(t.description.into())))
        .collect()
}

/// `--dry-run[=client|server]`, as kubectl has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    /// Print the complete object set; contact nothing
    Client,
    /// Ask the API server to validate every object without persisting anything
    Server,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scaffold an app from a template
    Init(InitArgs),
    /// List the app templates
    Templates(TemplatesArgs),
    /// Build the app's image through the Docker Engine API (and push it with --push)
    Build(BuildArgs),
    /// Push the last built image (or IMAGE:--tag) to its registry
    Push(PushArgs),
    /// Render the run's manifests and apply them (or print them with --dry-run)
    Deploy(DeployArgs),
    /// Deploy warm, then on each saved change copy it into the run and start a new attempt
    Dev(DevArgs),
    /// Show a run's job state, conditions and pods (or every run with --all)
    Status(StatusArgs),
    /// List this app's runs on every engine, newest first: state, phase times, provenance
    Runs(RunsArgs),
    /// Show the events of a run's objects and pods, oldest first
    Events(EventsArgs),
    /// Delete everything a run created and wait until it is gone
    Undeploy(UndeployArgs),
    /// Print the logs of every pod of a run, multiplexed (follow with -f)
    Logs(LogsArgs),
    /// Change the number of workers of a running elastic run, in place
    Scale(ScaleArgs),
    /// Run a command in a pod/container of a run (the launcher by default)
    Exec(ExecArgs),
    /// Copy files and directories between this machine and a run's pods/containers
    Cp(CpArgs),
    /// Forward a local port to a port of a run's pod/container
    PortForward(PortForwardArgs),
    /// Serve a run's TensorBoard logs (tensorboard.logDir) on a local port
    Tensorboard(TensorboardArgs),
    /// Fetch a run's Horovod timeline (timeline: true) and say which rank held the others
    Timeline(TimelineArgs),
    /// Print a shell completion script
    Completions(CompletionsArgs),
    /// Print hvdctl's version and commit, and the cluster's version when it answers
    Version(VersionArgs),
    /// Check that everything a run of this app needs is in place (cluster, permissions, nodes, image, Docker)
    Doctor(DoctorArgs),
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub app: AppOverrides,
    /// The image to look for (default: as deploy picks it: the last built, else hvdctl.yaml's)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Output format: text (one line per check), or json (an array of {check, status, message, hint})
    #[arg(short, long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    /// Print a namespaced Role with what hvdctl needs, and a ClusterRole with its cluster-scoped reads; check nothing
    #[arg(long)]
    pub print_role: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to create the app in (default: the current directory)
    pub dir: Option<PathBuf>,
    /// Template to start from (see `hvdctl templates`)
    #[arg(short, long, value_name = "NAME", add = clap_complete::ArgValueCandidates::new(complete_templates))]
    pub template: Option<String>,
    /// App name (default: the directory's name)
    #[arg(long, value_name = "APP")]
    pub name: Option<String>,
    /// Image repository (default: the app name)
    #[arg(long, value_name = "REPO")]
    pub image: Option<String>,
    /// A directory of your own templates (same layout as the built-in catalog)
    #[arg(long, value_name = "PATH")]
    pub template_dir: Option<PathBuf>,
    /// Write into a non-empty directory, replacing files the template provides
    #[arg(long)]
    pub force: bool,
    /// The image's base (the horovod* templates): official (the horovod/horovod image) or
    /// debian (Debian packages + Horovod built from source, CPU; see the template README)
    #[arg(long, value_enum, value_name = "BASE")]
    pub base: Option<crate::scaffold::Base>,
}

#[derive(Debug, Args)]
pub struct TemplatesArgs {
    /// Output format: text (a table), json or yaml (name and description of each)
    #[arg(short, long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    /// A directory of your own templates instead of the built-in catalog
    #[arg(long, value_name = "PATH")]
    pub template_dir: Option<PathBuf>,
}

/// Flags that pick what a run is made of (shared by deploy and later commands).
#[derive(Debug, Args, Clone)]
pub struct AppOverrides {
    /// Job backend (default: hvdctl.yaml's `backend`)
    #[arg(long, value_parser = backend_parser())]
    pub backend: Option<Backend>,
    /// Override a key of hvdctl.yaml (dotted path), e.g. --set workers=8 --set env.NCCL_DEBUG=INFO
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    pub app: AppOverrides,
    /// client (or no value): print the complete object set, contact nothing; server: ask the API server to validate every object, persist nothing
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "client")]
    pub dry_run: Option<DryRun>,
    /// Same as --dry-run=server
    #[arg(long, hide = true, conflicts_with = "dry_run")]
    pub server_dry_run: bool,
    /// Output format of --dry-run: yaml (a stream of documents) or json (a v1 List)
    #[arg(short, long, value_enum, default_value_t = ManifestFormat::Yaml)]
    pub output: ManifestFormat,
    /// Use this run id instead of a random one (1-5 lowercase letters or digits)
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Image to run (default: the last image built with `hvdctl build`, else hvdctl.yaml's)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Create the namespace if it does not exist
    #[arg(long)]
    pub create_namespace: bool,
    /// Wait (with progress) until every pod runs or the job ends
    #[arg(long)]
    pub wait: bool,
    /// Follow the run's logs after deploying; exit with the job's result (0 succeeded, 1 failed)
    #[arg(long, conflicts_with = "dry_run")]
    pub logs: bool,
    /// Rank 0 writes Horovod's timeline (`timeline: true`; `hvdctl timeline` reads it)
    #[arg(long)]
    pub timeline: bool,
    /// Do not push the image before deploying
    #[arg(long)]
    pub no_push: bool,
    /// Skip the checks before anything is created (a worker no node can hold, a quota without room, an image its registry does not have)
    #[arg(long)]
    pub skip_checks: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

impl DeployArgs {
    /// The dry-run mode asked for (`--server-dry-run` is `--dry-run=server`).
    pub fn dry_run(&self) -> Option<DryRun> {
        if self.server_dry_run {
            Some(DryRun::Server)
        } else {
            self.dry_run
        }
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Output format: text (a summary and one row per pod), wide (text with pod IPs), json or yaml (the same report as data)
    #[arg(short, long, value_enum, default_value_t = StatusFormat::Text)]
    pub output: StatusFormat,
    /// Print again whenever something changes (until Ctrl-C or the job ends)
    #[arg(short, long)]
    pub watch: bool,
    /// Wait until the job ends; exit 0 if it succeeded, 1 if it failed
    #[arg(long)]
    pub wait: bool,
    /// List every hvdctl run in the namespace and on the Docker engine (from labels)
    #[arg(long, conflicts_with = "run")]
    pub all: bool,
    /// With --all: every namespace
    #[arg(short = 'A', long, requires = "all")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

impl StatusArgs {
    /// What `report::show` needs of these flags.
    pub fn watch_options(&self) -> Watch {
        Watch {
            output: self.output,
            watch: self.watch,
            wait: self.wait,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Output format: text (a table), json or yaml (one object per run)
    #[arg(short, long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    /// Print the table again whenever it changes, until Ctrl-C (text only)
    #[arg(short, long)]
    pub watch: bool,
    /// Every namespace of the context (default: the app's namespace)
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Every app's runs (default: the app in the current directory)
    #[arg(long)]
    pub all_apps: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct UndeployArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Remove every run of this app (in the namespace and on the Docker engine)
    #[arg(long, conflicts_with = "run")]
    pub all: bool,
    /// Do not ask before --all (required without a terminal)
    #[arg(short, long)]
    pub yes: bool,
    /// With --all: also delete the app's `storage:` claims (their data is lost)
    #[arg(long, requires = "all")]
    pub volumes: bool,
    /// Wait until everything is gone (the default)
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Return once deletion is requested
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Workers wanted, between the run's elastic minWorkers and maxWorkers
    #[arg(long, value_name = "N", required = true, allow_negative_numbers = true, value_parser = at_least(1u32))]
    pub workers: u32,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Keep printing new events until Ctrl-C
    #[arg(short, long)]
    pub follow: bool,
    /// Output format: text (a table), json or yaml (time, type, reason, object, message, count);
    /// with -f, one JSON object per line or one YAML document per event
    #[arg(short, long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Output format: text, json or yaml (client, commit, server, context, mpiJobVersions)
    #[arg(short, long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    /// Only the client's version; contact nothing
    #[arg(long)]
    pub client: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub app: AppOverrides,
    /// Image to start from (default: the last image built with `hvdctl build`, else
    /// hvdctl.yaml's); a change to the Dockerfile or the requirements builds a new one
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Use this run id instead of a random one (kept when a rebuild replaces the run)
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Create the namespace if it does not exist
    #[arg(long)]
    pub create_namespace: bool,
    /// Milliseconds of quiet after a change before it is synced, 10 to 10000 (an editor's
    /// save is often several writes)
    #[arg(long, value_name = "MS", default_value_t = 150, allow_negative_numbers = true, value_parser = between(10u64, Some(10_000)))]
    pub debounce: u64,
    /// Skip deploy's checks before anything is created (as `hvdctl deploy --skip-checks`)
    #[arg(long)]
    pub skip_checks: bool,
    /// Output format of the attempts' lines: text (`#N launcher r1 | …`), or json (the
    /// keys of `hvdctl logs -o json` and `attempt`)
    #[arg(short, long, value_enum, default_value_t = LogFormat::Text)]
    pub output: LogFormat,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args, Clone)]
pub struct LogsArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Follow: stream new lines and new pods until the job ends (exit 0 if it succeeded, 1 if it failed)
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines newer than this (e.g. 30s, 5m, 2h)
    #[arg(long, value_name = "DURATION", conflicts_with = "since_time")]
    pub since: Option<String>,
    /// Only lines at or after this time (RFC 3339)
    #[arg(long, value_name = "RFC3339")]
    pub since_time: Option<String>,
    /// Lines from the end of each container's log to start with (-1: all, the default)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub tail: Option<i64>,
    /// Which pods: launcher, worker or all
    #[arg(long, value_enum, default_value_t = RoleFilter::All)]
    pub role: RoleFilter,
    /// Only pods whose name matches this regular expression
    #[arg(long, value_name = "REGEX")]
    pub pod: Option<String>,
    /// Only this container
    #[arg(short = 'c', long, value_name = "NAME")]
    pub container: Option<String>,
    /// Only the lines of this MPI rank. Ranks' output comes through the launcher, tagged by
    /// the MPI (`launcher r3 | …`); this reads the launcher only (so not with --role worker)
    /// and keeps its lines tagged N. --pod/--container/--since apply as usual; --tail counts
    /// the launcher's lines before the rank is picked
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = at_least(0u32))]
    pub rank: Option<u32>,
    /// Prefix each line with its timestamp
    #[arg(long)]
    pub timestamps: bool,
    /// Do not prefix lines with the pod name (and rank)
    #[arg(long)]
    pub no_prefix: bool,
    /// Output format: text, or json (one object per line: time, engine, pod, container, role,
    /// index, rank — null when a line carries no rank tag —, message)
    #[arg(short, long, value_enum, default_value_t = LogFormat::Text)]
    pub output: LogFormat,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressChoice {
    Auto,
    Plain,
    Tty,
}

/// Which builder of the Docker daemon builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BuilderChoice {
    /// BuildKit when the daemon has it (API 1.39+ on Linux), else the classic builder
    Auto,
    /// BuildKit (cache mounts, `# syntax=`, heredocs); an error if the daemon cannot
    Buildkit,
    /// The classic builder
    Legacy,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Push the image after building it
    #[arg(long)]
    pub push: bool,
    /// Tag (default: derived from the source: git short SHA, plus a content hash when dirty)
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// Build argument (repeatable), added to hvdctl.yaml's build.args
    #[arg(long = "build-arg", value_name = "KEY=VALUE")]
    pub build_arg: Vec<String>,
    /// Do not use the build cache
    #[arg(long)]
    pub no_cache: bool,
    /// Always pull newer versions of the base images
    #[arg(long)]
    pub pull: bool,
    /// Progress display: live on a terminal (auto), the builder's lines (plain; BuildKit's
    /// as `docker buildx --progress plain` shows them), or live even with TERM=dumb (tty;
    /// where stderr is no terminal at all, only the result is printed)
    #[arg(long, value_enum, default_value_t = ProgressChoice::Auto)]
    pub progress: ProgressChoice,
    /// Builder: BuildKit when the daemon has it (auto), or forced
    #[arg(long, value_enum, default_value_t = BuilderChoice::Auto)]
    pub builder: BuilderChoice,
    /// A build secret for `RUN --mount=type=secret,id=ID` (repeatable; BuildKit only; the
    /// file is never part of the image or printed)
    #[arg(long, value_name = "id=ID,src=PATH")]
    pub secret: Vec<String>,
    /// An ssh-agent lent to `RUN --mount=type=ssh[,id=ID]` (repeatable; BuildKit only):
    /// `default` is $SSH_AUTH_SOCK; steps may list and use its keys, never add or remove them
    #[arg(long, value_name = "ID[=SOCKET]")]
    pub ssh: Vec<String>,
    /// Override a key of hvdctl.yaml (as for deploy)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// Tag to push (default: the last image `hvdctl build` made)
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// Progress display: bars on a terminal (auto) or the daemon's lines (plain)
    #[arg(long, value_enum, default_value_t = ProgressChoice::Auto)]
    pub progress: ProgressChoice,
}

// --- exec, cp, port-forward ------------------------------------------------------------------

/// Which pod/container of the run (exec, port-forward).
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// launcher (the default) or worker
    #[arg(long, value_enum)]
    pub role: Option<TargetRole>,
    /// The worker's index (implies --role worker; default 0)
    #[arg(long, value_name = "I", allow_negative_numbers = true, value_parser = at_least(0u32))]
    pub index: Option<u32>,
    /// The container in the pod (default: its first; a local run has one per pod)
    #[arg(short = 'c', long, value_name = "NAME")]
    pub container: Option<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  hvdctl exec -- nvidia-smi\n  hvdctl exec --index 1 -it -- bash\n  hvdctl exec ab12x -- sh -c 'ls /data'\n\nThe exit code is the command's (126/127 when it cannot run)."
)]
pub struct ExecArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Pass this terminal's stdin to the command
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Give the command a terminal (with -i: an interactive shell)
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The command and its arguments, after --
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Help of a command whose positional arguments are read by hand (`[RUN]` before required
/// ones, which clap cannot express): their own "Arguments:" section, then clap's options.
/// The top help's text, its examples typed as `program` (`hvdctl`, or `kubectl hvd`).
pub fn long_about(program: &str) -> String {
    let examples = [
        (
            format!("{program} init mnist --template horovod"),
            "scaffold an app",
        ),
        (
            format!("{program} build --push"),
            "build and push its image",
        ),
        (
            format!("{program} deploy"),
            "render manifests and apply them",
        ),
        (
            format!("{program} status / {program} logs -f"),
            "watch the run",
        ),
        (format!("{program} undeploy"), "remove every trace of it"),
    ];
    let w = examples.iter().map(|(c, _)| c.len()).max().unwrap_or(0) + 3;
    let mut s = String::from("Distributed Horovod (MPI/Gloo) training on Kubernetes and Docker.\n");
    for (c, what) in examples {
        s.push_str(&format!("\n{c:<w$}{what}"));
    }
    s
}

/// `cp`'s usage after the program's name (`hvdctl`, or `kubectl hvd`).
macro_rules! cp_usage {
    () => {
        "cp [OPTIONS] [RUN] SRC DEST"
    };
}

/// `port-forward`'s usage after the program's name.
macro_rules! port_forward_usage {
    () => {
        "port-forward [OPTIONS] [RUN] [LOCAL:]REMOTE"
    };
}

macro_rules! args_help {
    ($args:literal) => {
        concat!(
            "{about-with-newline}\n{usage-heading} {usage}\n\nArguments:\n",
            $args,
            "\n\n{all-args}{after-help}"
        )
    };
}

#[derive(Debug, Args)]
#[command(
    override_usage = concat!("hvdctl ", cp_usage!()),
    help_template = args_help!(
        "  [RUN]  Run id or job name (default: the app's last run)\n  SRC    What to copy: launcher:PATH, worker-I:PATH, or a local path\n  DEST   Where to put it, in the same forms"
    ),
    after_help = "The run's side is launcher:PATH or worker-I:PATH; any other argument is a local path.\n\
    A destination that is an existing directory receives the source under its own name; otherwise\n\
    it is the copy's name. Directories are copied whole, with their files' modes.\n\n\
    Examples:\n  hvdctl cp ./data launcher:/tmp\n  hvdctl cp worker-1:/tmp/out ./out-1\n  hvdctl cp ab12x launcher:/app/checkpoints ."
)]
pub struct CpArgs {
    /// [RUN] SRC DEST (described in the help template)
    #[arg(num_args = 2..=3, required = true, value_names = ["SRC", "DEST"], hide = true)]
    pub args: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
#[command(
    override_usage = concat!("hvdctl ", port_forward_usage!()),
    help_template = args_help!(
        "  [RUN]            Run id or job name (default: the app's last run)\n  [LOCAL:]REMOTE   The port in the pod/container, and the local one on 127.0.0.1 (none: the same\n                   port; empty, as in `:22`: any free port, printed)"
    ),
    after_help = "Examples:\n  hvdctl port-forward 8080:80\n  hvdctl port-forward --index 1 :22    (any free local port; printed)"
)]
pub struct PortForwardArgs {
    /// [RUN] [LOCAL:]REMOTE (described in the help template)
    #[arg(num_args = 1..=2, required = true, value_name = "[LOCAL:]REMOTE", hide = true)]
    pub args: Vec<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
#[command(
    after_help = "TensorBoard runs in worker 0's pod/container (where rank 0 writes tensorboard.logDir), so the\n\
    run's image needs the tensorboard package and the run must still be running; hvdctl forwards\n\
    127.0.0.1:PORT to it and prints the URL. Ctrl-C stops forwarding.\n\n\
    Examples:\n  hvdctl tensorboard\n  hvdctl tensorboard ab12x --port 0    (any free local port; printed)"
)]
pub struct TensorboardArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Local port on 127.0.0.1 (0: any free port)
    #[arg(long, value_name = "PORT", default_value_t = 6006)]
    pub port: u16,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Rank 0 writes the timeline in worker 0's pod/container when the run was deployed with\n\
    `timeline: true` (or `deploy --timeline`); it is read while the run runs, or after it ended\n\
    while that container is still there. The trace opens in https://ui.perfetto.dev and\n\
    chrome://tracing; the report says, per rank, how often it was the last one ready in a\n\
    collective's negotiation and for how long it held the others.\n\n\
    Examples:\n  hvdctl timeline\n  hvdctl timeline ab12x --trace /tmp/t.json -o json"
)]
pub struct TimelineArgs {
    /// Run id or job name (default: the app's last run)
    #[arg(add = clap_complete::ArgValueCompleter::new(complete_runs))]
    pub run: Option<String>,
    /// Where the Chrome-trace JSON goes (default: JOB-timeline.json here)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// The report: text, or json for scripts
    #[arg(short, long, value_enum, default_value_t = LogFormat::Text)]
    pub output: LogFormat,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_known_by_its_file_name() {
        let of = |a: &str| Invoked::from_argv0(Some(std::ffi::OsStr::new(a)));
        assert_eq!(of("/home/u/.krew/bin/kubectl-hvd"), Invoked::KubectlPlugin);
        assert_eq!(of("kubectl-hvd.exe"), Invoked::KubectlPlugin);
        assert_eq!(
            of("/usr/local/bin/kubectl_complete-hvd"),
            Invoked::KubectlCompleter
        );
        assert_eq!(of("/usr/local/bin/hvdctl"), Invoked::Hvdctl);
        assert_eq!(of("kubectl-hvdx"), Invoked::Hvdctl);
        assert_eq!(Invoked::from_argv0(None), Invoked::Hvdctl);
    }

    #[test]
    fn command_lines_in_help_say_the_program() {
        let p = "kubectl hvd";
        assert_eq!(
            say_program(
                "run `hvdctl logs -f` or hvdctl status\n  hvdctl -n ml runs",
                p
            ),
            "run `kubectl hvd logs -f` or kubectl hvd status\n  kubectl hvd -n ml runs"
        );
        // The name elsewhere stays: files, directories, possessives, prose.
        for keep in [
            "hvdctl.yaml",
            ".hvdctl/ records",
            "hvdctl's labels",
            "(set by hvdctl)",
        ] {
            assert_eq!(say_program(keep, p), keep);
        }
        let help = command(Invoked::KubectlPlugin).render_help().to_string();
        assert!(
            help.contains("Usage: kubectl hvd [OPTIONS] [COMMAND]"),
            "{help}"
        );
        assert!(!help.contains("hvdctl init"), "{help}");
    }

    #[test]
    fn whole_numbers_with_a_least() {
        let workers = at_least(1u32);
        assert_eq!(workers("3").ok(), Some(3));
        assert_eq!(workers("0").unwrap_err().message, "must be at least 1");
        assert_eq!(workers("-1").unwrap_err().message, "must be at least 1");
        assert_eq!(
            workers("x").unwrap_err().message,
            "not a whole number (at least 1)"
        );
        assert_eq!(workers("4294967296").unwrap_err().message, "too large");
        let rank = at_least(0u32);
        assert_eq!(rank("-1").unwrap_err().message, "must be 0 or more");
        let debounce = between(10u64, Some(10_000));
        assert_eq!(debounce("150").ok(), Some(150));
        assert_eq!(debounce("-5").unwrap_err().message, "must be 10 to 10000");
        assert_eq!(
            debounce("10001").unwrap_err().message,
            "must be 10 to 10000"
        );
        assert_eq!(
            debounce("x").unwrap_err().message,
            "not a whole number (10 to 10000)"
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cmd = Cli::command();
        assert!(cmd.get_version().is_some(), "hvdctl -V");
        for sub in cmd.get_subcommands() {
            assert!(
                !sub.get_arguments().any(|a| a.get_short() == Some('V')),
                "{} has -V",
                sub.get_name()
            );
        }
        let bare = Cli::try_parse_from(["hvdctl"]).unwrap();
        assert!(bare.command.is_none());
    }
}

// --- The name hvdctl answers to ----------------------------------------------------------------

/// How hvdctl was invoked, from the file name it was run as (`argv[0]`): kubectl runs a plugin
/// `kubectl-hvd` found on `PATH` for `kubectl hvd …` (krew installs plugins so), and asks an
/// executable `kubectl_complete-hvd` for the completions of `kubectl hvd …` (kubectl 1.26+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invoked {
    Hvdctl,
    /// As `kubectl-hvd`: help, usage and completions say `kubectl hvd`.
    KubectlPlugin,
    /// As `kubectl_complete-hvd`: kubectl asks for the completions of `kubectl hvd ARGS…`.
    KubectlCompleter,
}

/// The plugin's file name, as kubectl looks it up on `PATH`.
pub const PLUGIN_FILE: &str = "kubectl-hvd";
/// The plugin's completion helper's file name, as kubectl looks it up on `PATH`.
pub const PLUGIN_COMPLETER_FILE: &str = "kubectl_complete-hvd";

impl Invoked {
    /// From the first argument hvdctl was started with.
    pub fn from_argv0(argv0: Option<&std::ffi::OsStr>) -> Invoked {
        let file = argv0
            .and_then(|a| std::path::Path::new(a).file_name())
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        let file = file.strip_suffix(".exe").unwrap_or(file);
        match file {
            PLUGIN_FILE => Invoked::KubectlPlugin,
            PLUGIN_COMPLETER_FILE => Invoked::KubectlCompleter,
            _ => Invoked::Hvdctl,
        }
    }

    /// How this process was invoked.
    pub fn now() -> Invoked {
        Invoked::from_argv0(std::env::args_os().next().as_deref())
    }

    /// What people type to run hvdctl this way.
    pub fn program(self) -> &'static str {
        match self {
            Invoked::Hvdctl => "hvdctl",
            Invoked::KubectlPlugin | Invoked::KubectlCompleter => "kubectl hvd",
        }
    }
}

/// The command line's definition, named as hvdctl was invoked: as kubectl's plugin, its usage
/// lines, help texts and examples say `kubectl hvd` where they say `hvdctl`.
pub fn command(invoked: Invoked) -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    if invoked == Invoked::Hvdctl {
        return cmd;
    }
    let program = invoked.program();
    as_program(cmd, program)
        .long_about(long_about(program))
        .bin_name(program)
        .display_name(program)
        .mut_subcommand("cp", |c| {
            c.override_usage(format!("{program} {}", cp_usage!()))
        })
        .mut_subcommand("port-forward", |c| {
            c.override_usage(format!("{program} {}", port_forward_usage!()))
        })
}

/// `text` with each `hvdctl ` that starts a command line (`hvdctl logs -f`, `` `hvdctl status` ``)
/// said as `program`; the name elsewhere (`hvdctl.yaml`, `.hvdctl/`, `hvdctl's`) stays.
pub fn say_program(text: &str, program: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("hvdctl ") {
        let starts = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || matches!(c, '`' | '(' | '"' | '\''));
        let next = rest[i + 7..].chars().next();
        let command = next.is_some_and(|c| c.is_ascii_lowercase() || c == '-');
        out.push_str(&rest[..i]);
        out.push_str(if starts && command { program } else { "hvdctl" });
        out.push(' ');
        rest = &rest[i + 7..];
    }
    out.push_str(rest);
    out
}

/// Every help text of `cmd`, its arguments and subcommands, through [`say_program`].
fn as_program(cmd: clap::Command, program: &str) -> clap::Command {
    let say =
        |t: Option<&clap::builder::StyledStr>| t.map(|t| say_program(&t.to_string(), program));
    let about = say(cmd.get_about());
    let long_about = say(cmd.get_long_about());
    let before = say(cmd.get_before_help());
    let before_long = say(cmd.get_before_long_help());
    let after = say(cmd.get_after_help());
    let after_long = say(cmd.get_after_long_help());
    let mut cmd = cmd;
    if let Some(t) = about {
        cmd = cmd.about(t);
    }
    if let Some(t) = long_about {
        cmd = cmd.long_about(t);
    }
    if let Some(t) = before {
        cmd = cmd.before_help(t);
    }
    if let Some(t) = before_long {
        cmd = cmd.before_long_help(t);
    }
    if let Some(t) = after {
        cmd = cmd.after_help(t);
    }
    if let Some(t) = after_long {
        cmd = cmd.after_long_help(t);
    }
    cmd.mut_args(|a| {
        let help = a.get_help().map(|t| say_program(&t.to_string(), program));
        let long = a
            .get_long_help()
            .map(|t| say_program(&t.to_string(), program));
        let a = match help {
            Some(t) => a.help(t),
            None => a,
        };
        match long {
            Some(t) => a.long_help(t),
            None => a,
        }
    })
    .mut_subcommands(|c| as_program(c, program))
}

/// kubectl's request for the completions of `kubectl hvd ARGS…` (`args`: the words after
/// `kubectl hvd`, the last one the word being typed, maybe empty), answered as cobra's
/// `__complete` answers it: one candidate a line (`value<TAB>description`), then the
/// directive line — `:4` (no file completion) unless a path is being completed (`:0`).
pub fn complete_for_kubectl(
    args: Vec<std::ffi::OsString>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut cmd = command(Invoked::KubectlPlugin);
    let mut words = vec![std::ffi::OsString::from(PLUGIN_FILE)];
    words.extend(args);
    if words.len() == 1 {
        words.push(std::ffi::OsString::new());
    }
    let index = words.len() - 1;
    let dir = std::env::current_dir().ok();
    let candidates = clap_complete::engine::complete(&mut cmd, words, index, dir.as_deref())?;
    let mut paths = false;
    for c in candidates.iter().filter(|c| !c.is_hide_set()) {
        let value = c.get_value().to_string_lossy();
        paths |= value.contains(std::path::MAIN_SEPARATOR);
        match c.get_help() {
            Some(h) => {
                let h = h.to_string();
                writeln!(out, "{value}\t{}", h.lines().next().unwrap_or_default())?
            }
            None => writeln!(out, "{value}")?,
        }
    }
    writeln!(out, ":{}", if paths { 0 } else { 4 })
}
