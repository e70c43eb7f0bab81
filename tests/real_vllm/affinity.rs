//! Prefix affinity against real vLLM servers, read from vLLM's own
//! prefix-cache counters: the same workload of conversations and shared
//! documents through the model-only gateway and the prefix-aware one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::fixture::{Vllm, MODEL};
use crate::fleet::health_of;
use crate::gateway::{chat, client, post, Running};
use crate::text::{line, text};

pub const HITS: &str = "vllm:prefix_cache_hits_total";
const QUERIES: &str = "vllm:prefix_cache_queries_total";

/// One piece of the workload.
#[derive(Clone)]
enum Job {
    /// A conversation of `turns` turns over an opening document: each turn
    /// sends the whole history, under the conversation's session header.
    Session {
        id: String,
        opening: String,
        turns: u64,
    },
    /// One question over a document other requests share.
    OneShot { document: String, question: String },
}

/// The workload of issue 39: 8 conversations of 4 turns whose history
/// grows from about 600 to 1,000 tokens, and 48 one-shot questions over
/// 16 shared documents of about 450 tokens (3 each, spread over the run);
/// interleaved. `seed` makes every text differ from another run's.
fn workload(seed: u64) -> Vec<Job> {
    let documents: Vec<String> = (0..16).map(|d| text(seed * 1000 + d, 30)).collect();
    let mut jobs = Vec::new();
    for q in 0..3 {
        for (d, document) in documents.iter().enumerate() {
            jobs.push(Job::OneShot {
                document: document.clone(),
                question: line(seed * 7 + d as u64, 100 + q),
            });
        }
    }
    for s in 0..8u64 {
        let session = Job::Session {
            id: format!("conv-{seed}-{s}"),
            opening: text(seed * 1000 + 100 + s, 40),
            turns: 4,
        };
        jobs.insert((s as usize * 7).min(jobs.len()), session);
    }
    jobs
}

/// Sends `job` through the gateway at `url`; the answers' statuses.
async fn run_job(url: &str, job: &Job, seed: u64) -> Vec<u16> {
    let endpoint = format!("{url}/v1/chat/completions");
    match job {
        Job::OneShot { document, question } => {
            let body = chat(&format!("{document}\n# {question}"), 4, false);
            vec![post(&endpoint, &body, None).await.status]
        }
        Job::Session { id, opening, turns } => {
            let mut messages = vec![serde_json::json!({"role": "user", "content": opening})];
            let mut statuses = Vec::new();
            for turn in 0..*turns {
                let body = serde_json::json!({
                    "model": MODEL,
                    "messages": messages,
                    "max_tokens": 8,
                    "temperature": 0,
                    "ignore_eos": true,
                })
                .to_string();
                let answer = post(&endpoint, &body, Some(id)).await;
                statuses.push(answer.status);
                let reply: serde_json::Value =
                    serde_json::from_str(&answer.body).unwrap_or_default();
                let content = reply["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                messages.push(serde_json::json!({"role": "assistant", "content": content}));
                messages.push(serde_json::json!({
                    "role": "user",
                    "content": text(seed * 31 + turn, 8),
                }));
            }
            statuses
        }
    }
}

/// Runs `jobs` through the gateway, 4 at once; every status.
async fn drive(url: &str, jobs: Vec<Job>, seed: u64) -> Vec<u16> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (jobs, next, url) = (jobs.clone(), next.clone(), url.to_owned());
        workers.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                statuses.extend(run_job(&url, job, seed).await);
            }
            statuses
        }));
    }
    let mut statuses = Vec::new();
    for worker in workers {
        statuses.extend(worker.await.expect("a worker"));
    }
    statuses
}

/// The fleet's prefix-cache hits and queries (tokens), summed.
pub async fn cache_counters(servers: &[Vllm]) -> (f64, f64) {
    let (mut hits, mut queries) = (0.0, 0.0);
    for server in servers {
        hits += server.metric(HITS).await;
        queries += server.metric(QUERIES).await;
    }
    (hits, queries)
}

