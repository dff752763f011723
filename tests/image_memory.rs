//! Streaming a large context keeps memory bounded: the tar stream of a 1 GiB context is
//! consumed with a peak RSS well under 64 MiB. (Its own test binary, so nothing else
//! running in the process inflates the peak.)

use futures::StreamExt;
use hvdctl::image::context::BuildContext;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn one_gib_context_streams_in_bounded_memory() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    // Sparse files: 1 GiB of content that costs no disk and reads fast.
    const GIB: u64 = 1 << 30;
    for i in 0..4 {
        let f = std::fs::File::create(d.path().join(format!("data{i}.bin"))).unwrap();
        f.set_len(GIB / 4).unwrap();
    }
    let before = peak_rss_kib();
    let ctx = BuildContext::open(d.path(), "Dockerfile").unwrap();
    let mut stream = ctx.tar_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        total += chunk.unwrap().len() as u64;
        // A slow consumer: the producer must wait, not buffer ahead.
        if total % (64 << 20) < 256 << 10 {
            tokio::task::yield_now().await;
        }
    }
    assert!(total > GIB, "streamed {total} bytes");
    let peak = peak_rss_kib();
    eprintln!(
        "peak RSS {} MiB (before streaming {} MiB) for {} MiB streamed",
        peak / 1024,
        before / 1024,
        total >> 20
    );
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB is not under 64 MiB");
}
