//! The gateway's [`Config`] from its flags.

use tower_model_balance::endpoint::Origin;

use super::parsed::Args;
use crate::app::{Config, EtcdMembers, Probe};

impl Args {
    /// The gateway's configuration from these flags: the backends of
    /// `--etcd`, else those of `--backend` (each under its `NAME=`, else its
    /// origin: the ID its models' owners are hashed by).
    ///
    /// # Errors
    ///
    /// A `--metrics-port` that makes no origin with a backend's host; a
    /// layers' setting out of range (checked by [`Args::parse`] already).
    pub fn config(&self) -> Result<Config, String> {
        let mut config = if let Some(prefix) = &self.prefix {
            let mut config = Config::new(Vec::new());
            let endpoints = self.etcd.iter().map(ToString::to_string).collect();
            let mut members = EtcdMembers::new(endpoints, prefix.clone());
            self.trust.apply(&mut members);
            config.etcd = Some(members);
            config
        } else {
            let backends = self.ids.iter().cloned().zip(self.backends.iter().cloned());
            Config::new(backends.collect())
        };
        config.backend_ca.clone_from(&self.trust.backend_ca);
        config.body_limit = self.body_limit;
        config.json_body_limit = self.json_body_limit;
        config.access_log = self.access_log;
        config.timeouts = self.timeouts;
        config.max_requests = self.max_requests;
        config.max_buffered_bytes = self.max_buffered_bytes;
        config.model_slots = self.model_slots;
        // `--owners`, `--owner-load`, `--admission-limit` and the file's
        // layers' tables, over the gateway's defaults.
        config.stack = crate::app::stack_config(&self.stack_tables()).map_err(|e| e.to_string())?;
        config.prefix_bytes = self.prefix_bytes;
        config.session_header = self.session_header.clone();
        config.receipt_header = self.receipt_header;
        config.placement = self.placement;
        if self.probe_openai {
            config.probe = Probe::OpenAi;
        }
        for ((id, _), metrics) in config.backends.iter().zip(&self.metrics) {
            if let Some(metrics) = metrics {
                config.metrics_origins.push((id.clone(), metrics.clone()));
            }
        }
        for ((id, _), events) in config.backends.iter().zip(&self.kv_events) {
            if let Some(events) = events {
                config.kv_events.push((id.clone(), events.clone()));
            }
        }
        config.tokenizer.clone_from(&self.tokenizer);
        if let Some(port) = self.metrics_port {
            config.metrics_origins = config
                .backends
                .iter()
                .map(|(id, origin)| {
                    let host = origin.authority().host();
                    let metrics = Origin::parse(&format!("{}://{host}:{port}", origin.scheme()))
                        .map_err(|e| format!("--metrics-port for {origin}: {e}"))?;
                    Ok((id.clone(), metrics))
                })
                .collect::<Result<_, String>>()?;
        }
        Ok(config)
    }

    /// The `--config` file's layers' tables with the flags that set a key
    /// of theirs over them: `--owners` and `--owner-load` (`[balance]`),
    /// `--admission-limit` (`[admission] limit`, a fixed limit in place of
    /// the file's, its other keys kept).
    pub(crate) fn stack_tables(&self) -> toml::Table {
        let mut tables = self.tables.clone();
        let mut set = |name: &str, key: &str, value: toml::Value, replaces: &[&str]| {
            let table = tables
                .entry(name)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            // The file's table is a table: `Args::parse` checked it.
            if let toml::Value::Table(table) = table {
                for key in replaces {
                    table.remove(*key);
                }
                table.insert(key.into(), value);
            }
        };
        if let Some(k) = self.owners {
            set("balance", "owners", toml::Value::Integer(k as i64), &[]);
        }
        if let Some(load) = self.owner_load {
            set("balance", "owner_load", toml::Value::Float(load), &[]);
        }
        if let Some(limit) = self.admission_limit {
            // A fixed limit in place of an adaptive one.
            let aimd = ["limit_min", "limit_max", "backoff", "latency_threshold_ms"];
            set(
                "admission",
                "limit",
                toml::Value::Integer(limit as i64),
                &aimd,
            );
        }
        tables
    }
}
