//! A backend that hangs (accepts, never answers, its health probes
//! included): a non-streamed request waiting on it is cut once its probes
//! have gone unanswered while its peer's are answered, counted against
//! it, and retried on the peer — not held for the request timeout.

use crate::gateway;

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance_gateway::app::stack_config;
use tower_model_balance_sim::{Fault, InferenceTimes, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_hung_backend_is_cut_and_retried_on_its_peer() {
    let server = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 5, 5).unwrap())
        .build()
        .unwrap();
    let gw = gateway::start_with("hung", 2, server, |c| {
        c.timeouts.request = Duration::from_secs(120);
        c.timeouts.unresponsive = Duration::from_millis(500);
        // No hedge: only the cut can free the request.
        let file = "[probe]\ninterval_ms = 200\ntimeout_ms = 100\n[hedge]\nmax_attempts = 1\n";
        c.stack = stack_config(&file.parse().unwrap()).unwrap();
    })
    .await;
    let chat = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
    let reply = gw.post("/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The backend that holds `m` now hangs.
    let owner = gw
        .sims
        .iter()
        .position(|s| s.resident_models().contains(&"m".to_owned()))
        .expect("one backend loaded m");
    gw.sims[owner].set_fault(Some(Fault::Hang));
    // `post` waits 10 s at most, far under the request timeout (120 s):
    // the cut comes within three probes (200 ms apart, 100 ms each) and
    // 500 ms of the hang, about 1 s.
    let sent = Instant::now();
    let reply = gw.post("/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let took = sent.elapsed();
    let backends = gw.handle.backends();
    let hung = backends
        .iter()
        .find(|b| b.id.as_str() == gw.sims[owner].name())
        .unwrap();
    assert_eq!(hung.failures, 1, "the cut counts against it ({took:?})");
    // One request cut, counted once — and not again as its probes go on
    // unanswered with nothing waiting: five more probes later, still 1.
    let probes = gw.sims[owner].stats().requests;
    let waited = Instant::now();
    while gw.sims[owner].stats().requests < probes + 5 {
        assert!(waited.elapsed() < Duration::from_secs(10), "no probes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = gw.admin_get("/metrics").await.body;
    let cuts = format!(
        "gateway_backend_unresponsive_cuts_total{{backend=\"{}\"}} 1\n",
        gw.sims[owner].name()
    );
    assert!(metrics.contains(&cuts), "{metrics}");
}
