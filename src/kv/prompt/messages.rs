//! A chat request's `messages` turned into the conversation the template
//! receives, as vLLM 0.32 does it (`vllm.renderers.chat_utils.
//! parse_chat_messages`, then `vllm.renderers.hf.safe_apply_chat_template`
//! for the `developer` role):
//!
//! * `content` as a string is one text part; `null` or absent is no part;
//! * the text parts (`text`, `input_text`, `output_text`: their `text`;
//!   `refusal`: its `refusal`; `thinking`: its `thinking`; a bare string)
//!   are joined with `"\n"` into one string for a template that reads
//!   `content` as a string, or kept as a list of `{type: "text", text}`
//!   for a template that loops over it (the OpenAI format); a part with a
//!   `null` text is skipped;
//! * a part that is not text (an image, audio) is unsupported: the
//!   router cannot know the placeholder tokens a multimodal processor
//!   puts in its place;
//! * a system message's text part starting with
//!   `x-anthropic-billing-header` loses that first line;
//! * an assistant's `tool_calls` are kept, each function's `arguments`
//!   decoded from its JSON string into a map (`{}` when empty, not JSON
//!   or not a map), an empty list dropped; its `reasoning` is passed as
//!   `reasoning` and `reasoning_content`;
//! * a tool message keeps its `tool_call_id`, and in the OpenAI format its
//!   text parts are joined into one string;
//! * `name` and `task` (strings) are kept; a developer message keeps its
//!   `tools`;
//! * `developer` messages become `system` ones, all merged into one first
//!   message (`"\n\n"` between them), when the template does not name the
//!   `developer` role.

use minijinja::value::ValueKind;
use minijinja::Value;

use super::body::{bad, field, present};
use super::error::PromptError;
use super::template::ContentFormat;

const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// The conversation of `messages` (a JSON list), for a template reading
/// `format` that knows the developer role or not.
pub(super) fn conversation(
    messages: &Value,
    format: ContentFormat,
    knows_developer: bool,
) -> Result<Vec<Value>, PromptError> {
    if messages.kind() != ValueKind::Seq {
        return Err(bad("`messages` is not a list"));
    }
    let mut out = Vec::new();
    for message in messages.try_iter().map_err(|e| bad(e.to_string()))? {
        out.push(one(&message, format)?);
    }
    if out.is_empty() {
        return Err(bad("`messages` is empty"));
    }
    let has_developer = out
        .iter()
        .any(|m| field(m, "role").as_str() == Some("developer"));
    if has_developer && !knows_developer {
        out = developer_to_system(out);
    }
    Ok(out)
}

fn one(message: &Value, format: ContentFormat) -> Result<Value, PromptError> {
    let role = field(message, "role");
    let role = role
        .as_str()
        .ok_or_else(|| bad("a message has no `role` string"))?;
    let content = field(message, "content");
    let parts: Vec<Value> = match content.kind() {
        ValueKind::Undefined | ValueKind::None => Vec::new(),
        ValueKind::String => vec![content.clone()],
        ValueKind::Seq => content
            .try_iter()
            .map_err(|e| bad(e.to_string()))?
            .collect(),
        _ => return Err(bad("a message's `content` is neither a string nor a list")),
    };
    let mut texts = Vec::with_capacity(parts.len());
    for part in &parts {
        if let Some(text) = text_of(part)? {
            texts.push(text);
        }
    }
    if role == "system" {
        texts = texts
            .into_iter()
            .filter_map(|t| match t.strip_prefix(BILLING_HEADER) {
                Some(rest) => rest
                    .split_once('\n')
                    .map(|(_, r)| r.to_owned())
                    .filter(|r| !r.is_empty()),
                None => Some(t),
            })
            .collect();
    }
    let joined = || Value::from(texts.join("\n"));
    let content = match format {
        ContentFormat::String => joined(),
        ContentFormat::OpenAi if role == "tool" => joined(),
        ContentFormat::OpenAi => texts
            .iter()
            .map(|t| {
                Value::from_iter([
                    ("type", Value::from("text")),
                    ("text", Value::from(t.as_str())),
                ])
            })
            .collect(),
    };
    let mut fields: Vec<(&str, Value)> = vec![("role", Value::from(role)), ("content", content)];
    match role {
        "assistant" => {
            let calls = field(message, "tool_calls");
            if present(&calls) {
                let calls = tool_calls(&calls)?;
                if calls.len().unwrap_or(0) > 0 {
                    fields.push(("tool_calls", calls));
                }
            }
            let reasoning = field(message, "reasoning");
            if present(&reasoning) {
                fields.push(("reasoning", reasoning.clone()));
                fields.push(("reasoning_content", reasoning));
            }
        }
        "tool" => {
            let id = field(message, "tool_call_id");
            if !id.is_undefined() {
                fields.push(("tool_call_id", id));
            }
        }
        _ => {}
    }
    for key in ["name", "task"] {
        let v = field(message, key);
        if v.kind() == ValueKind::String {
            fields.push((key, v));
        }
    }
    if role == "developer" {
        let tools = field(message, "tools");
        fields.push((
            "tools",
            if tools.is_undefined() {
                Value::from(())
            } else {
                tools
            },
        ));
    }
    Ok(Value::from_iter(fields))
}

