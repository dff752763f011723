//! The build context served to BuildKit through the session's file sync, as the Docker CLI
//! does: the daemon calls `moby.filesync.v1.FileSync/DiffCopy` once per local source it
//! needs, naming it in the gRPC metadata `dir-name` (`context`: the context directory;
//! `dockerfile`: only the Dockerfile), with `include-patterns`, `exclude-patterns` and
//! `followpaths` narrowing what it wants.
//!
//! The stream carries fsutil `Packet`s both ways (protobuf, written and read by hand):
//! hvdctl sends one `STAT` per entry in walk order (each directory's names sorted bytewise,
//! depth first; a parent before its children) with its Go `os.FileMode` bits, size, mtime in
//! nanoseconds, uid/gid 0 (what the CLI sends) and a symlink's target or a hard link's first
//! path, then an empty `STAT`. The daemon compares those with its copy from the previous
//! build of the same context and asks (`REQ`, by the entry's index) only for the regular
//! files that differ; each is read in [`CHUNK`]-byte pieces into `DATA` packets, an empty one
//! ending it. The daemon's `FIN` is answered with `FIN` and the call ends.
//!
//! Excludes are the context's `.dockerignore` patterns (without the exceptions the tar
//! context adds for the Dockerfile and `.dockerignore`), as the CLI sets them; the daemon's
//! own `exclude-patterns` count only for a directory without patterns or with
//! `override-excludes: true`. Sockets and device nodes are left out, as in the tar context.
//!
//! Memory is bounded: packets wait in a channel of [`QUEUE`] messages; the walk and the file
//! reads block on it (on the blocking pool) while the daemon is slower.

use std::collections::HashMap;
use std::fs::{self, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use tokio::sync::mpsc;

use super::context::{BuildContext, EntryKind, Step, Tree};
use super::dockerignore::{self, Glob, Matcher};
use super::proto::{
    Messages, Reply, Value, fields, grpc_trailers, message, put_bytes, put_uint, put_varint,
    streamed,
};
use crate::error::{Error, Result};

/// The method served.
pub(crate) const DIFF_COPY: &str = "/moby.filesync.v1.FileSync/DiffCopy";
/// The most file bytes in one `DATA` packet.
pub(crate) const CHUNK: usize = 128 * 1024;
/// Packets waiting to be sent, at most.
const QUEUE: usize = 16;
/// The largest message accepted from the daemon (it sends only small `REQ`/`FIN` packets).
const MAX_INCOMING: usize = 1 << 20;
/// Files read at once.
const READERS: usize = 2;

const PACKET_STAT: u64 = 0;
const PACKET_REQ: u64 = 1;
const PACKET_DATA: u64 = 2;
const PACKET_FIN: u64 = 3;
const PACKET_ERR: u64 = 4;

// Go's os.FileMode bits.
const GO_DIR: u32 = 1 << 31;
const GO_SYMLINK: u32 = 1 << 27;
const GO_NAMED_PIPE: u32 = 1 << 25;
const GO_SETUID: u32 = 1 << 23;
const GO_SETGID: u32 = 1 << 22;
const GO_STICKY: u32 = 1 << 20;

/// The two local sources of a build.
pub(crate) struct Dirs {
    /// The context directory and its `.dockerignore` patterns.
    pub context: PathBuf,
    pub excludes: Vec<String>,
    /// The Dockerfile's directory and its name there (the only entry served).
    pub dockerfile_dir: PathBuf,
    pub dockerfile_name: String,
}

impl Dirs {
    pub(crate) fn of(ctx: &BuildContext) -> Dirs {
        let full = ctx.root().join(ctx.dockerfile());
        let name = full
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = full.parent().map(Path::to_path_buf).unwrap_or_default();
        Dirs {
            context: ctx.root().to_path_buf(),
            excludes: ctx.ignore_patterns().to_vec(),
            dockerfile_dir: dir,
            dockerfile_name: name,
        }
    }
}

/// What was sent, for the report, and the first local error.
#[derive(Default)]
pub(crate) struct Transfer {
    /// File bytes sent (in `DATA` packets).
    pub bytes: AtomicU64,
    /// Files the daemon asked for.
    pub files: AtomicU64,
    /// Entries described (`STAT` packets).
    pub entries: AtomicU64,
    pub error: Mutex<Option<Error>>,
}

impl Transfer {
    fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    }
}

