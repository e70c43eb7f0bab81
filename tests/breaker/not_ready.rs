//! The breaker's answer to a `call` made without `poll_ready`, as every
//! layer of the crate answers it (the crate docs' "Readiness"), in both
//! admission modes: `NotReady`, the inner service not called, no permit
//! or reservation taken, nothing recorded; readiness consumed by `call`
//! and never cloned. Mock inner services and paused time.

use crate::breaker as support;

use std::time::Duration;

use tokio_test::assert_ready_ok;
use tower_model_balance::breaker::{Breaker, BreakerState, CircuitBreaker, WhenOpen};
use tower_model_balance::classify::{Outcome, ServerErrorsAsFailures};
use tower_model_balance::error::{BoxError, NotReady};
use tower_test::mock;

use support::{status, Rsp};

type Req = http::Request<()>;
type Svc = CircuitBreaker<mock::Mock<Req, Rsp>, ServerErrorsAsFailures>;

/// `future`'s error, which must be `NotReady`.
async fn not_ready<T>(what: &str, future: impl std::future::Future<Output = Result<T, BoxError>>) {
    let Err(error) = future.await else {
        panic!("{what}: served a call made without `poll_ready`");
    };
    assert!(error.is::<NotReady>(), "{what}: {error}");
}

/// A breaker in `when_open` mode over a mock, half-open with its one
/// probe permit free: where a call that took a permit would show.
async fn half_open(when_open: WhenOpen) -> (mock::Spawn<Svc>, mock::Handle<Req, Rsp>, Breaker) {
    let (inner, handle) = mock::pair();
    let breaker = Breaker::new(support::quick_trip().half_open_permits(1).build().unwrap());
    for _ in 0..2 {
        breaker.try_acquire().unwrap().record(Outcome::Failure);
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    let svc = CircuitBreaker::new(inner, breaker.clone(), ServerErrorsAsFailures::new())
        .with_when_open(when_open);
    (mock::Spawn::new(svc), handle, breaker)
}

#[tokio::test(start_paused = true)]
async fn a_call_without_poll_ready_is_not_ready_and_takes_no_permit() {
    for when_open in [WhenOpen::FailFast, WhenOpen::Backpressure] {
        let (mut svc, mut handle, breaker) = half_open(when_open).await;
        let what = |step: &str| format!("{when_open:?}, {step}");
        handle.allow(1);
        let fresh = breaker.stats();

        not_ready(&what("never polled"), svc.call(http::Request::new(()))).await;
        assert!(
            handle.poll_request().is_pending(),
            "the inner service not called"
        );
        assert_eq!(breaker.stats(), fresh, "nothing recorded");

        // The probe permit is still free: polled ready, the call probes,
        // and its success closes the breaker.
        assert_ready_ok!(svc.poll_ready());
        let probe = svc.call(http::Request::new(()));
        let (_, send) = handle.next_request().await.expect("the probe was sent");
        send.send_response(status(200));
        assert_eq!(probe.await.expect("answered").status(), 200);
        assert_eq!(breaker.state(), BreakerState::Closed, "{when_open:?}");
        let served = breaker.stats();

        // `call` consumed the readiness: the next call needs a new poll.
        let again = svc.call(http::Request::new(()));
        not_ready(&what("polled once, called twice"), again).await;
        assert!(handle.poll_request().is_pending());
        assert_eq!(breaker.stats(), served);

        // A clone starts not ready, however ready its original is.
        handle.allow(1);
        assert_ready_ok!(svc.poll_ready());
        let mut copy = mock::Spawn::new(svc.get_ref().clone());
        not_ready(&what("a clone"), copy.call(http::Request::new(()))).await;
        assert!(handle.poll_request().is_pending());
        assert_eq!(breaker.stats(), served);
        // The original stays ready until its own `call`.
        let call = svc.call(http::Request::new(()));
        let (_, send) = handle.next_request().await.expect("sent");
        send.send_response(status(200));
        assert_eq!(call.await.expect("answered").status(), 200);
    }
}
