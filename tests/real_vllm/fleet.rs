//! The fleet's behaviour against real vLLM servers: prefix affinity read
//! from vLLM's own prefix-cache counters, no ejection under ordinary
//! multi-turn traffic, a stopped server ejected, a killed one failing only
//! its own streams, a restarted one back in rotation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::breaker::BreakerState;

use crate::fixture::{Vllm, MODEL};
use crate::gateway::{chat, client, open_stream, post, Running};

const HITS: &str = "vllm:prefix_cache_hits_total";
const QUERIES: &str = "vllm:prefix_cache_queries_total";

/// A line of code-like text from `seed` and `i`: what the tokenizer was
/// trained on, so about four bytes a token.
fn line(seed: u64, i: u64) -> String {
    let x = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(i.wrapping_mul(1_442_695_040_888_963_407));
    format!(
        "value_{} = compute(items[{}], key=\"k{}\")\n",
        x % 997,
        (x >> 16) % 89,
        (x >> 32) % 9973
    )
}

/// `n` lines of text from `seed`.
fn text(seed: u64, n: u64) -> String {
    (0..n).map(|i| line(seed, i)).collect()
}

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
async fn cache_counters(servers: &[Vllm]) -> (f64, f64) {
    let (mut hits, mut queries) = (0.0, 0.0);
    for server in servers {
        hits += server.metric(HITS).await;
        queries += server.metric(QUERIES).await;
    }
    (hits, queries)
}

/// Empties every server's prefix cache (vLLM's dev-mode route).
async fn reset_caches(servers: &[Vllm]) {
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

/// The workload through `gw` on emptied caches: its hit rate by vLLM's
/// counters, and how many requests each backend took.
async fn hit_rate(servers: &[Vllm], gw: &Running, seed: u64) -> (f64, Vec<u64>) {
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
    let picked = servers
        .iter()
        .zip(picked_before)
        .map(|(s, b)| gw.backend(&s.name).picked - b)
        .collect();
    ((after.0 - before.0) / (after.1 - before.1).max(1.0), picked)
}

/// Prefix affinity against vLLM's own counters: the same kind of workload
/// through the model-only gateway and through the prefix-aware one (each
/// on emptied caches, each with texts of its own), the prefix-aware one's
/// hit rate at least 5 points above; no ejection in either run.
pub async fn prefix_affinity_raises_vllm_s_hit_rate(
    servers: &[Vllm],
    model_only: &Running,
    prefix: &Running,
) {
    let (plain, plain_picked) = hit_rate(servers, model_only, 1).await;
    let (aware, aware_picked) = hit_rate(servers, prefix, 2).await;
    println!(
        "  prefix-cache hit rate: model-only {:.1}% (requests per server {plain_picked:?}), \
         prefix-aware {:.1}% ({aware_picked:?}); ejections {} and {}",
        plain * 100.0,
        aware * 100.0,
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
        aware_picked.iter().all(|&n| n > 0),
        "the prefix-aware run spread over both servers: {aware_picked:?}"
    );
    assert!(
        aware >= plain + 0.05,
        "hit rate {aware:.3} against {plain:.3}"
    );
}

/// Each server's status and health as `gw` last evaluated it (why it was
/// ejected, its error rate, its latencies): what a failed check prints.
fn health_of(servers: &[Vllm], gw: &Running) -> Vec<String> {
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
            gw.handle
                .health(&tower_model_balance::backend::BackendId::new(&victim.name).unwrap()),
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
    victim.signal("CONT");
    // Those sent to it before it was out are answered once it runs again.
    let mut before = Vec::new();
    for request in sent {
        before.push(request.await.expect("a request").status);
    }
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
        "  {} out of rotation {took:?} after SIGSTOP ({} requests sent meanwhile: {before:?}); \
         then {served:?}; back in rotation {:?} after SIGCONT",
        victim.name,
        before.len(),
        continued.elapsed()
    );
    assert!(
        served.iter().all(|(status, _)| *status == 200),
        "{served:?}"
    );
}

/// Sends SIGCONT to its server when dropped.
struct Continue<'a>(&'a Vllm);

impl Drop for Continue<'_> {
    fn drop(&mut self) {
        self.0.signal("CONT");
    }
}

/// kill -9 of one server: only the streams in flight on it fail; every
/// request started after succeeds.
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
        outcomes.push((*on_victim, stream.finish().await.is_ok()));
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
