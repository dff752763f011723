//! `.dockerignore` with the semantics of the Docker CLI's classic build context.
//!
//! What Docker does, and so what this module does:
//!
//! * **Reading the file** ([`parse`]): a UTF-8 BOM on the first line is dropped; a line whose
//!   *first character* is `#` is a comment (an indented `#` is a pattern); every other line is
//!   trimmed, blank lines are skipped; a leading `!` marks an exception (whitespace after it is
//!   trimmed too); the rest is cleaned like Go's `filepath.Clean` (`./a` → `a`, `a/` → `a`,
//!   `a//b` → `a/b`, `a/../b` → `b`) and a leading `/` is dropped (`/a` means `a` at the root).
//! * **Patterns** ([`Matcher`]): Go `filepath.Match` globs on slash-separated paths relative to
//!   the context root: `*` is any run of non-`/` characters, `?` one non-`/` character,
//!   `[...]`/`[^...]` a character class with ranges (`!` is *not* a negation in Go, so `[!a]` is
//!   the class of `!` and `a`), `\x` the literal `x`. `**` matches any number of directories
//!   (zero included); a pattern that starts with `**` is a suffix match and one that ends with
//!   `**` a prefix match, exactly as `moby/patternmatcher` decides.
//! * **Exceptions**: patterns are applied in order, the last one that matches decides
//!   (`!pattern` re-includes).
//! * **Directories**: a pattern that matches a directory excludes everything below it. While
//!   walking, an excluded directory is skipped altogether unless some exception pattern,
//!   *read literally*, starts with that directory's path plus `/` (`!dir/keep.txt`,
//!   `!dir/*.md`); then the walk goes on inside it (the directory entry itself is not sent)
//!   and each path below is matched on its own. An exception like `!**/keep.txt` therefore
//!   does not reach into an excluded `dir/`: that is Docker's behaviour too.
//! * **Build files**: the Dockerfile in use and `.dockerignore` are always sent, even when a
//!   pattern excludes them: Docker appends `!<dockerfile>` / `!.dockerignore` exceptions
//!   ([`Matcher::for_build`]); the daemon then leaves them out of what `COPY` sees.
//!
//! Known, deliberate differences from `moby/patternmatcher`, all in patterns Go's own
//! `filepath.Match` treats differently from moby's regex translation: `\d`, `\w`, `\s`
//! (moby turns them into regex classes, here they are the literal letter, as documented),
//! a literal `^` outside a class (moby emits a regex anchor that never matches), and `*`/`?`
//! inside `[...]` (moby produces a broken regex). Everything else matches Docker case by case.

use std::fmt;

use regex::Regex;

/// A pattern that Docker would reject (its `filepath.Match` syntax check fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    /// The pattern as written after cleaning (with its `!` if any).
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid .dockerignore pattern {:?}: {}",
            self.pattern, self.reason
        )
    }
}

impl std::error::Error for PatternError {}

/// Reads `.dockerignore` text into patterns, the way the Docker CLI does (see the module
/// docs). Exceptions keep their leading `!`.
pub fn parse(text: &str) -> Vec<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    // Go's bufio.ScanLines: split on '\n', drop one trailing '\r', no empty last line.
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') || text.is_empty() {
        lines.pop();
    }
    for line in lines {
        let line = line.strip_suffix('\r').unwrap_or(line);
        // The comment test comes before trimming: "  # x" is a pattern.
        if line.starts_with('#') {
            continue;
        }
        let mut pattern = line.trim();
        if pattern.is_empty() {
            continue;
        }
        let invert = pattern.starts_with('!');
        if invert {
            pattern = pattern[1..].trim();
        }
        let mut cleaned = String::new();
        if !pattern.is_empty() {
            cleaned = clean(pattern);
            if cleaned.len() > 1 && cleaned.starts_with('/') {
                cleaned.remove(0);
            }
        }
        out.push(if invert {
            format!("!{cleaned}")
        } else {
            cleaned
        });
    }
    out
}

/// Lexical path cleaning with Go's `path/filepath.Clean` rules (Unix flavour): collapses
/// `//`, removes `.` elements, resolves `..` against earlier elements, drops a trailing `/`;
/// the empty path becomes `.`.
pub fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// How one pattern is tested, decided the way moby/patternmatcher decides it.
#[derive(Debug, Clone)]
enum Test {
    /// No wildcard at all: the path must equal the pattern.
    Exact,
    /// `literal**`: the path starts with `literal`.
    Prefix(String),
    /// `**literal`: the path ends with `literal` (or equals it without its leading `/`).
    Suffix(String),
    Regex(Regex),
}

