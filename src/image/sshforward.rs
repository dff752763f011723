//! `--ssh`: the user's ssh-agent lent to BuildKit's `RUN --mount=type=ssh` steps through the
//! session, as `docker buildx build --ssh` does, read-only.
//!
//! The daemon calls `moby.sshforward.v1.SSH` (BuildKit's `session/sshforward/ssh.proto`):
//! `CheckAgent` with the mount's id when the build is solved (an id hvdctl does not serve
//! fails the step: `unset ssh forward key ID`), then `ForwardAgent` once per connection a
//! step makes to its agent socket — a stream of `BytesMessage`s both ways, the id in the gRPC
//! metadata `buildkit.ssh.id` (none: `default`). hvdctl reads the agent protocol's requests
//! (a big-endian length, then the message type) and passes on only the ones that read or use
//! keys — list identities, sign — one at a time, each with the agent's one answer; every
//! other request (add or remove keys, lock, extensions) is answered `SSH_AGENT_FAILURE`
//! without reaching the agent, as BuildKit's own agent provider
//! (`session/sshforward/sshprovider/agentprovider.go`, `readOnlyAgent`) refuses them.
//!
//! Only agent sockets are forwarded; a key file (the Docker CLI loads those into an agent of
//! its own) is refused with what to do instead. The sockets are checked before the build
//! starts and connected to when a step asks.

use crate::error::Context as _;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::proto::{
    Messages, Reply, Value, fields, grpc_trailers, message, put_bytes, reply, status, streamed,
};
use crate::error::{Error, Result};

pub(crate) const CHECK_AGENT: &str = "/moby.sshforward.v1.SSH/CheckAgent";
pub(crate) const FORWARD_AGENT: &str = "/moby.sshforward.v1.SSH/ForwardAgent";
/// The id of a mount that names none, and of `--ssh` without `ID=`.
const DEFAULT_ID: &str = "default";
/// The gRPC metadata naming the agent a `ForwardAgent` call is for.
const ID_KEY: &str = "buildkit.ssh.id";
/// The longest agent message either side may send (OpenSSH's `AGENT_MAX_LEN`).
const MAX_AGENT_MESSAGE: usize = 256 * 1024;

// Agent protocol message types (draft-miller-ssh-agent).
const AGENT_FAILURE: u8 = 5;
const REQUEST_IDENTITIES: u8 = 11;
const SIGN_REQUEST: u8 = 13;

/// A `--ssh ID[=SOCKET]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSpec {
    pub id: String,
    pub socket: PathBuf,
}

impl SshSpec {
    /// `default`, `ID` or `ID=SOCKET` as `--ssh` gives it (a relative socket: from the
    /// working directory); without a socket, `auth_sock` (`$SSH_AUTH_SOCK`).
    pub fn parse(s: &str, auth_sock: Option<&OsStr>) -> Result<SshSpec> {
        Self::read(s, auth_sock, Path::new(""))
            .map_err(|why| Error::input(format!("--ssh {s}: {why}")))
    }

    /// An entry of hvdctl.yaml's `build.ssh` (a relative socket: from the app directory).
    pub fn from_app(i: usize, s: &str, auth_sock: Option<&OsStr>, dir: &Path) -> Result<SshSpec> {
        Self::read(s, auth_sock, dir)
            .map_err(|why| Error::input(format!("hvdctl.yaml build.ssh[{i}] {s:?}: {why}")))
    }

    fn read(s: &str, auth_sock: Option<&OsStr>, dir: &Path) -> crate::Result<SshSpec> {
        let (id, path) = match s.split_once('=') {
            Some((id, path)) => (id.trim(), Some(path.trim())),
            None => (s.trim(), None),
        };
        if id.is_empty() {
            return Err(crate::Error::input(
                "the id is empty (expected ID or ID=SOCKET, e.g. default)",
            ));
        }
        let socket = match path {
            Some(p) if p.contains(',') => {
                return Err(crate::Error::input(
                    "one agent socket per id; key files are not forwarded: ssh-add \
                     the keys to one agent and give its socket",
                ));
            }
            Some(p) if !p.is_empty() => dir.join(p),
            _ => match auth_sock.filter(|v| !v.is_empty()) {
                Some(v) => PathBuf::from(v),
                None => {
                    return Err(crate::Error::input(
                        "no agent socket given and SSH_AUTH_SOCK is not set: start an \
                         agent (eval \"$(ssh-agent)\"; ssh-add) or give its socket \
                         (ID=SOCKET)",
                    ));
                }
            },
        };
        Ok(SshSpec {
            id: id.to_string(),
            socket,
        })
    }
}

