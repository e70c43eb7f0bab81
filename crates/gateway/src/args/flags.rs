//! The gateway's flags as clap reads them: each value checked by its
//! flag's own words (`cli::number`, `cli::origin`, …), and clap's errors
//! said as the gateway says them (`--listen needs a value`, `--owners
//! given twice`, `unknown flag `--bogus``). The checks across flags are
//! `Args::from_flags`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

use crate::app::access_log::AccessLog;
use crate::cli::{clap_error, etcd_url, key_prefix, message, number, origin, Stop};

/// The command line, each value checked; `USAGE` is its help.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
pub(super) struct Flags {
    #[arg(long, value_parser = address("--listen"))]
    pub listen: Option<SocketAddr>,
    #[arg(long, value_parser = address("--admin-listen"))]
    pub admin_listen: Option<SocketAddr>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--drain-timeout", 86_400))]
    pub drain_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--connect-timeout", 300))]
    pub connect_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--first-token-timeout", 3_600))]
    pub first_token_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--idle-timeout", 3_600))]
    pub idle_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--request-timeout", 86_400))]
    pub request_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--unresponsive-after", 0, 3_600))]
    pub unresponsive_after: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--max-connections", 1, 1_000_000))]
    pub max_connections: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = seconds("--header-timeout", 3_600))]
    pub header_timeout: Option<Duration>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--max-requests", 1, 1_000_000))]
    pub max_requests: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--max-buffered-bytes", 1024, 64 << 30))]
    pub max_buffered_bytes: Option<usize>,
    #[arg(long, value_parser = access_log)]
    pub access_log: Option<AccessLog>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--json-body-limit", 1, 64 << 20))]
    pub json_body_limit: Option<usize>,
    /// Each `--backend`'s ID and origin, in order.
    #[arg(long, value_parser = named_backend)]
    pub backend: Vec<(BackendId, Origin)>,
    #[arg(long, value_parser = etcd)]
    pub etcd: Vec<Origin>,
    #[arg(long, value_parser = prefix)]
    pub prefix: Option<String>,
    /// Each `--metrics` in order; which `--backend` it follows is read
    /// from the positions ([`parse`]).
    #[arg(long, value_parser = metrics)]
    pub metrics: Vec<Origin>,
    /// Each `--kv-events` in order, checked; which `--backend` it follows
    /// is read from the positions ([`parse`]).
    #[arg(long, value_parser = kv_events)]
    pub kv_events: Vec<String>,
    #[arg(long, value_parser = tokenizer)]
    pub tokenizer: Option<PathBuf>,
    #[arg(long, value_parser = probe_openai)]
    pub probe: Option<OpenAi>,
    // The route layer's largest limit: 64 MiB.
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--body-limit", 1, 64 << 20))]
    pub body_limit: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--metrics-port", 1, 65_535))]
    pub metrics_port: Option<usize>,
    #[arg(long)]
    pub no_placement: bool,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--prefix-bytes", 1, 65_536))]
    pub prefix_bytes: Option<usize>,
    #[arg(long, value_parser = session_header)]
    pub session_header: Option<http::HeaderName>,
    #[arg(long)]
    pub receipt_header: bool,
    // The trust flags, read by `Trust::parse`.
    #[arg(long)]
    pub backend_ca: Option<String>,
    #[arg(long)]
    pub etcd_ca: Option<String>,
    #[arg(long)]
    pub etcd_cert: Option<String>,
    #[arg(long)]
    pub etcd_key: Option<String>,
    #[arg(long)]
    pub etcd_user: Option<String>,
    #[arg(long)]
    pub etcd_password_file: Option<String>,
    #[arg(long)]
    pub etcd_allow: Vec<String>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--admission-limit", 1, 1_000_000))]
    pub admission_limit: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--model-slots", 1, 16))]
    pub model_slots: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = whole("--owners", 1, 1024))]
    pub owners: Option<usize>,
    #[arg(long, allow_negative_numbers = true, value_parser = owner_load)]
    pub owner_load: Option<f64>,
}

/// `--probe openai` (else `kserve`).
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenAi(pub bool);

/// For each flag that goes after a `--backend`, the index of the
/// `--backend` each of its values follows.
#[derive(Debug)]
pub(super) struct Follows {
    pub metrics: Vec<Option<usize>>,
    pub kv_events: Vec<Option<usize>>,
}

