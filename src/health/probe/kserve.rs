//! KServe Open Inference Protocol v2 (Triton, KServe model servers):
//! readiness, and the resident models from Triton's model repository index.

use std::future::Future;

use serde::Deserialize;

use super::fetch::{self, ProbeClient, MAX_JSON_BODY};
use super::prober::{ProbeError, ProbeReport, ProbeTarget, Prober};
use super::warn;
use crate::endpoint::Origin;
use crate::route::ModelId;

/// The readiness path of the v2 protocol.
const READY_PATH: &str = "/v2/health/ready";
/// The index path of Triton's model repository extension.
pub(crate) const INDEX_PATH: &str = "/v2/repository/index";
/// The body of a repository call with no options.
pub(crate) const EMPTY_OBJECT: bytes::Bytes = bytes::Bytes::from_static(b"{}");

/// Probes a KServe v2 server (Triton, KServe, MLServer, the
/// `tower-model-balance-sim` server). Readiness and the repository index are
/// two signals, each answered or failed on its own:
///
/// 1. `GET /v2/health/ready`: a 2xx answer is `ready: Some(true)`; any
///    other status (Triton answers 400 or 503 while not ready, MLServer
///    400 while any model is loading) is `ready: Some(false)` — a valid
///    answer, not an error. A server that does not answer at all is
///    [`ProbeError::Transport`]: the probe fails.
/// 2. `POST /v2/repository/index` with body `{}` (Triton's
///    [model repository extension], which MLServer and KServe serve too),
///    whatever readiness said: the models whose `state` is `READY` are
///    `resident_models`; models loading, unavailable or without a state
///    are not. A model `LOADING` sets `loading` (a not-ready server that
///    is loading is busy, not sick: see [`ProbeReport::is_failure`]). A
///    name that is not a valid [`ModelId`] is skipped (logged at debug
///    level). An index that fails (a non-2xx status, a malformed body,
///    no answer) leaves `resident_models: None` and is logged as a
///    warning, at most once a minute per backend: readiness stands.
///    Skipped with
///    [`without_repository_index`](Self::without_repository_index) for
///    servers without the extension.
///
/// Load signals are left unset: pair it with
/// [`PrometheusMetrics`](super::PrometheusMetrics) for those.
///
/// # Errors
///
/// [`ProbeError::Transport`] when the readiness request cannot be sent or
/// its response not read. The prober applies no timeout: the caller (the
/// probe runner) does.
///
/// [model repository extension]: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md
#[derive(Debug, Clone)]
pub struct KServeV2 {
    client: ProbeClient,
    repository_index: bool,
}

impl Default for KServeV2 {
    fn default() -> Self {
        Self::new(ProbeClient::new())
    }
}

impl KServeV2 {
    /// A prober sending through `client` (clones share its connection
    /// pool; for `https://` origins, one
    /// [from a TLS client](ProbeClient::from_client)), asking the
    /// repository index. [`KServeV2::default()`] makes its own plain-HTTP
    /// client ([`ProbeClient::new`]: `http://` origins only).
    pub fn new(client: ProbeClient) -> Self {
        Self {
            client,
            repository_index: true,
        }
    }

    /// Asks readiness only, not the repository index: for v2 servers
    /// without Triton's model repository extension. The report's
    /// `resident_models` stays `None`.
    pub fn without_repository_index(mut self) -> Self {
        self.repository_index = false;
        self
    }
}

impl Prober for KServeV2 {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        let index = self.repository_index;
        let id = target.id.clone();
        async move {
            let ready = fetch::send(&client, &origin, READY_PATH, None, MAX_JSON_BODY)
                .await?
                .status
                .is_success();
            let mut report = ProbeReport {
                ready: Some(ready),
                ..ProbeReport::default()
            };
            if index {
                match read_index(&client, &origin).await {
                    Ok(index) => {
                        warn::recovered(&id, "repository index");
                        report.loading = index.loading;
                        report.resident_models = Some(index.ready);
                    }
                    Err(error) => warn::failed(&id, "repository index", &error),
                }
            }
            Ok(report)
        }
    }
}

/// What a repository index says: every model it lists and those `READY`,
/// each once in the order listed, and whether one is `LOADING`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Index {
    pub(crate) known: Vec<ModelId>,
    pub(crate) ready: Vec<ModelId>,
    pub(crate) loading: bool,
}

