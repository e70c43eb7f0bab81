//! `--config FILE`: every flag's setting in a `[gateway]` table, and the
//! layers' own tables (the library's `StackConfig`: `[balance]`,
//! `[breaker]`, `[health]`, `[probe]`, `[placement]`, `[hedge]`,
//! `[admission]`) beside it.
//!
//! The `[gateway]` table is read as the flags it stands for ([`KEYS`]),
//! and each key is checked by its flag's own code — the same ranges in
//! the same words, the key named where the flag would be. The command
//! line's flags come after the file's, and a flag given there drops the
//! file's setting of it: `--backend` or `--etcd` the file's whole choice
//! of backends (its backends and etcd; `--etcd` keeps the file's prefix).
//! The cross-checks of the flags (`--etcd` needs `--prefix`, …) then run
//! once, over both.
//!
//! The layers' tables are the library's: `StackConfig::from_toml` reads
//! them from the file's own text, the `[gateway]` lines blanked, so an
//! unknown key or a wrong type is reported at the file's line and column;
//! then they are built over the gateway's own defaults, key by key
//! (`app/stack.rs`), with `--owners`, `--owner-load` and
//! `--admission-limit` over them, and a value out of range is named by
//! its key.

use serde::Deserialize;
use tower_model_balance::config::{ConfigError, StackConfig};

use super::parsed::Args;
use crate::cli::Stop;

pub(crate) use keys::KEYS;

/// The file: `[gateway]` and the layers' tables, nothing else (an unknown
/// table is refused with its line and column). The layers' tables are
/// only accepted here; the library reads them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // The layers' fields: accepted here, read by the library.
struct Document {
    #[serde(default)]
    gateway: Gateway,
    balance: Option<toml::Value>,
    breaker: Option<toml::Value>,
    health: Option<toml::Value>,
    probe: Option<toml::Value>,
    placement: Option<toml::Value>,
    hedge: Option<toml::Value>,
    admission: Option<toml::Value>,
}

/// The `[gateway]` table: one key a flag. Integers are `i64` so that a
/// negative one is out of range in the flag's words, not a type error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gateway {
    listen: Option<String>,
    admin_listen: Option<String>,
    backends: Option<Vec<BackendEntry>>,
    etcd: Option<EtcdTable>,
    probe: Option<String>,
    metrics_port: Option<i64>,
    placement: Option<bool>,
    body_limit: Option<i64>,
    json_body_limit: Option<i64>,
    model_slots: Option<i64>,
    prefix_bytes: Option<i64>,
    session_header: Option<String>,
    receipt_header: Option<bool>,
    tokenizer: Option<String>,
    drain_timeout_s: Option<i64>,
    connect_timeout_s: Option<i64>,
    first_token_timeout_s: Option<i64>,
    idle_timeout_s: Option<i64>,
    request_timeout_s: Option<i64>,
    unresponsive_after_s: Option<i64>,
    max_connections: Option<i64>,
    header_timeout_s: Option<i64>,
    max_requests: Option<i64>,
    max_buffered_bytes: Option<i64>,
    access_log: Option<String>,
    backend_ca: Option<String>,
    etcd_ca: Option<String>,
    etcd_cert: Option<String>,
    etcd_key: Option<String>,
    etcd_user: Option<String>,
    etcd_password_file: Option<String>,
    etcd_allow: Option<Vec<String>>,
}

/// A `[[gateway.backends]]` entry: `--backend [NAME=]URL` and the
/// `--metrics URL` and `--kv-events URL` after it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendEntry {
    name: Option<String>,
    url: String,
    metrics: Option<String>,
    kv_events: Option<String>,
}

/// `[gateway.etcd]`: `--etcd` (each endpoint) and `--prefix`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EtcdTable {
    endpoints: Option<Vec<String>>,
    prefix: Option<String>,
}

/// One flag of the file, with the key it came from.
#[derive(Debug, Clone)]
struct Flag {
    flag: &'static str,
    key: String,
    value: Option<String>,
}

