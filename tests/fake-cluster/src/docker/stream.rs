//! `pods/exec` and `pods/portforward` over WebSocket.
//!
//! Exec speaks the channel protocols `v5.channel.k8s.io` (kubectl 1.30+) and
//! `v4.channel.k8s.io` (kube-rs' `ws` feature): every binary message starts with a stream
//! byte — 0 stdin, 1 stdout, 2 stderr, 3 error (the final `Status`), 4 resize; v5 adds 255
//! (`[255, stream]`: the client closed that stream, e.g. stdin's end). Port-forward speaks
//! `portforward.k8s.io` (also offered as `v4.channel.k8s.io`): port `i` of the `ports`
//! query uses data channel `2i` and error channel `2i+1`, each opened by the server with
//! the port number (two bytes, little endian); the pod's IP on the cluster's Docker network
//! is dialled from the host. kubectl's `SPDY/3.1+portforward.k8s.io` (SPDY tunnelled through
//! the WebSocket) is served by [`super::spdy`].

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::json;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::DockerKubelet;
use crate::error::{ApiError, ApiResult};
use crate::resources::{PODS, res};
use crate::store::Store;
use crate::util;

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;
pub(crate) type Ws = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                crate::server::percent_decode(k),
                crate::server::percent_decode(v),
            )
        })
        .collect()
}

/// The WebSocket handshake: the chosen subprotocol (first of the client's we speak) and
/// the accept key, or the apiserver-like 400.
fn handshake(req: &Request<Incoming>, ours: &[&str]) -> ApiResult<(String, String)> {
    let h = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    if !h("upgrade").eq_ignore_ascii_case("websocket") {
        return Err(ApiError::bad_request(
            "fake-cluster serves exec, attach and port-forward over WebSocket only (SPDY upgrades are not supported)",
        ));
    }
    let offered = h("sec-websocket-protocol");
    let proto = offered
        .split(',')
        .map(str::trim)
        .find(|p| ours.contains(p))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "no supported WebSocket subprotocol in {offered:?} (fake-cluster speaks {})",
                ours.join(", ")
            ))
        })?
        .to_string();
    let key = h("sec-websocket-key");
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    Ok((proto, accept))
}

fn switching(proto: &str, accept: &str) -> Response<Body> {
    Response::builder()
        .status(101)
        .header("Upgrade", "websocket")
        .header("Connection", "Upgrade")
        .header("Sec-WebSocket-Accept", accept)
        .header("Sec-WebSocket-Protocol", proto)
        .body(Empty::new().map_err(|never| match never {}).boxed())
        .expect("valid response")
}

async fn upgrade(req: Request<Incoming>) -> Option<Ws> {
    let up = hyper::upgrade::on(req).await.ok()?;
    Some(
        WebSocketStream::from_raw_socket(hyper_util::rt::TokioIo::new(up), Role::Server, None)
            .await,
    )
}

/// A close frame with status 1000 (clients treat a status-less close as an error).
fn normal_close() -> Message {
    Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    }))
}

