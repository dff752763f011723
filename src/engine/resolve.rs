//! Finding the run a command is about, once: the RUN argument (an exact job name is tried
//! before a run id), else the app's newest run — live on any engine or, once the engines no
//! longer have it, its flight record — and when it is nowhere, saying every place that was
//! looked at, every engine that could not be asked, and what was found instead.

use super::docker::Docker;
use super::kubernetes::Kube;
use super::{Engine, EngineKind, Place, Run};
use crate::app::App;
use crate::error::{Error, Result};
use crate::kubeconfig;
use crate::ledger::record::Record;
use crate::options::Global;
use crate::state::{self, RunRecord};
use crate::ui::Ui;

/// The name [`Env::engines`] gives the Kubernetes engine.
pub const KUBERNETES: &str = "Kubernetes";

/// What a command knows before it asks any engine: flags, the app (if the directory has
/// one), the run records and the kubeconfig — each read once.
pub struct Env<'a> {
    pub g: &'a Global,
    pub ui: &'a Ui,
    pub app: Option<App>,
    records: Vec<RunRecord>,
    kubeconfig: std::result::Result<kubeconfig::Loaded, Error>,
}

/// A RUN argument, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunArg<'s> {
    text: &'s str,
    run_id: &'s str,
    /// The app, when the argument is a job name (`<app>-<run id>`).
    app: Option<&'s str>,
}

/// Checks a RUN argument before any lookup: a run id (`abcde`) or a job name (`mnist-abcde`).
fn parse_arg(arg: &str) -> Result<RunArg<'_>> {
    if crate::backend::check_run_id(arg).is_ok() {
        return Ok(RunArg {
            text: arg,
            run_id: arg,
            app: None,
        });
    }
    if let Some((app, id)) = arg.rsplit_once('-')
        && crate::backend::check_run_id(id).is_ok()
        && crate::app::validate::is_dns1123_label(app)
    {
        return Ok(RunArg {
            text: arg,
            run_id: id,
            app: Some(app),
        });
    }
    Err(Error::input(format!(
        "`{arg}` is not a run id or job name (a run id is 1-5 lowercase letters or digits, a job name `<app>-<run id>`, e.g. `abcde` or `mnist-abcde`)"
    )))
}

/// The result of a lookup.
pub enum Lookup {
    Found(Box<Run>),
    /// No RUN was given and the app's newest run is one no engine has any more: its flight
    /// record (`.hvdctl/runs/<id>/`).
    Recorded(Box<Record>),
    Missing(Missing),
}

/// A run found nowhere: what was looked for, where, and which engines could not be asked.
#[derive(Debug)]
pub struct Missing {
    pub what: String,
    pub looked: Vec<String>,
    pub unreached: Vec<(String, Error)>,
    /// Jobs of other runs seen where it was looked for (newest first, a few).
    pub others: Vec<String>,
    /// What the app's flight records say instead: the run's own record (it was undeployed)
    /// or the app's newest recorded run, and the commands that read it.
    pub recorded: Option<String>,
}

impl Missing {
    /// Nothing looked at yet for `what`.
    fn new(what: String) -> Missing {
        Missing {
            what,
            looked: vec![],
            unreached: vec![],
            others: vec![],
            recorded: None,
        }
    }

    /// Whether every engine that could hold the run was asked.
    pub fn complete(&self) -> bool {
        self.unreached.is_empty()
    }

    /// The error for commands that need the run: not found (exit 1), naming every place;
    /// when nothing at all could be asked, the reason it could not.
    pub fn into_error(mut self) -> Error {
        if self.looked.is_empty() && self.unreached.len() == 1 {
            let (_, e) = self.unreached.remove(0);
            return e;
        }
        let mut msg = format!("{} not found", self.what);
        if !self.looked.is_empty() {
            msg.push_str(&format!(": looked in {}", self.looked.join(" and ")));
        }
        for (engine, e) in &self.unreached {
            msg.push_str(&format!("\n  {engine} could not be asked: {}", e.message));
        }
        if let Some(r) = &self.recorded {
            msg.push_str(&format!("\n  {r}"));
        }
        let hint = if !self.unreached.is_empty() {
            "make the engine above reachable (kubeconfig, context, Docker daemon) and try again"
                .to_string()
        } else if !self.others.is_empty() {
            format!("runs there: {}", self.others.join(", "))
        } else {
            "it may have been undeployed; `hvdctl status --all` lists the runs (-A: every namespace)"
                .to_string()
        };
        Error::not_found(msg).hint(hint)
    }
}

