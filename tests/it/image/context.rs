//! The build context: the tar archive's entries, and — against a real daemon — that hvdctl
//! sends exactly the files `DOCKER_BUILDKIT=0 docker build` sends for the same tree.

use crate::util;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use futures::StreamExt;
use hvdctl::image::ProgressMode;
use hvdctl::image::build::{BuildRequest, build};
use hvdctl::image::context::BuildContext;

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// One tar entry: (path, type byte, mode, uid, gid, link target, content).
type TarEntry = (String, u8, u32, u64, u64, String, Vec<u8>);

/// Reads a tar archive into its entries.
fn read_tar(data: &[u8]) -> Vec<TarEntry> {
    let mut ar = tar::Archive::new(data);
    let mut out = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        let path = e.path().unwrap().to_string_lossy().into_owned();
        let link = e
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut content = Vec::new();
        e.read_to_end(&mut content).unwrap();
        out.push((
            path,
            h.entry_type().as_byte(),
            h.mode().unwrap(),
            h.uid().unwrap(),
            h.gid().unwrap(),
            link,
            content,
        ));
    }
    out
}

#[test]
fn tar_entries_keep_modes_links_and_root_ownership() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    util::write_tree(
        root,
        &[
            ("Dockerfile", "FROM scratch\n"),
            ("bin/run.sh", "#!/bin/sh\necho hi\n"),
            ("ro.txt", "read only"),
        ],
    );
    set_mode(&root.join("bin/run.sh"), 0o755);
    set_mode(&root.join("ro.txt"), 0o444);
    set_mode(&root.join("bin"), 0o750);
    std::os::unix::fs::symlink("bin/run.sh", root.join("run")).unwrap();
    std::fs::hard_link(root.join("ro.txt"), root.join("ro-link.txt")).unwrap();
    let long = format!("{}/file.txt", "d".repeat(120));
    util::write_tree(root, &[(&long, "long path")]);

    let ctx = BuildContext::open(root, "Dockerfile").unwrap();
    let mut buf = Vec::new();
    let n = ctx.write_tar(&mut buf).unwrap();
    assert_eq!(n as usize, buf.len());
    let entries = read_tar(&buf);
    let get = |p: &str| {
        entries
            .iter()
            .find(|e| e.0 == p)
            .unwrap_or_else(|| panic!("{p} missing in {entries:?}"))
    };

    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "Dockerfile",
            "bin/",
            "bin/run.sh",
            &format!("{}/", "d".repeat(120)),
            long.as_str(),
            "ro-link.txt",
            "ro.txt",
            "run"
        ]
    );
    assert!(
        entries.iter().all(|e| e.3 == 0 && e.4 == 0),
        "uid/gid 0 everywhere"
    );
    let run_sh = get("bin/run.sh");
    assert_eq!((run_sh.1, run_sh.2), (b'0', 0o755));
    assert_eq!(run_sh.6, b"#!/bin/sh\necho hi\n");
    assert_eq!((get("bin/").1, get("bin/").2), (b'5', 0o750));
    assert_eq!(get("ro.txt").2 & 0o777, 0o444);
    // ro-link.txt comes first in the walk, so ro.txt is the hard link to it.
    assert_eq!(
        (get("ro-link.txt").1, get("ro-link.txt").6.as_slice()),
        (b'0', &b"read only"[..])
    );
    assert_eq!(
        (get("ro.txt").1, get("ro.txt").5.as_str()),
        (b'1', "ro-link.txt")
    );
    assert_eq!((get("run").1, get("run").5.as_str()), (b'2', "bin/run.sh"));
    assert_eq!(get(&long).6, b"long path");
}

#[tokio::test]
async fn tar_stream_equals_write_tar_and_is_chunked() {
    let d = tempfile::tempdir().unwrap();
    util::write_tree(d.path(), &[("Dockerfile", "FROM scratch\n")]);
    // 3 MiB of non-repeating content spread over a few files.
    for i in 0..3 {
        let data: Vec<u8> = (0..1024 * 1024u32)
            .map(|x| (x.wrapping_mul(2654435761) >> (i + 7)) as u8)
            .collect();
        std::fs::write(d.path().join(format!("blob{i}")), data).unwrap();
    }
    let ctx = BuildContext::open(d.path(), "Dockerfile").unwrap();
    let mut whole = Vec::new();
    ctx.write_tar(&mut whole).unwrap();
    let mut stream = ctx.tar_stream();
    let mut streamed = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.len() <= hvdctl::image::context::STREAM_CHUNK_SIZE);
        streamed.extend_from_slice(&chunk);
        chunks += 1;
    }
    assert!(stream.error().is_none());
    assert!(chunks >= 12, "expected many chunks, got {chunks}");
    assert_eq!(streamed, whole);
}

