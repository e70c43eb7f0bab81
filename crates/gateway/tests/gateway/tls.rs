//! `https://` backends: the gateway forwards to a backend whose
//! certificate a test CA issued when given that CA (`Config::backend_ca`,
//! `--backend-ca`), refuses the same backend on the system's roots, and
//! names a CA file that holds no certificate. The backend is a small
//! HTTP/1 server over rustls in this test, on 127.0.0.1 port 0; its
//! certificate and the CA are made at test time (`tls_certs.rs`). The
//! same listener relays to a simulated server (`tls_front`) for
//! `tls_probes.rs`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

use crate::app::tls::TrustError;
use crate::app::{Config, Gateway, Probe};
use crate::gateway;
use crate::tls_certs::{Issued, PemDir, TestCa};

const COMPLETION: &str = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
const ANSWER: &str = r#"{"id":"cmpl-tls","object":"text_completion","model":"llama-3-8b","choices":[{"index":0,"text":"over tls","finish_reason":"stop"}]}"#;

/// A server over TLS, counting what it served.
pub(crate) struct TlsBackend {
    pub(crate) addr: SocketAddr,
    /// Requests answered (`tls_backend`), or connections relayed
    /// (`tls_front`).
    pub(crate) served: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TLS listener on 127.0.0.1 port 0 with `issued`'s certificate: each
/// connection whose handshake completes is handed to `serve` on a task of
/// its own. A client that does not trust the certificate breaks the
/// handshake off: nothing is served.
async fn tls_listener<F, Fut>(issued: &Issued, serve: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(TlsStream<TcpStream>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let certificates: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(issued.certificate_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
    #[allow(deprecated)] // ring, as the gateway's client.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls).await;
                }
            });
        }
    });
    (addr, task)
}

/// An OpenAI-shaped backend over TLS that answers every request with
/// [`ANSWER`], counting the requests.
async fn tls_backend(issued: &Issued) -> TlsBackend {
    let served = Arc::new(AtomicUsize::new(0));
    let counted = served.clone();
    let (addr, task) = tls_listener(issued, move |tls| {
        let served = counted.clone();
        async move {
            let service = service_fn(move |_request| {
                served.fetch_add(1, Ordering::SeqCst);
                async {
                    let response = http::Response::builder()
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        }
    })
    .await;
    TlsBackend { addr, served, task }
}

/// `upstream` (a simulated server, plain HTTP) behind TLS: each
/// connection's bytes relayed both ways over a connection of its own to
/// `upstream`, so that every API the server speaks (inference, probes,
/// the repository's loads) is served over `https://`.
pub(crate) async fn tls_front(issued: &Issued, upstream: SocketAddr) -> TlsBackend {
    let served = Arc::new(AtomicUsize::new(0));
    let counted = served.clone();
    let (addr, task) = tls_listener(issued, move |mut tls| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            let Ok(mut plain) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
        }
    })
    .await;
    TlsBackend { addr, served, task }
}

/// A gateway in front of `backend` alone, at `https://127.0.0.1:PORT`.
fn config(backend: &TlsBackend) -> Config {
    let origin = Origin::parse(&format!("https://{}", backend.addr)).unwrap();
    let mut config = Config::new(vec![(BackendId::new("tls-0").unwrap(), origin)]);
    config.probe = Probe::OpenAi;
    config.placement = false;
    config
}

#[tokio::test]
async fn an_https_backend_is_sent_to_with_its_ca_and_refused_without() {
    let ca = TestCa::new("backends' test CA");
    let backend = tls_backend(&ca.issue(&["127.0.0.1"])).await;
    let dir = PemDir::new();

    // With the CA: forwarded, over TLS, and the backend's answer back.
    let mut trusted = config(&backend);
    trusted.backend_ca = Some(dir.write("ca.pem", &ca.pem()));
    let gw = gateway::serve(trusted, Vec::new()).await;
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["choices"][0]["text"], "over tls");
    let served = backend.served.load(Ordering::SeqCst);
    assert!(served >= 1, "the backend served {served}");
    drop(gw);

    // On the system's roots alone, the test CA is unknown: the handshake
    // fails, nothing reaches the backend, the client gets an error.
    let before = backend.served.load(Ordering::SeqCst);
    let gw = gateway::serve(config(&backend), Vec::new()).await;
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert!(
        reply.status.is_server_error(),
        "{}: {}",
        reply.status,
        reply.body
    );
    assert_eq!(backend.served.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_is_a_typed_error_naming_it() {
    let dir = PemDir::new();
    let ca = TestCa::new("unused");
    let backend = tls_backend(&ca.issue(&["127.0.0.1"])).await;
    let not_pem = dir.write("not-a-ca.pem", "hello");
    let missing = dir.path().join("missing.pem");
    for (path, check) in [
        (not_pem, "holds no PEM certificate"),
        (missing, "cannot be read"),
    ] {
        let mut config = config(&backend);
        config.backend_ca = Some(path.clone());
        let error = Gateway::new(config).unwrap_err();
        let trust = error.downcast_ref::<TrustError>().expect("a TrustError");
        let text = trust.to_string();
        assert!(
            text.contains(check) && text.contains(&*path.to_string_lossy()),
            "{text}"
        );
    }
}
