//! One HTTP exchange with a simulated model server, for the sim's tests.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower_model_balance_sim::{protocol, ModelServer};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A bound so that a broken server fails the test instead of hanging it.
pub const BOUND: Duration = Duration::from_secs(10);

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Status, `x-sim-cold-load` header and body of a request to `server`.
pub async fn send(
    client: &HttpClient,
    server: &ModelServer,
    method: http::Method,
    path: &str,
    body: &str,
) -> (u16, Option<String>, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.addr()))
        .body(Full::from(body.to_owned()))
        .unwrap();
    let rsp = tokio::time::timeout(BOUND, client.request(req))
        .await
        .expect("answered in time")
        .unwrap();
    let status = rsp.status().as_u16();
    let cold = rsp
        .headers()
        .get(protocol::COLD_LOAD_HEADER)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    (status, cold, String::from_utf8(body.to_vec()).unwrap())
}