/// Whether a Docker engine is configured here: `DOCKER_HOST` or a Docker context names one
/// (a malformed setting counts: asking the engine then says what is wrong), or the default
/// socket exists.
fn docker_configured() -> bool {
    use crate::image::docker::{Endpoint, Host};
    match Endpoint::from_env() {
        Ok(e) => match (&e.source, &e.host) {
            (docker_endpoint::Source::Default, Host::Unix(p)) => p.exists(),
            _ => true,
        },
        Err(_) => true,
    }
}

impl<'a> Env<'a> {
    /// Reads the app (a broken hvdctl.yaml is an error), the records (a broken file is a
    /// warning) and the kubeconfig (its errors are kept for when a cluster is needed).
    pub fn new(g: &'a Global, ui: &'a Ui) -> Result<Env<'a>> {
        let app = if g.app_dir.join(crate::app::APP_FILE).exists() {
            Some(crate::app::load(&g.app_dir, &[])?.app)
        } else {
            None
        };
        Ok(Env::with_app(g, ui, app))
    }

    /// As [`Env::new`], with the app already loaded.
    pub fn with_app(g: &'a Global, ui: &'a Ui, app: Option<App>) -> Env<'a> {
        let records = state::runs(&g.app_dir, &|w| ui.note(format!("warning: {w}")));
        Env {
            g,
            ui,
            app,
            records,
            kubeconfig: kubeconfig::load(g),
        }
    }

    pub fn kubeconfig(&self) -> Result<&kubeconfig::Loaded> {
        self.kubeconfig.as_ref().map_err(Clone::clone)
    }

    /// The namespace of a Kubernetes run: `-n`, the app's, the context's, `default`.
    pub fn namespace(&self) -> Result<String> {
        self.kubeconfig()?.namespace(
            self.g,
            self.app.as_ref().and_then(|a| a.namespace.as_deref()),
        )
    }

    /// The Kubernetes engine of the flags' context, looking in `namespace` (`None`: every
    /// namespace).
    pub async fn kube(&self, namespace: Option<String>) -> Result<Kube> {
        Kube::connect(
            self.kubeconfig()?,
            self.g.context.as_deref(),
            namespace,
            self.g.verbose > 0,
        )
        .await
    }

    /// The Docker engine (`DOCKER_HOST`, else the default socket).
    pub async fn docker(&self) -> Result<Docker> {
        Docker::connect().await
    }

    /// Every engine that could hold runs here, named ([`KUBERNETES`], `the Docker engine`): `Ok` when connected (for Kubernetes: when the
    /// kubeconfig names a usable context), `Err` with why not (no kubeconfig, no daemon). A
    /// machine with no Docker engine configured is not asked at all. Bad input — a malformed
    /// kubeconfig, an unknown `--context`, a bad `-n` — is an error at once.
    pub async fn engines(&self, all_namespaces: bool) -> Result<Vec<(String, Result<Engine>)>> {
        let kube = async {
            if let kubeconfig::Loaded::Missing(looked) = self.kubeconfig()? {
                return Ok(Err(Error::failure(format!("no kubeconfig: {looked}"))));
            }
            let ns = if all_namespaces {
                None
            } else {
                Some(self.namespace()?)
            };
            match self.kube(ns).await {
                Ok(k) => Ok(Ok(Engine::Kubernetes(k))),
                Err(e) if e.kind == crate::error::Kind::Input => Err(e),
                Err(e) => Ok(Err(e)),
            }
        };
        let docker = async {
            if docker_configured() {
                Some(self.docker().await.map(Engine::Docker))
            } else {
                None
            }
        };
        let (k, d) = tokio::join!(kube, docker);
        let mut out = vec![(KUBERNETES.to_string(), k?)];
        if let Some(d) = d {
            out.push(("the Docker engine".to_string(), d));
        }
        Ok(out)
    }

    /// Saves `run`'s flight record in the app directory (only there, and only for this app's
    /// runs); a failure is a warning, never the command's.
    pub async fn save_record(&self, run: &Run) {
        let Some(app) = self.app.as_ref().filter(|a| a.name == run.info().app) else {
            return;
        };
        match run.record(&self.g.app_dir, app.recorder.max_mb).await {
            Ok(dir) => self.ui.debug(format!("recorded in {}", dir.display())),
            Err(e) => self.ui.note(format!(
                "warning: the flight record of run {} was not saved: {}",
                run.info().run_id,
                e.message
            )),
        }
    }

    /// The flight record of the run `arg` names, for a run the engines no longer have
    /// (`None` without an argument or a record); says on stderr that the record answers.
    pub fn recorded(&self, arg: Option<&str>) -> Result<Option<crate::ledger::record::Record>> {
        let Some(arg) = arg.map(parse_arg).transpose()? else {
            return Ok(None);
        };
        let rec = crate::ledger::record::load(&self.g.app_dir, arg.run_id)?
            .filter(|r| arg.app.is_none_or(|a| a == r.report.app));
        if let Some(r) = &rec {
            self.note_recorded(r);
        }
        Ok(rec)
    }

    /// Says on stderr that `r`'s flight record answers, and why.
    pub fn note_recorded(&self, r: &Record) {
        self.ui.note(format!(
            "run {} ({}) (recorded; {}): answering from its flight record ({})",
            r.report.run,
            r.report.job,
            r.gone(),
            r.dir.display()
        ));
    }

    /// The flight records of the app's runs, newest first (none outside an app directory).
    fn app_records(&self) -> Vec<Record> {
        let Some(app) = &self.app else {
            return Vec::new();
        };
        crate::ledger::record::of_app(&self.g.app_dir, &app.name, &|w| {
            self.ui.note(format!("warning: {w}"))
        })
    }

    /// Every run (of `app`, when given) on every engine reachable here, oldest first, and
    /// the places looked. An engine that cannot be asked is a warning; an error only when
    /// none was reached.
    pub async fn every_run(
        &self,
        all_namespaces: bool,
        app: Option<&str>,
    ) -> Result<(Vec<Run>, Vec<String>)> {
        let (mut runs, mut looked) = (Vec::new(), Vec::new());
        let mut reached = 0;
        let mut last_err: Option<Error> = None;
        for (name, engine) in self.engines(all_namespaces).await? {
            let got = match engine {
                Ok(e) => {
                    looked.push(e.describe());
                    e.list(app).await
                }
                Err(e) => Err(e),
            };
            match got {
                Ok(r) => {
                    reached += 1;
                    runs.extend(r.runs);
                    self.warn_unreadable(&r.unreadable);
                }
                Err(e) => {
                    self.ui
                        .note(format!("warning: {name} could not be asked: {}", e.message));
                    last_err = Some(e);
                }
            }
        }
        if reached == 0
            && let Some(e) = last_err
        {
            return Err(e);
        }
        runs.sort_by(|a, b| a.info().created.cmp(&b.info().created));
        Ok((runs, looked))
    }

    /// Says on stderr which runs a listing could not read (each error names its run).
    pub fn warn_unreadable(&self, unreadable: &[Error]) {
        for e in unreadable {
            self.ui.note(format!("warning: {}", e.message));
        }
    }

    /// The record a RUN argument (or, without one, the app's last run) names, if it fits the
    /// flags (`--context`, `-n` given explicitly must match).
    fn record(&self, arg: Option<&RunArg>) -> Option<&RunRecord> {
        let fits = |r: &&RunRecord| {
            r.engine() == EngineKind::Docker
                || (self
                    .g
                    .context
                    .as_ref()
                    .is_none_or(|c| r.context.as_ref() == Some(c))
                    && self
                        .g
                        .namespace
                        .as_ref()
                        .is_none_or(|n| r.namespace.as_ref() == Some(n)))
        };
        let recs = self.records.iter().rev();
        match arg {
            Some(a) => {
                let found = self.records.iter().rev().find(|r| r.job == a.text);
                found
                    .or_else(|| recs.clone().find(|r| r.run_id == a.text))
                    .filter(fits)
            }
            None => {
                let app = self.app.as_ref()?;
                recs.filter(|r| r.app == app.name).find(fits)
            }
        }
    }

    /// Finds the run `arg` names, or without one the app's newest run: live on an engine, or
    /// recorded once no engine has it.
    pub async fn locate(&self, arg: Option<&str>) -> Result<Lookup> {
        let arg = arg.map(parse_arg).transpose()?;
        let found = self.locate_live(arg.as_ref()).await?;
        if let (Lookup::Found(_), Some(_)) = (&found, &arg) {
            return Ok(found);
        }
        let records = self.app_records();
        match (found, &arg) {
            (Lookup::Found(run), None) => {
                // A run undeployed after this one was deployed is the newer one.
                let live = run.info().created.parse::<jiff::Timestamp>().ok();
                let newer = records.into_iter().find(|r| {
                    r.report.run != run.info().run_id
                        && matches!((r.created(), live), (Some(rc), Some(l)) if rc > l)
                        && r.undeployed.is_some()
                });
                Ok(match newer {
                    Some(r) => Lookup::Recorded(Box::new(r)),
                    None => Lookup::Found(run),
                })
            }
            (Lookup::Missing(mut m), None) => {
                // The run `deploy` recorded last was looked for and is gone: only a record
                // of it, or of a later run, is the newest.
                let last = self.record(None);
                let floor = last.and_then(|r| r.created.parse::<jiff::Timestamp>().ok());
                let newest = records.into_iter().find(|r| {
                    last.is_some_and(|l| l.run_id == r.report.run)
                        || floor.is_none_or(|f| r.created().is_some_and(|c| c >= f))
                });
                match newest {
                    Some(r) => {
                        if !m.unreached.is_empty() {
                            let names: Vec<&str> =
                                m.unreached.iter().map(|(n, _)| n.as_str()).collect();
                            self.ui.debug(format!(
                                "{} could not be asked; the newest run known is recorded",
                                names.join(" and ")
                            ));
                        }
                        m.recorded = None;
                        Ok(Lookup::Recorded(Box::new(r)))
                    }
                    None => Ok(Lookup::Missing(m)),
                }
            }
            (Lookup::Missing(mut m), Some(a)) => {
                let own = crate::ledger::record::load(&self.g.app_dir, a.run_id)
                    .ok()
                    .flatten()
                    .filter(|r| a.app.is_none_or(|app| app == r.report.app));
                m.recorded = match own {
                    Some(r) => Some(format!(
                        "run {} ({}) was {}; its record: hvdctl logs {id}, hvdctl status {id}, hvdctl events {id}",
                        r.report.run,
                        r.report.job,
                        r.gone(),
                        id = r.report.run
                    )),
                    None => records.first().map(|r| {
                        format!(
                            "the newest run of app {}, {}, was {}; its record: hvdctl logs {}",
                            r.report.app,
                            r.report.run,
                            r.gone(),
                            r.report.run
                        )
                    }),
                };
                Ok(Lookup::Missing(m))
            }
            (other, _) => Ok(other),
        }
    }

    /// The run `arg` names (or the app's last/newest run) on the engines.
    async fn locate_live(&self, arg: Option<&RunArg<'_>>) -> Result<Lookup> {
        if let Some(rec) = self.record(arg) {
            return self.at_record(rec).await;
        }
        let app_name = self.app.as_ref().map(|a| a.name.clone());
        let (what, run_id, app) = match arg {
            Some(a) => (
                format!("run `{}`", a.text),
                Some(a.run_id),
                a.app.map(str::to_owned),
            ),
            None => {
                let Some(app) = app_name else {
                    return Err(Error::input(
                        "which run? pass a RUN (run id or job name), or run this in an app directory",
                    ));
                };
                (format!("no runs of app `{app}`: a run"), None, Some(app))
            }
        };
        let mut missing = Missing::new(what);
        let mut found: Vec<Run> = Vec::new();
        for (name, engine) in self.engines(false).await? {
            let engine = match engine {
                Ok(e) => e,
                Err(e) => {
                    missing.unreached.push((name, e));
                    continue;
                }
            };
            let got = match run_id {
                Some(id) => engine
                    .find(id, app.as_deref())
                    .await
                    .map(|r| r.into_iter().collect()),
                None => engine.list(app.as_deref()).await.map(|l| {
                    self.warn_unreadable(&l.unreadable);
                    l.runs
                }),
            };
            match got {
                Ok(runs) if runs.is_empty() => {
                    missing.looked.push(where_(&engine).await);
                    if run_id.is_some()
                        && let Ok(others) = engine.list(None).await
                    {
                        missing.others.extend(
                            others
                                .runs
                                .iter()
                                .rev()
                                .take(5)
                                .map(|r| r.info().job.clone()),
                        );
                    }
                }
                Ok(runs) => found.extend(runs),
                Err(e) => missing.unreached.push((engine.describe(), e)),
            }
        }
        // Newest last; several engines holding the same id is unlikely but possible.
        found.sort_by(|a, b| a.info().created.cmp(&b.info().created));
        match found.pop() {
            Some(run) => {
                if arg.is_some()
                    && let Some(other) = found.last()
                {
                    self.ui.note(format!(
                        "warning: {} also exists in {}; using the one in {}",
                        run.info().job,
                        other.info().place,
                        run.info().place
                    ));
                }
                Ok(Lookup::Found(Box::new(run)))
            }
            None => Ok(Lookup::Missing(missing)),
        }
    }

    /// The run a record names, asked of its own engine at its own place (the recorded
    /// context, named, rather than the current one).
    async fn at_record(&self, rec: &RunRecord) -> Result<Lookup> {
        let what = format!("run `{}` ({})", rec.run_id, rec.job);
        let engine = match rec.engine() {
            EngineKind::Docker => self.docker().await.map(Engine::Docker),
            EngineKind::Kubernetes => {
                let ns = match rec.namespace.clone() {
                    Some(n) => n,
                    None => self.namespace()?,
                };
                let ctx = self.g.context.clone().or(rec.context.clone());
                Kube::connect(
                    self.kubeconfig()?,
                    ctx.as_deref(),
                    Some(ns),
                    self.g.verbose > 0,
                )
                .await
                .map(Engine::Kubernetes)
            }
        };
        let mut missing = Missing::new(what);
        let engine = match engine {
            Ok(e) => e,
            Err(e) => {
                missing.unreached.push((rec.engine().to_string(), e));
                return Ok(Lookup::Missing(missing));
            }
        };
        match engine.find(&rec.run_id, Some(&rec.app)).await {
            Ok(Some(run)) => Ok(Lookup::Found(Box::new(run))),
            Ok(None) => {
                missing.looked.push(where_(&engine).await);
                Ok(Lookup::Missing(missing))
            }
            Err(e) => {
                missing.unreached.push((engine.describe(), e));
                Ok(Lookup::Missing(missing))
            }
        }
    }

    /// The run a command needs live (exec, cp, scale, port-forward): found, or an error
    /// naming every place looked — or, when the app's newest run is only recorded, saying so
    /// and what can still read it.
    pub async fn run(&self, arg: Option<&str>) -> Result<Run> {
        match self.locate(arg).await? {
            Lookup::Found(r) => Ok(*r),
            Lookup::Recorded(r) => Err(gone_error(&r)),
            Lookup::Missing(m) => Err(m.into_error()),
        }
    }
}