/// Flags that are checked together (a backend and its metrics).
type Setting = Vec<Flag>;

/// `--config`'s way into [`Args`]: without it, the flags alone.
pub(super) fn parse(args: Vec<String>) -> Result<Args, Stop> {
    let (path, cli) = take_config(args)?;
    let Some(path) = path else {
        return Args::parse_flags(cli);
    };
    // `--help` and `--version` answer whatever the file holds.
    if cli
        .iter()
        .any(|a| matches!(a.as_str(), "-h" | "--help" | "-V" | "--version"))
    {
        return Args::parse_flags(cli);
    }
    let error = |message: String| Stop::Error(format!("--config {path}: {message}"));
    let text = std::fs::read_to_string(&path).map_err(|e| error(e.to_string()))?;
    let (settings, tables) = read(&text).map_err(error)?;
    let argv = merge(&settings, &cli)?;
    let mut args = Args::parse_flags(argv).map_err(|stop| {
        // A fault of the command line alone is said as without a file.
        match (&stop, Args::parse_flags(cli.clone())) {
            (Stop::Error(m), Err(Stop::Error(alone))) if *m == alone => stop,
            (Stop::Error(m), _) => Stop::Error(with_file(m, &path, &settings)),
            _ => stop,
        }
    })?;
    args.tables = tables;
    // The layers' tables with the flags over them: a value out of range.
    crate::app::stack_config(&args.stack_tables()).map_err(|e| error(e.to_string()))?;
    Ok(args)
}

/// `--config`'s value, and the other flags.
fn take_config(args: Vec<String>) -> Result<(Option<String>, Vec<String>), Stop> {
    let (mut path, mut rest) = (None, Vec::new());
    // `--flag=value` as `--flag value`: the file's flags are dropped by
    // the name the command line gives.
    let mut args = args.into_iter().flat_map(|arg| match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") => vec![flag.to_owned(), value.to_owned()],
        _ => vec![arg],
    });
    while let Some(arg) = args.next() {
        if arg != "--config" {
            rest.push(arg);
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| Stop::Error("--config needs a value".into()))?;
        if path.replace(value).is_some() {
            return Err(Stop::Error("--config given twice".into()));
        }
    }
    Ok((path, rest))
}

/// The file's settings, each checked, and its layers' tables, checked for
/// keys and types.
fn read(text: &str) -> Result<(Vec<Setting>, toml::Table), String> {
    let parse = |e: toml::de::Error| ConfigError::Parse(e.to_string()).to_string();
    let document: Document = toml::from_str(text).map_err(parse)?;
    let mut tables: toml::Table = toml::from_str(text).map_err(parse)?;
    tables.remove("gateway");
    // An unknown key or a wrong type at the file's line and column; a
    // value out of range waits for the gateway's defaults under it.
    if let Err(e @ ConfigError::Parse(_)) = StackConfig::from_toml(&layers_text(text, &tables)) {
        return Err(e.to_string());
    }
    let settings = document.gateway.settings()?;
    for setting in &settings {
        check(setting)?;
    }
    Ok((settings, tables))
}

/// The flags of `setting`, as a command line.
fn argv(setting: &[Flag]) -> impl Iterator<Item = String> + '_ {
    setting
        .iter()
        .flat_map(|f| std::iter::once(f.flag.to_owned()).chain(f.value.clone()))
}

/// `setting` through the flags' own code; its error names the keys.
fn check(setting: &[Flag]) -> Result<(), String> {
    let mut flags: Vec<String> = argv(setting).collect();
    // etcd's endpoints and prefix are checked together: one without the
    // other (the rest on the command line) gets a stand-in.
    let has = |flag: &str| setting.iter().any(|f| f.flag == flag);
    if has("--etcd") && !has("--prefix") {
        flags.extend(["--prefix".into(), "/".into()]);
    }
    if has("--prefix") && !has("--etcd") {
        flags.extend(["--etcd".into(), "http://127.0.0.1:2379".into()]);
    }
    // The tokenizer is for the backends' KV-cache events, elsewhere.
    if has("--tokenizer") {
        flags.extend(
            [
                "--backend",
                "http://127.0.0.1:1",
                "--kv-events",
                "tcp://127.0.0.1:1",
            ]
            .map(String::from),
        );
    }
    match Args::parse_flags(flags) {
        Err(Stop::Error(message)) => {
            let keyed = setting.iter().fold(message, |m, f| {
                replace_flag(&m, f.flag, &format!("`{}`", f.key))
            });
            Err(keyed)
        }
        _ => Ok(()),
    }
}

