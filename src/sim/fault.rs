//! The faults a simulated server can be put in while it runs.

/// A fault the server can be put in, and taken out of, while it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// Every request is answered 503 Service Unavailable at once (after
    /// its body is read), without waiting for a serving slot.
    Unavailable,
    /// A `share` (fraction in [0, 1]) of requests, chosen by hashing their
    /// sequence number, take `factor` times their normal time: their
    /// service time (inference or update) and their wait behind a
    /// [`Backlog`](Self::Backlog). `Slow { factor: 10, share: 1.0 }` makes
    /// every request 10× slower, none failing.
    Slow {
        /// Multiplier of the service time.
        factor: u32,
        /// Fraction of requests slowed, in [0, 1].
        share: f64,
    },
    /// As if `waiting` requests of other clients were queued ahead of each
    /// request: `vllm:num_requests_waiting` reports them on top of the real
    /// queue, and each inference or update request first waits
    /// `ceil(waiting / concurrency) × its own service time` (the phantom
    /// requests take as long as it does, `concurrency` at once), counted
    /// as waiting, before it queues for a serving slot. The phantom
    /// requests hold no slot: `vllm:num_requests_running` and the KV-cache
    /// usage stay true.
    Backlog {
        /// Phantom requests queued ahead.
        waiting: u32,
    },
}
