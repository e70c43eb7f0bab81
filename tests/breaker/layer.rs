//! The circuit breaker as a `Service`, over mock inner services and paused
//! time.

use crate::breaker as support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use tokio_test::{assert_pending, assert_ready_ok};
use tower::{Service, ServiceExt};
use tower_model_balance::breaker::{
    BreakerConfig, BreakerState, CircuitBreaker, CircuitBreakerLayer, ResponseBody,
};
use tower_model_balance::classify::ServerErrorsAsFailures;
use tower_model_balance::error::BreakerOpen;
use tower_test::mock;

use support::{status, Rsp};

type Req = http::Request<()>;
type Out = http::Response<ResponseBody<Empty<Bytes>, Infallible>>;

fn policy() -> BreakerConfig {
    support::quick_trip().half_open_permits(1).build().unwrap()
}

type Breaker = CircuitBreaker<mock::Mock<Req, Rsp>, ServerErrorsAsFailures>;

fn new_service() -> (mock::Spawn<Breaker>, mock::Handle<Req, Rsp>) {
    mock::spawn_layer(CircuitBreakerLayer::new(policy()))
}

/// Sends one request through `svc`, answering it with `code`.
async fn exchange(
    svc: &mut mock::Spawn<impl Service<Req, Response = Out, Error = tower::BoxError>>,
    handle: &mut mock::Handle<Req, Rsp>,
    code: u16,
) -> Result<Out, tower::BoxError> {
    assert_ready_ok!(svc.poll_ready());
    let fut = svc.call(http::Request::new(()));
    if let Some((_, send)) = handle.next_request().await {
        send.send_response(status(code));
    }
    fut.await
}

async fn trip(
    svc: &mut mock::Spawn<impl Service<Req, Response = Out, Error = tower::BoxError>>,
    handle: &mut mock::Handle<Req, Rsp>,
) {
    handle.allow(2);
    for _ in 0..2 {
        assert_eq!(exchange(svc, handle, 503).await.unwrap().status(), 503);
    }
}

#[tokio::test(start_paused = true)]
async fn open_breaker_stays_ready_and_fails_fast_without_touching_inner() {
    let (mut svc, mut handle) = new_service();
    trip(&mut svc, &mut handle).await;
    assert_eq!(svc.get_ref().breaker().state(), BreakerState::Open);
    // The inner service is not ready, yet the open breaker is: it sheds.
    handle.allow(0);
    assert_ready_ok!(svc.poll_ready());
    let err = svc.call(http::Request::new(())).await.unwrap_err();
    let open = err.downcast_ref::<BreakerOpen>().expect("BreakerOpen");
    assert_eq!(open.retry_after, Duration::from_secs(10));
    assert!(
        handle.poll_request().is_pending(),
        "nothing reached the inner service"
    );
}

