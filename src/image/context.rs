//! The build context: which files are sent (`.dockerignore`, see [`super::dockerignore`]) and
//! the tar stream that carries them, produced while it is being sent.
//!
//! The tar stream, entry by entry, in the order of a depth-first walk with each directory's
//! names sorted bytewise (Go's `filepath.WalkDir` order, so the same as `docker build`):
//!
//! * directories as directory entries (`name/`), regular files with their content, symlinks
//!   as symlinks (never followed, the target stored as written), a second path to an inode
//!   already sent as a hard link to the first, FIFOs as FIFOs; sockets and device nodes are
//!   left out;
//! * permission bits (with setuid/setgid/sticky) as on disk, owner and group `0:0` with no
//!   names — what the Docker CLI sends;
//! * each entry's own modification time (whole seconds), as the Docker CLI does. The classic
//!   builder's `COPY`/`ADD` cache keys hash contents and modes, not times, so this costs no
//!   cache hits; the reproducible *tag* ([`BuildContext::content_hash`]) ignores times.
//!
//! [`BuildContext::tar_stream`] writes the archive on a blocking thread into a channel of at
//! most [`STREAM_CHUNKS`] chunks of [`STREAM_CHUNK_SIZE`] bytes: memory stays bounded
//! whatever the size of the context, and nothing is read before the daemon asks for it.

use std::collections::HashMap;
use std::fs::{self, Metadata};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::dockerignore::{self, MatchInfo, Matcher};
use crate::error::{Error, Result};

/// Size of the chunks [`BuildContext::tar_stream`] yields.
pub const STREAM_CHUNK_SIZE: usize = 256 * 1024;
/// How many chunks may wait in the channel between the tar writer and the HTTP body.
pub const STREAM_CHUNKS: usize = 8;
/// The most read from a file at once while it is tarred.
const FILE_READ_SIZE: usize = 256 * 1024;

/// What kind of entry a context path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File,
    /// A symbolic link and its target, as stored in the link.
    Symlink(PathBuf),
    /// A hard link to a path sent earlier in the same context.
    HardLink(String),
    Fifo,
}

/// One entry of the context, in the order it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextEntry {
    /// Path relative to the context root, `/`-separated.
    pub path: String,
    pub kind: EntryKind,
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub mode: u32,
    /// Content size for files, 0 otherwise.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
}

/// A context directory with its `.dockerignore` and Dockerfile resolved.
#[derive(Debug, Clone)]
pub struct BuildContext {
    root: PathBuf,
    dockerfile: String,
    matcher: Matcher,
    /// The `.dockerignore` patterns as read, without the build-file exceptions.
    patterns: Vec<String>,
}

impl BuildContext {
    /// Every file below `dir`, nothing ignored and no Dockerfile: the tree `hvdctl cp` sends.
    pub(crate) fn plain(dir: &Path) -> BuildContext {
        BuildContext {
            root: dir.to_path_buf(),
            dockerfile: String::new(),
            matcher: Matcher::default(),
            patterns: Vec::new(),
        }
    }

