//! The etcd source against a real etcd with TLS on its client port (a
//! test CA's certificate, clients' certificates required) and auth on
//! (users and a role made through etcd's API, then `auth enable`): the
//! records are read over TLS as a user allowed to read the prefix; a
//! wrong password is `EtcdError::Auth`; etcd's certificate is refused on
//! the system's roots; a record naming an address outside the allow-list
//! is no backend, counted with the invalid records. Certificates are made
//! at test time (`support/tls_certs.rs`).

use crate::etcd;
use crate::etcd_source;
use crate::tls_certs;

use std::time::Duration;

use etcd::{EtcdServer, EtcdTls};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, Permission, TlsOptions};
use etcd_source::{next_changes, put, record};
use tls_certs::{Issued, PemDir, TestCa};
use tower_model_balance::discover::etcd::{Etcd, EtcdAccess, EtcdError};
use tower_model_balance::endpoint::Origin;

const PREFIX: &str = "/secure/";

/// A secured etcd, its CA and a client certificate, with records under
/// [`PREFIX`] and the user `gateway` (password `gw-pass`) allowed to
/// read them; `None` where etcd is not installed (outside CI).
struct Secured {
    server: EtcdServer,
    ca: TestCa,
    client: Issued,
    _dir: PemDir,
}

impl Secured {
    /// What every access here shares: the CA and the client certificate.
    fn access(&self) -> EtcdAccess {
        EtcdAccess::new().ca_pem(self.ca.pem()).client_identity_pem(
            self.client.certificate_pem.clone(),
            self.client.key_pem.clone(),
        )
    }

    fn source(&self, access: EtcdAccess) -> tower_model_balance::discover::etcd::EtcdBuilder {
        Etcd::builder([self.server.client_url()], PREFIX)
            .backoff(Duration::from_millis(20), Duration::from_millis(200))
            .access(access)
    }
}

async fn secured() -> Option<Secured> {
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
    // The administrator: over TLS with the client certificate, then root.
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .identity(Identity::from_pem(&client.certificate_pem, &client.key_pem));
    let options = ConnectOptions::new().with_tls(tls.clone());
    let mut admin = Client::connect([server.client_url()], Some(options))
        .await
        .unwrap();
    put(&mut admin, "/secure/gpu-0", &record(2)).await;
    put(
        &mut admin,
        "/secure/far",
        r#"{"version":1,"address":"http://10.9.9.9:8000"}"#,
    )
    .await;
    admin.user_add("root", "root-pass", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.role_add("reader").await.unwrap();
    let read = Permission::read(PREFIX).with_prefix();
    admin.role_grant_permission("reader", read).await.unwrap();
    admin.user_add("gateway", "gw-pass", None).await.unwrap();
    admin.user_grant_role("gateway", "reader").await.unwrap();
    admin.auth_enable().await.unwrap();
    Some(Secured {
        server,
        ca,
        client,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_read_over_tls_as_a_user_and_bad_access_is_typed() {
    let Some(etcd) = secured().await else {
        return;
    };
    let right = etcd.access().user("gateway", "gw-pass");
    etcd.source(right.clone()).check().await.unwrap();

    // The records, over TLS, as `gateway`: both are backends without an
    // allow-list.
    let mut source = etcd.source(right.clone()).build(|_: &Origin| ()).unwrap();
    let mut seen = next_changes(&mut source, 2).await;
    seen.sort();
    assert_eq!(seen, ["+far:1", "+gpu-0:2"]);

    // With one, the record naming 10.9.9.9 is no backend, and counted.
    let allowed = etcd.source(right).allow("127.0.0.0/8").allow("fd00::/8");
    let mut source = allowed.build(|_: &Origin| ()).unwrap();
    let counters = source.handle();
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:2"]);
    assert_eq!(counters.stats().invalid_records, 1);

    // A wrong password, and no user at all: etcd refuses, typed.
    for access in [etcd.access().user("gateway", "wrong"), etcd.access()] {
        let error = etcd.source(access).check().await.unwrap_err();
        assert!(matches!(error, EtcdError::Auth(_)), "{error:?}");
    }

    // On the system's roots, etcd's certificate (the test CA's) is
    // refused: no user or password is sent.
    let system = EtcdAccess::new()
        .client_identity_pem(
            etcd.client.certificate_pem.clone(),
            etcd.client.key_pem.clone(),
        )
        .user("gateway", "gw-pass");
    let error = etcd.source(system).check().await.unwrap_err();
    assert!(matches!(error, EtcdError::Client(_)), "{error:?}");
    // Its text names the cause, not only "transport error".
    assert!(error.to_string().contains("certificate"), "{error}");
}

#[tokio::test]
async fn bad_tls_settings_are_refused_when_built() {
    let https = ["https://127.0.0.1:2379"];
    let built = |access: EtcdAccess, endpoints: &[&str]| {
        Etcd::builder(endpoints.to_vec(), PREFIX)
            .access(access)
            .build(|_: &Origin| ())
            .unwrap_err()
            .field
    };
    let not_pem = EtcdAccess::new().ca_pem("-----BEGIN NOTHING-----");
    assert_eq!(built(not_pem, &https), "access.ca_pem");
    let ca = TestCa::new("unused");
    let issued = ca.issue(&["127.0.0.1"]);
    let no_key = EtcdAccess::new().client_identity_pem(issued.certificate_pem, "no key");
    assert_eq!(built(no_key, &https), "access.client_key");
    let plain = EtcdAccess::new().ca_pem(ca.pem());
    assert_eq!(built(plain, &["http://127.0.0.1:2379"]), "access");
    let mixed = ["https://127.0.0.1:2379", "http://127.0.0.1:2380"];
    assert_eq!(built(EtcdAccess::new(), &mixed), "endpoints");
    let range = Etcd::builder(https, PREFIX).allow("10.0.0.0/40");
    assert_eq!(range.build(|_: &Origin| ()).unwrap_err().field, "allow");
}
