//! The models the fleet serves, as the health probes last saw them: what
//! `GET /v1/models` lists, and the model of a request that names none
//! when the fleet serves only one (as a vLLM server alone serves its
//! only model to such a request).
//!
//! [`Catalogued`] wraps the gateway's prober: each probe's report is
//! passed on to the balancer unchanged and its resident models noted
//! here, per backend, with the origin it was probed at; a failed probe,
//! or one that timed out (dropped unfinished by the probe task), drops the
//! backend until it answers again, and how each probe went is noted for
//! the unresponsive-backend rule (`unresponsive.rs`); [`RepositoryReads`]
//! notes placement's repository reads there too. The KServe v2 metadata and
//! readiness routes ask the backends it names ([`Catalog::holders`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{ProbeError, ProbeReport, ProbeTarget, Prober};
use tower_model_balance::placement::{LoadError, ModelLoader, Repository};
use tower_model_balance::route::ModelId;

use super::unresponsive::{ProbeOutcome, Unresponsive};

/// The fleet's models by backend; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Catalog(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Each backend that answered its last probe: where, and its models
    /// as that probe listed them (`None`: the backend does not list them,
    /// e.g. a KServe v2 server without a repository index).
    by_backend: BTreeMap<BackendId, (Origin, Option<Vec<ModelId>>)>,
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

    /// Notes what a probe of `backend` found: where it answered and the
    /// models it listed (`None` inside: it lists none), or `None` when
    /// the probe failed.
    pub fn note(&self, backend: &BackendId, seen: Option<(&Origin, Option<&[ModelId]>)>) {
        let mut inner = self.lock();
        match seen {
            Some((origin, models)) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                for model in models.unwrap_or_default() {
                    inner.first_seen.entry(model.clone()).or_insert(now);
                }
                let entry = (origin.clone(), models.map(<[ModelId]>::to_vec));
                inner.by_backend.insert(backend.clone(), entry);
            }
            None => {
                inner.by_backend.remove(backend);
            }
        }
    }

    /// The backends that may answer for `model` now, as the last probes
    /// saw them: those that listed it, those that list nothing (a server
    /// whose models are not known), and the others. Allocates only for
    /// the backends it returns.
    pub fn holders(&self, model: &ModelId) -> Holders {
        let inner = self.lock();
        let mut holders = Holders::default();
        for (id, (origin, models)) in &inner.by_backend {
            match models {
                Some(models) if models.contains(model) => {
                    holders.listed.push((id.clone(), origin.clone()))
                }
                Some(_) => holders.others.push((id.clone(), origin.clone())),
                None => holders.unlisted.push((id.clone(), origin.clone())),
            }
        }
        holders
    }

    /// Every model some backend serves, sorted, each with when it was
    /// first seen (Unix seconds).
    pub fn models(&self) -> Vec<(ModelId, u64)> {
        let inner = self.lock();
        let mut models: Vec<ModelId> = listed(&inner).cloned().collect();
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
        let inner = self.lock();
        let (_, models) = inner.by_backend.get(backend)?;
        Some(models.clone().unwrap_or_default())
    }

    /// The fleet's model while it serves exactly one; `None` with none or
    /// several.
    pub fn only_model(&self) -> Option<ModelId> {
        let inner = self.lock();
        let mut models = listed(&inner);
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

/// Where a model may be asked about (see [`Catalog::holders`]), each
/// backend with the origin its probe answered at, in ID order.
#[derive(Debug, Default)]
pub struct Holders {
    /// Backends whose last probe listed the model.
    pub listed: Vec<(BackendId, Origin)>,
    /// Backends that answered their probe without listing their models.
    pub unlisted: Vec<(BackendId, Origin)>,
    /// Backends whose last probe listed models, not this one (it may have
    /// been loaded there since).
    pub others: Vec<(BackendId, Origin)>,
}

/// Every model each backend listed, repeated across backends.
fn listed(inner: &Inner) -> impl Iterator<Item = &ModelId> {
    inner
        .by_backend
        .values()
        .flat_map(|(_, m)| m.iter().flatten())
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
/// balancer, and how each went in an [`Unresponsive`].
#[derive(Debug, Clone)]
pub struct Catalogued<P> {
    prober: P,
    catalog: Catalog,
    unresponsive: Unresponsive,
}

impl<P> Catalogued<P> {
    /// `prober`, noting what it finds in `catalog` and `unresponsive`.
    pub fn new(prober: P, catalog: Catalog, unresponsive: Unresponsive) -> Self {
        Self {
            prober,
            catalog,
            unresponsive,
        }
    }
}

impl<P: Prober> Prober for Catalogued<P> {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let probe = self.prober.probe(target);
        let mut pending = Pending {
            catalog: self.catalog.clone(),
            unresponsive: self.unresponsive.clone(),
            id: target.id.clone(),
            origin: target.address.clone(),
            done: false,
        };
        async move {
            let report = probe.await;
            pending.done(&report);
            report
        }
    }
}

/// A probe on its way: noted when it ends, or, dropped unfinished (the
/// probe task's timeout), as one that timed out.
struct Pending {
    catalog: Catalog,
    unresponsive: Unresponsive,
    id: BackendId,
    origin: Origin,
    done: bool,
}

impl Pending {
    fn done(&mut self, report: &Result<ProbeReport, ProbeError>) {
        self.done = true;
        let seen = match report {
            Ok(report) if !report.is_failure() => {
                Some((&self.origin, report.resident_models.as_deref()))
            }
            _ => None,
        };
        self.catalog.note(&self.id, seen);
        let outcome = match report {
            Ok(_) | Err(ProbeError::Status(_) | ProbeError::Malformed { .. }) => {
                ProbeOutcome::Answered
            }
            Err(ProbeError::Timeout) => ProbeOutcome::TimedOut,
            Err(_) => ProbeOutcome::Failed,
        };
        let now = tokio::time::Instant::now();
        self.unresponsive.note(&self.id, &self.origin, outcome, now);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.done(&Err(ProbeError::Timeout));
        }
    }
}

