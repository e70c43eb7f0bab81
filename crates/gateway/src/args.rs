//! The `gateway` binary's flags.

use std::net::SocketAddr;
use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

use crate::app::{
    ServeConfig, Timeouts, DEFAULT_JSON_BODY_LIMIT, DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_REQUESTS,
};
use crate::cli::{etcd_url, http_origin, key_prefix, number, Stop};

/// The usage, printed for `--help` and after a bad flag.
pub const USAGE: &str = "\
usage: gateway [FLAGS]

  --listen ADDR        address to serve on (default 127.0.0.1:8080)
  --backend [NAME=]URL a backend's origin, e.g. http://10.0.0.1:8000 (repeatable),
                       and the name its owners are hashed by (default: the
                       origin itself), e.g. vllm-0=http://10.0.0.1:8000: a
                       server that comes back at another address keeps its
                       models; without it (or --etcd), simulated backends
                       start on 127.0.0.1
  --etcd URL           take the backends from etcd instead: a client URL such
                       as http://127.0.0.1:2379 (repeatable, one per member);
                       each record under --prefix is a backend, sent to at
                       its address
  --prefix P           the key prefix of the backends' records, e.g.
                       /models/backends/ (with --etcd, and only with it)
  --sims N             how many simulated backends (1..=16, default 3)
  --down               the simulated backends answer 503 (every owner down):
                       after a few requests the gateway answers 503 itself,
                       with Retry-After
  --probe API          what the health probes ask: kserve (KServe v2 readiness
                       and repository, default) or openai (/v1/models); both
                       read vLLM-style /metrics
  --metrics-port PORT  the backends serve /metrics on this port of their host
                       (MLServer: 8082, Triton: 8002), not on their own port;
                       without it, on their own (a 404 there: no metrics)
  --metrics URL        where the --backend just before serves /metrics (for
                       servers sharing a host, each on a port of its own)
  --no-placement       do not load models: for servers that load on demand
                       (default with kserve: the gateway loads a model on the
                       owner it routes to, through the KServe v2 repository
                       API, as servers in explicit model-control mode need)
  --body-limit BYTES   most body bytes a KServe v2 request may send (1..=67108864,
                       default 67108864, 64 MiB: tensors travel in the body;
                       each request's body is held whole while it is routed):
                       past it, 413
  --admission-limit N  at most N requests in flight on each backend (1..=1000000;
                       default: no limit): past it a request is shed at once
                       with 429 and Retry-After (the gateway ignores clients'
                       x-urgency, as their other routing headers: every
                       request is Normal urgency)
  --model-slots N      the models each --backend holds at once, its LRU
                       (1..=16, default 4): a model counts as resident on a
                       backend until N others were sent there since
  --owners K           the most backends a model is spread over as its demand
                       grows (1..=1024, default 2)
  --owner-load X       how much of the mean load per backend one owner takes
                       from its model before the model gets another owner
                       (above 0, up to 1.25; default 1.25): lower gives the
                       popular models more warm copies sooner
  --prefix-bytes N     prefix affinity for LLM fleets: the first N bytes of an
                       OpenAI prompt (1..=65536) pick its owners, as the model
                       does without it (default: by the model alone)
  --session-header H   the header naming a request's conversation (as
                       x-session-id): its turns go back to the backend that
                       served the last one
  --receipt-header     each answer says why it went where it went, in
                       x-route-receipt (backend, reason, owners, predicted
                       prefix hit, runner-up)

