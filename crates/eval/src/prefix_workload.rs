//! The prefix workload, all drawn from the seed: shared prefixes with Zipf
//! popularity, one-shot questions on them and multi-turn chat sessions
//! that start from them, the oracle's bound on the prefix hit rate, and
//! the simulated servers it runs on (a prefix cache of the working set
//! over [`WORKING_SET_OVER_CACHE`]). The fleet job's `prefix` scenario
//! and the peer comparison's `--workload prefix` send it.
//!
//! Text is pseudo-random lowercase words (a token is 4 bytes, as the sim
//! counts), drawn per prefix, question and message, so different prefixes
//! never share a block. Even-numbered prefixes are system prompts (a
//! `system` message); odd ones are documents that open the first `user`
//! message (a RAG question), the question after them.

use std::collections::HashSet;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tower_model_balance_sim::{protocol, ServerConfig};

/// The one model the fleet serves.
pub const MODEL: &str = "llama-3-8b";
/// Shared prefixes (system prompts and documents).
pub const PREFIXES: usize = 256;
/// Tokens of a shared prefix, drawn uniformly.
pub const PREFIX_TOKENS: (u64, u64) = (512, 3_000);
/// Zipf exponent of the prefixes' popularity.
pub const ZIPF_EXPONENT: f64 = 1.05;
/// Share of arrivals that start a session (≈ half of the requests, a
/// session having 4 turns on average).
pub const SESSION_SHARE: f64 = 0.2;
/// Turns of a session, drawn uniformly.
pub const TURNS: (usize, usize) = (2, 6);
/// Tokens of a question or a user message, drawn uniformly.
pub const QUESTION_TOKENS: (u64, u64) = (64, 512);
/// `max_tokens` of a request, drawn uniformly.
pub const MAX_TOKENS: (u32, u32) = (16, 64);
/// The sim's text of one generated token: a session's later turns resend
/// the replies as they were streamed.
const TOKEN_TEXT: &str = "tok ";
/// Requests decoding at once per server.
pub const BATCH: usize = 64;
/// Prompt tokens a server prefills per second.
pub const PREFILL_RATE: u64 = 20_000;
/// The working set over one server's prefix cache: no server can hold
/// every prefix, so where each goes matters.
pub const WORKING_SET_OVER_CACHE: f64 = 2.5;

/// The simulated servers' config for a prefix cache of `cache_tokens`
/// ([`Workload::cache_tokens`]).
pub fn server_config(cache_tokens: u64) -> ServerConfig {
    ServerConfig::builder()
        .concurrency(BATCH)
        .prefix_cache(cache_tokens)
        .prefill_rate(PREFILL_RATE)
        .decode_time(Duration::from_millis(5))
        .build()
        .expect("the workload's server config is valid")
}

/// One request's body, as sent.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The JSON chat completion (streamed, with `include_usage`).
    pub body: String,
}

/// What an arrival sends.
#[derive(Debug, Clone)]
pub enum Job {
    /// One request.
    OneShot(Turn),
    /// A chat session's turns, each sent once the previous one finished,
    /// with `x-session-id: session-{id}`.
    Session {
        /// The session's number, from 1.
        id: u64,
        /// Its requests, in order.
        turns: Vec<Turn>,
    },
}

/// One arrival: a one-shot question or the start of a session.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Send time after the start of the run.
    pub at: Duration,
    /// The shared prefix it starts from (0: the hottest).
    pub prefix: usize,
    /// What it sends.
    pub job: Job,
}

/// The workload and what the oracle makes of it.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The arrivals, in time order once [scheduled](Workload::schedule).
    pub arrivals: Vec<Arrival>,
    /// Requests in all (one-shots and turns).
    pub requests: usize,
    /// The oracle's bound: one infinite cache shared by every server.
    pub oracle_hit_rate: f64,
    /// The oracle's cache at the end, in tokens: every distinct block.
    pub working_set_tokens: u64,
    /// Mean uncached prompt tokens per request under the oracle.
    pub oracle_uncached_mean: f64,
    /// Shortest and longest prompt, in tokens.
    pub prompt_range: (u64, u64),
}