/// Empties every server's prefix cache (vLLM's dev-mode route; it
/// publishes `AllBlocksCleared`).
pub async fn reset_caches(servers: &[Vllm]) {
    for server in servers {
        let reset = client()
            .post(format!("{}/reset_prefix_cache", server.url()))
            .send()
            .await
            .expect("reset_prefix_cache");
        assert!(
            reset.status().is_success(),
            "reset_prefix_cache: {}",
            reset.status()
        );
    }
}

/// What one gateway's runs of the workload added up to: vLLM's prefix-cache
/// hits and queries (tokens), and the requests each backend took.
#[derive(Debug, Default)]
struct Tally {
    hits: f64,
    queries: f64,
    picked: Vec<u64>,
}

impl Tally {
    /// The hit rate over every run so far.
    fn rate(&self) -> f64 {
        self.hits / self.queries.max(1.0)
    }
}

/// The workload of `seed` through `gw` on emptied caches, added to `tally`;
/// this run's hit rate by vLLM's counters.
async fn run_workload(servers: &[Vllm], gw: &Running, seed: u64, tally: &mut Tally) -> f64 {
    reset_caches(servers).await;
    let before = cache_counters(servers).await;
    let picked_before: Vec<u64> = servers.iter().map(|s| gw.backend(&s.name).picked).collect();
    let statuses = drive(&gw.url, workload(seed), seed).await;
    let bad: Vec<_> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(
        bad.is_empty(),
        "{} of {} failed: {bad:?}",
        bad.len(),
        statuses.len()
    );
    let after = cache_counters(servers).await;
    let (hits, queries) = (after.0 - before.0, after.1 - before.1);
    tally.hits += hits;
    tally.queries += queries;
    tally.picked.resize(servers.len(), 0);
    for ((total, server), before) in tally.picked.iter_mut().zip(servers).zip(picked_before) {
        *total += gw.backend(&server.name).picked - before;
    }
    hits / queries.max(1.0)
}

/// Rounds of the workload, each gateway once a round on the same texts.
/// One run's hit rate swings by ±7 points with the order the 4 workers'
/// requests reach the servers (a bounded-load spill, a hedge's backup
/// copying a document to the other server); the pooled rate over 8
/// rounds, by about a third of that.
const ROUNDS: u64 = 8;

/// Prefix affinity against vLLM's own counters: the same workloads through
/// the model-only gateway and through the prefix-aware one (each run on
/// emptied caches), the prefix-aware one's hit rate over every round at
/// least 5 points above; no ejection in either.
pub async fn prefix_affinity_raises_vllm_s_hit_rate(
    servers: &[Vllm],
    model_only: &Running,
    prefix: &Running,
) {
    let (mut plain, mut aware) = (Tally::default(), Tally::default());
    let mut rounds = Vec::new();
    for seed in 1..=ROUNDS {
        let p = run_workload(servers, model_only, seed, &mut plain).await;
        let a = run_workload(servers, prefix, seed, &mut aware).await;
        rounds.push(format!("{:.0}/{:.0}", p * 100.0, a * 100.0));
    }
    println!(
        "  prefix-cache hit rate over {ROUNDS} rounds: model-only {:.1}% (requests per server \
         {:?}), prefix-aware {:.1}% ({:?}); each round, model-only/prefix-aware: {}; \
         ejections {} and {}",
        plain.rate() * 100.0,
        plain.picked,
        aware.rate() * 100.0,
        aware.picked,
        rounds.join(" "),
        model_only.handle.stats().ejections,
        prefix.handle.stats().ejections,
    );
    for gw in [model_only, prefix] {
        assert_eq!(
            gw.handle.stats().ejections,
            0,
            "{:?}",
            health_of(servers, gw)
        );
    }
    assert!(
        aware.picked.iter().all(|&n| n > 0),
        "the prefix-aware runs spread over both servers: {:?}",
        aware.picked
    );
    assert!(
        aware.rate() >= plain.rate() + 0.05,
        "hit rate {:.3} against {:.3}",
        aware.rate(),
        plain.rate()
    );
}
