//! The load: the fleet job's seeded open-loop plan (Poisson arrivals,
//! Zipf(1.1) over 32 models), every request an OpenAI chat completion
//! naming its model in the JSON body, sent on schedule whatever the
//! answers before it, each within a deadline.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower_model_balance_eval::workload::Planned;
use tower_model_balance_sim::protocol;

/// The most a request may take, answer and body, before it counts as
/// failed (the fleet job's deadline).
pub const DEADLINE: Duration = Duration::from_secs(5);

/// What the driver saw of one request.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    /// Planned send time to the end of the answer's body (or the failure).
    pub latency: Duration,
    /// 200, body read whole, within the deadline.
    pub ok: bool,
    /// The answer said its server loaded the model for it
    /// (`x-sim-cold-load: true`).
    pub cold: bool,
    /// For an answer that reports its server's time
    /// (`x-sim-served-us`): from the send to the answer's head, less that
    /// time: what the request spent outside the server (the client, the
    /// network, a router), whatever queue or cold load it met there.
    pub outside: Option<Duration>,
    /// How late it was sent against its plan (the load generator's own
    /// lag).
    pub lag: Duration,
}

/// Where each request goes: one address for every request (a router), or
/// one of its model's own servers (direct), or a router told in
/// [`STEER_HEADER`] which of the servers that would be (the bare proxy
/// under the oracle's placement: the hop's floor with the servers' work
/// the direct row's).
#[derive(Debug, Clone)]
pub enum Target {
    Router(SocketAddr),
    Direct(HashMap<String, Vec<SocketAddr>>),
    Steered {
        router: SocketAddr,
        /// The servers in the order the router was given them.
        servers: Vec<SocketAddr>,
        /// The oracle's placement, as [`Target::direct`] sends by it.
        oracle: HashMap<String, Vec<SocketAddr>>,
    },
}

/// The header naming the index of the backend a steered request goes to
/// (`crates/gateway`'s `bare::STEER_HEADER`, which the bare proxy reads).
pub const STEER_HEADER: &str = "x-bare-backend";

impl Target {
    /// An oracle's placement of `plan`'s models on `servers` of `slots`
    /// models each: a model drawing a share `s` of the requests on
    /// `ceil(s × servers)` of them (at least one; a server holds a model
    /// once), each copy on the server with the least traffic so far that
    /// has a slot free; the most requested models placed first. The
    /// `i`th request of the plan takes copy `i mod copies` of its model.
    pub fn direct(servers: &[SocketAddr], slots: usize, plan: &[Planned]) -> Self {
        Target::Direct(oracle(servers, slots, plan))
    }

    /// The bare proxy at `router` over `servers`, steered by the oracle's
    /// placement of `plan` (see [`Target::direct`]).
    pub fn steered(
        router: SocketAddr,
        servers: &[SocketAddr],
        slots: usize,
        plan: &[Planned],
    ) -> Self {
        Target::Steered {
            router,
            servers: servers.to_vec(),
            oracle: oracle(servers, slots, plan),
        }
    }

    fn addr(&self, model: &str, i: usize) -> SocketAddr {
        match self {
            Target::Router(addr) | Target::Steered { router: addr, .. } => *addr,
            Target::Direct(map) => {
                let copies = &map[model];
                copies[i % copies.len()]
            }
        }
    }

    /// For a steered target, the index of the server the `i`th request,
    /// of `model`, goes to.
    fn steer(&self, model: &str, i: usize) -> Option<usize> {
        let Target::Steered {
            servers, oracle, ..
        } = self
        else {
            return None;
        };
        let copies = &oracle[model];
        let server = copies[i % copies.len()];
        servers.iter().position(|s| *s == server)
    }
}

/// The oracle's placement of `plan`'s models on `servers` (see
/// [`Target::direct`]): each model's copies, in the order its requests
/// take them.
fn oracle(
    servers: &[SocketAddr],
    slots: usize,
    plan: &[Planned],
) -> HashMap<String, Vec<SocketAddr>> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for planned in plan {
        *counts.entry(planned.model.as_str()).or_default() += 1;
    }
    let mut models: Vec<(&str, usize)> = counts.into_iter().collect();
    models.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let n = servers.len();
    let (mut traffic, mut held) = (vec![0.0f64; n], vec![0usize; n]);
    let mut map = HashMap::new();
    for (model, count) in models {
        let share = count as f64 / plan.len() as f64;
        let copies = ((share * n as f64).ceil() as usize).clamp(1, n);
        let mut placed: Vec<usize> = Vec::with_capacity(copies);
        for _ in 0..copies {
            let free = (0..n).filter(|i| held[*i] < slots && !placed.contains(i));
            // Full everywhere: the model shares the least busy server.
            let pick = free
                .min_by(|a, b| traffic[*a].total_cmp(&traffic[*b]))
                .or_else(|| (0..n).min_by(|a, b| traffic[*a].total_cmp(&traffic[*b])));
            let Some(pick) = pick else { break };
            placed.push(pick);
            held[pick] += 1;
        }
        for &i in &placed {
            traffic[i] += share / placed.len() as f64;
        }
        map.insert(
            model.to_owned(),
            placed.iter().map(|&i| servers[i]).collect(),
        );
    }
    map
}

