//! The fleet's behaviour against real vLLM servers: no ejection under
//! ordinary multi-turn traffic, a stopped server ejected, a killed one
//! failing only its own streams, a restarted one back in rotation.

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::breaker::BreakerState;

use crate::fixture::Vllm;
use crate::gateway::{chat, open_stream, post, Running};
use crate::text::text;
/// Each server's status and health as `gw` last evaluated it (why it was
/// ejected, its error rate, its latencies): what a failed check prints.
pub fn health_of(servers: &[Vllm], gw: &Running) -> Vec<String> {
    let id = |s: &Vllm| tower_model_balance::backend::BackendId::new(&s.name).unwrap();
    servers
        .iter()
        .map(|s| format!("{:?}; {:?}", gw.backend(&s.name), gw.handle.health(&id(s))))
        .collect()
}

/// Whether the gateway has taken `name` out of rotation (ejected, or its
/// breaker open).
fn out_of_rotation(gw: &Running, name: &str) -> bool {
    let b = gw.backend(name);
    b.ejected || b.breaker == BreakerState::Open
}

/// A server that stops answering (SIGSTOP: its sockets accept, nothing
/// answers) while traffic flows is taken out of rotation within the
/// bound its configuration gives, requests go to the other server
/// meanwhile, and it is back in rotation once it runs again. The bound,
/// from the defaults: silent (requests sent, none answered) for longer
/// than 3 times the failure penalty (1 s) with 5 requests sent unanswered
/// — about 3 to 4 s at this test's rate — or, sent fewer, for `OUTLIER_INTERVALS`
/// (5) more evaluation intervals of 1 s: 7 s, plus an interval's
/// granularity and a loaded machine's slack: 10 s. (Its failed probes
/// alone would take 8 to 15 s: each weighs 0.2 in the error rate, diluted
/// by the requests the hedge's backups outran.)
pub async fn a_stopped_server_is_ejected(servers: &[Vllm], gw: &Running) {
    const BOUND: Duration = Duration::from_secs(10);
    let victim = &servers[1];
    let url = format!("{}/v1/chat/completions", gw.url);
    // Its p99 sets how long it may be silent (3 × max(outlier factor ×
    // p99, 1 s)): printed beside the time it took.
    let id = tower_model_balance::backend::BackendId::new(&victim.name).unwrap();
    let p99_ms = gw.handle.health(&id).and_then(|h| h.p99_ms);
    let picked_before = gw.backend(&victim.name).picked;
    victim.signal("STOP");
    // Continued however this test ends, so that a failure here does not
    // leave the server stopped under the tests after it.
    let _continue = Continue(victim);
    let stopped = Instant::now();
    // One request at a time, new conversations, each in a task of its own
    // (those sent to the stopped server hang until it is continued).
    let mut sent = Vec::new();
    let mut i = 0;
    while !out_of_rotation(gw, &victim.name) {
        assert!(
            stopped.elapsed() < BOUND,
            "{} stopped for {:?}, still in rotation: {:?}; {:?}",
            victim.name,
            stopped.elapsed(),
            gw.handle.health(&id),
            gw.backend(&victim.name),
        );
        let (url, body) = (url.clone(), chat(&text(500 + i, 10), 4, false));
        let session = format!("stopped-{i}");
        let request = tokio::spawn(async move { post(&url, &body, Some(&session)).await });
        // The next once this one is answered, or after 200 ms.
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            while !request.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        sent.push(request);
        i += 1;
    }
    let took = stopped.elapsed();
    // Sent to it while stopped (hedges' backups and retries elsewhere).
    let picked = gw.backend(&victim.name).picked - picked_before;
    // Out of rotation: fresh conversations are all served by the other.
    let mut served = Vec::new();
    for i in 0..10 {
        let answer = tokio::time::timeout(
            Duration::from_secs(30),
            post(
                &url,
                &chat(&text(700 + i, 10), 4, false),
                Some(&format!("out-{i}")),
            ),
        )
        .await
        .expect("answered while the server is stopped");
        served.push((answer.status, answer.backend));
    }
    // Those sent to it before it was out, still waiting: cut once its
    // probes have gone unanswered for the gateway's `unresponsive` (10 s)
    // and retried on the other server — answered while it is still
    // stopped (bounded at 40 s: 10 s, a probe round, a retry, and a loaded
    // machine's slack).
    let cuts_before = cuts(gw, &victim.name).await as u64;
    let mut before = Vec::new();
    for request in sent {
        let answer = tokio::time::timeout(Duration::from_secs(40), request)
            .await
            .expect("cut and answered elsewhere while the server is stopped");
        before.push(answer.expect("a request").status);
    }
    let cut = cuts(gw, &victim.name).await as u64;
    victim.signal("CONT");
    // Back once its ejection time (30 s for a first) has passed and it
    // answers: bounded at 90 s.
    let continued = Instant::now();
    while out_of_rotation(gw, &victim.name) {
        assert!(
            continued.elapsed() < Duration::from_secs(90),
            "{} not back: {:?}",
            victim.name,
            gw.handle.backends()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "  {} out of rotation {took:?} after SIGSTOP (its p99 before, {p99_ms:.0?} ms; {} requests \
         sent meanwhile, {picked} of them to it, {} answered 200, its waiting requests cut \
         {cut} times while stopped, {cuts_before} of them by then); then {served:?}; back in \
         rotation {:?} after SIGCONT",
        victim.name,
        before.len(),
        before.iter().filter(|&&status| status == 200).count(),
        continued.elapsed()
    );
    assert!(
        served.iter().all(|(status, _)| *status == 200),
        "{served:?}"
    );
    assert!(
        before.iter().all(|&status| status == 200),
        "those sent while it was stopped: {before:?}"
    );
}

/// The gateway's cuts of `backend`'s waiting requests so far
/// (`gateway_backend_unresponsive_cuts_total`, on its admin listener).
async fn cuts(gw: &Running, backend: &str) -> f64 {
    let (_, scrape) = crate::gateway::get(&format!("{}/metrics", gw.admin_url)).await;
    let series = format!("gateway_backend_unresponsive_cuts_total{{backend=\"{backend}\"}}");
    crate::fixture::sum_of(&scrape, &series)
}

/// Sends SIGCONT to its server when dropped.
struct Continue<'a>(&'a Vllm);

