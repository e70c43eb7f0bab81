//! `--stream`: each inference request is an OpenAI chat completion with
//! `"stream": true` (updates stay whole, on the KServe v2 route), and each
//! strategy is judged by what a chat user feels: the time to the first
//! token (TTFT, from the send to the first body frame that carries a token
//! — not the headers) and the time per output token after it (TPOT, the
//! span from the first token frame to the last over the tokens less one).
//! A stream that carries an error event, or ends without `data: [DONE]`,
//! or breaks, is a failure.
//!
//! A streamed request holds its serving slot for its prefill and its
//! decode, so the arrival rate is set against that longer time: the offered
//! load stays the scenario's fraction of warm capacity.

use std::time::Duration;

use bytes::{Buf, Bytes};
use hdrhistogram::Histogram;
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use tokio::time::Instant;
use tower::BoxError;
use tower_model_balance_eval::workload::{self, Planned};
use tower_model_balance_sim::{protocol, InferenceTimes, ServerConfig};

use crate::record::Record;

/// Tokens asked of each streamed request (`max_tokens`).
pub const TOKENS: u32 = 8;

/// Requests per second at `load` of the fleet's warm capacity when every
/// inference request holds its slot for its prefill and then `TOKENS − 1`
/// decode steps of `config`'s decode time.
pub fn arrival_rate(
    backends: usize,
    config: &ServerConfig,
    times: &InferenceTimes,
    load: f64,
) -> f64 {
    let slots = (backends * config.concurrency()) as f64;
    // The whole-answer rate at full load is slots ÷ the mean prefill.
    let prefill = slots / workload::arrival_rate(backends, config.concurrency(), times, 1.0);
    let decode = config.decode_time().as_secs_f64() * f64::from(TOKENS - 1);
    load * slots / (prefill + decode)
}

/// The streamed chat completion for `planned` (an inference request): the
/// model in the JSON body for the server, and in `x-model-id` for the
/// strategies that route by it, as the whole requests carry it.
pub fn request(planned: &Planned, urgency: &str) -> http::Request<Full<Bytes>> {
    let body = format!(
        r#"{{"model":"{}","stream":true,"max_tokens":{TOKENS},"messages":[{{"role":"user","content":"hi"}}]}}"#,
        planned.model
    );
    http::Request::post(protocol::CHAT_COMPLETIONS_PATH)
        .header("x-model-id", planned.model.as_str())
        .header("x-request-kind", "inference")
        .header("x-urgency", urgency)
        .header("content-type", "application/json")
        .body(Full::from(body))
        .expect("a valid request")
}

/// What the client saw of one event stream.
#[derive(Debug, Clone, Copy)]
pub struct Streamed {
    /// When the first frame carrying a token arrived.
    pub first: Option<Instant>,
    /// When the last frame carrying a token arrived.
    pub last: Option<Instant>,
    /// Token events read.
    pub tokens: u32,
    /// `data: [DONE]` read, and no error event.
    pub complete: bool,
}

impl Streamed {
    /// TTFT and TPOT from `sent`; `None` for an incomplete stream.
    pub fn times(&self, sent: Instant) -> Option<(Duration, Option<Duration>)> {
        let (first, last) = (self.first?, self.last?);
        if !self.complete {
            return None;
        }
        let tpot = (self.tokens > 1).then(|| (last - first) / (self.tokens - 1));
        Some((first - sent, tpot))
    }
}

/// Reads `body` to its end: an event stream (`events`) frame by frame,
/// stamping the frames that complete a token event; any other body whole.
/// `Err` when the body breaks.
pub async fn read<B>(body: B, events: bool) -> Result<Option<Streamed>, BoxError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if !events {
        body.collect().await.map_err(Into::into)?;
        return Ok(None);
    }
    let mut body = std::pin::pin!(body);
    let mut seen = Streamed {
        first: None,
        last: None,
        tokens: 0,
        complete: false,
    };
    let mut errored = false;
    // Bytes of an event not yet whole (events may span frames).
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame.map_err(Into::into)?.into_data() else {
            continue;
        };
        let now = Instant::now();
        while data.has_remaining() {
            let chunk = data.chunk();
            pending.extend_from_slice(chunk);
            let n = chunk.len();
            data.advance(n);
        }
        let mut tokens = 0;
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let event = event.strip_prefix(b"data: ").unwrap_or(&event);
            if event.starts_with(b"[DONE]") {
                seen.complete = !errored;
            } else if event.starts_with(br#"{"error""#) {
                errored = true;
            } else if contains(event, br#""choices":[{"#) {
                // A token chunk; a usage chunk (`"choices":[]`) is none.
                tokens += 1;
            }
        }
        if tokens > 0 {
            seen.first.get_or_insert(now);
            seen.last = Some(now);
            seen.tokens += tokens;
        }
    }
    Ok(Some(seen))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The streaming figures of one strategy, in its JSON object with
/// `--stream` (milliseconds).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamFigures {
    /// Successful streams.
    pub streams_ok: u64,
    pub ttft_mean_ms: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_mean_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p99_ms: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// TTFT and TPOT over the successful streams of `records`.
pub fn figures(records: &[Record]) -> StreamFigures {
    let (mut ttft, mut tpot) = (histogram(), histogram());
    let us = |d: Duration| (d.as_micros() as u64).clamp(1, 600_000_000);
    for r in records.iter().filter(|r| r.ok) {
        if let Some(first) = r.ttft {
            ttft.saturating_record(us(first));
        }
        if let Some(per_token) = r.tpot {
            tpot.saturating_record(us(per_token));
        }
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    StreamFigures {
        streams_ok: ttft.len(),
        ttft_mean_ms: ttft.mean() / 1000.0,
        ttft_p50_ms: ms(&ttft, 0.5),
        ttft_p99_ms: ms(&ttft, 0.99),
        tpot_mean_ms: tpot.mean() / 1000.0,
        tpot_p50_ms: ms(&tpot, 0.5),
        tpot_p99_ms: ms(&tpot, 0.99),
    }
}
