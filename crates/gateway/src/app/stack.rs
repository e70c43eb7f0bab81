//! The layers' settings (the library's
//! [`StackConfig`]): the library's defaults, but where the gateway chose
//! otherwise ([`DEFAULTS`]), and a `--config` file's tables over those,
//! key by key.
//!
//! Why key by key: a file that sets `[breaker] open_duration_ms` must not
//! lose the gateway's `consecutive_failures = 3`, as it would if the
//! file's table replaced the gateway's whole breaker policy. A key the
//! file leaves out keeps the gateway's value; a key the file sets wins.
//! Two keys go together:
//!
//! - `[balance] breaker_scope` given: the gateway's `max_pairs` is left
//!   out (a `breaker_scope = "backend"` takes none; the file may give
//!   its own with `"backend_model"`).
//! - `[probe] interval_ms` given without `timeout_ms`: the timeout is the
//!   gateway's rule, 500 ms or the interval if shorter (the library's
//!   default, 1 s, would be refused above a shorter interval).

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use tower::retry::Retry;
use tower::util::Either;
use tower_model_balance::balance::ModelBalancer;
use tower_model_balance::config::{ConfigError, StackConfig};
use tower_model_balance::endpoint::SetOrigin;
use tower_model_balance::hedge::{FirstFrame, Hedge, RetryPolicy};
use tower_model_balance::kv::PromptBlocksService;
use tower_model_balance::route::ModelFromBody;

use super::client::BackendConnector;
use super::phases::Phases;

/// One backend's endpoint: the shared client pointed at its origin, under
/// the phase timeouts where the backend is at fault (inside the balancer's
/// breaker, so a stalled stream is a failure).
pub type Endpoint = Phases<SetOrigin<Client<BackendConnector, Full<Bytes>>>>;
/// The request path behind the route layer.
type Hedged = Hedge<Retry<RetryPolicy, FirstFrame<ModelBalancer<Endpoint>>>>;
/// The whole request path: with `--kv-events` the prompt's blocks between
/// the route and the hedge, else nothing there (no cost per request).
pub type Stack = ModelFromBody<Either<PromptBlocksService<Hedged>, Hedged>>;

/// The gateway's choices where they differ from the library's defaults,
/// written as a file's tables; everything else is the library's default
/// (`examples/stack.toml`).
pub const DEFAULTS: &str = r#"
[balance]
# One breaker per (backend, model): a model that fails on every server (a
# broken runtime, a model answering 500 to every inference) opens its own
# breakers, not the servers' -- with one breaker per backend, a few
# clients sending it opened every breaker and the fleet answered 503 to
# healthy models. A server that is down fails every model's pair, and its
# probes fail: health ejects it within a probe round.
breaker_scope = "backend_model"
max_pairs = 100000
# No panic mode: the backends whose breakers admit take the traffic, and
# when none does the gateway answers 503 with Retry-After at once, rather
# than route over backends that are failing. (Health alone ejects at most
# 30% of the fleet, so it cannot empty it.)
panic_threshold = 0.0

[breaker]
# Three 5xx in a row open a breaker (the default failure rate needs 10
# calls first): a gateway in front of a few backends fails fast sooner.
consecutive_failures = 3

[probe]
# Each backend every second, each probe given 500 ms.
interval_ms = 1000
timeout_ms = 500

[placement]
# A request whose owner is still loading the model goes to a backend that
# holds it, if one can take it.
when_cold = "prefer_warm"
"#;

/// The gateway's probe timeout when a file sets only the interval: 500
/// ms, or the interval if shorter.
const PROBE_TIMEOUT_MS: i64 = 500;

/// The layers' settings: [`DEFAULTS`] with `file`'s tables over them,
/// key by key (see the module's docs), through
/// [`StackConfig::from_toml`].
///
/// # Errors
///
/// A value out of range, the key named ([`ConfigError::Invalid`]); a key
/// or a type the library does not take ([`ConfigError::Parse`]; give the
/// file's own text to `StackConfig::from_toml` first for its line and
/// column, as `--config` does).
pub fn stack_config(file: &toml::Table) -> Result<StackConfig, ConfigError> {
    StackConfig::from_toml(&over_defaults(file).to_string())
}

/// The gateway's settings of the layers with no file.
pub fn default_stack() -> StackConfig {
    // `DEFAULTS` is a constant that a test builds.
    stack_config(&toml::Table::new()).expect("the gateway's defaults are valid")
}

/// [`DEFAULTS`] with `file`'s tables over them, key by key.
fn over_defaults(file: &toml::Table) -> toml::Table {
    let mut merged: toml::Table = DEFAULTS.parse().expect("the gateway's defaults are TOML");
    for (name, value) in file {
        match (merged.get_mut(name), value) {
            (Some(toml::Value::Table(ours)), toml::Value::Table(theirs)) => {
                if name == "balance" && theirs.contains_key("breaker_scope") {
                    ours.remove("max_pairs");
                }
                if name == "probe" && !theirs.contains_key("timeout_ms") {
                    if let Some(toml::Value::Integer(interval)) = theirs.get("interval_ms") {
                        let timeout = (*interval).clamp(1, PROBE_TIMEOUT_MS);
                        ours.insert("timeout_ms".into(), toml::Value::Integer(timeout));
                    }
                }
                for (key, value) in theirs {
                    ours.insert(key.clone(), value.clone());
                }
            }
            _ => {
                merged.insert(name.clone(), value.clone());
            }
        }
    }
    merged
}
