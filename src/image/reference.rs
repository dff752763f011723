//! Image references, `[HOST[:PORT]/]PATH[:TAG][@DIGEST]`, read once for the app's `image`,
//! `build`, `push`, credentials and `doctor`, by the grammar of distribution's `reference`
//! package (what docker and the registries read):
//! - PATH: components of lowercase letters and digits, joined inside by `.`, `_`, `__` or
//!   dashes, separated by `/`;
//! - HOST: the first component when there is another and it holds a `.` or `:`, is
//!   `localhost`, or has an uppercase letter — DNS labels or a bracketed IPv6 address, and a
//!   port; without one the image is Docker Hub's (`docker.io`, official images under
//!   `library/`);
//! - TAG: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`; DIGEST: `ALGORITHM:HEX` (32 hex digits or more);
//! - the name (host and path) at most 255 characters.
//!
//! By hand rather than `oci-spec`'s `Reference`: that one fills in `latest` for a reference
//! without a tag, and hvdctl must know whether a tag was given (the default tag names the
//! source, see [`super::tag`]).

use std::fmt;

/// Docker Hub's registry name, and the names that mean it.
pub const DOCKER_HUB: &str = "docker.io";
const HUB_ALIASES: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];
/// Where Docker Hub's registry API answers.
const HUB_API: &str = "registry-1.docker.io";
const NAME_MAX: usize = 255;

/// A parsed image reference; the parts as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The registry host (and port) as written; `None`: Docker Hub's short form.
    host: Option<String>,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

/// Why a text is not an image reference, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefError(pub String);

impl fmt::Display for RefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RefError {}

impl ImageRef {
    pub fn parse(text: &str) -> Result<ImageRef, RefError> {
        let bad = |why: String| Err(RefError(why));
        if text.is_empty() {
            return bad("it is empty".into());
        }
        let (name_tag, digest) = match text.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (text, None),
        };
        if let Some(d) = digest
            && !is_digest(d)
        {
            return bad(format!(
                "{d:?} is not a digest (ALGORITHM:HEX, e.g. sha256: and 64 hex digits)"
            ));
        }
        let (name, tag) = split_tag(name_tag);
        if let Some(t) = tag {
            check_tag(t)?;
        }
        if name.len() > NAME_MAX {
            return bad(format!("the name is longer than {NAME_MAX} characters"));
        }
        let (host, path) = split_host(name);
        if let Some(h) = host
            && !is_host(h)
        {
            return bad(format!("{h:?} is not a valid registry host"));
        }
        for c in path.split('/') {
            if !is_path_component(c) {
                return bad(format!(
                    "{c:?}: path components are lowercase letters and digits, separated by '.', '_', '__' or '-'"
                ));
            }
        }
        Ok(ImageRef {
            host: host.map(str::to_string),
            path: path.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        })
    }

    /// The registry, Docker Hub's by any of its names as `docker.io`.
    pub fn registry(&self) -> &str {
        match &self.host {
            Some(h) if !is_docker_hub_host(h) => h,
            _ => DOCKER_HUB,
        }
    }

    pub fn is_docker_hub(&self) -> bool {
        self.registry() == DOCKER_HUB
    }

    /// Where the registry's API answers (`registry-1.docker.io` for Docker Hub).
    pub fn api_host(&self) -> &str {
        if self.is_docker_hub() {
            HUB_API
        } else {
            self.registry()
        }
    }

    /// The repository's path in the registry's API (`library/busybox` for `busybox`).
    pub fn api_path(&self) -> String {
        if self.is_docker_hub() && !self.path.contains('/') {
            format!("library/{}", self.path)
        } else {
            self.path.clone()
        }
    }

    /// The repository as written: the reference without tag or digest.
    pub fn repo(&self) -> String {
        match &self.host {
            Some(h) => format!("{h}/{}", self.path),
            None => self.path.clone(),
        }
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// What a registry is asked for: the digest, else the tag, else `latest`.
    pub fn reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }
}

/// Whether a registry host is one of Docker Hub's names.
pub fn is_docker_hub_host(host: &str) -> bool {
    HUB_ALIASES.contains(&host)
}

