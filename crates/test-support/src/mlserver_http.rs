//! HTTP to the real model servers of `mlserver.rs` (and to a gateway in
//! front of them): a kept-alive client, `GET` and `POST` answering status
//! and body, and a KServe v2 inference body.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

/// A plain HTTP/1 client with kept-alive connections and TCP_NODELAY.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// `GET path` on `addr`: status (0 when no answer) and body.
pub async fn get(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> (u16, String) {
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(Full::default())
        .expect("a request");
    send(client, req).await
}

/// `POST path` on `addr` with a JSON `body`: status (0 when no answer)
/// and body.
pub async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
    body: Bytes,
) -> (u16, String) {
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .expect("a request");
    send(client, req).await
}

async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> (u16, String) {
    let Ok(response) = client.request(req).await else {
        return (0, String::new());
    };
    let status = response.status().as_u16();
    match response.into_body().collect().await {
        Ok(body) => (
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        ),
        Err(_) => (0, String::new()),
    }
}

/// A KServe v2 inference request body for model `m`: one FP32 tensor.
pub fn infer_body(i: usize) -> Bytes {
    let body = serde_json::json!({
        "id": format!("r{i}"),
        "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [i as f64, 1.5]}],
    });
    Bytes::from(body.to_string())
}
