//! What the driver saw of one request: the figures' raw material.

use std::time::Duration;

/// What the driver saw of one request.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub latency: Duration,
    pub ok: bool,
    pub cold: bool,
    pub inference: bool,
    /// Sent `Critical`.
    pub critical: bool,
    /// Failed `Overloaded` (shed by the balancer's admission), after
    /// waiting this long for room (zero: shed at once).
    pub shed: Option<Duration>,
    /// Time to the first token of a successful stream (`--stream`).
    pub ttft: Option<Duration>,
    /// Time per output token after the first of a successful stream.
    pub tpot: Option<Duration>,
}
