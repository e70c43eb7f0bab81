//! The `etcd-register` binary's flags.

use std::time::Duration;

use clap::Parser;
use tower_model_balance::backend::{BackendId, BackendMeta};
use tower_model_balance::endpoint::Origin;

use crate::args::Trust;
use crate::cli::{clap_error, etcd_url, http_origin, key_prefix, message, number, Stop};

/// The usage, printed for `--help` and after a bad flag.
pub const USAGE: &str = "\
usage: etcd-register FLAGS

Registers one backend in etcd under a lease, keeps the lease alive, keeps
the record's resident models as the server lists them, and deregisters
(revokes the lease) on Ctrl-C or SIGTERM.

  --etcd URL             an etcd client URL, e.g. http://127.0.0.1:2379
                         (repeatable, one per member; required)
  --prefix P             the key prefix of the records, e.g. /models/backends/
                         (required): the record is <P><ID>
  --id ID                the backend's ID (required), e.g. gpu-0
  --address URL          where the backend serves, e.g. http://10.0.0.1:8000:
                         what gateways send to (required; a simulated server:
                         `sims --explicit` prints its NAME=URL)
  --ttl SECS             the lease's time to live (1..=3600, default 10): a
                         backend whose sidecar dies leaves every gateway
                         within it
  --weight N             its share of the ring (1..=10000, default 1)
  --model-slots N        models it holds at once (1..=16, default 4)
  --metrics-address URL  where it serves /metrics, when not at --address
  --probe API            how its resident models are read: kserve (the KServe
                         v2 repository index, default) or openai (/v1/models)
  --interval MS          how often (10..=3600000, default 1000)
  --etcd-ca FILE         the CA certificates (PEM) etcd's is checked against
                         (with https:// --etcd URLs; default: the system's)
  --etcd-cert FILE       a client certificate (PEM) for an etcd that checks
  --etcd-key FILE        clients' (--client-cert-auth), and its private key
  --etcd-user NAME       the etcd user to write as; its password from
  --etcd-password-file FILE, else from GATEWAY_ETCD_PASSWORD in the
                         environment
  -h, --help             this text";

/// Which list of resident models the sidecar follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `POST /v2/repository/index` (Triton, KServe, MLServer, the simulator).
    KServe,
    /// `GET /v1/models` (vLLM, SGLang, TGI).
    OpenAi,
}

/// The command line as clap reads it; each value checked in
/// [`Args::parse`]. `USAGE` is its help.
#[derive(Debug, Parser)]
#[command(name = "etcd-register", disable_version_flag = true)]
struct Flags {
    #[arg(long, value_parser = etcd)]
    etcd: Vec<Origin>,
    #[arg(long)]
    prefix: Option<String>,
    #[arg(long)]
    id: Option<String>,
    #[arg(long)]
    address: Option<String>,
    #[arg(long)]
    metrics_address: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    ttl: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    weight: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    model_slots: Option<String>,
    #[arg(long)]
    probe: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    interval: Option<String>,
    // The gateway's etcd flags, but the allow-list (a writer names its
    // own address).
    #[arg(long)]
    etcd_ca: Option<String>,
    #[arg(long)]
    etcd_cert: Option<String>,
    #[arg(long)]
    etcd_key: Option<String>,
    #[arg(long)]
    etcd_user: Option<String>,
    #[arg(long)]
    etcd_password_file: Option<String>,
}

fn etcd(text: &str) -> Result<Origin, String> {
    etcd_url(text).map_err(message)
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    /// `--prefix`.
    pub prefix: String,
    /// The record: ID, address, weight, model slots, metrics address.
    pub meta: BackendMeta,
    /// `--ttl`: the lease's time to live.
    pub ttl: Duration,
    /// `--probe`.
    pub probe: Probe,
    /// `--interval`: how often the resident models are read.
    pub interval: Duration,
    /// `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-user`,
    /// `--etcd-password-file` (the gateway's own flags).
    pub trust: Trust,
}

impl Args {
    /// The flags in `args` (the program's name left out).
    ///
    /// # Errors
    ///
    /// `--help`, or a bad flag (the message names it).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let argv = std::iter::once("etcd-register".to_owned()).chain(args);
        let flags = Flags::try_parse_from(argv).map_err(clap_error)?;
        let mut etcd: Vec<Origin> = Vec::new();
        for url in flags.etcd {
            if etcd.contains(&url) {
                return Err(error(format!("--etcd `{url}` given twice")));
            }
            etcd.push(url);
        }
        let Flags {
            prefix,
            id,
            address,
            metrics_address: metrics,
            ttl,
            weight,
            model_slots: slots,
            probe,
            interval,
            ..
        } = flags;
        let mut trust = Trust::default();
        let etcd_flags = [
            ("--etcd-ca", flags.etcd_ca),
            ("--etcd-cert", flags.etcd_cert),
            ("--etcd-key", flags.etcd_key),
            ("--etcd-user", flags.etcd_user),
            ("--etcd-password-file", flags.etcd_password_file),
        ];
        for (flag, value) in etcd_flags {
            if let Some(value) = value {
                trust.parse(flag, value)?;
            }
        }
        if etcd.is_empty() {
            return Err(error("--etcd is required: where etcd is".into()));
        }
        trust.check(&etcd)?;
        let required = |value: Option<String>, flag: &str| {
            value.ok_or_else(|| error(format!("{flag} is required")))
        };
        let prefix = required(prefix, "--prefix")?;
        key_prefix(&prefix)?;
        let id = required(id, "--id")?;
        let id = BackendId::new(&id).map_err(|e| error(format!("--id `{id}`: {e}")))?;
        let address = required(address, "--address")?;
        let mut meta = BackendMeta::new(id).with_address(http_origin("--address", &address)?);
        if let Some(text) = weight {
            let n = number(&text, "--weight", 1, 10_000)?;
            meta = meta
                .with_weight(u32::try_from(n).unwrap_or(u32::MAX))
                .map_err(|e| error(format!("--weight: {e}")))?;
        }
        if let Some(text) = slots {
            let n = number(&text, "--model-slots", 1, 16)?;
            meta = meta
                .with_model_slots(n)
                .map_err(|e| error(format!("--model-slots: {e}")))?;
        }
        if let Some(text) = metrics {
            meta = meta.with_metrics_address(http_origin("--metrics-address", &text)?);
        }
        let probe = match probe.as_deref() {
            None | Some("kserve") => Probe::KServe,
            Some("openai") => Probe::OpenAi,
            Some(other) => {
                return Err(error(format!(
                    "--probe: `{other}` is neither kserve nor openai"
                )))
            }
        };
        let secs = |text: Option<String>, flag, min, max, default| match text {
            Some(text) => number(&text, flag, min, max),
            None => Ok(default),
        };
        let ttl = secs(ttl, "--ttl", 1, 3600, 10)?;
        let interval = secs(interval, "--interval", 10, 3_600_000, 1000)?;
        Ok(Args {
            etcd: etcd.iter().map(ToString::to_string).collect(),
            prefix,
            meta,
            ttl: Duration::from_secs(ttl as u64),
            probe,
            interval: Duration::from_millis(interval as u64),
            trust,
        })
    }
}

fn error(message: String) -> Stop {
    Stop::Error(message)
}

#[cfg(test)]
mod tests;
