//! OpenAI-compatible servers (vLLM, SGLang, TGI): the served models.

use std::future::Future;

use serde::Deserialize;

use super::fetch::{self, ProbeClient, MAX_JSON_BODY};
use super::prober::{ProbeError, ProbeReport, ProbeTarget, Prober};
use crate::route::ModelId;

/// The model list path of the OpenAI API.
pub(crate) const MODELS_PATH: &str = "/v1/models";

/// Probes an OpenAI-compatible server with `GET /v1/models`, as vLLM,
/// SGLang and TGI serve it: `{"object": "list", "data": [{"id": ...,
/// "object": "model", ...}]}`.
///
/// A 2xx answer is `ready: Some(true)`, and the `id` of every entry of
/// `data` is a resident model (vLLM lists its base model and the LoRA
/// adapters it has loaded). An ID that is not a valid [`ModelId`] is
/// skipped (logged at debug level). Load signals are left unset: pair it
/// with [`PrometheusMetrics`](super::PrometheusMetrics) for those.
///
/// # Errors
///
/// [`ProbeError::Transport`] when the request cannot be sent or its
/// response not read; [`ProbeError::Status`] for an answer other than 2xx
/// (these servers have no "not ready" answer on this path);
/// [`ProbeError::Malformed`] when the body is not an object whose `data` is
/// an array of objects with a string `id`, or exceeds 1 MiB. The prober
/// applies no timeout: the caller (the probe runner) does.
#[derive(Debug, Clone)]
pub struct OpenAiModels {
    client: ProbeClient,
}

impl Default for OpenAiModels {
    fn default() -> Self {
        Self::new(ProbeClient::new())
    }
}

impl OpenAiModels {
    /// A prober sending through `client` (clones share its connection
    /// pool; for `https://` origins, one
    /// [from a TLS client](ProbeClient::from_client)).
    /// [`OpenAiModels::default()`] makes its own plain-HTTP client
    /// ([`ProbeClient::new`]: `http://` origins only).
    pub fn new(client: ProbeClient) -> Self {
        Self { client }
    }
}

impl Prober for OpenAiModels {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        async move {
            let body = fetch::send(&client, &origin, MODELS_PATH, None, MAX_JSON_BODY)
                .await?
                .success()?;
            Ok(ProbeReport {
                ready: Some(true),
                resident_models: Some(parse_models(&body)?),
                ..ProbeReport::default()
            })
        }
    }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

/// One model of the list; other fields (`object`, `created`, `owned_by`,
/// `root`, `max_model_len`, ...) are ignored.
#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

/// The IDs of a model list, each once, in the order listed.
///
/// # Errors
///
/// [`ProbeError::Malformed`] unless `body` is a JSON object whose `data` is
/// an array of objects each with a string `id`.
pub(crate) fn parse_models(body: &[u8]) -> Result<Vec<ModelId>, ProbeError> {
    let list: ModelList = serde_json::from_slice(body)
        .map_err(|e| ProbeError::malformed(format!("{MODELS_PATH}: {e}")))?;
    let mut models: Vec<ModelId> = Vec::new();
    for entry in list.data {
        match ModelId::new(&entry.id) {
            Ok(model) if !models.contains(&model) => models.push(model),
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(id = %entry.id.escape_debug(), %error, "skipped an invalid model ID in /v1/models");
            }
        }
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_a_vllm_model_list() {
        // Shaped like vLLM's answer with one LoRA adapter loaded.
        let body = br#"{"object":"list","data":[
            {"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":1718000000,
             "owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,
             "max_model_len":8192,"permission":[{"id":"modelperm-1","object":"model_permission",
             "allow_sampling":true,"is_blocking":false}]},
            {"id":"sql-lora","object":"model","created":1718000000,"owned_by":"vllm",
             "root":"/adapters/sql-lora","parent":"meta-llama/Llama-3.1-8B-Instruct",
             "max_model_len":null,"permission":[]},
            {"id":"","object":"model"}
        ]}"#;
        let models = parse_models(body).unwrap();
        let names: Vec<&str> = models.iter().map(ModelId::as_str).collect();
        assert_eq!(names, ["meta-llama/Llama-3.1-8B-Instruct", "sql-lora"]);
        assert_eq!(parse_models(br#"{"object":"list","data":[]}"#).unwrap(), []);
    }

    #[test]
    fn malformed_lists() {
        for body in [
            &b"<html>502 Bad Gateway</html>"[..],
            br#"[{"id":"a"}]"#,
            br#"{"object":"list"}"#,
            br#"{"data":[{"name":"a"}]}"#,
            br#"{"data":[{"id":"a"}"#,
        ] {
            let error = parse_models(body).unwrap_err();
            assert!(
                matches!(&error, ProbeError::Malformed { what } if what.starts_with(MODELS_PATH)),
                "{error}"
            );
        }
    }
}
