//! Pod logs from the real containers: Docker's log API (always asked with timestamps, so
//! `sinceTime`/`sinceSeconds` are exact and timestamps come in the kubelet's format).

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptions;
use bytes::Bytes;
use futures_util::StreamExt;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::DockerKubelet;
use crate::error::{ApiError, ApiResult};
use crate::logs::{Chunk, LogParams};
use crate::resources::{PODS, res};
use crate::store::Store;
use crate::util::{self, now_ns, s};

/// The container a pod request names (the only one when unnamed), or the apiserver's 400.
pub fn container_of(
    pod: &serde_json::Value,
    name: &str,
    wanted: Option<&str>,
) -> ApiResult<String> {
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| s(c, "/name").map(String::from))
        .collect();
    let container = match wanted {
        Some(c) if !c.is_empty() => c.to_string(),
        _ if names.len() == 1 => names[0].clone(),
        _ => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    if !names.contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    Ok(container)
}

/// `2026-11-22T10:00:00.123456789Z` (always nine digits, like the kubelet).
fn fmt_nano(ns: i64) -> String {
    let base = util::fmt_time(ns.div_euclid(1_000_000_000) * 1_000_000_000);
    format!(
        "{}.{:09}Z",
        base.trim_end_matches('Z'),
        ns.rem_euclid(1_000_000_000)
    )
}

pub fn open(
    k: &Arc<DockerKubelet>,
    store: &Store,
    ns: &str,
    name: &str,
    p: &LogParams,
) -> ApiResult<mpsc::Receiver<Chunk>> {
    let pod = store
        .get(PODS, ns, name)
        .ok_or_else(|| ApiError::not_found(res(PODS), name))?;
    let container = container_of(&pod, name, p.container.as_deref())?;
    let uid = util::uid_of(&pod).to_string();
    let id = k.container_id(&uid, &container, p.previous);
    let Some(id) = id else {
        if p.previous {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
            k.waiting_reason(&uid, &container)
        )));
    };
    let since = p.since_time.or(p
        .since_seconds
        .map(|sec| now_ns() - sec.max(0) * 1_000_000_000));
    let follow = p.follow && !p.previous;
    let opts = LogsOptions {
        follow,
        stdout: true,
        stderr: true,
        timestamps: true,
        since: since
            .map(|t| t.div_euclid(1_000_000_000).clamp(0, i32::MAX as i64) as i32)
            .unwrap_or(0),
        until: 0,
        tail: match (p.tail_lines, since) {
            (Some(t), None) => t.to_string(),
            _ => "all".into(),
        },
    };
    let (tx, rx) = mpsc::channel(16);
    let docker = k.docker.clone();
    let timestamps = p.timestamps;
    let tail = p.tail_lines.filter(|_| since.is_some());
    let mut left = p.limit_bytes.unwrap_or(u64::MAX);
    tokio::spawn(async move {
        let mut stream = docker.logs(&id, Some(opts));
        let mut pending: Vec<u8> = Vec::new();
        // Without follow, lines are gathered so a tail after `since` can be applied.
        let mut kept: VecDeque<Vec<u8>> = VecDeque::new();
        let emit = |line: &[u8], out: &mut Vec<u8>| -> bool {
            let (ts, text) = match line.iter().position(|b| *b == b' ') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            };
            let t = std::str::from_utf8(ts).ok().and_then(util::parse_time);
            if let (Some(s), Some(t)) = (since, t)
                && t < s
            {
                return false;
            }
            if timestamps {
                out.extend_from_slice(fmt_nano(t.unwrap_or(0)).as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(text);
            true
        };
        let mut done = false;
        while !done {
            let chunk = match stream.next().await {
                Some(Ok(
                    LogOutput::StdOut { message }
                    | LogOutput::StdErr { message }
                    | LogOutput::Console { message },
                )) => message,
                Some(Ok(LogOutput::StdIn { .. })) => continue,
                Some(Err(_)) | None => {
                    done = true;
                    Bytes::new()
                }
            };
            pending.extend_from_slice(&chunk);
            let mut lines: Vec<Vec<u8>> = Vec::new();
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                lines.push(pending.drain(..=i).collect());
            }
            if done && !pending.is_empty() {
                lines.push(std::mem::take(&mut pending));
            }
            let mut out = Vec::new();
            for l in lines {
                let mut o = Vec::new();
                if !emit(&l, &mut o) {
                    continue;
                }
                if follow {
                    out.extend_from_slice(&o);
                } else {
                    kept.push_back(o);
                    if let Some(t) = tail
                        && kept.len() as i64 > t
                    {
                        kept.pop_front();
                    }
                }
            }
            if !follow && done {
                out = kept.drain(..).flatten().collect();
            }
            if !out.is_empty() {
                if (out.len() as u64) >= left {
                    out.truncate(left as usize);
                    let _ = tx.send(Ok(Bytes::from(out))).await;
                    return;
                }
                left -= out.len() as u64;
                if tx.send(Ok(Bytes::from(out))).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}
