//! What every handler shares: the stack, its handles and the gateway's
//! bounds, as one `App` the routers hand each request.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_model_balance::balance::BalancerHandle;
use tower_model_balance::hedge::HedgeHandle;

use super::access_log::AccessLog;
use super::catalog::Catalog;
use super::client::BackendConnector;
use super::drain::Drain;
use super::limits::Limits;
use super::phases::Timeouts;
use super::stack::Stack;
use super::unresponsive::Unresponsive;

/// What every handler shares.
#[derive(Clone)]
pub struct App {
    pub stack: Stack,
    pub handle: BalancerHandle,
    pub hedge: HedgeHandle,
    pub prometheus: PrometheusHandle,
    /// The bounds on requests and bodies in flight, and the body limits.
    pub limits: Limits,
    /// The most a request's body may take to arrive.
    pub body_timeout: Duration,
    /// The timeouts per phase (the request's total applies here).
    pub timeouts: Timeouts,
    /// The drain: readiness is 503 once it begins.
    pub drain: Drain,
    /// The access log's format.
    pub access_log: AccessLog,
    /// Whether each answer carries its routing receipt in
    /// `x-route-receipt`.
    pub receipt_header: bool,
    /// The fleet's models, as the probes last saw them.
    pub catalog: Catalog,
    /// How the probes went, by backend: which backends were ever reached
    /// (readiness).
    pub unresponsive: Unresponsive,
    /// The backends' client, for the metadata routes (`metadata.rs`),
    /// which are sent straight to a backend holding the model.
    pub client: Client<BackendConnector, Full<Bytes>>,
    /// The most a backend may take to answer (its response head).
    pub backend_timeout: Duration,
}

/// The response header with the routing receipt (`--receipt-header`).
pub const RECEIPT_HEADER: http::HeaderName = http::HeaderName::from_static("x-route-receipt");
