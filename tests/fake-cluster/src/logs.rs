//! Pod logs, computed on the fly: line `i` of instance `k` of a container is
//! `pod=<pod> container=<c> restart=<k> line <i>` stamped `start_k + i * step`.

use bytes::Bytes;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult};
use crate::kubelet::{CState, ContainerSpec, Kubelet, PodRt};
use crate::resources::{PODS, res};
use crate::store::Store;
use crate::util::{self, now_ns, s};

#[derive(Debug, Clone, Default)]
pub struct LogParams {
    pub container: Option<String>,
    pub follow: bool,
    pub timestamps: bool,
    pub since_time: Option<i64>,
    pub since_seconds: Option<i64>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<u64>,
    pub previous: bool,
}

pub type Chunk = Result<Bytes, io::Error>;

const CHUNK: usize = 64 * 1024;

/// What one request streams.
struct Plan {
    rt: Arc<PodRt>,
    spec: ContainerSpec,
    k: u64,
    start: i64,
    first: u64,
    /// Last line to send (inclusive); `u64::MAX` for a silent container followed forever.
    last: u64,
    /// Follow until this instant (the instance's end), if following a live instance.
    follow_until: Option<i64>,
    timestamps: bool,
    limit: Option<u64>,
    cut_every: Option<u64>,
}

/// Validates the request and starts streaming into a channel.
pub fn open(
    store: &Store,
    kubelet: &Kubelet,
    ns: &str,
    name: &str,
    p: &LogParams,
    cut_every: Option<u64>,
    cuts: Arc<AtomicU64>,
) -> ApiResult<mpsc::Receiver<Chunk>> {
    let pod = store
        .get(PODS, ns, name)
        .ok_or_else(|| ApiError::not_found(res(PODS), name))?;
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| s(c, "/name").map(String::from))
        .collect();
    let container = match &p.container {
        Some(c) if !c.is_empty() => c.clone(),
        _ if names.len() == 1 => names[0].clone(),
        _ => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let Some(ci) = names.iter().position(|n| *n == container) else {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    };
    let now = now_ns();
    let rt = kubelet
        .pod(util::uid_of(&pod))
        .filter(|rt| now >= rt.start_at);
    let Some(rt) = rt else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let state = rt.state(ci, now);
    let Some(cur) = state.instance() else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let k = if p.previous {
        if cur == 0 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        cur - 1
    } else {
        cur
    };
    let spec = rt.containers[ci].clone();
    let start = spec.instance_start(rt.start_at, k, rt.backoff);
    let live = !p.previous && matches!(state, CState::Running { .. });
    let step = spec.step_ns();
    let total = spec.lines.unwrap_or(0);
    let avail = if live {
        spec.lines_at(start, now)
    } else {
        total
    };
    let mut first = 1u64;
    let since = p
        .since_time
        .or(p.since_seconds.map(|sec| now - sec.max(0) * 1_000_000_000));
    if let Some(since) = since
        && since > start
    {
        first = first.max(((since - start) as u64).div_ceil(step as u64));
    }
    if let Some(t) = p.tail_lines
        && t >= 0
    {
        first = first.max((avail + 1).saturating_sub(t as u64));
    }
    let (last, follow_until) = if p.follow && live {
        match spec.run_ns() {
            Some(run) => (total, Some(start + run)),
            None => (u64::MAX, Some(i64::MAX)),
        }
    } else {
        (avail, None)
    };
    let plan = Plan {
        rt,
        k,
        start,
        first,
        last,
        follow_until,
        timestamps: p.timestamps,
        limit: p.limit_bytes.filter(|l| *l > 0),
        cut_every: cut_every.filter(|c| *c > 0),
        spec,
    };
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(stream(plan, tx, cuts));
    Ok(rx)
}

/// Formats RFC 3339 timestamps with nanoseconds, caching the seconds part.
struct TsFmt {
    sec: i64,
    prefix: Vec<u8>,
}

