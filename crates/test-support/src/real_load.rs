//! The real-server tests' workload (`tests/real_servers.rs`,
//! `tests/real_servers_client.rs`): one test at a time, Zipf model
//! indices, and KServe v2 inferences sent at a concurrency with every
//! answer kept.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::util::rng::Rng;

use crate::lcg::Lcg;
use crate::mlserver;

/// One real-server test at a time: each starts its own processes, and on
/// 2 cores the measured figures (the added p50 above all) must not pay for
/// another test's servers starting beside them.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Zipf(1.1) model indices over `n` models, from a seeded LCG.
pub fn zipf(n: usize, count: usize, seed: u64) -> Vec<usize> {
    let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = Lcg(seed);
    (0..count)
        .map(|_| {
            let mut u = (rng.next_u64() as f64 / (1u64 << 53) as f64) * total;
            weights
                .iter()
                .position(|w| {
                    u -= w;
                    u < 0.0
                })
                .unwrap_or(n - 1)
        })
        .collect()
}

/// What one request got.
#[derive(Debug, Clone)]
pub struct Sent {
    pub model: usize,
    pub status: u16,
    pub at: Instant,
    pub body: String,
}

/// Sends `POST /v2/models/m{i}/infer` for each model index of `plan` to
/// `addr`, `concurrency` at once over kept-alive connections; every
/// answer, in the order sent.
pub async fn drive(addr: SocketAddr, plan: &[usize], concurrency: usize) -> Vec<Sent> {
    let next = Arc::new(AtomicUsize::new(0));
    let plan = Arc::new(plan.to_vec());
    let out = Arc::new(Mutex::new(vec![None; plan.len()]));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, plan, out) = (next.clone(), plan.clone(), out.clone());
        workers.push(tokio::spawn(async move {
            let client = mlserver::client();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&model) = plan.get(i) else {
                    return;
                };
                let path = format!("/v2/models/m{model}/infer");
                let start = Instant::now();
                let (status, body) =
                    mlserver::post(&client, addr, &path, mlserver::infer_body(i)).await;
                let sent = Sent {
                    model,
                    status,
                    at: start,
                    body,
                };
                out.lock().unwrap()[i] = Some(sent);
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let out = std::mem::take(&mut *out.lock().unwrap());
    out.into_iter()
        .map(|s| s.expect("every request answered"))
        .collect()
}

pub fn ok_share(sent: &[Sent]) -> f64 {
    sent.iter().filter(|s| s.status == 200).count() as f64 / sent.len().max(1) as f64
}

/// A sample of the failures, for the assertion messages.
pub fn failures(sent: &[Sent]) -> String {
    let mut by_status = std::collections::BTreeMap::<u16, (usize, String)>::new();
    for s in sent.iter().filter(|s| s.status != 200) {
        let entry = by_status.entry(s.status).or_insert((0, s.body.clone()));
        entry.0 += 1;
    }
    format!("{by_status:?}")
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}
