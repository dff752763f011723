//! `fake-cluster --listen 127.0.0.1:0 --kubeconfig FILE [flags]`: prints its URL as the first
//! line on stdout, writes the kubeconfig, serves until killed.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use fake_cluster::{FakeCluster, Faults, KubeletMode, Options};

const USAGE: &str =
    "usage: fake-cluster [--listen ADDR] [--kubeconfig FILE] [--mpi-operator] [--trainer]
  [--kueue [--kueue-quota RES=QTY,...]] [--volcano] [--kubelet synthetic|docker] [--pause-image IMAGE]
  [--nodes N [--node-cpu C] [--node-memory M] [--node-gpus G] [--node-taint K=V:EFFECT]...]
  [--cut-logs-every N] [--fail-rate F] [--log-fail-rate F] [--watch-expire-secs S]
  [--delay-ms MS] [--forbid VERB:RESOURCE]... [--kubelet-delay-ms MS]
  [--restart-backoff-ms MS] [--history-limit N] [--bookmark-interval-ms MS]";

fn main() {
    match run() {
        Ok(()) => {}
        Err(msg) => {
            eprintln!("fake-cluster: {msg}\n{USAGE}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<(), String> {
    let mut opts = Options::default();
    let mut faults = Faults::default();
    let mut kubeconfig: Option<PathBuf> = None;
    let (mut kueue, mut quota) = (false, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: invalid value {v:?}"))
        }
        match flag.as_str() {
            "--listen" => opts.listen = num(&flag, value()?)?,
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value()?)),
            "--mpi-operator" => opts.mpi_operator = true,
            "--trainer" => opts.trainer = true,
            "--kueue" => kueue = true,
            "--kueue-quota" => {
                quota = Some(
                    fake_cluster::kueue::Quota::parse(&value()?)
                        .map_err(|e| format!("--kueue-quota: {e}"))?,
                )
            }
            "--volcano" => opts.volcano = true,
            "--kubelet" => {
                opts.kubelet = match value()?.as_str() {
                    "synthetic" => KubeletMode::Synthetic,
                    "docker" => KubeletMode::Docker,
                    other => {
                        return Err(format!(
                            "--kubelet: {other:?} is neither \"synthetic\" nor \"docker\""
                        ));
                    }
                }
            }
            "--pause-image" => opts.pause_image = Some(value()?),
            "--nodes" => opts.nodes.count = num(&flag, value()?)?,
            "--node-cpu" => opts.nodes.cpu = value()?,
            "--node-memory" => opts.nodes.memory = value()?,
            "--node-gpus" => opts.nodes.gpus = num(&flag, value()?)?,
            "--node-taint" => opts.nodes.taints.push(value()?),
            "--cut-logs-every" => faults.cut_logs_every = num(&flag, value()?)?,
            "--fail-rate" => faults.fail_rate = num(&flag, value()?)?,
            "--log-fail-rate" => faults.log_fail_rate = num(&flag, value()?)?,
            "--watch-expire-secs" => faults.watch_expire_secs = num(&flag, value()?)?,
            "--delay-ms" => faults.delay_ms = num(&flag, value()?)?,
            "--forbid" => faults.forbid.push(value()?),
            "--kubelet-delay-ms" => {
                opts.kubelet_delay = Duration::from_millis(num(&flag, value()?)?)
            }
            "--restart-backoff-ms" => {
                opts.restart_backoff = Duration::from_millis(num(&flag, value()?)?)
            }
            "--history-limit" => opts.history_limit = num(&flag, value()?)?,
            "--bookmark-interval-ms" => {
                opts.bookmark_interval = Duration::from_millis(num(&flag, value()?)?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    for (name, rate) in [
        ("--fail-rate", faults.fail_rate),
        ("--log-fail-rate", faults.log_fail_rate),
    ] {
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!("{name} must be between 0 and 1"));
        }
    }
    opts.faults = faults;
    // The quota means nothing without --kueue.
    if kueue {
        opts.kueue = Some(quota.unwrap_or_default());
    }
    if opts.nodes.count > 0 {
        opts.nodes.validate()?;
    }
    let fc = FakeCluster::start(opts).map_err(|e| format!("cannot start: {e}"))?;
    // The kubeconfig is written before the URL is printed: a reader of the first line can use it at once.
    if let Some(path) = kubeconfig {
        fc.write_kubeconfig(&path)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", fc.url()).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    eprintln!("fake-cluster: serving on {}", fc.url());
    // SIGTERM/SIGINT stop the server and (Docker kubelet) remove every container, volume
    // and network this fake cluster created.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok::<(), String>(())
    })?;
    eprintln!("fake-cluster: stopping");
    drop(fc);
    Ok(())
}
