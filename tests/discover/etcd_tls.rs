//! The etcd source against a real etcd with TLS on its client port (a
//! test CA's certificate, clients' certificates required) and auth on
//! (users and a role made through etcd's API, then `auth enable`): the
//! records are read over TLS as a user allowed to read the prefix; a
//! wrong password is `EtcdError::Auth`; etcd's certificate is refused on
//! the system's roots; a record naming an address outside the allow-list
//! is no backend, counted with the invalid records. Certificates are made
//! at test time (`tls_certs.rs` of `crates/test-support`).

use crate::etcd_secure;
use crate::etcd_source;
use crate::tls_certs;

use std::time::Duration;

use etcd_secure::{secured, Secured, PASSWORD, USER};
use etcd_source::{next_changes, record};
use tls_certs::TestCa;
use tower_model_balance::discover::etcd::{Etcd, EtcdAccess, EtcdBuilder, EtcdError};
use tower_model_balance::endpoint::Origin;

const PREFIX: &str = "/secure/";

fn builder(etcd: &Secured, access: EtcdAccess) -> EtcdBuilder {
    Etcd::builder([etcd.server.client_url()], PREFIX)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .access(access)
}

async fn start() -> Option<Secured> {
    let far = r#"{"version":1,"address":"http://10.9.9.9:8000"}"#;
    secured(
        PREFIX,
        &[("/secure/gpu-0", &record(2)), ("/secure/far", far)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_read_over_tls_as_a_user_and_bad_access_is_typed() {
    let Some(etcd) = start().await else {
        return;
    };
    let right = etcd.access().user(USER, PASSWORD);
    builder(&etcd, right.clone()).check().await.unwrap();

    // The records, over TLS, as `gateway`: both are backends without an
    // allow-list.
    let mut source = builder(&etcd, right.clone())
        .build(|_: &Origin| ())
        .unwrap();
    let mut seen = next_changes(&mut source, 2).await;
    seen.sort();
    assert_eq!(seen, ["+far:1", "+gpu-0:2"]);

    // With one, the record naming 10.9.9.9 is no backend, and counted.
    let allowed = builder(&etcd, right).allow("127.0.0.0/8").allow("fd00::/8");
    let mut source = allowed.build(|_: &Origin| ()).unwrap();
    let counters = source.handle();
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:2"]);
    assert_eq!(counters.stats().invalid_records, 1);

    // A wrong password, and no user at all: etcd refuses, typed.
    for access in [etcd.access().user(USER, "wrong"), etcd.access()] {
        let error = builder(&etcd, access).check().await.unwrap_err();
        assert!(matches!(error, EtcdError::Auth(_)), "{error:?}");
    }

    // On the system's roots, etcd's certificate (the test CA's) is
    // refused: no user or password is sent.
    let system = EtcdAccess::new()
        .client_identity_pem(
            etcd.client.certificate_pem.clone(),
            etcd.client.key_pem.clone(),
        )
        .user(USER, PASSWORD);
    let error = builder(&etcd, system).check().await.unwrap_err();
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
