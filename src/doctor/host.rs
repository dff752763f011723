//! The Docker side of `doctor`: the daemon answers (its API version), free space in its
//! data root when the daemon is on this machine, and — for `--backend local` — the image
//! is in the daemon.

use super::Check;
use crate::image::docker::DockerClient;

/// Below this, a build or a local run is likely to fail for space.
const LOW_SPACE: u64 = 5 << 30;

pub async fn docker(needed: bool) -> (Check, Option<DockerClient>) {
    let bad = |m: String, hint: Option<String>| {
        let hint = hint.unwrap_or_else(|| {
            "start the Docker daemon, or point DOCKER_HOST (or DOCKER_CONTEXT) at one".into()
        });
        if needed {
            Check::fail("docker", m, &hint)
        } else {
            Check::warn(
                "docker",
                format!("{m} (needed by `hvdctl build` and the local backend)"),
                &hint,
            )
        }
    };
    match DockerClient::connect().await {
        Ok(d) => (
            Check::ok(
                "docker",
                format!(
                    "daemon at {} answers: Docker {} (API {})",
                    d.host().describe(),
                    d.server_version(),
                    d.api_version()
                ),
            ),
            Some(d),
        ),
        Err(e) => (bad(e.message, e.hint), None),
    }
}

/// Free bytes in the file system holding `path`.
fn free_bytes(path: &str) -> Option<u64> {
    let c = std::ffi::CString::new(path).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a properly sized, writable statvfs.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    (r == 0).then_some(s.f_bavail * s.f_frsize)
}

pub async fn disk(d: &DockerClient) -> Check {
    if !d.host().is_local() {
        return Check::ok(
            "disk",
            format!(
                "the daemon is remote ({}): its space is not measured from here",
                d.host().describe()
            ),
        );
    }
    let root = match d.bollard().info().await {
        Ok(i) => i
            .docker_root_dir
            .unwrap_or_else(|| "/var/lib/docker".into()),
        Err(e) => return Check::warn("disk", format!("docker info: {e}"), ""),
    };
    match free_bytes(&root) {
        Some(free) if free < LOW_SPACE => Check::warn(
            "disk",
            format!(
                "{} free in the Docker data root {root} (less than {})",
                super::fit::show_bytes(free),
                super::fit::show_bytes(LOW_SPACE)
            ),
            "docker system prune removes unused images and build cache",
        ),
        Some(free) => Check::ok(
            "disk",
            format!(
                "{} free in the Docker data root {root}",
                super::fit::show_bytes(free)
            ),
        ),
        None => Check::warn(
            "disk",
            format!("cannot measure the space in {root} from here"),
            "",
        ),
    }
}

/// `--backend local`: the image must be in the daemon (local runs never pull).
pub async fn local_image(d: &DockerClient, image: &str) -> Check {
    match d.bollard().inspect_image(image).await {
        Ok(_) => Check::ok("image", format!("{image} is in the Docker daemon")),
        Err(e) if crate::local::is_not_found(&e) => Check::fail(
            "image",
            format!(
                "{image} is not in the Docker daemon at {}",
                d.host().describe()
            ),
            "build it with `hvdctl build` (local runs need no push)",
        ),
        Err(e) => Check::warn("image", format!("inspecting {image}: {e}"), ""),
    }
}

/// Whether the local Docker daemon (if any answers) has `image`.
pub async fn in_local_daemon(image: &str) -> bool {
    match DockerClient::connect().await {
        Ok(d) => d.bollard().inspect_image(image).await.is_ok(),
        Err(_) => false,
    }
}