fn frame(ch: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(ch);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

/// `GET|POST .../pods/{name}/exec?command=..&container=..&stdin=..&stdout=..&stderr=..&tty=..`
pub fn exec(
    k: &Arc<DockerKubelet>,
    store: &Store,
    req: Request<Incoming>,
    ns: &str,
    name: &str,
) -> ApiResult<Response<Body>> {
    let pod = store
        .get(PODS, ns, name)
        .ok_or_else(|| ApiError::not_found(res(PODS), name))?;
    let q = query_pairs(req.uri().query().unwrap_or_default());
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let flag = |k: &str| matches!(get(k), Some("1" | "true" | "True"));
    let command: Vec<String> = q
        .iter()
        .filter(|(n, _)| n == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    // As the API server's exec options validation.
    if !["stdin", "stdout", "stderr"].iter().any(|s| flag(s)) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let container = super::logs::container_of(&pod, name, get("container"))?;
    let uid = util::uid_of(&pod).to_string();
    let running = k
        .pod(&uid)
        .map(|h| {
            let st = super::lock(&h.state);
            st.containers
                .iter()
                .any(|c| c.name == container && c.state.get("running").is_some())
        })
        .unwrap_or(false);
    if !running {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    }
    let id = k
        .container_id(&uid, &container, false)
        .ok_or_else(|| ApiError::bad_request("container not found"))?;
    let (proto, accept) = handshake(&req, &["v5.channel.k8s.io", "v4.channel.k8s.io"])?;
    let (stdin, stdout, stderr, tty) = (flag("stdin"), flag("stdout"), flag("stderr"), flag("tty"));
    let docker = k.docker.clone();
    let v5 = proto == "v5.channel.k8s.io";
    tokio::spawn(async move {
        let Some(ws) = upgrade(req).await else { return };
        run_exec(docker, ws, id, command, stdin, stdout, stderr, tty, v5).await;
    });
    Ok(switching(&proto, &accept))
}

#[allow(clippy::too_many_arguments)]
async fn run_exec(
    docker: bollard::Docker,
    ws: Ws,
    id: String,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    v5: bool,
) {
    let (mut tx, mut rx) = ws.split();
    let created = docker
        .create_exec(
            &id,
            CreateExecOptions {
                attach_stdin: Some(stdin),
                attach_stdout: Some(stdout),
                attach_stderr: Some(stderr && !tty),
                tty: Some(tty),
                cmd: Some(command.clone()),
                ..Default::default()
            },
        )
        .await;
    let status = |code: Option<i64>, err: Option<String>| -> Vec<u8> {
        let v = match (code, err) {
            (_, Some(e)) => {
                json!({"metadata": {}, "status": "Failure", "message": e, "reason": "InternalError", "code": 500})
            }
            (Some(0) | None, None) => json!({"metadata": {}, "status": "Success"}),
            (Some(c), None) => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {c}", command.join(" ")),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": c.to_string()}]},
            }),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    };
    let exec_id = match created {
        Ok(c) => c.id,
        Err(e) => {
            let _ = tx
                .send(frame(3, &status(None, Some(super::describe(&e)))))
                .await;
            let _ = tx.send(normal_close()).await;
            return;
        }
    };
    let started = docker
        .start_exec(
            &exec_id,
            Some(StartExecOptions {
                detach: false,
                tty,
                output_capacity: None,
            }),
        )
        .await;
    let (mut output, mut input) = match started {
        Ok(StartExecResults::Attached { output, input }) => (output, Some(input)),
        Ok(StartExecResults::Detached) => {
            let _ = tx
                .send(frame(3, &status(None, Some("detached".into()))))
                .await;
            let _ = tx.send(normal_close()).await;
            return;
        }
        Err(e) => {
            let _ = tx
                .send(frame(3, &status(None, Some(super::describe(&e)))))
                .await;
            let _ = tx.send(normal_close()).await;
            return;
        }
    };
    let mut client_open = true;
    loop {
        tokio::select! {
            out = output.next() => match out {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    if tx.send(frame(1, &message)).await.is_err() { return; }
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    if tx.send(frame(2, &message)).await.is_err() { return; }
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
                Some(Err(_)) | None => break,
            },
            msg = rx.next(), if client_open => match msg {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => match b[0] {
                    0 => {
                        if let Some(w) = input.as_mut()
                            && w.write_all(&b[1..]).await.is_err()
                        {
                            input = None;
                        }
                    }
                    4 => {
                        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&b[1..]) {
                            let w = v.get("Width").and_then(|x| x.as_u64()).unwrap_or(80) as u16;
                            let h = v.get("Height").and_then(|x| x.as_u64()).unwrap_or(24) as u16;
                            let _ = docker.resize_exec(&exec_id, ResizeExecOptions { width: w, height: h }).await;
                        }
                    }
                    255 if v5 && b.get(1) == Some(&0) => {
                        if let Some(mut w) = input.take() {
                            let _ = w.shutdown().await;
                        }
                    }
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => client_open = false,
                Some(Ok(_)) => {}
            },
        }
    }
    drop(input);
    let code = docker
        .inspect_exec(&exec_id)
        .await
        .ok()
        .and_then(|i| i.exit_code);
    let _ = tx.send(frame(3, &status(code, None))).await;
    let _ = tx.send(normal_close()).await;
}

