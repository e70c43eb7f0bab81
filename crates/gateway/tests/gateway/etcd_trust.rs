//! The gateway's backends from an etcd secured as in production (TLS with
//! client certificates, auth on: `etcd_secure.rs` of
//! `crates/test-support`), set up by its own flags (`--etcd https://…`,
//! `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-user`,
//! `--etcd-password-file`, `--etcd-allow`):
//! it routes to the backend inside the allow-list — registered by the
//! sidecar's code over TLS as a user allowed to write (`etcd-register`'s
//! same flags) — never connects to the one outside it (a listener on
//! 127.0.0.2 counts every connection, probes included), and a wrong
//! password stops it at start with `EtcdError::Auth`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::BackendMeta;
use tower_model_balance::discover::etcd::{encode_record, EtcdError};
use tower_model_balance::endpoint::Origin;
use tower_model_balance_gateway::args::Args;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use crate::etcd_secure::{secured, Secured, PASSWORD, USER, WRITER, WRITER_PASSWORD};
use crate::gateway::{self, Running};
use crate::{args, sidecar};

const PREFIX: &str = "/trusted/";
const COMPLETION: &str = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;

/// A listener on 127.0.0.2 (loopback, outside 127.0.0.1/32) counting the
/// connections it accepts.
async fn outsider() -> (Origin, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let origin = Origin::http(listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    (origin, accepted)
}

fn record(id: &str, origin: Origin) -> String {
    let meta = BackendMeta::new(BackendId::new(id).unwrap()).with_address(origin);
    encode_record(&meta).unwrap()
}

/// The etcd flags the gateway and the sidecar share for `etcd`, as
/// `user`, the password in a file holding `password`.
fn etcd_flags(etcd: &Secured, user: &str, password: &str) -> Vec<String> {
    let file = |name: &str| etcd.dir.path().join(name).display().to_string();
    let password_file = etcd.dir.write(user, &format!("{password}\n"));
    [
        "--etcd",
        &etcd.server.client_url(),
        "--prefix",
        PREFIX,
        "--etcd-ca",
        &file("ca.pem"),
        "--etcd-cert",
        &file("client.pem"),
        "--etcd-key",
        &file("client-key.pem"),
        "--etcd-user",
        user,
        "--etcd-password-file",
        &password_file.display().to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// The gateway's flags: [`etcd_flags`] as [`USER`], and the allow-list.
fn flags(etcd: &Secured, password: &str) -> Vec<String> {
    let mut flags = etcd_flags(etcd, USER, password);
    flags.extend(["--etcd-allow", "127.0.0.1/32"].map(String::from));
    flags
}

/// Waits until `gw` routes over `want` alone; fails, never hangs, past
/// 10 s.
async fn until_members(gw: &Running, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut ids: Vec<String> = (gw.handle.backends().iter())
            .map(|b| b.id.to_string())
            .collect();
        ids.sort();
        if ids == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "routes over {ids:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reads_etcd_over_tls_as_a_user_and_sends_only_inside_its_allow_list() {
    let server = ModelServer::start("inside", ServerConfig::default())
        .await
        .unwrap();
    let (far, accepted) = outsider().await;
    let outside = record("outside", far);
    let Some(etcd) = secured(PREFIX, &[("/trusted/outside", &outside)]).await else {
        return;
    };
    // The sidecar registers `inside` over TLS as the writer.
    let mut register = etcd_flags(&etcd, WRITER, WRITER_PASSWORD);
    let address = format!("http://{}", server.addr());
    register
        .extend(["--id", "inside", "--address", &address, "--interval", "50"].map(String::from));
    let registered = sidecar::Sidecar::start(&args::Args::parse(register).unwrap())
        .await
        .unwrap();

    let args = Args::parse(flags(&etcd, PASSWORD)).unwrap();
    let mut config = args.config(Vec::new()).unwrap();
    config.residency_header = Some(protocol::RESIDENT_MODELS_HEADER);
    config.placement = false;
    config.etcd.as_ref().unwrap().check().await.unwrap();
    let gw = gateway::serve(config, vec![server]).await;
    until_members(&gw, &["inside"]).await;
    let counters = gw.etcd.as_ref().unwrap().stats();
    assert_eq!(counters.invalid_records, 1, "{counters:?}");
    for _ in 0..10 {
        let reply = gw.post("/v1/completions", COMPLETION).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.headers[protocol::BACKEND_HEADER], "inside");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    drop(registered);

    // A wrong password: the gateway's start-up check names it.
    let args = Args::parse(flags(&etcd, "wrong")).unwrap();
    let config = args.config(Vec::new()).unwrap();
    let error = config.etcd.as_ref().unwrap().check().await.unwrap_err();
    let error = error.downcast_ref::<EtcdError>().expect("an EtcdError");
    assert!(matches!(error, EtcdError::Auth(_)), "{error:?}");
}
