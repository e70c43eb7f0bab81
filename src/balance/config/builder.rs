//! [`BalanceConfigBuilder`]: the validated way to a [`BalanceConfig`].

use std::time::Duration;

use super::admission::AdmissionConfig;
use super::fields::{BalanceConfig, BreakerScope, ResidencyHeader, StagingConfig, MAX_PAIRS};
use crate::breaker::events::Hook;
#[cfg(doc)]
use crate::breaker::Transition;
use crate::breaker::{BreakerConfig, OnTransition};
use crate::classify::timing::StopPoint;
use crate::classify::Classifier;
use crate::error::InvalidConfig;
use crate::health::HealthConfig;
use crate::ring::RingConfig;
use crate::route::ModelId;

/// Builds a validated [`BalanceConfig`].
///
/// ```
/// use tower_model_balance::balance::BalanceConfig;
///
/// let config = BalanceConfig::builder().owners(3).build().unwrap();
/// assert_ne!(config, BalanceConfig::default());
/// assert_eq!(BalanceConfig::builder().owners(0).build().unwrap_err().field, "owners");
/// ```
#[derive(Debug, Clone)]
pub struct BalanceConfigBuilder {
    config: BalanceConfig,
}

impl BalanceConfigBuilder {
    /// Sets `k`, the most owners a model gets (1 ..= 1024; default 2).
    pub fn owners(mut self, k: usize) -> Self {
        self.config.owners = k;
        self
    }

    /// Sets the fewest owners a model gets (1 ..= `owners`; default 1).
    pub fn min_owners(mut self, k: usize) -> Self {
        self.config.min_owners = k;
        self
    }

    /// Sets the bounded-load factor `c` (1.0 ..= 100.0; default 1.25).
    pub fn load_factor(mut self, c: f64) -> Self {
        self.config.load_factor = c;
        self
    }

    /// Sets the load one model's traffic puts on each of its owners, as a
    /// multiple of the mean load per backend (requests in flight over the
    /// backends in the ring): above 0.0, up to `load_factor`; default
    /// `load_factor`, whatever that is set to.
    ///
    /// A model gets as many owners as its share of recent work needs for
    /// each to carry at most this much of it:
    /// `ceil(share × work × n / owner_load)`, within
    /// `min_owners ..= owners` (`share`: its share of recent inference
    /// requests; `work`: its latency over the mean, 0.25 ..= 4). At the
    /// default each owner of a popular model is at the bounded-load cap
    /// from that model alone, before its other models' requests: picks
    /// spill past the owners, or wait on one over the cap when every owner
    /// is at it.
    ///
    /// Lower it for servers that batch, with many requests in flight
    /// each (LLM servers with continuous batching): the popular models'
    /// owners then have room under the cap for the rest of their traffic.
    /// With so many requests in flight per backend the cap's rounding is
    /// small, so a tight `load_factor` is cheap there too. In the fleet
    /// simulation (`examples/simulate`, scenario `llm-batch`: about 21 in
    /// flight per backend) `owner_load` 0.75 with `load_factor` 1.15
    /// brings the busiest backend from 1.45 × the mean load to 1.19, with
    /// a lower p50 and p99 (1.1 alone: 1.34). The cost is more warm copies
    /// of the popular models — GPU memory and cold loads taken from the
    /// others (warm-hit 0.995 → 0.982 there). With few requests in flight
    /// per backend (the simulation's default scenario, about 2) the cost
    /// is the larger and the gain none: 0.75 lowered the warm-hit rate
    /// from 0.994 to 0.980 and raised p99 from 260 ms to 2.6 s, for 1.46 ×
    /// the mean against 1.50. Leave it at the default there.
    ///
    /// ```
    /// use tower_model_balance::balance::BalanceConfig;
    ///
    /// let config = BalanceConfig::builder()
    ///     .load_factor(1.1)
    ///     .owner_load(0.5)
    ///     .build()
    ///     .unwrap();
    /// let default = BalanceConfig::builder().load_factor(1.1).build().unwrap();
    /// assert_ne!(config, default, "load_factor unless set");
    /// let over = BalanceConfig::builder().owner_load(1.5).build();
    /// assert_eq!(over.unwrap_err().field, "owner_load");
    /// ```
    pub fn owner_load(mut self, load: f64) -> Self {
        self.config.owner_load = Some(load);
        self
    }

