//! The breaker and the balancer around a service that is not HTTP: a
//! line protocol over TCP on loopback, its requests and replies plain
//! structs. The balancer reads the route through `route::Routable`, and
//! both record outcomes when the reply arrives (`AtResponse`), classified
//! by a closure over `Result<&Reply, &Error>`.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tower::discover::ServiceList;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::error::{BreakerOpen, InvalidRoute};
use tower_model_balance::hedge::{CloneRequest, HedgeConfig, HedgeLayer};
use tower_model_balance::route::{ModelId, Routable, Route, RouteInfo};

/// A request of the line protocol: the model, then the input.
#[derive(Debug, Clone)]
struct Infer {
    route: RouteInfo,
    input: String,
}

impl Infer {
    fn new(model: &str, input: &str) -> Self {
        let model = ModelId::new(model).expect("a valid model ID");
        Self {
            route: RouteInfo::new(model),
            input: input.to_string(),
        }
    }
}

impl Routable for Infer {
    fn route(&self) -> Result<Route<'_>, InvalidRoute> {
        Ok(Route::from(&self.route))
    }
}

impl CloneRequest for Infer {
    fn clone_request(&self) -> Option<Self> {
        Some(self.clone())
    }

    fn route(&self) -> Option<Route<'_>> {
        Some(Route::from(&self.route))
    }
}

/// A reply: `ok <server> <input>` or `busy`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ok { server: String },
    Busy,
}

/// A server of the line protocol on 127.0.0.1, port 0, named `name`; it
/// closes connections without a reply while `down` is set.
async fn server(name: &'static str, down: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let down = down.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_err() {
                    return;
                }
                if down.load(Ordering::SeqCst) {
                    return; // Hangs up: the client reads an empty reply.
                }
                let reply = match line.trim().split_once(' ') {
                    Some((_, "busy")) => "busy\n".to_string(),
                    Some((_, input)) => format!("ok {name} {input}\n"),
                    None => "busy\n".to_string(),
                };
                let _ = write.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// The client: one connection per request.
#[derive(Debug, Clone)]
struct LineClient(SocketAddr);

impl Service<Infer> for LineClient {
    type Response = Reply;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Infer) -> Self::Future {
        let addr = self.0;
        Box::pin(async move {
            let mut stream = TcpStream::connect(addr).await?;
            let line = format!("{} {}\n", req.route.model, req.input);
            stream.write_all(line.as_bytes()).await?;
            let mut reply = String::new();
            BufReader::new(stream).read_line(&mut reply).await?;
            let mut words = reply.split_whitespace();
            match (words.next(), words.next()) {
                (Some("ok"), Some(server)) => Ok(Reply::Ok {
                    server: server.to_string(),
                }),
                (Some("busy"), _) => Ok(Reply::Busy),
                _ => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server hung up",
                )),
            }
        })
    }
}

/// The classifier: an error fails, `busy` is an overload.
fn classify(result: Result<&Reply, &std::io::Error>) -> Outcome {
    match result {
        Ok(Reply::Ok { .. }) => Outcome::Success,
        Ok(Reply::Busy) => Outcome::Overload,
        Err(_) => Outcome::Failure,
    }
}

#[tokio::test]
async fn the_breaker_alone_trips_on_a_line_protocol_servers_failures() {
    let down = Arc::new(AtomicBool::new(true));
    let addr = server("gpu-0", down.clone()).await;
    let config = BreakerConfig::builder()
        .window(4)
        .minimum_calls(4)
        .build()
        .expect("a valid config");
    let breaker = CircuitBreakerLayer::new(config)
        .classifier(classify)
        .at_response()
        .layer(LineClient(addr));

    for _ in 0..4 {
        let result = breaker.clone().oneshot(Infer::new("resnet", "x")).await;
        let error = result.expect_err("the server hangs up");
        assert!(error.is::<std::io::Error>(), "{error}");
    }
    let error = breaker
        .clone()
        .oneshot(Infer::new("resnet", "x"))
        .await
        .expect_err("open");
    assert!(error.is::<BreakerOpen>(), "{error}");

    // A closed breaker hands the reply on, unchanged.
    down.store(false, Ordering::SeqCst);
    let fresh = CircuitBreakerLayer::new(BreakerConfig::default())
        .classifier(classify)
        .at_response()
        .layer(LineClient(addr));
    let reply = fresh.oneshot(Infer::new("resnet", "x")).await.expect("ok");
    assert_eq!(
        reply,
        Reply::Ok {
            server: "gpu-0".into()
        }
    );
}