/// The file's flags but those the command line gives, then the command
/// line's.
fn merge(settings: &[Setting], cli: &[String]) -> Result<Vec<String>, Stop> {
    let given = |flag: &str| cli.iter().any(|a| a == flag);
    let (backends, etcd) = (given("--backend"), given("--etcd"));
    for flag in ["--metrics", "--kv-events"] {
        if given(flag) && !backends {
            return Err(Stop::Error(format!(
                "{flag} goes after the --backend it is for, on the command line (whose --backend replaces the file's backends)"
            )));
        }
    }
    let mut merged = Vec::new();
    for setting in settings {
        let flag = setting[0].flag;
        let dropped = given(flag)
            || match flag {
                "--backend" | "--etcd" => backends || etcd,
                "--prefix" => backends,
                _ => false,
            };
        if !dropped {
            merged.extend(argv(setting));
        }
    }
    merged.extend(cli.iter().cloned());
    Ok(merged)
}

/// `message`, from the flags of the file and the command line together,
/// with the file named and the keys of its flags that it names.
fn with_file(message: &str, path: &str, settings: &[Setting]) -> String {
    let mut keys: Vec<String> = Vec::new();
    for f in settings.iter().flatten() {
        let said = format!("{} is `{}`", f.flag, key_of(f.flag));
        if replace_flag(message, f.flag, "") != message && !keys.contains(&said) {
            keys.push(said);
        }
    }
    match keys.is_empty() {
        true => format!("--config {path}: {message}"),
        false => format!("--config {path}: {message} (where {})", keys.join(", ")),
    }
}