    /// Opens `context_dir` for a build with `dockerfile` (relative to the context; usually
    /// `Dockerfile`). Reads `.dockerignore` if there is one. Errors (exit 2) if the directory
    /// or the Dockerfile is missing, the Dockerfile lies outside the context, or a pattern is
    /// malformed.
    pub fn open(context_dir: &Path, dockerfile: &str) -> Result<BuildContext> {
        let meta = fs::metadata(context_dir)
            .map_err(|e| Error::input(format!("build context {}: {e}", context_dir.display())))?;
        if !meta.is_dir() {
            return Err(Error::input(format!(
                "build context {} is not a directory",
                context_dir.display()
            )));
        }
        let dockerfile = dockerignore::clean(&dockerfile.replace('\\', "/"));
        if dockerfile.starts_with('/') || dockerfile == ".." || dockerfile.starts_with("../") {
            return Err(Error::input(format!(
                "the Dockerfile {dockerfile:?} must be a path inside the build context {}",
                context_dir.display()
            )));
        }
        // Like the Docker CLI: the default name falls back to a lowercase `dockerfile`.
        let dockerfile = if dockerfile == "Dockerfile"
            && !context_dir.join("Dockerfile").exists()
            && context_dir.join("dockerfile").is_file()
        {
            "dockerfile".to_string()
        } else {
            dockerfile
        };
        let df_path = context_dir.join(&dockerfile);
        match fs::metadata(&df_path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(Error::input(format!("{} is not a file", df_path.display())));
            }
            Err(e) => {
                return Err(
                    Error::input(format!("Dockerfile {}: {e}", df_path.display()))
                        .hint("pass the Dockerfile's path relative to the build context"),
                );
            }
        }
        let ignore_path = context_dir.join(".dockerignore");
        let mut patterns = match crate::files::read(&ignore_path, crate::files::IGNORE_FILE) {
            Ok(bytes) => dockerignore::parse(&String::from_utf8_lossy(&bytes)),
            Err(crate::files::Refused::Missing) => Vec::new(),
            Err(r) => return Err(r.error(&ignore_path, crate::files::IGNORE_FILE)),
        };
        // hvdctl's own state (runs, the last build), wherever an app sits in the context: it
        // changes with every build and deploy, and would otherwise bust `COPY .`'s cache and
        // change the content tag each time. Never part of an image, whatever the file says.
        patterns.push(format!("**/{}", crate::state::DIR));
        let matcher = Matcher::for_build(&patterns, &dockerfile)
            .map_err(|e| Error::input(format!("{}: {e}", ignore_path.display())))?;
        Ok(BuildContext {
            root: context_dir.to_path_buf(),
            dockerfile,
            matcher,
            patterns,
        })
    }

    /// The context directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Dockerfile, relative to the context, cleaned and `/`-separated.
    pub fn dockerfile(&self) -> &str {
        &self.dockerfile
    }

    /// The `.dockerignore` patterns as written (cleaned) and hvdctl's state directory, without
    /// the exceptions that keep the Dockerfile and `.dockerignore` in the tar context: what
    /// BuildKit excludes.
    pub fn ignore_patterns(&self) -> &[String] {
        &self.patterns
    }

    /// The matcher in use (the `.dockerignore` patterns plus the build-file exceptions).
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// Visits every entry that is sent, in tar order. Stops at the first error (an unreadable
    /// directory or file that is not excluded is an error, as with `docker build`).
    pub fn walk(&self, visit: &mut dyn FnMut(&ContextEntry, &Path) -> Result<()>) -> Result<()> {
        let tree = Tree {
            root: &self.root,
            excludes: Some(&self.matcher),
            only: None,
        };
        tree.walk(&mut |mut node| {
            if node.excluded {
                // Docker sends nothing excluded, but looks inside a directory an exception
                // (`!dir/keep`) may bring back a part of.
                return Ok(if node.reach_in {
                    Step::Through
                } else {
                    Step::Skip
                });
            }
            match node.entry()? {
                Some(entry) => {
                    visit(&entry, node.full)?;
                    Ok(Step::Take)
                }
                None => Ok(Step::Skip),
            }
        })?;
        Ok(())
    }

    /// Every entry that would be sent, in order (for tests and `--dry-run`).
    pub fn entries(&self) -> Result<Vec<ContextEntry>> {
        let mut out = Vec::new();
        self.walk(&mut |e, _| {
            out.push(e.clone());
            Ok(())
        })?;
        Ok(out)
    }

    /// The paths that would be sent, in order; directories end with `/`.
    pub fn files(&self) -> Result<Vec<String>> {
        Ok(self
            .entries()?
            .into_iter()
            .map(|e| {
                if e.kind == EntryKind::Dir {
                    format!("{}/", e.path)
                } else {
                    e.path
                }
            })
            .collect())
    }

    /// Writes the whole context as an uncompressed tar archive to `out`; returns the number
    /// of bytes written.
    pub fn write_tar<W: Write>(&self, out: W) -> Result<u64> {
        let mut counter = CountingWriter {
            inner: out,
            count: 0,
        };
        let mut tar = tar::Builder::new(&mut counter);
        let mut buf = vec![0u8; FILE_READ_SIZE];
        self.walk(&mut |entry, full| append_entry(&mut tar, entry, full, &mut buf))?;
        tar.finish()
            .map_err(|e| Error::failure(format!("writing the context archive: {e}")))?;
        drop(tar);
        Ok(counter.count)
    }

    /// The context as a stream of tar chunks, written on a blocking thread while the stream
    /// is consumed (at most [`STREAM_CHUNKS`] × [`STREAM_CHUNK_SIZE`] bytes buffered).
    /// Must be called inside a Tokio runtime. An error while reading the context ends the
    /// stream with an `io::Error` and is also kept in [`TarStream::error`] for a clear report.
    pub fn tar_stream(&self) -> TarStream {
        let ctx = self.clone();
        tar_stream(move |out| ctx.write_tar(out))
    }

    /// A digest of what would be sent (paths, kinds, modes, file contents, link targets;
    /// not times or owners): the same source always gives the same hash. Lowercase hex SHA-256.
    pub fn content_hash(&self) -> Result<String> {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        self.walk(&mut |entry, full| {
            let (tag, extra): (&[u8], Vec<u8>) = match &entry.kind {
                EntryKind::Dir => (b"d", Vec::new()),
                EntryKind::File => (b"f", Vec::new()),
                EntryKind::Symlink(t) => (b"l", t.as_os_str().as_bytes().to_vec()),
                EntryKind::HardLink(t) => (b"h", t.as_bytes().to_vec()),
                EntryKind::Fifo => (b"p", Vec::new()),
            };
            hasher.update(tag);
            hasher.update((entry.path.len() as u64).to_le_bytes());
            hasher.update(entry.path.as_bytes());
            hasher.update(entry.mode.to_le_bytes());
            hasher.update((extra.len() as u64).to_le_bytes());
            hasher.update(&extra);
            if entry.kind == EntryKind::File {
                hasher.update(entry.size.to_le_bytes());
                let mut f = crate::files::open_io(full)
                    .map_err(|e| Error::failure(format!("reading {}: {e}", full.display())))?;
                loop {
                    let n = f
                        .read(&mut buf)
                        .map_err(|e| Error::failure(format!("reading {}: {e}", full.display())))?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
            }
            Ok(())
        })?;
        Ok(hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }
}

pub(crate) fn entry_for(
    full: &Path,
    path: String,
    meta: &Metadata,
    links: &mut HashMap<(u64, u64), String>,
) -> Result<Option<ContextEntry>> {
    let ft = meta.file_type();
    let mode = meta.mode() & 0o7777;
    let mtime = meta.mtime();
    let mut size = 0;
    let kind = if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_symlink() {
        let target = fs::read_link(full)
            .map_err(|e| Error::failure(format!("reading link {}: {e}", full.display())))?;
        EntryKind::Symlink(target)
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = links.get(&key) {
                return Ok(Some(ContextEntry {
                    path,
                    kind: EntryKind::HardLink(first.clone()),
                    mode,
                    size: 0,
                    mtime,
                }));
            }
            links.insert(key, path.clone());
        }
        // Fail early, like `docker build`, on a file that cannot be read.
        crate::files::open_io(full)
            .map_err(|e| Error::failure(format!("can't read {}: {e}", full.display())))?;
        size = meta.len();
        EntryKind::File
    } else if ft.is_fifo() {
        EntryKind::Fifo
    } else {
        return Ok(None);
    };
    Ok(Some(ContextEntry {
        path,
        kind,
        mode,
        size,
        mtime,
    }))
}