Operations (docs/operations.md):
  --admin-listen ADDR  where /metrics and readiness (/ready, /health,
                       /v2/health/ready) and liveness (/live) are served,
                       apart from client traffic (default 127.0.0.1:8081)
  --drain-timeout S    on SIGTERM or SIGINT: readiness answers 503 at once,
                       no new connection is accepted, and answers in flight
                       get S seconds to finish (1..=86400, default 300: a
                       9,000-token stream at 30 tokens/s); what is still open
                       then ends with an error its client sees (an event
                       stream: an SSE error event); exit 0
  --connect-timeout S  most seconds to connect to a backend (1..=300,
                       default 5); counted against the backend
  --first-token-timeout S
                       most seconds from a streamed request (\"stream\": true) to
                       its first token (1..=3600, default 60); counted
                       against the backend
  --idle-timeout S     most seconds between two frames of an answer (1..=3600,
                       default 60): a stalled stream ends with an SSE error
                       event; counted against the backend
  --request-timeout S  most seconds for a whole request, answer included
                       (1..=86400, default 1800: a non-streamed generation's
                       head comes with its last token); never counted against
                       a backend (504, or an SSE error event mid-stream)
  --max-connections N  most client connections open at once (1..=1000000,
                       default 10000); a connection without a request for 10 s
                       is closed
  --max-requests N     most requests in flight at once (1..=1000000, default
                       10000): past it, 503 with Retry-After
  --max-buffered-bytes BYTES
                       most request-body bytes held at once over all requests
                       (1024..=68719476736, default 1073741824, 1 GiB): past
                       it, 503 with Retry-After
  --json-body-limit BYTES
                       most body bytes of a request on a route other than
                       KServe v2's /v2/... (1..=67108864, default 16777216,
                       16 MiB; --body-limit is KServe v2's): past it, 413
  -V, --version        the gateway's version
  -h, --help           this text

Each flag but --backend, --etcd and --metrics may be given once.";

/// The flags that may be given more than once (one backend or etcd
/// endpoint each, `--metrics` for the `--backend` before it).
const REPEATABLE: [&str; 3] = ["--backend", "--etcd", "--metrics"];

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--backend`s, in order.
    pub backends: Vec<Origin>,
    /// Each `--backend`'s ID (index for index): its `NAME=`, else its
    /// origin written out (`http://host:port`).
    pub ids: Vec<BackendId>,
    /// `--etcd`: etcd's client URLs (the backends from there).
    pub etcd: Vec<Origin>,
    /// `--prefix`: the key prefix of the backends' records.
    pub prefix: Option<String>,
    /// `--sims`.
    pub sims: usize,
    /// `--down`.
    pub down: bool,
    /// `--probe openai`.
    pub probe_openai: bool,
    /// `--body-limit`.
    pub body_limit: usize,
    /// `--metrics-port`.
    pub metrics_port: Option<u16>,
    /// Each backend's own metrics origin (`--metrics`), by index.
    pub metrics: Vec<Option<Origin>>,
    /// Not `--no-placement`.
    pub placement: bool,
    /// `--admission-limit`: requests in flight per backend.
    pub admission_limit: Option<usize>,
    /// `--model-slots`: the models each backend holds at once.
    pub model_slots: Option<usize>,
    /// `--owners`: the most owners a model gets.
    pub owners: Option<usize>,
    /// `--owner-load`: the load one owner carries from its model.
    pub owner_load: Option<f64>,
    /// `--prefix-bytes`.
    pub prefix_bytes: Option<usize>,
    /// `--session-header`.
    pub session_header: Option<http::HeaderName>,
    /// `--receipt-header`.
    pub receipt_header: bool,
    /// `--admin-listen`.
    pub admin_listen: SocketAddr,
    /// `--drain-timeout`, `--max-connections`.
    pub serve: ServeConfig,
    /// `--connect-timeout`, `--first-token-timeout`, `--idle-timeout`,
    /// `--request-timeout`.
    pub timeouts: Timeouts,
    /// `--max-requests`.
    pub max_requests: usize,
    /// `--max-buffered-bytes`.
    pub max_buffered_bytes: usize,
    /// `--json-body-limit`.
    pub json_body_limit: usize,
}

