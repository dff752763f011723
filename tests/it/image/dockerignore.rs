//! `.dockerignore` semantics: a table of Docker's documented behaviour, walks over real trees
//! (directories skipped or entered, build files kept), and parsing of the file.

use std::path::Path;

use hvdctl::image::context::BuildContext;
use hvdctl::image::dockerignore::{Matcher, parse};

/// (`.dockerignore` text, path, excluded?)
const TABLE: &[(&str, &str, bool)] = &[
    // Docker docs: `*/temp*` — one level below the root.
    ("*/temp*", "somedir/temporary.txt", true),
    ("*/temp*", "somedir/temp", true),
    ("*/temp*", "temp", false),
    ("*/temp*", "a/b/temp", false),
    // `*/*/temp*` — two levels below the root.
    ("*/*/temp*", "somedir/subdir/temporary.txt", true),
    ("*/*/temp*", "somedir/temporary.txt", false),
    // `temp?` — one character.
    ("temp?", "tempa", true),
    ("temp?", "temp", false),
    ("temp?", "tempab", false),
    ("temp?", "temp/", false),
    // `**` matches any number of directories, zero included.
    ("**/*.go", "main.go", true),
    ("**/*.go", "a/b/c.go", true),
    ("**/*.go", "a/b/c.gox", false),
    ("a/**/b", "a/b", true),
    ("a/**/b", "a/x/y/b", true),
    ("a/**/b", "a/xb", false),
    ("a/**", "a/b/c", true),
    ("a/**", "a", false),
    ("**", "anything/at/all", true),
    ("**/vendor", "vendor", true),
    ("**/vendor", "x/vendor/y.go", true),
    ("**/vendor", "myvendor", false),
    ("**foo", "barfoo", true),
    ("foo**", "foobar/x", true),
    ("**/foo/**", "a/foo/b", true),
    ("**/foo/**", "a/foox/b", false),
    // Exceptions: the last matching pattern wins (Docker docs' README examples).
    ("*.md\n!README.md", "README.md", false),
    ("*.md\n!README.md", "CHANGES.md", true),
    (
        "*.md\n!README*.md\nREADME-secret.md",
        "README-secret.md",
        true,
    ),
    (
        "*.md\n!README*.md\nREADME-secret.md",
        "README-public.md",
        false,
    ),
    (
        "*.md\nREADME-secret.md\n!README*.md",
        "README-secret.md",
        false,
    ),
    ("*\n!a/b", "a/b", false),
    ("*\n!a/b", "a/c", true),
    ("*.txt\n!important/*.txt", "important/a.txt", false),
    ("*.txt\n!important/*.txt", "x.txt", true),
    ("**/*.log\n!**/keep.log", "a/b/keep.log", false),
    ("**/*.log\n!**/keep.log", "a/b/drop.log", true),
    // A pattern matching a directory excludes what is below it.
    ("dir", "dir/sub/file", true),
    ("*", "a/b", true),
    (".git", ".git/objects/ab/cdef", true),
    ("build", "src/build", false),
    // Cleaning: `./`, trailing `/`, `//`, `..`, leading `/` (root-relative), whitespace.
    ("dir/", "dir/file", true),
    ("./dir", "dir/file", true),
    ("/dir", "dir", true),
    ("/dir", "sub/dir", false),
    ("a//b", "a/b", true),
    ("a/../b", "b", true),
    ("  spaced  ", "spaced", true),
    ("!  /x/y/\n*", "x/y", true),
    ("*\n!  /x/y/", "x/y", false),
    // `*` and `?` stop at `/`; other characters are literal.
    ("a*b", "a/b", false),
    ("a*b", "axxb", true),
    ("?", "a", true),
    ("?", "ab", false),
    ("a.b", "axb", false),
    ("a+b", "a+b", true),
    ("a+b", "aab", false),
    ("(x)", "(x)", true),
    ("{a,b}", "a", false),
    // Character classes, Go style: ranges, `^` negates, `!` is a plain member.
    ("[a-c]at", "bat", true),
    ("[a-c]at", "dat", false),
    ("[^a-c]at", "dat", true),
    ("[^a-c]at", "bat", false),
    ("[!a]x", "!x", true),
    ("[!a]x", "bx", false),
    ("[\\]]x", "]x", true),
    ("data/[0-9]*.csv", "data/7days.csv", true),
    ("data/[0-9]*.csv", "data/x.csv", false),
    // Escapes.
    ("esc\\*", "esc*", true),
    ("esc\\*", "escX", false),
    ("\\#x", "#x", true),
    ("q\\?", "q?", true),
    ("q\\?", "qa", false),
    // Comments: `#` only as the first character of the line.
    ("# secret", "# secret", false),
    ("# secret", "secret", false),
    ("  # hashed", "# hashed", true),
    // Blank lines and CRLF.
    ("\r\n\r\nfoo\r\n", "foo", true),
    ("\u{feff}bom", "bom", true),
];

