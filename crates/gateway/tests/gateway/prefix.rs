//! Prefix affinity and routing receipts through the gateway's app
//! over real sockets, in front of simulated LLM servers with prefix
//! caches: a conversation's turns land on one backend and find their
//! history cached, each answer says why in `x-route-receipt`, and a bad
//! session header is the client's 400, sent nowhere.

use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tower_model_balance_sim::{protocol, ServerConfig};

use gateway::{start_with, Reply, Running};

const SESSION: &str = "x-session-id";

async fn fleet(n: usize, receipts: bool) -> Running {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .decode_time(Duration::from_millis(1))
        .prefix_cache(1 << 20)
        .prefill_rate(1_000_000)
        .build()
        .unwrap();
    start_with("gwp", n, config, |config| {
        config.prefix_bytes = Some(256);
        config.session_header = Some(http::HeaderName::from_static(SESSION));
        config.receipt_header = receipts;
    })
    .await
}

/// Turn `turn` of a conversation under one long system prompt.
fn chat(turn: usize) -> String {
    let system = "you are the billing assistant of acme ".repeat(60);
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for t in 0..=turn {
        if t > 0 {
            messages.push(serde_json::json!({"role": "assistant", "content": "noted"}));
        }
        let user = format!("question {t}: {}", "why was i charged twice ".repeat(20));
        messages.push(serde_json::json!({"role": "user", "content": user}));
    }
    serde_json::json!({"model": "llama-3-8b", "messages": messages, "max_tokens": 2}).to_string()
}

async fn send(gw: &Running, turn: usize, session: &[&str]) -> Reply {
    let mut req = http::Request::post(format!(
        "http://{}{}",
        gw.addr,
        protocol::CHAT_COMPLETIONS_PATH
    ))
    .header(http::header::CONTENT_TYPE, "application/json");
    for value in session {
        req = req.header(SESSION, *value);
    }
    gw.send(req.body(Full::new(Bytes::from(chat(turn)))).unwrap())
        .await
}

fn receipt(reply: &Reply) -> String {
    reply.headers["x-route-receipt"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_conversation_stays_on_its_backend_and_each_answer_says_why() {
    let gw = fleet(4, true).await;
    let first = send(&gw, 0, &["conv-1"]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let backend = first.headers[protocol::BACKEND_HEADER].to_str().unwrap();
    let receipt0 = receipt(&first);
    assert!(
        receipt0.starts_with(&format!("backend={backend}; reason=")),
        "{receipt0}"
    );
    assert!(receipt0.contains("prefix_hit=none"), "{receipt0}");
    for turn in 1..4 {
        let reply = send(&gw, turn, &["conv-1"]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.headers[protocol::BACKEND_HEADER], backend);
        let text = receipt(&reply);
        assert!(
            text.starts_with(&format!(
                "backend={backend}; reason=resident_owner; owners="
            )),
            "{text}"
        );
        assert!(text.contains("prefix_hit=session"), "{text}");
        let cached = reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        // At least the system prompt (2 280 bytes: 35 full blocks).
        assert!(cached >= 35 * 16, "turn {turn}: {cached}");
    }
}

#[tokio::test]
async fn without_the_flag_no_receipt_and_a_bad_session_is_refused() {
    let gw = fleet(2, false).await;
    let reply = send(&gw, 0, &["conv-1"]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.headers.get("x-route-receipt").is_none());
    let before = gw.backend_work();
    for bad in [&["a", "b"][..], &[""][..]] {
        let reply = send(&gw, 0, bad).await;
        assert_eq!(reply.status, 400, "{bad:?}: {}", reply.body);
        assert!(reply.body.contains("session"), "{}", reply.body);
    }
    let long = "x".repeat(257);
    let reply = send(&gw, 0, &[long.as_str()]).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(gw.backend_work(), before, "sent nowhere");
}

/// A chat that opens with "hi": every turn's first bytes differ until it
/// outgrows `prefix_bytes`, and its session keeps it together meanwhile.
fn short_chat(turn: usize) -> String {
    let mut messages = Vec::new();
    for t in 0..=turn {
        if t > 0 {
            messages.push(serde_json::json!({"role": "assistant", "content": "hello!"}));
        }
        messages.push(serde_json::json!({"role": "user", "content": format!("hi {t}")}));
    }
    serde_json::json!({"model": "llama-3-8b", "messages": messages, "max_tokens": 2}).to_string()
}

#[tokio::test]
async fn a_short_conversation_stays_on_its_backend() {
    let gw = fleet(4, true).await;
    for conversation in 0..4 {
        let session = format!("short-{conversation}");
        let mut backends = Vec::new();
        for turn in 0..5 {
            let req = http::Request::post(format!(
                "http://{}{}",
                gw.addr,
                protocol::CHAT_COMPLETIONS_PATH
            ))
            .header(SESSION, session.as_str())
            .body(Full::new(Bytes::from(short_chat(turn))))
            .unwrap();
            let reply = gw.send(req).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            if turn > 0 {
                assert!(
                    receipt(&reply).contains("prefix_hit=session"),
                    "{}",
                    receipt(&reply)
                );
            }
            backends.push(reply.headers[protocol::BACKEND_HEADER].clone());
        }
        assert!(
            backends.windows(2).all(|w| w[0] == w[1]),
            "{session}: {backends:?}"
        );
    }
}

#[tokio::test]
async fn a_session_header_without_a_prompt_is_no_key() {
    // KServe v2 inferences of one model with many session IDs stay on the
    // model's owner: a client cannot spread a model with session IDs.
    let gw = fleet(4, true).await;
    let mut backends = std::collections::BTreeSet::new();
    for i in 0..8 {
        let req = http::Request::post(format!(
            "http://{}{}",
            gw.addr,
            protocol::infer_path("resnet-50")
        ))
        .header(SESSION, format!("kk{i}"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
        let reply = gw.send(req).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            receipt(&reply).contains("prefix_hit=none"),
            "{}",
            receipt(&reply)
        );
        backends.insert(reply.headers[protocol::BACKEND_HEADER].clone());
    }
    assert_eq!(backends.len(), 1, "{backends:?}");
}

#[tokio::test]
async fn a_prompt_the_capture_cannot_read_goes_to_the_server_to_judge() {
    let gw = fleet(2, true).await;
    for body in [
        &b"{\"model\":\"llama-3-8b\",\"prompt\":\"\xff\xfe\"}"[..],
        br#"{"model":"llama-3-8b","prompt":"\ud800"}"#,
    ] {
        let reply = gw
            .post(protocol::COMPLETIONS_PATH, Bytes::copy_from_slice(body))
            .await;
        // Routed by its model alone (a receipt: the balancer picked), and
        // answered by the server (the simulator refuses such a body), not
        // refused by the gateway.
        assert!(
            receipt(&reply).contains("prefix_hit=none"),
            "{}",
            receipt(&reply)
        );
        assert!(!reply.body.contains("invalid route"), "{}", reply.body);
    }
}
