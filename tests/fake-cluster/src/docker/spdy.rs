//! Port-forwarding as kubectl speaks it: SPDY/3.1 tunnelled through a WebSocket whose
//! subprotocol is `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+; the WebSocket's binary
//! messages carry the SPDY byte stream).
//!
//! Per forwarded connection the client opens two streams with the same `requestID` header:
//! `streamType: error` (closed by the client at once; the server writes a failure there and
//! closes it when the forward ends) and `streamType: data` (the bytes, both ways). Every
//! SYN_STREAM gets a SYN_REPLY; PINGs are echoed; a client FIN on the data stream half-closes
//! the pod connection, a RST_STREAM drops it; the pod's end of the connection ends the data
//! stream and then the error stream, which is what kubectl waits for.
//!
//! Header blocks are zlib streams (one per direction) with SPDY/3's preset dictionary. The
//! client's are inflated (real deflate); the server's replies carry no headers and are
//! written as stored (uncompressed) blocks, which any inflater reads. Flow control
//! (WINDOW_UPDATE) is not enforced, as the Go implementation on the other end does not.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Decompress, FlushDecompress};
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::stream::Ws;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const FLAG_FIN: u8 = 0x01;

/// SPDY/3's header-compression dictionary (draft 3, section 2.6.10.1): these names, each
/// with a 4-byte big-endian length, then a run of common values.
fn dictionary() -> Vec<u8> {
    const NAMES: &[&str] = &[
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const VALUES: &str = "100101201202205206300302303304305306307402405406407408409410411412\
        413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved \
        Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal \
        Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul \
        Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,\
        text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,\
        text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8\
        charset=iso-8859-1,utf-,*,enq=0.";
    let mut d = Vec::with_capacity(1423);
    for n in NAMES {
        d.extend_from_slice(&(n.len() as u32).to_be_bytes());
        d.extend_from_slice(n.as_bytes());
    }
    d.extend_from_slice(VALUES.as_bytes());
    d
}

/// One frame from the client.
#[derive(Debug, PartialEq)]
enum Frame {
    Control { kind: u16, flags: u8, data: Bytes },
    Data { stream: u32, flags: u8, data: Bytes },
}

/// The next whole frame at the start of `buf`, if it has arrived.
fn next_frame(buf: &mut BytesMut) -> Option<Frame> {
    if buf.len() < 8 {
        return None;
    }
    let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
    if buf.len() < 8 + len {
        return None;
    }
    let head = buf.split_to(8);
    let data = buf.split_to(len).freeze();
    let flags = head[4];
    Some(if head[0] & 0x80 != 0 {
        Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            flags,
            data,
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]),
            flags,
            data,
        }
    })
}

fn control(kind: u16, flags: u8, data: &[u8]) -> Message {
    let mut f = BytesMut::with_capacity(8 + data.len());
    f.put_u16(0x8003);
    f.put_u16(kind);
    f.put_u8(flags);
    f.put_uint(data.len() as u64, 3);
    f.put_slice(data);
    Message::Binary(f.freeze())
}

fn data(stream: u32, flags: u8, payload: &[u8]) -> Message {
    let mut f = BytesMut::with_capacity(8 + payload.len());
    f.put_u32(stream & 0x7fff_ffff);
    f.put_u8(flags);
    f.put_uint(payload.len() as u64, 3);
    f.put_slice(payload);
    Message::Binary(f.freeze())
}

/// The client's header blocks: one zlib stream across every frame.
struct Inflater {
    z: Decompress,
    dict: Vec<u8>,
}

impl Inflater {
    fn headers(&mut self, block: &[u8]) -> Result<HashMap<String, String>, String> {
        let mut out = Vec::with_capacity(256);
        let mut input = block;
        while !input.is_empty() {
            out.reserve(1024);
            let before = self.z.total_in();
            match self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(&self.dict)
                        .map_err(|e| e.to_string())?;
                }
                Err(e) => return Err(format!("header block: {e}")),
            }
            input = &input[(self.z.total_in() - before) as usize..];
        }
        let mut b = Bytes::from(out);
        let mut h = HashMap::new();
        let field = |b: &mut Bytes| -> Result<String, String> {
            if b.remaining() < 4 {
                return Err("short header block".into());
            }
            let n = b.get_u32() as usize;
            if b.remaining() < n {
                return Err("short header block".into());
            }
            Ok(String::from_utf8_lossy(&b.split_to(n)).into_owned())
        };
        if b.remaining() < 4 {
            return Err("short header block".into());
        }
        for _ in 0..b.get_u32() {
            let name = field(&mut b)?;
            let value = field(&mut b)?;
            h.insert(name.to_ascii_lowercase(), value);
        }
        Ok(h)
    }
}