/// Serves one `DiffCopy` call: answers at once with a streamed body fed by the walk, the
/// file reads and the reader of the daemon's packets.
pub(crate) fn serve(req: hyper::Request<Incoming>, dirs: Arc<Dirs>, t: Arc<Transfer>) -> Reply {
    let md = |key: &str| -> Vec<String> {
        req.headers()
            .get_all(key)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let has = |key: &str| req.headers().contains_key(key);
    let dir_name = md("dir-name").into_iter().next().unwrap_or_default();
    let includes = has("include-patterns").then(|| md("include-patterns"));
    let follow = has("followpaths").then(|| md("followpaths"));
    let daemon_excludes = md("exclude-patterns");
    let override_excludes = md("override-excludes").first().map(String::as_str) == Some("true");

    let (tx, rx) = mpsc::channel::<Frame<Bytes>>(QUEUE);
    let reply = streamed(rx);

    let source = match dir_name.as_str() {
        "context" => {
            let excludes = if dirs.excludes.is_empty() || override_excludes {
                daemon_excludes
            } else {
                dirs.excludes.clone()
            };
            match Matcher::new(&excludes) {
                Ok(m) => Some(Source {
                    root: dirs.context.clone(),
                    only: None,
                    excludes: (!excludes.is_empty()).then_some(m),
                    includes: Includes::new(&dirs.context, includes, follow),
                }),
                Err(e) => {
                    let msg = format!("exclude pattern: {e}");
                    let _ = tx.try_send(Frame::trailers(grpc_trailers(3, &msg)));
                    None
                }
            }
        }
        "dockerfile" => Some(Source {
            root: dirs.dockerfile_dir.clone(),
            only: Some(dirs.dockerfile_name.clone()),
            excludes: Matcher::new(&daemon_excludes)
                .ok()
                .filter(|_| !daemon_excludes.is_empty()),
            includes: Includes::new(&dirs.dockerfile_dir, includes, follow),
        }),
        other => {
            let msg = format!("no access allowed to dir {other:?}");
            let _ = tx.try_send(Frame::trailers(grpc_trailers(5, &msg)));
            None
        }
    };
    if let Some(source) = source {
        let incoming = Messages::new(req.into_body(), MAX_INCOMING);
        tokio::spawn(run(source, incoming, tx, t));
    }
    reply
}

/// One directory as the daemon asked for it.
struct Source {
    root: PathBuf,
    /// The one name served at the top (the Dockerfile), followed if it is a link.
    only: Option<String>,
    excludes: Option<Matcher>,
    includes: Option<Includes>,
}

/// Files the walk announced, by their STAT's number, until the daemon asks for them.
type Announced = Arc<Mutex<HashMap<u32, PathBuf>>>;

/// One `DiffCopy` call: the walk announces every entry, readers send the files the daemon
/// asks for, and the daemon's packets are answered until it says FIN.
async fn run(
    source: Source,
    mut incoming: Messages,
    tx: mpsc::Sender<Frame<Bytes>>,
    t: Arc<Transfer>,
) {
    let files: Announced = Arc::default();
    let label = source.root.display().to_string();
    let walk = spawn_walk(source, tx.clone(), files.clone(), t.clone());
    let (requests, readers) = spawn_readers(&tx, &t);
    let end = answer(&mut incoming, &files, &requests).await;
    drop(requests);
    for r in readers {
        let _ = r.await;
    }
    let _ = walk.await;
    match end {
        Ok(()) => {
            let _ = tx.send(message(&packet(PACKET_FIN, 0, &[]))).await;
            let _ = tx.send(Frame::trailers(grpc_trailers(0, ""))).await;
        }
        Err(msg) => {
            // Nothing more to say when the stream is gone; a local error is already kept.
            let _ = tx
                .send(Frame::trailers(grpc_trailers(
                    2,
                    &format!("{label}: {msg}"),
                )))
                .await;
        }
    }
}

/// A local failure (a file that cannot be read): kept for the build's error, and told to
/// the daemon, which ends the copy.
fn fail_copy(tx: &mpsc::Sender<Frame<Bytes>>, t: &Transfer, e: Error) {
    let msg = e.message.clone();
    t.fail(e);
    let _ = tx.blocking_send(message(&packet(PACKET_ERR, 0, msg.as_bytes())));
    let _ = tx.blocking_send(Frame::trailers(grpc_trailers(2, &msg)));
}

/// The walk, on the blocking pool: every STAT, then the empty one.
fn spawn_walk(
    source: Source,
    tx: mpsc::Sender<Frame<Bytes>>,
    files: Announced,
    t: Arc<Transfer>,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        let mut id: u32 = 0;
        let mut walker = Walker {
            source: &source,
            last_included_dir: None,
        };
        let result = walker.walk(&mut |stat, full| {
            if stat.mode & (GO_DIR | GO_SYMLINK | GO_NAMED_PIPE) == 0 {
                files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, full.to_path_buf());
            }
            id += 1;
            t.entries.fetch_add(1, Ordering::Relaxed);
            Ok(tx.blocking_send(message(&stat_packet(stat))).is_ok())
        });
        match result {
            Ok(true) => {
                let _ = tx.blocking_send(message(&[]));
            }
            Ok(false) => {}
            Err(e) => fail_copy(&tx, &t, e),
        }
    })
}