/// A placement loader whose repository reads, when they succeed, are
/// noted in an [`Unresponsive`]: the backend reached (readiness).
#[derive(Debug, Clone)]
pub struct RepositoryReads<L> {
    loader: L,
    reached: Unresponsive,
}

impl<L> RepositoryReads<L> {
    /// `loader`, its repository reads noted in `reached`.
    pub fn new(loader: L, reached: Unresponsive) -> Self {
        Self { loader, reached }
    }
}

impl<L: ModelLoader> ModelLoader for RepositoryReads<L> {
    fn load(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        self.loader.load(target, model)
    }

    fn unload(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        self.loader.unload(target, model)
    }

    fn repository(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<Repository, LoadError>> + Send + 'static {
        let read = self.loader.repository(target);
        let reached = self.reached.clone();
        let (id, origin) = (target.id.clone(), target.address.clone());
        async move {
            let repository = read.await;
            if repository.is_ok() {
                reached.note_reached(&id, &origin);
            }
            repository
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

    fn at(port: u16) -> Origin {
        Origin::http(([127, 0, 0, 1], port).into())
    }

    #[test]
    fn lists_the_union_and_knows_an_only_model() {
        let catalog = Catalog::new();
        assert_eq!(catalog.only_model(), None, "nothing probed yet");
        catalog.note(&id("a"), Some((&at(1), Some(&[model("tiny")]))));
        catalog.note(&id("b"), Some((&at(2), Some(&[model("tiny")]))));
        assert_eq!(catalog.only_model(), Some(model("tiny")));
        catalog.note(
            &id("b"),
            Some((&at(2), Some(&[model("tiny"), model("big")]))),
        );
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

    #[test]
    fn holders_are_the_backends_listing_the_model_then_those_listing_none() {
        let catalog = Catalog::new();
        catalog.note(&id("a"), Some((&at(1), Some(&[model("tiny")]))));
        catalog.note(&id("b"), Some((&at(2), None)));
        catalog.note(&id("c"), Some((&at(3), Some(&[model("big")]))));
        let holders = catalog.holders(&model("tiny"));
        assert_eq!(holders.listed, [(id("a"), at(1))]);
        assert_eq!(holders.unlisted, [(id("b"), at(2))]);
        let none = catalog.holders(&model("other"));
        assert!(none.listed.is_empty());
        assert_eq!(none.unlisted.len(), 1, "b may hold anything");
        assert_eq!(none.others.len(), 2);
        assert_eq!(catalog.models().len(), 2, "an unlisted backend adds none");
    }
}
