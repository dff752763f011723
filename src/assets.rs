//! Files embedded in the binary from `templates/`: the app catalog (`apps/<name>/...`), the
//! shared Kubernetes manifest templates (`k8s/*.yaml.hbs`), hvdctl's launcher/worker
//! scripts (`scripts/*.sh`) and alternative app Dockerfiles (`bases/<name>/Dockerfile`). An installed hvdctl needs no files beside it.

use rust_embed::RustEmbed;
use std::borrow::Cow;

#[derive(RustEmbed)]
#[folder = "templates/"]
// A base's vendor/ (sources downloaded for local image builds) never goes into the binary.
#[exclude = "bases/*/vendor/*"]
struct Assets;

/// The text of an embedded file, e.g. `k8s/native.yaml.hbs`.
pub fn text(path: &str) -> Option<Cow<'static, str>> {
    Assets::get(path).map(|f| match f.data {
        Cow::Borrowed(b) => String::from_utf8_lossy(b),
        Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
    })
}

/// The bytes of an embedded file.
pub fn bytes(path: &str) -> Option<Cow<'static, [u8]>> {
    Assets::get(path).map(|f| f.data)
}

/// Every embedded path under `prefix` (e.g. `apps/horovod/`), sorted.
pub fn list(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = Assets::iter()
        .filter(|p| p.starts_with(prefix))
        .map(|p| p.into_owned())
        .collect();
    v.sort();
    v
}

/// Embedded script text (`launcher.sh`, `worker.sh`).
pub fn script(name: &str) -> Cow<'static, str> {
    text(&format!("scripts/{name}")).expect("scripts are embedded at build time")
}

#[cfg(test)]
mod tests {
    #[test]
    fn scripts_and_manifest_templates_are_embedded() {
        assert!(super::script("launcher.sh").contains("/dev/tcp"));
        assert!(super::text("k8s/mpijob.yaml.hbs").is_some());
        assert!(super::text("k8s/native.yaml.hbs").is_some());
    }
}