pub(crate) fn append_entry<W: Write>(
    tar: &mut tar::Builder<W>,
    entry: &ContextEntry,
    full: &Path,
    buf: &mut [u8],
) -> Result<()> {
    let fail = |e: io::Error| Error::failure(format!("adding {} to the context: {e}", entry.path));
    let mut header = tar::Header::new_gnu();
    header.set_mode(entry.mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(entry.mtime.max(0) as u64);
    header.set_size(0);
    match &entry.kind {
        EntryKind::Dir => {
            header.set_entry_type(tar::EntryType::Directory);
            tar.append_data(&mut header, format!("{}/", entry.path), io::empty())
                .map_err(fail)
        }
        EntryKind::File => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(entry.size);
            let mut file = crate::files::open_io(full).map_err(fail)?;
            // `tar` writes the header (and a GNU long-name entry when the path needs one);
            // the content follows here, read in pieces of up to `buf.len()` bytes, where
            // `tar` would copy through an 8 KiB buffer (a 1 GiB context: 4,096 reads
            // instead of 131,072, and no extra copy).
            tar.append_data(&mut header, &entry.path, io::empty())
                .map_err(fail)?;
            let out = tar.get_mut();
            let mut left = entry.size;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = match file.read(&mut buf[..want]) {
                    Ok(0) => {
                        return Err(fail(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the file shrank while it was being sent",
                        )));
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(fail(e)),
                };
                out.write_all(&buf[..n]).map_err(fail)?;
                left -= n as u64;
            }
            // Padding to the next 512-byte block (growth of the file is not sent).
            let pad = (512 - entry.size % 512) % 512;
            out.write_all(&[0u8; 512][..pad as usize]).map_err(fail)
        }
        EntryKind::Symlink(target) => {
            header.set_entry_type(tar::EntryType::Symlink);
            tar.append_link(&mut header, &entry.path, target)
                .map_err(fail)
        }
        EntryKind::HardLink(target) => {
            header.set_entry_type(tar::EntryType::Link);
            tar.append_link(&mut header, &entry.path, target)
                .map_err(fail)
        }
        EntryKind::Fifo => {
            header.set_entry_type(tar::EntryType::Fifo);
            tar.append_data(&mut header, &entry.path, io::empty())
                .map_err(fail)
        }
    }
}