/// A tree exercising the tricky parts of `.dockerignore`.
fn tricky_tree(root: &Path) {
    let files = [
        "Dockerfile",
        "app.py",
        "keep.log",
        "debug.log",
        "sub/other.log",
        "sub/keep.log",
        "build/out.bin",
        "build/keep/a.txt",
        "build/keep/deeper/b.txt",
        "x.tmp",
        "sub/y.tmp",
        "sub/important.tmp",
        "docs/README.md",
        "docs/guide.md",
        "docs/sub/c.md",
        "cache/c.bin",
        "secrets/key",
        "sub/secrets/key",
        "vendor/a/test/t.go",
        "vendor/test/u.go",
        "vendor/a/src.go",
        "vendor/keepme",
        "node_modules/pkg/index.js",
        "node_modules/pkg/other.js",
        "abc",
        "bat.txt",
        "cat.txt",
        "dat.txt",
        "!ray",
        "xray",
        "yray",
        "data/1.csv",
        "data/x.csv",
        "esc*name",
        "escXname",
        "deep/x.txt",
        "deep/a/b/x.txt",
        "deep/y.txt",
        "my file.txt",
        "ü.txt",
        ".env",
        "emptydir/.keep",
        "# indented",
        "#comment",
    ];
    for f in files {
        util::write_tree(root, &[(f, f)]);
    }
    std::fs::create_dir_all(root.join("really_empty")).unwrap();
    std::fs::write(root.join("exec.sh"), "#!/bin/sh\n").unwrap();
    set_mode(&root.join("exec.sh"), 0o755);
    set_mode(&root.join("docs/guide.md"), 0o600);
    std::os::unix::fs::symlink("app.py", root.join("link")).unwrap();
    std::os::unix::fs::symlink("docs", root.join("link_dir")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("broken")).unwrap();
    std::fs::write(
        root.join(".dockerignore"),
        [
            "# tricky patterns",
            "*.log",
            "!keep.log",
            "build/",
            "!build/keep/**",
            "**/*.tmp",
            "!**/important.tmp",
            "docs",
            "!docs/README.md",
            "./cache/",
            "/secrets",
            "vendor/**/test",
            "vendor",
            "!**/keepme",
            "node_modules",
            "!node_modules/pkg/index.js",
            "Dockerfile",
            ".dockerignore",
            "a?c",
            "[b-c]at.txt",
            "[!x]ray",
            "data/[^0-9]*",
            "esc\\*name",
            "deep/**/x.txt",
            "  # indented   ",
            "#comment",
            "\t",
            "  spaced/../my file.txt  \r",
        ]
        .join("\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn sends_the_same_files_as_docker_build() {
    let Some(svc) = util::services().await else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let ctx_dir = d.path().join("ctx");
    std::fs::create_dir_all(&ctx_dir).unwrap();
    tricky_tree(&ctx_dir);
    // The listing lands in the image; stat's %N shows symlink targets, %a the modes.
    std::fs::write(
        ctx_dir.join("Dockerfile"),
        "FROM hvdctl-test/busybox:latest\nCOPY . /ctx\nRUN cd /ctx && find . | sort | while read -r f; do stat -c '%n|%F|%a|%s|%N' \"$f\"; done > /listing\n",
    )
    .unwrap();

    let ctx = BuildContext::open(&ctx_dir, "Dockerfile").unwrap();
    let ours = ctx.files().unwrap();
    // Dockerfile and .dockerignore are excluded by patterns: still sent (the daemon needs
    // them) but then dropped by the daemon, so they are not in /ctx.
    assert!(
        ours.contains(&"Dockerfile".to_string()) && ours.contains(&".dockerignore".to_string())
    );
    assert!(
        !ours.iter().any(|f| f.starts_with("vendor")),
        "vendor/ must be skipped whole: {ours:?}"
    );

    // 1. docker CLI, classic builder.
    let cli_tag = util::unique("hvdctl-test/ctx-cli");
    util::docker_cli(
        &svc.docker_host,
        &["build", "-q", "-t", &cli_tag, ctx_dir.to_str().unwrap()],
        &[("DOCKER_BUILDKIT", "0")],
    );
    // 2. hvdctl.
    let mut req = BuildRequest::new(&ctx_dir, util::unique("hvdctl-test/ctx-hvdctl"), "t");
    req.progress = ProgressMode::Plain;
    // Compared with the CLI's classic builder. With BuildKit the daemon does not drop an
    // excluded Dockerfile and .dockerignore from the uploaded context (docs/architecture.md).
    req.builder = hvdctl::image::Builder::Legacy;
    let mut log = Vec::new();
    let built = build(&svc.docker, &req, &mut log)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&log)));

    let listing = |image: &str| {
        util::docker_cli(
            &svc.docker_host,
            &["run", "--rm", image, "cat", "/listing"],
            &[],
        )
    };
    let cli_listing = listing(&format!("{cli_tag}:latest"));
    let our_listing = listing(&built.reference);
    assert_eq!(
        our_listing, cli_listing,
        "hvdctl's context differs from docker build's"
    );

    // And the files the CLI sent are exactly the non-directory entries we list (minus the
    // build files the daemon drops).
    let cli_files: Vec<String> = cli_listing
        .lines()
        .filter(|l| !l.contains("|directory|"))
        .map(|l| {
            l.split('|')
                .next()
                .unwrap()
                .trim_start_matches("./")
                .to_string()
        })
        .collect();
    let our_files: Vec<String> = {
        let mut v: Vec<String> = ours
            .iter()
            .filter(|f| !f.ends_with('/') && *f != "Dockerfile" && *f != ".dockerignore")
            .cloned()
            .collect();
        v.sort();
        v
    };
    let mut cli_sorted = cli_files.clone();
    cli_sorted.sort();
    assert_eq!(our_files, cli_sorted);

    // Spot checks of the semantics, so a change in both tools at once would still show.
    let has = |f: &str| cli_files.iter().any(|x| x == f);
    for f in [
        "app.py",
        "keep.log",
        "sub/other.log",
        "build/keep/deeper/b.txt",
        "sub/important.tmp",
        "docs/README.md",
        "sub/secrets/key",
        "node_modules/pkg/index.js",
        "yray",
        "data/1.csv",
        "escXname",
        "deep/y.txt",
        "ü.txt",
        ".env",
        "link",
        "broken",
        "link_dir",
        "exec.sh",
        "dat.txt",
        "#comment",
    ] {
        assert!(has(f), "{f} should be sent; sent: {cli_files:?}");
    }
    for f in [
        "debug.log",
        "build/out.bin",
        "x.tmp",
        "sub/y.tmp",
        "docs/guide.md",
        "cache/c.bin",
        "secrets/key",
        "vendor/keepme",
        "vendor/a/src.go",
        "node_modules/pkg/other.js",
        "abc",
        "bat.txt",
        "cat.txt",
        // Go classes: `!` is no negation, so `[!x]ray` is the class of `!` and `x`.
        "xray",
        "!ray",
        "data/x.csv",
        "esc*name",
        "deep/x.txt",
        "deep/a/b/x.txt",
        "Dockerfile",
        ".dockerignore",
        "# indented",
        "my file.txt",
    ] {
        assert!(!has(f), "{f} should not be sent");
    }
    assert!(
        cli_listing.contains("./exec.sh|regular file|755|"),
        "{cli_listing}"
    );
    assert!(
        cli_listing.contains("./link|symbolic link|777|6|'./link' -> 'app.py'"),
        "{cli_listing}"
    );

    for image in [format!("{cli_tag}:latest"), built.reference.clone()] {
        util::remove_image(&svc, &image).await;
    }
}

