//! `--workload prefix`: prompts that share long prefixes (the library's
//! `prefix_workload`, the fleet job's `prefix` scenario): 256 system
//! prompts and documents of 512–3,000 tokens, Zipf(1.05) popularity,
//! one-shot questions on them and chat sessions of 2–6 turns (each turn
//! sent once the one before it has answered, with `x-session-id`), one
//! model, streamed answers. The servers have a prefix cache of the working
//! set over 2.5 (no server holds every prefix) and the model loaded before
//! the router starts; what a router buys here is prefix-cache hits, read
//! from the servers' own counters.
//!
//! The `direct` row sends each prefix's requests to one server of its own
//! (prefix `i` to server `i mod n`: the hottest ones on different
//! servers), the best affinity with no hop.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower_model_balance_eval::prefix_workload::{self, Job, Turn, Workload};
use tower_model_balance_sim::{protocol, ModelServer, ServerStats};

use crate::drive::{self, GenClient, Record};

/// The gateway's `--prefix-bytes` for this workload: the first 100 bytes
/// of a prompt pick its owners (KubeAI's 100 characters; the fleet
/// example's `model_aware` uses the same).
pub const PREFIX_BYTES: usize = 100;
/// The header naming a request's session, sent on every turn of one; the
/// gateway's `--session-header` (vLLM Router reads it by default).
pub const SESSION_HEADER: &str = "x-session-id";

/// The plan of `duration` at `rate` requests per second (turns count as
/// requests), from `seed`.
pub fn plan(rate: f64, duration: Duration, seed: u64) -> Workload {
    let requests = (rate * duration.as_secs_f64()).round().max(1.0) as usize;
    let mut work = prefix_workload::generate(requests, seed);
    work.schedule(rate, seed);
    work
}

/// Where each request goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// A router: every request.
    Router(SocketAddr),
    /// No router: prefix `i` to `servers[i % n]`.
    Direct(Vec<SocketAddr>),
}

impl Route {
    fn addr(&self, prefix: usize) -> Option<SocketAddr> {
        match self {
            Route::Router(addr) => Some(*addr),
            Route::Direct(servers) if servers.is_empty() => None,
            Route::Direct(servers) => Some(servers[prefix % servers.len()]),
        }
    }
}

/// Loads the workload's model on every server, with a request of no
/// prompt, so that no run starts with cold loads.
pub async fn warm(servers: &[ModelServer]) {
    let client = drive::client();
    for server in servers {
        let body = format!(
            r#"{{"model":"{}","prompt":"","max_tokens":1}}"#,
            prefix_workload::MODEL
        );
        let uri = format!("http://{}{}", server.addr(), protocol::COMPLETIONS_PATH);
        if let Ok(req) = http::Request::post(uri).body(Full::from(body)) {
            let _ = client.request(req).await;
        }
    }
}

fn request(addr: SocketAddr, turn: &Turn, session: Option<u64>) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::post(format!("http://{addr}{}", protocol::CHAT_COMPLETIONS_PATH))
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(id) = session {
        req = req.header(SESSION_HEADER, format!("session-{id}"));
    }
    req.body(Full::from(turn.body.clone()))
        .expect("a valid request")
}

/// Sends `work` along `route`, each arrival at its time (a session's later
/// turns once the turn before has answered, due then), and returns a
/// record per request.
pub async fn drive(route: &Route, work: &Workload) -> Vec<Record> {
    let client = drive::client();
    let (tx, rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    for arrival in &work.arrivals {
        let due = start + arrival.at;
        tokio::time::sleep_until(due).await;
        let Some(addr) = route.addr(arrival.prefix) else {
            break;
        };
        let (client, tx, job) = (client.clone(), tx.clone(), arrival.job.clone());
        tokio::spawn(async move {
            match job {
                Job::OneShot(turn) => {
                    let _ = tx.send(drive::send(&client, request(addr, &turn, None), due).await);
                }
                Job::Session { id, turns } => session(&client, addr, id, &turns, due, &tx).await,
            }
        });
    }
    drop(tx);
    drive::collect(rx, work.requests).await
}

/// A session's turns in order, each due when the one before it ended.
async fn session(
    client: &GenClient,
    addr: SocketAddr,
    id: u64,
    turns: &[Turn],
    first_due: Instant,
    tx: &mpsc::UnboundedSender<Record>,
) {
    let mut due = first_due;
    for turn in turns {
        let record = drive::send(client, request(addr, turn, Some(id)), due).await;
        due = Instant::now();
        let _ = tx.send(record);
    }
}

/// The servers' prefix-cache hit rate between two readings: cached prompt
/// tokens over prompt tokens prefilled (vLLM's `prefix_cache_hits` over
/// `prefix_cache_queries`); `None` when nothing was prefilled.
pub fn hit_rate(before: &[ServerStats], after: &[ServerStats]) -> Option<f64> {
    let (mut prompt, mut cached) = (0u64, 0u64);
    for (b, a) in before.iter().zip(after) {
        prompt += a.prompt_tokens.saturating_sub(b.prompt_tokens);
        cached += a.cached_tokens.saturating_sub(b.cached_tokens);
    }
    (prompt > 0).then(|| cached as f64 / prompt as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_the_rate_and_the_direct_route_keeps_a_prefix_on_one_server() {
        let work = plan(50.0, Duration::from_secs(2), 1);
        assert!(
            work.requests >= 100 && work.requests < 110,
            "{}",
            work.requests
        );
        assert!(work.arrivals.windows(2).all(|w| w[0].at <= w[1].at));
        let servers: Vec<SocketAddr> = (1..=4)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let route = Route::Direct(servers.clone());
        assert_eq!(route.addr(5), route.addr(9));
        assert_ne!(route.addr(0), route.addr(1));
        assert_eq!(Route::Direct(Vec::new()).addr(0), None);
    }
}
