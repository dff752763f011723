//! `events` for local runs: the container lifecycle, in the rows `hvdctl events` prints for
//! Kubernetes runs ([`RunEvent`]: time, type, reason, object, message).
//!
//! The listing comes from inspect state (always complete: the daemon keeps only its last few
//! hundred events, shared by every user of the engine): network and containers created,
//! containers started, and how each one ended (exit code, OOM kill). Following adds the
//! Docker events API, filtered by the run's labels and network, from the moment of listing.

use super::status::{Container, Status, containers};
use super::{LocalRef, docker_error, is_not_found};
use crate::cluster::events::RunEvent;
use crate::error::{Error, Result};
use crate::image::docker::DockerClient;
use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptions;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};

/// An event row; `time` stays Docker's full precision until [`finish`] orders and rounds.
fn event(time: &str, warning: bool, reason: &str, object: String, message: String) -> RunEvent {
    RunEvent {
        time: time.to_string(),
        type_: if warning { "Warning" } else { "Normal" }.into(),
        reason: reason.into(),
        uid: format!("{object}/{reason}/{time}"),
        object,
        message,
        count: 1,
    }
}

/// Docker's nanosecond RFC 3339 as seconds (`2026-01-01T00:00:00Z`), like Kubernetes events.
fn normalise_time(t: &str) -> String {
    t.parse::<jiff::Timestamp>()
        .ok()
        .and_then(|ts| jiff::Timestamp::from_second(ts.as_second()).ok())
        .map_or_else(|| t.to_string(), |ts| ts.to_string())
}

/// The end of a container as an event.
fn ended(c: &Container) -> Option<RunEvent> {
    if c.status == Status::Gone && c.finished_at.is_empty() {
        return Some(event(
            &c.created,
            true,
            "Gone",
            format!("Container/{}", c.name),
            "the container is dead or being removed".into(),
        ));
    }
    if !c.finished() {
        return None;
    }
    let (warning, reason, msg) = if c.oom_killed {
        (
            true,
            "OOMKilled",
            format!(
                "ran out of memory and was killed (exit code {})",
                c.exit_code
            ),
        )
    } else if c.exit_code == 0 {
        (false, "Completed", "exited with code 0".to_string())
    } else {
        (true, "Failed", format!("exited with code {}", c.exit_code))
    };
    Some(event(
        &c.finished_at,
        warning,
        reason,
        format!("Container/{}", c.name),
        msg,
    ))
}

