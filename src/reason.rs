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

/// The run's line when its launcher failed: the first rank's pod/container that failed
/// (`first` = its name and reason), else the launcher's own reason.
pub fn launcher_failed(launcher: &str, own: &str, first: Option<(&str, &str)>) -> String {
    match first {
        Some((who, why)) => format!("launcher {launcher} failed; first to fail: {who}: {why}"),
        None => format!("launcher {launcher} failed: {own}"),
    }
}

/// The run's line while the launcher waits for workers' sshd.
pub fn waiting_for_sshd(launcher: &str, not_ready: &[String]) -> String {
    format!(
        "launcher {launcher} is waiting for the sshd of {} worker(s) not ready: {}",
        not_ready.len(),
        not_ready.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn wording() {
        assert_eq!(
            oom("p", "c", Some("64Mi"), 137),
            "OOMKilled: container c of p exceeded its memory limit 64Mi (exit 137)"
        );
        assert_eq!(
            launcher_failed("l", "Failed: x", Some(("w-1", "OOMKilled: y"))),
            "launcher l failed; first to fail: w-1: OOMKilled: y"
        );
    }
}
