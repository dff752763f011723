//! The one way hvdctl reads a file that a user or a tool can put in its way: `hvdctl.yaml`,
//! a `k8s/*.yaml.hbs` template, a kubeconfig, `.hvdctl/` state, the Docker config, a
//! `.dockerignore`, a build secret, a `--template-dir` catalog, a flight record.
//!
//! [`open`] never blocks: the file is opened with `O_NONBLOCK` (a FIFO with no writer would
//! otherwise hang the open forever) and then must be a regular file by `fstat` of the opened
//! descriptor — a FIFO, a device (a symlink to `/dev/zero`), a socket or a directory is bad
//! input naming the path and what it is. [`read`] then reads at most its [`Kind`]'s cap: a
//! larger file is refused naming the path and the limit, after reading no more than the cap.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file is for, and the most of it that is ever read.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// The file for people: "the app file", "a manifest template".
    pub what: &'static str,
    /// The most bytes read.
    pub max: u64,
    /// What such a file usually is, said when one is over the cap.
    pub usual: &'static str,
}

/// A Horovod timeline copied out of a run: read as a stream, never whole.
pub const TIMELINE: Kind = Kind {
    what: "a Horovod timeline",
    max: u64::MAX,
    usual: "",
};
/// `hvdctl.yaml`.
pub const APP_FILE: Kind = Kind {
    what: "the app file",
    max: 128 << 10,
    usual: "an app file is a few KiB of YAML",
};
/// An app's `k8s/<backend>.yaml.hbs`.
pub const TEMPLATE: Kind = Kind {
    what: "a manifest template",
    max: 1 << 20,
    usual: "a manifest template is a few KiB",
};
/// A kubeconfig (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`).
pub const KUBECONFIG: Kind = Kind {
    what: "a kubeconfig",
    max: 16 << 20,
    usual: "a kubeconfig is a few KiB per cluster",
};
/// A file a kubeconfig names (a CA, a client certificate or key).
pub const KUBECONFIG_FILE: Kind = Kind {
    what: "a certificate or key file",
    max: 1 << 20,
    usual: "a PEM certificate or key is a few KiB",
};
/// hvdctl's own state in `.hvdctl/` (`image.json`, `runs.json`, a flight record's JSON).
pub const STATE: Kind = Kind {
    what: "a state file of hvdctl",
    max: 4 << 20,
    usual: "hvdctl's state files are a few KiB",
};
/// The Docker config (`config.json`).
pub const DOCKER_CONFIG: Kind = Kind {
    what: "the Docker config",
    max: 4 << 20,
    usual: "a Docker config is a few KiB",
};
/// A `.dockerignore`.
pub const IGNORE_FILE: Kind = Kind {
    what: "a .dockerignore",
    max: 1 << 20,
    usual: "a .dockerignore is a few lines",
};
/// A build secret (`--secret id=…,src=FILE`), BuildKit's own limit.
pub const BUILD_SECRET: Kind = Kind {
    what: "a build secret",
    max: 500 << 10,
    usual: "BuildKit takes secrets up to 500 KiB",
};
/// A file of a `--template-dir` catalog, or one `init` finds in its way.
pub const CATALOG_FILE: Kind = Kind {
    what: "a template file",
    max: 16 << 20,
    usual: "an app template's files are source and configuration",
};

/// A size for people: `128 KiB`, `16 MiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Why a file was not read.
#[derive(Debug)]
pub enum Refused {
    /// Nothing at the path.
    Missing,
    /// Not a regular file: what it is ("a FIFO (named pipe)", "a directory").
    NotAFile(&'static str),
    /// Over its kind's cap.
    TooLarge,
    /// The open or read failed.
    Io(std::io::Error),
}

impl Refused {
    /// The error for people: the path, what went wrong and, when over the cap, the limit.
    /// Bad input (exit 2), except an I/O failure, which is a failure (exit 1).
    pub fn error(self, path: &Path, kind: Kind) -> Error {
        let p = path.display();
        match self {
            Refused::Missing => Error::input(format!("{p}: no such file")),
            Refused::NotAFile(what) => Error::input(format!(
                "{p} is {what}, not a regular file: {} is read only from a file",
                kind.what
            )),
            Refused::TooLarge => Error::input(format!(
                "{p}: larger than {}; {}, so this one is not read",
                size(kind.max),
                kind.usual
            )),
            Refused::Io(e) => Error::failure(format!("cannot read {p}: {e}")).caused_by(e),
        }
    }

