//! Prefix affinity through `ModelFromBodyLayer` and the balancer, over
//! simulated LLM servers with prefix (KV) caches on loopback: a
//! conversation's turns go back to the backend that served its first and
//! find their history cached there (the servers' own `cached_tokens` say
//! so), the groups spread over the fleet where routing by the model keeps
//! them on its owners, a hot prefix is served by more than one backend
//! once its owner is at the bounded-load cap, and each answer carries its
//! receipt. Requests are sent one at a time (every pick sees the same
//! loads) except in the hot-prefix test, which holds its requests open
//! on the servers until all were routed (an event, not a sleep).

use crate::sim_balancer;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::balance::{BalanceConfig, PrefixHit, RouteReason, RoutingReceipt};
use tower_model_balance::route::ModelFromBodyLayer;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

const MODEL: &str = "llama-3-8b";
const SESSION: &str = "x-session-id";
const BOUND: Duration = Duration::from_secs(20);

/// `n` servers with a large prefix cache and fast prefill, `decode` a
/// token.
async fn fleet(name: &str, n: usize, decode: Duration) -> Vec<ModelServer> {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .decode_time(decode)
        .prefix_cache(1 << 20)
        .prefill_rate(1_000_000)
        .concurrency(64)
        .build()
        .unwrap();
    let mut servers = Vec::new();
    for i in 0..n {
        servers.push(
            ModelServer::start(&format!("{name}-{i}"), config.clone())
                .await
                .unwrap(),
        );
    }
    servers
}

/// Deterministic text of `tokens` 4-byte tokens (lowercase words).
fn text(seed: u64, tokens: usize) -> String {
    (0..tokens as u64)
        .map(|i| {
            let x = (seed.wrapping_mul(0x9e37_79b9) ^ i.wrapping_mul(0x85eb_ca6b)) % (26 * 26 * 26);
            let c = |d: u64| char::from(b'a' + (d % 26) as u8);
            format!("{}{}{} ", c(x), c(x / 26), c(x / 676))
        })
        .collect()
}

/// A conversation: its system prompt, then `turns` user messages, each
/// after the answer to the last (a fixed assistant text).
fn chat(system: u64, conversation: u64, turn: usize, max_tokens: u32) -> String {
    let mut messages = vec![serde_json::json!({"role": "system", "content": text(system, 600)})];
    for t in 0..=turn {
        if t > 0 {
            messages.push(serde_json::json!({"role": "assistant", "content": text(7, 32)}));
        }
        let user = text(1_000 + conversation * 10 + t as u64, 100);
        messages.push(serde_json::json!({"role": "user", "content": user}));
    }
    serde_json::json!({"model": MODEL, "messages": messages, "max_tokens": max_tokens}).to_string()
}

/// What one answer said.
#[derive(Debug)]
struct Answer {
    backend: String,
    cached: u64,
    receipt: Option<RoutingReceipt>,
}

type Stack = tower_model_balance::route::ModelFromBody<
    tower_model_balance::balance::ModelBalancer<sim_balancer::Endpoint>,
>;

fn stack(servers: &[ModelServer], prefix: bool) -> Stack {
    let config = BalanceConfig::builder().receipts(true).build().unwrap();
    let mut layer = ModelFromBodyLayer::builder();
    if prefix {
        layer = layer
            .prefix_bytes(256)
            .session_header(http::HeaderName::from_static(SESSION));
    }
    layer
        .build()
        .unwrap()
        .layer(sim_balancer::balancer(servers, config))
}

