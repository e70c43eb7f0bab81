//! The gateway's `GET /metrics` over a real socket shows TTFT and TPOT as
//! Prometheus histograms (`_bucket{le=…}` lines, with the crate's
//! boundaries), each stream counted once with what it took: ten streams
//! whose first token comes 50 ms after the request read as a p50 in the
//! bucket that holds 50 ms. Waits are on counts (the streams read to their
//! end, the balancer's count of them), never on a sleep.

use crate::gateway;

use std::time::Duration;

use tower_model_balance::metrics::{TPOT_BUCKETS, TTFT_BUCKETS};
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use gateway::start_with;

/// A bound so that a broken stack fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

/// One histogram of a scrape, summed over the label sets of the series
/// whose `backend` starts with `backends`.
#[derive(Debug)]
struct Scraped {
    kind: String,
    /// `(le, cumulative count)`, in the scrape's order (ascending `le`).
    buckets: Vec<(f64, u64)>,
    count: u64,
}

fn histogram(scrape: &str, name: &str, backends: &str) -> Scraped {
    let kind = scrape
        .lines()
        .find_map(|l| l.strip_prefix(&format!("# TYPE {name} ")))
        .unwrap_or_else(|| panic!("no # TYPE line for {name} in\n{scrape}"))
        .to_owned();
    let ours = format!("backend=\"{backends}");
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut count = 0;
    for line in scrape.lines().filter(|l| l.contains(&ours)) {
        let value = || line.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
        if line.starts_with(&format!("{name}_bucket{{")) {
            let le = line
                .split("le=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            match buckets.iter_mut().find(|(b, _)| *b == le) {
                Some((_, n)) => *n += value(),
                None => buckets.push((le, value())),
            }
        } else if line.starts_with(&format!("{name}_count{{")) {
            count += value();
        }
    }
    Scraped {
        kind,
        buckets,
        count,
    }
}

/// The bucket `(lower, upper]` holding the median, and the median as
/// Prometheus's `histogram_quantile(0.5, …)` estimates it (linear within
/// that bucket).
fn p50(h: &Scraped) -> ((f64, f64), f64) {
    let rank = h.count as f64 / 2.0;
    let (mut lower, mut below) = (0.0, 0);
    for &(upper, cumulative) in &h.buckets {
        if cumulative as f64 >= rank {
            let share = (rank - below as f64) / (cumulative - below) as f64;
            return ((lower, upper), lower + (upper - lower) * share);
        }
        (lower, below) = (upper, cumulative);
    }
    panic!("no bucket holds the median: {h:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_and_tpot_are_histograms_with_the_streams_p50() {
    // Every first token 50 ms after the request (a 50 ms prefill, the
    // model resident after a 1 ms load), then a token every 20 ms.
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .inference(InferenceTimes::new(0, 50, 50).unwrap())
        .decode_time(Duration::from_millis(20))
        .build()
        .unwrap();
    let gw = start_with("hist", 1, config, |_| {}).await;
    let chat = r#"{"model": "llama-3-8b", "stream": true, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}"#;
    for _ in 0..10 {
        let reply = gw.post("/v1/chat/completions", chat).await;
        assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);
        // A scrape between streams: each stream is counted once however
        // often the gateway is scraped.
        assert_eq!(gw.admin_get("/metrics").await.status, 200);
    }
    // The balancer records a stream when its body ends, as the last frame
    // goes out: wait for its count.
    let recorded = async {
        while gw.handle.backends().iter().map(|b| b.streams).sum::<u64>() < 10 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(BOUND, recorded).await.unwrap();
    let scrape = gw.admin_get("/metrics").await;
    assert_eq!(scrape.status, 200);
    let scrape = scrape.body;

    let ttft = histogram(&scrape, "model_balance_backend_ttft_seconds", "hist-");
    assert_eq!(ttft.kind, "histogram", "{scrape}");
    assert_eq!(ttft.count, 10, "{ttft:?}");
    let les: Vec<f64> = ttft.buckets.iter().map(|b| b.0).collect();
    assert_eq!(les[..les.len() - 1], TTFT_BUCKETS[..], "{ttft:?}");
    let ((lower, upper), median) = p50(&ttft);
    assert!(
        lower < 0.050 && 0.050 <= upper,
        "{lower}..{upper}: {ttft:?}"
    );
    assert!((0.025..=0.1).contains(&median), "p50 {median}: {ttft:?}");

    // 4 tokens 20 ms apart: 3 gaps of 20 ms.
    let tpot = histogram(&scrape, "model_balance_backend_tpot_seconds", "hist-");
    assert_eq!(tpot.kind, "histogram", "{scrape}");
    assert_eq!(tpot.count, 10, "{tpot:?}");
    let les: Vec<f64> = tpot.buckets.iter().map(|b| b.0).collect();
    assert_eq!(les[..les.len() - 1], TPOT_BUCKETS[..], "{tpot:?}");
    let ((lower, upper), median) = p50(&tpot);
    assert!(
        lower < 0.020 && 0.020 <= upper,
        "{lower}..{upper}: {tpot:?}"
    );
    assert!((0.01..=0.04).contains(&median), "p50 {median}: {tpot:?}");
}