/// One cleaned pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    exclusion: bool,
    depth: usize,
    test: Test,
}

impl Pattern {
    /// The cleaned pattern without its `!`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for an exception (`!pattern`).
    pub fn is_exception(&self) -> bool {
        self.exclusion
    }

    fn matches(&self, path: &str) -> bool {
        match &self.test {
            Test::Exact => path == self.text,
            Test::Prefix(prefix) => path.starts_with(prefix.as_str()),
            Test::Suffix(suffix) => {
                path.ends_with(suffix.as_str())
                    || suffix.strip_prefix('/').is_some_and(|s| path == s)
            }
            Test::Regex(re) => re.is_match(path),
        }
    }
}

/// Go's `filepath.Match` on slash-separated paths, compiled once: `*` and `?` never match a
/// `/`, `[...]`/`[^...]` classes with ranges, `\` escapes. hvdctl's one glob matcher:
/// `.dockerignore` patterns are these plus moby's `**` ([`Matcher`]); BuildKit's include
/// patterns are these alone.
#[derive(Debug, Clone)]
pub struct Glob {
    text: String,
    test: Test,
}

impl Glob {
    /// A malformed pattern (Go's `ErrBadPattern`) is an error: it matches nothing.
    pub fn new(pattern: &str) -> crate::Result<Glob> {
        Ok(Glob {
            text: pattern.to_string(),
            test: compile(pattern, false)?,
        })
    }

    pub fn is_match(&self, path: &str) -> bool {
        match &self.test {
            Test::Regex(re) => re.is_match(path),
            _ => path == self.text,
        }
    }
}

/// Per-pattern results for a directory, handed down to its children while walking so a
/// pattern that matched a parent directory also counts for everything under it.
#[derive(Debug, Clone, Default)]
pub struct MatchInfo {
    parent_matched: Vec<bool>,
}

/// An ordered list of `.dockerignore` patterns.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    patterns: Vec<Pattern>,
    has_exceptions: bool,
}