/// The readers of the files the daemon asks for, on the blocking pool; requests go in
/// through the returned sender (dropping it ends them).
fn spawn_readers(
    tx: &mpsc::Sender<Frame<Bytes>>,
    t: &Arc<Transfer>,
) -> (
    std::sync::mpsc::Sender<(u32, PathBuf)>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let (req_tx, req_rx) = std::sync::mpsc::channel::<(u32, PathBuf)>();
    let req_rx = Arc::new(Mutex::new(req_rx));
    let readers = (0..READERS)
        .map(|_| {
            let (tx, t, req_rx) = (tx.clone(), t.clone(), req_rx.clone());
            tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let next = req_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((id, path)) = next else { return };
                    t.files.fetch_add(1, Ordering::Relaxed);
                    match send_file(id, &path, &mut buf, &tx, &t) {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => return fail_copy(&tx, &t, e),
                    }
                }
            })
        })
        .collect();
    (req_tx, readers)
}

/// The daemon's packets: each REQ handed to the readers, until FIN (or why not).
async fn answer(
    incoming: &mut Messages,
    files: &Announced,
    requests: &std::sync::mpsc::Sender<(u32, PathBuf)>,
) -> crate::Result<()> {
    loop {
        let Some(msg) = incoming.next().await? else {
            return Err(crate::Error::failure(
                "the daemon ended the stream before FIN",
            ));
        };
        let (kind, id, data) = parse_packet(&msg);
        match kind {
            PACKET_REQ => {
                let path = files.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                let Some(p) = path else {
                    return Err(crate::Error::failure(format!(
                        "the daemon asked for file #{id}, which is not one"
                    )));
                };
                let _ = requests.send((id, p));
            }
            PACKET_FIN => return Ok(()),
            PACKET_ERR => {
                return Err(crate::Error::failure(format!(
                    "the daemon's copy failed: {}",
                    String::from_utf8_lossy(&data)
                )));
            }
            _ => {}
        }
    }
}

