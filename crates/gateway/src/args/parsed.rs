//! The command line's settings, [`Args`], read from clap's flags
//! (`flags.rs`) and checked together (a backend given twice, `--etcd`
//! without `--prefix`, one source of backends).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

use super::flags;
use super::trust::Trust;
use crate::app::access_log::AccessLog;
use crate::app::{
    ServeConfig, Timeouts, DEFAULT_JSON_BODY_LIMIT, DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_REQUESTS,
};
use crate::cli::Stop;

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
    /// `--probe openai`.
    pub probe_openai: bool,
    /// `--body-limit`.
    pub body_limit: usize,
    /// `--metrics-port`.
    pub metrics_port: Option<u16>,
    /// Each backend's own metrics origin (`--metrics`), by index.
    pub metrics: Vec<Option<Origin>>,
    /// Each backend's KV-cache event endpoint (`--kv-events`), by index.
    pub kv_events: Vec<Option<String>>,
    /// `--tokenizer`: a local model directory with its `tokenizer.json`.
    pub tokenizer: Option<PathBuf>,
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
    /// The TLS and trust flags (`--backend-ca`, `--etcd-ca`, …).
    pub trust: Trust,
    /// `--admin-listen`.
    pub admin_listen: SocketAddr,
    /// `--drain-timeout`, `--max-connections`, `--header-timeout`.
    pub serve: ServeConfig,
    /// `--connect-timeout`, `--first-token-timeout`, `--idle-timeout`,
    /// `--request-timeout`, `--unresponsive-after`.
    pub timeouts: Timeouts,
    /// `--max-requests`.
    pub max_requests: usize,
    /// `--max-buffered-bytes`.
    pub max_buffered_bytes: usize,
    /// `--json-body-limit`.
    pub json_body_limit: usize,
    /// `--access-log`.
    pub access_log: AccessLog,
    /// The `--config` file's tables for the layers (`[balance]`,
    /// `[breaker]`, …; empty without a file), checked; the flags
    /// `--owners`, `--owner-load` and `--admission-limit` go over them in
    /// [`config`](Self::config).
    pub tables: toml::Table,
}

impl Args {
    /// The flags in `args`, `--config` taken out (`args/flags.rs`).
    pub(super) fn parse_flags(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let (flags, follows) = flags::parse(args.into_iter().collect())?;
        let mut parsed = Args {
            listen: flags
                .listen
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
            backends: Vec::new(),
            ids: Vec::new(),
            etcd: Vec::new(),
            prefix: flags.prefix,
            probe_openai: flags.probe.is_some_and(|p| p.0),
            body_limit: flags.body_limit.unwrap_or(64 * 1024 * 1024),
            metrics_port: flags.metrics_port.and_then(|p| u16::try_from(p).ok()),
            metrics: Vec::new(),
            kv_events: Vec::new(),
            tokenizer: flags.tokenizer,
            placement: !flags.no_placement,
            admission_limit: flags.admission_limit,
            model_slots: flags.model_slots,
            owners: flags.owners,
            owner_load: flags.owner_load,
            prefix_bytes: flags.prefix_bytes,
            session_header: flags.session_header,
            receipt_header: flags.receipt_header,
            trust: Trust::default(),
            admin_listen: flags
                .admin_listen
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8081))),
            serve: ServeConfig::default(),
            timeouts: Timeouts::default(),
            max_requests: flags.max_requests.unwrap_or(DEFAULT_MAX_REQUESTS),
            max_buffered_bytes: flags
                .max_buffered_bytes
                .unwrap_or(DEFAULT_MAX_BUFFERED_BYTES),
            json_body_limit: flags.json_body_limit.unwrap_or(DEFAULT_JSON_BODY_LIMIT),
            access_log: flags.access_log.unwrap_or(AccessLog::Off),
            tables: toml::Table::new(),
        };
        let serve = &mut parsed.serve;
        serve.drain_timeout = flags.drain_timeout.unwrap_or(serve.drain_timeout);
        serve.max_connections = flags.max_connections.unwrap_or(serve.max_connections);
        serve.header_timeout = flags.header_timeout.unwrap_or(serve.header_timeout);
        let timeouts = &mut parsed.timeouts;
        timeouts.connect = flags.connect_timeout.unwrap_or(timeouts.connect);
        timeouts.first_token = flags.first_token_timeout.unwrap_or(timeouts.first_token);
        timeouts.idle = flags.idle_timeout.unwrap_or(timeouts.idle);
        timeouts.request = flags.request_timeout.unwrap_or(timeouts.request);
        if let Some(secs) = flags.unresponsive_after {
            timeouts.unresponsive = Duration::from_secs(secs as u64);
        }
        for (id, origin) in flags.backend {
            let text = match id.as_str() == origin.to_string() {
                true => origin.to_string(),
                false => format!("{id}={origin}"),
            };
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
            parsed.kv_events.push(None);
        }
        for (metrics, follows) in flags.metrics.into_iter().zip(follows.metrics) {
            match follows.map(|at| &mut parsed.metrics[at]) {
                Some(slot @ None) => *slot = Some(metrics),
                Some(Some(_)) => {
                    return Err(Stop::Error(format!(
                        "--metrics `{metrics}`: the --backend before it has one already"
                    )))
                }
                None => {
                    return Err(Stop::Error(format!(
                        "--metrics `{metrics}` goes after the --backend it is for"
                    )))
                }
            }
        }
        if !flags.kv_events.is_empty() && !flags.etcd.is_empty() {
            return Err(Stop::Error(
                "--kv-events needs --backend: a backend from etcd has no KV-event endpoint in its record yet".into(),
            ));
        }
        for (events, follows) in flags.kv_events.into_iter().zip(follows.kv_events) {
            match follows.map(|at| &mut parsed.kv_events[at]) {
                Some(slot @ None) => *slot = Some(events),
                Some(Some(_)) => {
                    return Err(Stop::Error(format!(
                        "--kv-events `{events}`: the --backend before it has one already"
                    )))
                }
                None => {
                    return Err(Stop::Error(format!(
                        "--kv-events `{events}` goes after the --backend it is for"
                    )))
                }
            }
        }
        if parsed.tokenizer.is_some() && parsed.kv_events.iter().all(Option::is_none) {
            return Err(Stop::Error(
                "--tokenizer goes with --kv-events: it tokenizes the prompts for precise prefix routing".into(),
            ));
        }
        for url in flags.etcd {
            if parsed.etcd.iter().any(|e| same_backend(e, &url)) {
                return Err(Stop::Error(format!(
                    "--etcd `{url}` given twice: each endpoint once"
                )));
            }
            parsed.etcd.push(url);
        }
        let trust = [
            ("--backend-ca", flags.backend_ca),
            ("--etcd-ca", flags.etcd_ca),
            ("--etcd-cert", flags.etcd_cert),
            ("--etcd-key", flags.etcd_key),
            ("--etcd-user", flags.etcd_user),
            ("--etcd-password-file", flags.etcd_password_file),
        ];
        let allow = flags
            .etcd_allow
            .into_iter()
            .map(|r| ("--etcd-allow", Some(r)));
        for (flag, value) in trust.into_iter().chain(allow) {
            if let Some(value) = value {
                parsed.trust.parse(flag, value)?;
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
        parsed.trust.check(&parsed.etcd)?;
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
