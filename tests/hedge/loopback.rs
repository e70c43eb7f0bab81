//! Cancellation reaches the backend: over real HTTP/1 servers on loopback,
//! behind the balancer and a hyper-util client, the backup wins and the
//! server sees the first attempt's request aborted (its handler dropped
//! when the client closes the connection). Driven by the servers' events,
//! never by sleeping.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tower::discover::ServiceList;
use tower::{ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId, Exclude};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::endpoint::SetOrigin;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance::route::ModelId;

/// What a server reports.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A first attempt arrived and is held.
    Held,
    /// A held request's handler was dropped before answering.
    Aborted,
}

/// Reports [`Event::Aborted`] when dropped.
struct OnDrop(mpsc::UnboundedSender<Event>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Event::Aborted);
    }
}

/// A server that holds every request without `x-backup` forever and
/// answers the others at once.
async fn server(events: mpsc::UnboundedSender<Event>) -> SocketAddr {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let events = events.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let events = events.clone();
                    async move {
                        let backup = req.headers().contains_key("x-backup");
                        let _ = req.into_body().collect().await;
                        if !backup {
                            let _ = events.send(Event::Held);
                            let _guard = OnDrop(events);
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The server's next event, failing (not hanging) after 10 s.
async fn next(seen: &mut mpsc::UnboundedReceiver<Event>) -> Option<Event> {
    tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("the server reports within 10 s")
}

#[tokio::test]
async fn the_losing_attempt_is_aborted_at_the_server() {
    let (events, mut seen) = mpsc::unbounded_channel();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let model = ModelId::new("llama").unwrap();
    let mut backends = Vec::new();
    for i in 0..2 {
        let addr = server(events.clone()).await;
        let endpoint = SetOrigin::new(client.clone(), &format!("http://{addr}")).unwrap();
        backends.push(Backend::new(
            BackendId::new(&format!("node-{i}")).unwrap(),
            endpoint,
        ));
    }
    drop(events);
    let balancer =
        ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default()).unwrap();
    for i in 0..2 {
        let id = BackendId::new(&format!("node-{i}")).unwrap();
        balancer.handle().set_resident_models(&id, [&model]);
    }
    let policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(20))
        .ceiling(Duration::from_millis(20))
        .budget_ratio(1.0)
        .build()
        .unwrap();
    let layer = HedgeLayer::new(policy);
    let hedges = layer.handle();
    // Marks the backup on the wire, so the servers tell the attempts apart.
    let mark = |mut req: http::Request<Full<Bytes>>| {
        if req.extensions().get::<Exclude>().is_some() {
            req.headers_mut()
                .insert("x-backup", http::HeaderValue::from_static("1"));
        }
        req
    };
    let stack = ServiceBuilder::new()
        .layer(layer)
        .map_request(mark)
        .service(balancer.clone());

    let request = http::Request::post("/v2/models/llama/infer")
        .header("x-model-id", "llama")
        .body(Full::from("{}"))
        .unwrap();
    let response = stack.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
    assert_eq!(hedges.stats().hedges_won, 1);

    // The first attempt was held at its server; once the backup won, its
    // connection was closed and the server dropped the request.
    assert_eq!(next(&mut seen).await, Some(Event::Held));
    assert_eq!(next(&mut seen).await, Some(Event::Aborted));
    assert_eq!(
        balancer.handle().in_flight(),
        0,
        "the loser's slot is released"
    );
}
