//! The models the fleet serves, as the health probes last saw them: what
//! `GET /v1/models` lists, and the model of a request that names none
//! when the fleet serves only one (as a vLLM server alone serves its
//! only model to such a request).
//!
//! [`Catalogued`] wraps the gateway's prober: each probe's report is
//! passed on to the balancer unchanged and its resident models noted
//! here, per backend; a failed probe drops the backend's models until it
//! answers again.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tower_model_balance::backend::BackendId;
use tower_model_balance::health::probe::{ProbeError, ProbeReport, ProbeTarget, Prober};
use tower_model_balance::route::ModelId;

/// The fleet's models by backend; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Catalog(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Each backend's models, as its last successful probe listed them.
    by_backend: BTreeMap<BackendId, Vec<ModelId>>,
    /// When each model was first seen, in Unix seconds (OpenAI's
    /// `created`).
    first_seen: HashMap<ModelId, u64>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes what a probe of `backend` found: its models, or none when the
    /// probe failed.
    pub fn note(&self, backend: &BackendId, models: Option<&[ModelId]>) {
        let mut inner = self.lock();
        match models {
            Some(models) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                for model in models {
                    inner.first_seen.entry(model.clone()).or_insert(now);
                }
                inner.by_backend.insert(backend.clone(), models.to_vec());
            }
            None => {
                inner.by_backend.remove(backend);
            }
        }
    }

    /// Every model some backend serves, sorted, each with when it was
    /// first seen (Unix seconds).
    pub fn models(&self) -> Vec<(ModelId, u64)> {
        let inner = self.lock();
        let mut models: Vec<ModelId> = inner.by_backend.values().flatten().cloned().collect();
        models.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        models.dedup();
        models
            .into_iter()
            .map(|m| {
                let seen = inner.first_seen.get(&m).copied().unwrap_or(0);
                (m, seen)
            })
            .collect()
    }

    /// The models `backend`'s last probe listed (maybe none); `None` when
    /// its last probe failed or it was never probed.
    pub fn models_of(&self, backend: &BackendId) -> Option<Vec<ModelId>> {
        self.lock().by_backend.get(backend).cloned()
    }

    /// The fleet's model while it serves exactly one; `None` with none or
    /// several.
    pub fn only_model(&self) -> Option<ModelId> {
        let inner = self.lock();
        let mut models = inner.by_backend.values().flatten();
        let first = models.next()?;
        models.all(|m| m == first).then(|| first.clone())
    }

    /// `GET /v1/models`'s body: OpenAI's list shape,
    /// `{"object": "list", "data": [{"id", "object": "model", "created",
    /// "owned_by"}]}`.
    pub fn openai_list(&self) -> serde_json::Value {
        let data: Vec<_> = self
            .models()
            .into_iter()
            .map(|(model, created)| openai_model(&model, created))
            .collect();
        serde_json::json!({ "object": "list", "data": data })
    }

    /// One model's entry, as `GET /v1/models/{model}` answers it, if some
    /// backend serves it.
    pub fn openai_model(&self, name: &str) -> Option<serde_json::Value> {
        self.models()
            .into_iter()
            .find(|(m, _)| m.as_str() == name)
            .map(|(model, created)| openai_model(&model, created))
    }
}

fn openai_model(model: &ModelId, created: u64) -> serde_json::Value {
    serde_json::json!({
        "id": model.as_str(),
        "object": "model",
        "created": created,
        "owned_by": "tower-model-balance",
    })
}

/// A prober whose reports are noted in a [`Catalog`] on their way to the
/// balancer.
#[derive(Debug, Clone)]
pub struct Catalogued<P> {
    prober: P,
    catalog: Catalog,
}

impl<P> Catalogued<P> {
    /// `prober`, noting what it finds in `catalog`.
    pub fn new(prober: P, catalog: Catalog) -> Self {
        Self { prober, catalog }
    }
}

impl<P: Prober> Prober for Catalogued<P> {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let probe = self.prober.probe(target);
        let catalog = self.catalog.clone();
        let id = target.id.clone();
        async move {
            let report = probe.await;
            let models = match &report {
                Ok(report) if !report.is_failure() => {
                    Some(report.resident_models.as_deref().unwrap_or_default())
                }
                _ => None,
            };
            catalog.note(&id, models);
            report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> BackendId {
        BackendId::new(name).unwrap()
    }

    fn model(name: &str) -> ModelId {
        ModelId::new(name).unwrap()
    }

    #[test]
    fn lists_the_union_and_knows_an_only_model() {
        let catalog = Catalog::new();
        assert_eq!(catalog.only_model(), None, "nothing probed yet");
        catalog.note(&id("a"), Some(&[model("tiny")]));
        catalog.note(&id("b"), Some(&[model("tiny")]));
        assert_eq!(catalog.only_model(), Some(model("tiny")));
        catalog.note(&id("b"), Some(&[model("tiny"), model("big")]));
        assert_eq!(catalog.only_model(), None, "two models");
        let ids: Vec<_> = catalog.openai_list()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["big", "tiny"]);
        // A backend whose probe fails is no longer listed.
        catalog.note(&id("b"), None);
        assert_eq!(catalog.only_model(), Some(model("tiny")));
        assert!(catalog.openai_model("big").is_none());
        assert_eq!(catalog.openai_model("tiny").unwrap()["object"], "model");
    }
}
