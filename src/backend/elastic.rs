//! Elastic runs as found again from what runs: the bounds horovodrun was given on the
//! launcher's command line (`--min-np`, `--max-np`, `--slots-per-host`, written by
//! `values::launch_argv`), in workers, and the check `hvdctl scale` makes against them.
//! Reading them back from the command line keeps the engines the source of truth: a run
//! deployed from another machine (or another hvdctl.yaml) answers the same.

use crate::error::{Error, Result};

pub use crate::types::Bounds;

/// The bounds in a launcher's argv (`horovodrun ... --min-np A --max-np B --slots-per-host S`),
/// or `None` for a run that is not elastic.
pub fn bounds(argv: &[String]) -> Option<Bounds> {
    crate::types::elastic_bounds(argv)
}

/// `workers` for the run `job` with `bounds`: an input error (exit 2) when the run is not
/// elastic or `workers` lies outside its bounds.
pub fn check_scale(job: &str, bounds: Option<Bounds>, workers: u32) -> Result<Bounds> {
    let Some(b) = bounds else {
        return Err(Error::input(format!(
            "{job} is not an elastic run: its workers are fixed for the whole run"
        ))
        .hint("only runs deployed with `elastic: {minWorkers, maxWorkers}` (and mpi.launcher: horovodrun) can be scaled; redeploy with --set workers=N to change a fixed run"));
    };
    if workers < b.min_workers || workers > b.max_workers {
        return Err(Error::input(format!(
            "--workers {workers} is outside the elastic bounds of {job}: minWorkers {}, maxWorkers {}",
            b.min_workers, b.max_workers
        ))
        .hint(format!(
            "choose between {} and {}; the bounds are fixed when the run is deployed",
            b.min_workers, b.max_workers
        )));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn bounds_come_back_from_the_launch_command_in_workers() {
        let a = argv(
            "/bin/bash /etc/hvdctl/launcher.sh horovodrun -np 6 --min-np 4 --max-np 8 --slots-per-host 2 --host-discovery-script /etc/mpi/discover_hosts.sh python3 x.py",
        );
        assert_eq!(
            bounds(&a),
            Some(Bounds {
                min_workers: 2,
                max_workers: 4
            })
        );
        assert_eq!(
            bounds(&argv("horovodrun -np 2 --hostfile h python3 x.py")),
            None
        );
        assert_eq!(bounds(&argv("mpirun -np 2 --min-np 1 python3 x.py")), None);
    }

    #[test]
    fn scale_checks_are_input_errors() {
        let b = Some(Bounds {
            min_workers: 2,
            max_workers: 3,
        });
        assert!(check_scale("j", b, 2).is_ok());
        assert!(check_scale("j", b, 3).is_ok());
        for n in [0, 1, 4] {
            let e = check_scale("j", b, n).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(
                e.message.contains("minWorkers 2, maxWorkers 3"),
                "{}",
                e.message
            );
        }
        let e = check_scale("j", None, 2).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("not an elastic run"), "{}", e.message);
    }
}
