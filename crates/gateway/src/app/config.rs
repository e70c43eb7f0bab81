//! How the gateway is set up: [`Config`], its defaults and its parts.

use std::path::PathBuf;
use std::time::Duration;

use axum::http::HeaderName;
use tower_model_balance::backend::BackendId;
use tower_model_balance::config::StackConfig;
use tower_model_balance::endpoint::Origin;

use super::access_log::AccessLog;
use super::etcd::EtcdMembers;
use super::phases::Timeouts;

/// Which model-server API the health probes ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// KServe v2 readiness and repository index (Triton, KServe, the
    /// simulator), and vLLM-style metrics.
    KServe,
    /// The OpenAI model list and vLLM's metrics (vLLM, SGLang, TGI).
    OpenAi,
}

/// How the gateway is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The backends: an ID and the origin to send to.
    pub backends: Vec<(BackendId, Origin)>,
    /// The backends from etcd instead (`backends` is then empty): each
    /// record's address is where its backend is sent to, its
    /// `metrics_address` where it is scraped, its `models` what it holds.
    pub etcd: Option<EtcdMembers>,
    /// A CA file (PEM) the `https://` backends' certificates are checked
    /// against, instead of the system's roots.
    pub backend_ca: Option<PathBuf>,
    /// The most body bytes a KServe v2 request (`/v2/…`, tensors in the
    /// body) may send (413 past it); also the route layer's bound.
    pub body_limit: usize,
    /// The most body bytes a request of any other route (OpenAI-shaped
    /// JSON) may send (413 past it; at most `body_limit`).
    pub json_body_limit: usize,
    /// The timeouts per phase: connect, first token, idle, the request's
    /// total.
    pub timeouts: Timeouts,
    /// The most requests in flight at once, over every backend (503 with
    /// `Retry-After` past it).
    pub max_requests: usize,
    /// The most request-body bytes held at once, over every request (503
    /// with `Retry-After` past it): a request holds its announced length,
    /// else its route's limit, from its body's read to its answer's head.
    pub max_buffered_bytes: usize,
    /// The API the probes ask.
    pub probe: Probe,
    /// The layers' settings: the balancer with its breakers and health
    /// (`balance`, `breaker`, `health`), the probes' interval and timeout
    /// (`probe`), placement and hedging. Default
    /// [`default_stack`](super::default_stack): the library's defaults
    /// but where the gateway chose otherwise (`app/stack.rs`); a
    /// `--config` file's tables go over those, key by key
    /// ([`stack_config`](super::stack_config)). The fields below that
    /// are set (`owners`, `owner_load`, `admission_limit`,
    /// `receipt_header`) go over the balancer's.
    pub stack: StackConfig,
    /// A response header listing the models resident on the backend (the
    /// simulator's), if the backends send one.
    pub residency_header: Option<HeaderName>,
    /// The most a client may take to send a request's body (408 past it):
    /// a client that trickles its body must not hold a connection and a
    /// buffer for ever.
    pub body_timeout: Duration,
    /// Requests each backend serves at once: the hedge sends no backup
    /// while the requests in flight exceed 80% (the hedge policy's
    /// default `max_utilization`) of this × the backends.
    pub backend_slots: usize,
    /// Where a backend serves its Prometheus metrics, when not on its own
    /// origin (MLServer: its `metrics_port`).
    pub metrics_origins: Vec<(BackendId, Origin)>,
    /// Whether the gateway loads models where affinity places them,
    /// through the KServe v2 repository API (`POST
    /// /v2/repository/models/{name}/load`), for servers in explicit
    /// model-control mode (MLServer with `load_models_at_startup: false`,
    /// Triton with `--model-control-mode=explicit`). Only with KServe v2
    /// probes.
    pub placement: bool,
    /// At most this many requests in flight on each backend (none: no
    /// limit): past it the balancer sheds with `Overloaded`, which the
    /// gateway answers 429 with `Retry-After`.
    pub admission_limit: Option<usize>,
    /// The models each of `backends` holds at once, its LRU, 1 ..= 16
    /// (none: `BackendMeta`'s default, 4): a model counts as resident on
    /// a backend until this many others were sent there since. A backend
    /// from etcd has its record's.
    pub model_slots: Option<usize>,
    /// The most owners a model gets (none: the balancer's default, 2).
    pub owners: Option<usize>,
    /// The load one owner carries from its model, over the mean per
    /// backend (none: the balancer's default, its `load_factor`).
    pub owner_load: Option<f64>,
    /// Prefix affinity: the first this many bytes of an OpenAI prompt
    /// make its group (none: route by the model alone).
    pub prefix_bytes: Option<usize>,
    /// The header naming a request's conversation, for prefix affinity.
    pub session_header: Option<HeaderName>,
    /// Each answer carries its routing receipt in `x-route-receipt`.
    pub receipt_header: bool,
    /// The access log's format (default: none).
    pub access_log: AccessLog,
    /// Precise prefix routing: each backend's KV-cache event endpoint,
    /// `tcp://HOST:PORT`, or `tcp://HOST:PORT,replay=tcp://HOST:PORT` with
    /// its replay endpoint (`--kv-events`). Any: the balancer routes a
    /// prompt to the backend caching most of its leading blocks.
    pub kv_events: Vec<(BackendId, String)>,
    /// With `kv_events`: a local model directory whose `tokenizer.json`
    /// tokenizes the prompts (`--tokenizer`); none: the first of
    /// `kv_events`' backends is asked (`POST /tokenize`).
    pub tokenizer: Option<PathBuf>,
}

/// The default body limit of OpenAI-shaped JSON requests: 16 MiB, a
/// 128k-token prompt ten times over, or a few images inline.
pub const DEFAULT_JSON_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// The default most requests in flight over every backend.
pub const DEFAULT_MAX_REQUESTS: usize = 10_000;

/// The default most request-body bytes held at once: 1 GiB.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 1024 * 1024 * 1024;

/// The default body limit of KServe v2 requests: 64 MiB. A KServe v2 request carries its
/// tensors in the body — as JSON (a 224×224 RGB image is about 2 MB of
/// text) or, with tritonclient's binary extension, raw — and the gateway
/// reads each body whole before routing (to find the model, and to send
/// it again for a hedge or retry), so the limit bounds the memory a
/// request may hold: 64 MiB × the requests in flight at most.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024 * 1024;

impl Config {
    /// Defaults for `backends`: 64 MiB bodies on KServe v2 routes, 16 MiB
    /// on the others, [`Timeouts::default`], 10,000 requests and 1 GiB of
    /// bodies in flight, KServe v2 probes, the gateway's layer settings
    /// ([`default_stack`](super::default_stack): probes every second),
    /// placement on, no residency header.
    pub fn new(backends: Vec<(BackendId, Origin)>) -> Self {
        Self {
            backends,
            etcd: None,
            backend_ca: None,
            body_limit: DEFAULT_BODY_LIMIT,
            json_body_limit: DEFAULT_JSON_BODY_LIMIT,
            timeouts: Timeouts::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            probe: Probe::KServe,
            stack: super::stack::default_stack(),
            residency_header: None,
            body_timeout: Duration::from_secs(30),
            backend_slots: 4,
            metrics_origins: Vec::new(),
            placement: true,
            admission_limit: None,
            model_slots: None,
            owners: None,
            owner_load: None,
            prefix_bytes: None,
            session_header: None,
            receipt_header: false,
            access_log: AccessLog::Off,
            kv_events: Vec::new(),
            tokenizer: None,
        }
    }
}