/// A content part's text: `None` for a text part without one.
fn text_of(part: &Value) -> Result<Option<String>, PromptError> {
    if let Some(s) = part.as_str() {
        return Ok(Some(s.to_owned()));
    }
    let kind = field(part, "type");
    let key = match kind.as_str() {
        Some("text" | "input_text" | "output_text") => "text",
        Some("refusal") => "refusal",
        Some("thinking") => "thinking",
        Some(other) => {
            return Err(PromptError::Unsupported(format!(
                "a `{other}` content part"
            )))
        }
        None => {
            return Err(PromptError::Unsupported(
                "a content part without a `type`".into(),
            ))
        }
    };
    let text = field(part, key);
    match text.as_str() {
        Some(s) => Ok(Some(s.to_owned())),
        None if !present(&text) => Ok(None),
        None => Err(bad(format!("a content part's `{key}` is not a string"))),
    }
}

/// An assistant's tool calls, each function's `arguments` a map.
fn tool_calls(calls: &Value) -> Result<Value, PromptError> {
    if calls.kind() != ValueKind::Seq {
        return Err(bad("`tool_calls` is not a list"));
    }
    let mut out = Vec::new();
    for call in calls.try_iter().map_err(|e| bad(e.to_string()))? {
        let function = field(&call, "function");
        if call.kind() != ValueKind::Map || function.kind() != ValueKind::Map {
            return Err(bad("a tool call without a `function` object"));
        }
        let args = field(&function, "arguments");
        let args = match args.kind() {
            ValueKind::Map => args,
            ValueKind::String if !args.as_str().unwrap_or_default().is_empty() => {
                serde_json::from_str::<Value>(args.as_str().unwrap_or_default())
                    .ok()
                    .filter(|v| v.kind() == ValueKind::Map)
                    .unwrap_or_else(empty_map)
            }
            _ => empty_map(),
        };
        let function = replace(&function, "arguments", args)?;
        out.push(replace(&call, "function", function)?);
    }
    Ok(Value::from(out))
}

fn empty_map() -> Value {
    Value::from_iter(std::iter::empty::<(Value, Value)>())
}

/// `map` with `key` set to `value`, in its place (last if new).
fn replace(map: &Value, key: &str, value: Value) -> Result<Value, PromptError> {
    let mut fields: Vec<(Value, Value)> = Vec::new();
    let mut placed = false;
    for k in map.try_iter().map_err(|e| bad(e.to_string()))? {
        if k.as_str() == Some(key) {
            fields.push((k, value.clone()));
            placed = true;
        } else {
            let v = map.get_item(&k).unwrap_or(Value::UNDEFINED);
            fields.push((k, v));
        }
    }
    if !placed {
        fields.push((Value::from(key), value));
    }
    Ok(Value::from_iter(fields))
}