/// The server's header blocks: an empty one per reply, as stored deflate blocks of one
/// zlib stream (its 2-byte header first).
struct Deflater {
    started: bool,
}

impl Deflater {
    fn empty_block(&mut self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        if !self.started {
            // CMF 0x78 (deflate, 32K window), FLG 0x01: no preset dictionary, check bits.
            v.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        // A non-final stored block holding the 4-byte pair count 0, then an empty one: the
        // sync-flush mark after which Go's inflater hands out what it holds (without it,
        // it reads on for the next block, past the frame, and fails for good).
        v.extend_from_slice(&[0x00, 0x04, 0x00, 0xfb, 0xff, 0, 0, 0, 0]);
        v.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
        v
    }
}

/// What the main loop tells one forwarded connection.
enum ToPod {
    Bytes(Bytes),
    Fin,
}

/// One `requestID`: its two streams and, once both are open, the task holding the pod
/// connection.
#[derive(Default)]
struct Request {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    pending: Vec<ToPod>,
    to_pod: Option<mpsc::UnboundedSender<ToPod>>,
}

/// Serves one tunnelled SPDY connection: every forwarded connection dials `ip:port` from
/// this host.
pub async fn serve(ws: Ws, ip: String) {
    let (mut tx, mut rx) = ws.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if tx.send(m).await.is_err() {
                break;
            }
        }
        let _ = tx.close().await;
    });
    let mut inflater = Inflater {
        z: Decompress::new(true),
        dict: dictionary(),
    };
    let mut deflater = Deflater { started: false };
    let mut buf = BytesMut::new();
    let mut requests: HashMap<String, Request> = HashMap::new();
    let mut stream_request: HashMap<u32, String> = HashMap::new();
    'read: while let Some(Ok(msg)) = rx.next().await {
        match msg {
            Message::Binary(b) => buf.extend_from_slice(&b),
            Message::Close(_) => break,
            _ => continue,
        }
        while let Some(frame) = next_frame(&mut buf) {
            match frame {
                Frame::Control { kind, data: d, .. } if kind == SYN_STREAM || kind == HEADERS => {
                    if d.len() < 4 {
                        break 'read;
                    }
                    let id = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) & 0x7fff_ffff;
                    let block = if kind == SYN_STREAM {
                        &d[10.min(d.len())..]
                    } else {
                        &d[4..]
                    };
                    let Ok(h) = inflater.headers(block) else {
                        break 'read;
                    };
                    if kind == HEADERS {
                        continue;
                    }
                    let mut reply = id.to_be_bytes().to_vec();
                    reply.extend_from_slice(&deflater.empty_block());
                    let _ = out_tx.send(control(SYN_REPLY, 0, &reply));
                    let key = h.get("requestid").cloned().unwrap_or_default();
                    let r = requests.entry(key.clone()).or_default();
                    r.port = h.get("port").and_then(|p| p.parse().ok()).unwrap_or(r.port);
                    match h.get("streamtype").map(String::as_str) {
                        Some("error") => r.error = Some(id),
                        Some("data") => r.data = Some(id),
                        _ => {}
                    }
                    stream_request.insert(id, key);
                    if let (Some(e), Some(dstream), None) = (r.error, r.data, &r.to_pod) {
                        let (to_pod, from_main) = mpsc::unbounded_channel();
                        for p in r.pending.drain(..) {
                            let _ = to_pod.send(p);
                        }
                        r.to_pod = Some(to_pod);
                        let target = (ip.clone(), r.port);
                        tokio::spawn(forward(target, e, dstream, from_main, out_tx.clone()));
                    }
                }
                Frame::Control {
                    kind: PING,
                    data: d,
                    ..
                } => {
                    let _ = out_tx.send(control(PING, 0, &d));
                }
                Frame::Control {
                    kind: RST_STREAM,
                    data: d,
                    ..
                } => {
                    if d.len() >= 4 {
                        let id = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) & 0x7fff_ffff;
                        if let Some(key) = stream_request.remove(&id)
                            && let Some(r) = requests.get_mut(&key)
                            && r.data == Some(id)
                        {
                            // Dropping the sender ends the forward.
                            requests.remove(&key);
                        }
                    }
                }
                Frame::Control { kind: GOAWAY, .. } => break 'read,
                Frame::Control { .. } => {}
                Frame::Data {
                    stream,
                    flags,
                    data: d,
                } => {
                    let Some(r) = stream_request
                        .get(&stream)
                        .and_then(|k| requests.get_mut(k))
                    else {
                        continue;
                    };
                    if r.data != Some(stream) {
                        continue;
                    }
                    let mut items = Vec::new();
                    if !d.is_empty() {
                        items.push(ToPod::Bytes(d));
                    }
                    if flags & FLAG_FIN != 0 {
                        items.push(ToPod::Fin);
                    }
                    for item in items {
                        match &r.to_pod {
                            Some(s) => {
                                let _ = s.send(item);
                            }
                            None => r.pending.push(item),
                        }
                    }
                }
            }
        }
    }
    drop(requests);
    drop(out_tx);
    let _ = writer.await;
}

