//! Placement through the KServe v2 model repository extension (Triton in
//! explicit model-control mode, KServe v2 servers).

use std::future::Future;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::loader::{LoadError, ModelLoader, Repository};
use crate::health::probe::fetch::{self, ProbeClient, MAX_JSON_BODY};
use crate::health::probe::kserve::{read_index, EMPTY_OBJECT};
use crate::health::probe::ProbeTarget;
use crate::route::ModelId;

/// Characters kept as they are in a path segment (RFC 3986 unreserved);
/// every other byte is percent-encoded.
pub(crate) const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Loads and unloads models through Triton's [model repository
/// extension], as Triton in explicit model-control mode and other KServe v2
/// servers expose it:
///
/// | call | request | success |
/// | --- | --- | --- |
/// | load | `POST /v2/repository/models/{name}/load`, body `{}` | 2xx |
/// | unload | `POST /v2/repository/models/{name}/unload`, body `{}` | 2xx |
/// | repository | `POST /v2/repository/index`, body `{}` | 2xx: every listed model is known, those `READY` resident |
///
/// The name is percent-encoded in the path.
///
/// # Errors
///
/// [`LoadError::Status`] for an answer other than 2xx;
/// [`LoadError::Transport`] when the request cannot be sent or its answer
/// read; [`LoadError::Malformed`] for an index that is not a JSON array of
/// objects with a string `name`, or over 1 MiB. No timeout: the balancer
/// applies the placement policy's.
///
/// [model repository extension]: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md
#[derive(Debug, Clone)]
pub struct KServeV2Loader {
    client: ProbeClient,
}

impl Default for KServeV2Loader {
    fn default() -> Self {
        Self::new(ProbeClient::new())
    }
}

impl KServeV2Loader {
    /// A loader sending through `client` (clones share its connection
    /// pool, e.g. with the probers; for `https://` origins, one
    /// [from a TLS client](ProbeClient::from_client)).
    /// [`KServeV2Loader::default()`] makes its own plain-HTTP client
    /// ([`ProbeClient::new`]: `http://` origins only).
    pub fn new(client: ProbeClient) -> Self {
        Self { client }
    }

    fn call(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
        action: &'static str,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        let name = utf8_percent_encode(model.as_str(), SEGMENT);
        let path = format!("/v2/repository/models/{name}/{action}");
        async move {
            fetch::send(&client, &origin, &path, Some(EMPTY_OBJECT), MAX_JSON_BODY)
                .await?
                .success()
                .map(drop)
        }
    }
}

impl ModelLoader for KServeV2Loader {
    fn load(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        self.call(target, model, "load")
    }

    fn unload(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        self.call(target, model, "unload")
    }

    fn repository(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<Repository, LoadError>> + Send + 'static {
        let client = self.client.clone();
        let origin = target.address.clone();
        async move {
            let index = read_index(&client, &origin).await?;
            Ok(Repository::new(index.known, index.ready))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_in_the_path() {
        let encode = |s| utf8_percent_encode(s, SEGMENT).to_string();
        assert_eq!(encode("densenet_onnx-1.2~x"), "densenet_onnx-1.2~x");
        assert_eq!(encode("org/model:v1"), "org%2Fmodel%3Av1");
        assert_eq!(encode("a b?#"), "a%20b%3F%23");
        assert_eq!(encode("模型"), "%E6%A8%A1%E5%9E%8B");
    }
}