/// Pseudo-random lowercase words, exactly `tokens × 4` bytes.
fn words(rng: &mut SmallRng, tokens: u64) -> String {
    let len = tokens as usize * protocol::TOKEN_BYTES;
    let mut text = String::with_capacity(len + 10);
    while text.len() < len {
        for _ in 0..rng.gen_range(2..=9) {
            text.push(char::from(b'a' + rng.gen_range(0..26u8)));
        }
        text.push(' ');
    }
    text.truncate(len);
    text
}

/// A chat completion body: the prefix (a system message or the head of
/// the first user message), then the conversation.
fn body(prefix: &str, system: bool, conversation: &[(bool, String)], max_tokens: u32) -> String {
    let mut messages = Vec::new();
    if system {
        messages.push(serde_json::json!({"role": "system", "content": prefix}));
    }
    for (i, (user, text)) in conversation.iter().enumerate() {
        let role = if *user { "user" } else { "assistant" };
        let content = if i == 0 && !system {
            format!("{prefix}\n\n{text}")
        } else {
            text.clone()
        };
        messages.push(serde_json::json!({"role": role, "content": content}));
    }
    serde_json::json!({
        "model": MODEL,
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": max_tokens,
        "messages": messages,
    })
    .to_string()
}

/// Draws about `requests` requests (whole sessions: a few more) from
/// `seed`, arrival times not yet set (see [`Workload::schedule`]).
pub fn generate(requests: usize, seed: u64) -> Workload {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let prefixes: Vec<String> = (0..PREFIXES)
        .map(|i| {
            let mut own = SmallRng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ i as u64);
            let tokens = own.gen_range(PREFIX_TOKENS.0..=PREFIX_TOKENS.1);
            words(&mut own, tokens)
        })
        .collect();
    let weights: Vec<f64> = (1..=PREFIXES)
        .map(|r| (r as f64).powf(-ZIPF_EXPONENT))
        .collect();
    let total: f64 = weights.iter().sum();
    let cdf: Vec<f64> = weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w / total;
            Some(*acc)
        })
        .collect();
    let mut arrivals = Vec::new();
    let mut sent = 0;
    let mut sessions = 0u64;
    while sent < requests {
        let draw: f64 = rng.gen();
        let prefix = cdf.partition_point(|&c| c < draw).min(PREFIXES - 1);
        let system = prefix % 2 == 0;
        let text = &prefixes[prefix];
        let job = if rng.gen_bool(SESSION_SHARE) {
            let n = rng.gen_range(TURNS.0..=TURNS.1);
            let mut conversation = Vec::new();
            let mut turns = Vec::with_capacity(n);
            for _ in 0..n {
                let tokens = rng.gen_range(QUESTION_TOKENS.0..=QUESTION_TOKENS.1);
                conversation.push((true, words(&mut rng, tokens)));
                let max_tokens = rng.gen_range(MAX_TOKENS.0..=MAX_TOKENS.1);
                turns.push(Turn {
                    body: body(text, system, &conversation, max_tokens),
                });
                conversation.push((false, TOKEN_TEXT.repeat(max_tokens as usize)));
            }
            sent += n;
            sessions += 1;
            Job::Session {
                id: sessions,
                turns,
            }
        } else {
            let tokens = rng.gen_range(QUESTION_TOKENS.0..=QUESTION_TOKENS.1);
            let question = vec![(true, words(&mut rng, tokens))];
            let max_tokens = rng.gen_range(MAX_TOKENS.0..=MAX_TOKENS.1);
            sent += 1;
            Job::OneShot(Turn {
                body: body(text, system, &question, max_tokens),
            })
        };
        arrivals.push(Arrival {
            at: Duration::ZERO,
            prefix,
            job,
        });
    }
    oracle(arrivals)
}