/// One forwarded connection: dial the pod, copy both ways, then end the data stream and the
/// error stream (a dial failure is written on the error stream first).
async fn forward(
    (ip, port): (String, u16),
    error_stream: u32,
    data_stream: u32,
    mut from_client: mpsc::UnboundedReceiver<ToPod>,
    out: mpsc::UnboundedSender<Message>,
) {
    let conn = match tokio::net::TcpStream::connect((ip.as_str(), port)).await {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod: {e}");
            let _ = out.send(data(error_stream, 0, msg.as_bytes()));
            let _ = out.send(data(data_stream, FLAG_FIN, &[]));
            let _ = out.send(data(error_stream, FLAG_FIN, &[]));
            return;
        }
    };
    let (mut r, mut w) = conn.into_split();
    let mut chunk = vec![0u8; 32 * 1024];
    loop {
        tokio::select! {
            item = from_client.recv() => match item {
                Some(ToPod::Bytes(b)) => {
                    if w.write_all(&b).await.is_err() {
                        break;
                    }
                }
                // The client is done sending: the pod may still answer.
                Some(ToPod::Fin) => {
                    let _ = w.shutdown().await;
                }
                // Reset by the client, or the tunnel is gone.
                None => return,
            },
            n = r.read(&mut chunk) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out.send(data(data_stream, 0, &chunk[..n])).is_err() {
                        return;
                    }
                }
            },
        }
    }
    let _ = out.send(data(data_stream, FLAG_FIN, &[]));
    let _ = out.send(data(error_stream, FLAG_FIN, &[]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn frames_are_cut_from_the_byte_stream() {
        let Message::Binary(ping) = control(PING, 0, &7u32.to_be_bytes()) else {
            unreachable!()
        };
        let Message::Binary(d) = data(5, FLAG_FIN, b"hi") else {
            unreachable!()
        };
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&ping);
        buf.extend_from_slice(&d[..5]);
        assert!(matches!(
            next_frame(&mut buf),
            Some(Frame::Control { kind: PING, .. })
        ));
        assert_eq!(next_frame(&mut buf), None);
        buf.extend_from_slice(&d[5..]);
        assert_eq!(
            next_frame(&mut buf),
            Some(Frame::Data {
                stream: 5,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hi")
            })
        );
    }

    /// The stored-block replies inflate (as the client's zlib reader does) to empty header
    /// blocks, one after the other on one stream.
    #[test]
    fn empty_reply_blocks_inflate() {
        let mut d = Deflater { started: false };
        let mut z = Decompress::new(true);
        for _ in 0..3 {
            let block = d.empty_block();
            let mut out = Vec::with_capacity(16);
            z.decompress_vec(&block, &mut out, FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, [0, 0, 0, 0]);
        }
    }
}
