//! A real etcd secured as in production (`etcd.rs`, `tls_certs.rs`): TLS on
//! its client port with a test CA's certificate, clients' certificates
//! required, and auth on — `root`, and the user [`USER`] whose role may
//! read one prefix and [`WRITER`], whose role may write it, made through
//! etcd's API before `auth enable`.
//!
//! The gateway's tests use it too (`crates/gateway/tests/gateway/`).

use etcd_client::{Certificate, Client, ConnectOptions, Identity, Permission, TlsOptions};
use tower_model_balance::discover::etcd::EtcdAccess;

use crate::etcd::{EtcdServer, EtcdTls};
use crate::tls_certs::{Issued, PemDir, TestCa};

/// The user allowed to read the prefix, and its password.
pub const USER: &str = "gateway";
pub const PASSWORD: &str = "gw-pass";
/// The user allowed to write under the prefix (a registration's), and its
/// password.
pub const WRITER: &str = "register";
pub const WRITER_PASSWORD: &str = "reg-pass";

/// The etcd, its CA, a client certificate and the folder of their PEM
/// files (`ca.pem`, `client.pem`, `client-key.pem`).
pub struct Secured {
    pub server: EtcdServer,
    pub ca: TestCa,
    pub client: Issued,
    pub dir: PemDir,
}

impl Secured {
    /// The CA and the client certificate, no user.
    pub fn access(&self) -> EtcdAccess {
        EtcdAccess::new().ca_pem(self.ca.pem()).client_identity_pem(
            self.client.certificate_pem.clone(),
            self.client.key_pem.clone(),
        )
    }
}

/// Starts it with `records` (key, value) written and [`USER`] allowed to
/// read under `prefix`; `None` where etcd is not installed (outside CI).
pub async fn secured(prefix: &str, records: &[(&str, &str)]) -> Option<Secured> {
    let ca = TestCa::new("etcd test CA");
    let dir = PemDir::new();
    let etcd_cert = ca.issue(&["127.0.0.1", "localhost"]);
    let tls = EtcdTls {
        cert: dir.write("etcd.pem", &etcd_cert.certificate_pem),
        key: dir.write("etcd-key.pem", &etcd_cert.key_pem),
        client_ca: Some(dir.write("ca.pem", &ca.pem())),
    };
    let server = tokio::task::spawn_blocking(move || EtcdServer::start_tls(tls))
        .await
        .unwrap()?;
    let client = ca.issue(&["gateway"]);
    dir.write("client.pem", &client.certificate_pem);
    dir.write("client-key.pem", &client.key_pem);
    // The administrator: over TLS with the client certificate.
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .identity(Identity::from_pem(&client.certificate_pem, &client.key_pem));
    let options = ConnectOptions::new().with_tls(tls);
    let mut admin = Client::connect([server.client_url()], Some(options))
        .await
        .unwrap();
    for (key, value) in records {
        admin.put(*key, *value, None).await.unwrap();
    }
    admin.user_add("root", "root-pass", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.role_add("reader").await.unwrap();
    let read = Permission::read(prefix).with_prefix();
    admin.role_grant_permission("reader", read).await.unwrap();
    admin.user_add(USER, PASSWORD, None).await.unwrap();
    admin.user_grant_role(USER, "reader").await.unwrap();
    admin.role_add("writer").await.unwrap();
    let write = Permission::read_write(prefix).with_prefix();
    admin.role_grant_permission("writer", write).await.unwrap();
    admin.user_add(WRITER, WRITER_PASSWORD, None).await.unwrap();
    admin.user_grant_role(WRITER, "writer").await.unwrap();
    admin.auth_enable().await.unwrap();
    Some(Secured {
        server,
        ca,
        client,
        dir,
    })
}
