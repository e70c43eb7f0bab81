//! What the circuit breaker layer counts, and when: classification of
//! statuses, gRPC statuses and errors, recording at the end of the body,
//! the slow-call clock's stop point and cold loads. Mock inner services,
//! paused time.

use crate::breaker as support;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;
use tokio::time::advance;
use tokio_test::assert_ready_ok;
use tower::Layer;
use tower_model_balance::breaker::{BreakerConfig, BreakerState, CircuitBreakerLayer};
use tower_model_balance::classify::StopPoint;
use tower_model_balance::classify::{
    Classify, GrpcErrorsAsFailures, Outcome, ServerErrorsAsFailures,
};
use tower_model_balance::error::BreakerOpen;
use tower_test::mock;

type Req = http::Request<()>;
type Rsp = http::Response<TestBody>;
type Frames = mpsc::UnboundedSender<Result<Frame<Bytes>, io::Error>>;

/// A body the test feeds frame by frame; it ends when its sender drops.
#[derive(Debug)]
struct TestBody {
    rx: mpsc::UnboundedReceiver<Result<Frame<Bytes>, io::Error>>,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.rx.poll_recv(cx)
    }
}

/// A response with `code`, `headers`, and a body the returned sender feeds.
fn response(code: u16, headers: &[(&str, &str)]) -> (Rsp, Frames) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut rsp = http::Response::builder().status(code);
    for (name, value) in headers {
        rsp = rsp.header(*name, *value);
    }
    (rsp.body(TestBody { rx }).unwrap(), tx)
}

fn data(tx: &Frames) {
    tx.send(Ok(Frame::data(Bytes::from_static(b"token"))))
        .unwrap();
}

/// Sends the trailers with `grpc_status`, which end the body.
fn trailers(tx: Frames, grpc_status: &str) {
    let mut map = http::HeaderMap::new();
    map.insert("grpc-status", grpc_status.parse().unwrap());
    tx.send(Ok(Frame::trailers(map))).unwrap();
}

/// Trips on two failures of the last four; one probe; open for 10 s.
fn policy() -> BreakerConfig {
    support::quick_trip().half_open_permits(1).build().unwrap()
}

type Svc<C> = mock::Spawn<tower_model_balance::breaker::CircuitBreaker<mock::Mock<Req, Rsp>, C>>;

fn spawn<C>(layer: CircuitBreakerLayer<C>) -> (Svc<C>, mock::Handle<Req, Rsp>)
where
    C: Classify<Rsp, tower::BoxError> + Clone,
{
    let (mock, mut handle) = mock::pair();
    handle.allow(100);
    (mock::Spawn::new(layer.layer(mock)), handle)
}

/// The request the last call sent; panics (rather than waiting forever)
/// if the breaker refused it.
fn sent(handle: &mut mock::Handle<Req, Rsp>) -> mock::SendResponse<Rsp> {
    match handle.poll_request() {
        Poll::Ready(Some((_, send))) => send,
        _ => panic!("the call was not sent: refused by the breaker?"),
    }
}

/// Sends one request and answers it with `rsp`; returns the response with
/// its body still unread.
async fn exchange<C>(
    svc: &mut Svc<C>,
    handle: &mut mock::Handle<Req, Rsp>,
    rsp: Rsp,
) -> http::Response<impl Body<Data = Bytes, Error = io::Error>>
where
    C: Classify<Rsp, tower::BoxError> + Clone,
{
    assert_ready_ok!(svc.poll_ready());
    let fut = svc.call(http::Request::new(()));
    sent(handle).send_response(rsp);
    fut.await.expect("a response")
}

/// Sends one request answered with `code` and an empty, ended body.
async fn status<C>(svc: &mut Svc<C>, handle: &mut mock::Handle<Req, Rsp>, code: u16)
where
    C: Classify<Rsp, tower::BoxError> + Clone,
{
    let (rsp, tx) = response(code, &[]);
    drop(tx);
    let rsp = exchange(svc, handle, rsp).await;
    rsp.into_body().collect().await.unwrap();
}