/// `message` with each mention of `flag` (not of a longer flag it begins)
/// replaced.
fn replace_flag(message: &str, flag: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find(flag) {
        let after = &rest[at + flag.len()..];
        out.push_str(&rest[..at]);
        match after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-') {
            true => out.push_str(flag),
            false => out.push_str(with),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `flag`'s key ([`KEYS`]).
fn key_of(flag: &str) -> &'static str {
    KEYS.iter()
        .find(|(f, _)| *f == flag)
        .map_or("", |(_, key)| key)
}

impl Gateway {
    /// The flags this table stands for, in `USAGE`'s order.
    fn settings(self) -> Result<Vec<Setting>, String> {
        let mut out: Vec<Setting> = Vec::new();
        let mut one = |flag: &'static str, value: Option<String>| {
            let key = key_of(flag).to_owned();
            out.push(vec![Flag { flag, key, value }]);
        };
        let text = |v: Option<String>| v.map(Some);
        let number = |v: Option<i64>| v.map(|n| Some(n.to_string()));
        let on = |v: Option<bool>, when: bool| (v == Some(when)).then_some(None);
        let values = [
            ("--listen", text(self.listen)),
            ("--probe", text(self.probe)),
            ("--metrics-port", number(self.metrics_port)),
            ("--no-placement", on(self.placement, false)),
            ("--body-limit", number(self.body_limit)),
            ("--model-slots", number(self.model_slots)),
            ("--prefix-bytes", number(self.prefix_bytes)),
            ("--session-header", text(self.session_header)),
            ("--receipt-header", on(self.receipt_header, true)),
            ("--tokenizer", text(self.tokenizer)),
            ("--admin-listen", text(self.admin_listen)),
            ("--drain-timeout", number(self.drain_timeout_s)),
            ("--connect-timeout", number(self.connect_timeout_s)),
            ("--first-token-timeout", number(self.first_token_timeout_s)),
            ("--idle-timeout", number(self.idle_timeout_s)),
            ("--request-timeout", number(self.request_timeout_s)),
            ("--unresponsive-after", number(self.unresponsive_after_s)),
            ("--max-connections", number(self.max_connections)),
            ("--header-timeout", number(self.header_timeout_s)),
            ("--max-requests", number(self.max_requests)),
            ("--max-buffered-bytes", number(self.max_buffered_bytes)),
            ("--json-body-limit", number(self.json_body_limit)),
            ("--access-log", text(self.access_log)),
            ("--backend-ca", text(self.backend_ca)),
            ("--etcd-ca", text(self.etcd_ca)),
            ("--etcd-cert", text(self.etcd_cert)),
            ("--etcd-key", text(self.etcd_key)),
            ("--etcd-user", text(self.etcd_user)),
            ("--etcd-password-file", text(self.etcd_password_file)),
        ];
        for (flag, value) in values {
            if let Some(value) = value {
                one(flag, value);
            }
        }
        for range in self.etcd_allow.into_iter().flatten() {
            one("--etcd-allow", Some(range));
        }
        for (i, backend) in self.backends.into_iter().flatten().enumerate() {
            let key = |leaf: &str| format!("gateway.backends[{i}].{leaf}");
            let value = match backend.name {
                Some(name) if name.contains(['=', ':', '/']) || name.is_empty() => {
                    return Err(format!(
                        "`{}`: `{name}` is not a backend name (one character or more, no `=`, `:` or `/`)",
                        key("name")
                    ))
                }
                Some(name) => format!("{name}={}", backend.url),
                None => backend.url,
            };
            let mut setting = vec![Flag {
                flag: "--backend",
                key: key("url"),
                value: Some(value),
            }];
            if let Some(metrics) = backend.metrics {
                setting.push(Flag {
                    flag: "--metrics",
                    key: key("metrics"),
                    value: Some(metrics),
                });
            }
            if let Some(events) = backend.kv_events {
                setting.push(Flag {
                    flag: "--kv-events",
                    key: key("kv_events"),
                    value: Some(events),
                });
            }
            out.push(setting);
        }
        if let Some(etcd) = self.etcd {
            let endpoints: Setting = (etcd.endpoints.into_iter().flatten())
                .map(|endpoint| Flag {
                    flag: "--etcd",
                    key: key_of("--etcd").to_owned(),
                    value: Some(endpoint),
                })
                .collect();
            if !endpoints.is_empty() {
                out.push(endpoints);
            }
            if let Some(prefix) = etcd.prefix {
                out.push(vec![Flag {
                    flag: "--prefix",
                    key: key_of("--prefix").to_owned(),
                    value: Some(prefix),
                }]);
            }
        }
        Ok(out)
    }
}

// === the layers' tables at the file's lines ===

/// The file's text with the `[gateway]` table's lines blank: the layers'
/// tables alone at their own lines and columns. Should the blanking miss
/// (a `[gateway]` line inside a multi-line string), the tables written
/// anew: the same keys, at other lines.
fn layers_text(text: &str, tables: &toml::Table) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut ours, mut root) = (false, true);
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let first_key = |s: &str| {
            let end = s.find(['.', '=', ']']).unwrap_or(s.len());
            s[..end].trim().trim_matches(['"', '\'']).to_owned()
        };
        if trimmed.starts_with('[') {
            root = false;
            ours = first_key(trimmed.trim_start_matches('[')) == "gateway";
        }
        if ours || (root && first_key(trimmed) == "gateway") {
            out.push_str(&line[line.trim_end_matches(['\r', '\n']).len()..]);
        } else {
            out.push_str(line);
        }
    }
    match toml::from_str::<toml::Table>(&out) {
        Ok(read) if read == *tables => out,
        _ => tables.to_string(),
    }
}

mod keys;
#[cfg(test)]
mod tests;
