//! Retries that draw from the hedge's budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::budget::Budget;
use super::request::CloneRequest;
use crate::backend::{Exclude, PickedSlot};
use crate::error::{BoxError, StreamFailed};

/// A `tower::retry::Policy` that retries only where a retry is safe and
/// only while the shared [`Budget`] has room, so that hedges and retries
/// together add at most the budget's share of load.
///
/// Retried, before any answer began:
///
/// * a connection refused (the connection never opened: nothing was
///   processed), for any request;
/// * a [`ModelLoadFailed`](crate::error::ModelLoadFailed) (feature
///   `balance`): the balancer never sent the request — its model's load
///   on the backend picked failed, or that backend's repository could not
///   be read — for any request, to another backend;
/// * a `503` answer (the server refused it), for any request;
/// * a `404` answer to a request that is not an update, when the retry
///   goes to another backend (below): KServe v2 and OpenAI-compatible
///   servers answer 404 for a model they do not hold *now* — a server
///   restarted empty, a model unloaded since the balancer learned it was
///   there — and the balancer, told of the 404, sends the retry to another
///   backend that serves the model (or, with placement, has it loaded).
///   A model no backend serves gets the second backend's 404. This
///   retry draws from the budget like any other: a 404 may as well be a
///   version or a route that exists nowhere (the head cannot say which),
///   and a client asking for one must not double its calls for free. A
///   404 to a request that names a version (a KServe v2 path with
///   `/versions/`) is not retried at all: the backends share one
///   repository, so a version one lacks they all lack (and MLServer's
///   answer cannot tell a missing version from a missing model);
/// * for requests that are not updates, any other transport failure before
///   the response's head — an I/O error in the source chain (a reset), or
///   hyper's `IncompleteMessage` (a kept-alive connection closed before any
///   answer). Inference has no side effect (RFC 9110's idempotent
///   semantics: a hedge sends it twice anyway), and real servers do this:
///   uvicorn, under MLServer, KServe and vLLM, closes a connection after a
///   500 without saying so, and the next request sent on it fails. An
///   update may have been applied: it is not retried;
/// * for requests that are not updates, an event stream that failed
///   before its first token ([`StreamFailed`], from a
///   [`FirstFrame`](super::FirstFrame) below this policy's `Retry`):
///   nothing of it reached the caller. After the first token nothing is
///   retried: the caller holds part of one backend's answer, and another
///   backend's tokens would not continue it (a sampled generation differs
///   from one run to the next).
///
/// A request marked [`SendOnce`](crate::route::SendOnce) (a write, or a
/// call that stores its answer) is retried only when its connection was
/// refused: a 503, a 404 or a reset may come after the server acted on
/// it.
///
/// Never anything once a response has begun other than that 503 and 404:
/// other statuses, and errors after the headers (a body's), are not retried;
/// nor a timeout (no transport error). At most `max_retries` (default 1)
/// per request.
///
/// **To another backend.** When the request carries a
/// [`PickedSlot`](crate::backend::PickedSlot) that the balancer wrote its
/// pick into — a hedge's first attempt does, when this policy's
/// `tower::retry::Retry` sits between the [`HedgeLayer`](super::HedgeLayer)
/// and the balancer — the retry carries
/// [`Exclude::strict`](crate::backend::Exclude::strict) of that backend
/// and is sent at once: the balancer sends it elsewhere while any other
/// backend is eligible. Without a slot the policy cannot tell where the
/// request went: a 503 is retried only with a `Retry-After` of whole
/// seconds at most [`max_wait`](Self::max_wait) (default 1 s), after that
/// wait, and a 503 without one is returned as is.
///
/// Built from a [`HedgeLayer`](super::HedgeLayer) with
/// [`retry_policy`](super::HedgeLayer::retry_policy) (the layer counts the
/// requests), or alone with [`RetryPolicy::new`] over a budget of its own.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    budget: Arc<Budget>,
    /// Whether this policy counts requests into the budget.
    deposits: bool,
    max_retries: u32,
    max_wait: Duration,
    /// Retries made for this request (in the retry future's clone).
    retries: u32,
}

impl RetryPolicy {
    /// A policy with its own budget: `ratio` retries per request (clamped
    /// to [0, 1]) over a sliding `window` (at least 10 ms), counting the
    /// requests it sees. Its budget has no floor: a
    /// [`HedgeLayer`](super::HedgeLayer)'s
    /// [`retry_policy`](super::HedgeLayer::retry_policy) shares the
    /// layer's, with the floor of
    /// [`budget_min_per_sec`](super::HedgeConfigBuilder::budget_min_per_sec).
    pub fn new(ratio: f64, window: Duration) -> Self {
        let window = window.max(Duration::from_millis(10));
        let budget = Arc::new(Budget::new(ratio, 0, window, Instant::now()));
        Self {
            deposits: true,
            ..Self::counted_elsewhere(budget)
        }
    }