    /// Sets the panic threshold (0.0 ..= 1.0; default 0.5): when fewer
    /// than this share of the backends are eligible and healthy (breaker
    /// admitting, not ejected by health, and not kept in only by the
    /// ejection cap — [`HealthStatus::held_by_cap`](crate::health::HealthStatus::held_by_cap)),
    /// requests are routed over every backend, breakers bypassed, rather
    /// than piling onto the few left — Envoy's panic threshold. 0 turns
    /// panic mode off (the backends the cap holds in then serve).
    pub fn panic_threshold(mut self, share: f64) -> Self {
        self.config.panic_threshold = share;
        self
    }

    /// Sets the time constant `τ` of an idle backend's latency estimate
    /// (100 ms ..= 1 h; default 10 s).
    ///
    /// The estimate P2C's cost uses moves only with the answers a backend
    /// gives, so one slow answer (a long generation, a cold load) would
    /// price it out of every pick, and with no pick nothing would correct
    /// it. Each health interval with no timed answer from a backend moves
    /// its estimate `e` toward the median estimate `m` of the other
    /// backends in use (its own left out: with two backends the median
    /// would otherwise be the higher estimate, the idle one's own) as
    /// `m + (e − m) × exp(−dt / τ)`, in the spirit of tower's `PeakEwma`
    /// (whose RTT estimate decays with the time since its last sample). An
    /// idle backend is therefore within `f ×` the median after
    /// `τ × ln((e − m) / ((f − 1) × m))` plus one health interval, and
    /// P2C prefers it to a rival with `f − 1` requests in flight from then
    /// on: with the default τ, an estimate 100× the median is within 2×
    /// after 46 s and within 5× after 32 s. Against a rival with as many
    /// in flight (at light load, both idle) it takes no request until its
    /// cost is within P2C's tie band (10%): within 1.1× after 69 s for an
    /// estimate 100× the median, 57 s for one 30× (its health score's
    /// latency term recovers over the same time, with the health policy's
    /// `relax_half_life`). No user request goes to it by chance before
    /// then. A backend readmitted by health starts again at `m` (a guess
    /// that its first answer replaces) and takes the next request that
    /// samples it.
    pub fn latency_decay(mut self, tau: Duration) -> Self {
        self.config.latency_decay = tau;
        self
    }

    /// Gives `model` exactly `k` owners (1 ..= 1024), whatever its demand and
    /// whatever `owners` and `min_owners` say (the override wins) — e.g. a
    /// large model pinned to one backend, or a critical one always kept
    /// warm on three. A later call for the same model replaces the earlier
    /// one.
    pub fn model_owners(mut self, model: ModelId, k: usize) -> Self {
        self.config.model_owners.retain(|(m, _)| m != &model);
        self.config.model_owners.push((model, k));
        self
    }

