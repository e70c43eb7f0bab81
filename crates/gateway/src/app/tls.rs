//! Trust, from the files the flags name: the roots the `https://`
//! backends' certificates are checked against (the system's, or a CA
//! file), and the PEM checks the etcd source's files share (`etcd.rs`).
//! Each file is read once, when the gateway is built; a bad one is a
//! [`TrustError`] naming it.

use std::fmt;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use super::client::root_store;

/// The environment variable an etcd user's password is read from when no
/// password file is given.
pub const ETCD_PASSWORD_ENV: &str = "GATEWAY_ETCD_PASSWORD";

/// A file of trust that cannot be used, or a password missing.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrustError {
    /// The file cannot be read.
    Read {
        /// What the file is for ("the backends' CA file").
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file holds no PEM certificate, or (for a key) no PEM private key.
    NotPem {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What it should hold.
        expected: &'static str,
    },
    /// An etcd user without a password (no file, and the environment
    /// variable unset or empty).
    NoPassword {
        /// The user.
        user: String,
    },
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { what, path, error } => {
                write!(f, "{what} {}: cannot be read: {error}", path.display())
            }
            Self::NotPem {
                what,
                path,
                expected,
            } => write!(f, "{what} {}: holds no {expected}", path.display()),
            Self::NoPassword { user } => write!(
                f,
                "the etcd user `{user}` needs a password: a password file, or {ETCD_PASSWORD_ENV} in the environment"
            ),
        }
    }
}

impl std::error::Error for TrustError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The roots the backends' certificates are checked against: `ca`'s
/// certificates alone, else the system's (none found: `https://` backends
/// are refused, logged once; `http://` ones work as before).
///
/// # Errors
///
/// `ca` cannot be read, or holds no certificate.
pub fn backend_roots(ca: Option<&Path>) -> Result<RootCertStore, TrustError> {
    const WHAT: &str = "the backends' CA file";
    if let Some(path) = ca {
        let pem = read(WHAT, path)?;
        let certificates = certificates(WHAT, path, &pem)?;
        return Ok(root_store(certificates).0);
    }
    let found = rustls_native_certs::load_native_certs();
    let (roots, added) = root_store(found.certs);
    if added == 0 {
        tracing::warn!(
            errors = found.errors.len(),
            "no system root certificates found: https:// backends are refused (give a CA file)"
        );
    }
    Ok(roots)
}

pub(super) fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TrustError> {
    std::fs::read(path).map_err(|error| TrustError::Read {
        what,
        path: path.to_owned(),
        error,
    })
}

pub(super) fn certificates(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let certificates: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    if certificates.is_empty() {
        return Err(TrustError::NotPem {
            what,
            path: path.to_owned(),
            expected: "PEM certificate (-----BEGIN CERTIFICATE-----)",
        });
    }
    Ok(certificates)
}
