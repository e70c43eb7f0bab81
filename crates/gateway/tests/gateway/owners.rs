//! `--owners` reaches the balancer: with one model taking all the traffic
//! over three servers, its owners grow to the balancer's default two, and
//! stay at one under `owners = 1` — read from each answer's routing
//! receipt (`x-route-receipt`, `owners=N`).

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