/// The app's `build.ssh` with `cli` (`--ssh`) over it: a flag's id replaces the app's.
pub(crate) fn merged(app: Vec<SshSpec>, cli: &[SshSpec]) -> Vec<SshSpec> {
    let mut out: Vec<SshSpec> = app
        .into_iter()
        .filter(|a| !cli.iter().any(|c| c.id == a.id))
        .collect();
    out.extend(cli.iter().cloned());
    out
}

/// The agents by id, each checked to be a socket now (exit 2 otherwise, before anything is
/// built).
pub(crate) fn agents(specs: &[SshSpec]) -> Result<HashMap<String, PathBuf>> {
    let mut out = HashMap::new();
    for s in specs {
        let what = format!("--ssh {}={}", s.id, s.socket.display());
        match std::fs::metadata(&s.socket) {
            Ok(m) if m.file_type().is_socket() => {}
            Ok(m) if m.is_file() => {
                return Err(Error::input(format!(
                    "{what}: a file, not an ssh-agent's socket; hvdctl forwards agents, not key files"
                ))
                .hint(format!(
                    "ssh-add {} to an agent and give its socket (default: $SSH_AUTH_SOCK)",
                    s.socket.display()
                )));
            }
            Ok(_) => {
                return Err(Error::input(format!("{what}: not a socket")));
            }
            Err(e) => return Err(Error::input(format!("{what}: {e}"))),
        }
        if out.insert(s.id.clone(), s.socket.clone()).is_some() {
            return Err(Error::input(format!(
                "--ssh: the id {:?} is given twice",
                s.id
            )));
        }
    }
    Ok(out)
}

/// `CheckAgent`: whether the mount's id is one of ours.
pub(crate) fn check(request: &[u8], agents: &HashMap<String, PathBuf>) -> Reply {
    let id = fields(request)
        .into_iter()
        .find_map(|f| match f {
            (1, Value::Bytes(s)) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        })
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| DEFAULT_ID.into());
    if agents.contains_key(&id) {
        reply(&[])
    } else {
        not_forwarded(&id)
    }
}

fn not_forwarded(id: &str) -> Reply {
    // BuildKit's own words for it, which the failed step then shows.
    let msg = format!("unset ssh forward key {id} (give it with hvdctl build --ssh {id})");
    status(5, &msg)
}

/// `ForwardAgent`: one connection of a step to the agent, proxied read-only.
pub(crate) fn forward(
    req: hyper::Request<Incoming>,
    agents: Arc<HashMap<String, PathBuf>>,
) -> Reply {
    let id = req
        .headers()
        .get(ID_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_ID)
        .to_string();
    let Some(socket) = agents.get(&id).cloned() else {
        return not_forwarded(&id);
    };
    let (tx, rx) = mpsc::channel(4);
    let incoming = Messages::new(req.into_body(), MAX_AGENT_MESSAGE + 64);
    tokio::spawn(async move {
        let (code, msg) = match proxy(&socket, incoming, &tx).await {
            Ok(()) => (0, String::new()),
            Err(e) => (2, format!("ssh agent {id} at {}: {e}", socket.display())),
        };
        let _ = tx.send(Frame::trailers(grpc_trailers(code, &msg))).await;
    });
    streamed(rx)
}

