//! The circuit breaker's backpressure mode: `Pending` while open, woken
//! when probes may go, a permit reserved in `poll_ready` for one round; and
//! under tower's own P2C balancer. Mock inner services and paused time.

use crate::breaker as support;

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready_ok};
use tower::{Service, ServiceExt};
use tower_model_balance::breaker::{
    Breaker, BreakerConfig, BreakerState, CircuitBreaker, Mode, WhenOpen,
};
use tower_model_balance::classify::{Outcome, ServerErrorsAsFailures};
use tower_model_balance::error::{BreakerOpen, NotReady};
use tower_test::mock;

use support::{status, Rsp};

type Req = http::Request<()>;
type Svc = CircuitBreaker<mock::Mock<Req, Rsp>, ServerErrorsAsFailures>;

/// The open duration of [`support::quick_trip`].
const OPEN: Duration = Duration::from_secs(10);
const ROUND: Duration = Duration::from_secs(5);
const MS: Duration = Duration::from_millis(1);

fn policy(permits: u32) -> BreakerConfig {
    support::quick_trip()
        .half_open_permits(permits)
        .half_open_max_wait(ROUND)
        .build()
        .unwrap()
}

/// A backpressure service over a mock, with its breaker.
fn service(permits: u32) -> (mock::Spawn<Svc>, mock::Handle<Req, Rsp>, Breaker) {
    let (inner, handle) = mock::pair();
    let breaker = Breaker::new(policy(permits));
    let svc = CircuitBreaker::new(inner, breaker.clone(), ServerErrorsAsFailures::new())
        .with_when_open(WhenOpen::Backpressure);
    (mock::Spawn::new(svc), handle, breaker)
}

/// Another service over the same mock and breaker, holding no reservation.
fn clone(svc: &mock::Spawn<Svc>) -> mock::Spawn<Svc> {
    mock::Spawn::new(svc.get_ref().clone())
}

fn trip(breaker: &Breaker) {
    for _ in 0..2 {
        breaker.try_acquire().unwrap().record(Outcome::Failure);
    }
    assert_eq!(breaker.state(), BreakerState::Open);
}

/// Two services over one mock (letting two requests through) and one
/// breaker with `permits` probe permits, tripped and just half-open.
async fn half_open_pair(
    permits: u32,
) -> (
    mock::Spawn<Svc>,
    mock::Spawn<Svc>,
    mock::Handle<Req, Rsp>,
    Breaker,
) {
    let (a, mut handle, breaker) = service(permits);
    handle.allow(2);
    let b = clone(&a);
    trip(&breaker);
    advance(OPEN).await;
    (a, b, handle, breaker)
}

fn is_open(err: tower::BoxError) -> bool {
    err.is::<BreakerOpen>()
}

#[tokio::test(start_paused = true)]
async fn pending_while_open_and_woken_exactly_when_half_open_begins() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    assert_pending!(svc.poll_ready());
    advance(OPEN - MS).await;
    assert!(!svc.is_woken(), "no wake before the open duration ends");
    assert_pending!(svc.poll_ready());
    advance(MS).await;
    assert!(svc.is_woken(), "woken when probes may go");
    assert_ready_ok!(svc.poll_ready());
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert!(!breaker.admits(), "the one probe is reserved");
}