/// The plan of `duration` at `rate` requests per second, from `seed`:
/// the fleet job's arrivals and models (its update and urgency marks
/// unused: every request is an inference of normal urgency).
pub fn plan(rate: f64, duration: Duration, seed: u64) -> Vec<Planned> {
    let requests = (rate * duration.as_secs_f64()).round().max(1.0) as usize;
    tower_model_balance_eval::workload::plan(requests, rate, seed, 0.0)
}

/// The chat completion for `planned`, the `i`th request: its prompt
/// differs from every other request's.
fn request(target: &Target, planned: &Planned, i: usize) -> http::Request<Full<Bytes>> {
    let body = format!(
        r#"{{"model":"{}","messages":[{{"role":"user","content":"question {i}"}}],"max_tokens":8}}"#,
        planned.model
    );
    let addr = target.addr(&planned.model, i);
    let mut req = http::Request::post(format!("http://{addr}{}", protocol::CHAT_COMPLETIONS_PATH))
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(server) = target.steer(&planned.model, i) {
        req = req.header(STEER_HEADER, server);
    }
    req.body(Full::from(body)).expect("a valid request")
}

/// The load generator's client.
pub type GenClient = Client<HttpConnector, Full<Bytes>>;

/// One client for a run: pooled connections, `TCP_NODELAY`.
pub fn client() -> GenClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// Sends `plan` to `target` open-loop and returns a record per request,
/// once every one has resolved or reached its deadline.
pub async fn drive(target: &Target, plan: &[Planned]) -> Vec<Record> {
    let client = client();
    let (tx, rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    for (i, planned) in plan.iter().enumerate() {
        let due = start + planned.at;
        tokio::time::sleep_until(due).await;
        let req = request(target, planned, i);
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(send(&client, req, due).await);
        });
    }
    drop(tx);
    collect(rx, plan.len()).await
}

/// Every record sent on `rx` until its senders are gone.
pub async fn collect(mut rx: mpsc::UnboundedReceiver<Record>, expected: usize) -> Vec<Record> {
    let mut records = Vec::with_capacity(expected);
    while let Some(record) = rx.recv().await {
        records.push(record);
    }
    records
}

/// Sends `req`, planned for `due`, and records its answer: whole within
/// [`DEADLINE`] or failed.
pub async fn send(client: &GenClient, req: http::Request<Full<Bytes>>, due: Instant) -> Record {
    let sent = Instant::now();
    let lag = sent.saturating_duration_since(due);
    let answer = async {
        let rsp = client.request(req).await.ok()?;
        let head = sent.elapsed();
        let headers = rsp.headers();
        let ok = rsp.status() == http::StatusCode::OK;
        let cold = headers
            .get(protocol::COLD_LOAD_HEADER)
            .is_some_and(|v| v == "true");
        let served = headers
            .get(protocol::SERVED_IN_HEADER)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .map(Duration::from_micros);
        let outside = served.map(|served| head.saturating_sub(served));
        let whole = rsp.into_body().collect().await.is_ok();
        Some((ok && whole, cold, outside))
    };
    let (ok, cold, outside) = tokio::time::timeout(DEADLINE, answer)
        .await
        .ok()
        .flatten()
        .unwrap_or((false, false, None));
    Record {
        latency: due.elapsed(),
        ok,
        cold,
        outside: outside.filter(|_| ok),
        lag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steered_request_names_the_server_the_oracle_sends_it_to() {
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let servers: Vec<SocketAddr> = (9000..9008).map(at).collect();
        let plan = plan(200.0, Duration::from_secs(5), 1);
        let direct = Target::direct(&servers, 5, &plan);
        let steered = Target::steered(at(8000), &servers, 5, &plan);
        let mut used = vec![0usize; servers.len()];
        for (i, planned) in plan.iter().enumerate() {
            let req = request(&steered, planned, i);
            assert_eq!(req.uri().authority().unwrap().as_str(), "127.0.0.1:8000");
            let index: usize = req.headers()[STEER_HEADER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                servers[index],
                direct.addr(&planned.model, i),
                "request {i}"
            );
            used[index] += 1;
        }
        assert!(used.iter().all(|&n| n > 0), "every server: {used:?}");
        let plain = request(&Target::Router(at(8000)), &plan[0], 0);
        assert!(plain.headers().get(STEER_HEADER).is_none());
    }
}
