//! [`ServerTokenize`]: a prompt's token IDs asked of the server itself,
//! `POST /tokenize` (vLLM's), when the gateway has no local tokenizer.
//!
//! Why the server's: it applies the model's own chat template, with the
//! request's tools and template arguments, exactly as it will for the
//! request; a local tokenizer has to match it. The cost is a round trip
//! before routing, bounded by [`TOKENIZE_TIMEOUT`]: a routing hint is not
//! worth more, and the layer routes without the prompt's blocks when it
//! fails.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Map, Value};
use tower::ServiceExt;
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance::error::BoxError;
use tower_model_balance::kv::{Tokenize, TokenizeFuture};

use super::client::BackendClient;

/// How long the gateway waits for a `/tokenize` answer: 2 s, fixed. The
/// server tokenizes in its API process, in milliseconds; a server that
/// takes longer is loaded, and its request is better routed without its
/// blocks than held (the connect and first-token timeouts, 5 s and 60 s
/// by default, are for the request itself).
pub const TOKENIZE_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks `origin`'s `POST /tokenize` for a request's prompt tokens:
///
/// * `/v1/chat/completions`: `{"model", "messages",
///   "add_generation_prompt"}` (the body's own, else `true`),
///   `"continue_final_message"`, `"tools"` and `"chat_template_kwargs"`
///   when the body has them, and `"add_special_tokens": false` (the chat
///   template has them), as vLLM renders a chat request;
/// * `/v1/completions` with a string prompt: `{"model", "prompt",
///   "add_special_tokens": true}`; a prompt of token IDs is its own
///   tokens, asked of nobody; a list of one prompt is that prompt;
/// * anything else (several prompts, another path, a body that is not a
///   JSON object): `Ok(None)`.
///
/// A status other than 200, a body without `"tokens"`, or no answer
/// within the timeout: an error.
#[derive(Clone)]
pub struct ServerTokenize {
    client: BackendClient,
    origin: Origin,
    timeout: Duration,
}

impl ServerTokenize {
    /// Asks `origin` through `client`, waiting at most `timeout` (the
    /// gateway's: [`TOKENIZE_TIMEOUT`]).
    pub fn new(client: BackendClient, origin: Origin, timeout: Duration) -> Self {
        Self {
            client,
            origin,
            timeout,
        }
    }

    async fn ask(&self, question: Value) -> Result<Vec<u32>, BoxError> {
        let origin = &self.origin;
        let req = http::Request::post("/tokenize")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(question.to_string())))?;
        let send = async {
            let response = SetOrigin::to(self.client.clone(), origin.clone())
                .oneshot(req)
                .await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| {
                format!(
                    "POST {origin}/tokenize: no answer within {:?}",
                    self.timeout
                )
            })?
            .map_err(|e| format!("POST {origin}/tokenize: {e}"))?;
        if status != http::StatusCode::OK {
            return Err(format!("POST {origin}/tokenize answered {status}").into());
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            tokens: Vec<u32>,
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| format!("POST {origin}/tokenize: not a list of tokens: {e}"))?;
        Ok(answer.tokens)
    }
}

impl fmt::Debug for ServerTokenize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTokenize")
            .field("origin", &self.origin)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Tokenize for ServerTokenize {
    fn tokenize<'a>(&'a self, path: &'a str, body: &'a Bytes) -> TokenizeFuture<'a> {
        Box::pin(async move {
            match question(path, body) {
                Question::Ask(question) => self.ask(question).await.map(Some),
                Question::Tokens(tokens) => Ok(Some(tokens)),
                Question::None => Ok(None),
            }
        })
    }
}

/// What a request's prompt needs.
#[derive(Debug, PartialEq)]
enum Question {
    /// This `/tokenize` body.
    Ask(Value),
    /// Nothing: the prompt is these token IDs.
    Tokens(Vec<u32>),
    /// Nothing: no prompt this source reads.
    None,
}

/// The `/tokenize` body for a request to `path` with `body`.
fn question(path: &str, body: &[u8]) -> Question {
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
        return Question::None;
    };
    let mut out = Map::new();
    if let Some(model) = request.get("model") {
        out.insert("model".into(), model.clone());
    }
    match path {
        "/v1/chat/completions" => {
            let Some(messages @ Value::Array(_)) = request.get("messages") else {
                return Question::None;
            };
            out.insert("messages".into(), messages.clone());
            let generation = request.get("add_generation_prompt");
            out.insert(
                "add_generation_prompt".into(),
                generation.cloned().unwrap_or(Value::Bool(true)),
            );
            for key in ["continue_final_message", "tools", "chat_template_kwargs"] {
                if let Some(value) = request.get(key) {
                    out.insert(key.into(), value.clone());
                }
            }
            out.insert("add_special_tokens".into(), Value::Bool(false));
            Question::Ask(Value::Object(out))
        }
        "/v1/completions" => match prompt(request.get("prompt")) {
            Some(Value::String(text)) => {
                out.insert("prompt".into(), json!(text));
                out.insert("add_special_tokens".into(), Value::Bool(true));
                Question::Ask(Value::Object(out))
            }
            Some(ids @ Value::Array(_)) => token_ids(ids).map_or(Question::None, Question::Tokens),
            _ => Question::None,
        },
        _ => Question::None,
    }
}

/// A completion's one prompt: a string or a list of token IDs, or a list
/// of one of those.
fn prompt(prompt: Option<&Value>) -> Option<&Value> {
    match prompt? {
        Value::Array(one) if one.len() == 1 && !one[0].is_number() => Some(&one[0]),
        prompt => Some(prompt),
    }
}

/// `ids` as token IDs, if each is one.
fn token_ids(ids: &Value) -> Option<Vec<u32>> {
    ids.as_array()?
        .iter()
        .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{question, Question};
    use serde_json::json;

    fn ask(path: &str, body: serde_json::Value) -> Question {
        question(path, body.to_string().as_bytes())
    }

    #[test]
    fn what_is_asked_of_the_server() {
        let tokens = ask(
            "/v1/completions",
            json!({"model": "m", "prompt": [1, 2, 3]}),
        );
        assert_eq!(tokens, Question::Tokens(vec![1, 2, 3]));
        let one = ask("/v1/completions", json!({"prompt": [[4, 5]]}));
        assert_eq!(one, Question::Tokens(vec![4, 5]));
        let one = ask("/v1/completions", json!({"prompt": ["hi"]}));
        assert_eq!(
            one,
            Question::Ask(json!({"prompt": "hi", "add_special_tokens": true}))
        );
        for (path, body) in [
            ("/v1/completions", json!({"prompt": ["a", "b"]})),
            ("/v1/completions", json!({"prompt": [1, -2]})),
            ("/v1/completions", json!({"model": "m"})),
            ("/v1/chat/completions", json!({"model": "m"})),
            ("/v1/embeddings", json!({"model": "m", "input": "x"})),
            ("/v2/models/m/infer", json!({"inputs": []})),
            ("/v1/completions", json!(["not", "an", "object"])),
        ] {
            assert_eq!(ask(path, body.clone()), Question::None, "{path} {body}");
        }
        assert_eq!(question("/v1/completions", b"{not json"), Question::None);
    }
}