/// Sends one file in `DATA` packets; `false` when the stream is gone.
fn send_file(
    id: u32,
    path: &Path,
    buf: &mut [u8],
    tx: &mpsc::Sender<Frame<Bytes>>,
    t: &Transfer,
) -> Result<bool> {
    let fail = |e: std::io::Error| Error::failure(format!("reading {}: {e}", path.display()));
    let mut f = crate::files::open_io(path).map_err(fail)?;
    loop {
        let n = match f.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e)),
        };
        if tx
            .blocking_send(message(&packet(PACKET_DATA, id, &buf[..n])))
            .is_err()
        {
            return Ok(false);
        }
        t.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(tx
        .blocking_send(message(&packet(PACKET_DATA, id, &[])))
        .is_ok())
}

/// One entry's `fsutil.types.Stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    pub path: String,
    /// Go `os.FileMode` bits.
    pub mode: u32,
    pub size: i64,
    /// Nanoseconds since the epoch.
    pub mtime: i64,
    pub linkname: String,
}

/// The Go `os.FileMode` of a Unix `st_mode`; `None` for sockets and devices.
pub(crate) fn go_mode(meta: &Metadata) -> Option<u32> {
    let ft = meta.file_type();
    let m = meta.mode();
    let mut mode = m & 0o777;
    if m & 0o4000 != 0 {
        mode |= GO_SETUID;
    }
    if m & 0o2000 != 0 {
        mode |= GO_SETGID;
    }
    if m & 0o1000 != 0 {
        mode |= GO_STICKY;
    }
    if ft.is_dir() {
        mode |= GO_DIR;
    } else if ft.is_symlink() {
        mode |= GO_SYMLINK;
    } else if ft.is_fifo() {
        mode |= GO_NAMED_PIPE;
    } else if !ft.is_file() {
        return None;
    }
    Some(mode)
}

/// The walk as fsutil's: the shared [`Tree`] walk with BuildKit's include patterns on top,
/// each entry sent as a STAT.
struct Walker<'a> {
    source: &'a Source,
    /// The last directory an include pattern matched whole: what is under it is included.
    last_included_dir: Option<String>,
}

impl Walker<'_> {
    /// Visits every entry sent, in order; `Ok(false)` when `visit` said stop.
    fn walk(&mut self, visit: &mut dyn FnMut(&Stat, &Path) -> Result<bool>) -> Result<bool> {
        let source = self.source;
        let tree = Tree {
            root: &source.root,
            excludes: source.excludes.as_ref(),
            only: source.only.as_deref(),
        };
        tree.walk(&mut |mut node| {
            if !self.included(node.path, node.meta.is_dir()) || node.excluded && !node.reach_in {
                return Ok(Step::Skip);
            }
            let Some(mode) = go_mode(node.meta) else {
                return Ok(Step::Skip);
            };
            let Some(entry) = node.entry()? else {
                return Ok(Step::Skip);
            };
            let (size, linkname) = match entry.kind {
                EntryKind::Dir => (0, String::new()),
                EntryKind::HardLink(first) => (0, first),
                EntryKind::Symlink(target) => (
                    node.meta.len() as i64,
                    target.to_string_lossy().into_owned(),
                ),
                EntryKind::File | EntryKind::Fifo => (node.meta.len() as i64, String::new()),
            };
            let stat = Stat {
                path: entry.path,
                mode,
                size,
                mtime: node.meta.mtime() * 1_000_000_000 + node.meta.mtime_nsec(),
                linkname,
            };
            Ok(if visit(&stat, node.full)? {
                Step::Take
            } else {
                Step::Stop
            })
        })
    }

    /// Whether the include patterns (if any) take `path`: fsutil's `includeMatcher`, with
    /// everything under a directory matched whole taken without asking again.
    fn included(&mut self, path: &str, is_dir: bool) -> bool {
        let Some(inc) = &self.source.includes else {
            return true;
        };
        let inside = self.last_included_dir.as_ref().is_some_and(|d| {
            path.strip_prefix(d.as_str())
                .is_some_and(|r| r.starts_with('/'))
        });
        if inside {
            return true;
        }
        match inc.check(path) {
            None => false,
            Some(partial) => {
                if !partial && is_dir {
                    self.last_included_dir = Some(path.to_string());
                }
                true
            }
        }
    }
}

