//! The chat template's Jinja environment, set up as transformers sets up
//! its own (`transformers.utils.chat_template_utils._compile_jinja_template`):
//! `trim_blocks` and `lstrip_blocks` on, loop controls (`break`,
//! `continue`), the globals `raise_exception` and `strftime_now`, a
//! `tojson` that writes as Python's `json.dumps`, and Python's string and
//! dict methods (`.strip()`, `.split()`, `.items()`, `.get()`) through
//! minijinja-contrib's `pycompat`.
//!
//! The `{% generation %}` tag (transformers' marker of assistant tokens,
//! which renders its body unchanged) is dropped from the source before
//! parsing: minijinja has no custom tags.

use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};

use super::{clock, json};

/// The name the template is stored under in its environment.
pub(super) const NAME: &str = "chat";

/// How messages' `content` reaches the template (vLLM's
/// `ChatTemplateContentFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ContentFormat {
    /// Text parts joined into one string (`"\n"` between parts).
    String,
    /// The OpenAI list of `{type, text}` parts, kept as a list.
    OpenAi,
}

/// An environment holding `source` as [`NAME`].
pub(super) fn environment(source: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", json::tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", |format: &str| clock::strftime_now(format));
    env.add_template_owned(NAME, strip_generation_tags(source))?;
    Ok(env)
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `source` without `{% generation %}` and `{% endgeneration %}` tags (any
/// whitespace control inside them: the text around them stays as it is,
/// since trimming around a dropped tag cannot be told apart from its
/// body's own).
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start + 2..start + len];
        let word = tag.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        if word != "generation" && word != "endgeneration" {
            out.push_str(&rest[start..start + len + 2]);
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

/// vLLM's guess of how the template reads `content`
/// (`vllm.renderers.hf._detect_content_format`): a template that loops
/// over a message's content (`{% for part in message['content'] %}`, or
/// over a variable named `content`) takes the OpenAI list; any other
/// takes a string. A scan of the template's `for` tags, where vLLM walks
/// its Jinja syntax tree.
pub(super) fn content_format(source: &str) -> ContentFormat {
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = rest[start + 2..start + len]
            .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        rest = &rest[start + len + 2..];
        let Some(head) = tag.strip_prefix("for ") else {
            continue;
        };
        let Some((_, iter)) = head.split_once(" in ") else {
            continue;
        };
        let iter = iter.split(" if ").next().unwrap_or(iter);
        let iter = iter.trim().trim_end_matches("recursive").trim();
        let iter = iter.trim_start_matches('(').trim_end_matches(')');
        let reads_content = iter == "content"
            || iter.ends_with(".content")
            || iter.ends_with("['content']")
            || iter.ends_with("[\"content\"]");
        if reads_content {
            return ContentFormat::OpenAi;
        }
    }
    ContentFormat::String
}

/// vLLM's test of whether the template knows the `developer` role.
pub(super) fn knows_developer(source: &str) -> bool {
    source.contains("\"developer\"") || source.contains("'developer'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_format_follows_the_loops_over_content() {
        let string = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
        assert_eq!(content_format(string), ContentFormat::String);
        let openai = "{%- for m in messages %}{%- for part in m['content'] -%}\
                      {{ part.text }}{% endfor %}{% endfor %}";
        assert_eq!(content_format(openai), ContentFormat::OpenAi);
        let attr = "{% for m in messages %}{% for c in m.content if c.type == 'text' %}{% endfor %}{% endfor %}";
        assert_eq!(content_format(attr), ContentFormat::OpenAi);
    }

    #[test]
    fn generation_tags_are_dropped() {
        assert_eq!(
            strip_generation_tags("a{% generation %}b{%- endgeneration -%}c{% if x %}"),
            "abc{% if x %}"
        );
    }

    #[test]
    fn raise_exception_fails_the_render() {
        let env = environment("{{ raise_exception('no system role') }}").unwrap();
        let err = env.get_template(NAME).unwrap().render(()).unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
    }
}
