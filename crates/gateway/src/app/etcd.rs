//! The backends from etcd: where etcd is, how to reach it (TLS files, a
//! user and its password) and which addresses its records may name, as
//! the flags give them; the source's builder from them.

use std::path::PathBuf;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use tower_model_balance::discover::etcd::{Etcd, EtcdAccess, EtcdBuilder, EtcdError};
use tower_model_balance::error::BoxError;

use super::tls::{certificates, read, TrustError, ETCD_PASSWORD_ENV};

/// Where the backends come from when etcd has them: every gateway replica
/// watching the same prefix sees the same fleet, in the same order.
#[derive(Debug, Clone)]
pub struct EtcdMembers {
    /// etcd's client URLs (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// The key prefix of the backends' records: `<prefix><backend id>`.
    pub prefix: String,
    /// A CA file (PEM) etcd's certificate is checked against, for
    /// `https://` endpoints (none: the system's roots).
    pub ca: Option<PathBuf>,
    /// A client certificate and its key (PEM files), for an etcd that
    /// checks clients' certificates.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// The etcd user, its password read from `password_file`, else from
    /// [`ETCD_PASSWORD_ENV`](super::tls::ETCD_PASSWORD_ENV).
    pub user: Option<String>,
    /// The file holding the user's password.
    pub password_file: Option<PathBuf>,
    /// The address ranges (CIDR) records may name; empty: any.
    pub allow: Vec<String>,
}

impl EtcdMembers {
    /// `endpoints` and `prefix`, over plain http, no user, any address.
    pub fn new(endpoints: Vec<String>, prefix: String) -> Self {
        Self {
            endpoints,
            prefix,
            ca: None,
            client_identity: None,
            user: None,
            password_file: None,
            allow: Vec::new(),
        }
    }

    /// The user and TLS settings, from the files.
    ///
    /// # Errors
    ///
    /// As [`builder`](Self::builder).
    pub fn access(&self) -> Result<EtcdAccess, TrustError> {
        access(self)
    }

    /// The source's builder: the access and the allow-list set.
    ///
    /// # Errors
    ///
    /// A [`TrustError`]: a file that cannot be read or holds no PEM of its
    /// kind, a user without a password.
    pub fn builder(&self) -> Result<EtcdBuilder, BoxError> {
        let builder = Etcd::builder(self.endpoints.clone(), self.prefix.clone());
        let builder = builder.access(access(self)?);
        Ok(self.allow.iter().fold(builder, |b, r| b.allow(r.clone())))
    }

    /// Reads the prefix once, at start: a setting etcd refuses stops the
    /// gateway, named, rather than leave it watching for ever with no
    /// backend; an etcd that does not answer (down, or its certificate
    /// refused) is logged, and the source keeps trying.
    ///
    /// # Errors
    ///
    /// A [`TrustError`], an invalid setting ([`EtcdError::Config`]), or
    /// etcd refusing the user ([`EtcdError::Auth`]).
    pub async fn check(&self) -> Result<(), BoxError> {
        match self.builder()?.check().await {
            Ok(()) => Ok(()),
            Err(error @ (EtcdError::Config(_) | EtcdError::Auth(_))) => Err(error.into()),
            Err(error) => {
                tracing::warn!(%error, "etcd: no answer at start; the gateway waits for it");
                Ok(())
            }
        }
    }
}

/// The etcd source's access from `etcd`'s files and user.
///
/// # Errors
///
/// A file that cannot be read or holds no PEM of its kind; a user without
/// a password.
pub(super) fn access(etcd: &EtcdMembers) -> Result<EtcdAccess, TrustError> {
    let mut access = EtcdAccess::new();
    if let Some(path) = &etcd.ca {
        const WHAT: &str = "etcd's CA file";
        let pem = read(WHAT, path)?;
        certificates(WHAT, path, &pem)?;
        access = access.ca_pem(pem);
    }
    if let Some((certificate_path, key_path)) = &etcd.client_identity {
        const CERT: &str = "the etcd client's certificate file";
        const KEY: &str = "the etcd client's key file";
        let certificate = read(CERT, certificate_path)?;
        certificates(CERT, certificate_path, &certificate)?;
        let key = read(KEY, key_path)?;
        PrivateKeyDer::from_pem_slice(&key).map_err(|_| TrustError::NotPem {
            what: KEY,
            path: key_path.clone(),
            expected: "PEM private key (PKCS #8, PKCS #1 or SEC1)",
        })?;
        access = access.client_identity_pem(certificate, key);
    }
    if let Some(user) = &etcd.user {
        let password = match &etcd.password_file {
            Some(path) => {
                let text = read("the etcd password file", path)?;
                // A file written by `echo` ends in a line break.
                let text = String::from_utf8_lossy(&text);
                text.trim_end_matches(['\r', '\n']).to_owned()
            }
            None => std::env::var(ETCD_PASSWORD_ENV).unwrap_or_default(),
        };
        if password.is_empty() {
            return Err(TrustError::NoPassword { user: user.clone() });
        }
        access = access.user(user.clone(), password);
    }
    Ok(access)
}