impl Args {
    /// The flags in `args` (the program's name left out).
    ///
    /// # Errors
    ///
    /// `--help`, or a bad flag (the message names it).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let mut parsed = Args {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            backends: Vec::new(),
            ids: Vec::new(),
            etcd: Vec::new(),
            prefix: None,
            sims: 3,
            down: false,
            probe_openai: false,
            body_limit: 64 * 1024 * 1024,
            metrics_port: None,
            metrics: Vec::new(),
            placement: true,
            admission_limit: None,
            model_slots: None,
            owners: None,
            owner_load: None,
            prefix_bytes: None,
            session_header: None,
            receipt_header: false,
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            serve: ServeConfig::default(),
            timeouts: Timeouts::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            json_body_limit: DEFAULT_JSON_BODY_LIMIT,
        };
        let mut sims_given = false;
        let mut seen: Vec<String> = Vec::new();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            // Every flag but the repeatable ones once: a second value would
            // silently replace the first.
            if !REPEATABLE.contains(&flag.as_str()) && flag.starts_with("--") {
                if seen.contains(&flag) {
                    return Err(Stop::Error(format!("{flag} given twice")));
                }
                seen.push(flag.clone());
            }
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| Stop::Error(format!("{name} needs a value")))
            };
            match flag.as_str() {
                "-h" | "--help" => return Err(Stop::Help),
                "-V" | "--version" => return Err(Stop::Version),
                "--listen" => parsed.listen = address(&value("--listen")?, "--listen")?,
                "--admin-listen" => {
                    parsed.admin_listen = address(&value("--admin-listen")?, "--admin-listen")?;
                }
                "--drain-timeout" => {
                    parsed.serve.drain_timeout = seconds(&value(&flag)?, &flag, 86_400)?;
                }
                "--connect-timeout" => {
                    parsed.timeouts.connect = seconds(&value(&flag)?, &flag, 300)?;
                }
                "--first-token-timeout" => {
                    parsed.timeouts.first_token = seconds(&value(&flag)?, &flag, 3_600)?;
                }
                "--idle-timeout" => {
                    parsed.timeouts.idle = seconds(&value(&flag)?, &flag, 3_600)?;
                }
                "--request-timeout" => {
                    parsed.timeouts.request = seconds(&value(&flag)?, &flag, 86_400)?;
                }
                "--max-connections" => {
                    parsed.serve.max_connections = number(&value(&flag)?, &flag, 1, 1_000_000)?;
                }
                "--max-requests" => {
                    parsed.max_requests = number(&value(&flag)?, &flag, 1, 1_000_000)?;
                }
                "--max-buffered-bytes" => {
                    parsed.max_buffered_bytes = number(&value(&flag)?, &flag, 1024, 64 << 30)?;
                }
                "--json-body-limit" => {
                    parsed.json_body_limit = number(&value(&flag)?, &flag, 1, 64 * 1024 * 1024)?;
                }
                "--backend" => {
                    let text = value("--backend")?;
                    let (id, origin) = named_backend(&text)?;
                    if parsed.backends.iter().any(|b| same_backend(b, &origin)) {
                        return Err(Stop::Error(format!(
                            "--backend `{text}` given twice: each backend once"
                        )));
                    }
                    if parsed.ids.contains(&id) {
                        return Err(Stop::Error(format!(
                            "--backend `{text}`: another backend is named `{id}`"
                        )));
                    }
                    parsed.backends.push(origin);
                    parsed.ids.push(id);
                    parsed.metrics.push(None);
                }
                "--etcd" => {
                    let text = value("--etcd")?;
                    let url = etcd_url(&text)?;
                    if parsed.etcd.iter().any(|e| same_backend(e, &url)) {
                        return Err(Stop::Error(format!(
                            "--etcd `{text}` given twice: each endpoint once"
                        )));
                    }
                    parsed.etcd.push(url);
                }
                "--prefix" => {
                    let text = value("--prefix")?;
                    key_prefix(&text)?;
                    parsed.prefix = Some(text);
                }
                "--metrics" => {
                    let text = value("--metrics")?;
                    let origin = Origin::parse(&text)
                        .map_err(|e| Stop::Error(format!("--metrics `{text}`: {e}")))?;
                    match parsed.metrics.last_mut() {
                        Some(slot @ None) => *slot = Some(origin),
                        Some(Some(_)) => {
                            return Err(Stop::Error(format!(
                                "--metrics `{text}`: the --backend before it has one already"
                            )))
                        }
                        None => {
                            return Err(Stop::Error(format!(
                                "--metrics `{text}` goes after the --backend it is for"
                            )))
                        }
                    }
                }
                "--sims" => {
                    parsed.sims = number(&value("--sims")?, "--sims", 1, 16)?;
                    sims_given = true;
                }
                "--down" => parsed.down = true,
                "--probe" => {
                    parsed.probe_openai = match value("--probe")?.as_str() {
                        "kserve" => false,
                        "openai" => true,
                        other => {
                            return Err(Stop::Error(format!(
                                "--probe: `{other}` is neither kserve nor openai"
                            )))
                        }
                    }
                }
                "--body-limit" => {
                    parsed.body_limit = number(
                        &value("--body-limit")?,
                        "--body-limit",
                        1,
                        // The route layer's largest limit: 64 MiB.
                        64 * 1024 * 1024,
                    )?;
                }
                "--metrics-port" => {
                    let port = number(&value("--metrics-port")?, "--metrics-port", 1, 65535)?;
                    parsed.metrics_port = u16::try_from(port).ok();
                }
                "--no-placement" => parsed.placement = false,
                "--prefix-bytes" => {
                    let n = number(&value("--prefix-bytes")?, "--prefix-bytes", 1, 65_536)?;
                    parsed.prefix_bytes = Some(n);
                }
                "--session-header" => {
                    let text = value("--session-header")?;
                    let name = http::HeaderName::try_from(text.as_str()).map_err(|_| {
                        Stop::Error(format!("--session-header: `{text}` is not a header name"))
                    })?;
                    // The gateway strips the routing headers: a session
                    // there would never be read.
                    if ["x-model-id", "x-request-kind", "x-urgency"].contains(&name.as_str()) {
                        return Err(Stop::Error(format!(
                            "--session-header: `{name}` is a routing header, which the gateway strips"
                        )));
                    }
                    parsed.session_header = Some(name);
                }
                "--receipt-header" => parsed.receipt_header = true,
                "--admission-limit" => {
                    let limit = value("--admission-limit")?;
                    parsed.admission_limit =
                        Some(number(&limit, "--admission-limit", 1, 1_000_000)?);
                }
                "--model-slots" => {
                    let n = number(&value("--model-slots")?, "--model-slots", 1, 16)?;
                    parsed.model_slots = Some(n);
                }
                "--owners" => {
                    let k = number(&value("--owners")?, "--owners", 1, 1024)?;
                    parsed.owners = Some(k);
                }
                "--owner-load" => {
                    let text = value("--owner-load")?;
                    let load = match text.parse::<f64>() {
                        Ok(x) if x > 0.0 && x <= 1.25 => x,
                        _ => {
                            return Err(Stop::Error(format!(
                                "--owner-load: `{text}` is not a number above 0 and up to 1.25"
                            )))
                        }
                    };
                    parsed.owner_load = Some(load);
                }
                other => {
                    let hint = match other.split_once('=') {
                        Some((flag, value)) if flag.starts_with("--") => {
                            format!(" (a value follows its flag after a space: {flag} {value})")
                        }
                        _ => String::new(),
                    };
                    return Err(Stop::Error(format!("unknown flag `{other}`{hint}")));
                }
            }
        }
        if parsed.model_slots.is_some() && !parsed.etcd.is_empty() {
            return Err(Stop::Error(
                "--model-slots applies to --backend: a backend from etcd has its record's (etcd-register --model-slots)".into(),
            ));
        }
        if parsed.metrics_port.is_some() && parsed.metrics.iter().any(Option::is_some) {
            return Err(Stop::Error(
                "--metrics-port and --metrics: one or the other".into(),
            ));
        }
        let given = !parsed.backends.is_empty() || !parsed.etcd.is_empty();
        if given && (parsed.down || sims_given) {
            let flag = if parsed.down { "--down" } else { "--sims" };
            return Err(Stop::Error(format!(
                "{flag} applies to simulated backends, not with --backend or --etcd"
            )));
        }
        match (parsed.etcd.is_empty(), parsed.prefix.is_some()) {
            (true, true) => {
                return Err(Stop::Error(
                    "--prefix goes with --etcd (the key prefix of the backends' records)".into(),
                ))
            }
            (false, false) => {
                return Err(Stop::Error(
                    "--etcd needs --prefix: the key prefix of the backends' records, e.g. /models/backends/".into(),
                ))
            }
            _ => {}
        }
        if !parsed.etcd.is_empty() {
            if !parsed.backends.is_empty() {
                return Err(Stop::Error(
                    "--backend and --etcd: one or the other (the backends from the command line, or from etcd)".into(),
                ));
            }
            if parsed.metrics_port.is_some() {
                return Err(Stop::Error(
                    "--metrics-port does not apply with --etcd: each record names its backend's metrics_address".into(),
                ));
            }
        }
        Ok(parsed)
    }
}

