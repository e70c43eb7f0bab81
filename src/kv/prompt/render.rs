//! A chat request rendered with the chat template, as vLLM asks
//! transformers to (`tokenizer.apply_chat_template(conversation, tools=…,
//! tokenize=False, add_generation_prompt=…, continue_final_message=…,
//! **chat_template_kwargs)`).

use minijinja::value::ValueKind;
use minijinja::{Environment, Value};

use super::body::{bad, field, flag, present};
use super::error::PromptError;
use super::messages;
use super::template::{self, ContentFormat};

/// The tag transformers appends to the message to continue, to find
/// where the template put its end.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// A chat template, parsed.
pub(super) struct Chat {
    env: Environment<'static>,
    format: ContentFormat,
    knows_developer: bool,
    reads_content: bool,
}

impl Chat {
    pub(super) fn new(source: &str) -> Result<Self, minijinja::Error> {
        Ok(Self {
            env: template::environment(source)?,
            format: template::content_format(source),
            knows_developer: template::knows_developer(source),
            reads_content: source.contains("content"),
        })
    }
}

/// The text vLLM renders from a chat request `body` with the folder's
/// templates and special tokens.
pub(super) fn render(
    templates: (Option<&Chat>, Option<&Chat>),
    special: &[(&'static str, String)],
    body: &Value,
) -> Result<String, PromptError> {
    let tools = tools(&field(body, "tools"))?;
    // A template the request brings is code from the client: vLLM
    // refuses it unless started with `--trust-request-chat-template`, and
    // rendering it here would run it (unbounded loops, output) before the
    // server refuses. Not tokenized: the request is routed without blocks.
    let own = field(body, "chat_template");
    if !(own.is_undefined() || own.is_none()) {
        return Err(PromptError::Unsupported(
            "a request's own `chat_template` (vLLM refuses it without --trust-request-chat-template)"
                .into(),
        ));
    }
    let chat = match (&tools, templates.1, templates.0) {
        (Some(_), Some(tool_chat), _) => tool_chat,
        (_, _, Some(chat)) => chat,
        _ => return Err(PromptError::NoTemplate),
    };
    let mut conversation =
        messages::conversation(&field(body, "messages"), chat.format, chat.knows_developer)?;

    // The template's variables, as transformers passes them: the
    // special tokens, overridden by the request's kwargs (vLLM drops
    // those set to null or "auto"), overridden by the request's own
    // fields.
    let mut vars: Vec<(String, Value)> = special
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(v.as_str())))
        .collect();
    let set = |vars: &mut Vec<(String, Value)>, key: &str, value: Value| match vars
        .iter_mut()
        .find(|(k, _)| k == key)
    {
        Some(slot) => slot.1 = value,
        None => vars.push((key.to_owned(), value)),
    };
    let kwargs = field(body, "chat_template_kwargs");
    if kwargs.kind() == ValueKind::Map {
        for key in kwargs.try_iter().map_err(|e| bad(e.to_string()))? {
            let value = kwargs.get_item(&key).unwrap_or(Value::UNDEFINED);
            let key = key.as_str().unwrap_or_default().to_owned();
            if key == "chat_template" || key == "tokenize" {
                return Err(bad(format!("`chat_template_kwargs` may not set `{key}`")));
            }
            if present(&value) && value.as_str() != Some("auto") {
                set(&mut vars, &key, value);
            }
        }
    } else if present(&kwargs) {
        return Err(bad("`chat_template_kwargs` is not an object"));
    }
    let user_thinking = vars.iter().any(|(k, _)| k == "enable_thinking");
    let add_generation_prompt = flag(body, "add_generation_prompt")?.unwrap_or(true);
    let continue_final = flag(body, "continue_final_message")?.unwrap_or(false);
    set(
        &mut vars,
        "add_generation_prompt",
        Value::from(add_generation_prompt),
    );
    let effort = field(body, "reasoning_effort");
    if present(&effort) && effort.as_str() != Some("auto") {
        if !user_thinking {
            set(
                &mut vars,
                "enable_thinking",
                Value::from(effort.as_str() != Some("none")),
            );
        }
        set(&mut vars, "reasoning_effort", effort);
    }
    let documents = field(body, "documents");
    if present(&documents) {
        set(&mut vars, "documents", documents);
    } else if !vars.iter().any(|(k, _)| k == "documents") {
        set(&mut vars, "documents", Value::from(()));
    }
    if !vars.iter().any(|(k, _)| k == "tools") {
        set(&mut vars, "tools", tools.unwrap_or(Value::from(())));
    }
    // transformers' `continue_final_message` reaches no variable.
    vars.retain(|(k, _)| k != "continue_final_message");

    let mut final_text = String::new();
    if continue_final {
        if add_generation_prompt {
            return Err(PromptError::Template(
                "continue_final_message and add_generation_prompt are not compatible".into(),
            ));
        }
        final_text = tag_final_message(&mut conversation, chat.reads_content)?;
    }
    set(&mut vars, "messages", Value::from(conversation));
    let rendered = chat
        .env
        .get_template(template::NAME)
        .and_then(|t| t.render(Value::from_iter(vars)))
        .map_err(|e| PromptError::Template(error_chain(&e)))?;
    if !continue_final {
        return Ok(rendered);
    }
    let tag = CONTINUE_TAG.trim();
    let Some(at) = rendered
        .rfind(tag)
        .filter(|_| rendered.contains(final_text.trim()))
    else {
        return Err(PromptError::Template(
            "continue_final_message: the final message does not appear in the rendered chat".into(),
        ));
    };
    Ok(if rendered[at..].starts_with(CONTINUE_TAG) {
        rendered[..at].to_owned()
    } else {
        rendered[..at].trim_end().to_owned()
    })
}

