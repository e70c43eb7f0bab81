//! Certificates made at test time (rcgen, `ring`): a CA of the test's own
//! and the certificates it issues, written as PEM files in a folder of
//! the test's own. No key is ever committed.
//!
//! The gateway's tests use this file too (`crates/gateway/tests/gateway/`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A CA that signs certificates for 127.0.0.1.
pub struct TestCa {
    certificate: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its private key, as PEM.
pub struct Issued {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A new CA, named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        Self { certificate, key }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.certificate.pem()
    }

    /// A certificate for a server at `names` (IP addresses or DNS names),
    /// good for clients too (etcd's own client port checks both uses).
    pub fn issue(&self, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "tower-model-balance test");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .unwrap();
        Issued {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A folder of the test's own for PEM files, removed on drop.
pub struct PemDir {
    path: PathBuf,
}

impl PemDir {
    /// A new, empty folder under the system's temporary folder.
    #[allow(clippy::new_without_default)] // It makes a folder: no default value.
    pub fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "tmb-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    /// Writes `text` to the file `name` in the folder; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PemDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
