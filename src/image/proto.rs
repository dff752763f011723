//! Protocol Buffers and gRPC framing, by hand, for the few small messages hvdctl exchanges
//! with BuildKit: its progress stream (`buildkit.rs`), the session's gRPC methods
//! (`session.rs`), the file sync's packets (`filesync.rs`) and the forwarded ssh agent's
//! bytes (`sshforward.rs`). Reading is lenient (a malformed byte ends the message, unknown
//! fields are skipped); writing leaves out default values, as protobuf encoders do.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::mpsc;

/// A field's value: what the wire type says, nothing decoded further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    /// Length-delimited: a string, bytes or an embedded message.
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value (none of the messages read needs one).
    Other,
}

/// The fields of one message, in order; stops at the first malformed byte.
pub(crate) fn fields(mut b: &[u8]) -> Vec<(u64, Value<'_>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let Some((key, rest)) = varint(b) else { break };
        b = rest;
        let field = key >> 3;
        let value = match key & 7 {
            0 => {
                let Some((v, rest)) = varint(b) else { break };
                b = rest;
                Value::Varint(v)
            }
            2 => {
                let Some((len, rest)) = varint(b) else { break };
                let Some(bytes) = usize::try_from(len).ok().and_then(|l| rest.get(..l)) else {
                    break;
                };
                b = &rest[bytes.len()..];
                Value::Bytes(bytes)
            }
            1 if b.len() >= 8 => {
                b = &b[8..];
                Value::Other
            }
            5 if b.len() >= 4 => {
                b = &b[4..];
                Value::Other
            }
            _ => break,
        };
        out.push((field, value));
    }
    out
}

/// A base-128 varint and the bytes after it.
pub(crate) fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Field `field` as a varint, unless 0.
pub(crate) fn put_uint(out: &mut Vec<u8>, field: u64, v: u64) {
    if v != 0 {
        put_varint(out, field << 3);
        put_varint(out, v);
    }
}

/// Field `field` as length-delimited bytes, unless empty.
pub(crate) fn put_bytes(out: &mut Vec<u8>, field: u64, v: &[u8]) {
    if !v.is_empty() {
        put_varint(out, field << 3 | 2);
        put_varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }
}

/// One gRPC message frame: no compression, big-endian length, the message.
pub(crate) fn grpc_frame(message: &[u8]) -> Bytes {
    let mut f = BytesMut::with_capacity(message.len() + 5);
    f.put_u8(0);
    f.put_u32(message.len() as u32);
    f.put_slice(message);
    f.freeze()
}

/// A gRPC call's trailers: its status code and message.
pub(crate) fn grpc_trailers(code: u32, message: &str) -> hyper::HeaderMap {
    let mut t = hyper::HeaderMap::new();
    t.insert("grpc-status", code.into());
    if let Ok(v) = hyper::header::HeaderValue::from_str(message)
        && !message.is_empty()
    {
        t.insert("grpc-message", v);
    }
    t
}

/// A gRPC call's answer, as the session serves it.
pub(crate) type Reply = hyper::Response<BoxBody<Bytes, Infallible>>;

/// An answer whose frames (messages, then trailers) are sent as `rx` yields them: the
/// streaming calls' replies.
pub(crate) fn streamed(mut rx: mpsc::Receiver<Frame<Bytes>>) -> Reply {
    let frames = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    answer(StreamBody::new(frames.map(Ok::<_, Infallible>)))
}

/// A successful answer of one message.
pub(crate) fn reply(m: &[u8]) -> Reply {
    frames(vec![message(m), Frame::trailers(grpc_trailers(0, ""))])
}

/// A failed answer: a gRPC status code and its message.
pub(crate) fn status(code: u32, text: &str) -> Reply {
    frames(vec![Frame::trailers(grpc_trailers(code, text))])
}

fn frames(frames: Vec<Frame<Bytes>>) -> Reply {
    answer(StreamBody::new(futures::stream::iter(
        frames.into_iter().map(Ok::<_, Infallible>),
    )))
}

fn answer<B>(body: B) -> Reply
where
    B: hyper::body::Body<Data = Bytes, Error = Infallible> + Send + Sync + 'static,
{
    hyper::Response::builder()
        .header(hyper::header::CONTENT_TYPE, "application/grpc")
        .body(BodyExt::boxed(body))
        .unwrap_or_default()
}

/// A message frame for a streamed answer.
pub(crate) fn message(m: &[u8]) -> Frame<Bytes> {
    Frame::data(grpc_frame(m))
}

/// The messages of a call's request stream, one by one.
pub(crate) struct Messages {
    body: Incoming,
    pending: BytesMut,
    /// The largest message accepted.
    max: usize,
}

impl Messages {
    pub(crate) fn new(body: Incoming, max: usize) -> Messages {
        Messages {
            body,
            pending: BytesMut::new(),
            max,
        }
    }

    /// The next message; `Ok(None)` once the caller has ended its stream.
    pub(crate) async fn next(&mut self) -> crate::Result<Option<Bytes>> {
        loop {
            if self.pending.len() >= 5 {
                let p = &self.pending;
                let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
                if len > self.max {
                    return Err(crate::Error::failure(format!(
                        "a {len}-byte message from the daemon"
                    )));
                }
                if p.len() >= 5 + len {
                    return Ok(Some(self.pending.split_to(5 + len).freeze().slice(5..)));
                }
            }
            match self.body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.pending.extend_from_slice(&d);
                    } // else trailers
                }
                Some(Err(e)) => {
                    return Err(crate::Error::failure(format!(
                        "the daemon's stream broke: {e}"
                    )));
                }
                None if self.pending.is_empty() => return Ok(None),
                None => {
                    return Err(crate::Error::failure(
                        "the daemon's stream ended inside a message",
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let mut m = Vec::new();
        put_uint(&mut m, 1, 300);
        put_uint(&mut m, 2, 0); // left out
        put_bytes(&mut m, 3, b"abc");
        put_bytes(&mut m, 4, b""); // left out
        assert_eq!(
            fields(&m),
            vec![(1, Value::Varint(300)), (3, Value::Bytes(b"abc"))]
        );
        // A length past the end stops the reading, keeping what came before.
        let mut cut = m.clone();
        cut.extend_from_slice(&[5 << 3 | 2, 9, b'x']);
        assert_eq!(fields(&cut).len(), 2);
        assert_eq!(varint(&[0xff; 11]), None);
        assert_eq!(&grpc_frame(b"hi")[..], &[0, 0, 0, 0, 2, b'h', b'i']);
    }
}
