//! The prefill engine of a server with a prefix cache: one task that runs
//! the prefills one at a time, in the order the requests took their serving
//! slots, as one GPU's scheduler runs one prefill batch after another.
//!
//! Each request's job waits for any cold load of its model, looks its
//! blocks up in the [`PrefixCache`], takes `uncached tokens ÷ prefill rate`
//! (slowed under [`Fault::Slow`](super::Fault::Slow)), then inserts its
//! blocks and reports how many prompt tokens were cached. A cache miss thus
//! delays every request queued behind it — which is what makes misses
//! costly. Decoding is not the engine's: a request's tokens are paced by its
//! own body, many at once (continuous batching). A job whose request has
//! gone (its client hung up) is skipped.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::prefix_cache::PrefixCache;
use super::prompt::BLOCK_TOKENS;
use super::state::{Job, Prefilled};

/// Starts the engine of a cache of `capacity_tokens` prefilling at
/// `rate` tokens per second; it ends when the server stops or every
/// sender is gone.
pub(crate) fn spawn(
    capacity_tokens: u64,
    rate: u64,
    mut shutdown: watch::Receiver<bool>,
) -> mpsc::UnboundedSender<Job> {
    let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
    let mut cache = PrefixCache::new(capacity_tokens);
    tokio::spawn(async move {
        loop {
            let job = tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => job,
                    None => return,
                },
                _ = shutdown.changed() => return,
            };
            if job.done.is_closed() {
                continue;
            }
            if job.ready_at > Instant::now() {
                tokio::time::sleep_until(job.ready_at).await;
            }
            let hit = cache.cached_blocks(&job.blocks) as u64;
            let cached = (hit * BLOCK_TOKENS).min(job.tokens);
            let time = prefill_time(job.tokens - cached, rate).saturating_mul(job.slow.max(1));
            if !time.is_zero() {
                tokio::time::sleep(time).await;
            }
            cache.insert(&job.blocks);
            let counters = &job.state.counters;
            counters
                .prompt_tokens
                .fetch_add(job.tokens, Ordering::Relaxed);
            counters.cached_tokens.fetch_add(cached, Ordering::Relaxed);
            job.state.changed.notify_waiters();
            let _ = job.done.send(Prefilled {
                prompt: job.tokens,
                cached,
            });
        }
    });
    jobs
}

/// The prefill time of `uncached` tokens at `rate` tokens per second,
/// rounded up to the microsecond.
pub(crate) fn prefill_time(uncached: u64, rate: u64) -> Duration {
    let micros = (u128::from(uncached) * 1_000_000).div_ceil(u128::from(rate.max(1)));
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// OpenAI's `usage` object: prompt, completion and total tokens, and the
/// cached prompt tokens in `prompt_tokens_details`.
pub(crate) fn usage_json(prefilled: Prefilled, completion: u32) -> String {
    let total = prefilled.prompt + u64::from(completion);
    format!(
        r#"{{"prompt_tokens":{},"completion_tokens":{completion},"total_tokens":{total},"prompt_tokens_details":{{"cached_tokens":{}}}}}"#,
        prefilled.prompt, prefilled.cached
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_time_is_uncached_over_rate() {
        assert_eq!(prefill_time(0, 20_000), Duration::ZERO);
        assert_eq!(prefill_time(1_000, 20_000), Duration::from_millis(50));
        assert_eq!(prefill_time(1, 3), Duration::from_micros(333_334));
    }

    #[test]
    fn usage_is_openai_shaped() {
        let usage: serde_json::Value = serde_json::from_str(&usage_json(
            Prefilled {
                prompt: 100,
                cached: 64,
            },
            8,
        ))
        .unwrap();
        assert_eq!(usage["prompt_tokens"], 100);
        assert_eq!(usage["completion_tokens"], 8);
        assert_eq!(usage["total_tokens"], 108);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 64);
    }
}
