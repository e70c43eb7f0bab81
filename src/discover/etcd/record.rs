//! A backend's record in etcd: the versioned JSON schema, encoded and
//! decoded.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::backend::BackendId;
use crate::backend::BackendMeta;
use crate::endpoint::Origin;
use crate::error::InvalidConfig;
use crate::route::ModelId;

/// The schema version this crate writes and reads: the `version` field of
/// every record.
pub const SCHEMA_VERSION: u32 = 1;

/// Why a record could not be decoded (or encoded). A source that meets one
/// skips the record, logs it and counts it in
/// [`EtcdStats::invalid_records`](super::EtcdStats::invalid_records),
/// and the backend is out of the fleet until its record is valid again (as
/// a replica that starts then would see it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// Not JSON, or not the schema's shape (a field of the wrong type, a
    /// required field missing): serde_json's message.
    Malformed(String),
    /// A `version` this reader does not know (a newer writer's schema).
    UnsupportedVersion(u64),
    /// A field out of its range: `weight` (1 ..= 10 000), `model_slots`
    /// (1 ..= 16), an address (`http://` or `https://` host and port), a
    /// model ID.
    Invalid(InvalidConfig),
    /// The key under the prefix is not a backend ID (UTF-8, 1 to 1 024
    /// bytes, no whitespace or control character).
    InvalidKey,
    /// Encoding only: the metadata has no address, and a record must say
    /// where the backend is reached.
    NoAddress,
    /// The record's address (or metrics address), given here, is not in
    /// the source's allow-list ([`EtcdBuilder::allow`](super::EtcdBuilder::allow)):
    /// outside its ranges, or a host name where the list takes addresses.
    NotAllowed(String),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(message) => write!(f, "malformed backend record: {message}"),
            Self::UnsupportedVersion(v) => write!(
                f,
                "backend record of schema version {v}; this reader knows {SCHEMA_VERSION}"
            ),
            Self::Invalid(invalid) => write!(f, "invalid backend record: {invalid}"),
            Self::InvalidKey => f.write_str("the key under the prefix is not a backend ID"),
            Self::NoAddress => f.write_str("a backend record needs an address"),
            Self::NotAllowed(address) => write!(
                f,
                "the backend record's address {address} is outside the allowed address ranges"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// Schema version 1, as it is on the wire.
#[derive(Serialize, Deserialize)]
struct Wire {
    version: u32,
    address: String,
    #[serde(default = "default_weight")]
    weight: u32,
    #[serde(default = "default_model_slots")]
    model_slots: usize,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metrics_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpu_memory_bytes: Option<u64>,
}

fn default_weight() -> u32 {
    1
}

fn default_model_slots() -> usize {
    BackendMeta::DEFAULT_MODEL_SLOTS
}

/// Only the version, read first: a newer schema may change the rest.
#[derive(Deserialize)]
struct Version {
    version: u64,
}

/// The record of `meta`: a JSON object of schema version 1,
///
/// ```json
/// {"version":1,"address":"http://10.0.0.7:8000","weight":1,"model_slots":4,
///  "models":["llama-3-8b"],"metrics_address":"http://10.0.0.7:8002","gpu_memory_bytes":85899345920}
/// ```
///
/// `version` and `address` are required; `weight` (default 1),
/// `model_slots` (default 4), `models` (the resident models, default
/// none), `metrics_address` and `gpu_memory_bytes` (default unknown) are
/// not. Readers ignore fields they do not know. The backend's ID is not in
/// the value: it is the key's suffix after the prefix.
///
/// # Errors
///
/// [`RecordError::NoAddress`] when `meta` has no
/// [`address`](BackendMeta::address).
pub fn encode_record(meta: &BackendMeta) -> Result<String, RecordError> {
    let address = meta.address().ok_or(RecordError::NoAddress)?;
    let wire = Wire {
        version: SCHEMA_VERSION,
        address: address.to_string(),
        weight: meta.weight(),
        model_slots: meta.model_slots(),
        models: meta
            .resident_models()
            .iter()
            .map(|m| m.as_str().to_owned())
            .collect(),
        metrics_address: meta.metrics_address().map(Origin::to_string),
        gpu_memory_bytes: meta.gpu_memory_bytes(),
    };
    serde_json::to_string(&wire).map_err(|e| RecordError::Malformed(e.to_string()))
}

/// The metadata of backend `id` from its record's value (see
/// [`encode_record`] for the schema).
///
/// # Errors
///
/// [`RecordError::Malformed`] for a value that is not a JSON object of the
/// schema's shape, [`RecordError::UnsupportedVersion`] for a `version`
/// other than [`SCHEMA_VERSION`], [`RecordError::Invalid`] for a field
/// out of range.
pub fn decode_record(id: BackendId, value: &[u8]) -> Result<BackendMeta, RecordError> {
    let malformed = |e: serde_json::Error| RecordError::Malformed(e.to_string());
    let Version { version } = serde_json::from_slice(value).map_err(malformed)?;
    if version != u64::from(SCHEMA_VERSION) {
        return Err(RecordError::UnsupportedVersion(version));
    }
    let wire: Wire = serde_json::from_slice(value).map_err(malformed)?;
    let address = Origin::parse(&wire.address).map_err(RecordError::Invalid)?;
    let models = wire
        .models
        .iter()
        .map(|m| ModelId::new(m))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            RecordError::Invalid(InvalidConfig::new(
                "models",
                "model IDs of 1 to 256 bytes without whitespace or control characters",
            ))
        })?;
    let mut meta = BackendMeta::new(id)
        .with_address(address)
        .with_weight(wire.weight)
        .and_then(|m| m.with_model_slots(wire.model_slots))
        .map_err(RecordError::Invalid)?
        .with_resident_models(models);
    if let Some(metrics) = &wire.metrics_address {
        meta = meta.with_metrics_address(Origin::parse(metrics).map_err(RecordError::Invalid)?);
    }
    if let Some(bytes) = wire.gpu_memory_bytes {
        meta = meta.with_gpu_memory(bytes);
    }
    Ok(meta)
}

