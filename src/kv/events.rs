//! vLLM's KV-cache event batches, decoded (pure logic, no IO).
//!
//! A batch is msgspec's array-like `EventBatch`: `[ts, [event, ...]]`,
//! with a third element, the data-parallel rank, that vLLM's publisher
//! always sets. Each event is a msgspec tagged struct, a msgpack map whose
//! `"type"` names it (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`)
//! and whose other keys are its fields, those equal to their default left
//! out. Events of other types are skipped (a newer vLLM may add some);
//! fields this crate does not use are ignored. A payload of another shape
//! is a [`KvDecodeError`], never a panic.

use std::fmt;

use rmpv::Value;
use xxhash_rust::xxh3::xxh3_64;

/// vLLM's hash of a block, reduced to 64 bits: the integer itself when
/// vLLM sends integers (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, its
/// default), xxh3-64 of the bytes when it sends its 32-byte SHA-256.
///
/// Only a key to find the crate's own hash of a block vLLM names again
/// (a child's parent, a removal): the index never matches on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ExternalHash(pub(crate) u64);

/// One KV-cache event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Blocks newly cached, one hash a block, their tokens concatenated
    /// (`block_size` each), chained from `parent` (none: the sequence's
    /// first block).
    Stored {
        hashes: Vec<ExternalHash>,
        parent: Option<ExternalHash>,
        tokens: Vec<u32>,
        block_size: u32,
        lora_name: Option<String>,
    },
    /// Blocks evicted.
    Removed { hashes: Vec<ExternalHash> },
    /// The whole cache dropped.
    Cleared,
}

/// One published batch's events, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) events: Vec<Event>,
    /// Events of types this crate does not know, skipped.
    pub(crate) unknown: usize,
}

/// A batch that is not vLLM's `EventBatch` msgpack: the payload is not
/// msgpack, or a known event lacks a field or holds one of another type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KvDecodeError {
    what: &'static str,
}

impl KvDecodeError {
    fn new(what: &'static str) -> Self {
        Self { what }
    }
}

#[cfg(test)]
impl KvDecodeError {
    pub(crate) fn for_tests() -> Self {
        Self::new("a test's")
    }
}

impl fmt::Display for KvDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed KV-cache event batch: {}", self.what)
    }
}

impl std::error::Error for KvDecodeError {}

/// Decodes one batch's payload (the message's third frame).
pub(crate) fn decode_batch(payload: &[u8]) -> Result<Batch, KvDecodeError> {
    let mut reader = payload;
    let value = rmpv::decode::read_value_with_max_depth(&mut reader, 16)
        .map_err(|_| KvDecodeError::new("not msgpack"))?;
    if !reader.is_empty() {
        return Err(KvDecodeError::new("bytes after the batch"));
    }
    let Value::Array(batch) = value else {
        return Err(KvDecodeError::new("the batch is not an array"));
    };
    let Some(Value::Array(events)) = batch.get(1) else {
        return Err(KvDecodeError::new("the batch has no list of events"));
    };
    let mut out = Batch::default();
    for event in events {
        match decode_event(event)? {
            Some(event) => out.events.push(event),
            None => out.unknown += 1,
        }
    }
    Ok(out)
}

/// One event; `None` for a type this crate does not know.
fn decode_event(event: &Value) -> Result<Option<Event>, KvDecodeError> {
    let Value::Map(fields) = event else {
        return Err(KvDecodeError::new("an event is not a map"));
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key.as_str() == Some(name))
            .map(|(_, value)| value)
    };
    let Some(kind) = field("type").and_then(Value::as_str) else {
        return Err(KvDecodeError::new("an event has no type"));
    };
    Ok(Some(match kind {
        "BlockStored" => {
            let hashes = hashes(field("block_hashes"))?;
            let parent = match field("parent_block_hash") {
                None | Some(Value::Nil) => None,
                Some(value) => Some(hash(value)?),
            };
            let tokens = match field("token_ids") {
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or(KvDecodeError::new("a token ID is not a u32"))?,
                _ => return Err(KvDecodeError::new("BlockStored has no token_ids")),
            };
            let block_size = field("block_size")
                .and_then(Value::as_u64)
                .and_then(|size| u32::try_from(size).ok())
                .ok_or(KvDecodeError::new("BlockStored has no block_size"))?;
            let lora_name = match field("lora_name") {
                None | Some(Value::Nil) => None,
                Some(Value::String(name)) => Some(
                    name.as_str()
                        .ok_or(KvDecodeError::new("lora_name is not UTF-8"))?
                        .to_owned(),
                ),
                Some(_) => return Err(KvDecodeError::new("lora_name is not a string")),
            };
            Event::Stored {
                hashes,
                parent,
                tokens,
                block_size,
                lora_name,
            }
        }
        "BlockRemoved" => Event::Removed {
            hashes: hashes(field("block_hashes"))?,
        },
        "AllBlocksCleared" => Event::Cleared,
        _ => return Ok(None),
    }))
}

fn hashes(value: Option<&Value>) -> Result<Vec<ExternalHash>, KvDecodeError> {
    match value {
        Some(Value::Array(hashes)) => hashes.iter().map(hash).collect(),
        _ => Err(KvDecodeError::new("an event has no block_hashes")),
    }
}

