//! A Responses API call that stores its answer (`store` unset or true) is
//! sent to one backend only: a backend's 503 is not retried elsewhere, as
//! it is for `store: false`. Counted by the requests each simulated
//! backend received.

use crate::gateway;

use tower_model_balance_sim::Fault;

use gateway::{start, Running};

/// Inference requests each backend received.
fn received(gw: &Running) -> Vec<u64> {
    gw.sims.iter().map(|s| s.stats().work).collect()
}

#[tokio::test]
async fn a_stored_response_is_sent_once_an_unstored_one_may_be_retried() {
    let gw = start("once", 2, |_| {}).await;
    // Both backends answer 503: a retry would go to the other at once.
    for sim in &gw.sims {
        sim.set_fault(Some(Fault::Unavailable));
    }
    // Not stored: the 503 is retried on the other backend (first, before
    // three 503s in a row open a backend's breaker for the model).
    let body = r#"{"model": "llama-3-8b", "input": "hi", "store": false}"#;
    assert_eq!(gw.post("/v1/responses", body).await.status, 503);
    assert_eq!(received(&gw), [1, 1], "one each: retried");
    for body in [
        r#"{"model": "llama-3-8b", "input": "hi"}"#,
        r#"{"model": "llama-3-8b", "input": "hi", "store": true}"#,
        r#"{"model": "llama-3-8b", "input": "hi", "store": false, "background": true}"#,
    ] {
        let before: u64 = received(&gw).iter().sum();
        let reply = gw.post("/v1/responses", body).await;
        assert_eq!(reply.status, 503, "{body}: {}", reply.body);
        let after: u64 = received(&gw).iter().sum();
        assert_eq!(after - before, 1, "{body}: sent once, {:?}", received(&gw));
    }
    assert_eq!(gw.hedge.stats().send_once, 3, "the hedge saw the mark");
}

#[tokio::test]
async fn a_stored_response_is_answered_through_the_gateway() {
    let gw = start("responses", 2, |_| {}).await;
    let reply = gw
        .post("/v1/responses", r#"{"model": "llama-3-8b", "input": "hi"}"#)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["object"], "response");
    assert_eq!(received(&gw).iter().sum::<u64>(), 1);
}