#[test]
fn table_of_documented_behaviour() {
    assert!(TABLE.len() >= 40);
    let mut failures = Vec::new();
    for (text, path, want) in TABLE {
        let m = Matcher::new(parse(text)).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let got = m.is_excluded(path);
        if got != *want {
            failures.push(format!("{text:?} on {path:?}: excluded={got}, want {want}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
}

#[test]
fn malformed_patterns_are_input_errors() {
    for text in ["[", "a[b", "[]", "[a-]", "trailing\\", "!", "[z-a]"] {
        let err = Matcher::new(parse(text)).expect_err(text);
        assert!(
            err.to_string().contains("invalid .dockerignore pattern"),
            "{err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    std::fs::write(dir.path().join(".dockerignore"), "ok\n[broken\n").unwrap();
    let err = BuildContext::open(dir.path(), "Dockerfile").unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.message.contains(".dockerignore") && err.message.contains("[broken"),
        "{}",
        err.message
    );
}

fn tree(files: &[&str], dockerignore: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        let p = dir.path().join(f);
        if let Some(d) = f.strip_suffix('/') {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
            continue;
        }
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, f.as_bytes()).unwrap();
    }
    std::fs::write(dir.path().join(".dockerignore"), dockerignore).unwrap();
    dir
}

fn sent(dir: &Path, dockerfile: &str) -> Vec<String> {
    BuildContext::open(dir, dockerfile)
        .unwrap()
        .files()
        .unwrap()
}

#[test]
fn exception_under_excluded_dir_reincludes_only_that_file() {
    let d = tree(
        &[
            "Dockerfile",
            "node_modules/pkg/index.js",
            "node_modules/pkg/other.js",
            "node_modules/x/y.js",
            "app.js",
        ],
        "node_modules\n!node_modules/pkg/index.js\n",
    );
    // The excluded directories themselves are not sent, only the re-included file.
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [
            ".dockerignore",
            "Dockerfile",
            "app.js",
            "node_modules/pkg/index.js"
        ]
    );
}

#[test]
fn exception_not_literally_under_an_excluded_dir_does_not_reach_into_it() {
    // `!**/keep` could match vendor/keep, but Docker skips `vendor/` without looking inside
    // because no exception starts with "vendor/".
    let d = tree(
        &["Dockerfile", "vendor/keep", "vendor/drop", "src/keep"],
        "vendor\n!**/keep\n",
    );
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [".dockerignore", "Dockerfile", "src/", "src/keep"]
    );
}

#[test]
fn exception_with_glob_under_excluded_dir() {
    let d = tree(
        &["Dockerfile", "docs/a.md", "docs/b.txt", "docs/sub/c.md"],
        "docs\n!docs/*.md\n",
    );
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [".dockerignore", "Dockerfile", "docs/a.md"]
    );
}

#[test]
fn reincluded_subtree_with_double_star() {
    let d = tree(
        &[
            "Dockerfile",
            "build/out.bin",
            "build/keep/a.txt",
            "build/keep/deeper/b.txt",
            "build/other/c.txt",
        ],
        "build/\n!build/keep/**\n",
    );
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [
            ".dockerignore",
            "Dockerfile",
            "build/keep/a.txt",
            "build/keep/deeper/",
            "build/keep/deeper/b.txt"
        ]
    );
}

#[test]
fn dockerfile_and_dockerignore_are_always_sent() {
    let d = tree(
        &["Dockerfile", "a.txt", "sub/b.txt"],
        "*\nDockerfile\n.dockerignore\n",
    );
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [".dockerignore", "Dockerfile"]
    );
}

#[test]
fn custom_dockerfile_in_excluded_dir_is_sent() {
    let d = tree(
        &["docker/app.Dockerfile", "docker/other", "main.py"],
        "docker\n",
    );
    assert_eq!(
        sent(d.path(), "docker/app.Dockerfile"),
        [".dockerignore", "docker/app.Dockerfile", "main.py"]
    );
    // …and `./docker//app.Dockerfile` is the same file.
    assert_eq!(
        sent(d.path(), "./docker//app.Dockerfile"),
        [".dockerignore", "docker/app.Dockerfile", "main.py"]
    );
}

#[test]
fn order_is_sorted_bytewise_depth_first() {
    let d = tree(&["Dockerfile", "b/z", "b/a", "a.txt", "B", "_x", "a/1"], "");
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [
            ".dockerignore",
            "B",
            "Dockerfile",
            "_x",
            "a/",
            "a/1",
            "a.txt",
            "b/",
            "b/a",
            "b/z"
        ]
    );
}

#[test]
fn symlinks_are_sent_as_links_and_not_followed() {
    let d = tree(&["Dockerfile", "docs/a.md"], "");
    std::os::unix::fs::symlink("docs", d.path().join("link_dir")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", d.path().join("broken")).unwrap();
    let ctx = BuildContext::open(d.path(), "Dockerfile").unwrap();
    let files = ctx.files().unwrap();
    assert_eq!(
        files,
        [
            ".dockerignore",
            "Dockerfile",
            "broken",
            "docs/",
            "docs/a.md",
            "link_dir"
        ]
    );
    let entries = ctx.entries().unwrap();
    let link = entries.iter().find(|e| e.path == "link_dir").unwrap();
    assert_eq!(link.kind, hvdctl::image::EntryKind::Symlink("docs".into()));
}

#[test]
fn empty_dirs_and_hidden_files_are_sent() {
    let d = tree(&["Dockerfile", "emptydir/", ".env", ".git/HEAD"], ".git\n");
    assert_eq!(
        sent(d.path(), "Dockerfile"),
        [".dockerignore", ".env", "Dockerfile", "emptydir/"]
    );
}

#[test]
fn missing_dockerfile_or_outside_context_is_input_error() {
    let d = tree(&["a"], "");
    let e = BuildContext::open(d.path(), "Dockerfile").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("Dockerfile"), "{}", e.message);
    let e = BuildContext::open(d.path(), "../Dockerfile").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.contains("inside the build context"),
        "{}",
        e.message
    );
    let e = BuildContext::open(&d.path().join("nope"), "Dockerfile").unwrap_err();
    assert_eq!(e.exit_code(), 2);
}

#[test]
fn lowercase_dockerfile_is_the_fallback_for_the_default_name() {
    let d = tree(&["dockerfile", "a"], "dockerfile\n");
    let ctx = BuildContext::open(d.path(), "Dockerfile").unwrap();
    assert_eq!(ctx.dockerfile(), "dockerfile");
    assert_eq!(ctx.files().unwrap(), [".dockerignore", "a", "dockerfile"]);
}