    /// Sets the ring parameters.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.config.ring = ring;
        self
    }

    /// Sets the per-backend breaker policy.
    pub fn breaker(mut self, policy: BreakerConfig) -> Self {
        self.config.breaker = policy;
        self
    }

    /// Tells `hook` of every transition of a backend's breaker (the
    /// backend-level breakers; in [`BreakerScope::BackendModel`] the pair
    /// breakers are not reported), the backend's ID in
    /// [`Transition::backend`], after the breaker's lock is released. Also
    /// in `tracing` at debug level.
    ///
    /// ```
    /// use tower_model_balance::balance::BalanceConfig;
    /// use tower_model_balance::breaker::{BreakerState, Transition};
    ///
    /// let config = BalanceConfig::builder()
    ///     .on_breaker_transition(|t: &Transition| {
    ///         if let (BreakerState::Open, Some(backend)) = (t.to, &t.backend) {
    ///             eprintln!("{backend} opened: {:?}", t.reason);
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # drop(config);
    /// ```
    pub fn on_breaker_transition(mut self, hook: impl OnTransition) -> Self {
        self.config.breaker_hook = Some(Hook::new(hook));
        self
    }

    /// Routes by what each backend's prefix cache holds, as `index` says
    /// (feature `kv-events`; default: no index, prefix affinity only). A
    /// request carrying [`PromptBlocks`](crate::kv::PromptBlocks) in its
    /// extensions goes to the eligible backend, serving its model and under
    /// the bounded-load cap, that holds the most of its leading blocks — if
    /// it holds more of them than the backend the request's affinity
    /// chooses; a tie goes to the same backend on every replica
    /// (rendezvous order on the backends' IDs). Otherwise the request is
    /// routed as without the index, its ring walk keyed by its prefix key
    /// or its first block no backend holds (docs/prefix.md). The index is shared: an event source
    /// ([`kv::subscribe`](crate::kv::subscribe)) writes it.
    #[cfg(feature = "kv-events")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kv-events")))]
    pub fn kv_index(mut self, index: crate::kv::KvIndex) -> Self {
        self.config.kv_index = Some(index);
        self
    }

    /// Sets what one breaker covers (default [`BreakerScope::Backend`]):
    /// [`BreakerScope::BackendModel`] keeps a breaker, with the `breaker`
    /// policy, per (backend, model) pair, at most `max_pairs`
    /// (1 ..= 1 000 000) of them, least recently used evicted.
    pub fn breaker_scope(mut self, scope: BreakerScope) -> Self {
        self.config.breaker_scope = scope;
        self
    }

    /// Sets how joins and weight changes are staged into the ring.
    pub fn staging(mut self, staging: StagingConfig) -> Self {
        self.config.staging = staging;
        self
    }

    /// The most owners a model may be given: enough for every backend of
    /// a 1,000-backend fleet. Under Zipf(1.1) popularity over 10,000
    /// models the most popular draws 15% of the requests, which takes
    /// `ceil(0.15 × 1000 / 1.25)` = 120 owners at the default `c`; a cap
    /// of 16 left its owners overloaded (see `docs/simulation.md`, the fleet-scale
    /// simulation).
    pub const MAX_OWNERS: usize = 1024;

    /// How backend health is scored and when a backend is ejected (default
    /// [`HealthConfig::default`]).
    pub fn health(mut self, policy: HealthConfig) -> Self {
        self.config.health = policy;
        self
    }

    /// Learns residency from a response header (default: none; residency
    /// is then learned from routing, metadata, probes and the handle).
    pub fn residency_header(mut self, header: ResidencyHeader) -> Self {
        self.config.residency_header = Some(header);
        self
    }

    /// Sets what a response's outcome is read from — the outcome the
    /// backends' breakers, health and latency figures record at the end of
    /// the body (default [`Classifier::http`]: 5xx fail, 429 is an
    /// overload, other 4xx are the caller's; [`Classifier::grpc`] for
    /// backends spoken to over gRPC, whose failures come as an HTTP 200
    /// with a `grpc-status`; or your own, e.g. a 404 "model not loaded"
    /// counted as a failure).
    ///
    /// ```
    /// use tower_model_balance::balance::BalanceConfig;
    /// use tower_model_balance::classify::Classifier;
    ///
    /// // Backends spoken to over gRPC (tonic channels): `grpc-status` decides.
    /// let config = BalanceConfig::builder().classifier(Classifier::grpc()).build().unwrap();
    /// assert_ne!(config, BalanceConfig::default());
    /// ```
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.config.classifier = classifier;
        self
    }

    /// Turns per-backend admission on (default off: the balancer never
    /// refuses a request for load). Each backend then takes at most its
    /// [`Limit`](crate::balance::Limit) of requests in flight (`Critical`
    /// ones a little more); a backend at its limit is passed over like one
    /// over the bounded-load cap, and a request with every candidate at its
    /// limit waits for room or fails at once with
    /// [`Overloaded`](crate::error::Overloaded), by its urgency. See
    /// [the balancer's docs](crate::balance#overload) for the contract.
    pub fn admission(mut self, admission: AdmissionConfig) -> Self {
        self.config.admission = Some(admission);
        self
    }

    /// Where a call's latency stops for its backend's breaker (slow
    /// calls), health (its latency term), latency estimate (P2C's cost)
    /// and adaptive admission limit; it starts at the pick. Default
    /// [`StopPoint::FirstFrame`](crate::classify::StopPoint::FirstFrame):
    /// the first frame of the response body, which for a stream of tokens
    /// is the time to first token (TTFT). A 40 s generation whose first
    /// token came in 200 ms is not slow: how long a generation runs is the
    /// caller's `max_tokens`, not the backend's speed, while a slow first
    /// token is a backend queueing or prefilling slowly. For a response
    /// whose body comes in one frame the two are the same; a large answer
    /// that is not a stream (a JSON or tensor body in several frames) is
    /// judged at its first frame too. An event stream's first frame is its
    /// first `data:` chunk (comments are skipped); a body without a frame
    /// is timed whole.
    /// [`StopPoint::EndOfBody`](crate::classify::StopPoint::EndOfBody) times
    /// whole calls; [`StopPoint::Headers`](crate::classify::StopPoint::Headers)
    /// stops at the head. The models' work (demand) always counts whole
    /// calls. Under [`ModelBalancer::at_response`](crate::balance::ModelBalancer::at_response)
    /// there is no body to read: calls are timed to their response.
    ///
    /// ```
    /// use tower_model_balance::balance::BalanceConfig;
    /// use tower_model_balance::classify::StopPoint;
    ///
    /// let whole = BalanceConfig::builder().stop_point(StopPoint::EndOfBody).build().unwrap();
    /// assert_ne!(whole, BalanceConfig::default());
    /// ```
    pub fn stop_point(mut self, stop: StopPoint) -> Self {
        self.config.stop_point = stop;
        self
    }

    /// Whether each request gets a [`RoutingReceipt`](crate::balance::RoutingReceipt)
    /// — the reason for its backend, the owner count, the predicted prefix
    /// hit, the runner-up — in its response's extensions (and on its
    /// [`Guard`](crate::balance::Guard)). Default `false`: a receipt costs
    /// one allocation and a walk over the owners per request.
    pub fn receipts(mut self, on: bool) -> Self {
        self.config.receipts = on;
        self
    }

    /// Validates and returns the config.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `owners` when it is outside 1 ..= 1024,
    /// `min_owners` when outside 1 ..= `owners`, `load_factor` when
    /// outside 1.0 ..= 100.0, `owner_load` when not above 0.0 and at most
    /// `load_factor`, `panic_threshold` when outside 0.0 ..= 1.0,
    /// `latency_decay` when outside 100 ms ..= 1 h,
    /// `model_owners` when a model's `k` is outside 1 ..= 1024,
    /// `breaker_scope` when `BackendModel`'s `max_pairs` is outside
    /// 1 ..= 1 000 000.
    pub fn build(self) -> Result<BalanceConfig, InvalidConfig> {
        if !(1..=Self::MAX_OWNERS).contains(&self.config.owners) {
            return Err(InvalidConfig::new("owners", "1 ..= 1024"));
        }
        if !(1..=self.config.owners).contains(&self.config.min_owners) {
            return Err(InvalidConfig::new("min_owners", "1 ..= owners"));
        }
        if !(1.0..=100.0).contains(&self.config.load_factor) {
            return Err(InvalidConfig::new("load_factor", "1.0 ..= 100.0"));
        }
        if let Some(load) = self.config.owner_load {
            if !(load > 0.0 && load <= self.config.load_factor) {
                return Err(InvalidConfig::new(
                    "owner_load",
                    "above 0.0, up to load_factor",
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.config.panic_threshold) {
            return Err(InvalidConfig::new("panic_threshold", "0.0 ..= 1.0"));
        }
        let decay = Duration::from_millis(100)..=Duration::from_secs(3_600);
        if !decay.contains(&self.config.latency_decay) {
            return Err(InvalidConfig::new("latency_decay", "100 ms ..= 1 h"));
        }
        if self
            .config
            .model_owners
            .iter()
            .any(|&(_, k)| !(1..=Self::MAX_OWNERS).contains(&k))
        {
            return Err(InvalidConfig::new(
                "model_owners",
                "1 ..= 1024 owners per model",
            ));
        }
        if let BreakerScope::BackendModel { max_pairs } = self.config.breaker_scope {
            if !(1..=MAX_PAIRS).contains(&max_pairs) {
                return Err(InvalidConfig::new(
                    "breaker_scope",
                    "1 ..= 1 000 000 pairs (BackendModel's max_pairs)",
                ));
            }
        }
        Ok(self.config)
    }
}

impl BalanceConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> BalanceConfigBuilder {
        BalanceConfigBuilder {
            config: Self::default(),
        }
    }

    /// A builder starting from this config's settings, to change some of
    /// them in code: a config read from a file (`config::StackConfig`)
    /// given what a file has no key for (a residency header, a
    /// breaker-transition hook). The builder validates again.
    ///
    /// ```
    /// use tower_model_balance::balance::BalanceConfig;
    ///
    /// let read = BalanceConfig::builder().owners(3).build().unwrap();
    /// let changed = read.to_builder().receipts(true).build().unwrap();
    /// assert_eq!(changed, BalanceConfig::builder().owners(3).receipts(true).build().unwrap());
    /// ```
    pub fn to_builder(&self) -> BalanceConfigBuilder {
        BalanceConfigBuilder {
            config: self.clone(),
        }
    }
}