#[tokio::test(start_paused = true)]
async fn closed_breaker_waits_for_inner_readiness() {
    let (mut svc, mut handle) = new_service();
    handle.allow(0);
    assert_pending!(svc.poll_ready());
    handle.allow(1);
    assert_ready_ok!(svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn never_calls_an_inner_service_it_did_not_drive_ready() {
    let (mut svc, mut handle) = new_service();
    trip(&mut svc, &mut handle).await;
    // Ready because open (shed); the open duration then passes before call.
    assert_ready_ok!(svc.poll_ready());
    tokio::time::advance(Duration::from_secs(11)).await;
    let err = svc.call(http::Request::new(())).await.unwrap_err();
    assert!(err.is::<BreakerOpen>());
    assert!(
        handle.poll_request().is_pending(),
        "the unready inner service was not called"
    );
    // The probe permit came back: the next, properly readied call probes.
    handle.allow(1);
    assert_eq!(
        exchange(&mut svc, &mut handle, 200).await.unwrap().status(),
        200
    );
    assert_eq!(svc.get_ref().breaker().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_gives_its_permit_back() {
    let (mut svc, mut handle) = new_service();
    trip(&mut svc, &mut handle).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    handle.allow(2);
    assert_ready_ok!(svc.poll_ready());
    let probe = svc.call(http::Request::new(()));
    let _ = handle.next_request().await.expect("the probe was sent");
    // With its one permit out, half-open refuses a second call.
    assert_ready_ok!(svc.poll_ready());
    assert!(svc
        .call(http::Request::new(()))
        .await
        .unwrap_err()
        .is::<BreakerOpen>());
    drop(probe);
    assert_eq!(
        exchange(&mut svc, &mut handle, 200).await.unwrap().status(),
        200
    );
    assert_eq!(svc.get_ref().breaker().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn failed_probe_reopens_and_client_errors_are_ignored() {
    let (mut svc, mut handle) = new_service();
    handle.allow(10);
    for _ in 0..6 {
        assert_eq!(
            exchange(&mut svc, &mut handle, 404).await.unwrap().status(),
            404
        );
    }
    assert_eq!(
        svc.get_ref().breaker().state(),
        BreakerState::Closed,
        "4xx say nothing about the backend"
    );
    trip(&mut svc, &mut handle).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    handle.allow(1);
    exchange(&mut svc, &mut handle, 500).await.unwrap();
    assert_eq!(svc.get_ref().breaker().state(), BreakerState::Open);
    assert_eq!(svc.get_ref().breaker().stats().trips, 2);
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_breaker_and_new_layers_do_not() {
    let layer = CircuitBreakerLayer::new(policy());
    let failing = tower::service_fn(|_: Req| async { Ok::<_, std::io::Error>(status(503)) });
    let mut a = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .service(failing);
    let b = a.clone();
    let other = tower::ServiceBuilder::new().layer(layer).service(failing);
    for _ in 0..2 {
        a.ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
    }
    assert_eq!(
        b.breaker().state(),
        BreakerState::Open,
        "tripped through a clone"
    );
    assert_eq!(
        other.breaker().state(),
        BreakerState::Closed,
        "a new layered service, a new breaker"
    );
}

/// Successes recorded while the window is full of successes skip the lock;
/// the failures that follow must still count, over the whole window.
#[tokio::test(start_paused = true)]
async fn a_window_full_of_successes_still_counts_the_failures_after_it() {
    use tower_model_balance::breaker::Breaker as Shared;
    use tower_model_balance::classify::Outcome;
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(4)
        .failure_rate_threshold(0.5)
        .build()
        .unwrap();
    let breaker = Shared::new(policy);
    for _ in 0..8 {
        breaker.try_acquire().unwrap().record(Outcome::Success);
    }
    // Caller errors while closed change nothing either.
    breaker.try_acquire().unwrap().record(Outcome::Ignored);
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert_eq!(breaker.state(), BreakerState::Closed, "1 of 4 failed");
    breaker.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(breaker.state(), BreakerState::Closed, "1 of 4 failed");
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "2 of the last 4 failed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_half_open_breaker_with_every_probe_out_does_not_admit() {
    use tower_model_balance::breaker::Breaker as Shared;
    use tower_model_balance::classify::Outcome;

    let breaker = Shared::new(policy());
    for _ in 0..2 {
        breaker.try_acquire().unwrap().record(Outcome::Failure);
    }
    let now = tokio::time::Instant::now;
    assert!(!breaker.admits_at(now()), "open");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(
        breaker.admits_at(now()),
        "its open time is up: a probe may go"
    );
    let probe = breaker.try_acquire().expect("the one probe");
    assert!(!breaker.admits_at(now()), "the only probe is out");
    assert!(breaker.try_acquire().is_err());
    drop(probe); // cancelled: the permit comes back
    assert!(breaker.admits_at(now()));
    breaker.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(breaker.admits_at(now()));
}

#[tokio::test(start_paused = true)]
async fn the_layer_reports_its_breakers_transitions_to_its_hook() {
    use std::sync::{Arc, Mutex};
    use tower_model_balance::breaker::{Reason, Transition};

    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let layer = CircuitBreakerLayer::new(policy())
        .on_transition(move |t: &Transition| log.lock().unwrap().push((t.to, t.reason)));
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Rsp, _>(layer);
    trip(&mut svc, &mut handle).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [(BreakerState::Open, Reason::FailureRate)]
    );
}

/// A fresh breaker and the body of the response to one call through it,
/// over a service answering the body `make` builds.
async fn body_through_breaker<B>(
    make: impl Fn() -> B + Clone + Send + 'static,
) -> (
    tower_model_balance::breaker::Breaker,
    impl http_body::Body<Data = Bytes, Error = B::Error>,
)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    use tower_model_balance::breaker::{Breaker, BreakerConfig, CircuitBreaker};
    use tower_model_balance::classify::ServerErrorsAsFailures;

    let breaker = Breaker::new(BreakerConfig::default());
    let inner = tower::service_fn(move |_req: http::Request<()>| {
        let body = make();
        async move { Ok::<_, Infallible>(http::Response::new(body)) }
    });
    let service = CircuitBreaker::new(inner, breaker.clone(), ServerErrorsAsFailures::default());
    let response = service.oneshot(http::Request::new(())).await.unwrap();
    (breaker, response.into_body())
}

/// The breaker's response body passes the inner body's end and size on,
/// and settles the call on the frame that ends the body, before the
/// caller polls again.
#[tokio::test(start_paused = true)]
async fn the_response_body_reports_its_end_and_size_and_settles_on_its_last_frame() {
    use http_body::Body as _;
    use http_body_util::{BodyExt, Full};

    let (breaker, body) = body_through_breaker(|| Full::new(Bytes::from_static(b"hello"))).await;
    let mut body = std::pin::pin!(body);
    assert_eq!(body.size_hint().exact(), Some(5), "the inner body's size");
    assert!(!body.is_end_stream(), "a frame is left");
    assert_eq!(
        breaker.stats().calls,
        0,
        "not settled before the body is read"
    );
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "hello");
    assert!(body.is_end_stream(), "the only frame was read");
    assert_eq!(
        breaker.stats().calls,
        1,
        "settled on the frame that ended the body, without another poll"
    );
}

/// A body that fails after its first frame is a failure: the call is not
/// settled on a frame that does not end the body.
#[tokio::test(start_paused = true)]
async fn a_body_failing_after_its_first_frame_is_a_failure() {
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    let (breaker, body) = body_through_breaker(|| {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"partial"))),
            Err(std::io::Error::other("connection reset")),
        ];
        StreamBody::new(futures_util::stream::iter(frames))
    })
    .await;
    let mut body = std::pin::pin!(body);
    assert!(body.frame().await.unwrap().is_ok(), "the first frame");
    assert_eq!(
        breaker.stats().calls,
        0,
        "not settled on a frame that does not end the body"
    );
    assert!(body.frame().await.unwrap().is_err(), "then the error");
    let metrics = breaker.stats();
    assert_eq!(
        (metrics.calls, metrics.failures),
        (1, 1),
        "settled as a failure"
    );
}

