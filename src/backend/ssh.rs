//! The per-run ssh key pair of `native` and `local` runs. The private key exists only in
//! memory, in the cluster Secret, or in a 0600 file of the local run's private directory;
//! it is never printed ([`SshKeys`]'s Debug hides it) and never part of `--dry-run` output.

use crate::error::{Error, Result};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};
use zeroize::Zeroizing;

/// Placeholder shown instead of the private key in dry runs.
pub const REDACTED: &str = "<redacted: generated per run at deploy time>";

pub struct SshKeys {
    private: Zeroizing<String>,
    pub public: String,
}

impl std::fmt::Debug for SshKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshKeys")
            .field("private", &"<redacted>")
            .field("public", &self.public)
            .finish()
    }
}

impl SshKeys {
    /// A new ed25519 key pair in OpenSSH format.
    pub fn generate(comment: &str) -> Result<SshKeys> {
        let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
            .map_err(|e| Error::failure(format!("cannot generate an ssh key: {e}")))?;
        key.set_comment(comment);
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| Error::failure(format!("cannot encode the ssh key: {e}")))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| Error::failure(format!("cannot encode the ssh public key: {e}")))?;
        Ok(SshKeys {
            private: Zeroizing::new(private.to_string()),
            public,
        })
    }

    /// The OpenSSH private key text. Callers must only send it to the cluster or a 0600 file.
    pub fn private_openssh(&self) -> &str {
        &self.private
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_openssh_and_debug_hides_the_private_half() {
        let k = SshKeys::generate("hvdctl-test").unwrap();
        assert!(
            k.private_openssh()
                .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
        );
        assert!(k.public.starts_with("ssh-ed25519 "));
        let dbg = format!("{k:?}");
        assert!(!dbg.contains("PRIVATE KEY"));
    }
}