/// The backend ID a key names: its suffix after `prefix`.
pub(super) fn key_id(prefix: &[u8], key: &[u8]) -> Result<BackendId, RecordError> {
    let suffix = key.strip_prefix(prefix).ok_or(RecordError::InvalidKey)?;
    let suffix = std::str::from_utf8(suffix).map_err(|_| RecordError::InvalidKey)?;
    BackendId::new(suffix).map_err(|_| RecordError::InvalidKey)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> BackendId {
        BackendId::new(name).unwrap()
    }

    #[test]
    fn a_record_round_trips() {
        let meta = BackendMeta::new(id("gpu-0"))
            .with_address(Origin::parse("http://10.0.0.7:8000").unwrap())
            .with_metrics_address(Origin::parse("http://10.0.0.7:8002").unwrap())
            .with_gpu_memory(80 << 30)
            .with_weight(3)
            .unwrap()
            .with_model_slots(8)
            .unwrap()
            .with_resident_models([ModelId::new("llama-3-8b").unwrap()]);
        let json = encode_record(&meta).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"address":"http://10.0.0.7:8000","weight":3,"model_slots":8,"models":["llama-3-8b"],"metrics_address":"http://10.0.0.7:8002","gpu_memory_bytes":85899345920}"#
        );
        assert_eq!(decode_record(id("gpu-0"), json.as_bytes()).unwrap(), meta);
    }

    #[test]
    fn optional_fields_default_and_unknown_ones_are_ignored() {
        let value = br#"{"version":1,"address":"http://h:1","zone":"eu-1"}"#;
        let meta = decode_record(id("b"), value).unwrap();
        assert_eq!(meta.weight(), 1);
        assert_eq!(meta.model_slots(), BackendMeta::DEFAULT_MODEL_SLOTS);
        assert!(meta.resident_models().is_empty());
        assert_eq!(meta.address().unwrap().to_string(), "http://h:1");
    }

    #[test]
    fn bad_values_are_typed_errors() {
        type Check = fn(&RecordError) -> bool;
        let cases: [(&[u8], Check); 9] = [
            (b"", |e| matches!(e, RecordError::Malformed(_))),
            (b"[1]", |e| matches!(e, RecordError::Malformed(_))),
            (br#"{"address":"http://h:1"}"#, |e| {
                matches!(e, RecordError::Malformed(_))
            }),
            (br#"{"version":2,"addr":"x"}"#, |e| {
                *e == RecordError::UnsupportedVersion(2)
            }),
            (br#"{"version":1}"#, |e| {
                matches!(e, RecordError::Malformed(_))
            }),
            (br#"{"version":1,"address":"ftp://h"}"#, |e| {
                matches!(e, RecordError::Invalid(_))
            }),
            (
                br#"{"version":1,"address":"http://h:1","weight":0}"#,
                |e| matches!(e, RecordError::Invalid(i) if i.field == "weight"),
            ),
            (
                br#"{"version":1,"address":"http://h:1","model_slots":17}"#,
                |e| matches!(e, RecordError::Invalid(i) if i.field == "model_slots"),
            ),
            (
                br#"{"version":1,"address":"http://h:1","models":["a b"]}"#,
                |e| matches!(e, RecordError::Invalid(i) if i.field == "models"),
            ),
        ];
        for (value, expected) in cases {
            let error = decode_record(id("b"), value).unwrap_err();
            assert!(
                expected(&error),
                "{}: {error:?}",
                String::from_utf8_lossy(value)
            );
            assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn a_record_without_an_address_is_not_encoded() {
        let meta = BackendMeta::new(id("b"));
        assert_eq!(encode_record(&meta), Err(RecordError::NoAddress));
    }

    #[test]
    fn a_key_names_its_backend_after_the_prefix() {
        assert_eq!(key_id(b"/p/", b"/p/gpu-0").unwrap(), id("gpu-0"));
        for key in [&b"/q/gpu-0"[..], b"/p/", b"/p/a b", b"/p/\xff"] {
            assert_eq!(key_id(b"/p/", key), Err(RecordError::InvalidKey));
        }
    }
}
