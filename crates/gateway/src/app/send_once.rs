//! Which requests are safe to send twice: the gateway hedges a slow
//! request and retries a refused or failed one elsewhere (within one
//! budget, `app.rs`), which sends the request to a second backend. That
//! is harmless for inference — the client gets one answer, the loser is
//! cancelled — and wrong for a request that leaves state on the server:
//! it would be done, stored and billed twice. Such a request is marked
//! [`SendOnce`](tower_model_balance::route::SendOnce) here, before the stack; the hedge then sends no backup
//! and the retry policy retries it only when its connection was refused
//! (it never left).
//!
//! | route | hedged and retried | why |
//! |---|---|---|
//! | `/v1/responses` | only with `"store": false` and without `"background": true` | OpenAI's Responses API stores every response unless told `store: false` (the default is true), and a background response is a job on the server: a second copy is a second stored response (or job), its work done twice |
//! | `/v1/chat/completions` | unless `"store": true` (or `"background": true`) | `store` defaults to false there; a chat completion that is not stored leaves nothing on the server |
//! | `/v1/completions`, `/v1/messages`, `/generate`, `/generate_stream` | yes | generation without server-side state: a second copy costs a backend's compute (within the 5% budget), never a second result |
//! | `/v1/embeddings`, `/v1/score`, `/v1/rerank`, `/v2/rerank`, `/score`, `/rerank`, `/pooling`, `/classify`, `/tokenize`, `/detokenize` | yes | pure functions of the input |
//! | `/invocations` | yes | SageMaker's route: vLLM dispatches it by the body's shape to the chat, completion, embedding and pooling routes above, never to responses |
//! | `/v2/models/{name}/infer` (`/versions/{v}/infer`) | yes | KServe v2 inference is stateless; the body (tensors, maybe binary) is not read |
//! | the metadata, readiness and information GETs | yes | reads |
//!
//! Only `/v1/responses` and `/v1/chat/completions` bodies are read for
//! this, top-level `store` and `background` only (the rest is skipped,
//! not built into a tree). A body that cannot be read so (not JSON, a
//! flag that is not a boolean) is sent once: the route layer refuses a
//! malformed body anyway, and a flag of another type is the backend's to
//! judge, not a reason to risk a second copy.
//!
//! Left out: Triton's stateful models (sequence batching, a
//! `sequence_id` parameter) need every request of a sequence on one
//! backend, which the gateway does not do; they are not served through
//! it, hedged or not.

use serde::Deserialize;

/// The OpenAI Responses API route.
const RESPONSES: &str = "/v1/responses";
/// The OpenAI chat completions route.
const CHAT: &str = "/v1/chat/completions";

/// The top-level flags of a body that ask the server to keep something,
/// as they were written (a value not `true`, `false` or `null` is read as
/// unreadable: sent once).
#[derive(Debug, Default, Deserialize)]
pub struct Keeps {
    #[serde(default)]
    pub store: Option<serde_json::Value>,
    #[serde(default)]
    pub background: Option<serde_json::Value>,
}

impl Keeps {
    /// Whether a request for `path` whose body had these flags (`None`:
    /// the body could not be read) must be sent at most once.
    pub fn send_once(keeps: Option<&Self>, path: &str) -> bool {
        let stores_by_default = match path {
            RESPONSES => true,
            CHAT => false,
            _ => return false,
        };
        let Some(keeps) = keeps else { return true };
        let flag = |value: &Option<serde_json::Value>, default: bool| match value {
            None | Some(serde_json::Value::Null) => Some(default),
            Some(serde_json::Value::Bool(b)) => Some(*b),
            Some(_) => None,
        };
        match (
            flag(&keeps.store, stores_by_default),
            flag(&keeps.background, false),
        ) {
            (Some(store), Some(background)) => store || background,
            _ => true,
        }
    }
}

/// Whether a request for `path` with `body` must be sent at most once
/// (see the [module docs](self)).
pub fn is_send_once(path: &str, body: &[u8]) -> bool {
    if path != RESPONSES && path != CHAT {
        return false;
    }
    Keeps::send_once(serde_json::from_slice::<Keeps>(body).ok().as_ref(), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_sent_once_unless_store_is_false() {
        let once = |body: &str| is_send_once(RESPONSES, body.as_bytes());
        assert!(
            once(r#"{"model": "m", "input": "hi"}"#),
            "store defaults to true"
        );
        assert!(once(r#"{"model": "m", "store": true}"#));
        assert!(
            once(r#"{"model": "m", "store": null}"#),
            "null: the default"
        );
        assert!(!once(
            r#"{"model": "m", "store": false, "input": [{"store": true}]}"#
        ));
        assert!(once(
            r#"{"model": "m", "store": false, "background": true}"#
        ));
        assert!(!once(
            r#"{"model": "m", "store": false, "background": false}"#
        ));
        // Unreadable: once.
        for body in [
            "not json",
            r#"{"store": "false"}"#,
            "[1]",
            r#"{"store": false"#,
        ] {
            assert!(once(body), "{body}");
        }
    }

    #[test]
    fn chat_is_sent_once_only_when_stored() {
        let once = |body: &str| is_send_once(CHAT, body.as_bytes());
        assert!(
            !once(r#"{"model": "m", "messages": []}"#),
            "store defaults to false"
        );
        assert!(once(r#"{"model": "m", "messages": [], "store": true}"#));
        assert!(!once(r#"{"model": "m", "store": false}"#));
    }

    #[test]
    fn other_routes_are_never_read() {
        for path in [
            "/v1/completions",
            "/v1/embeddings",
            "/v2/models/m/infer",
            "/invocations",
        ] {
            assert!(!is_send_once(path, br#"{"store": true}"#), "{path}");
            assert!(!is_send_once(path, b"\x00 binary tensors"), "{path}");
        }
    }
}
