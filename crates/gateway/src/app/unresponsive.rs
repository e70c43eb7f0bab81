//! Backends that stopped answering: the rule that cuts the requests a hung
//! server holds.
//!
//! A server that accepts connections and never answers (a deadlocked
//! process, a wedged GPU, a SIGSTOP) holds each request sent to it until
//! a timeout ends it — for a non-streamed generation, whose response head
//! comes only with its last token, the request's total (30 minutes by
//! default), as no shorter bound can tell it from a long generation. Its
//! health probes can: they ask a route a server answers in milliseconds
//! however long its generations are (`/v2/health/ready`,
//! `/v2/repository/index`, `/v1/models`). So once
//! [`UNRESPONSIVE_PROBES`] probes of a backend in a row, over at least
//! [`Timeouts::unresponsive`](super::Timeouts::unresponsive) (10 s by
//! default), got no answer within the probe timeout, while some other
//! backend's probe was answered meanwhile (a fleet silent as a whole is the gateway's own network, not
//! one sick server), every request still waiting for that backend's
//! response head is cut ([`BackendUnresponsive`], counted against it by
//! its breaker, retried on another backend within the retry budget), and
//! so is each one sent to it later, at its next probe that goes
//! unanswered. A probe that is answered, with any status, ends the run.
//! The 10 s are longer than health's silence rule takes to eject a
//! stopped server (3 to 7 s): the cut's failures, each counted at the
//! failure penalty in the backend's latency, would slow that rule.
//! The same rule as active health checking's in Envoy or HAProxy, which
//! act on the checks' failures rather than on requests' timeouts; here
//! applied to the requests in flight too.
//!
//! The same notes keep which backends were ever reached
//! ([`Unresponsive::reached`]): readiness says no while none was.
//!
//! The rule is kept apart from its IO: [`Unresponsive::note`] takes each
//! probe's outcome (from the catalog's prober, `catalog.rs`), and each
//! backend's endpoint (`phases.rs`) holds a [`watch::Receiver`] that
//! changes at every cut.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

/// The fewest probes in a row without an answer after which a backend's
/// waiting requests may be cut.
pub const UNRESPONSIVE_PROBES: u32 = 3;

/// The Prometheus series counting the requests cut, by backend.
pub const CUTS_SERIES: &str = "gateway_backend_unresponsive_cuts_total";

/// How long a backend no endpoint watches (removed from the fleet) is
/// kept after its last probe.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// How one probe of a backend went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The server answered (any status, any body): it is not hung.
    Answered,
    /// No answer within the probe timeout.
    TimedOut,
    /// The connection failed (refused, reset): requests to it fail on
    /// their own, without waiting.
    Failed,
}

/// Every backend's run of unanswered probes, and the signal its endpoint
/// watches; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Unresponsive {
    backends: Arc<Mutex<HashMap<Origin, Backend>>>,
    after: Duration,
    /// Whether a probe answered reaches a backend (not with placement:
    /// its repository read does, see [`Unresponsive::reached`]).
    probes_reach: bool,
}

#[derive(Debug)]
struct Backend {
    /// Probes in a row that got no answer.
    in_row: u32,
    /// When the first of them was sent back (noted).
    run_began: Instant,
    /// When a probe of it was last answered.
    answered: Option<Instant>,
    /// When a probe of it was last noted.
    noted: Instant,
    /// Its ID, as its probes name it.
    id: Option<BackendId>,
    /// Bumped at each cut.
    cuts: watch::Sender<u64>,
    /// Whether it ever answered: a probe (any status) or a request
    /// (a response head, noted by its endpoint).
    reached: Reached,
}

impl Backend {
    fn new(now: Instant) -> Self {
        Self {
            in_row: 0,
            run_began: now,
            answered: None,
            noted: now,
            id: None,
            cuts: watch::Sender::new(0),
            reached: Reached::default(),
        }
    }
}

impl Unresponsive {
    /// No backend noted yet; a backend's run of unanswered probes must
    /// last `after` (zero: no cut ever).
    pub fn new(after: Duration) -> Self {
        Self {
            backends: Arc::default(),
            after,
            probes_reach: true,
        }
    }