    pub(crate) fn counted_elsewhere(budget: Arc<Budget>) -> Self {
        Self {
            budget,
            deposits: false,
            max_retries: 1,
            max_wait: Duration::from_secs(1),
            retries: 0,
        }
    }

    /// Retries per request at most (default 1).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The longest `Retry-After` waited for (default 1 s); a 503 asking
    /// for longer is returned as is.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The budget retries draw from.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// How long to wait before retrying `result`, or `None` if a retry is
    /// not safe; `elsewhere`: the retry goes to another backend (no wait).
    fn safe_wait<B>(
        &self,
        result: &Result<http::Response<B>, BoxError>,
        elsewhere: bool,
        update: bool,
        path: &str,
    ) -> Option<Duration> {
        match result {
            Ok(response) if response.status() == http::StatusCode::SERVICE_UNAVAILABLE => {
                if elsewhere {
                    return Some(Duration::ZERO);
                }
                let after = response.headers().get(http::header::RETRY_AFTER)?;
                let seconds: u64 = after.to_str().ok()?.trim().parse().ok()?;
                let wait = Duration::from_secs(seconds);
                (wait <= self.max_wait).then_some(wait)
            }
            Ok(response) if response.status() == http::StatusCode::NOT_FOUND => {
                let version = path.starts_with("/v2/models/") && path.contains("/versions/");
                (elsewhere && !update && !version).then_some(Duration::ZERO)
            }
            Ok(_) => None,
            Err(error) => {
                let unanswered =
                    !update && (transport_failed(error.as_ref()) || error.is::<StreamFailed>());
                (connect_refused(error.as_ref()) || unanswered).then_some(Duration::ZERO)
            }
        }
    }
}

/// Whether `error`'s source chain holds an I/O error of a connection that
/// never opened.
fn connect_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        next = error.source();
    }
    false
}

/// hyper's text for a connection closed before any response came (its
/// `IncompleteMessage` error kind, which has no I/O source to match and no
/// type outside hyper's own).
/// Whether the request never reached the backend: its connection was
/// refused, or the balancer did not send it (its model's load there
/// failed: [`ModelLoadFailed`](crate::error::ModelLoadFailed)).
fn never_sent(error: &(dyn std::error::Error + 'static)) -> bool {
    if connect_refused(error) {
        return true;
    }
    #[cfg(feature = "balance")]
    {
        let mut next = Some(error);
        while let Some(error) = next {
            if error.is::<crate::error::ModelLoadFailed>() {
                return true;
            }
            next = error.source();
        }
    }
    false
}

const CLOSED_BEFORE_ANSWER: &str = "connection closed before message completed";

/// Whether `error`'s source chain says the transport failed: an I/O
/// error, or a connection closed before any answer.
fn transport_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<std::io::Error>() || error.to_string() == CLOSED_BEFORE_ANSWER {
            return true;
        }
        next = error.source();
    }
    false
}

impl<B, RB> tower::retry::Policy<http::Request<B>, http::Response<RB>, BoxError> for RetryPolicy
where
    http::Request<B>: CloneRequest,
{
    type Future = Sleep;

    fn retry(
        &mut self,
        req: &mut http::Request<B>,
        result: &mut Result<http::Response<RB>, BoxError>,
    ) -> Option<Self::Future> {
        if self.retries >= self.max_retries {
            return None;
        }
        // The backend the failed attempt went to, if the balancer said.
        let picked = req
            .extensions()
            .get::<PickedSlot>()
            .and_then(PickedSlot::get)
            .cloned();
        let update = super::service::route_of(&*req).1;
        let wait = match super::service::is_send_once(&*req) {
            // Sent once: again only if it never left.
            true => match result {
                Err(error) if never_sent(error.as_ref()) => Duration::ZERO,
                _ => return None,
            },
            false => match result {
                Err(error) if never_sent(error.as_ref()) => Duration::ZERO,
                _ => self.safe_wait(result, picked.is_some(), update, req.uri().path())?,
            },
        };
        let now = Instant::now();
        if !self.budget.try_withdraw(now) {
            return None;
        }
        if let Some(backend) = picked {
            req.extensions_mut().insert(Exclude::strict(backend));
        }
        self.retries += 1;
        Some(tokio::time::sleep_until(now + wait))
    }

    fn clone_request(&mut self, req: &http::Request<B>) -> Option<http::Request<B>> {
        // Called once per request before any retry (on the service's own
        // policy), then after each retry on the request's clone.
        if self.retries == 0 && self.deposits {
            self.budget.deposit(Instant::now());
        }
        req.clone_request()
    }
}