#[tokio::test]
async fn the_balancer_routes_a_line_protocol_by_model_and_ejects_a_failing_server() {
    let names = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"];
    let mut downs = HashMap::new();
    let mut backends = Vec::new();
    for name in names {
        let down = Arc::new(AtomicBool::new(false));
        let addr = server(name, down.clone()).await;
        downs.insert(name.to_string(), down);
        let id = BackendId::new(name).expect("a valid ID");
        backends.push(Backend::new(id, LineClient(addr)));
    }
    let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())
        .expect("inside a runtime")
        .at_response(classify);
    let handle = balancer.handle();

    // Affinity: one model stays on one server while it is light.
    let mut served = Vec::new();
    for i in 0..8 {
        let req = Infer::new("resnet-50", &i.to_string());
        match balancer.clone().oneshot(req).await.expect("served") {
            Reply::Ok { server } => served.push(server),
            Reply::Busy => panic!("no server is busy"),
        }
    }
    let owner = served[0].clone();
    assert!(served.iter().all(|s| *s == owner), "{served:?}");
    assert_eq!(handle.in_flight(), 0, "every reply recorded at once");

    // The owner goes down: its failures trip its breaker, and the model
    // moves to another server without a failed request after that.
    downs[&owner].store(true, Ordering::SeqCst);
    let mut failures = 0;
    let mut after = Vec::new();
    for i in 0..40 {
        match balancer
            .clone()
            .oneshot(Infer::new("resnet-50", &i.to_string()))
            .await
        {
            Ok(Reply::Ok { server }) => after.push(server),
            Ok(Reply::Busy) => panic!("no server is busy"),
            Err(_) if after.is_empty() => failures += 1,
            Err(error) => panic!("failed after the move: {error}"),
        }
    }
    assert!(
        failures > 0,
        "the owner's hang-ups reached the caller first"
    );
    assert!(!after.is_empty(), "the model moved");
    assert!(after.iter().all(|s| *s != owner), "{after:?}");
    let id = BackendId::new(&owner).expect("a valid ID");
    let trips = handle.breaker(&id).expect("known").stats().trips;
    assert!(trips >= 1, "the owner's breaker opened");
}

/// A server that never answers the first request whose input is `hold`
/// (a hung attempt) and answers every other at once.
async fn hangs_once(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let held = Arc::new(AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let held = held.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let _ = BufReader::new(read).read_line(&mut line).await;
                if line.trim().ends_with(" hold") && !held.swap(true, Ordering::SeqCst) {
                    std::future::pending::<()>().await; // Never answers.
                }
                let _ = write.write_all(format!("ok {name} x\n").as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn the_hedge_alone_answers_a_hung_line_protocol_call_with_its_backup() {
    let addr = hangs_once("gpu-0").await;
    // The backup goes at most 20 ms after the first attempt (the ceiling)
    // once 20 answers were seen, within 5% of the requests.
    let config = HedgeConfig::builder()
        .ceiling(std::time::Duration::from_millis(20))
        .build()
        .expect("a valid config");
    let layer =
        HedgeLayer::new(config).classify(|result: Result<&Reply, &tower::BoxError>| match result {
            Ok(Reply::Ok { .. }) => Outcome::Success,
            Ok(Reply::Busy) => Outcome::Overload,
            Err(_) => Outcome::Failure,
        });
    let hedges = layer.handle();
    let hedged = layer.layer(LineClient(addr));
    // Answers until the model's delay is known (20 samples, its
    // percentile read again every 100 ms): bounded by a count, not a sleep.
    let model = tower_model_balance::route::ModelId::new("resnet").expect("an ID");
    for i in 0..100_000 {
        if i >= 20 && hedges.delay(&model).is_some() {
            break;
        }
        let req = Infer::new("resnet", &i.to_string());
        hedged.clone().oneshot(req).await.expect("answered");
    }
    assert!(hedges.delay(&model).is_some(), "the delay is known");
    assert_eq!(hedges.stats().hedges, 0, "fast answers are not hedged");
    // A guard against a hang, not a timing: the backup answers at once.
    let call = hedged.oneshot(Infer::new("resnet", "hold"));
    let reply = tokio::time::timeout(std::time::Duration::from_secs(30), call)
        .await
        .expect("no hang: the backup answers")
        .expect("the backup's reply");
    assert_eq!(
        reply,
        Reply::Ok {
            server: "gpu-0".into()
        }
    );
    let stats = hedges.stats();
    assert_eq!((stats.hedges, stats.hedges_won), (1, 1), "{stats:?}");
}
