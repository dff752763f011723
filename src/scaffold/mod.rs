//! `hvdctl init` and `hvdctl templates`: the template catalog and scaffolding an app from it.

pub mod catalog;
pub mod init;

pub use catalog::{Catalog, DEFAULT_TEMPLATE, TemplateInfo};

/// `init --base`: which Dockerfile a Horovod app gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Base {
    /// The template's own Dockerfile (the official horovod/horovod images).
    #[default]
    Official,
    /// `templates/bases/horovod-debian/Dockerfile`: Debian packages + the Horovod sdist, CPU
    /// (PyTorch, or TensorFlow from pip: the `FRAMEWORK` build argument the app's hvdctl.yaml
    /// sets).
    Debian,
}

impl Base {
    /// The embedded Dockerfile that replaces the template's, and the templates it fits.
    pub fn dockerfile(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Base::Official => None,
            Base::Debian => Some((
                "bases/horovod-debian/Dockerfile",
                &["horovod", "horovod-elastic", "horovod-tensorflow"],
            )),
        }
    }
}