    /// As is, a probe answered reaching its backend or not (with
    /// placement, a backend whose repository was never read loads
    /// nothing: [`Unresponsive::note_reached`] notes its reads instead).
    pub fn probes_reach(mut self, reach: bool) -> Self {
        self.probes_reach = reach;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Origin, Backend>> {
        self.backends.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the endpoint of the backend at `origin` watches: the cuts of
    /// that backend's waiting requests.
    pub fn watch(&self, origin: &Origin) -> Cuts {
        let mut backends = self.lock();
        let now = Instant::now();
        let backend = backends
            .entry(origin.clone())
            .or_insert_with(|| Backend::new(now));
        Cuts {
            changed: backend.cuts.subscribe(),
            of: Arc::new(Watched {
                fleet: self.clone(),
                origin: origin.clone(),
                reached: backend.reached.clone(),
            }),
        }
    }

    /// Whether `backend` ever answered: a request sent to it, with a
    /// response head; a probe, with any status — or, with placement
    /// ([`Unresponsive::probes_reach`] false), a read of its repository,
    /// without which it loads nothing. A backend never reached cannot
    /// serve (readiness, `readiness.rs`); once reached, probes that fail
    /// later do not undo it (health and the breakers judge it then).
    pub fn reached(&self, backend: &BackendId) -> bool {
        self.lock()
            .values()
            .any(|b| b.id.as_ref() == Some(backend) && b.reached.get())
    }

    /// Notes that `backend`, at `origin`, answered (its repository read).
    pub fn note_reached(&self, backend: &BackendId, origin: &Origin) {
        let mut backends = self.lock();
        let now = Instant::now();
        let this = backends
            .entry(origin.clone())
            .or_insert_with(|| Backend::new(now));
        if this.id.as_ref() != Some(backend) {
            this.id = Some(backend.clone());
        }
        this.reached.note();
    }

    /// Counts a request cut on the backend at `origin`.
    fn count_cut(&self, origin: &Origin) {
        let id = self.lock().get(origin).and_then(|b| b.id.clone());
        let backend = id.map_or_else(|| origin.to_string(), |id| id.to_string());
        metrics::counter!(CUTS_SERIES, "backend" => backend).increment(1);
    }

    /// Notes how a probe of `backend`, at `origin`, went at `now`; true
    /// when it cut that backend's waiting requests.
    pub fn note(
        &self,
        backend: &BackendId,
        origin: &Origin,
        outcome: ProbeOutcome,
        now: Instant,
    ) -> bool {
        let mut backends = self.lock();
        backends.retain(|_, b| b.cuts.receiver_count() > 0 || now - b.noted < FORGET_AFTER);
        let this = backends
            .entry(origin.clone())
            .or_insert_with(|| Backend::new(now));
        this.noted = now;
        if this.id.as_ref() != Some(backend) {
            this.id = Some(backend.clone());
        }
        match outcome {
            ProbeOutcome::Answered => {
                if self.probes_reach {
                    this.reached.note();
                }
                this.answered = Some(now);
                this.in_row = 0;
            }
            ProbeOutcome::Failed => this.in_row = 0,
            ProbeOutcome::TimedOut => {
                if this.in_row == 0 {
                    this.run_began = now;
                }
                this.in_row = this.in_row.saturating_add(1);
            }
        }
        let began = this.run_began;
        let lasted = now.saturating_duration_since(began);
        if this.in_row < UNRESPONSIVE_PROBES || self.after.is_zero() || lasted < self.after {
            return false;
        }
        let peer_answered = backends
            .iter()
            .any(|(other, b)| other != origin && b.answered.is_some_and(|at| at >= began));
        if !peer_answered {
            return false;
        }
        if let Some(this) = backends.get(origin) {
            this.cuts.send_modify(|cuts| *cuts += 1);
        }
        true
    }
}

/// Whether a backend ever answered, set once; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Reached(Arc<AtomicBool>);

impl Reached {
    /// Notes an answer.
    pub fn note(&self) {
        if !self.get() {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a backend's endpoint watches: each cut of its waiting requests;
/// and where it notes that the backend answered.
#[derive(Debug, Clone)]
pub struct Cuts {
    changed: watch::Receiver<u64>,
    of: Arc<Watched>,
}

/// The backend a [`Cuts`] watches, shared by its requests.
#[derive(Debug)]
pub struct Watched {
    fleet: Unresponsive,
    origin: Origin,
    reached: Reached,
}

impl Watched {
    /// Where the endpoint notes each response head (see
    /// [`Unresponsive::reached`]).
    pub fn reached(&self) -> &Reached {
        &self.reached
    }

    /// The backend's ID, as its probes name it (none before its first).
    pub fn backend(&self) -> Option<BackendId> {
        let backends = self.fleet.lock();
        backends.get(&self.origin).and_then(|b| b.id.clone())
    }
}

impl Cuts {
    /// Resolves at the next cut after now, counting the request it cuts
    /// ([`CUTS_SERIES`]); never, once nothing can cut.
    pub fn next(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut changed = self.changed.clone();
        changed.borrow_and_update();
        let of = Arc::clone(&self.of);
        Box::pin(async move {
            if changed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            of.fleet.count_cut(&of.origin);
        })
    }

    /// The backend watched, for its requests' errors to name.
    pub fn watched(&self) -> Arc<Watched> {
        Arc::clone(&self.of)
    }
}

/// The backend stopped answering: [`UNRESPONSIVE_PROBES`] probes in a row
/// went unanswered while a request waited for its response head. The
/// gateway gave up on the request's connection: its source is that
/// aborted connection's I/O error, so that the retry policy sends the
/// request (one not marked send-once) to another backend.
#[derive(Debug)]
pub struct BackendUnresponsive {
    aborted: std::io::Error,
    /// The backend, for the access log (never in the answer).
    pub backend: Option<BackendId>,
}

impl BackendUnresponsive {
    /// The error, with its aborted connection.
    pub fn new() -> Self {
        Self {
            aborted: std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the gateway closed the connection to a backend that stopped answering",
            ),
            backend: None,
        }
    }

    /// The error on `backend`.
    pub fn on(mut self, backend: Option<BackendId>) -> Self {
        self.backend = backend;
        self
    }
}

impl Default for BackendUnresponsive {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for BackendUnresponsive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the backend stopped answering: its last {UNRESPONSIVE_PROBES} health probes got no answer"
        )
    }
}

impl std::error::Error for BackendUnresponsive {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.aborted)
    }
}

#[cfg(test)]
mod tests;