fn state<C>(svc: &Svc<C>) -> BreakerState {
    svc.get_ref().breaker().state()
}

/// Whether the next call is refused with `BreakerOpen`, touching nothing.
async fn refused<C>(svc: &mut Svc<C>) -> bool
where
    C: Classify<Rsp, tower::BoxError> + Clone,
{
    assert_ready_ok!(svc.poll_ready());
    match svc.call(http::Request::new(())).await {
        Err(e) => e.is::<BreakerOpen>(),
        Ok(_) => false,
    }
}

#[tokio::test(start_paused = true)]
async fn server_errors_fail_and_successes_do_not() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    for _ in 0..4 {
        status(&mut svc, &mut handle, 200).await;
    }
    assert_eq!(state(&svc), BreakerState::Closed);
    status(&mut svc, &mut handle, 503).await;
    status(&mut svc, &mut handle, 500).await;
    assert_eq!(state(&svc), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn overload_counts_for_the_rate_but_not_the_consecutive_trip() {
    // Consecutive trip only: the window's minimum is out of reach.
    let fast = BreakerConfig::builder()
        .window(100)
        .minimum_calls(100)
        .consecutive_failures(2)
        .build()
        .unwrap();
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(fast.clone()));
    for _ in 0..3 {
        status(&mut svc, &mut handle, 429).await;
    }
    assert_eq!(state(&svc), BreakerState::Closed, "429s are no outage");
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(fast));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 503).await;
    }
    assert_eq!(state(&svc), BreakerState::Open, "503s are");

    // The rate counts them.
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 429).await;
    }
    assert_eq!(state(&svc), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_client_error_returns_the_half_open_permit_without_closing() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 503).await;
    }
    advance(Duration::from_secs(10)).await;
    status(&mut svc, &mut handle, 404).await;
    assert_eq!(state(&svc), BreakerState::HalfOpen, "a 404 decides nothing");
    // The one probe permit came back: another probe may go, and decides.
    status(&mut svc, &mut handle, 200).await;
    assert_eq!(state(&svc), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_body_error_fails_a_200() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    for _ in 0..2 {
        let (rsp, tx) = response(200, &[]);
        let rsp = exchange(&mut svc, &mut handle, rsp).await;
        data(&tx);
        tx.send(Err(io::Error::other("connection reset"))).unwrap();
        assert!(rsp.into_body().collect().await.is_err());
    }
    assert_eq!(state(&svc), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_body_records_its_status() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    let mut senders = Vec::new();
    for _ in 0..2 {
        let (rsp, tx) = response(503, &[]);
        senders.push(tx); // the body never ends by itself
        drop(exchange(&mut svc, &mut handle, rsp).await);
    }
    assert_eq!(state(&svc), BreakerState::Open, "unread 503s still count");
}

#[tokio::test(start_paused = true)]
async fn an_open_body_keeps_the_probe_in_flight() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 503).await;
    }
    advance(Duration::from_secs(10)).await;
    let (rsp, tx) = response(200, &[]);
    let mut body = exchange(&mut svc, &mut handle, rsp).await.into_body();
    data(&tx);
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(state(&svc), BreakerState::HalfOpen, "still streaming");
    assert!(refused(&mut svc).await, "the probe's permit is still out");
    drop(tx);
    assert!(body.frame().await.is_none());
    assert_eq!(state(&svc), BreakerState::Closed, "the stream ended well");
}

#[tokio::test(start_paused = true)]
async fn grpc_status_in_the_headers_decides_a_trailers_only_response() {
    let layer = CircuitBreakerLayer::new(policy()).classifier(GrpcErrorsAsFailures::new());
    let (mut svc, mut handle) = spawn(layer);
    for _ in 0..2 {
        let (rsp, tx) = response(200, &[("grpc-status", "14")]);
        drop(tx);
        drop(exchange(&mut svc, &mut handle, rsp).await);
    }
    assert_eq!(state(&svc), BreakerState::Open, "UNAVAILABLE twice");
}