impl Matcher {
    /// Compiles patterns (as produced by [`parse`], or written by hand): each is trimmed and
    /// cleaned again, empty ones are skipped, a lone `!` and malformed globs are errors.
    pub fn new<I, S>(patterns: I) -> Result<Matcher, PatternError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut m = Matcher::default();
        for raw in patterns {
            let trimmed = raw.as_ref().trim();
            if trimmed.is_empty() {
                continue;
            }
            let mut text = clean(trimmed);
            let mut exclusion = false;
            if let Some(rest) = text.strip_prefix('!') {
                if rest.is_empty() {
                    return Err(PatternError {
                        pattern: text,
                        reason: "an exception needs a pattern after \"!\"".into(),
                    });
                }
                exclusion = true;
                text = rest.to_string();
                m.has_exceptions = true;
            }
            let test = compile(&text, true).map_err(|reason| PatternError {
                pattern: if exclusion {
                    format!("!{text}")
                } else {
                    text.clone()
                },
                reason: reason.message,
            })?;
            let depth = text.split('/').count();
            m.patterns.push(Pattern {
                text,
                exclusion,
                depth,
                test,
            });
        }
        Ok(m)
    }

    /// The matcher Docker uses for a build: `patterns` plus exceptions that keep
    /// `.dockerignore` and the Dockerfile (`dockerfile`, relative to the context, `/`-separated)
    /// in the context when a pattern would exclude them.
    pub fn for_build<S: AsRef<str>>(
        patterns: &[S],
        dockerfile: &str,
    ) -> Result<Matcher, PatternError> {
        let mut all: Vec<String> = patterns.iter().map(|p| p.as_ref().to_string()).collect();
        let base = Matcher::new(&all)?;
        if base.matches_single_parent(".dockerignore") {
            all.push("!.dockerignore".to_string());
        }
        let with_ignore = Matcher::new(&all)?;
        if with_ignore.matches_single_parent(dockerfile) {
            all.push(format!("!{dockerfile}"));
        }
        Matcher::new(&all)
    }

    /// The compiled patterns, in order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// True if any pattern is an exception (`!...`).
    pub fn has_exceptions(&self) -> bool {
        self.has_exceptions
    }

    /// Is `path` (relative to the context, `/`-separated) excluded, counting patterns that
    /// match one of its parent directories? The context root itself is never excluded.
    /// This answers for one path in isolation; the build walk ([`Matcher::walk_match`]) can
    /// additionally skip whole directories, see the module docs.
    pub fn is_excluded(&self, path: &str) -> bool {
        self.excluded_with(path, |p, parents| {
            (1..=parents.len()).any(|i| p.matches(&parents[..i].join("/")))
        })
    }

    /// Docker's older single-parent check (moby's deprecated `Matches`), which the Docker CLI
    /// still uses to decide whether to add the `!Dockerfile`/`!.dockerignore` exceptions.
    fn matches_single_parent(&self, path: &str) -> bool {
        self.excluded_with(path, |p, parents| {
            !parents.is_empty()
                && p.depth <= parents.len()
                && p.matches(&parents[..p.depth].join("/"))
        })
    }

    /// The last pattern that decides `path` wins: a pattern that matches `path` itself, or
    /// (`parent_hit`) one of its parent directories (`parents`: their names, outermost first).
    fn excluded_with(&self, path: &str, parent_hit: impl Fn(&Pattern, &[&str]) -> bool) -> bool {
        let path = clean(path);
        if path == "." {
            return false;
        }
        let parents = parent_dirs(&path);
        let mut matched = false;
        for p in &self.patterns {
            if p.exclusion != matched {
                continue;
            }
            if p.matches(&path) || parent_hit(p, &parents) {
                matched = !p.exclusion;
            }
        }
        matched
    }

    /// The match used while walking a tree: `parent` is the [`MatchInfo`] returned for the
    /// directory containing `path` (or `None` at the top). Returns whether `path` is excluded
    /// and the info to hand to its children if it is a directory.
    pub fn walk_match(&self, path: &str, parent: Option<&MatchInfo>) -> (bool, MatchInfo) {
        let parent_matched = parent.map(|p| p.parent_matched.as_slice()).unwrap_or(&[]);
        let mut info = MatchInfo {
            parent_matched: vec![false; self.patterns.len()],
        };
        let mut matched = false;
        for (i, p) in self.patterns.iter().enumerate() {
            let mut hit = parent_matched.get(i).copied().unwrap_or(false);
            if !hit {
                if p.exclusion != matched {
                    continue;
                }
                hit = p.matches(path);
                if !hit && parent_matched.is_empty() {
                    let parents = parent_dirs(path);
                    hit = (1..=parents.len()).any(|n| p.matches(&parents[..n].join("/")));
                }
            }
            info.parent_matched[i] = hit;
            if hit {
                matched = !p.exclusion;
            }
        }
        (matched, info)
    }

    /// For an excluded directory: must the walk still go inside it because an exception,
    /// read literally, starts with `dir/`?
    pub fn exception_may_reach_into(&self, dir: &str) -> bool {
        let dir_slash = format!("{dir}/");
        self.patterns
            .iter()
            .any(|p| p.exclusion && format!("{}/", p.text).starts_with(&dir_slash))
    }
}

/// The directories above `path`: `a/b/c` → `["a", "b"]`; `a` → `[]`.
fn parent_dirs(path: &str) -> Vec<&str> {
    match path.rsplit_once('/') {
        Some((parent, _)) => parent.split('/').collect(),
        None => Vec::new(),
    }
}

fn push_literal(re: &mut String, c: char) {
    let mut buf = [0u8; 4];
    re.push_str(&regex::escape(c.encode_utf8(&mut buf)));
}