/// `repo:tag` → (`repo`, `Some("tag")`); a registry's port is not a tag. No other check.
pub fn split_tag(reference: &str) -> (&str, Option<&str>) {
    match reference.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
        _ => (reference, None),
    }
}

/// A tag as docker takes it.
pub fn check_tag(tag: &str) -> Result<(), RefError> {
    let b = tag.as_bytes();
    let word = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
    let ok = !b.is_empty()
        && b.len() <= 128
        && word(&b[0])
        && b[1..].iter().all(|c| word(c) || matches!(c, b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RefError(format!(
            "invalid image tag {tag:?}: use letters, digits, '_', '.' and '-' (not first), at most 128 characters"
        )))
    }
}

/// The registry host of `name` (without tag), if its first component is one.
fn split_host(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|c| c.is_ascii_uppercase()) =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    }
}

/// DNS labels joined by `.` or a bracketed IPv6 address, then an optional `:PORT`.
fn is_host(h: &str) -> bool {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => (host, Some(port)),
        _ => (h, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return false;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return !v6.is_empty() && v6.bytes().all(|c| c.is_ascii_hexdigit() || c == b':');
    }
    host.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    })
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or dashes.
fn is_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = c.as_bytes();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|s| s == b'-')) {
            return false;
        }
    }
    true
}

/// `ALGORITHM:HEX`: the algorithm `[A-Za-z][A-Za-z0-9]*` parts joined by `-_+.`, 32 hex
/// digits or more.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['-', '_', '+', '.']).all(|p| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> (String, String, String, Option<String>, Option<String>) {
        let r = ImageRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (
            r.registry().into(),
            r.api_host().into(),
            r.api_path(),
            r.tag().map(str::to_string),
            r.digest().map(str::to_string),
        )
    }

    #[test]
    fn the_parts_of_a_reference() {
        let sha = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            parts("127.0.0.1:5000/team/app:v1"),
            (
                "127.0.0.1:5000".into(),
                "127.0.0.1:5000".into(),
                "team/app".into(),
                Some("v1".into()),
                None
            )
        );
        assert_eq!(
            parts("busybox"),
            (
                "docker.io".into(),
                "registry-1.docker.io".into(),
                "library/busybox".into(),
                None,
                None
            )
        );
        assert_eq!(parts("horovod/horovod:0.28.1").2, "horovod/horovod");
        assert_eq!(parts("index.docker.io/library/app").0, "docker.io");
        assert_eq!(parts("localhost/a").0, "localhost");
        assert_eq!(parts("[::1]:5000/x").0, "[::1]:5000");
        let r = ImageRef::parse(&format!("ghcr.io/x/y:t@{sha}")).unwrap();
        assert_eq!(
            (r.reference(), r.tag(), r.repo()),
            (sha.as_str(), Some("t"), "ghcr.io/x/y".into())
        );
        assert_eq!(ImageRef::parse("a").unwrap().reference(), "latest");
        // An uppercase first component is a host (distribution's ParseNormalizedNamed).
        assert_eq!(parts("Registry/app").0, "Registry");
    }

    #[test]
    fn what_is_not_a_reference() {
        for bad in [
            "",
            "App",
            "a//b",
            "a/-b",
            "/a",
            "a/",
            "a b",
            "x@sha256:00",
            "x@sha256",
            "a:-t",
            "a:",
            "a.-b",
            "my_host.com:x/a",
            "-h.com/a",
            &format!("a:{}", "t".repeat(129)),
            &format!("a/{}", "b".repeat(260)),
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?}");
        }
        for ok in [
            "a__b",
            "a---b",
            "a.b_c",
            "ghcr.io/a-b/c__d.e",
            "a:_x",
            "a:v1.2-3",
        ] {
            assert!(ImageRef::parse(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn tags_split_off_not_ports() {
        assert_eq!(
            split_tag("127.0.0.1:5000/a:t"),
            ("127.0.0.1:5000/a", Some("t"))
        );
        assert_eq!(split_tag("127.0.0.1:5000/a"), ("127.0.0.1:5000/a", None));
        assert_eq!(split_tag("a"), ("a", None));
    }
}