/// The flags in `argv` (the program's name left out), and which
/// `--backend` each `--metrics` and `--kv-events` follows.
pub(super) fn parse(argv: Vec<String>) -> Result<(Flags, Follows), Stop> {
    let argv = std::iter::once("gateway".to_owned()).chain(argv);
    let matches = Flags::command()
        .try_get_matches_from(argv)
        .map_err(clap_error)?;
    let flags = Flags::from_arg_matches(&matches).map_err(clap_error)?;
    let at = |id: &str| -> Vec<usize> { matches.indices_of(id).into_iter().flatten().collect() };
    let backends = at("backend");
    let follows = |id: &str| -> Vec<Option<usize>> {
        at(id)
            .iter()
            .map(|m| backends.iter().rposition(|b| b < m))
            .collect()
    };
    let follows = Follows {
        metrics: follows("metrics"),
        kv_events: follows("kv_events"),
    };
    Ok((flags, follows))
}

/// A check of a value: `Stop`'s message.
type Check<T> = Result<T, String>;

/// `text` as a whole number in `min..=max`, for `flag`.
fn whole(flag: &'static str, min: usize, max: usize) -> impl Fn(&str) -> Check<usize> + Clone {
    move |text| number(text, flag, min, max).map_err(message)
}

/// `text` as whole seconds in `1..=max`, for `flag`.
fn seconds(flag: &'static str, max: usize) -> impl Fn(&str) -> Check<Duration> + Clone {
    move |text| whole(flag, 1, max)(text).map(|secs| Duration::from_secs(secs as u64))
}

/// `text` as a socket address, for `flag`.
fn address(flag: &'static str) -> impl Fn(&str) -> Check<SocketAddr> + Clone {
    move |text| {
        text.parse()
            .map_err(|_| format!("{flag}: `{text}` is not an address like 127.0.0.1:8080"))
    }
}

/// A `--backend`'s `[NAME=]URL`: its ID (the name, else the origin
/// written out) and its origin. A `=` before any `:` or `/` ends a name.
fn named_backend(text: &str) -> Check<(BackendId, Origin)> {
    let (name, url) = match text.split_once('=') {
        Some((name, url)) if !name.contains([':', '/']) => (Some(name), url),
        _ => (None, text),
    };
    let origin = origin("--backend", url).map_err(message)?;
    let id = match name {
        Some(name) => BackendId::new(name),
        None => BackendId::new(&origin.to_string()),
    }
    .map_err(|e| format!("--backend `{text}`: {e}"))?;
    Ok((id, origin))
}

fn etcd(text: &str) -> Check<Origin> {
    etcd_url(text).map_err(message)
}

fn prefix(text: &str) -> Check<String> {
    key_prefix(text).map_err(message)?;
    Ok(text.to_owned())
}

fn metrics(text: &str) -> Check<Origin> {
    Origin::parse(text).map_err(|e| format!("--metrics `{text}`: {e}"))
}

fn kv_events(text: &str) -> Check<String> {
    crate::app::kv_endpoints(text)?;
    Ok(text.to_owned())
}

/// A local model directory with its `tokenizer.json`.
fn tokenizer(text: &str) -> Check<PathBuf> {
    let dir = PathBuf::from(text);
    if !dir.is_dir() {
        return Err(format!("--tokenizer: `{text}` is not a directory"));
    }
    if !dir.join("tokenizer.json").is_file() {
        return Err(format!(
            "--tokenizer: `{text}` has no tokenizer.json (a model's directory, as downloaded from the Hugging Face Hub)"
        ));
    }
    Ok(dir)
}

fn access_log(text: &str) -> Check<AccessLog> {
    match text {
        "off" => Ok(AccessLog::Off),
        "text" => Ok(AccessLog::Text),
        "json" => Ok(AccessLog::Json),
        other => Err(format!(
            "--access-log: `{other}` is none of off, text, json"
        )),
    }
}

fn probe_openai(text: &str) -> Check<OpenAi> {
    match text {
        "kserve" => Ok(OpenAi(false)),
        "openai" => Ok(OpenAi(true)),
        other => Err(format!("--probe: `{other}` is neither kserve nor openai")),
    }
}

fn session_header(text: &str) -> Check<http::HeaderName> {
    let name = http::HeaderName::try_from(text)
        .map_err(|_| format!("--session-header: `{text}` is not a header name"))?;
    // The gateway strips the routing headers: a session there would
    // never be read.
    if ["x-model-id", "x-request-kind", "x-urgency"].contains(&name.as_str()) {
        return Err(format!(
            "--session-header: `{name}` is a routing header, which the gateway strips"
        ));
    }
    Ok(name)
}

fn owner_load(text: &str) -> Check<f64> {
    match text.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.25 => Ok(x),
        _ => Err(format!(
            "--owner-load: `{text}` is not a number above 0 and up to 1.25"
        )),
    }
}

#[cfg(test)]
mod tests;
