//! Placement of LoRA adapters on vLLM through its runtime adapter API.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::loader::{LoadError, ModelLoader, Repository};
use crate::health::probe::fetch::{self, ProbeClient, MAX_JSON_BODY};
use crate::health::probe::openai::{parse_models, MODELS_PATH};
use crate::health::probe::ProbeTarget;
use crate::route::ModelId;

const LOAD_PATH: &str = "/v1/load_lora_adapter";
const UNLOAD_PATH: &str = "/v1/unload_lora_adapter";

/// Loads and unloads LoRA adapters on vLLM (started with
/// `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), today's most frequent cold
/// load: the adapter's model ID is its `lora_name`.
///
/// | call | request | success |
/// | --- | --- | --- |
/// | load | `POST /v1/load_lora_adapter`, `{"lora_name", "lora_path"}` | 2xx, or 400 saying it is already loaded |
/// | unload | `POST /v1/unload_lora_adapter`, `{"lora_name"}` | 2xx, or 400/404 saying it cannot be found (not loaded) |
/// | repository | `GET /v1/models` | the adapters given to [`VllmLoraLoader::new`] are known; those of them listed are resident |
///
/// vLLM has no repository index: the allow-list is the adapters (name →
/// path on the server) the loader is built with. Base models listed by
/// `/v1/models` are neither known nor resident here: they are never
/// loaded or unloaded.
///
/// # Errors
///
/// [`LoadError::Status`] for any other answer; [`LoadError::Transport`]
/// when the request cannot be sent or its answer read;
/// [`LoadError::Malformed`] for a model list that is not OpenAI's shape.
#[derive(Debug, Clone)]
pub struct VllmLoraLoader {
    client: ProbeClient,
    adapters: Arc<HashMap<ModelId, String>>,
}

impl VllmLoraLoader {
    /// A loader of `adapters` (each adapter's name and its path as the
    /// server sees it, e.g. `("sql-lora", "/adapters/sql-lora")`), sending
    /// through `client` ([`ProbeClient::new`] for `http://` origins, for
    /// `https://` one [from a TLS client](ProbeClient::from_client)).
    pub fn new(client: ProbeClient, adapters: impl IntoIterator<Item = (ModelId, String)>) -> Self {
        Self {
            client,
            adapters: Arc::new(adapters.into_iter().collect()),
        }
    }

    fn post(
        &self,
        target: &ProbeTarget,
        path: &'static str,
        body: serde_json::Value,
        done_already: &'static [&'static str],
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        let body = Bytes::from(body.to_string());
        async move {
            let answer = fetch::send(&client, &origin, path, Some(body), MAX_JSON_BODY).await?;
            let status = answer.status;
            let text = String::from_utf8_lossy(&answer.body).to_ascii_lowercase();
            let done = done_already.iter().any(|phrase| text.contains(phrase));
            if status.is_success()
                || (matches!(status, StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND) && done)
            {
                Ok(())
            } else {
                Err(LoadError::Status(status))
            }
        }
    }
}

impl ModelLoader for VllmLoraLoader {
    fn load(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let body = match self.adapters.get(model) {
            Some(path) => Ok(serde_json::json!({ "lora_name": model.as_str(), "lora_path": path })),
            None => Err(LoadError::malformed(format!(
                "{LOAD_PATH}: no path for adapter `{model}`"
            ))),
        };
        let post = body.map(|body| self.post(target, LOAD_PATH, body, &["already been loaded"]));
        async move { post?.await }
    }

    fn unload(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let body = serde_json::json!({ "lora_name": model.as_str() });
        self.post(target, UNLOAD_PATH, body, &["cannot be found", "not found"])
    }

    fn repository(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<Repository, LoadError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        let adapters = self.adapters.clone();
        async move {
            let body = fetch::send(&client, &origin, MODELS_PATH, None, MAX_JSON_BODY)
                .await?
                .success()?;
            let resident = parse_models(&body)?
                .into_iter()
                .filter(|m| adapters.contains_key(m))
                .collect();
            Ok(Repository::new(
                adapters.keys().cloned().collect(),
                resident,
            ))
        }
    }
}
