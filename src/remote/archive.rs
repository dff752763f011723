//! The tar streams of `hvdctl cp`, never held whole in memory.
//!
//! * [`pack`]: a local file or directory as a tar stream whose top entry has the name the
//!   copy gets, written on a blocking thread while it is sent (the build context's writer,
//!   [`crate::image::context`]: the same entries, modes, times and links as `docker build`
//!   sends, nothing ignored).
//! * [`unpack`]: a tar stream read while it arrives, its top entry renamed, written below one
//!   directory. Paths that would leave it (`..`, absolute names, links followed out) are
//!   refused; permission bits are kept (a 0600 file stays 0600), directories get theirs once
//!   their contents are written; owners are not (whoever runs hvdctl owns the copy).

use crate::error::{Error, Result};
use crate::image::context::{self, BuildContext, EntryKind, TarStream};
use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use tokio::io::AsyncRead;

/// What a copy moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Entries (files, directories, links).
    pub entries: u64,
    /// Bytes of file contents.
    pub bytes: u64,
}

/// A local tree on its way out.
pub struct Packed {
    pub stream: TarStream,
    /// What it holds (counted before sending, for the progress bar and the summary).
    pub size: Copied,
}

/// `src` (a file, directory, or link — not followed) as a tar stream whose top entry is
/// called `name`. A source that does not exist is "not found" (exit 1).
pub fn pack(src: &Path, name: &str) -> Result<Packed> {
    let meta = fs::symlink_metadata(src)
        .map_err(|e| Error::not_found(format!("local path {}: {e}", src.display())))?;
    let mut size = Copied {
        entries: 1,
        bytes: if meta.is_file() { meta.len() } else { 0 },
    };
    if meta.is_dir() {
        BuildContext::plain(src).walk(&mut |e, _| {
            size.entries += 1;
            size.bytes += e.size;
            Ok(())
        })?;
    }
    let (src, name) = (src.to_path_buf(), name.to_string());
    let stream = context::tar_stream(move |out| write_tree(&src, &name, out));
    Ok(Packed { stream, size })
}

fn write_tree(src: &Path, name: &str, out: &mut dyn io::Write) -> Result<u64> {
    let fail = |e: io::Error| Error::failure(format!("sending {}: {e}", src.display()));
    let mut tar = tar::Builder::new(out);
    let mut buf = vec![0u8; 256 * 1024];
    let meta = fs::symlink_metadata(src).map_err(fail)?;
    let top = context::entry_for(src, name.to_string(), &meta, &mut HashMap::new())?.ok_or_else(
        || {
            Error::input(format!(
                "{}: sockets and device files cannot be copied",
                src.display()
            ))
        },
    )?;
    context::append_entry(&mut tar, &top, src, &mut buf)?;
    if meta.is_dir() {
        BuildContext::plain(src).walk(&mut |e, full| {
            let mut e = e.clone();
            e.path = format!("{name}/{}", e.path);
            if let EntryKind::HardLink(t) = &mut e.kind {
                *t = format!("{name}/{t}");
            }
            context::append_entry(&mut tar, &e, full, &mut buf)
        })?;
    }
    tar.finish().map_err(fail)?;
    Ok(0)
}

/// Counts what passes through a reader (for the progress bar).
struct Counting<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// Reads a tar stream from `input` as it arrives and writes it below `dir`, its top entry
/// (the first path component of every entry) renamed to `name`. `bar` counts the bytes
/// read. Returns what was written; an archive with no entry gives zero entries (the caller
/// decides whether that is an error).
pub async fn unpack(
    input: impl AsyncRead + Send + Unpin + 'static,
    dir: PathBuf,
    name: String,
    bar: indicatif::ProgressBar,
) -> Result<Copied> {
    tokio::task::spawn_blocking(move || {
        let reader = Counting {
            inner: tokio_util::io::SyncIoBridge::new(input),
            bar,
        };
        unpack_blocking(reader, &dir, &name)
    })
    .await
    .map_err(|e| Error::failure(format!("unpacking: {e}")))?
}

