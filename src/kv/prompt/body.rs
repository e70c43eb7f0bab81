//! Reading a JSON request body as template values.

use minijinja::value::ValueKind;
use minijinja::Value;

use super::error::PromptError;

/// A body that is not the request it should be.
pub(super) fn bad(why: impl Into<String>) -> PromptError {
    PromptError::NotARequest(why.into())
}

/// A JSON body as template values, its objects' keys in their order.
pub(super) fn parse(body: &[u8]) -> Result<Value, PromptError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if value.kind() != ValueKind::Map {
        return Err(bad("the body is not a JSON object"));
    }
    Ok(value)
}

/// A map's field; undefined when absent or when `map` is no map.
pub(super) fn field(map: &Value, key: &str) -> Value {
    map.get_item(&Value::from(key)).unwrap_or(Value::UNDEFINED)
}

/// Neither absent nor null.
pub(super) fn present(v: &Value) -> bool {
    !v.is_undefined() && !v.is_none()
}

/// A boolean field; `None` when absent or null.
pub(super) fn flag(body: &Value, key: &str) -> Result<Option<bool>, PromptError> {
    let v = field(body, key);
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => Ok(None),
        ValueKind::Bool => Ok(Some(v.is_true())),
        _ => Err(bad(format!("`{key}` is not a boolean"))),
    }
}