/// Turns a cleaned pattern (no `!`) into its test, rejecting what Go's `filepath.Match`
/// rejects: an unterminated or empty `[...]`, a class range missing an end, a trailing `\`.
/// `double_star`: `**` is moby's any-number-of-directories (else two `*`, as in Go).
fn compile(pattern: &str, double_star: bool) -> crate::Result<Test> {
    #[derive(PartialEq)]
    enum Kind {
        Exact,
        Prefix,
        Suffix,
        Regex,
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut re = String::from("^");
    let mut kind = Kind::Exact;
    let mut i = 0;
    let mut step = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '*' if double_star && chars.get(i) == Some(&'*') => {
                i += 1;
                if chars.get(i) == Some(&'/') {
                    i += 1;
                }
                if i == chars.len() {
                    if kind == Kind::Exact {
                        kind = Kind::Prefix;
                    } else {
                        re.push_str(".*");
                        kind = Kind::Regex;
                    }
                } else {
                    re.push_str("(.*/)?");
                    kind = Kind::Regex;
                }
                if step == 0 {
                    kind = Kind::Suffix;
                }
            }
            '*' => {
                re.push_str("[^/]*");
                kind = Kind::Regex;
            }
            '?' => {
                re.push_str("[^/]");
                kind = Kind::Regex;
            }
            '\\' => {
                let Some(&next) = chars.get(i) else {
                    return Err(crate::Error::input("a trailing \\ escapes nothing"));
                };
                i += 1;
                push_literal(&mut re, next);
                kind = Kind::Regex;
            }
            '[' => {
                i = compile_class(&chars, i, &mut re)?;
                kind = Kind::Regex;
            }
            ']' => {
                push_literal(&mut re, ']');
                kind = Kind::Regex;
            }
            c => push_literal(&mut re, c),
        }
        step += 1;
    }
    Ok(match kind {
        Kind::Exact => Test::Exact,
        Kind::Prefix => Test::Prefix(pattern[..pattern.len() - 2].to_string()),
        Kind::Suffix => Test::Suffix(pattern[2..].to_string()),
        Kind::Regex => {
            re.push('$');
            Test::Regex(
                Regex::new(&re).map_err(|e| {
                    crate::Error::input(format!("cannot compile: {e}")).caused_by(e)
                })?,
            )
        }
    })
}

/// Parses a Go character class starting just after `[`; appends the equivalent regex class
/// and returns the index after the closing `]`.
fn compile_class(chars: &[char], mut i: usize, re: &mut String) -> crate::Result<usize> {
    let unterminated = || crate::Error::input("unterminated character class [...]");
    // One class member, maybe escaped; `-` and `]` must be escaped.
    let member = |i: &mut usize| -> crate::Result<char> {
        let mut c = *chars.get(*i).ok_or_else(unterminated)?;
        if c == '-' || c == ']' {
            return Err(crate::Error::input(format!(
                "{c:?} must be escaped inside a character class"
            )));
        }
        if c == '\\' {
            *i += 1;
            c = *chars.get(*i).ok_or_else(unterminated)?;
        }
        *i += 1;
        if *i >= chars.len() {
            return Err(unterminated());
        }
        Ok(c)
    };
    re.push('[');
    if chars.get(i) == Some(&'^') {
        re.push('^');
        i += 1;
    }
    let mut ranges = 0;
    loop {
        if chars.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let lo = member(&mut i)?;
        push_literal(re, lo);
        if chars[i] == '-' {
            i += 1;
            let hi = member(&mut i)?;
            if hi < lo {
                return Err(crate::Error::input(format!(
                    "character range {lo}-{hi} is out of order"
                )));
            }
            re.push('-');
            push_literal(re, hi);
        }
        ranges += 1;
    }
    re.push(']');
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_like_go() {
        for (input, want) in [
            ("", "."),
            (".", "."),
            ("./", "."),
            ("a/", "a"),
            ("./a/./b/", "a/b"),
            ("a//b", "a/b"),
            ("a/../b", "b"),
            ("../a", "../a"),
            ("a/../..", ".."),
            ("/", "/"),
            ("/../a", "/a"),
            ("//a//", "/a"),
        ] {
            assert_eq!(clean(input), want, "clean({input:?})");
        }
    }

    #[test]
    fn parse_lines() {
        let text = "\u{feff}# comment\n  # not a comment\n\n  ./a/  \r\n!  /b//c\n/\n!\n**/x\nlast";
        assert_eq!(
            parse(text),
            vec!["# not a comment", "a", "!b/c", "/", "!", "**/x", "last"]
        );
    }

    #[test]
    fn bad_patterns() {
        for p in ["[", "a[", "[]", "[^]", "[a-]", "a\\", "[z-a]", "!", "[-a]"] {
            assert!(Matcher::new([p]).is_err(), "{p:?} should be rejected");
        }
        for p in ["]", "a]b", "[\\]]", "[\\-a]", "[!a]", "[^a-c]"] {
            assert!(Matcher::new([p]).is_ok(), "{p:?} should be accepted");
        }
    }
}