/// A tar archive written by `write` on a blocking thread into a channel of at most
/// [`STREAM_CHUNKS`] chunks of [`STREAM_CHUNK_SIZE`] bytes, as a stream consumed while it is
/// written (the build context, `hvdctl cp`'s uploads). Must be called inside a Tokio runtime.
/// An error ends the stream with an `io::Error` and is kept in [`TarStream::error`].
pub(crate) fn tar_stream(
    write: impl FnOnce(&mut dyn Write) -> Result<u64> + Send + 'static,
) -> TarStream {
    let (tx, rx) = mpsc::channel(STREAM_CHUNKS);
    let error = Arc::new(Mutex::new(None));
    let err_slot = error.clone();
    tokio::task::spawn_blocking(move || {
        let mut writer = ChannelWriter {
            tx: tx.clone(),
            buf: BytesMut::with_capacity(STREAM_CHUNK_SIZE),
        };
        let result = write(&mut writer).and_then(|_| {
            writer
                .send_buffered()
                .map_err(|e| Error::failure(format!("sending: {e}")))
        });
        if let Err(e) = result {
            // A closed receiver means the consumer stopped reading: nothing to report.
            if !tx.is_closed() {
                let msg = e.message.clone();
                *err_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                let _ = tx.blocking_send(Err(io::Error::other(msg)));
            }
        }
    });
    TarStream { rx, error }
}

struct CountingWriter<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Collects writes into chunks and hands them to the channel, blocking while it is full.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: BytesMut,
}

