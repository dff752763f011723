//! `hvdctl logs`: flags → [`crate::logs::LogOptions`], find the run, hand over to
//! [`crate::logs::run`].

use crate::cli::{Global, LogFormat, LogsArgs, RoleFilter};
use crate::engine::Answer;
use crate::error::{Error, Result};
use crate::logs::LogOptions;
use crate::logs::printer::{Format, Style};
use crate::ui::Ui;

pub fn run(g: &Global, ui: &Ui, a: LogsArgs) -> Result<u8> {
    let opts = options(ui, &a)?;
    let env = crate::engine::Env::new(g, ui)?;
    // Measured (docs/benchmarks.md, "Logs"): a current-thread runtime is as fast as a
    // multi-threaded one here (the server is the bound; parsing takes a fraction of a core) and
    // uses less memory. The printer writes from its own blocking thread either way.
    super::runtime(false)?.block_on(async {
        let run = match env.run_or_record(a.run.as_deref()).await? {
            Answer::Live(run) => run,
            Answer::Record(rec) => {
                let replayed = rec.print_logs(&opts).await?;
                if !replayed.not_recorded.is_empty() {
                    ui.note(format!(
                        "not recorded: {} (deleted before the run was recorded)",
                        replayed.not_recorded.join(", ")
                    ));
                }
                return Ok(if a.follow {
                    rec.report.state.exit_code()
                } else {
                    0
                });
            }
        };
        // Ctrl-C is handled inside (exit 130 at once).
        let outcome = run.logs(opts, ui).await?;
        if a.follow {
            env.save_record(&run).await;
        }
        Ok(outcome.exit_code())
    })
}

fn options(ui: &Ui, a: &LogsArgs) -> Result<LogOptions> {
    let since_seconds = a.since.as_deref().map(parse_duration).transpose()?;
    let since_time = a
        .since_time
        .as_deref()
        .map(|t| {
            t.parse::<jiff::Timestamp>().map_err(|e| {
                Error::input(format!("--since-time {t}: not an RFC 3339 time ({e})"))
                    .hint("e.g. 2026-05-01T12:00:00Z")
            })
        })
        .transpose()?;
    // kubectl's --tail=-1: everything (the default).
    let tail = match a.tail {
        Some(-1) | None => None,
        Some(t) if t < 0 => {
            return Err(Error::input(format!(
                "--tail {t}: must be 0 or more, or -1 for every line"
            )));
        }
        Some(t) => Some(t),
    };
    let pod = a
        .pod
        .as_deref()
        .map(|re| {
            regex::Regex::new(re)
                .map_err(|e| Error::input(format!("--pod {re}: not a regular expression: {e}")))
        })
        .transpose()?;
    // Ranks' lines are the launcher's: --rank reads nothing else.
    let role = match (a.rank, a.role) {
        (Some(n), RoleFilter::Worker) => {
            return Err(Error::input(format!(
                "--rank {n} with --role worker: ranks' lines come through the launcher, so no worker line has a rank"
            ))
            .hint("drop --role worker (--rank reads the launcher), or drop --rank for the workers' own lines"));
        }
        (Some(_), _) => RoleFilter::Launcher,
        (None, role) => role,
    };
    let format = match a.output {
        LogFormat::Text => Format::Text,
        LogFormat::Json => Format::Json,
    };
    Ok(LogOptions {
        follow: a.follow,
        since_seconds,
        since_time,
        tail,
        role,
        pod,
        container: a.container.clone(),
        style: Style {
            format,
            prefix: !a.no_prefix,
            timestamps: a.timestamps,
            color: ui.color_stdout,
            rank: a.rank,
        },
    })
}

/// `--since`: `90s`, `5m`, `2h`, `1h30m`, or plain seconds; at least one second.
fn parse_duration(s: &str) -> Result<i64> {
    let bad =
        || Error::input(format!("--since {s}: not a duration")).hint("e.g. 30s, 5m, 2h, 1h30m");
    if let Ok(n) = s.parse::<i64>() {
        return if n > 0 { Ok(n) } else { Err(bad()) };
    }
    let mut total: i64 = 0;
    let mut num = String::new();
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            num.push(ch);
            continue;
        }
        let n: i64 = num.parse().map_err(|_| bad())?;
        num.clear();
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        total = total
            .checked_add(n.checked_mul(unit).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    if !num.is_empty() || total <= 0 {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), 30);
        assert_eq!(parse_duration("5m").unwrap(), 300);
        assert_eq!(parse_duration("1h30m").unwrap(), 5400);
        assert_eq!(parse_duration("45").unwrap(), 45);
        for bad in ["", "0s", "5x", "m", "1h30", "-5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
