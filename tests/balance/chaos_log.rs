//! What each backend's endpoint was given and how each request ended
//! there: the chaos suite's evidence of how (and how fast) a fault was
//! found.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Request, Response};
use tokio::time::Instant;
use tower::{BoxError, Service};
use tower_model_balance::backend::{Exclude, PickedSlot};
use tower_model_balance::hedge::RetryPolicy;

/// How a request reached an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// An update (P2C over every backend, never hedged).
    Update,
    /// A retry (by the retry layer above the hedge).
    Retry,
    /// A hedge's backup.
    Backup,
    /// A first attempt with a backup waiting on the hedge's delay.
    Hedged,
    /// A first attempt with no backup (its model too new to hedge).
    Alone,
}

impl Via {
    pub const ALL: [Via; 5] = [
        Via::Hedged,
        Via::Alone,
        Via::Backup,
        Via::Update,
        Via::Retry,
    ];

    fn of<B>(req: &Request<B>) -> Self {
        let ext = req.extensions();
        if ext.get::<Retried>().is_some() {
            Via::Retry
        } else if req
            .headers()
            .get("x-request-kind")
            .is_some_and(|v| v == "update")
        {
            Via::Update
        } else if ext.get::<Exclude>().is_some() {
            Via::Backup
        } else if ext.get::<PickedSlot>().is_some() {
            Via::Hedged
        } else {
            Via::Alone
        }
    }
}

/// How a request ended at the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its response's head arrived (any status).
    Answered,
    /// An error: the timeout, a refused or reset connection.
    Failed,
    /// Dropped unanswered: outrun by its hedge (or its backup by the
    /// first attempt).
    Dropped,
}

/// One request given to an endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub at: Instant,
    pub via: Via,
    pub end: Option<(Instant, End)>,
}

/// One endpoint's requests, in the order given.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Entry>>>);

impl Log {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self, via: Via) -> Ticket {
        let mut log = self.lock();
        log.push(Entry {
            at: Instant::now(),
            via,
            end: None,
        });
        Ticket {
            log: self.clone(),
            index: log.len() - 1,
            end: End::Dropped,
        }
    }

    /// The requests given from `from` to `until`.
    pub fn between(&self, from: Instant, until: Instant) -> Vec<Entry> {
        let log = self.lock();
        let start = log.partition_point(|e| e.at < from);
        log[start..]
            .iter()
            .take_while(|e| e.at <= until)
            .copied()
            .collect()
    }
}

/// Records its request's end when dropped.
struct Ticket {
    log: Log,
    index: usize,
    end: End,
}

impl Ticket {
    fn ended(&mut self, end: End) {
        self.end = end;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.log.lock()[self.index].end = Some((Instant::now(), self.end));
    }
}

/// An endpoint that counts and logs the requests it is given: those the
/// balancer sent to its backend, its breaker having admitted them.
#[derive(Clone)]
pub struct Counted<S> {
    pub inner: S,
    pub sent: Arc<AtomicU64>,
    pub log: Log,
}

type Logged<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, RB> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    RB: 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Logged<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut ticket = self.log.start(Via::of(&req));
        let future = self.inner.call(req);
        Box::pin(async move {
            let result = future.await;
            ticket.ended(match result {
                Ok(_) => End::Answered,
                Err(_) => End::Failed,
            });
            result
        })
    }
}

/// Marks a retried request, for [`Via::Retry`].
#[derive(Debug, Clone, Copy)]
struct Retried;

/// The hedge layer's retry policy, marking each retry it allows.
#[derive(Debug, Clone)]
pub struct Marked(pub RetryPolicy);

impl<B, RB> tower::retry::Policy<Request<B>, Response<RB>, BoxError> for Marked
where
    RetryPolicy: tower::retry::Policy<Request<B>, Response<RB>, BoxError>,
{
    type Future = <RetryPolicy as tower::retry::Policy<Request<B>, Response<RB>, BoxError>>::Future;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<RB>, BoxError>,
    ) -> Option<Self::Future> {
        let retry = self.0.retry(req, result)?;
        req.extensions_mut().insert(Retried);
        Some(retry)
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        self.0.clone_request(req)
    }
}
