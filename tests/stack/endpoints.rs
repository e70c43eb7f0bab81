//! `SetOrigin` over a real socket: the backend sees its own `Host`, not the
//! gateway's, and no hop-by-hop header of the client's connection; and the
//! pure header logic of `strip_hop_by_hop`.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Layer, ServiceExt};
use tower_model_balance::endpoint::{strip_hop_by_hop, Origin, SetOrigin};
use tower_model_balance::route::{ModelFromBodyLayer, RouteInfo};

/// A backend on 127.0.0.1 that answers with the headers it received, one
/// `name: value` line each, in order.
async fn echo_headers() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|req: http::Request<_>| async move {
                let lines: String = req
                    .headers()
                    .iter()
                    .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?")))
                    .collect();
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(lines))))
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

/// The headers the backend saw, as `(name, value)` pairs.
fn seen(text: &str) -> Vec<(&str, &str)> {
    text.lines().filter_map(|l| l.split_once(": ")).collect()
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

#[tokio::test]
async fn the_backend_sees_its_own_host_not_the_gateways() {
    let addr = echo_headers().await;
    let endpoint = SetOrigin::to(client(), Origin::http(addr));
    let req = http::Request::get("/v2/health/ready")
        .header("host", "gateway.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = endpoint.oneshot(req).await.unwrap();
    let text = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(text.to_vec()).unwrap();
    let hosts: Vec<_> = seen(&text)
        .into_iter()
        .filter(|(k, _)| *k == "host")
        .collect();
    assert_eq!(hosts, [("host", &*addr.to_string())], "{text}");
}

#[tokio::test]
async fn hop_by_hop_and_client_routing_headers_do_not_reach_the_backend() {
    let addr = echo_headers().await;
    let endpoint = SetOrigin::to(client(), Origin::http(addr));
    let route = ModelFromBodyLayer::builder()
        .strip_routing_headers(true)
        .build()
        .unwrap();
    // The backend's echo, behind the route layer: what it saw, and the
    // route the balancer would have read.
    let stack = route.layer(tower::service_fn(move |req: http::Request<Full<Bytes>>| {
        let route = req.extensions().get::<RouteInfo>().cloned();
        let call = endpoint.clone().oneshot(req);
        async move {
            let text = call.await?.into_body().collect().await?.to_bytes();
            Ok::<_, tower::BoxError>((route, String::from_utf8(text.to_vec())?))
        }
    }));
    let body = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    let req = http::Request::post("/v1/completions")
        .header("host", "gateway.example")
        .header("connection", "keep-alive, x-hop")
        .header("keep-alive", "timeout=5")
        .header("x-hop", "1")
        .header("upgrade", "h2c")
        .header("proxy-connection", "keep-alive")
        .header("x-model-id", "evil")
        .header("x-urgency", "critical")
        .header("x-request-kind", "update")
        .header("x-end-to-end", "kept")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (route, text) = stack.oneshot(req).await.unwrap();
    let route = route.expect("the route layer stored the body's route");
    assert_eq!(route.model.as_str(), "llama-3-8b");
    let mut expected = RouteInfo::new(route.model.clone());
    expected.payload_bytes = Some(body.len() as u64);
    assert_eq!(route, expected);
    let names: Vec<&str> = seen(&text).into_iter().map(|(k, _)| k).collect();
    for gone in [
        "keep-alive",
        "x-hop",
        "upgrade",
        "proxy-connection",
        "x-model-id",
        "x-urgency",
        "x-request-kind",
    ] {
        assert!(
            !names.contains(&gone),
            "{gone} reached the backend:\n{text}"
        );
    }
    assert!(names.contains(&"x-end-to-end"), "{text}");
    assert!(text.contains(&format!("host: {addr}\n")), "{text}");
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.append(*name, HeaderValue::from_static(value));
    }
    headers
}

fn names(headers: &HeaderMap) -> Vec<String> {
    let mut names: Vec<_> = headers.keys().map(|k| k.to_string()).collect();
    names.sort_unstable();
    names
}

#[test]
fn connection_and_the_headers_it_names_are_removed() {
    let mut h = headers(&[
        ("connection", "close, x-foo"),
        ("connection", "X-Bar"),
        ("x-foo", "1"),
        ("x-bar", "2"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("content-type", "application/json"),
        ("content-length", "12"),
    ]);
    strip_hop_by_hop(&mut h);
    assert_eq!(names(&h), ["content-length", "content-type"]);
}

#[test]
fn te_trailers_is_kept_for_grpc_and_other_codings_are_not() {
    let mut h = headers(&[("te", "trailers"), ("content-type", "application/grpc")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h["te"], "trailers");

    let mut h = headers(&[("te", "gzip;q=0.5, Trailers")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);

    let mut h = headers(&[("te", "gzip, deflate")]);
    strip_hop_by_hop(&mut h);
    assert!(h.is_empty(), "{h:?}");
}

#[test]
fn bad_connection_values_are_skipped_not_fatal() {
    let mut h = HeaderMap::new();
    h.insert(
        "connection",
        HeaderValue::from_bytes(b"\xff, x-a, , bad name").unwrap(),
    );
    h.insert("x-a", HeaderValue::from_static("1"));
    h.insert("x-b", HeaderValue::from_static("2"));
    strip_hop_by_hop(&mut h);
    // Not text: nothing it names is read, but it goes itself.
    assert_eq!(names(&h), ["x-a", "x-b"]);

    let mut h = headers(&[
        ("connection", "x-a, , bad name"),
        ("x-a", "1"),
        ("x-b", "2"),
    ]);
    strip_hop_by_hop(&mut h);
    assert_eq!(names(&h), ["x-b"]);
}

#[test]
fn each_hop_by_hop_header_alone_is_removed() {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
    ] {
        let mut h = headers(&[(name, "x"), ("content-type", "application/json")]);
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["content-type"], "{name} alone");
    }
}
