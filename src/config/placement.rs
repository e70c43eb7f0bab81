//! The `[placement]` table.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{invalid, ms};
use crate::placement::{PlacementConfig, WhenCold};

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlacementFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) load_timeout_ms: Option<u64>,
    /// `"wait"` or `"prefer_warm"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) when_cold: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) repository_interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) evict: Option<bool>,
}

impl PlacementFile {
    pub(super) fn build(self) -> Result<PlacementConfig, ConfigError> {
        let mut b = PlacementConfig::builder();
        if let Some(d) = self.load_timeout_ms {
            b = b.load_timeout(ms(d));
        }
        match self.when_cold.as_deref() {
            None => {}
            Some("wait") => b = b.when_cold(WhenCold::Wait),
            Some("prefer_warm") => b = b.when_cold(WhenCold::PreferWarm),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "placement.when_cold".into(),
                    expected: "\"wait\" or \"prefer_warm\"",
                })
            }
        }
        if let Some(d) = self.repository_interval_ms {
            b = b.repository_interval(ms(d));
        }
        if let Some(on) = self.evict {
            b = b.evict(on);
        }
        b.build().map_err(|e| invalid("placement", e))
    }
}