impl ChannelWriter {
    fn send_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.buf.reserve(STREAM_CHUNK_SIZE);
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the receiver went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = STREAM_CHUNK_SIZE - self.buf.len();
        let n = buf.len().min(room);
        self.buf.extend_from_slice(&buf[..n]);
        if self.buf.len() >= STREAM_CHUNK_SIZE {
            self.send_buffered()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The tar stream of a context; see [`BuildContext::tar_stream`].
pub struct TarStream {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    error: Arc<Mutex<Option<Error>>>,
}

impl TarStream {
    /// A handle on the error that ended the stream early, if any (readable after the stream
    /// has been consumed or dropped).
    pub fn error_slot(&self) -> Arc<Mutex<Option<Error>>> {
        self.error.clone()
    }

    /// Takes the error that ended the stream early, if any.
    pub fn error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Stream for TarStream {
    type Item = io::Result<Bytes>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// The names in `dir`, sorted bytewise (the order Docker's and BuildKit's walks use).
pub(crate) fn sorted_names(dir: &Path) -> Result<Vec<std::ffi::OsString>> {
    let failed =
        |e: std::io::Error| Error::failure(format!("reading directory {}: {e}", dir.display()));
    let mut names = fs::read_dir(dir)
        .map_err(failed)?
        .map(|e| e.map(|e| e.file_name()).map_err(failed))
        .collect::<Result<Vec<_>>>()?;
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// What the visitor of a [`Tree`] walk does with the entry it is shown.
pub(crate) enum Step {
    /// Sent: visited, and entered when it is a directory.
    Take,
    /// Not sent, but entered (an excluded directory an exception may reach into).
    Through,
    /// Neither sent nor entered.
    Skip,
    /// The walk ends here.
    Stop,
}

/// One entry met by a [`Tree`] walk.
pub(crate) struct Node<'a> {
    /// Relative to the walk's root, `/`-separated.
    pub path: &'a str,
    pub full: &'a Path,
    /// Its own metadata (a link's, not its target's), but the top `only` name's is followed.
    pub meta: &'a Metadata,
    /// Excluded by the walk's matcher.
    pub excluded: bool,
    /// An excluded directory that an exception of the matcher may reach into.
    pub reach_in: bool,
    links: &'a mut HashMap<(u64, u64), String>,
}

impl Node<'_> {
    /// The entry as sent (see [`entry_for`]); call it only for an entry that is sent, since a
    /// file's first name is what its later names link to.
    pub fn entry(&mut self) -> Result<Option<ContextEntry>> {
        entry_for(self.full, self.path.to_string(), self.meta, self.links)
    }
}

/// The one walk of a directory sent to a builder, shared by the tar context and BuildKit's
/// file sync: each directory's names in byte order, depth first (Go's `filepath.WalkDir`),
/// the matcher's verdict carried from a directory to what it holds, a file's names tracked
/// so that a second one is a hard link. What is sent is the visitor's to say.
pub(crate) struct Tree<'a> {
    pub root: &'a Path,
    pub excludes: Option<&'a Matcher>,
    /// The one name walked at the top (followed if it is a link): a Dockerfile's directory.
    pub only: Option<&'a str>,
}

impl Tree<'_> {
    /// Shows `visit` every entry in order; `Ok(false)` when it said [`Step::Stop`].
    pub fn walk(&self, visit: &mut dyn FnMut(Node<'_>) -> Result<Step>) -> Result<bool> {
        self.dir(self.root, "", None, &mut HashMap::new(), visit)
    }

    fn dir(
        &self,
        dir: &Path,
        rel: &str,
        parent: Option<&MatchInfo>,
        links: &mut HashMap<(u64, u64), String>,
        visit: &mut dyn FnMut(Node<'_>) -> Result<Step>,
    ) -> Result<bool> {
        let top = rel.is_empty();
        for os_name in sorted_names(dir)? {
            let name = os_name.to_string_lossy();
            if top && self.only.is_some_and(|only| only != name) {
                continue;
            }
            let full = dir.join(&os_name);
            let path = if top {
                name.into_owned()
            } else {
                format!("{rel}/{name}")
            };
            let meta = if top && self.only.is_some() {
                fs::metadata(&full)
            } else {
                fs::symlink_metadata(&full)
            };
            let meta = match meta {
                Ok(m) => m,
                // Gone since the directory was read: not there to send.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(Error::failure(format!(
                        "can't stat {}: {e}",
                        full.display()
                    )));
                }
            };
            let is_dir = meta.is_dir();
            let (excluded, info) = match self.excludes {
                Some(m) => m.walk_match(&path, parent),
                None => (false, MatchInfo::default()),
            };
            let reach_in = excluded
                && is_dir
                && self
                    .excludes
                    .is_some_and(|m| m.has_exceptions() && m.exception_may_reach_into(&path));
            let node = Node {
                path: &path,
                full: &full,
                meta: &meta,
                excluded,
                reach_in,
                links,
            };
            match visit(node)? {
                Step::Stop => return Ok(false),
                Step::Skip => {}
                Step::Take | Step::Through => {
                    if is_dir && !self.dir(&full, &path, Some(&info), links, visit)? {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }
}