/// vLLM's `_convert_developer_to_system` then `_consolidate_system_messages`.
fn developer_to_system(conversation: Vec<Value>) -> Vec<Value> {
    let converted: Vec<Value> = conversation
        .into_iter()
        .map(|message| {
            if field(&message, "role").as_str() != Some("developer") {
                return message;
            }
            let mut fields: Vec<(Value, Value)> = Vec::new();
            for k in message.try_iter().into_iter().flatten() {
                match k.as_str() {
                    Some("role") => fields.push((k, Value::from("system"))),
                    Some("tools") => {}
                    _ => {
                        let v = message.get_item(&k).unwrap_or(Value::UNDEFINED);
                        fields.push((k, v));
                    }
                }
            }
            Value::from_iter(fields)
        })
        .collect();
    let mut system: Vec<String> = Vec::new();
    let mut others = Vec::new();
    let mut merge = false;
    for (i, message) in converted.iter().enumerate() {
        if field(message, "role").as_str() != Some("system") {
            others.push(message.clone());
            continue;
        }
        if i > 0 || !system.is_empty() {
            merge = true;
        }
        let content = field(message, "content");
        let text = match content.kind() {
            ValueKind::Seq => content
                .try_iter()
                .map(|parts| {
                    parts
                        .filter_map(|p| {
                            p.as_str()
                                .map(str::to_owned)
                                .or_else(|| field(&p, "text").as_str().map(str::to_owned))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            _ => content.as_str().unwrap_or_default().to_owned(),
        };
        if !text.is_empty() {
            system.push(text);
        }
    }
    if !merge {
        return converted;
    }
    let first = Value::from_iter([
        ("role", Value::from("system")),
        ("content", Value::from(system.join("\n\n"))),
    ]);
    std::iter::once(first).chain(others).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(messages: &str, format: ContentFormat, knows_developer: bool) -> String {
        let messages: Value = serde_json::from_str(messages).unwrap();
        let out = conversation(&messages, format, knows_developer).unwrap();
        Value::from(out).to_string()
    }

    #[test]
    fn text_parts_are_joined_or_kept_as_the_template_reads_them() {
        let m = r#"[{"role": "user", "content": ["a", {"type": "text", "text": "b"},
                    {"type": "text", "text": null}, {"type": "input_text", "text": "c"}]}]"#;
        assert_eq!(
            conv(m, ContentFormat::String, true),
            r#"[{"role": "user", "content": "a\nb\nc"}]"#
        );
        assert_eq!(
            conv(m, ContentFormat::OpenAi, true),
            r#"[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]"#
        );
        let image =
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#;
        let image: Value = serde_json::from_str(image).unwrap();
        assert!(matches!(
            conversation(&image, ContentFormat::String, true),
            Err(PromptError::Unsupported(_))
        ));
    }

    #[test]
    fn tool_call_arguments_become_maps_in_their_order() {
        let m = r#"[{"role": "assistant", "content": null, "reasoning": "r", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}},
            {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]}]"#;
        assert_eq!(
            conv(m, ContentFormat::String, true),
            r#"[{"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}}, {"id": "2", "type": "function", "function": {"name": "g", "arguments": {}}}], "reasoning": "r", "reasoning_content": "r"}]"#
        );
    }

    #[test]
    fn the_billing_header_line_goes_and_developers_merge_into_the_system_message() {
        let m = r#"[{"role": "system", "content": "x-anthropic-billing-header: 1\nkept"},
                    {"role": "user", "content": "u"},
                    {"role": "developer", "content": "d", "tools": []}]"#;
        assert_eq!(
            conv(m, ContentFormat::String, false),
            r#"[{"role": "system", "content": "kept\n\nd"}, {"role": "user", "content": "u"}]"#
        );
        assert_eq!(
            conv(m, ContentFormat::String, true),
            r#"[{"role": "system", "content": "kept"}, {"role": "user", "content": "u"}, {"role": "developer", "content": "d", "tools": []}]"#
        );
    }
}
