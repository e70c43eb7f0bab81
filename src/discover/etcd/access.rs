//! [`EtcdAccess`]: how a source or a registration proves who it is to etcd
//! (a user and its password) and checks etcd in turn (TLS, feature
//! `etcd-tls`).

use std::fmt;

use etcd_client::ConnectOptions;

use crate::error::InvalidConfig;

/// How to reach an etcd that asks who is calling, or that serves over TLS:
/// given to [`EtcdBuilder::access`](super::EtcdBuilder::access) and
/// [`RegistrationBuilder::access`](super::RegistrationBuilder::access).
/// The default is etcd's own default: plain `http://`, no user.
///
/// * **A user** ([`user`](Self::user)): the client authenticates when it
///   connects and again when its token expires. A wrong name or password
///   is [`EtcdError::Auth`](super::EtcdError::Auth).
/// * **TLS** (feature `etcd-tls`): used when the endpoints are `https://`
///   (all of them; a mix is refused). etcd's certificate is checked
///   against the system's roots, or against [`ca_pem`](Self::ca_pem)'s
///   certificates alone when given; [`client_identity_pem`](Self::client_identity_pem)
///   answers an etcd that asks for client certificates
///   (`--client-cert-auth`). TLS settings with `http://` endpoints are
///   refused rather than ignored.
///
/// The PEM is checked by the builder's `build` (or `register`), so a
/// file that holds no certificate is an [`InvalidConfig`] naming it, not a
/// connection that fails later. `Debug` never shows the password.
#[derive(Clone, Default)]
#[must_use]
pub struct EtcdAccess {
    user: Option<(String, String)>,
    #[cfg(feature = "etcd-tls")]
    ca_pem: Option<Vec<u8>>,
    #[cfg(feature = "etcd-tls")]
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdAccess {
    /// No user, and TLS (for `https://` endpoints) on the system's roots.
    pub fn new() -> Self {
        Self::default()
    }

    /// Authenticate as `name` with `password` (etcd's `auth enable`
    /// mode). Read the password from a file or the environment, not from
    /// a command line that every user of the machine can list.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Trust these certificates (PEM, one or more; a private CA's) for
    /// etcd's, instead of the system's roots.
    #[cfg(feature = "etcd-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd-tls")))]
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Present this certificate (PEM, with its chain) and its private key
    /// (PEM: PKCS #8, PKCS #1 or SEC1) to an etcd that checks clients'
    /// certificates.
    #[cfg(feature = "etcd-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd-tls")))]
    pub fn client_identity_pem(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((certificate.into(), key.into()));
        self
    }

    /// Whether TLS settings were given.
    fn has_tls(&self) -> bool {
        #[cfg(feature = "etcd-tls")]
        return self.ca_pem.is_some() || self.identity.is_some();
        #[cfg(not(feature = "etcd-tls"))]
        false
    }

    /// Checks the settings against the `endpoints` they are for.
    pub(super) fn validate(&self, endpoints: &[String]) -> Result<(), InvalidConfig> {
        let https = endpoints.iter().filter(|e| is_https(e)).count();
        if https > 0 && https < endpoints.len() {
            return Err(InvalidConfig::new(
                "endpoints",
                "all http:// or all https:// (one TLS setting for every member)",
            ));
        }
        if https > 0 && cfg!(not(feature = "etcd-tls")) {
            return Err(InvalidConfig::new(
                "endpoints",
                "http:// URLs (https:// needs the crate's feature `etcd-tls`)",
            ));
        }
        if self.has_tls() && https == 0 {
            return Err(InvalidConfig::new(
                "access",
                "without TLS settings (a CA, a client certificate) for http:// endpoints: give https:// ones",
            ));
        }
        if let Some((name, password)) = &self.user {
            if name.is_empty() || name.chars().any(char::is_control) || password.is_empty() {
                return Err(InvalidConfig::new(
                    "access.user",
                    "a user name without control characters, and a password, neither empty",
                ));
            }
        }
        #[cfg(feature = "etcd-tls")]
        self.validate_pem()?;
        Ok(())
    }

    #[cfg(feature = "etcd-tls")]
    fn validate_pem(&self) -> Result<(), InvalidConfig> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};