/// hvdctl's state directory (`.hvdctl/`, written by every build and deploy) is never in a
/// context, at the root or where an app sits deeper, even against a `.dockerignore`
/// exception; changing it changes neither the files sent nor the content tag.
#[test]
fn hvdctl_state_is_never_sent() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    util::write_tree(
        root,
        &[
            ("Dockerfile", "FROM scratch\nCOPY . /app\n"),
            (".dockerignore", "!.hvdctl\n"),
            ("train.py", "print(1)\n"),
            (".hvdctl/image.json", "{\"image\": \"a\"}"),
            ("apps/mnist/hvdctl.yaml", "name: mnist\n"),
            ("apps/mnist/.hvdctl/runs/r1.json", "{}"),
            ("notes/hvdctl.txt", "kept"),
        ],
    );
    let ctx = BuildContext::open(root, "Dockerfile").unwrap();
    let paths: Vec<String> = ctx.entries().unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(
        paths,
        [
            ".dockerignore",
            "Dockerfile",
            "apps",
            "apps/mnist",
            "apps/mnist/hvdctl.yaml",
            "notes",
            "notes/hvdctl.txt",
            "train.py"
        ]
    );
    let before = ctx.content_hash().unwrap();
    util::write_tree(root, &[(".hvdctl/image.json", "{\"image\": \"b\"}")]);
    let ctx = BuildContext::open(root, "Dockerfile").unwrap();
    assert_eq!(ctx.content_hash().unwrap(), before);
}