/// `text` as a socket address, for `flag`.
fn address(text: &str, flag: &str) -> Result<SocketAddr, Stop> {
    text.parse().map_err(|_| {
        Stop::Error(format!(
            "{flag}: `{text}` is not an address like 127.0.0.1:8080"
        ))
    })
}

/// `text` as whole seconds in `1..=max`, for `flag`.
fn seconds(text: &str, flag: &str, max: usize) -> Result<Duration, Stop> {
    let secs = number(text, flag, 1, max)?;
    Ok(Duration::from_secs(secs as u64))
}

/// A `--backend`'s `[NAME=]URL`: its ID (the name, else the origin
/// written out) and its origin. A `=` before any `:` or `/` ends a name.
fn named_backend(text: &str) -> Result<(BackendId, Origin), Stop> {
    let (name, url) = match text.split_once('=') {
        Some((name, url)) if !name.contains([':', '/']) => (Some(name), url),
        _ => (None, text),
    };
    let origin = http_origin("--backend", url)?;
    let id = match name {
        Some(name) => BackendId::new(name),
        None => BackendId::new(&origin.to_string()),
    }
    .map_err(|e| Stop::Error(format!("--backend `{text}`: {e}")))?;
    Ok((id, origin))
}

/// Whether two origins name the same backend (or etcd member): the same scheme, host (any
/// case) and port, the scheme's default port when none is written
/// (`http://a` is `http://a:80`; `http://a:01` is `http://a:1`).
fn same_backend(a: &Origin, b: &Origin) -> bool {
    let key = |o: &Origin| {
        let default = if o.scheme() == &http::uri::Scheme::HTTPS {
            443
        } else {
            80
        };
        let authority = o.authority();
        (
            o.scheme().clone(),
            authority.host().to_ascii_lowercase(),
            authority.port_u16().unwrap_or(default),
        )
    };
    key(a) == key(b)
}

mod config;
#[cfg(test)]
mod tests;