/// `include-patterns` plus the `followpaths` and the targets of links on them, each compiled
/// once for every number of components a path may have (fsutil's `matchPrefix` cuts a
/// pattern to as many components as the path it is matched with).
struct Includes {
    /// Per pattern: its first 1, 2, … components as a glob (`None`: malformed, matches
    /// nothing); the last is the whole pattern.
    patterns: Vec<Vec<Option<Glob>>>,
}

impl Includes {
    fn new(
        root: &Path,
        includes: Option<Vec<String>>,
        follow: Option<Vec<String>>,
    ) -> Option<Includes> {
        if includes.is_none() && follow.is_none() {
            return None;
        }
        let mut patterns: Vec<String> = includes
            .unwrap_or_default()
            .iter()
            .map(|p| dockerignore::clean(p))
            .collect();
        for p in follow.unwrap_or_default() {
            follow_links(root, &dockerignore::clean(&p), &mut patterns, 0);
        }
        patterns.sort();
        patterns.dedup();
        Some(Includes {
            patterns: patterns.iter().map(|p| prefixes(p)).collect(),
        })
    }

    /// `None` when `path` is not included; `Some(partial)` otherwise, `partial` when only
    /// a pattern below it matched (a parent directory of what is wanted).
    fn check(&self, path: &str) -> Option<bool> {
        let mut matched = false;
        let mut partial = true;
        for p in &self.patterns {
            if let Some(part) = match_prefix(p, path) {
                matched = true;
                if !part {
                    partial = false;
                    break;
                }
            }
        }
        matched.then_some(partial)
    }
}

/// A pattern's first 1, 2, … components, each compiled.
fn prefixes(pattern: &str) -> Vec<Option<Glob>> {
    let parts: Vec<&str> = pattern.split('/').collect();
    (1..=parts.len())
        .map(|n| Glob::new(&parts[..n].join("/")).ok())
        .collect()
}

/// fsutil's `matchPrefix`: the pattern cut to as many components as `name` has, matched as
/// a glob; `Some(partial)` on a match, `partial` when the pattern was cut.
fn match_prefix(prefixes: &[Option<Glob>], name: &str) -> Option<bool> {
    let count = name.matches('/').count();
    let (glob, partial) = match prefixes.get(count) {
        Some(g) if count + 1 < prefixes.len() => (g, true),
        _ => (prefixes.last()?, false),
    };
    glob.as_ref()?.is_match(name).then_some(partial)
}

