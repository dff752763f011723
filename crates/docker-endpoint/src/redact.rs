//! The one redaction of addresses: the userinfo of a URL (`scheme://user:password@host`) is
//! never shown. hvdctl passes every address it prints or logs through [`userinfo`] — API
//! server URLs from a kubeconfig, Docker hosts, registries — and its error and note lines
//! through it again, so an address quoted inside another program's message is covered too.

use std::borrow::Cow;

/// What replaces a URL's userinfo.
pub const MASK: &str = "***";

/// `text` with the userinfo of every URL in it replaced by [`MASK`]:
/// `https://user:pw@host:6443/x` → `https://***@host:6443/x`. A URL's authority ends at the
/// first `/`, `?`, `#` or whitespace after `://`, and its userinfo is everything before the
/// authority's last `@`. A single word without `://` (a bare `DOCKER_HOST` such as
/// `user:pw@host:2375`, a registry `user:pw@registry.example`) is read as an authority.
pub fn userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        if text.contains('@') && !text.contains(char::is_whitespace) {
            let authority = text.split(['/', '?', '#']).next().unwrap_or("");
            if let Some(at) = authority.rfind('@') {
                return Cow::Owned(format!("{MASK}{}", &text[at..]));
            }
        }
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(i) = rest.find("://") {
        let start = i + 3;
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) if !(at == MASK.len() && authority.starts_with(MASK)) => {
                out.push_str(MASK);
                out.push_str(&authority[at..]);
                changed = true;
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::userinfo;

    #[test]
    fn userinfo_is_masked_wherever_a_url_is() {
        let cases = [
            ("https://user:PASSWORD@host:6443", "https://***@host:6443"),
            (
                "https://user:PASSWORD@host:6443/api?x=1",
                "https://***@host:6443/api?x=1",
            ),
            ("https://host:6443/a@b", "https://host:6443/a@b"),
            ("tcp://u:p@10.0.0.1:2375", "tcp://***@10.0.0.1:2375"),
            ("ssh://git@example.com", "ssh://***@example.com"),
            ("u:p@host:2375", "***@host:2375"),
            ("registry.example:5000", "registry.example:5000"),
            ("https://a:p@b@c/x", "https://***@c/x"),
            (
                "cannot reach https://u:p@h:1 (context `x`), nor http://v:q@i/x",
                "cannot reach https://***@h:1 (context `x`), nor http://***@i/x",
            ),
            ("at `https://u:pw@h`.", "at `https://***@h`."),
            ("mail me at a@b.c now", "mail me at a@b.c now"),
            ("https://***@host", "https://***@host"),
            ("https://é:ü@host", "https://***@host"),
        ];
        for (text, want) in cases {
            assert_eq!(userinfo(text), want, "{text}");
            // Applying it twice changes nothing more.
            assert_eq!(userinfo(&userinfo(text)), want, "{text}");
        }
    }
}