#[tokio::test(start_paused = true)]
async fn grpc_status_in_the_trailers_decides_at_the_end() {
    let layer = CircuitBreakerLayer::new(policy()).classifier(GrpcErrorsAsFailures::new());
    let (mut svc, mut handle) = spawn(layer);
    for code in ["0", "0", "5", "5"] {
        let (rsp, tx) = response(200, &[]);
        let rsp = exchange(&mut svc, &mut handle, rsp).await;
        data(&tx);
        trailers(tx, code);
        rsp.into_body().collect().await.unwrap();
    }
    assert_eq!(state(&svc), BreakerState::Closed, "OK and NOT_FOUND");
    for code in ["13", "4"] {
        let (rsp, tx) = response(200, &[]);
        let rsp = exchange(&mut svc, &mut handle, rsp).await;
        trailers(tx, code);
        rsp.into_body().collect().await.unwrap();
    }
    assert_eq!(
        state(&svc),
        BreakerState::Open,
        "INTERNAL, DEADLINE_EXCEEDED"
    );

    // A stream that ends without a status broke the protocol.
    let (mut svc, mut handle) =
        spawn(CircuitBreakerLayer::new(policy()).classifier(GrpcErrorsAsFailures::new()));
    for _ in 0..2 {
        let (rsp, tx) = response(200, &[]);
        let rsp = exchange(&mut svc, &mut handle, rsp).await;
        data(&tx);
        drop(tx);
        rsp.into_body().collect().await.unwrap();
    }
    assert_eq!(state(&svc), BreakerState::Open, "no grpc-status at all");
}

#[tokio::test(start_paused = true)]
async fn a_grpc_stream_dropped_before_its_trailers_is_a_cancellation() {
    let layer = CircuitBreakerLayer::new(policy()).classifier(GrpcErrorsAsFailures::new());
    let (mut svc, mut handle) = spawn(layer);
    for _ in 0..2 {
        status(&mut svc, &mut handle, 503).await;
    }
    advance(Duration::from_secs(10)).await;
    let (rsp, _tx) = response(200, &[]);
    drop(exchange(&mut svc, &mut handle, rsp).await);
    assert_eq!(state(&svc), BreakerState::HalfOpen, "counted nothing");
    // The permit came back: another probe goes, and decides.
    let (rsp, tx) = response(200, &[("grpc-status", "0")]);
    drop(tx);
    drop(exchange(&mut svc, &mut handle, rsp).await);
    assert_eq!(state(&svc), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn errors_fail_timeouts_included() {
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()));
    assert_ready_ok!(svc.poll_ready());
    let fut = svc.call(http::Request::new(()));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error(io::Error::from(io::ErrorKind::ConnectionRefused));
    assert!(fut.await.is_err());

    // A timeout below the breaker is an `Elapsed` error it counts.
    let (mock, mut handle2) = mock::pair::<Req, Rsp>();
    handle2.allow(1);
    let timed = tower::timeout::Timeout::new(mock, Duration::from_secs(1));
    let mut timed = mock::Spawn::new(CircuitBreakerLayer::new(policy()).layer(timed));
    assert_ready_ok!(timed.poll_ready());
    let fut = timed.call(http::Request::new(()));
    let _pending = handle2.next_request().await.unwrap();
    let err = fut.await.unwrap_err();
    assert!(err.is::<tower::timeout::error::Elapsed>());
    assert_eq!(timed.get_ref().breaker().stats().failures, 1);

    let (rsp, tx) = response(500, &[]);
    drop(tx);
    drop(exchange(&mut svc, &mut handle, rsp).await);
    assert_eq!(state(&svc), BreakerState::Open, "connection refused + 500");
}

