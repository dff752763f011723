//! Why a run is where it is, in one line, for both engines: the words of each reason
//! (`OOMKilled`, `ImagePullBackOff`, `CrashLoopBackOff`, a failed launcher and the first rank
//! that failed, workers whose sshd the launcher waits for). The engines find the facts
//! (`crate::cluster::reason` from pods, `crate::local::status` from containers); the wording
//! is here, so `status`, `logs -f` and `deploy --wait/--logs` say the same thing.

/// A run's reason and whether it means the run cannot succeed (`logs -f` and
/// `deploy --wait/--logs` stop with exit 1 on such a reason).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reason {
    pub text: String,
    pub failing: bool,
}

/// How many of a container's last lines a reason quotes.
pub const LAST_LINES: usize = 3;
/// How long a quoted line may be.
const LINE_MAX: usize = 160;

/// `; last lines: "a", "b"` from a log's text (its last non-empty lines, each quoted so a
/// control character cannot break the line), or nothing when there are none.
pub fn last_lines(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(LAST_LINES)..];
    if tail.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = tail
        .iter()
        .map(|l| {
            let l = strip_timestamp(l);
            let cut: String = l.chars().take(LINE_MAX).collect();
            format!("{cut:?}")
        })
        .collect();
    format!("; last lines: {}", quoted.join(", "))
}

/// A log line without the RFC 3339 timestamp the log APIs put first when asked to.
fn strip_timestamp(l: &str) -> &str {
    match l.split_once(' ') {
        Some((t, rest)) if t.parse::<jiff::Timestamp>().is_ok() => rest,
        _ => l,
    }
}

/// `OOMKilled: container C of P exceeded its memory limit 64Mi (exit 137)`.
pub fn oom(pod: &str, container: &str, limit: Option<&str>, exit: i64) -> String {
    // A local run's container is its own "pod".
    let container = if pod == container {
        container.to_string()
    } else {
        format!("{container} of {pod}")
    };
    match limit {
        Some(l) => {
            format!("OOMKilled: container {container} exceeded its memory limit {l} (exit {exit})")
        }
        None => format!(
            "OOMKilled: container {container} was killed for memory (no memory limit: the node ran out) (exit {exit})"
        ),
    }
}

/// `ImagePullBackOff: image "X" of container C: the registry's message`.
pub fn image_pull(reason: &str, image: &str, container: &str, message: &str) -> String {
    let message = message.trim();
    if message.is_empty() {
        format!("{reason}: image {image:?} of container {container} cannot be pulled")
    } else {
        format!("{reason}: image {image:?} of container {container}: {message}")
    }
}

/// A waiting pod's newest Warning event: `FailedMount: MountVolume.SetUp failed for volume
/// "creds" : secret "aws" not found`.
pub fn event(reason: &str, message: &str) -> String {
    let message = message.trim();
    if message.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {message}")
    }
}

/// Added to a reason naming an object that does not exist and that nothing of the run makes.
pub fn nothing_creates(kind: &str, name: &str) -> String {
    let what = match kind {
        "secret" => "Secret",
        "configmap" => "ConfigMap",
        _ => "PersistentVolumeClaim",
    };
    format!(" ({what} {name} does not exist and nothing of this run creates it)")
}

/// `CrashLoopBackOff: container C exited with code 3, restarted 2 time(s); last lines: …`.
pub fn crash_loop(container: &str, exit: i64, restarts: i64, lines: &str) -> String {
    format!(
        "CrashLoopBackOff: container {container} exited with code {exit}, restarted {restarts} time(s){lines}"
    )
}

/// `Failed: container C exited with code 3; last lines: …`.
pub fn failed(container: &str, exit: i64, lines: &str) -> String {
    format!("Failed: container {container} exited with code {exit}{lines}")
}