async fn send(stack: &mut Stack, body: String, session: &str) -> Answer {
    let req = http::Request::post(protocol::CHAT_COMPLETIONS_PATH)
        .header(SESSION, session)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let exchange = async {
        let ready = ServiceExt::<http::Request<Full<Bytes>>>::ready(stack)
            .await
            .unwrap();
        let rsp = ready.call(req).await.unwrap();
        assert_eq!(rsp.status(), 200);
        let backend = rsp.headers()[protocol::BACKEND_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let receipt = rsp.extensions().get::<RoutingReceipt>().cloned();
        let body = rsp.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let cached = json["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        Answer {
            backend,
            cached,
            receipt,
        }
    };
    tokio::time::timeout(BOUND, exchange)
        .await
        .expect("answered")
}

/// Full blocks of the prompt text of `body`, in tokens.
fn cacheable(body: &str) -> u64 {
    let prompt = protocol::prompt_text(body.as_bytes()).unwrap();
    protocol::prompt_blocks(&prompt).count() as u64 * protocol::BLOCK_TOKENS
}

#[tokio::test]
async fn a_conversation_goes_back_to_its_backend_and_finds_its_history() {
    let servers = fleet("conv", 4, Duration::from_millis(1)).await;
    let mut stack = stack(&servers, true);
    // 6 system prompts, 2 conversations each, 4 turns, one request at a
    // time.
    let mut first = BTreeMap::new();
    for turn in 0..4 {
        for conversation in 0..12u64 {
            let body = chat(conversation / 2, conversation, turn, 2);
            let session = format!("conv-{conversation}");
            let answer = send(&mut stack, body, &session).await;
            let receipt = answer.receipt.clone().expect("receipts are on");
            assert_eq!(receipt.backend.as_str(), answer.backend);
            // An owner: its first request there loads the model.
            let owner = [RouteReason::ResidentOwner, RouteReason::ColdOwner];
            assert!(owner.contains(&receipt.reason), "{receipt}");
            let at = first.entry(conversation).or_insert(answer.backend.clone());
            if turn > 0 {
                assert_eq!(&answer.backend, at, "turn {turn} of {session}");
                assert_eq!(receipt.prefix_hit, PrefixHit::Session, "{receipt}");
                assert_eq!(receipt.reason, RouteReason::ResidentOwner, "{receipt}");
                // Everything of the last turn's prompt, as the server counts it.
                let last = cacheable(&chat(conversation / 2, conversation, turn - 1, 2));
                assert!(answer.cached >= last, "{} < {last}", answer.cached);
            } else if conversation % 2 == 1 {
                // The second conversation of a system prompt: its group.
                assert_eq!(receipt.prefix_hit, PrefixHit::Group, "{receipt}");
                // The system message's full blocks: 37 of 16 tokens.
                assert!(answer.cached >= 37 * 16, "{}", answer.cached);
            }
        }
    }
    // The six groups spread over the fleet.
    let used: BTreeSet<_> = first.values().collect();
    assert!(used.len() >= 3, "{used:?}");
}

#[tokio::test]
async fn routed_by_the_model_the_groups_stay_on_its_owners() {
    let servers = fleet("model", 4, Duration::from_millis(1)).await;
    let mut stack = stack(&servers, false);
    let mut used = BTreeSet::new();
    for conversation in 0..12u64 {
        let body = chat(conversation / 2, conversation, 0, 2);
        let answer = send(&mut stack, body, &format!("conv-{conversation}")).await;
        assert_eq!(answer.receipt.unwrap().prefix_hit, PrefixHit::None);
        used.insert(answer.backend);
    }
    // The model's owners (2 by default) take every request.
    assert!(used.len() <= 2, "{used:?}");
}

#[tokio::test]
async fn a_hot_prefix_is_served_by_more_than_one_backend() {
    // Each answer holds its server for 64 decode steps of 20 ms: the 24
    // requests are all in flight at once, and the bounded-load cap,
    // ceil(1.25 × 24 / 4) = 8, spreads them past the group's first owner.
    let servers = fleet("hot", 4, Duration::from_millis(20)).await;
    let stack = stack(&servers, true);
    let mut calls = tokio::task::JoinSet::new();
    for conversation in 0..24u64 {
        let mut stack = stack.clone();
        calls.spawn(async move {
            let body = chat(0, conversation, 0, 64);
            send(&mut stack, body, &format!("conv-{conversation}")).await
        });
    }
    let mut per_backend = BTreeMap::<String, usize>::new();
    while let Some(answer) = calls.join_next().await {
        *per_backend.entry(answer.unwrap().backend).or_default() += 1;
    }
    assert!(per_backend.len() > 1, "{per_backend:?}");
    assert!(per_backend.values().all(|&n| n <= 8), "{per_backend:?}");
}
