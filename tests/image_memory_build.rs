//! End to end: building with a 1 GiB context through the real daemon keeps hvdctl's peak
//! RSS under 64 MiB (the context is tarred while the daemon reads it). Its own test binary,
//! so nothing else in the process inflates the peak.

#[path = "it/util.rs"]
mod util;

use hvdctl::image::ProgressMode;
use hvdctl::image::build::{BuildRequest, build};

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
    // The daemon unpacks the context but nothing is copied into the image.
    std::fs::write(
        d.path().join("Dockerfile"),
        "FROM hvdctl-test/busybox:latest\nRUN true\n",
    )
    .unwrap();
    for i in 0..4 {
        let f = std::fs::File::create(d.path().join(format!("data{i}.bin"))).unwrap();
        f.set_len(256 << 20).unwrap();
    }
    let mut req = BuildRequest::new(d.path(), util::unique("hvdctl-tests/big"), "t");
    req.progress = ProgressMode::Plain;
    let start = std::time::Instant::now();
    let built = build(&svc.docker, &req, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let peak = peak_rss_kib();
    eprintln!(
        "sent {} MiB in {:.1}s, peak RSS {} MiB",
        built.context_bytes >> 20,
        start.elapsed().as_secs_f64(),
        peak / 1024
    );
    assert!(built.context_bytes > 1 << 30);
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB is not under 64 MiB");
    util::remove_image(&svc, &built.reference).await;
}
