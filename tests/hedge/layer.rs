//! The hedging layer's decisions, on paused time over a scripted inner
//! service: when a backup is sent, which attempt wins, what the budget and
//! the load gate suppress, and that the backup's service is polled ready
//! only when it is sent.

use crate::hedge_script;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{CloneRequest, HedgeLayer};

use hedge_script::{
    body, error_after, never, ok_after, policy, request, send, stats, status_after, Req, Rsp,
    Script,
};

#[tokio::test(start_paused = true)]
async fn a_first_attempt_faster_than_the_delay_is_never_hedged() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (result, seen, took) = send(&layer, vec![ok_after(9), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "0");
    assert_eq!(took, Duration::from_millis(9));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    let s = stats(&layer);
    assert_eq!((s.hedges, s.ended_before_delay), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_attempt_gets_a_backup_and_the_loser_is_dropped() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (result, seen, took) = send(&layer, vec![never(), ok_after(5)], "inference").await;
    assert_eq!(body(&result), "1", "the backup answered");
    assert_eq!(
        took,
        Duration::from_millis(15),
        "sent at 10 ms, answered 5 ms later"
    );
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        seen.dropped.load(Ordering::SeqCst),
        1,
        "the first attempt was cancelled"
    );
    let s = stats(&layer);
    assert_eq!((s.requests, s.hedges, s.hedges_won), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn the_first_success_wins_and_drops_the_backup() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (result, seen, took) = send(&layer, vec![ok_after(12), ok_after(50)], "inference").await;
    assert_eq!(body(&result), "0");
    assert_eq!(took, Duration::from_millis(12));
    assert_eq!(
        seen.dropped.load(Ordering::SeqCst),
        1,
        "the backup was cancelled"
    );
    let s = stats(&layer);
    assert_eq!((s.hedges, s.hedges_won), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn an_early_failure_waits_for_the_other_attempt() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    // The first answers 503 at 12 ms, after the backup went at 10 ms; the
    // backup succeeds at 30 ms.
    let steps = vec![status_after(12, 503), ok_after(20)];
    let (result, _, took) = send(&layer, steps, "inference").await;
    assert_eq!(body(&result), "1");
    assert_eq!(took, Duration::from_millis(30));
    // The backup fails first: the first attempt's later success wins.
    let (result, _, _) = send(&layer, vec![ok_after(40), error_after(1)], "inference").await;
    assert_eq!(body(&result), "0");
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_the_last_failure_is_returned() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (result, _, took) = send(
        &layer,
        vec![status_after(12, 503), error_after(10)],
        "inference",
    )
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.to_string(), "call 1 failed");
    assert_eq!(took, Duration::from_millis(20));
    let (result, _, _) = send(
        &layer,
        vec![error_after(30), status_after(5, 500)],
        "inference",
    )
    .await;
    assert_eq!(result.unwrap_err().to_string(), "call 0 failed");
}

#[tokio::test(start_paused = true)]
async fn a_fast_failure_sends_the_backup_at_once() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    // A 503 at 3 ms, before the 10 ms delay: the backup goes then, not at
    // 10 ms, and its answer 1 ms later is the response.
    let (result, seen, took) =
        send(&layer, vec![status_after(3, 503), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "1");
    assert_eq!(took, Duration::from_millis(4));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    // A transport error fails as fast, and is as retryable.
    let (result, _, took) = send(&layer, vec![error_after(2), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "1");
    assert_eq!(took, Duration::from_millis(3));
    let s = stats(&layer);
    assert_eq!((s.hedges, s.hedges_after_failure, s.hedges_won), (2, 2, 2));
}

/// Sends a request whose first attempt answers `status` at 3 ms, before
/// the 10 ms delay; asserts that answer came back then and that no backup
/// was ever sent.
async fn returned_at_once(layer: &HedgeLayer, status: u16) {
    let (result, seen, took) = send(
        layer,
        vec![status_after(3, status), ok_after(1)],
        "inference",
    )
    .await;
    assert_eq!(result.unwrap().status(), status);
    assert_eq!(took, Duration::from_millis(3));
    advance(Duration::from_millis(50)).await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
}

/// A layer whose budget allows no extra attempt: no share, no floor.
fn no_budget() -> HedgeLayer {
    let policy = policy().budget_ratio(0.0).budget_min_per_sec(0);
    HedgeLayer::new(policy.build().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_fast_failure_with_no_budget_or_a_4xx_is_returned_at_once() {
    let layer = no_budget();
    returned_at_once(&layer, 503).await;
    assert_eq!(stats(&layer).suppressed_by_budget, 1);
    // A 4xx is an answer, not a failure: another backend would say the same.
    let layer = HedgeLayer::new(policy().build().unwrap());
    returned_at_once(&layer, 404).await;
    assert_eq!(stats(&layer).hedges, 0);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_suppresses_the_backup_not_the_first_attempt() {
    let layer = no_budget();
    let (result, seen, took) = send(&layer, vec![ok_after(40), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "0", "the first attempt ran to its end");
    assert_eq!(took, Duration::from_millis(40));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    assert_eq!(seen.dropped.load(Ordering::SeqCst), 0);
    let s = stats(&layer);
    assert_eq!(
        (s.hedges, s.suppressed_by_budget, s.suppressed_by_load),
        (0, 1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_hedges_at_its_share_of_requests() {
    // 10%: 20 slow requests sent one after another allow 2 hedges.
    let layer = HedgeLayer::new(
        policy()
            .budget_ratio(0.1)
            .budget_min_per_sec(0)
            .build()
            .unwrap(),
    );
    for _ in 0..20 {
        let (result, _, _) = send(&layer, vec![ok_after(30), ok_after(30)], "inference").await;
        result.unwrap();
    }
    let s = stats(&layer);
    assert_eq!(s.requests, 20);
    assert_eq!(s.hedges + s.suppressed_by_budget, 20);
    assert_eq!(s.hedges, 2);
}

#[tokio::test(start_paused = true)]
async fn a_loaded_fleet_suppresses_hedges() {
    let utilization = Arc::new(Mutex::new(0.9));
    let read = utilization.clone();
    let gate = move || *read.lock().unwrap();
    let layer = HedgeLayer::with_load_gate(policy().max_utilization(0.8).build().unwrap(), gate);
    let layer = layer.classify(tower_model_balance::classify::ServerErrorsAsFailures::new());
    let (result, seen, _) = send(&layer, vec![ok_after(40), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "0");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    let s = stats(&layer);
    assert_eq!((s.suppressed_by_load, s.suppressed_by_budget), (1, 0));
    *utilization.lock().unwrap() = 0.5;
    let (result, _, _) = send(&layer, vec![ok_after(40), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "1");
    // A gate that cannot tell (NaN) fails closed.
    *utilization.lock().unwrap() = f64::NAN;
    let (result, seen, _) = send(&layer, vec![ok_after(40), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "0");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    assert_eq!(stats(&layer).suppressed_by_load, 2);
}

#[tokio::test(start_paused = true)]
async fn the_backup_service_is_polled_ready_only_when_sent() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (script, seen) = Script::new(vec![ok_after(30), ok_after(30)]);
    let mut service = layer.layer(script);
    service.ready().await.unwrap();
    assert_eq!(seen.ready_polls.load(Ordering::SeqCst), 1);
    let future = tokio::spawn(service.call(request("inference")));
    advance(Duration::from_millis(9)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        seen.ready_polls.load(Ordering::SeqCst),
        1,
        "nothing reserved before the delay"
    );
    advance(Duration::from_millis(2)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        seen.ready_polls.load(Ordering::SeqCst),
        2,
        "polled when the backup is sent"
    );
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    future.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn updates_are_never_hedged() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let (_, seen, _) = send(&layer, vec![ok_after(40), ok_after(1)], "update").await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    let s = stats(&layer);
    assert_eq!((s.hedges, s.updates), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_model_is_hedged_once_it_has_the_minimum_of_samples() {
    let layer = HedgeLayer::new(
        policy()
            .min_samples(5)
            .floor(Duration::from_millis(1))
            .ceiling(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    let model = tower_model_balance::route::ModelId::new("llama").unwrap();
    for _ in 0..5 {
        let (_, seen, _) = send(&layer, vec![ok_after(20), ok_after(1)], "inference").await;
        assert_eq!(
            seen.calls.load(Ordering::SeqCst),
            1,
            "too few samples to hedge"
        );
    }
    let s = stats(&layer);
    assert_eq!((s.warming_up, s.hedges), (5, 0), "counted as warming up");
    // At once, not a refresh period later: the first slow request after
    // the warm-up is hedged.
    let delay = layer.handle().delay(&model).expect("5 samples");
    assert!(
        (Duration::from_millis(20)..=Duration::from_millis(25)).contains(&delay),
        "{delay:?}"
    );
    let (result, _, took) = send(&layer, vec![never(), ok_after(1)], "inference").await;
    assert_eq!(body(&result), "1");
    // The timer wheel rounds the deadline up to the next millisecond.
    let sent = took - Duration::from_millis(1);
    assert!(
        sent >= delay && sent < delay + Duration::from_millis(1),
        "{took:?}"
    );
    let s = stats(&layer);
    assert_eq!((s.warming_up, s.hedges, s.hedges_won), (5, 1, 1));
}

/// A request type that cannot be copied.
struct Once;

impl CloneRequest for Once {
    fn clone_request(&self) -> Option<Self> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_cloned_is_sent_once() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let inner = tower::service_fn(move |_: Once| {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_millis(40)).await;
            Ok::<_, BoxError>(7)
        }
    });
    let layer = layer
        .classify(|_: Result<&i32, &BoxError>| tower_model_balance::classify::Outcome::Success);
    let answer = layer.layer(inner).oneshot(Once).await.unwrap();
    assert_eq!(answer, 7);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(layer.handle().stats().uncopyable, 1);
}

#[tokio::test(start_paused = true)]
async fn failures_do_not_feed_the_delay() {
    let layer = HedgeLayer::new(
        policy()
            .min_samples(3)
            .floor(Duration::from_millis(1))
            .ceiling(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    let model = tower_model_balance::route::ModelId::new("llama").unwrap();
    for _ in 0..10 {
        let (result, _, _) = send(&layer, vec![status_after(1, 503)], "inference").await;
        assert_eq!(result.unwrap().status(), 503);
        send(&layer, vec![error_after(1)], "inference")
            .await
            .0
            .unwrap_err();
    }
    advance(Duration::from_millis(100)).await;
    assert_eq!(
        layer.handle().delay(&model),
        None,
        "20 failures are no samples"
    );
    for _ in 0..3 {
        send(&layer, vec![ok_after(40)], "inference")
            .await
            .0
            .unwrap();
    }
    advance(Duration::from_millis(100)).await;
    let delay = layer.handle().delay(&model).expect("3 successes");
    assert!(delay >= Duration::from_millis(40), "{delay:?}");
}

#[tokio::test(start_paused = true)]
async fn a_superseded_first_attempt_feeds_how_long_it_ran() {
    let layer = HedgeLayer::new(
        policy()
            .floor(Duration::from_millis(10))
            .ceiling(Duration::from_secs(1))
            .median_factor(1_000.0)
            .build()
            .unwrap(),
    );
    let model = tower_model_balance::route::ModelId::new("llama").unwrap();
    // The backup goes at 10 ms and answers 5 ms later: samples of 5 ms (the
    // backup) and 15 ms (the first attempt, superseded).
    let (result, _, _) = send(&layer, vec![never(), ok_after(5)], "inference").await;
    assert_eq!(body(&result), "1");
    advance(Duration::from_millis(100)).await;
    let delay = layer.handle().delay(&model).unwrap();
    assert!(
        delay >= Duration::from_millis(15),
        "the superseded 15 ms counts: {delay:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_overload_never_wins_over_an_attempt_still_running() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    // The first is shed (429) at 12 ms, after the backup went at 10 ms;
    // the backup's success at 30 ms wins.
    let steps = vec![status_after(12, 429), ok_after(20)];
    let (result, _, took) = send(&layer, steps, "inference").await;
    assert_eq!(body(&result), "1");
    assert_eq!(took, Duration::from_millis(30));
    // The backup is shed first: the first attempt's later success wins.
    let steps = vec![ok_after(40), status_after(1, 429)];
    let (result, _, _) = send(&layer, steps, "inference").await;
    assert_eq!(body(&result), "0");
    // Both shed: the last is returned.
    let steps = vec![status_after(12, 429), status_after(20, 429)];
    let (result, _, took) = send(&layer, steps, "inference").await;
    assert_eq!(result.unwrap().status(), 429);
    assert_eq!(took, Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn an_overload_before_the_delay_sends_no_backup() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    returned_at_once(&layer, 429).await;
    let s = stats(&layer);
    assert_eq!((s.hedges, s.hedges_after_failure), (0, 0));
    assert_eq!(s.suppressed_by_budget + s.suppressed_by_load, 0);
}

/// A [`Script`] whose clones cannot get ready once a call was made: a
/// backup due to go stays on its readiness poll.
#[derive(Clone)]
struct BusyAfterFirst(Script);

impl Service<Req> for BusyAfterFirst {
    type Response = Rsp;
    type Error = BoxError;
    type Future = <Script as Service<Req>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.0.seen.calls.load(Ordering::SeqCst) > 0 {
            return Poll::Pending;
        }
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.0.call(req)
    }
}

#[tokio::test(start_paused = true)]
async fn an_overload_drops_a_backup_about_to_go_and_gives_its_budget_back() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    // At 10 ms the backup takes its budget and waits to get ready; at
    // 12 ms the first attempt is shed: returned then, the backup not sent.
    let (script, seen) = Script::new(vec![status_after(12, 429), ok_after(1)]);
    let start = Instant::now();
    let result = layer
        .layer(BusyAfterFirst(script))
        .oneshot(request("inference"))
        .await;
    assert_eq!(result.unwrap().status(), 429);
    assert_eq!(start.elapsed(), Duration::from_millis(12));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    let s = stats(&layer);
    assert_eq!((s.hedges, s.hedges_after_failure), (0, 0));
    assert_eq!(
        layer.handle().budget().granted(),
        0,
        "its budget given back"
    );
}
