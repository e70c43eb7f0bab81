//! The `[balance]` table, with the ring seed's two spellings.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{invalid, ms};
use crate::balance::AdmissionConfig;
use crate::balance::{BalanceConfig, BreakerScope, StagingConfig};
use crate::breaker::BreakerConfig;
use crate::classify::timing::StopPoint;
use crate::classify::Classifier;
use crate::health::HealthConfig;
use crate::ring::RingConfig;
use crate::route::ModelId;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BalanceFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) owners: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) min_owners: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) load_factor: Option<f64>,
    /// Unset: `load_factor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) owner_load: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) panic_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) latency_decay_ms: Option<u64>,
    /// Owners fixed per model ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) model_owners: Option<BTreeMap<String, usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) vnodes_per_weight: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ring_seed: Option<RingSeed>,
    /// `"backend"` or `"backend_model"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) breaker_scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_pairs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) staging_max_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) staging_cooldown_ms: Option<u64>,
    /// `"http_status"` or `"grpc_status"`.
    pub(super) classification: Option<String>,
    /// `"headers"`, `"first_frame"` or `"end_of_body"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stop_point: Option<String>,
    /// A routing receipt per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) receipts: Option<bool>,
}

/// `balance.ring_seed`: a TOML integer, or a string (decimal or `0x` hex)
/// for seeds above `i64::MAX`, which TOML 1.0 integers cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RingSeed(pub(super) u64);

impl Serialize for RingSeed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(self.0) {
            Ok(seed) => serializer.serialize_i64(seed),
            Err(_) => serializer.serialize_str(&format!("{:#x}", self.0)),
        }
    }
}

impl<'de> Deserialize<'de> for RingSeed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RingSeedVisitor)
    }
}

pub(super) struct RingSeedVisitor;

impl serde::de::Visitor<'_> for RingSeedVisitor {
    type Value = RingSeed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "an integer in 0 ..= 18446744073709551615, as a string (decimal or 0x hex) \
             above 9223372036854775807",
        )
    }

    fn visit_u64<E: serde::de::Error>(self, seed: u64) -> Result<RingSeed, E> {
        Ok(RingSeed(seed))
    }

    fn visit_i64<E: serde::de::Error>(self, seed: i64) -> Result<RingSeed, E> {
        u64::try_from(seed)
            .map(RingSeed)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(seed), &self))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RingSeed, E> {
        // Digits only: no sign, which `from_str_radix` would accept.
        let (digits, radix) = match text.strip_prefix("0x") {
            Some(hex) => (hex, 16),
            None => (text, 10),
        };
        let all_digits = digits.chars().all(|c| c.is_digit(radix));
        u64::from_str_radix(digits, radix)
            .ok()
            .filter(|_| all_digits)
            .map(RingSeed)
            .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
    }
}

impl BalanceFile {
    pub(super) fn build(
        self,
        breaker: BreakerConfig,
        health: HealthConfig,
        admission: Option<AdmissionConfig>,
    ) -> Result<BalanceConfig, ConfigError> {
        let err = |e| invalid("balance", e);
        let mut b = BalanceConfig::builder().breaker(breaker).health(health);
        if let Some(admission) = admission {
            b = b.admission(admission);
        }
        if let Some(k) = self.owners {
            b = b.owners(k);
        }
        if let Some(k) = self.min_owners {
            b = b.min_owners(k);
        }
        if let Some(c) = self.load_factor {
            b = b.load_factor(c);
        }
        if let Some(load) = self.owner_load {
            b = b.owner_load(load);
        }
        if let Some(share) = self.panic_threshold {
            b = b.panic_threshold(share);
        }
        if let Some(tau) = self.latency_decay_ms {
            b = b.latency_decay(ms(tau));
        }
        for (model, k) in self.model_owners.unwrap_or_default() {
            let key = || format!("balance.model_owners.{model:?}");
            let model = ModelId::new(&model).map_err(|_| ConfigError::Invalid {
                key: key(),
                expected: "a valid model ID",
            })?;
            // The builder's check, on this entry alone: its words, and the
            // key naming the model.
            BalanceConfig::builder()
                .model_owners(model.clone(), k)
                .build()
                .map_err(|e| ConfigError::Invalid {
                    key: key(),
                    expected: e.expected,
                })?;
            b = b.model_owners(model, k);
        }
        if self.vnodes_per_weight.is_some() || self.ring_seed.is_some() {
            let defaults = RingConfig::default();
            let seed = self.ring_seed.map_or(0, |seed| seed.0);
            let ring = RingConfig::new(
                seed,
                self.vnodes_per_weight
                    .unwrap_or(defaults.vnodes_per_weight()),
            )
            .map_err(err)?;
            b = b.ring(ring);
        }
        match (self.breaker_scope.as_deref(), self.max_pairs) {
            (None | Some("backend"), None) => {}
            (Some("backend_model"), max_pairs) => {
                b = b.breaker_scope(BreakerScope::BackendModel {
                    max_pairs: max_pairs.unwrap_or(10_000),
                });
            }
            (None | Some("backend"), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "balance.max_pairs".into(),
                    expected: "set only with breaker_scope = \"backend_model\"",
                })
            }
            (Some(_), _) => {
                return Err(ConfigError::Invalid {
                    key: "balance.breaker_scope".into(),
                    expected: "\"backend\" or \"backend_model\"",
                })
            }
        }
        match self.classification.as_deref() {
            None | Some("http_status") => {}
            Some("grpc_status") => b = b.classifier(Classifier::grpc()),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "balance.classification".into(),
                    expected: "\"http_status\" or \"grpc_status\"",
                })
            }
        }
        match self.stop_point.as_deref() {
            None => {}
            Some("headers") => b = b.stop_point(StopPoint::Headers),
            Some("first_frame") => b = b.stop_point(StopPoint::FirstFrame),
            Some("end_of_body") => b = b.stop_point(StopPoint::EndOfBody),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "balance.stop_point".into(),
                    expected: "\"headers\", \"first_frame\" or \"end_of_body\"",
                })
            }
        }
        if let Some(on) = self.receipts {
            b = b.receipts(on);
        }
        if self.staging_max_share.is_some() || self.staging_cooldown_ms.is_some() {
            let defaults = StagingConfig::default();
            let staging = StagingConfig::new(
                self.staging_max_share.unwrap_or(defaults.max_share()),
                self.staging_cooldown_ms.map_or(defaults.cooldown(), ms),
            )
            .map_err(err)?;
            b = b.staging(staging);
        }
        b.build().map_err(err)
    }
}