impl TsFmt {
    fn write(&mut self, buf: &mut Vec<u8>, ns: i64) {
        let sec = ns.div_euclid(1_000_000_000);
        let nano = ns.rem_euclid(1_000_000_000) as u64;
        if sec != self.sec || self.prefix.is_empty() {
            self.sec = sec;
            self.prefix = util::fmt_time(sec * 1_000_000_000)
                .trim_end_matches('Z')
                .as_bytes()
                .to_vec();
        }
        buf.extend_from_slice(&self.prefix);
        buf.push(b'.');
        let mut digits = [b'0'; 9];
        let mut n = nano;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        buf.extend_from_slice(&digits);
        buf.extend_from_slice(b"Z ");
    }
}

fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// The text of line `i` (without timestamp), for tests and clients that want to check.
pub fn line_text(pod: &str, container: &str, restart: u64, i: u64) -> String {
    format!("pod={pod} container={container} restart={restart} line {i}")
}

async fn send(tx: &mpsc::Sender<Chunk>, buf: &mut Vec<u8>) -> bool {
    if buf.is_empty() {
        return true;
    }
    let b = Bytes::from(std::mem::replace(buf, Vec::with_capacity(CHUNK + 256)));
    tx.send(Ok(b)).await.is_ok()
}

async fn sleep_until_ns(t: i64) {
    let d = t - now_ns();
    if d > 0 {
        tokio::time::sleep(std::time::Duration::from_nanos(d as u64)).await;
    }
}

async fn stream(plan: Plan, tx: mpsc::Sender<Chunk>, cuts: Arc<AtomicU64>) {
    let step = plan.spec.step_ns();
    let head = format!(
        "pod={} container={} restart={} line ",
        plan.rt.name, plan.spec.name, plan.k
    )
    .into_bytes();
    let mut ts = TsFmt {
        sec: i64::MIN,
        prefix: Vec::new(),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 256);
    let mut sent_bytes: u64 = 0;
    let mut sent_lines: u64 = 0;
    let mut i = plan.first;
    let total = plan.spec.lines.unwrap_or(0);
    let mut line = Vec::with_capacity(128);
    while i <= plan.last && i <= total {
        // Lines of a followed instance appear as their time comes.
        if plan.follow_until.is_some() {
            let due = plan.start + i as i64 * step;
            if due > now_ns() {
                if !send(&tx, &mut buf).await {
                    return;
                }
                sleep_until_ns(due).await;
                if plan.rt.is_deleted() {
                    return;
                }
            }
        }
        line.clear();
        if plan.timestamps {
            ts.write(&mut line, plan.start + i as i64 * step);
        }
        line.extend_from_slice(&head);
        push_u64(&mut line, i);
        line.push(b'\n');
        if let Some(every) = plan.cut_every
            && sent_lines == every
        {
            let abrupt = cuts.fetch_add(1, Ordering::Relaxed) % 2 == 1;
            if abrupt {
                buf.extend_from_slice(&line[..line.len() / 2]);
                let _ = send(&tx, &mut buf).await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "fake-cluster: log stream cut",
                    )))
                    .await;
            } else {
                let _ = send(&tx, &mut buf).await;
            }
            return;
        }
        if let Some(limit) = plan.limit {
            let room = limit.saturating_sub(sent_bytes) as usize;
            if line.len() >= room {
                buf.extend_from_slice(&line[..room]);
                let _ = send(&tx, &mut buf).await;
                return;
            }
        }
        sent_bytes += line.len() as u64;
        sent_lines += 1;
        buf.extend_from_slice(&line);
        if buf.len() >= CHUNK && !send(&tx, &mut buf).await {
            return;
        }
        i += 1;
    }
    if !send(&tx, &mut buf).await {
        return;
    }
    // Following: the stream ends when the instance terminates (or the pod goes away).
    if let Some(until) = plan.follow_until {
        loop {
            if plan.rt.is_deleted() || tx.is_closed() {
                return;
            }
            let left = until.saturating_sub(now_ns());
            if left <= 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_nanos(
                (left as u64).min(100_000_000),
            ))
            .await;
        }
    }
}
