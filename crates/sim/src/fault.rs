//! The faults a simulated server can be put in while it runs.
//!
//! A server can also be killed outright and started again on its port:
//! [`ModelServer::stop`](super::ModelServer::stop) and
//! [`ModelServer::start_on`](super::ModelServer::start_on).

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
    /// Loads through the repository API fail: a load that reaches the end
    /// of its cold-load time while the fault holds fails instead of
    /// making the model ready (it held its serving slot all that time, as
    /// a real failing load does). Every load call waiting for it is
    /// answered as the real server answers a failed load: 400 with
    /// `{"error": "load failed for model '…': …"}` on the KServe v2 route
    /// (Triton's status and body), 400 with a vLLM error body on
    /// `/v1/load_lora_adapter`. Inference requests are served as usual;
    /// cold loads of the auto-load mode are not affected.
    LoadFails,
    /// Loads through the repository API hang: a load that reaches the end
    /// of its cold-load time while the fault holds does not end — the
    /// model stays `LOADING`, the load keeps its serving slot and every
    /// load call waiting for it stays unanswered (until its client gives
    /// up). Once the fault is lifted or changed the load ends as it then
    /// would (ready, or failed under [`LoadFails`](Self::LoadFails)).
    LoadHangs,
    /// The server hangs: every request (on any path, readiness checks
    /// included) is read whole and never answered — no status, no
    /// headers. It is held, counted in [`ServerStats::hung`], until its
    /// client gives up and closes the connection or the server
    /// [stops](super::ModelServer::stop); lifting the fault does not
    /// release the requests already held (the process that hung them
    /// would never answer), it only lets the next ones be served. A
    /// client catches it with a timeout.
    ///
    /// [`ServerStats::hung`]: super::ServerStats::hung
    Hang,
    /// Connections break mid-response: each inference or update request is
    /// served as usual (serving slot, cold load, service time), then its
    /// answer is cut off — the status, the headers (with the whole body's
    /// `content-length`) and the first half of the body are sent, then the
    /// connection is closed. The client reads a response and gets an error
    /// from its body (a message shorter than its length). Other requests
    /// (readiness, metrics, model control) are answered as usual.
    /// A [streamed](super::protocol#streaming) answer is cut after half
    /// its token events (rounded down), as under
    /// [`StreamCut`](Self::StreamCut).
    Reset,
    /// Streamed answers decode slowly: every token event after the first
    /// comes `factor` × the [decode time](super::ServerConfigBuilder::decode_time)
    /// after the one before it (0 counts as 1). The first token — the
    /// prefill — is not slowed, nor is an answer sent whole. A stream
    /// takes the fault in force when its request arrived.
    SlowDecode {
        /// Multiplier of the decode time.
        factor: u32,
    },
    /// Streamed answers fail mid-way: after `after_tokens` token events
    /// (all of them, if the answer has fewer), one error event in vLLM's
    /// shape, `data: {"error":{"message":"…","type":"InternalServerError",
    /// "param":null,"code":500}}`, comes where the next token would have;
    /// then the body ends normally, without `data: [DONE]`. An answer sent
    /// whole is served as usual.
    StreamError {
        /// Token events sent before the error event.
        after_tokens: u32,
    },
    /// Streamed answers are cut off: after `after_tokens` token events
    /// (all of them, if the answer has fewer), where the next event would
    /// have come, the connection is closed; the client gets an error from
    /// the body, as under [`Reset`](Self::Reset). An answer sent whole is
    /// served as usual.
    StreamCut {
        /// Token events sent before the cut.
        after_tokens: u32,
    },
}
