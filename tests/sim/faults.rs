//! The simulator's hard faults, over real sockets on 127.0.0.1: a server
//! killed (its requests in flight cut, new connections refused) and started
//! again on the same port; a server that hangs (reads requests, never
//! answers, until the client gives up); and connections reset half-way
//! through a response. Driven by the servers' counters and events, never
//! by sleeping.

use crate::sim_http;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use sim_http::{client, send, HttpClient, BOUND};
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

fn config(inference_ms: u64) -> ServerConfig {
    ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .inference(InferenceTimes::new(0, inference_ms, inference_ms).unwrap())
        .build()
        .unwrap()
}

/// An inference request for `model` to `server`, as the client answers it.
async fn infer(
    client: &HttpClient,
    server: &ModelServer,
    model: &str,
) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
    let uri = format!("http://{}{}", server.addr(), protocol::infer_path(model));
    let req = http::Request::post(uri)
        .header("x-model-id", model)
        .body(Full::from("{}"))
        .unwrap();
    client.request(req).await
}

/// Whether `error`'s source chain holds an I/O error of `kind`.
fn has_io_kind(error: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        next = error.source();
    }
    false
}

#[tokio::test]
async fn a_stopped_server_cuts_its_requests_refuses_connections_and_restarts_on_its_port() {
    // Requests take 60 s: one in flight is still there when the server stops.
    let server = ModelServer::start("gpu-0", config(60_000)).await.unwrap();
    let addr = server.addr();
    let client = client();
    let in_flight = tokio::spawn({
        let client = client.clone();
        let uri = format!("http://{addr}{}", protocol::infer_path("m"));
        async move {
            let req = http::Request::post(uri).body(Full::from("{}")).unwrap();
            client.request(req).await
        }
    });
    // A gauge alone wakes no waiter: looked at between turns of the runtime.
    let running = tokio::time::timeout(BOUND, async {
        while server.stats().running == 0 {
            tokio::task::yield_now().await;
        }
    });
    running.await.expect("the request is served");

    tokio::time::timeout(BOUND, server.stop())
        .await
        .expect("stopped within the bound");
    let cut = tokio::time::timeout(BOUND, in_flight)
        .await
        .expect("the request in flight ends with the server")
        .unwrap();
    assert!(cut.is_err(), "cut, not answered: {cut:?}");

    // Down: nothing listens on the port.
    let refused = tokio::net::TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    // Started again on the same port: a fresh server, the same client.
    let fast = ServerConfig::builder()
        .cold_load(Duration::from_millis(1)) // as `config` has it
        .inference(InferenceTimes::new(0, 1, 1).unwrap())
        .build()
        .unwrap();
    let server = ModelServer::start_on("gpu-0", fast, addr).await.unwrap();
    assert_eq!(server.addr(), addr);
    let rsp = tokio::time::timeout(BOUND, infer(&client, &server, "m"))
        .await
        .expect("answered in time")
        .unwrap();
    assert_eq!(rsp.status(), 200);
    assert_eq!(
        rsp.headers()[protocol::COLD_LOAD_HEADER],
        "true",
        "nothing resident after a restart"
    );
    rsp.into_body().collect().await.unwrap();
    assert_eq!(server.stats().requests, 1, "counters from zero");
}

#[tokio::test]
async fn a_port_in_use_is_an_error_not_a_second_server() {
    let server = ModelServer::start("gpu-0", ServerConfig::default())
        .await
        .unwrap();
    let taken = ModelServer::start_on("gpu-1", ServerConfig::default(), server.addr()).await;
    assert_eq!(taken.unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
}

#[tokio::test]
async fn a_hung_server_holds_requests_until_the_client_gives_up() {
    let server = ModelServer::start("gpu-0", config(1)).await.unwrap();
    let client = client();
    server.set_fault(Some(Fault::Hang));

    // The client's timeout catches it; meanwhile the server holds the request.
    let waited = tokio::spawn({
        let client = client.clone();
        let uri = format!("http://{}{}", server.addr(), protocol::infer_path("m"));
        async move {
            let req = http::Request::post(uri).body(Full::from("{}")).unwrap();
            tokio::time::timeout(Duration::from_millis(300), client.request(req)).await
        }
    });
    let held = tokio::time::timeout(BOUND, server.wait_for_stats(|s| s.hung == 1));
    assert_eq!(
        held.await.expect("the request is held").work,
        0,
        "not served"
    );
    assert!(
        waited.await.unwrap().is_err(),
        "no answer: the client timed out"
    );
    // The client closed its connection: the server let the request go.
    let released = tokio::time::timeout(BOUND, server.wait_for_stats(|s| s.hung == 0));
    released.await.expect("released once the client gave up");

    // Readiness hangs too.
    let ready = format!("http://{}{}", server.addr(), protocol::READY_PATH);
    let req = http::Request::get(ready)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let probe = tokio::time::timeout(Duration::from_millis(300), client.request(req)).await;
    assert!(probe.is_err(), "readiness hangs: {probe:?}");

    // Lifted: the next requests are served.
    server.set_fault(None);
    let (status, _, _) = send(
        &client,
        &server,
        http::Method::POST,
        &protocol::infer_path("m"),
        "{}",
    )
    .await;
    assert_eq!(status, 200);
    let released = tokio::time::timeout(BOUND, server.wait_for_stats(|s| s.hung == 0));
    released.await.expect("every held request released");
}

#[tokio::test]
async fn a_reset_sends_headers_and_half_the_body_then_closes_the_connection() {
    let server = ModelServer::start("gpu-0", config(1)).await.unwrap();
    let client = client();
    server.set_fault(Some(Fault::Reset));

    let rsp = tokio::time::timeout(BOUND, infer(&client, &server, "m"))
        .await
        .expect("answered in time")
        .expect("the headers arrive");
    assert_eq!(rsp.status(), 200);
    assert_eq!(rsp.headers()[protocol::BACKEND_HEADER], "gpu-0");
    let whole = protocol::infer_response("m").len();
    assert_eq!(
        rsp.headers()[http::header::CONTENT_LENGTH],
        whole.to_string().as_str(),
        "the whole body's length is announced"
    );
    let body = tokio::time::timeout(BOUND, rsp.into_body().collect())
        .await
        .expect("the body ends in time");
    let error = body.expect_err("the body breaks off");
    assert!(
        [
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::ConnectionReset
        ]
        .into_iter()
        .any(|kind| has_io_kind(&error, kind)),
        "a connection closed mid-body: {error:?}"
    );
    assert_eq!(server.stats().work, 1, "served before it was cut");

    // Readiness is answered whole; inference again once lifted.
    let (status, _, _) = send(
        &client,
        &server,
        http::Method::GET,
        protocol::READY_PATH,
        "",
    )
    .await;
    assert_eq!(status, 200);
    server.set_fault(None);
    let (status, _, body) = send(
        &client,
        &server,
        http::Method::POST,
        &protocol::infer_path("m"),
        "{}",
    )
    .await;
    assert_eq!((status, body.len()), (200, whole));
}