/// One entry of a repository index; other fields (`version`, `reason`) are
/// ignored.
#[derive(Deserialize)]
struct IndexEntry {
    name: String,
    #[serde(default)]
    state: Option<String>,
}

/// `POST /v2/repository/index` on `origin`.
///
/// # Errors
///
/// [`ProbeError::Transport`] when the request cannot be sent or its
/// response not read; [`ProbeError::Status`] for an answer other than 2xx;
/// [`ProbeError::Malformed`] as [`parse_repository`] says, or for a body
/// over 1 MiB.
pub(crate) async fn read_index(client: &ProbeClient, origin: &Origin) -> Result<Index, ProbeError> {
    let body = fetch::send(
        client,
        origin,
        INDEX_PATH,
        Some(EMPTY_OBJECT),
        MAX_JSON_BODY,
    )
    .await?
    .success()?;
    parse_repository(&body)
}

/// What a repository index body says.
///
/// # Errors
///
/// [`ProbeError::Malformed`] unless `body` is a JSON array of objects each
/// with a string `name` (and, if present, a string or null `state`).
pub(crate) fn parse_repository(body: &[u8]) -> Result<Index, ProbeError> {
    let entries: Vec<IndexEntry> = serde_json::from_slice(body)
        .map_err(|e| ProbeError::malformed(format!("{INDEX_PATH}: {e}")))?;
    let mut index = Index::default();
    for entry in entries {
        let model = match ModelId::new(&entry.name) {
            Ok(model) => model,
            Err(error) => {
                tracing::debug!(name = %entry.name.escape_debug(), %error, "skipped an invalid model name in the repository index");
                continue;
            }
        };
        // Triton and MLServer say `READY`; KServe's Python server `Ready`.
        let state = entry.state.as_deref().unwrap_or_default();
        if state.eq_ignore_ascii_case("ready") && !index.ready.contains(&model) {
            index.ready.push(model.clone());
        } else if state.eq_ignore_ascii_case("loading") {
            index.loading = true;
        }
        if !index.known.contains(&model) {
            index.known.push(model);
        }
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `READY` models of an index.
    fn parse_repository_index(body: &[u8]) -> Result<Vec<ModelId>, ProbeError> {
        Ok(parse_repository(body)?.ready)
    }

    fn names(models: &[ModelId]) -> Vec<&str> {
        models.iter().map(ModelId::as_str).collect()
    }

    #[test]
    fn ready_models_of_a_triton_index() {
        // Shaped like Triton's answer: versions as strings, an empty reason
        // when ready, a reason when not, a model never loaded with no state.
        let body = br#"[
            {"name":"densenet_onnx","version":"1","state":"READY","reason":""},
            {"name":"inception_graphdef","version":"1","state":"UNAVAILABLE","reason":"unloaded"},
            {"name":"simple","version":"1","state":"READY","reason":""},
            {"name":"simple","version":"2","state":"READY","reason":""},
            {"name":"bert_large","version":"3","state":"LOADING","reason":""},
            {"name":"ensemble_dali"},
            {"name":"has space","version":"1","state":"READY","reason":""}
        ]"#;
        let models = parse_repository_index(body).unwrap();
        assert_eq!(names(&models), ["densenet_onnx", "simple"]);
        assert!(
            parse_repository(body).unwrap().loading,
            "bert_large is LOADING"
        );
        assert_eq!(parse_repository_index(b"[]").unwrap(), []);
        // MLServer's shape: no version, UNAVAILABLE once unloaded.
        let mlserver = br#"[{"name":"m0","state":"READY","reason":""},{"name":"m1","state":"UNAVAILABLE","reason":""}]"#;
        let index = parse_repository(mlserver).unwrap();
        assert_eq!(names(&index.ready), ["m0"]);
        assert_eq!(names(&index.known), ["m0", "m1"]);
        assert!(!index.loading);
    }

    #[test]
    fn malformed_indexes() {
        for body in [
            &b"not json"[..],
            br#"{"models":[]}"#,
            br#"[{"state":"READY"}]"#,
            br#"[{"name":7,"state":"READY"}]"#,
            br#"[{"name":"a","state":"READY"}"#,
            b"",
        ] {
            let error = parse_repository_index(body).unwrap_err();
            assert!(
                matches!(&error, ProbeError::Malformed { what } if what.starts_with(INDEX_PATH)),
                "{error}"
            );
        }
    }
}