fn unpack_blocking(reader: impl Read, dir: &Path, name: &str) -> Result<Copied> {
    let root = fs::canonicalize(dir)
        .map_err(|e| Error::failure(format!("local directory {}: {e}", dir.display())))?;
    let mut archive = tar::Archive::new(reader);
    let mut copied = Copied::default();
    // Directory modes are set last: a 0555 directory must still take its files.
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    let entries = archive
        .entries()
        .map_err(|e| Error::failure(format!("reading the archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| Error::failure(format!("reading the archive: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| Error::failure(format!("reading the archive: {e}")))?
            .into_owned();
        let Some(rel) = renamed(&path, name)? else {
            continue;
        };
        let target = root.join(&rel);
        let shown = target.display().to_string();
        let fail = |e: io::Error| Error::failure(format!("writing {shown}: {e}"));
        let parent = target.parent().unwrap_or(&root);
        fs::create_dir_all(parent).map_err(fail)?;
        // A link unpacked earlier must not lead outside the destination.
        let real = fs::canonicalize(parent).map_err(fail)?;
        if !real.starts_with(&root) {
            return Err(Error::failure(format!(
                "the archive writes {} outside {} through a link: refused",
                path.display(),
                root.display()
            )));
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            if target.exists() && !target.is_dir() {
                return Err(Error::failure(format!(
                    "cannot copy a directory over the file {shown}"
                )));
            }
            fs::create_dir_all(&target).map_err(fail)?;
            dirs.push((target, mode));
        } else if kind.is_hard_link() {
            let link = entry
                .link_name()
                .map_err(|e| Error::failure(format!("reading the archive: {e}")))?
                .ok_or_else(|| Error::failure(format!("hard link {shown} without a target")))?;
            let Some(to) = renamed(&link, name)? else {
                continue;
            };
            let _ = fs::remove_file(&target);
            fs::hard_link(root.join(to), &target).map_err(fail)?;
        } else {
            if target.is_dir() {
                return Err(Error::failure(format!(
                    "cannot copy a file over the directory {shown}"
                )));
            }
            copied.bytes += entry.size();
            entry.unpack(&target).map_err(fail)?;
        }
        copied.entries += 1;
    }
    for (d, mode) in dirs.iter().rev() {
        fs::set_permissions(d, fs::Permissions::from_mode(*mode))
            .map_err(|e| Error::failure(format!("setting the mode of {}: {e}", d.display())))?;
    }
    Ok(copied)
}

/// An archive path with its first component replaced by `name`; `None` for the archive's
/// `./` entry. Absolute paths and `..` are refused.
fn renamed(path: &Path, name: &str) -> Result<Option<PathBuf>> {
    let mut parts = path.components().filter(|c| *c != Component::CurDir);
    if parts.clone().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Error::failure(format!(
            "the archive holds {}, a path outside the destination: refused",
            path.display()
        )));
    }
    if parts.next().is_none() {
        return Ok(None);
    }
    let mut out = PathBuf::from(name);
    out.extend(parts);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use std::os::unix::fs::MetadataExt;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// A tree packed under a new name and unpacked elsewhere under another: contents, modes
    /// (a 0600 file, a 0700 and a 0555 directory), a symlink and a hard link survive.
    #[tokio::test]
    async fn a_tree_round_trips_with_modes_and_links() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("sub/ro")).unwrap();
        fs::write(src.join("secret"), "s3cret\n").unwrap();
        fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(src.join("sub/big"), vec![7u8; 700_000]).unwrap();
        fs::write(src.join("sub/ro/f"), "f").unwrap();
        fs::hard_link(src.join("sub/big"), src.join("sub/big2")).unwrap();
        std::os::unix::fs::symlink("../secret", src.join("sub/link")).unwrap();
        fs::set_permissions(src.join("sub"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(src.join("sub/ro"), fs::Permissions::from_mode(0o555)).unwrap();

        let packed = pack(&src, "renamed").unwrap();
        // The hard link's content is sent once.
        assert_eq!(packed.size.bytes, 7 + 700_000 + 1);
        let reader = tokio_util::io::StreamReader::new(packed.stream.map_err(io::Error::other));
        let out = tmp.path().join("out");
        fs::create_dir(&out).unwrap();
        let bar = indicatif::ProgressBar::hidden();
        let got = unpack(reader, out.clone(), "copy".into(), bar.clone())
            .await
            .unwrap();
        assert!(bar.position() > 700_000);
        let c = out.join("copy");
        assert_eq!(fs::read_to_string(c.join("secret")).unwrap(), "s3cret\n");
        assert_eq!(mode(&c.join("secret")), 0o600);
        assert_eq!(mode(&c.join("sub")), 0o700);
        assert_eq!(mode(&c.join("sub/ro")), 0o555);
        assert_eq!(fs::read(c.join("sub/big")).unwrap().len(), 700_000);
        assert_eq!(
            fs::metadata(c.join("sub/big")).unwrap().ino(),
            fs::metadata(c.join("sub/big2")).unwrap().ino()
        );
        assert_eq!(
            fs::read_link(c.join("sub/link")).unwrap(),
            Path::new("../secret")
        );
        assert_eq!(got.entries, 8);
        fs::set_permissions(c.join("sub/ro"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[tokio::test]
    async fn a_file_is_packed_under_its_new_name() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("a"), "x").unwrap();
        let packed = pack(&tmp.path().join("a"), "b").unwrap();
        let reader = tokio_util::io::StreamReader::new(packed.stream.map_err(io::Error::other));
        let got = unpack(
            reader,
            tmp.path().into(),
            "c".into(),
            indicatif::ProgressBar::hidden(),
        )
        .await
        .unwrap();
        assert_eq!(
            got,
            Copied {
                entries: 1,
                bytes: 1
            }
        );
        assert_eq!(fs::read_to_string(tmp.path().join("c")).unwrap(), "x");
        let e = pack(&tmp.path().join("missing"), "m").err().unwrap();
        assert_eq!(e.kind, crate::error::Kind::NotFound);
    }

    #[test]
    fn paths_leaving_the_destination_are_refused() {
        assert_eq!(
            renamed(Path::new("out/a/b"), "x").unwrap(),
            Some(PathBuf::from("x/a/b"))
        );
        assert_eq!(renamed(Path::new("./"), "x").unwrap(), None);
        assert!(renamed(Path::new("out/../../etc"), "x").is_err());
        assert!(renamed(Path::new("/etc/passwd"), "x").is_err());
    }
}