#[tokio::test(start_paused = true)]
async fn closures_classify() {
    // This backend's 404 means "model not deployed here": a failure.
    let strict = |r: Result<&Rsp, &tower::BoxError>| match r {
        Ok(rsp) if rsp.status().is_success() => Outcome::Success,
        _ => Outcome::Failure,
    };
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()).classifier(strict));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 404).await;
    }
    assert_eq!(state(&svc), BreakerState::Open);

    // Chosen at run time, held as a trait object.
    let dynamic: Arc<
        dyn Classify<Rsp, tower::BoxError, Eos = std::convert::Infallible> + Send + Sync,
    > = Arc::new(ServerErrorsAsFailures::new());
    let (mut svc, mut handle) = spawn(CircuitBreakerLayer::new(policy()).classifier(dynamic));
    for _ in 0..2 {
        status(&mut svc, &mut handle, 502).await;
    }
    assert_eq!(state(&svc), BreakerState::Open);
}

// === slow calls: stop point and cold loads ===

/// Every timed call of at least `slow` is slow; half of the last four trip.
fn slow_policy(slow: Duration) -> BreakerConfig {
    BreakerConfig::builder()
        .window(4)
        .minimum_calls(2)
        .slow_call_duration(slow)
        .slow_call_rate_threshold(0.5)
        .jitter(false)
        .build()
        .unwrap()
}

/// Two calls, each 200 with its head at 1 s, its first frame at 3 s and
/// its end at 5 s after admission; whether they tripped the breaker.
async fn slow_trips(
    layer: CircuitBreakerLayer<impl Classify<Rsp, tower::BoxError> + Clone>,
    headers: &[(&str, &str)],
) -> bool {
    let (mut svc, mut handle) = spawn(layer);
    for _ in 0..2 {
        assert_ready_ok!(svc.poll_ready());
        let fut = svc.call(http::Request::new(()));
        let send = sent(&mut handle);
        advance(Duration::from_secs(1)).await;
        let (rsp, tx) = response(200, headers);
        send.send_response(rsp);
        let mut body = fut.await.unwrap().into_body();
        advance(Duration::from_secs(2)).await;
        data(&tx);
        body.frame().await.unwrap().unwrap();
        advance(Duration::from_secs(2)).await;
        drop(tx);
        assert!(body.frame().await.is_none());
    }
    state(&svc) == BreakerState::Open
}

#[tokio::test(start_paused = true)]
async fn each_stop_point_stops_the_clock_where_it_says() {
    let at = |stop, slow_ms| {
        CircuitBreakerLayer::new(slow_policy(Duration::from_millis(slow_ms))).stop_point(stop)
    };
    assert!(
        slow_trips(at(StopPoint::Headers, 500), &[]).await,
        "1 s ≥ 0.5 s"
    );
    assert!(
        !slow_trips(at(StopPoint::Headers, 2_000), &[]).await,
        "1 s < 2 s"
    );
    assert!(
        slow_trips(at(StopPoint::FirstFrame, 2_000), &[]).await,
        "3 s ≥ 2 s"
    );
    assert!(
        !slow_trips(at(StopPoint::FirstFrame, 4_000), &[]).await,
        "3 s < 4 s"
    );
    assert!(
        slow_trips(at(StopPoint::EndOfBody, 4_000), &[]).await,
        "5 s ≥ 4 s"
    );
    assert!(
        !slow_trips(at(StopPoint::EndOfBody, 6_000), &[]).await,
        "5 s < 6 s"
    );
    // The default is the first frame.
    let default = CircuitBreakerLayer::new(slow_policy(Duration::from_millis(2_000)));
    assert!(slow_trips(default, &[]).await);
    let default = CircuitBreakerLayer::new(slow_policy(Duration::from_millis(4_000)));
    assert!(!slow_trips(default, &[]).await);
}

#[tokio::test(start_paused = true)]
async fn a_cold_load_is_never_a_slow_call() {
    let cold = [("x-model-cold-load", "1")];
    let layer = || {
        CircuitBreakerLayer::new(slow_policy(Duration::from_secs(2)))
            .cold_load(|rsp: &Rsp| rsp.headers().contains_key("x-model-cold-load"))
    };
    // Debug without the predicate being Debug.
    assert!(format!("{:?}", layer()).contains("ColdLoad"));
    assert!(slow_trips(layer(), &[]).await, "warm and slow");
    assert!(!slow_trips(layer(), &cold).await, "cold: loading, not slow");
}