/// `GET .../pods/{name}/portforward?ports=P[,Q]` (or repeated `ports`).
pub fn portforward(
    k: &Arc<DockerKubelet>,
    store: &Store,
    req: Request<Incoming>,
    ns: &str,
    name: &str,
) -> ApiResult<Response<Body>> {
    let pod = store
        .get(PODS, ns, name)
        .ok_or_else(|| ApiError::not_found(res(PODS), name))?;
    let uid = util::uid_of(&pod).to_string();
    let ip = k
        .pod(&uid)
        .and_then(|h| super::lock(&h.state).ip.clone())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    let (proto, accept) = handshake(
        &req,
        &[
            "portforward.k8s.io",
            "v4.channel.k8s.io",
            "SPDY/3.1+portforward.k8s.io",
        ],
    )?;
    let q = query_pairs(req.uri().query().unwrap_or_default());
    let mut ports: Vec<u16> = Vec::new();
    for (n, v) in &q {
        if n == "ports" {
            for p in v.split(',') {
                ports.push(p.trim().parse().map_err(|_| {
                    ApiError::bad_request(format!("unable to parse {p:?} as a port"))
                })?);
            }
        }
    }
    // SPDY clients name the port in each stream's headers, not in the URL.
    let spdy = proto.starts_with("SPDY/3.1+");
    if ports.is_empty() && !spdy {
        return Err(ApiError::bad_request("at least 1 port is required"));
    }
    tokio::spawn(async move {
        let Some(ws) = upgrade(req).await else { return };
        if spdy {
            // kubectl: SPDY streams tunnelled through the WebSocket; each names its port.
            super::spdy::serve(ws, ip).await;
        } else {
            run_portforward(ws, ip, ports).await;
        }
    });
    Ok(switching(&proto, &accept))
}

async fn run_portforward(ws: Ws, ip: String, ports: Vec<u16>) {
    let (mut tx, mut rx) = ws.split();
    // The server opens each channel with its port number.
    for (i, p) in ports.iter().enumerate() {
        for ch in [2 * i as u8, 2 * i as u8 + 1] {
            if tx.send(frame(ch, &p.to_le_bytes())).await.is_err() {
                return;
            }
        }
    }
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Message>(64);
    let mut writers: Vec<Option<tokio::net::tcp::OwnedWriteHalf>> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        match tokio::net::TcpStream::connect((ip.as_str(), *p)).await {
            Ok(conn) => {
                let (mut r, w) = conn.into_split();
                writers.push(Some(w));
                let out = out_tx.clone();
                let ch = 2 * i as u8;
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if out.send(frame(ch, &buf[..n])).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
            Err(e) => {
                writers.push(None);
                let msg = format!("error forwarding port {p} to pod: {e}");
                let _ = out_tx.send(frame(2 * i as u8 + 1, msg.as_bytes())).await;
            }
        }
    }
    drop(out_tx);
    loop {
        tokio::select! {
            m = out_rx.recv() => match m {
                Some(m) => if tx.send(m).await.is_err() { return; },
                None => break,
            },
            m = rx.next() => match m {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => {
                    let i = (b[0] / 2) as usize;
                    if b[0] % 2 == 0
                        && let Some(Some(w)) = writers.get_mut(i)
                        && w.write_all(&b[1..]).await.is_err()
                    {
                        writers[i] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = tx.send(normal_close()).await;
}
