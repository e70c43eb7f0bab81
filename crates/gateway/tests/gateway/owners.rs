//! `--owners` reaches the balancer: with one model taking all the traffic
//! over three servers, its owners grow to the balancer's default two, and
//! stay at one under `owners = 1` — read from each answer's routing
//! receipt (`x-route-receipt`, `owners=N`); and `--model-slots` reaches
//! its residency model (the receipt's `reason`).

use crate::gateway;

use std::time::Duration;

use tower_model_balance_sim::{protocol, ServerConfig};

use gateway::{start_with, Running};

async fn fleet(owners: Option<usize>) -> Running {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .decode_time(Duration::from_millis(1))
        .build()
        .unwrap();
    start_with("gwo", 3, config, |config| {
        config.owners = owners;
        config.receipt_header = true;
    })
    .await
}

/// The most owners the receipts of `requests` answers name.
async fn most_owners(gw: &Running, requests: usize) -> usize {
    let body = r#"{"model": "llama-3-8b", "prompt": "hi", "max_tokens": 1}"#;
    let mut most = 0;
    for _ in 0..requests {
        let reply = gw.post(protocol::COMPLETIONS_PATH, body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let receipt = reply.headers["x-route-receipt"]
            .to_str()
            .unwrap()
            .to_owned();
        let owners = receipt
            .split("; ")
            .find_map(|field| field.strip_prefix("owners="))
            .unwrap_or_else(|| panic!("no owners in {receipt}"));
        most = most.max(owners.parse::<usize>().unwrap());
    }
    most
}

#[tokio::test]
async fn the_owners_flag_caps_a_models_owners() {
    let default = fleet(None).await;
    assert_eq!(
        most_owners(&default, 300).await,
        2,
        "the default grows to 2"
    );
    let one = fleet(Some(1)).await;
    assert_eq!(most_owners(&one, 300).await, 1, "capped at 1");
}

/// The routing reason of one answer for `model`, from its receipt.
async fn reason(gw: &Running, model: &str) -> String {
    let body = format!(r#"{{"model": "{model}", "prompt": "hi", "max_tokens": 1}}"#);
    let reply = gw.post(protocol::COMPLETIONS_PATH, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let receipt = reply.headers["x-route-receipt"].to_str().unwrap();
    let reason = receipt
        .split("; ")
        .find_map(|field| field.strip_prefix("reason="))
        .unwrap_or_else(|| panic!("no reason in {receipt}"));
    reason.to_owned()
}

/// `--model-slots` reaches the balancer's residency model: over one
/// server, after `a` then `b`, a backend of one model slot no longer
/// holds `a` (its next request is routed cold), one of the default four
/// still does. Residency comes from the routing alone here: no residency
/// header, and a probe round an hour apart (the first, at start, finds
/// nothing loaded).
#[tokio::test]
async fn the_model_slots_flag_sets_what_a_backend_holds() {
    for (slots, third) in [(Some(1), "cold_owner"), (None, "resident_owner")] {
        let gw = start_with("gws", 1, ServerConfig::default(), |config| {
            config.model_slots = slots;
            config.receipt_header = true;
            config.residency_header = None;
            let hourly = "[probe]\ninterval_ms = 3600000".parse().unwrap();
            config.stack = crate::app::stack_config(&hourly).unwrap();
        })
        .await;
        assert_eq!(reason(&gw, "a").await, "cold_owner");
        assert_eq!(reason(&gw, "b").await, "cold_owner");
        assert_eq!(reason(&gw, "a").await, third, "model slots {slots:?}");
    }
}