/// Adds `p` to `out`, and for each link on its way (inside the root) the link's target
/// with the rest of the path.
fn follow_links(root: &Path, p: &str, out: &mut Vec<String>, depth: usize) {
    let p = p.trim_start_matches('/');
    if p.is_empty() || p == "." || out.iter().any(|o| o == p) || depth > 16 {
        return;
    }
    out.push(p.to_string());
    let parts: Vec<&str> = p.split('/').collect();
    for i in 0..parts.len() {
        let here = parts[..=i].join("/");
        if has_wildcard(parts[i]) {
            return;
        }
        let Ok(meta) = fs::symlink_metadata(root.join(&here)) else {
            return;
        };
        if meta.file_type().is_symlink() {
            let Ok(target) = fs::read_link(root.join(&here)) else {
                return;
            };
            let target = target.to_string_lossy();
            let base = if target.starts_with('/') {
                target.to_string()
            } else {
                format!("{}/{target}", parts[..i].join("/"))
            };
            let rest = parts[i + 1..].join("/");
            let next = dockerignore::clean(&format!("/{base}/{rest}"));
            follow_links(root, &next, out, depth + 1);
            return;
        }
    }
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

/// `fsutil.types.Stat`.
fn encode_stat(s: &Stat) -> Vec<u8> {
    let mut m = Vec::with_capacity(s.path.len() + s.linkname.len() + 32);
    put_bytes(&mut m, 1, s.path.as_bytes());
    put_uint(&mut m, 2, u64::from(s.mode));
    // uid (3) and gid (4) are 0: not written.
    put_uint(&mut m, 5, s.size as u64);
    put_uint(&mut m, 6, s.mtime as u64);
    put_bytes(&mut m, 7, s.linkname.as_bytes());
    m
}

/// A `STAT` packet (type 0, not written).
fn stat_packet(s: &Stat) -> Vec<u8> {
    let stat = encode_stat(s);
    let mut m = Vec::with_capacity(stat.len() + 4);
    put_varint(&mut m, 2 << 3 | 2);
    put_varint(&mut m, stat.len() as u64);
    m.extend_from_slice(&stat);
    m
}

fn packet(kind: u64, id: u32, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(data.len() + 12);
    put_uint(&mut m, 1, kind);
    put_uint(&mut m, 3, u64::from(id));
    put_bytes(&mut m, 4, data);
    m
}

/// A packet's type, id and data.
fn parse_packet(b: &[u8]) -> (u64, u32, Vec<u8>) {
    let (mut kind, mut id, mut data) = (PACKET_STAT, 0u32, Vec::new());
    for f in fields(b) {
        match f {
            (1, Value::Varint(v)) => kind = v,
            (3, Value::Varint(v)) => id = v as u32,
            (4, Value::Bytes(d)) => data = d.to_vec(),
            _ => {}
        }
    }
    (kind, id, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_go() {
        let glob = |p: &str, n: &str| Glob::new(p).is_ok_and(|g| g.is_match(n));
        assert!(glob("Dockerfile", "Dockerfile"));
        assert!(!glob("Dockerfile", "dockerfile"));
        assert!(glob("*.py", "train.py"));
        assert!(!glob("*.py", "a/train.py"));
        assert!(glob("a/*/c", "a/b/c"));
        assert!(glob("?ockerfile", "Dockerfile"));
        assert!(glob("[A-Z]ocker[^x]ile", "Dockerfile"));
        assert!(!glob("[a-z]ockerfile", "Dockerfile"));
        assert!(glob("a\\*b", "a*b"));
        assert!(!glob("a\\*b", "axb"));
        assert!(!glob("[", "a"));
        // Two stars are two stars in Go (no directories crossed), unlike `.dockerignore`'s.
        assert!(glob("a/**", "a/b"));
        assert!(!glob("a/**", "a/b/c"));
        // A `]` first in a class is Go's ErrBadPattern: it matches nothing.
        assert!(!glob("[]a]", "a"));
    }

    #[test]
    fn include_prefixes_keep_parents_of_what_is_wanted() {
        let m = |p: &str, n: &str| match_prefix(&prefixes(p), n);
        assert_eq!(m("src/app/main.py", "src"), Some(true));
        assert_eq!(m("src/app/main.py", "src/app"), Some(true));
        assert_eq!(m("src/app/main.py", "src/app/main.py"), Some(false));
        assert_eq!(m("src/app/main.py", "docs"), None);
        assert_eq!(m("src", "src/app"), None);
        assert_eq!(m("src/*/main.py", "src/x"), Some(true));
    }

    #[test]
    fn packets_encode_as_fsutil_reads_them() {
        let s = Stat {
            path: "a".into(),
            mode: GO_DIR | 0o755,
            size: 0,
            mtime: 1,
            linkname: String::new(),
        };
        // Packet{stat: Stat{path: "a", mode: 0x800001ed, modTime: 1}}
        assert_eq!(
            stat_packet(&s),
            [
                0x12, 0x0b, 0x0a, 0x01, b'a', 0x10, 0xed, 0x83, 0x80, 0x80, 0x08, 0x30, 0x01
            ]
        );
        assert_eq!(
            packet(PACKET_DATA, 3, b"hi"),
            [0x08, 2, 0x18, 3, 0x22, 2, b'h', b'i']
        );
        // The end of the stats and an end of file: nothing but the type.
        assert_eq!(packet(PACKET_STAT, 0, &[]), Vec::<u8>::new());
        assert_eq!(packet(PACKET_DATA, 0, &[]), [0x08, 2]);
        assert_eq!(
            parse_packet(&[0x08, 1, 0x18, 7]),
            (PACKET_REQ, 7, Vec::new())
        );
        assert_eq!(parse_packet(&[0x08, 3]).0, PACKET_FIN);
        assert_eq!(
            parse_packet(&[0x08, 4, 0x22, 2, b'n', b'o']),
            (PACKET_ERR, 0, b"no".to_vec())
        );
    }

    #[test]
    fn modes_are_gos() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fs::write(d.join("x"), "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(d.join("x"), fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink("x", d.join("l")).unwrap();
        let m = |p: &str| go_mode(&fs::symlink_metadata(d.join(p)).unwrap()).unwrap();
        assert_eq!(m("x"), GO_SETUID | 0o755);
        assert_eq!(m("l") & GO_SYMLINK, GO_SYMLINK);
        assert_eq!(go_mode(&fs::metadata(d).unwrap()).unwrap() & GO_DIR, GO_DIR);
    }

    fn walk(src: Source) -> Vec<(String, u32, String)> {
        let mut out = Vec::new();
        let mut w = Walker {
            source: &src,
            last_included_dir: None,
        };
        w.walk(&mut |s, _| {
            out.push((s.path.clone(), s.mode, s.linkname.clone()));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn the_walk_excludes_includes_and_links_like_fsutil() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for dir in ["a", "a.b", "empty", "logs/keep"] {
            fs::create_dir_all(d.join(dir)).unwrap();
        }
        for f in [
            "Dockerfile",
            ".dockerignore",
            "a/x",
            "a.b/y",
            "logs/z",
            "logs/keep/k",
        ] {
            fs::write(d.join(f), f).unwrap();
        }
        fs::hard_link(d.join("a/x"), d.join("a/x2")).unwrap();
        std::os::unix::fs::symlink("a/x", d.join("link")).unwrap();
        let excludes = Matcher::new(["Dockerfile", ".dockerignore", "logs", "!logs/keep"]).ok();
        let all = walk(Source {
            root: d.to_path_buf(),
            only: None,
            excludes,
            includes: None,
        });
        let paths: Vec<&str> = all.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "a",
                "a/x",
                "a/x2",
                "a.b",
                "a.b/y",
                "empty",
                "link",
                "logs",
                "logs/keep",
                "logs/keep/k"
            ]
        );
        assert_eq!(all[2].2, "a/x", "a hard link names the first path");
        assert_eq!(all[6].2, "a/x", "a symlink names its target");

        let only = walk(Source {
            root: d.to_path_buf(),
            only: None,
            excludes: None,
            includes: Includes::new(d, None, Some(vec!["link".into()])),
        });
        let paths: Vec<&str> = only.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["a", "a/x", "link"],
            "a followed link brings its target"
        );

        let df = walk(Source {
            root: d.to_path_buf(),
            only: Some("Dockerfile".into()),
            excludes: None,
            includes: Includes::new(
                d,
                None,
                Some(vec!["Dockerfile".into(), "dockerfile".into()]),
            ),
        });
        assert_eq!(df.len(), 1);
        assert_eq!(df[0].0, "Dockerfile");
    }
}