async fn proxy(
    socket: &Path,
    mut incoming: Messages,
    tx: &mpsc::Sender<Frame<Bytes>>,
) -> crate::Result<()> {
    let mut agent = tokio::net::UnixStream::connect(socket)
        .await
        .fail_with(|| "connecting".to_string())?;
    let mut requests = BytesMut::new();
    while let Some(m) = incoming.next().await? {
        requests.extend_from_slice(&bytes_message(&m));
        while let Some(request) = next_agent_message(&mut requests)? {
            let answer = if allowed(&request) {
                agent
                    .write_all(&request)
                    .await
                    .fail_with(|| "writing".to_string())?;
                read_agent_message(&mut agent).await?
            } else {
                Bytes::from_static(&[0, 0, 0, 1, AGENT_FAILURE])
            };
            let mut out = Vec::with_capacity(answer.len() + 8);
            put_bytes(&mut out, 1, &answer);
            if tx.send(message(&out)).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The `data` of a `BytesMessage`.
fn bytes_message(m: &[u8]) -> Vec<u8> {
    fields(m)
        .into_iter()
        .filter_map(|f| match f {
            (1, Value::Bytes(b)) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Requests that only read or use the agent's keys.
fn allowed(request: &[u8]) -> bool {
    matches!(request.get(4), Some(&(REQUEST_IDENTITIES | SIGN_REQUEST)))
}

/// One whole agent message (its length included) off the front of `buf`, once all of it
/// has arrived.
fn next_agent_message(buf: &mut BytesMut) -> crate::Result<Option<Bytes>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 || len > MAX_AGENT_MESSAGE {
        return Err(crate::Error::failure(format!("a {len}-byte agent request")));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some(buf.split_to(4 + len).freeze()))
}

/// The agent's answer: one message.
async fn read_agent_message(agent: &mut tokio::net::UnixStream) -> crate::Result<Bytes> {
    let mut head = [0u8; 4];
    agent
        .read_exact(&mut head)
        .await
        .fail_with(|| "reading its answer".to_string())?;
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_AGENT_MESSAGE {
        return Err(crate::Error::failure(format!("a {len}-byte answer")));
    }
    let mut out = BytesMut::zeroed(4 + len);
    out[..4].copy_from_slice(&head);
    agent
        .read_exact(&mut out[4..])
        .await
        .fail_with(|| "reading its answer".to_string())?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let sock = Some(OsStr::new("/run/agent.sock"));
        assert_eq!(
            SshSpec::parse("default", sock).unwrap(),
            SshSpec {
                id: "default".into(),
                socket: "/run/agent.sock".into()
            }
        );
        assert_eq!(
            SshSpec::parse("git=/tmp/a", None).unwrap(),
            SshSpec {
                id: "git".into(),
                socket: "/tmp/a".into()
            }
        );
        assert_eq!(
            SshSpec::parse("git=", sock).unwrap().socket,
            PathBuf::from("/run/agent.sock")
        );
        for (bad, why) in [
            ("default", "SSH_AUTH_SOCK is not set"),
            ("=/tmp/a", "the id is empty"),
            ("k=/a,/b", "one agent socket per id"),
        ] {
            let e = SshSpec::parse(bad, None).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        // hvdctl.yaml's entries: a relative socket is the app directory's; errors name the
        // entry.
        let app = Path::new("/srv/app");
        assert_eq!(
            SshSpec::from_app(0, "git=run/agent", None, app)
                .unwrap()
                .socket,
            PathBuf::from("/srv/app/run/agent")
        );
        let e = SshSpec::from_app(1, "default", None, app).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("hvdctl.yaml build.ssh[1] \"default\": no agent socket"),
            "{e}"
        );
        // A flag's id replaces the app's; the others stay.
        let spec = |id: &str, p: &str| SshSpec {
            id: id.into(),
            socket: p.into(),
        };
        assert_eq!(
            merged(
                vec![spec("default", "/a"), spec("git", "/b")],
                &[spec("git", "/c")]
            ),
            vec![spec("default", "/a"), spec("git", "/c")]
        );
    }

    #[test]
    fn sockets_are_checked_and_key_files_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let key = dir.path().join("id_ed25519");
        std::fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        let spec = |id: &str, p: &Path| SshSpec {
            id: id.into(),
            socket: p.to_path_buf(),
        };
        let a = agents(&[spec("default", &sock), spec("git", &sock)]).unwrap();
        assert_eq!(a.len(), 2);
        let e = agents(&[spec("default", &key)]).unwrap_err();
        assert!(e.to_string().contains("not an ssh-agent's socket"), "{e}");
        let e = agents(&[spec("a", &sock), spec("a", &sock)]).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
        let e = agents(&[spec("a", &dir.path().join("none"))]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(agents(&[spec("a", dir.path())]).is_err());
    }

    #[test]
    fn agent_messages_are_cut_whole_and_only_reads_pass() {
        let mut buf = BytesMut::from(&[0, 0, 0, 1, REQUEST_IDENTITIES, 0, 0, 0, 2, 19][..]);
        let first = next_agent_message(&mut buf).unwrap().unwrap();
        assert!(allowed(&first));
        // The second is not whole yet.
        assert_eq!(next_agent_message(&mut buf).unwrap(), None);
        buf.extend_from_slice(&[0]);
        let second = next_agent_message(&mut buf).unwrap().unwrap();
        assert_eq!(&second[..], &[0, 0, 0, 2, 19, 0]);
        assert!(!allowed(&second), "remove all identities");
        assert!(allowed(&[0, 0, 0, 1, SIGN_REQUEST]));
        for refused in [17u8, 18, 19, 22, 23, 25, 27] {
            assert!(!allowed(&[0, 0, 0, 1, refused]), "{refused}");
        }
        let mut huge = BytesMut::from(&[0x7f, 0, 0, 0][..]);
        assert!(next_agent_message(&mut huge).is_err());
        let mut m = Vec::new();
        put_bytes(&mut m, 1, b"abc");
        assert_eq!(bytes_message(&m), b"abc");
    }
}