impl Drop for Continue<'_> {
    fn drop(&mut self) {
        self.0.signal("CONT");
    }
}

/// kill -9 of one server: only the streams in flight on it fail, each
/// with an SSE error event its client reads; every request started after
/// succeeds.
pub async fn a_killed_server_fails_only_its_own_streams(servers: &[Vllm], gw: &Running) {
    let victim = &servers[0];
    let url = format!("{}/v1/chat/completions", gw.url);
    let mut streams = Vec::new();
    for i in 0..16 {
        // About 75 prompt tokens and 1,800 to generate: every stream is
        // still in flight at the kill.
        let body = chat(&text(900 + i, 5), 1800, true);
        streams.push(open_stream(&url, &body).await);
        let on_victim = streams
            .iter()
            .filter(|s| s.backend.as_deref() == Some(&victim.name))
            .count();
        if on_victim >= 2 && streams.len() - on_victim >= 2 {
            break;
        }
    }
    let on: Vec<bool> = streams
        .iter()
        .map(|s| s.backend.as_deref() == Some(victim.name.as_str()))
        .collect();
    assert!(
        on.iter().any(|&v| v) && on.iter().any(|&v| !v),
        "streams on both servers: {on:?}"
    );
    victim.kill();
    let mut outcomes = Vec::new();
    for (stream, on_victim) in streams.into_iter().zip(&on) {
        // Completed: `[DONE]`. Cut: the gateway's SSE error event as the
        // last event, which the client sees (never a bare EOF).
        let text = stream
            .finish()
            .await
            .expect("an event, not a transport error");
        let completed = text.contains("data: [DONE]");
        let last = text
            .lines()
            .rfind(|l| l.starts_with("data: "))
            .unwrap_or_default();
        if !completed {
            assert!(
                last.starts_with(r#"data: {"error""#),
                "cut without an error event: {last}"
            );
        }
        outcomes.push((*on_victim, completed));
    }
    println!("  streams (on the killed server, completed): {outcomes:?}");
    for (on_victim, completed) in &outcomes {
        assert_eq!(*completed, !on_victim, "{outcomes:?}");
    }
    let mut after = Vec::new();
    for i in 0..20 {
        let body = chat(&text(1000 + i, 20), 4, false);
        after.push(post(&url, &body, Some(&format!("after-{i}"))).await.status);
    }
    println!("  20 requests after the kill: {after:?}");
    assert!(after.iter().all(|s| *s == 200), "{after:?}");
}

/// The killed server started again: once it answers `/health`, it takes
/// requests within 5 s, one request at a time.
pub async fn a_restarted_server_gets_traffic_within_5_s(servers: &[Vllm], gw: &Running) {
    let victim = &servers[0];
    victim.spawn();
    victim.wait_ready().await;
    let ready = Instant::now();
    let before = gw.backend(&victim.name).picked;
    let url = format!("{}/v1/chat/completions", gw.url);
    let mut i = 0;
    while gw.backend(&victim.name).picked == before {
        assert!(
            ready.elapsed() < Duration::from_secs(5),
            "{} ready {:?} ago, no request yet: {:?}",
            victim.name,
            ready.elapsed(),
            gw.handle.backends()
        );
        let body = chat(&text(2000 + i, 20), 2, false);
        let status = post(&url, &body, Some(&format!("back-{i}"))).await.status;
        assert_eq!(status, 200);
        i += 1;
    }
    println!(
        "  {} took a request {:?} after it was ready ({i} requests)",
        victim.name,
        ready.elapsed()
    );
}