/// A service counting its calls, always ready, answering 200.
fn counted() -> (
    impl Service<http::Request<()>, Response = http::Response<Empty<Bytes>>, Error = Infallible> + Clone,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let service = tower::service_fn(move |_req: http::Request<()>| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok::<_, Infallible>(http::Response::new(Empty::new())) }
    });
    (service, calls)
}

/// `with_when_open` forgets a readiness obtained before: the call that
/// follows without `poll_ready` is refused, never sent to a service that
/// was not driven ready under the new mode.
#[tokio::test(start_paused = true)]
async fn with_when_open_forgets_readiness_and_reservations() {
    use std::future::poll_fn;
    use std::sync::atomic::Ordering;
    use tower_model_balance::breaker::{Breaker, WhenOpen};

    for (before, after) in [
        (WhenOpen::FailFast, WhenOpen::FailFast),
        (WhenOpen::Backpressure, WhenOpen::Backpressure),
    ] {
        let (inner, calls) = counted();
        let breaker = Breaker::new(BreakerConfig::default());
        let mut service = CircuitBreaker::new(inner, breaker, ServerErrorsAsFailures::default())
            .with_when_open(before);
        poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        let mut service = service.with_when_open(after);
        let result = service.call(http::Request::new(())).await;
        assert!(result.is_err(), "{before:?} → {after:?}: refused");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "{before:?}: nothing sent");
    }
}

/// A backpressure service ready (its permit reserved) stays ready when
/// polled again: it does not reserve a second permit, which a half-open
/// breaker with one permit would not have.
#[tokio::test(start_paused = true)]
async fn a_reserved_backpressure_service_stays_ready_when_polled_again() {
    use tower_model_balance::breaker::{Breaker, WhenOpen};
    use tower_model_balance::classify::Outcome;

    const OPEN: Duration = Duration::from_secs(5);
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(2)
        .half_open_permits(1)
        .open_duration(OPEN)
        .jitter(false)
        .build()
        .unwrap();
    let breaker = Breaker::new(policy.clone());
    for _ in 0..2 {
        breaker.try_acquire().unwrap().record(Outcome::Failure);
    }
    tokio::time::advance(OPEN).await;
    let (inner, _) = counted();
    let mut service =
        CircuitBreaker::new(inner, breaker.clone(), ServerErrorsAsFailures::default())
            .with_when_open(WhenOpen::Backpressure);
    let mut ready = tokio_test::task::spawn(());
    assert_ready_ok!(ready.enter(|cx, _| service.poll_ready(cx)));
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert_ready_ok!(
        ready.enter(|cx, _| service.poll_ready(cx)),
        "still ready on its one reserved permit"
    );
}