/// The request's `tools` as vLLM hands them to the template: each one
/// through its pydantic model (`ChatCompletionToolsParam.model_dump()`),
/// `{type, function: {name, description, parameters[, strict]
/// [, defer_loading]}[, defer_loading]}`, absent fields as null.
fn tools(tools: &Value) -> Result<Option<Value>, PromptError> {
    if !present(tools) {
        return Ok(None);
    }
    if tools.kind() != ValueKind::Seq {
        return Err(bad("`tools` is not a list"));
    }
    let mut out = Vec::new();
    for tool in tools.try_iter().map_err(|e| bad(e.to_string()))? {
        let function = field(&tool, "function");
        if function.kind() != ValueKind::Map || field(&function, "name").as_str().is_none() {
            return Err(bad("a tool without a `function` with a `name`"));
        }
        let or_none = |v: Value| if v.is_undefined() { Value::from(()) } else { v };
        let mut f = vec![
            ("name", field(&function, "name")),
            ("description", or_none(field(&function, "description"))),
            ("parameters", or_none(field(&function, "parameters"))),
        ];
        let strict = field(&function, "strict");
        if present(&strict) {
            f.push(("strict", strict));
        }
        let defer = field(&tool, "defer_loading");
        let own_defer = field(&function, "defer_loading");
        if present(&own_defer) {
            f.push(("defer_loading", own_defer));
        } else if present(&defer) {
            f.push(("defer_loading", defer.clone()));
        }
        let kind = field(&tool, "type");
        let mut t = vec![
            (
                "type",
                if present(&kind) {
                    kind
                } else {
                    Value::from("function")
                },
            ),
            ("function", Value::from_iter(f)),
        ];
        if present(&defer) {
            t.push(("defer_loading", defer));
        }
        out.push(Value::from_iter(t));
    }
    Ok(Some(Value::from(out)))
}

/// transformers' `continue_final_message`: the tag appended to the last
/// message's content (its last text part, in the OpenAI format); the
/// content's text before it.
fn tag_final_message(
    conversation: &mut [Value],
    reads_content: bool,
) -> Result<String, PromptError> {
    let missing = || {
        PromptError::Template(
            "continue_final_message: the final message has no content to continue".into(),
        )
    };
    if !reads_content {
        return Err(PromptError::Template(
            "continue_final_message: the template has no `content` field".into(),
        ));
    }
    let last = conversation.last_mut().ok_or_else(missing)?;
    let content = field(last, "content");
    let (text, tagged) = match content.kind() {
        ValueKind::String => {
            let text = content.as_str().unwrap_or_default().to_owned();
            let tagged = Value::from(format!("{text}{CONTINUE_TAG}"));
            (text, tagged)
        }
        ValueKind::Seq => {
            let mut parts: Vec<Value> = content.try_iter().map_err(|_| missing())?.collect();
            let i = parts
                .iter()
                .rposition(|p| field(p, "text").as_str().is_some())
                .ok_or_else(missing)?;
            let text = field(&parts[i], "text")
                .as_str()
                .unwrap_or_default()
                .to_owned();
            parts[i] = Value::from_iter([
                ("type", Value::from("text")),
                ("text", Value::from(format!("{text}{CONTINUE_TAG}"))),
            ]);
            (text, Value::from(parts))
        }
        _ => return Err(missing()),
    };
    let fields: Vec<(Value, Value)> = last
        .try_iter()
        .map_err(|_| missing())?
        .map(|k| {
            let v = if k.as_str() == Some("content") {
                tagged.clone()
            } else {
                last.get_item(&k).unwrap_or(Value::UNDEFINED)
            };
            (k, v)
        })
        .collect();
    *last = Value::from_iter(fields);
    Ok(text)
}

/// minijinja's error with its causes.
fn error_chain(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