#[tokio::test(start_paused = true)]
async fn rearmed_when_the_open_duration_changes() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    assert_pending!(svc.poll_ready());
    // Another caller probes and fails: open again, for 20 s (backoff) from
    // the probe's end, not 10 s from the first trip.
    advance(OPEN).await;
    assert!(svc.is_woken());
    let probe = breaker.try_acquire().unwrap();
    assert_pending!(svc.poll_ready());
    probe.record(Outcome::Failure);
    assert!(svc.is_woken(), "the reopening wakes the waiter to re-arm");
    assert_pending!(svc.poll_ready());
    advance(2 * OPEN - MS).await;
    assert!(!svc.is_woken());
    advance(MS).await;
    assert!(svc.is_woken());
    assert_ready_ok!(svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn waits_for_inner_readiness_before_reserving_and_propagates_its_errors() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(0);
    assert_pending!(svc.poll_ready());
    trip(&breaker);
    advance(OPEN).await;
    assert_pending!(svc.poll_ready());
    assert!(breaker.admits(), "no probe held");
    handle.send_error("connect failed");
    let err = match svc.poll_ready() {
        std::task::Poll::Ready(Err(err)) => err,
        other => panic!("expected the inner error, got {other:?}"),
    };
    assert_eq!(err.to_string(), "connect failed");
}

#[tokio::test(start_paused = true)]
async fn the_reserved_permit_is_used_by_call_and_counted() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    advance(OPEN).await;
    assert_ready_ok!(svc.poll_ready());
    assert_ready_ok!(svc.poll_ready(), "ready stays ready until call");
    let fut = svc.call(http::Request::new(()));
    let (_, send) = handle.next_request().await.expect("the probe was sent");
    send.send_response(status(200));
    assert_eq!(fut.await.unwrap().status(), 200);
    assert_eq!(breaker.state(), BreakerState::Closed, "the probe counted");
}

/// Ready stays ready on its reservation without asking the inner service
/// again: an error the inner service would now report is not seen until
/// the reservation is used.
#[tokio::test(start_paused = true)]
async fn a_reserved_service_does_not_poll_its_inner_service_again() {
    let (mut svc, mut handle, _breaker) = service(1);
    handle.allow(1);
    assert_ready_ok!(svc.poll_ready());
    handle.send_error("inner polled again");
    assert_ready_ok!(
        svc.poll_ready(),
        "the reservation answers, not the inner service"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reservation_dropped_with_its_service_is_given_back() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    advance(OPEN).await;
    let mut parked = clone(&svc);
    assert_ready_ok!(parked.poll_ready(), "reserved the one probe");
    assert_pending!(svc.poll_ready());
    let calls = breaker.stats().calls;
    drop(parked);
    assert!(svc.is_woken(), "the permit coming back wakes the waiter");
    assert_ready_ok!(svc.poll_ready());
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert_eq!(breaker.stats().calls, calls, "nothing counted");
}

#[tokio::test(start_paused = true)]
async fn a_clone_holds_no_reservation() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    advance(OPEN).await;
    assert_ready_ok!(svc.poll_ready());
    let mut copy = clone(&svc);
    assert_pending!(copy.poll_ready(), "the probe is the original's");
    // Called without a reservation (its `poll_ready` was pending): a
    // misuse, told apart from an open breaker.
    let err = copy.call(http::Request::new(())).await.unwrap_err();
    assert!(err.is::<NotReady>(), "call without a reservation: {err}");
    assert!(handle.poll_request().is_pending());
}

#[tokio::test(start_paused = true)]
async fn a_probe_reservation_held_past_its_round_fails_fast() {
    // The round ends by time.
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    trip(&breaker);
    advance(OPEN).await;
    assert_ready_ok!(svc.poll_ready());
    advance(ROUND).await;
    assert_ready_ok!(svc.poll_ready(), "ready stays ready");
    let err = svc.call(http::Request::new(())).await.unwrap_err();
    assert!(is_open(err));
    assert!(handle.poll_request().is_pending(), "inner never called");

    // The round ends by another probe's failure: open again.
    let (mut a, mut b, mut handle, breaker) = half_open_pair(2).await;
    assert_ready_ok!(a.poll_ready());
    assert_ready_ok!(b.poll_ready());
    let fut = b.call(http::Request::new(()));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(status(503));
    assert_eq!(fut.await.unwrap().status(), 503);
    assert_eq!(breaker.state(), BreakerState::Open);
    let err = a.call(http::Request::new(())).await.unwrap_err();
    let open = err.downcast_ref::<BreakerOpen>().expect("BreakerOpen");
    assert_eq!(open.retry_after, 2 * OPEN, "the reopening's backoff");
    assert!(handle.poll_request().is_pending(), "inner never called");
}

