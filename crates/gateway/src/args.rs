//! The `gateway` binary's flags.

use std::net::SocketAddr;
use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

use crate::app::access_log::AccessLog;
use crate::app::{
    ServeConfig, Timeouts, DEFAULT_JSON_BODY_LIMIT, DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_REQUESTS,
};
use crate::cli::{etcd_url, key_prefix, number, origin, Stop};

pub use usage::USAGE;

/// Why a command line without backends is refused, and what to give.
const NO_BACKENDS: &str =
    "no backends: give --backend URL (repeatable), or --etcd URL --prefix P; \
simulated ones to try the gateway with: `sims` (cargo run -p tower-model-balance-sim --bin sims) \
prints a --backend value for each";

/// The flags that may be given more than once (one backend or etcd
/// endpoint each, `--metrics` for the `--backend` before it).
const REPEATABLE: [&str; 4] = ["--backend", "--etcd", "--metrics", "--etcd-allow"];

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
    /// The flags in `args` (the program's name left out); with
    /// `--config FILE`, the file's settings under them (`args/file.rs`).
    ///
    /// # Errors
    ///
    /// `--help`, or a bad flag (the message names it), or a bad file (the
    /// message names it and its key), or no backends: neither `--backend`
    /// nor `--etcd`, on the command line or in the file.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let args = file::parse(args.into_iter().collect())?;
        if args.backends.is_empty() && args.etcd.is_empty() {
            return Err(Stop::Error(NO_BACKENDS.into()));
        }
        Ok(args)
    }

    /// The flags in `args`, `--config` taken out.
    fn parse_flags(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let mut parsed = Args {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            backends: Vec::new(),
            ids: Vec::new(),
            etcd: Vec::new(),
            prefix: None,
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
            trust: Trust::default(),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            serve: ServeConfig::default(),
            timeouts: Timeouts::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            json_body_limit: DEFAULT_JSON_BODY_LIMIT,
            access_log: AccessLog::Off,
            tables: toml::Table::new(),
        };
        let mut seen: Vec<String> = Vec::new();
        let mut args = args.into_iter().peekable();
        while let Some(flag) = args.next() {
            // Every flag but the repeatable ones once: a second value would
            // silently replace the first.
            if !REPEATABLE.contains(&flag.as_str()) && flag.starts_with("--") {
                if seen.contains(&flag) {
                    return Err(Stop::Error(format!("{flag} given twice")));
                }
                seen.push(flag.clone());
            }
            // A flag's value; the next flag is none (`--listen --admin-listen
            // X` names `--listen`, not `--admin-listen`).
            let mut value = |name: &str| {
                args.next_if(|next| !next.starts_with("--"))
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
                "--unresponsive-after" => {
                    let secs = number(&value(&flag)?, &flag, 0, 3_600)?;
                    parsed.timeouts.unresponsive = Duration::from_secs(secs as u64);
                }
                "--max-connections" => {
                    parsed.serve.max_connections = number(&value(&flag)?, &flag, 1, 1_000_000)?;
                }
                "--header-timeout" => {
                    parsed.serve.header_timeout = seconds(&value(&flag)?, &flag, 3_600)?;
                }
                "--max-requests" => {
                    parsed.max_requests = number(&value(&flag)?, &flag, 1, 1_000_000)?;
                }
                "--max-buffered-bytes" => {
                    parsed.max_buffered_bytes = number(&value(&flag)?, &flag, 1024, 64 << 30)?;
                }
                "--access-log" => {
                    parsed.access_log = match value(&flag)?.as_str() {
                        "off" => AccessLog::Off,
                        "text" => AccessLog::Text,
                        "json" => AccessLog::Json,
                        other => {
                            return Err(Stop::Error(format!(
                                "--access-log: `{other}` is none of off, text, json"
                            )))
                        }
                    };
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
                trust if Trust::FLAGS.contains(&trust) => {
                    parsed.trust.parse(trust, value(trust)?)?;
                }
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
    let origin = origin("--backend", url)?;
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
mod trust;
pub use trust::Trust;
mod file;
#[cfg(test)]
mod tests;
mod usage;