        let certificates = |pem: &[u8]| {
            let mut n = 0;
            for certificate in CertificateDer::pem_slice_iter(pem) {
                certificate.ok()?;
                n += 1;
            }
            (n > 0).then_some(())
        };
        if let Some(pem) = &self.ca_pem {
            certificates(pem).ok_or(InvalidConfig::new(
                "access.ca_pem",
                "PEM holding one or more certificates (-----BEGIN CERTIFICATE-----)",
            ))?;
        }
        if let Some((certificate, key)) = &self.identity {
            certificates(certificate).ok_or(InvalidConfig::new(
                "access.client_certificate",
                "PEM holding the client's certificate (-----BEGIN CERTIFICATE-----)",
            ))?;
            PrivateKeyDer::from_pem_slice(key).map_err(|_| {
                InvalidConfig::new(
                    "access.client_key",
                    "PEM holding a private key (PKCS #8, PKCS #1 or SEC1)",
                )
            })?;
        }
        Ok(())
    }

    /// `options` with the user and, for `https://` endpoints, TLS.
    pub(super) fn apply(&self, mut options: ConnectOptions, endpoint: &str) -> ConnectOptions {
        if let Some((name, password)) = &self.user {
            // A token expires (etcd's simple tokens after 5 minutes idle):
            // a long-lived registration authenticates again.
            options = options
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "etcd-tls")]
        if is_https(endpoint) {
            use etcd_client::{Certificate, Identity, TlsOptions};

            let mut tls = TlsOptions::new();
            tls = match &self.ca_pem {
                Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
                None => tls.with_native_roots(),
            };
            if let Some((certificate, key)) = &self.identity {
                tls = tls.identity(Identity::from_pem(certificate, key));
            }
            options = options.with_tls(tls);
        }
        #[cfg(not(feature = "etcd-tls"))]
        let _ = endpoint;
        options
    }

    /// Whether a password would cross the network in the clear.
    pub(super) fn user_over_http(&self, endpoints: &[String]) -> bool {
        self.user.is_some() && !endpoints.iter().any(|e| is_https(e))
    }
}

fn is_https(endpoint: &str) -> bool {
    endpoint
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

impl fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("EtcdAccess");
        debug.field("user", &self.user.as_ref().map(|(name, _)| name));
        #[cfg(feature = "etcd-tls")]
        debug
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_identity", &self.identity.is_some());
        debug.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(access: &EtcdAccess, endpoint: &str) -> &'static str {
        access.validate(&[endpoint.into()]).unwrap_err().field
    }

    #[test]
    fn bad_access_names_its_field_and_debug_hides_the_password() {
        let http = "http://127.0.0.1:2379";
        let empty = EtcdAccess::new().user("root", "");
        assert_eq!(field(&empty, http), "access.user");
        let mixed = ["http://a:1".to_owned(), "https://b:1".to_owned()];
        let error = EtcdAccess::new().validate(&mixed).unwrap_err();
        assert_eq!(error.field, "endpoints");
        let access = EtcdAccess::new().user("root", "s3cret");
        assert!(access.validate(&[http.into()]).is_ok());
        assert!(access.user_over_http(&[http.into()]));
        let shown = format!("{access:?}");
        assert!(
            shown.contains("root") && !shown.contains("s3cret"),
            "{shown}"
        );
    }

    #[cfg(feature = "etcd-tls")]
    #[test]
    fn tls_settings_are_checked_when_built() {
        let https = "https://127.0.0.1:2379";
        let not_pem = EtcdAccess::new().ca_pem("not a certificate");
        assert_eq!(field(&not_pem, https), "access.ca_pem");
        assert_eq!(field(&not_pem, "http://127.0.0.1:2379"), "access");
        let no_key = EtcdAccess::new().client_identity_pem("x", "y");
        assert_eq!(field(&no_key, https), "access.client_certificate");
        assert!(EtcdAccess::new().validate(&[https.into()]).is_ok());
    }
}