/// The error of a command that needs a live run when only `r`'s record is left.
pub fn gone_error(r: &Record) -> Error {
    Error::not_found(format!(
        "the newest run of app {}, {} ({}), was {}: its containers and their files are gone",
        r.report.app,
        r.report.run,
        r.report.job,
        r.gone()
    ))
    .hint(format!(
        "its record keeps the logs, status and events: hvdctl logs {id}, hvdctl status {id}, hvdctl events {id}; `hvdctl runs` lists the runs",
        id = r.report.run
    ))
}

impl Env<'_> {
    /// The run `arg` names (or the app's newest run) for a command that a flight record can
    /// answer too (logs, status, events): live, else its record, said so on stderr, else an
    /// error naming every place looked and what was found.
    pub async fn run_or_record(&self, arg: Option<&str>) -> Result<Answer> {
        match self.locate(arg).await? {
            Lookup::Found(r) => Ok(Answer::Live(r)),
            Lookup::Recorded(r) => {
                self.note_recorded(&r);
                Ok(Answer::Record(r))
            }
            Lookup::Missing(m) => match self.recorded(arg)? {
                Some(r) => Ok(Answer::Record(Box::new(r))),
                None => Err(m.into_error()),
            },
        }
    }
}

/// What answers a command about a run: the run on its engine, or its flight record.
pub enum Answer {
    Live(Box<Run>),
    Record(Box<Record>),
}

