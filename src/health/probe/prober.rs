//! What a probe asks ([`ProbeTarget`]) and learns ([`ProbeReport`]), how
//! it fails ([`ProbeError`]), and the [`Prober`] trait every probe
//! implements.

use std::fmt;
use std::future::Future;

use http::StatusCode;

use super::warn;
use crate::backend::BackendId;
use crate::endpoint::Origin;
use crate::error::BoxError;
use crate::health::signals::LoadSignals;
use crate::route::ModelId;

/// The backend a probe asks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeTarget {
    /// The backend.
    pub id: BackendId,
    /// Where it is reached.
    pub address: Origin,
    /// Where it serves its Prometheus metrics, when not at `address`
    /// (MLServer's `metrics_port`; see
    /// [`BackendMeta::with_metrics_address`](crate::backend::BackendMeta::with_metrics_address)).
    pub metrics_address: Option<Origin>,
}

impl ProbeTarget {
    /// The backend `id` at `address`, its metrics there too.
    pub fn new(id: BackendId, address: Origin) -> Self {
        Self {
            id,
            address,
            metrics_address: None,
        }
    }

    /// The same target with its metrics served at `address`.
    pub fn with_metrics_address(mut self, address: Origin) -> Self {
        self.metrics_address = Some(address);
        self
    }
}

/// What one probe learned of a backend. A field is `None` when the probe
/// does not say.
///
/// A custom [`Prober`] builds one from `ProbeReport::default()` and sets
/// the fields it knows (`report.ready = Some(true)`).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ProbeReport {
    /// Whether the server says it is ready to serve.
    pub ready: Option<bool>,
    /// The models resident (loaded and ready) on the server.
    pub resident_models: Option<Vec<ModelId>>,
    /// Whether the server is loading a model now (its repository lists one
    /// `LOADING`). MLServer answers not ready while any model loads: a
    /// server not ready *because it is loading* is busy, not sick, and its
    /// probe does not count as failed.
    pub loading: bool,
    /// The server's load.
    pub load: LoadSignals,
}

impl ProbeReport {
    /// Whether the report says the backend is sick: not ready, and not
    /// because it is loading a model.
    pub fn is_failure(&self) -> bool {
        self.ready == Some(false) && !self.loading
    }

    /// Both reports in one: ready when neither says not ready, the union
    /// of the resident models either lists, loading when either says so,
    /// each load signal from `self` where set, else from `other`.
    pub(crate) fn merge(self, other: Self) -> Self {
        let ready = match (self.ready, other.ready) {
            (Some(a), Some(b)) => Some(a && b),
            (a, b) => a.or(b),
        };
        let resident_models = match (self.resident_models, other.resident_models) {
            (Some(mut a), Some(b)) => {
                for model in b {
                    if !a.contains(&model) {
                        a.push(model);
                    }
                }
                Some(a)
            }
            (a, b) => a.or(b),
        };
        Self {
            ready,
            resident_models,
            loading: self.loading || other.loading,
            load: self.load.or(other.load),
        }
    }
}

/// Why a probe failed. A failed probe counts against the backend's health
/// like a failed request.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProbeError {
    /// No answer within the probe timeout.
    Timeout,
    /// The request could not be sent or its response not read
    /// (connection refused or reset, ...).
    Transport(BoxError),
    /// The server answered with an unexpected status.
    Status(StatusCode),
    /// The response could not be understood: `what` names the endpoint
    /// and what was wrong.
    Malformed {
        /// What was wrong, e.g. `"/v2/repository/index: expected a JSON array"`.
        what: String,
    },
}

impl ProbeError {
    /// A malformed response: `what` names the endpoint and what was wrong.
    pub fn malformed(what: impl Into<String>) -> Self {
        Self::Malformed { what: what.into() }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("probe timed out"),
            Self::Transport(e) => write!(f, "probe transport error: {e}"),
            Self::Status(status) => write!(f, "probe answered {status}"),
            Self::Malformed { what } => write!(f, "malformed probe response: {what}"),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Asks one backend how it is. Implementations hold what they need (an
/// HTTP client, paths, metric names) and clone it into the future, which
/// owns everything it uses.
pub trait Prober: Send + Sync + 'static {
    /// Probes `target` once. The caller applies the timeout.
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static;
}

/// Both probers are asked, one after the other, each on its own: the
/// first is the backend's main probe (readiness), the second adds signals
/// (metrics). The pair fails only when the first fails; a failure of the
/// second leaves its signals out of the report (logged as a warning, at
/// most once a minute per backend) and the first's report stands, so
/// metrics that are missing or broken never make a reachable, ready
/// backend look sick. Both answering, their reports are merged: ready
/// when neither says not ready, the union of the resident models either
/// lists, loading when either says so, each load signal from the first
/// where set, else from the second.
impl<A: Prober, B: Prober> Prober for (A, B) {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let (a, b) = (self.0.probe(target), self.1.probe(target));
        let id = target.id.clone();
        async move {
            let main = a.await?;
            Ok(match b.await {
                Ok(more) => {
                    warn::recovered(&id, "second probe");
                    main.merge(more)
                }
                Err(error) => {
                    warn::failed(&id, "second probe", &error);
                    main
                }
            })
        }
    }
}
