//! End to end: building with a 1 GiB context through the real daemon keeps hvdctl's peak
//! RSS under 64 MiB, with the classic builder (the context is tarred while the daemon reads
//! it) and with BuildKit (files read in chunks as the daemon asks for them through the
//! session). Its own test binary, so nothing else in the process inflates the peak.

#[path = "it/util.rs"]
mod util;

use hvdctl::image::ProgressMode;
use hvdctl::image::build::{BuildRequest, Builder, build};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn building_a_one_gib_context_keeps_memory_bounded() {
    let Some(svc) = util::services().await else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    for i in 0..4 {
        let f = std::fs::File::create(d.path().join(format!("data{i}.bin"))).unwrap();
        f.set_len(256 << 20).unwrap();
    }
    let start = std::time::Instant::now();
    let mut images = Vec::new();
    for (builder, step) in [
        // The classic builder unpacks the whole context; nothing is copied into the image.
        (Builder::Legacy, "RUN true"),
        // BuildKit fetches the context only for a step that reads it: a bind mount of all of
        // it, written into no layer.
        (Builder::BuildKit, "RUN --mount=type=bind,target=/ctx true"),
    ] {
        std::fs::write(
            d.path().join("Dockerfile"),
            format!("FROM hvdctl-test/busybox:latest\n{step}\n"),
        )
        .unwrap();
        let mut req = BuildRequest::new(d.path(), util::unique("hvdctl-tests/big"), "t");
        req.progress = ProgressMode::Plain;
        req.builder = builder;
        let built = build(&svc.docker, &req, &mut Vec::new())
            .await
            .unwrap_or_else(|e| panic!("{builder:?}: {e}"));
        eprintln!("{builder:?}: sent {} MiB", built.context_bytes >> 20);
        assert!(built.context_bytes > 1 << 30, "{builder:?}");
        images.push(built.reference);
    }
    let peak = peak_rss_kib();
    eprintln!(
        "both builds in {:.1}s, peak RSS {} MiB",
        start.elapsed().as_secs_f64(),
        peak / 1024
    );
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB is not under 64 MiB");
    for image in images {
        util::remove_image(&svc, &image).await;
    }
}