fn hash(value: &Value) -> Result<ExternalHash, KvDecodeError> {
    match value {
        Value::Binary(bytes) => Ok(ExternalHash(xxh3_64(bytes))),
        Value::Integer(int) => int
            .as_u64()
            .or_else(|| int.as_i64().map(|i| i as u64))
            .map(ExternalHash)
            .ok_or(KvDecodeError::new("a block hash is out of range")),
        _ => Err(KvDecodeError::new("a block hash is neither bytes nor int")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(value: &Value) -> Vec<u8> {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, value).unwrap();
        bytes
    }

    fn event(kind: &str, fields: Vec<(&str, Value)>) -> Value {
        let mut map = vec![(Value::from("type"), Value::from(kind))];
        map.extend(fields.into_iter().map(|(k, v)| (Value::from(k), v)));
        Value::Map(map)
    }

    fn batch(events: Vec<Value>) -> Vec<u8> {
        encode(&Value::Array(vec![
            Value::F64(1.5),
            Value::Array(events),
            Value::from(0),
        ]))
    }

    #[test]
    fn the_three_known_events_decode_and_others_are_skipped() {
        let sha = vec![7u8; 32];
        let payload = batch(vec![
            event(
                "BlockStored",
                vec![
                    (
                        "block_hashes",
                        Value::Array(vec![Value::from(11), Value::Binary(sha.clone())]),
                    ),
                    ("parent_block_hash", Value::Nil),
                    ("token_ids", Value::Array((0..4).map(Value::from).collect())),
                    ("block_size", Value::from(2)),
                    ("lora_id", Value::Nil),
                    ("medium", Value::from("GPU")),
                    ("lora_name", Value::from("sql")),
                    ("group_idx", Value::from(0)),
                ],
            ),
            event("SomethingNew", vec![("x", Value::from(1))]),
            event(
                "BlockRemoved",
                vec![("block_hashes", Value::Array(vec![Value::from(-1)]))],
            ),
            event("AllBlocksCleared", vec![]),
        ]);
        let decoded = decode_batch(&payload).unwrap();
        assert_eq!(decoded.unknown, 1);
        assert_eq!(
            decoded.events,
            vec![
                Event::Stored {
                    hashes: vec![ExternalHash(11), ExternalHash(xxh3_64(&sha))],
                    parent: None,
                    tokens: vec![0, 1, 2, 3],
                    block_size: 2,
                    lora_name: Some("sql".into()),
                },
                Event::Removed {
                    hashes: vec![ExternalHash(u64::MAX)]
                },
                Event::Cleared,
            ]
        );
        // The rank omitted (msgspec's omit_defaults) decodes as well.
        let two = encode(&Value::Array(vec![Value::F64(0.0), Value::Array(vec![])]));
        assert_eq!(decode_batch(&two).unwrap(), Batch::default());
    }

    /// A batch vLLM 0.32.0's own encoder wrote (`msgspec.msgpack.Encoder`
    /// over a `KVEventBatch`): a `BlockStored` of a SHA-256 block and an
    /// int block, a `BlockRemoved`, an `AllBlocksCleared`, rank 0.
    const FROM_VLLM: &str = "93cb3ff40000000000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392c4200101010101010101010101010101010101010101010101010101010101010101cfffffffffffffffffb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6502a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f6861736865739105a66d656469756da347505581a474797065b0416c6c426c6f636b73436c656172656400";

    #[test]
    fn a_batch_from_vllm_s_own_encoder_decodes() {
        let bytes: Vec<u8> = (0..FROM_VLLM.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&FROM_VLLM[i..i + 2], 16).unwrap())
            .collect();
        let decoded = decode_batch(&bytes).unwrap();
        assert_eq!(decoded.unknown, 0);
        assert_eq!(
            decoded.events,
            vec![
                Event::Stored {
                    hashes: vec![ExternalHash(xxh3_64(&[1; 32])), ExternalHash(u64::MAX)],
                    parent: None,
                    tokens: vec![1, 2, 3, 4],
                    block_size: 2,
                    lora_name: None,
                },
                Event::Removed {
                    hashes: vec![ExternalHash(5)]
                },
                Event::Cleared,
            ]
        );
    }

    #[test]
    fn malformed_payloads_are_errors() {
        let stored_without_tokens = batch(vec![event(
            "BlockStored",
            vec![
                ("block_hashes", Value::Array(vec![Value::from(1)])),
                ("block_size", Value::from(2)),
            ],
        )]);
        let negative_token = batch(vec![event(
            "BlockStored",
            vec![
                ("block_hashes", Value::Array(vec![Value::from(1)])),
                ("token_ids", Value::Array(vec![Value::from(-3)])),
                ("block_size", Value::from(1)),
            ],
        )]);
        for payload in [
            vec![],
            vec![0xc1],
            encode(&Value::from(3)),
            encode(&Value::Array(vec![Value::F64(0.0)])),
            batch(vec![Value::from(1)]),
            batch(vec![Value::Map(vec![])]),
            stored_without_tokens,
            negative_token,
            batch(vec![event(
                "BlockRemoved",
                vec![("block_hashes", Value::from("x"))],
            )]),
            [batch(vec![]), vec![0]].concat(),
        ] {
            assert!(decode_batch(&payload).is_err(), "{payload:?}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let good = batch(vec![event("AllBlocksCleared", vec![])]);
        for len in 0..2000 {
            let mut bytes = good.clone();
            bytes.truncate(len % (good.len() + 1));
            for _ in 0..(len % 7) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                bytes.push(seed as u8);
            }
            let _ = decode_batch(&bytes);
        }
    }
}