/// The first rank that failed, as the launcher's MPI summarises it at the end of its log
/// (Open MPI: `The first process to do so was: Process name: [[J,R]] Exit code: N` or
/// `process rank R with PID P on node H exited on signal S (Name)`; horovodrun: `Process R
/// exit with status code N`; Hydra: `RANK R PID P RUNNING AT H` / `EXIT STATUS: N`), with
/// that rank's last lines read from the launcher's tagged lines (`forms`, see
/// [`crate::logs::rank`]): `rank 3 (exit 7); last lines: "…"`.
pub fn first_rank(log: &str, forms: crate::logs::rank::TagForms) -> Option<String> {
    use regex::Regex;
    use std::sync::LazyLock;
    static FORMS: LazyLock<[Regex; 4]> = LazyLock::new(|| {
        [
            Regex::new(r"(?s)The first process to do so was:\s*Process name:\s*\[\[\d+,(\d+)\],\d+\]\s*Exit code:\s*(-?\d+)").unwrap(),
            Regex::new(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+) \(([^)]*)\)").unwrap(),
            Regex::new(r"Process (\d+) exit with status code (-?\d+)").unwrap(),
            Regex::new(r"(?s)RANK (\d+) PID \d+ RUNNING AT (\S+).*?(EXIT STATUS|KILLED BY SIGNAL): (\d+)").unwrap(),
        ]
    });
    static OPEN_MPI_NAME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]").unwrap());
    let (rank, how): (u32, String) = if let Some(c) = FORMS[0].captures(log) {
        // The rank is the second number of Open MPI's process name.
        let name = OPEN_MPI_NAME.captures(&c[0])?;
        (name[1].parse().ok()?, format!("exit {}", &c[2]))
    } else if let Some(c) = FORMS[1].captures(log) {
        (
            c[1].parse().ok()?,
            format!("signal {} ({}) on {}", &c[3], &c[4], &c[2]),
        )
    } else if let Some(c) = FORMS[2].captures(log) {
        (c[1].parse().ok()?, format!("exit {}", &c[2]))
    } else if let Some(c) = FORMS[3].captures(log) {
        let what = if &c[3] == "EXIT STATUS" {
            "exit"
        } else {
            "signal"
        };
        (c[1].parse().ok()?, format!("{what} {} on {}", &c[4], &c[2]))
    } else {
        return None;
    };
    let mut ranks = crate::logs::rank::Ranks::new(forms);
    let mut mine = String::new();
    let mut keep = |_: &[u8], r: Option<u32>, text: &[u8]| {
        if r == Some(rank) {
            mine.push_str(&String::from_utf8_lossy(text));
            mine.push('\n');
        }
    };
    for line in log.lines() {
        ranks.split(b"", line.as_bytes(), &mut keep);
    }
    ranks.finish(&mut keep);
    // Elastic horovodrun names a process by the rank it started with (as its tags do).
    let which = if forms.start_ranks {
        "start rank"
    } else {
        "rank"
    };
    Some(format!("{which} {rank} ({how}){}", last_lines(&mine)))
}

/// Why the launcher's MPI failed, from the end of its log: the first rank that failed
/// ([`first_rank`]), else an ssh failure to a worker ([`ssh_failure`]).
pub fn launcher_log_cause(log: &str, forms: crate::logs::rank::TagForms) -> Option<String> {
    first_rank(log, forms).or_else(|| ssh_failure(log))
}

/// The first line of a launcher's log where its ssh could not reach or log in to a worker
/// (the workers' sshd logs only errors, so this is where a wrong key shows): `ssh to a worker:
/// "root@w-0: Permission denied (publickey)."`.
pub fn ssh_failure(log: &str) -> Option<String> {
    const SIGNS: [&str; 4] = [
        "Permission denied (publickey",
        "Host key verification failed",
        "ssh: connect to host ",
        "ssh: Could not resolve hostname ",
    ];
    let line = log
        .lines()
        .map(|l| crate::logs::tail::split_ts(l.as_bytes()))
        .map(|(ts, text)| {
            // Lines may come with or without their timestamps.
            if crate::logs::tail::parse_ts(ts).is_some() {
                String::from_utf8_lossy(text).into_owned()
            } else {
                String::from_utf8_lossy(&[ts, b" ", text].concat())
                    .trim_end()
                    .to_string()
            }
        })
        .find(|l| SIGNS.iter().any(|s| l.contains(s)))?;
    Some(format!("ssh to a worker: {:?}", line.trim()))
}

/// The run's line when its launcher failed: the first rank's pod/container that failed
/// (`first` = its name and reason), else the launcher's own reason.
pub fn launcher_failed(launcher: &str, own: &str, first: Option<&str>) -> String {
    match first {
        Some(first) => format!("launcher {launcher} failed; first to fail: {first}"),
        None => format!("launcher {launcher} failed: {own}"),
    }
}

/// What failed first: the rank the launcher's MPI names and/or the first worker that ended
/// badly (`pod`: its name and reason).
pub fn first_failed(rank: Option<String>, pod: Option<(&str, &str)>) -> Option<String> {
    match (rank, pod) {
        (Some(r), Some((n, t))) => Some(format!("{r}; {n}: {t}")),
        (Some(r), None) => Some(r),
        (None, Some((n, t))) => Some(format!("{n}: {t}")),
        (None, None) => None,
    }
}

