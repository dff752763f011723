//! A tiny blocking HTTP/1.1 client for the tests: whole responses, or streamed bodies read
//! line by line, with chunked decoding that notices a truncated (abruptly cut) body.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use fake_cluster::{FakeCluster, Faults, Options};

pub fn start(mpi: bool) -> FakeCluster {
    FakeCluster::start(Options {
        mpi_operator: mpi,
        kubelet_delay: Duration::from_millis(20),
        restart_backoff: Duration::from_millis(50),
        ..Default::default()
    })
    .expect("start fake cluster")
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body ended without the final chunk (connection cut).
    pub truncated: bool,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response whose body is read incrementally.
pub struct Stream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    left_in_chunk: usize,
    done: bool,
    pub truncated: bool,
}

fn addr(fc: &FakeCluster) -> String {
    fc.url().trim_start_matches("http://").to_string()
}

pub fn open(
    fc: &FakeCluster,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Stream {
    let mut s = TcpStream::connect(addr(fc)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        addr(fc)
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    if let Some(b) = body {
        s.write_all(b).unwrap();
    }
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    Stream {
        status,
        headers,
        reader,
        chunked,
        left_in_chunk: 0,
        done: false,
        truncated: false,
    }
}

impl Stream {
    /// Reads some body bytes; empty at the end.
    fn read_some(&mut self) -> Vec<u8> {
        if self.done {
            return Vec::new();
        }
        if !self.chunked {
            let mut buf = vec![0; 65536];
            match self.reader.read(&mut buf) {
                Ok(0) | Err(_) => {
                    self.done = true;
                    Vec::new()
                }
                Ok(n) => {
                    buf.truncate(n);
                    buf
                }
            }
        } else {
            if self.left_in_chunk == 0 {
                let mut size = String::new();
                match self.reader.read_line(&mut size) {
                    Ok(0) | Err(_) => {
                        self.done = true;
                        self.truncated = true;
                        return Vec::new();
                    }
                    Ok(_) => {}
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16);
                match n {
                    Ok(0) => {
                        let mut crlf = String::new();
                        let _ = self.reader.read_line(&mut crlf);
                        self.done = true;
                        return Vec::new();
                    }
                    Ok(n) => self.left_in_chunk = n,
                    Err(_) => {
                        self.done = true;
                        self.truncated = true;
                        return Vec::new();
                    }
                }
            }
            let mut buf = vec![0; self.left_in_chunk.min(65536)];
            match self.reader.read(&mut buf) {
                Ok(0) | Err(_) => {
                    self.done = true;
                    self.truncated = true;
                    Vec::new()
                }
                Ok(n) => {
                    buf.truncate(n);
                    self.left_in_chunk -= n;
                    if self.left_in_chunk == 0 {
                        let mut crlf = [0u8; 2];
                        if self.reader.read_exact(&mut crlf).is_err() {
                            self.done = true;
                            self.truncated = true;
                        }
                    }
                    buf
                }
            }
        }
    }

    pub fn read_to_end(mut self) -> Resp {
        let mut body = Vec::new();
        loop {
            let b = self.read_some();
            if b.is_empty() && self.done {
                break;
            }
            body.extend(b);
        }
        Resp {
            status: self.status,
            headers: self.headers,
            body,
            truncated: self.truncated,
        }
    }

    /// Reads until `n` complete lines arrived, the body ended, or `timeout` passed.
    pub fn lines(&mut self, n: usize, timeout: Duration, pending: &mut Vec<u8>) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < n && Instant::now() < end {
            while let Some(i) = pending.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = pending.drain(..=i).collect();
                out.push(String::from_utf8_lossy(&l[..l.len() - 1]).into_owned());
                if out.len() == n {
                    return out;
                }
            }
            let b = self.read_some();
            if b.is_empty() && self.done {
                break;
            }
            pending.extend(b);
        }
        out
    }

    pub fn is_done(&self) -> bool {
        self.done
    }
}

pub fn req(fc: &FakeCluster, method: &str, path: &str, ct: &str, body: Option<&str>) -> Resp {
    let mut h = vec![("Accept", "application/json")];
    if body.is_some() {
        h.push(("Content-Type", ct));
    }
    open(fc, method, path, &h, body.map(str::as_bytes)).read_to_end()
}

pub fn get(fc: &FakeCluster, path: &str) -> Resp {
    req(fc, "GET", path, "", None)
}

pub fn post(fc: &FakeCluster, path: &str, body: &Value) -> Resp {
    req(
        fc,
        "POST",
        path,
        "application/json",
        Some(&body.to_string()),
    )
}

/// What a wait's probe answers: the value waited for, or (`Err`) what it saw instead.
pub trait Probe<T> {
    fn seen(self) -> Result<T, String>;
}

impl<T> Probe<T> for Option<T> {
    fn seen(self) -> Result<T, String> {
        self.ok_or_else(|| "not yet".to_string())
    }
}

impl<T, E: std::fmt::Debug> Probe<T> for Result<T, E> {
    fn seen(self) -> Result<T, String> {
        self.map_err(|e| format!("{e:?}"))
    }
}

/// Probes until it answers or `timeout` passes; a timeout says what it waited for and what
/// the last probe saw (a probe returning `Result` tells it).
pub fn wait_until<T, P: Probe<T>>(what: &str, timeout: Duration, mut f: impl FnMut() -> P) -> T {
    let end = Instant::now() + timeout;
    loop {
        match f().seen() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < end,
                "timed out after {timeout:?} waiting for {what}; last seen: {last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pod's phase is `want`, or `Err` with the phase it has.
pub fn phase_is(fc: &FakeCluster, name: &str, want: &str) -> Result<(), Option<String>> {
    let p = phase(fc, name);
    if p.as_deref() == Some(want) {
        Ok(())
    } else {
        Err(p)
    }
}

pub fn pod(name: &str, env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "t"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "env": env}]}
    })
}

pub fn phase(fc: &FakeCluster, name: &str) -> Option<String> {
    fc.get("pods", "default", name).and_then(|p| {
        p.pointer("/status/phase")
            .and_then(Value::as_str)
            .map(String::from)
    })
}
