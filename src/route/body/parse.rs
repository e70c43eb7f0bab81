//! The model ID from a KServe v2 inference path or an OpenAI-style JSON
//! body's top-level `model` field.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::prompt::{Capture, Field as PromptField, Prompt};
use crate::route::error::{InvalidReason, InvalidRoute};
use crate::route::model::ModelId;

/// The model name segment of a KServe v2 inference path,
/// `/v2/models/{name}/infer` or `/v2/models/{name}/versions/{v}/infer`, as
/// sent (percent-encoded); `None` if `path` is not an inference path of the
/// `/v2/models/…/infer` form (the body names the model), and an
/// [`InvalidRoute`] from `"path"` if it is one with more segments or an
/// empty version.
pub(super) fn kserve_v2_model(path: &str) -> Option<Result<&str, InvalidRoute>> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let mut segments = rest.split('/');
    let name = segments.next().unwrap_or_default();
    let well_formed = match (segments.next(), segments.next(), segments.next()) {
        (None, _, _) => true,
        (Some("versions"), Some(version), None) => !version.is_empty(),
        _ => false,
    };
    Some(match well_formed {
        true => Ok(name),
        false => Err(InvalidRoute::new("path", InvalidReason::Unrecognized)),
    })
}

/// A path segment as the client meant it: `%2F` is `/`, `%E6%A8%A1` is
/// `模`, as in a JSON body (and as a server decodes it). A `%` not followed
/// by two hex digits is [`InvalidReason::BadEscape`] (passing it on as
/// written would make `%25` and `%` the same model); bytes that are not
/// UTF-8 once decoded are [`InvalidReason::NotText`].
pub(super) fn decode_segment(segment: &str) -> Result<std::borrow::Cow<'_, str>, InvalidRoute> {
    let bytes = segment.as_bytes();
    let hex = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_hexdigit);
    let bad_escape = (0..bytes.len()).any(|i| bytes[i] == b'%' && !(hex(i + 1) && hex(i + 2)));
    if bad_escape {
        return Err(InvalidRoute::new("path", InvalidReason::BadEscape));
    }
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| InvalidRoute::new("path", InvalidReason::NotText))
}

/// The model ID in the top-level `"model"` string of the JSON object
/// `bytes`; other fields are skipped, not stored.
#[cfg(test)]
pub(super) fn model_from_json(bytes: &[u8]) -> Result<ModelId, InvalidRoute> {
    read_json(bytes, None)
}

/// As [`model_from_json`], capturing the prompt's first bytes into
/// `prompt` when given (see [`super::prompt`]).
pub(super) fn read_json(
    bytes: &[u8],
    prompt: Option<&mut Prompt>,
) -> Result<ModelId, InvalidRoute> {
    let invalid = |reason| InvalidRoute::new("body", reason);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let field = de
        .deserialize_map(TopLevel(prompt))
        .and_then(|field| de.end().map(|()| field))
        .map_err(|e| invalid(json_reason(&e, bytes)))?;
    match field {
        Field::Absent | Field::Null => Err(invalid(InvalidReason::Missing)),
        Field::NotString => Err(invalid(InvalidReason::Unrecognized)),
        Field::Duplicate => Err(invalid(InvalidReason::Duplicate)),
        Field::Str(name) => ModelId::from_source("body", &name),
    }
}

/// Why `bytes` is not a JSON object, from `serde_json`'s category of the
/// error: cut short, a syntax error (where), or JSON of another shape. A
/// body that does not open with `{` stops the object's reader at its first
/// byte, before the rest is read: it is read whole once more (skimmed, on
/// this error path only), so that a cut or malformed array (`[1, 2`) is
/// named as such and only valid JSON of another shape (`[1, 2]`) is "not
/// a JSON object".
fn json_reason(error: &serde_json::Error, bytes: &[u8]) -> InvalidReason {
    use serde_json::error::Category;
    match error.classify() {
        Category::Eof => InvalidReason::TruncatedJson,
        Category::Syntax => InvalidReason::MalformedJson {
            line: error.line(),
            column: error.column(),
        },
        _ => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let whole = de::Deserialize::deserialize(&mut de).map(|IgnoredAny| ());
            match whole.and_then(|()| de.end()) {
                Err(e) if matches!(e.classify(), Category::Eof | Category::Syntax) => {
                    json_reason(&e, bytes)
                }
                _ => InvalidReason::NotJson,
            }
        }
    }
}

/// What the top-level `"model"` field held.
enum Field<'de> {
    Absent,
    Null,
    NotString,
    Duplicate,
    Str(Cow<'de, str>),
}

/// Visits the top-level object: keeps `"model"` and, with a [`Prompt`],
/// the prompt's first bytes; skips the rest.
struct TopLevel<'a>(Option<&'a mut Prompt>);

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut field = Field::Absent;
        let mut captured = false;
        while let Some(key) = map.next_key::<Key>()? {
            let prompt = match key {
                Key::Model => None,
                Key::Messages => Some(PromptField::Messages),
                Key::Prompt => Some(PromptField::Prompt),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if let Some(which) = prompt {
                match self.0.as_deref_mut() {
                    Some(p) if !captured => map.next_value_seed(Capture(p, which))?,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                captured = true;
                continue;
            }
            let value = map.next_value::<Value<'de>>()?.0;
            field = match field {
                Field::Absent => value,
                _ => Field::Duplicate,
            };
        }
        Ok(field)
    }
}

/// A top-level key: `"model"`, one that may hold the prompt, or another.
enum Key {
    Model,
    Messages,
    Prompt,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "model" => Key::Model,
                    "messages" => Key::Messages,
                    "prompt" => Key::Prompt,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The value of `"model"`: a string, borrowed when it has no escapes;
/// anything else is skipped.
struct Value<'de>(Field<'de>);

impl<'de> de::Deserialize<'de> for Value<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor).map(Value)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Field::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Field::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Field::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Field::NotString)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Field::NotString)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Field::NotString)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Field::NotString)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Field::NotString)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Field::NotString)
    }
}