/// Every request's body, in order (a session's turns in turn order).
pub fn bodies(arrivals: &[Arrival]) -> impl Iterator<Item = &str> {
    arrivals
        .iter()
        .flat_map(|a| match &a.job {
            Job::OneShot(turn) => std::slice::from_ref(turn).iter(),
            Job::Session { turns, .. } => turns.iter(),
        })
        .map(|t| t.body.as_str())
}

/// The oracle: one infinite cache shared by every server, the server's
/// own blocks. With chained keys each distinct block is missed once, at
/// its first appearance, whatever the order — so the bound does not
/// depend on the arrival times.
fn oracle(arrivals: Vec<Arrival>) -> Workload {
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut tokens, mut cached, mut requests) = (0u64, 0u64, 0usize);
    let mut range = (u64::MAX, 0);
    for body in bodies(&arrivals) {
        let text = protocol::prompt_text(body.as_bytes()).expect("a chat body");
        let prompt = protocol::prompt_tokens(&text);
        let blocks: Vec<u64> = protocol::prompt_blocks(&text).collect();
        let hit = blocks.iter().take_while(|b| seen.contains(b)).count() as u64;
        seen.extend(blocks);
        tokens += prompt;
        cached += (hit * protocol::BLOCK_TOKENS).min(prompt);
        requests += 1;
        range = (range.0.min(prompt), range.1.max(prompt));
    }
    Workload {
        arrivals,
        requests,
        oracle_hit_rate: cached as f64 / tokens.max(1) as f64,
        working_set_tokens: seen.len() as u64 * protocol::BLOCK_TOKENS,
        oracle_uncached_mean: (tokens - cached) as f64 / requests.max(1) as f64,
        prompt_range: range,
    }
}

impl Workload {
    /// Each server's prefix cache: the working set over
    /// [`WORKING_SET_OVER_CACHE`], in whole blocks.
    pub fn cache_tokens(&self) -> u64 {
        ((self.working_set_tokens as f64 / WORKING_SET_OVER_CACHE) as u64)
            .next_multiple_of(protocol::BLOCK_TOKENS)
    }

    /// Requests per second that keep `utilization` of a fleet's prefill
    /// capacity busy if it caches as well as the oracle:
    /// `utilization × backends × prefill_rate ÷ oracle_uncached_mean`.
    pub fn request_rate(&self, backends: usize, prefill_rate: u64, utilization: f64) -> f64 {
        utilization * (backends as u64 * prefill_rate) as f64 / self.oracle_uncached_mean.max(1.0)
    }

    /// Sets Poisson arrival times for one-shots and session starts so that
    /// requests come at `request_rate` per second: arrivals at
    /// `request_rate × arrivals ÷ requests`.
    pub fn schedule(&mut self, request_rate: f64, seed: u64) {
        let rate = request_rate * self.arrivals.len() as f64 / self.requests.max(1) as f64;
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xa11_0ca7e);
        let mut at = 0.0;
        for arrival in &mut self.arrivals {
            let u: f64 = rng.gen();
            at += -(1.0 - u).ln() / rate;
            arrival.at = Duration::from_secs_f64(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload_and_the_oracle_counts_shared_blocks() {
        let a = generate(200, 7);
        let b = generate(200, 7);
        assert_eq!(a.requests, b.requests);
        assert!(bodies(&a.arrivals).eq(bodies(&b.arrivals)));
        assert!(a.requests >= 200 && a.requests < 206);
        assert!(a.oracle_hit_rate > 0.3 && a.oracle_hit_rate < 1.0);
        // Two prefixes share no block.
        let block = |i: usize| {
            let body = bodies(&a.arrivals)
                .zip(a.arrivals.iter().flat_map(|x| {
                    let n = match &x.job {
                        Job::OneShot(_) => 1,
                        Job::Session { turns, .. } => turns.len(),
                    };
                    std::iter::repeat_n(x.prefix, n)
                }))
                .find(|(_, p)| *p == i)
                .map(|(b, _)| b.to_owned());
            body.map(|b| {
                protocol::prompt_blocks(&protocol::prompt_text(b.as_bytes()).unwrap()).next()
            })
        };
        assert_ne!(block(0), block(1));
    }
}