/// Where an engine looked, with a note when a Kubernetes namespace does not exist at all.
async fn where_(e: &Engine) -> String {
    match e {
        Engine::Kubernetes(k) => match k.namespace_missing().await {
            Ok(Some(ns)) => format!("{} (namespace {ns} does not exist)", k.describe()),
            Ok(None) => k.describe(),
            Err(e) => format!(
                "{} (whether the namespace exists is not known: {})",
                k.describe(),
                e.message
            ),
        },
        Engine::Docker(_) => e.describe(),
    }
}

impl Place {
    /// The engine of this place.
    pub fn engine(&self) -> EngineKind {
        match self {
            Place::Kubernetes { .. } => EngineKind::Kubernetes,
            Place::Docker { .. } => EngineKind::Docker,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_arguments_are_checked_before_any_lookup() {
        assert_eq!(parse_arg("abcde").unwrap().run_id, "abcde");
        let j = parse_arg("my-app-x2z9q").unwrap();
        assert_eq!((j.app, j.run_id), (Some("my-app"), "x2z9q"));
        let j = parse_arg("resnet50-ab1").unwrap();
        assert_eq!((j.app, j.run_id), (Some("resnet50"), "ab1"));
        for bad in [
            "",
            "-",
            "mnist-",
            "Mnist-abc",
            "abcdef",
            "a b",
            "mnist-abcdef",
            "-abc",
        ] {
            let e = parse_arg(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }
}