#[tokio::test(start_paused = true)]
async fn a_closed_reservation_fails_fast_once_the_breaker_opened() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    // Parked ready (as in a `ReadyCache`) while the breaker trips, and
    // even once its open time is up: the reservation was not a probe.
    assert_ready_ok!(svc.poll_ready());
    trip(&breaker);
    advance(OPEN).await;
    let err = svc.call(http::Request::new(())).await.unwrap_err();
    let open = err.downcast_ref::<BreakerOpen>().expect("BreakerOpen");
    assert_eq!(open.retry_after, Duration::ZERO, "a probe may go");
    assert!(handle.poll_request().is_pending(), "inner never called");
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert!(breaker.admits(), "no probe taken");
}

#[tokio::test(start_paused = true)]
async fn a_stale_reservation_goes_through_if_the_breaker_admits_freely() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    assert_ready_ok!(svc.poll_ready());
    trip(&breaker);
    breaker.set_mode(Mode::Normal);
    let fut = svc.call(http::Request::new(()));
    let (_, send) = handle.next_request().await.expect("called");
    send.send_response(status(503));
    assert_eq!(fut.await.unwrap().status(), 503);
    assert_eq!(breaker.stats().failures, 1, "counted under a fresh permit");
}

#[tokio::test(start_paused = true)]
async fn services_sharing_a_half_open_breaker_reserve_exactly_its_permits() {
    let (first, mut handle, breaker) = service(3);
    handle.allow(5);
    let clones: Vec<_> = (0..4).map(|_| clone(&first)).collect();
    let mut services: Vec<_> = std::iter::once(first).chain(clones).collect();
    trip(&breaker);
    advance(OPEN).await;
    let ready = services
        .iter_mut()
        .filter_map(|svc| svc.poll_ready().is_ready().then_some(()))
        .count();
    assert_eq!(ready, 3);
    assert!(!breaker.admits());
}