    /// [`Refused::error`] where the file is the user's own input (the app file, a kubeconfig):
    /// one that cannot be read either is bad input too (exit 2), as it always was.
    pub fn input_error(self, path: &Path, kind: Kind) -> Error {
        let mut e = self.error(path, kind);
        e.kind = crate::error::Kind::Input;
        e
    }
}

/// What a file type is, for people; `None` for a regular file.
fn not_regular(ft: std::fs::FileType) -> Option<&'static str> {
    if ft.is_file() {
        None
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` for reading without ever blocking, and only when it is a regular file (by
/// `fstat` of what was opened, so a file swapped after a check is still caught).
pub fn open(path: &Path) -> Result<File, Refused> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Refused::Missing,
            _ => Refused::Io(e),
        })?;
    let meta = f.metadata().map_err(Refused::Io)?;
    if let Some(what) = not_regular(meta.file_type()) {
        return Err(Refused::NotAFile(what));
    }
    // Back to blocking reads (no effect on a regular file, said for clarity).
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags != -1 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

/// [`open`] for a caller that streams the file (no cap) and speaks `std::io::Error`: a
/// refusal is an error saying what the path is instead ("is a FIFO (named pipe), not a
/// regular file"), a missing file `NotFound`.
pub fn open_io(path: &Path) -> std::io::Result<File> {
    open(path).map_err(|r| match r {
        Refused::Io(e) => e,
        Refused::Missing => std::io::ErrorKind::NotFound.into(),
        Refused::NotAFile(what) => std::io::Error::other(format!("is {what}, not a regular file")),
        Refused::TooLarge => std::io::Error::other("too large"),
    })
}

/// The bytes of `path`: a regular file of at most `kind.max` bytes (no more is read).
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, Refused> {
    let f = open(path)?;
    if f.metadata().is_ok_and(|m| m.len() > kind.max) {
        return Err(Refused::TooLarge);
    }
    let mut bytes = Vec::new();
    f.take(kind.max + 1)
        .read_to_end(&mut bytes)
        .map_err(Refused::Io)?;
    if bytes.len() as u64 > kind.max {
        return Err(Refused::TooLarge);
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text; text that is not is a failure to read naming the path.
pub fn read_text(path: &Path, kind: Kind) -> Result<String, Refused> {
    String::from_utf8(read(path, kind)?).map_err(|e| {
        Refused::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        ))
    })
}

/// [`read`], where a missing file is `None` and anything else refused is an error.
pub fn read_if_there(path: &Path, kind: Kind) -> Result<Option<Vec<u8>>> {
    match read(path, kind) {
        Ok(b) => Ok(Some(b)),
        Err(Refused::Missing) => Ok(None),
        Err(r) => Err(r.error(path, kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Kind = Kind {
        what: "a test file",
        max: 16,
        usual: "a test file is short",
    };

    #[test]
    fn a_regular_file_is_read_up_to_its_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, "0123456789abcdef").unwrap();
        assert_eq!(read(&p, SMALL).unwrap().len(), 16);
        std::fs::write(&p, "0123456789abcdefg").unwrap();
        let e = read(&p, SMALL).unwrap_err().error(&p, SMALL);
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.message,
            format!(
                "{}: larger than 16 bytes; a test file is short, so this one is not read",
                p.display()
            )
        );
        assert!(matches!(
            read(&tmp.path().join("none"), SMALL),
            Err(Refused::Missing)
        ));
        assert_eq!(
            read_if_there(&tmp.path().join("none"), SMALL).unwrap(),
            None
        );
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let zero = tmp.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (p, what) in [
            (fifo, "a FIFO (named pipe)"),
            (zero, "a character device"),
            (tmp.path().to_path_buf(), "a directory"),
        ] {
            let e = read(&p, SMALL).unwrap_err().error(&p, SMALL);
            assert_eq!(e.exit_code(), 2);
            assert_eq!(
                e.message,
                format!(
                    "{} is {what}, not a regular file: a test file is read only from a file",
                    p.display()
                )
            );
        }
    }

    #[test]
    fn sizes_read_for_people() {
        assert_eq!(size(128 << 10), "128 KiB");
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(500), "500 bytes");
    }
}