/// The run's events now, oldest first.
pub async fn list(docker: &DockerClient, r: &LocalRef) -> Result<Vec<RunEvent>> {
    let cs = containers(docker, r).await?;
    let mut out = Vec::new();
    match docker.bollard().inspect_network(&r.network(), None).await {
        Ok(n) => {
            if let Some(t) = n.created {
                out.push(event(
                    &t,
                    false,
                    "Created",
                    format!("Network/{}", r.network()),
                    "created bridge network".into(),
                ));
            }
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => {
            return Err(docker_error(
                format!("inspecting network {}", r.network()),
                &e,
            ));
        }
    }
    if cs.is_empty() && out.is_empty() {
        return Err(Error::failure(format!(
            "local run {} ({}) has no containers on this Docker engine",
            r.run_id, r.job
        )));
    }
    for c in &cs {
        let obj = format!("Container/{}", c.name);
        out.push(event(
            &c.created,
            false,
            "Created",
            obj.clone(),
            format!("created container from image {}", c.image),
        ));
        if !c.started_at.is_empty() {
            out.push(event(
                &c.started_at,
                false,
                "Started",
                obj,
                "started container".into(),
            ));
        }
        out.extend(ended(c));
    }
    Ok(finish(out))
}

/// Orders events by their precise time (so a container's creation comes before its start
/// within one second), then rounds times to seconds as Kubernetes events have them.
fn finish(mut evs: Vec<RunEvent>) -> Vec<RunEvent> {
    let key = |e: &RunEvent| e.time.parse::<jiff::Timestamp>().ok();
    evs.sort_by_key(key);
    for e in &mut evs {
        e.time = normalise_time(&e.time);
    }
    evs
}

/// A Docker event message of the run as a [`RunEvent`] (None for actions not worth a row).
pub fn from_message(m: &EventMessage) -> Option<RunEvent> {
    let action = m.action.as_deref()?;
    let attrs: HashMap<String, String> = m
        .actor
        .as_ref()
        .and_then(|a| a.attributes.clone())
        .unwrap_or_default();
    let kind = m.typ.map(|t| t.to_string()).unwrap_or_default();
    let time = m
        .time_nano
        .and_then(|n| jiff::Timestamp::from_nanosecond(i128::from(n)).ok())
        .or_else(|| m.time.and_then(|s| jiff::Timestamp::from_second(s).ok()))
        .map(|t| t.to_string())
        .unwrap_or_default();
    if kind == "network" {
        let name = attrs.get("name").cloned().unwrap_or_default();
        let obj = format!("Network/{name}");
        let (reason, msg) = match action {
            "create" => ("Created", "created bridge network".to_string()),
            "destroy" => ("Removed", "removed network".to_string()),
            _ => return None,
        };
        return Some(event(&time, false, reason, obj, msg));
    }
    let name = attrs.get("name").cloned().unwrap_or_default();
    let obj = format!("Container/{name}");
    let ev = match action {
        "create" => event(
            &time,
            false,
            "Created",
            obj,
            format!(
                "created container from image {}",
                attrs.get("image").cloned().unwrap_or_default()
            ),
        ),
        "start" => event(&time, false, "Started", obj, "started container".into()),
        "die" => {
            let code = attrs.get("exitCode").cloned().unwrap_or_else(|| "?".into());
            let ok = code == "0";
            event(
                &time,
                !ok,
                if ok { "Completed" } else { "Failed" },
                obj,
                format!("exited with code {code}"),
            )
        }
        "oom" => event(&time, true, "OOMKilled", obj, "ran out of memory".into()),
        "kill" => event(
            &time,
            true,
            "Killing",
            obj,
            format!(
                "killed with signal {}",
                attrs.get("signal").cloned().unwrap_or_default()
            ),
        ),
        "destroy" => event(&time, false, "Removed", obj, "removed container".into()),
        _ => return None,
    };
    Some(ev)
}

/// Calls `print` for each event of the run now, then — with `follow` — for each new one
/// until the stream ends (Ctrl-C ends the command).
pub async fn run(
    docker: &DockerClient,
    r: &LocalRef,
    follow: bool,
    print: &mut dyn FnMut(&RunEvent),
) -> Result<()> {
    let since = jiff::Timestamp::now().as_second();
    let now = list(docker, r).await?;
    // (object, reason, second): the listing and the stream may both report an event.
    let key = |e: &RunEvent| (e.object.clone(), e.reason.clone(), e.time.clone());
    let mut seen: HashSet<(String, String, String)> = HashSet::new();
    for e in &now {
        print(e);
        seen.insert(key(e));
    }
    if !follow {
        return Ok(());
    }
    let opts = |filters: HashMap<String, Vec<String>>| EventsOptions {
        since: Some(since.to_string()),
        until: None,
        filters: Some(filters),
    };
    let mut containers_f = r.filters();
    containers_f.insert("type".into(), vec!["container".into()]);
    let network_f = HashMap::from([
        ("type".to_string(), vec!["network".to_string()]),
        ("network".to_string(), vec![r.network()]),
    ]);
    let d = docker.bollard();
    let mut stream = futures::stream::select(
        d.events(Some(opts(containers_f))),
        d.events(Some(opts(network_f))),
    );
    while let Some(m) = stream.next().await {
        let m = m.map_err(|e| docker_error("watching the Docker engine's events", &e))?;
        if let Some(e) = from_message(&m).map(|e| finish(vec![e]).remove(0))
            && seen.insert(key(&e))
        {
            print(&e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{EventActor, EventMessageTypeEnum};

    #[test]
    fn docker_events_become_rows() {
        let m = EventMessage {
            typ: Some(EventMessageTypeEnum::CONTAINER),
            action: Some("die".into()),
            actor: Some(EventActor {
                id: Some("abc".into()),
                attributes: Some(HashMap::from([
                    ("name".into(), "j-worker-1".into()),
                    ("exitCode".into(), "137".into()),
                ])),
            }),
            time: Some(1_767_225_600),
            ..Default::default()
        };
        let e = from_message(&m).unwrap();
        assert_eq!(e.type_, "Warning");
        assert_eq!(e.reason, "Failed");
        assert_eq!(e.object, "Container/j-worker-1");
        assert_eq!(e.message, "exited with code 137");
        assert_eq!(e.time, "2026-01-01T00:00:00Z");
        assert_eq!(
            normalise_time("2026-01-01T00:00:00.123456789Z"),
            "2026-01-01T00:00:00Z"
        );
    }
}