#[tokio::test(start_paused = true)]
async fn every_probe_out_waits_for_a_probe_or_the_round() {
    // A probe returning closes the breaker: the waiter is woken at once.
    let (mut a, mut b, mut handle, _breaker) = half_open_pair(1).await;
    assert_ready_ok!(a.poll_ready());
    assert_pending!(b.poll_ready());
    let fut = a.call(http::Request::new(()));
    let (_, send) = handle.next_request().await.unwrap();
    assert!(!b.is_woken());
    send.send_response(status(200));
    assert_eq!(fut.await.unwrap().status(), 200);
    assert!(b.is_woken(), "the round closed the breaker");
    assert_ready_ok!(b.poll_ready());

    // No probe returns: woken at the round's deadline.
    let (mut a, mut b, _handle, breaker) = half_open_pair(1).await;
    assert_ready_ok!(a.poll_ready());
    let _probe = a.call(http::Request::new(()));
    assert_pending!(b.poll_ready());
    advance(ROUND - MS).await;
    assert!(!b.is_woken());
    advance(MS).await;
    assert!(b.is_woken(), "the round's deadline");
    // The round expired: open again, for the doubled duration.
    assert_pending!(b.poll_ready());
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn forced_open_waits_for_a_change_of_mode() {
    let (mut svc, mut handle, breaker) = service(1);
    handle.allow(1);
    breaker.set_mode(Mode::ForcedOpen);
    assert_pending!(svc.poll_ready());
    advance(Duration::from_secs(3600)).await;
    assert!(!svc.is_woken());
    breaker.set_mode(Mode::Normal);
    assert!(svc.is_woken());
    assert_ready_ok!(svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn fail_fast_is_the_default() {
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Rsp, _>(
        tower_model_balance::breaker::CircuitBreakerLayer::new(policy(1)),
    );
    assert_eq!(svc.get_ref().when_open(), WhenOpen::FailFast);
    handle.allow(0);
    trip(svc.get_ref().breaker());
    assert_ready_ok!(svc.poll_ready(), "sheds while open");
}

// === under tower's P2C balancer ===

/// A backend answering with the status in `code`, counting its calls.
fn backend(
    code: Arc<AtomicU16>,
    hits: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Rsp, Error = std::convert::Infallible, Future: Send> + Clone {
    tower::service_fn(move |_req: Req| {
        hits.fetch_add(1, Ordering::Relaxed);
        let rsp = status(code.load(Ordering::Relaxed));
        async move { Ok(rsp) }
    })
}

#[tokio::test(start_paused = true)]
async fn p2c_sends_nothing_to_an_open_backend_and_returns_after_it_closes() {
    use tower::balance::p2c::Balance;
    use tower::discover::ServiceList;
    use tower::load::Constant;

    let codes = [Arc::new(AtomicU16::new(200)), Arc::new(AtomicU16::new(200))];
    let hits = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let breakers = [Breaker::new(policy(1)), Breaker::new(policy(1))];
    let backends = (0..2).map(|i| {
        let svc = CircuitBreaker::new(
            backend(codes[i].clone(), hits[i].clone()),
            breakers[i].clone(),
            ServerErrorsAsFailures::new(),
        )
        .with_when_open(WhenOpen::Backpressure);
        Constant::new(svc, 0u32)
    });
    let mut balance = Balance::new(ServiceList::new(backends.collect::<Vec<_>>()));
    // Sends `n` requests; returns how many failed fast.
    let mut send = async |n: usize| {
        let mut failed_fast = 0;
        for _ in 0..n {
            let svc = balance.ready().await.unwrap();
            match svc.call(http::Request::new(())).await {
                Ok(rsp) => assert_eq!(rsp.status(), 200),
                Err(err) if err.is::<BreakerOpen>() => failed_fast += 1,
                Err(err) => panic!("unexpected error: {err}"),
            }
        }
        failed_fast
    };

    assert_eq!(send(20).await, 0);
    assert!(hits[0].load(Ordering::Relaxed) > 0 && hits[1].load(Ordering::Relaxed) > 0);

    trip(&breakers[0]);
    let before = hits[0].load(Ordering::Relaxed);
    // Backend 0 sits ready in the balancer's cache with a reservation from
    // before the trip: if picked, that one call fails fast; then it is
    // pending and never picked while open.
    assert!(send(50).await <= 1);
    assert_eq!(
        hits[0].load(Ordering::Relaxed),
        before,
        "none to the open one"
    );
    assert!(breakers[0].stats().rejected <= 1);

    advance(OPEN).await;
    assert_eq!(send(50).await, 0);
    assert_eq!(
        breakers[0].state(),
        BreakerState::Closed,
        "probed and closed"
    );
    assert!(
        hits[0].load(Ordering::Relaxed) > before + 5,
        "traffic came back: {} → {}",
        before,
        hits[0].load(Ordering::Relaxed)
    );
}

#[test]
fn the_service_and_its_future_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Svc>();
    send_sync::<<Svc as Service<Req>>::Future>();
}

#[tokio::test(start_paused = true)]
async fn the_layer_sets_the_admission() {
    use tower_model_balance::breaker::CircuitBreakerLayer;

    let layer = CircuitBreakerLayer::new(policy(1)).when_open(WhenOpen::Backpressure);
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Rsp, _>(layer);
    assert_eq!(svc.get_ref().when_open(), WhenOpen::Backpressure);
    handle.allow(1);
    trip(svc.get_ref().breaker());
    assert_pending!(svc.poll_ready(), "pushes back while open");
    let copy = clone(&svc);
    assert_eq!(
        copy.get_ref().when_open(),
        WhenOpen::Backpressure,
        "kept by Clone"
    );
}