/// What an unschedulable pod's reason adds when `room` of `nodes` nodes could hold it once
/// pods there end.
pub fn waiting_for_room(room: usize, nodes: usize) -> String {
    format!(" (waiting: {room} of {nodes} node(s) can hold it when pods there end)")
}

/// The run's line while the launcher waits for workers' sshd, or (`launcher` None) while the
/// MPI Operator waits for every worker to be ready before it creates the launcher.
pub fn waiting_for_sshd(launcher: Option<&str>, not_ready: &[String]) -> String {
    let (n, names) = (not_ready.len(), not_ready.join(", "));
    match launcher {
        Some(l) => {
            format!("launcher {l} is waiting for the sshd of {n} worker(s) not ready: {names}")
        }
        None => format!(
            "the launcher is created once every worker is ready; {n} worker(s) not ready: {names}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::rank::TagForms;

    #[test]
    fn last_lines_are_quoted_and_few() {
        assert_eq!(last_lines(""), "");
        assert_eq!(
            last_lines("2026-01-01T00:00:00.5Z a\nb\x1b[31m\n\nc\nd\n"),
            "; last lines: \"b\\u{1b}[31m\", \"c\", \"d\""
        );
        assert_eq!(
            last_lines("2026-01-01T00:00:00.5Z only"),
            "; last lines: \"only\""
        );
    }

    #[test]
    fn an_ssh_failure_is_the_cause_when_no_rank_failed() {
        let log = "hvdctl: worker w-0 is ready\nroot@w-0: Permission denied (publickey).\n-----\nORTE was unable to reliably start one or more daemons.\n";
        assert_eq!(
            launcher_log_cause(log, TagForms::OPEN_MPI).unwrap(),
            "ssh to a worker: \"root@w-0: Permission denied (publickey).\""
        );
        let stamped = "2026-01-01T00:00:00.5Z ssh: Could not resolve hostname w-1: Name or service not known\n";
        assert_eq!(
            ssh_failure(stamped).unwrap(),
            "ssh to a worker: \"ssh: Could not resolve hostname w-1: Name or service not known\""
        );
        assert_eq!(ssh_failure("all fine\nrank 0 of 2"), None);
        // A rank that failed comes first.
        let both = "[1]<stderr>:oops\nroot@w-0: Permission denied (publickey).\nProcess 1 exit with status code 3.";
        assert!(
            launcher_log_cause(both, TagForms::HOROVODRUN)
                .unwrap()
                .starts_with("rank 1 (exit 3)")
        );
    }

    #[test]
    fn the_first_rank_from_each_mpi() {
        let ompi = "[1,0]<stdout>:rank 0 of 2\n[1,1]<stdout>:about to fail\n[1,1]<stderr>:boom\n\
--------------------------------------------------------------------------\n\
mpirun detected that one or more processes exited with non-zero status, thus causing\n\
the job to be terminated. The first process to do so was:\n\n  Process name: [[6093,1],1]\n  Exit code:    7\n";
        assert_eq!(
            first_rank(ompi, TagForms::OPEN_MPI).unwrap(),
            "rank 1 (exit 7); last lines: \"about to fail\", \"boom\""
        );
        let sig = "mpirun noticed that process rank 0 with PID 0 on node demo-worker-0 exited on signal 9 (Killed).";
        assert_eq!(
            first_rank(sig, TagForms::OPEN_MPI).unwrap(),
            "rank 0 (signal 9 (Killed) on demo-worker-0)"
        );
        assert_eq!(
            first_rank(
                "[1]<stderr>:oops\nProcess 1 exit with status code 3.",
                TagForms::HOROVODRUN
            )
            .unwrap(),
            "rank 1 (exit 3); last lines: \"oops\""
        );
        assert_eq!(
            first_rank(
                "[1]<stderr>:oops\nProcess 1 exit with status code 3.",
                TagForms::HOROVODRUN_ELASTIC
            )
            .unwrap(),
            "start rank 1 (exit 3); last lines: \"oops\""
        );
        assert_eq!(first_rank("all fine", TagForms::OPEN_MPI), None);
    }

    #[test]
    fn wording() {
        assert_eq!(
            oom("p", "c", Some("64Mi"), 137),
            "OOMKilled: container c of p exceeded its memory limit 64Mi (exit 137)"
        );
        assert_eq!(
            launcher_failed(
                "l",
                "Failed: x",
                first_failed(None, Some(("w-1", "OOMKilled: y"))).as_deref()
            ),
            "launcher l failed; first to fail: w-1: OOMKilled: y"
        );
    }
}
