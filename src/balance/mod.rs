//! The model-aware balancer: affinity for inference, P2C for updates.
//!
//! ```
//! use tower::{discover::ServiceList, service_fn, ServiceExt};
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let backends = (0..4).map(|i| {
//!     let endpoint = service_fn(move |_req: http::Request<String>| async move {
//!         Ok::<_, std::io::Error>(http::Response::new(format!("backend {i}")))
//!     });
//!     Backend::new(BackendId::new(&format!("node-{i}")).unwrap(), endpoint)
//! });
//! let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default()).unwrap();
//!
//! let req = || http::Request::post("/infer").header("x-model-id", "llama-3-8b").body(String::new()).unwrap();
//! let first = balancer.clone().oneshot(req()).await.unwrap().into_body().into_inner();
//! let again = balancer.clone().oneshot(req()).await.unwrap().into_body().into_inner();
//! assert_eq!(first, again, "an idle model sticks to its primary owner");
//! let stats = balancer.handle().stats();
//! assert_eq!((stats.cold_owner, stats.resident_owner), (1, 1), "loaded once, then warm");
//! # }
//! ```
//!
//! [`ModelBalancer`] routes each request by its [`RouteInfo`]:
//!
//! * **inference** goes to the model's *owners*, the first `k` distinct
//!   backends on its ring walk with a model slot left
//!   ([`BackendMeta::with_model_slots`](crate::backend::BackendMeta::with_model_slots)): every 250 ms the balancer plans
//!   the owners of the models in demand, in order of hash, each keeping
//!   the owners it had while they have a slot, then taking the first
//!   backends along its walk with one (those where it is resident first;
//!   with none, the first along its walk) — consistent hashing with
//!   bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA 2018) with
//!   a backend's model slots as its bound, so that no backend owns more
//!   models than it holds and evicts, for ever, what the next request
//!   needs. A model with no demand yet (and a prefix group) takes its
//!   ring walk as it is. `k` follows demand: a model gets
//!   `ceil(share × work × n / owner_load)` owners within `min_owners ..=
//!   owners` (default 1 ..= 2; or a fixed `k` per model,
//!   [`BalanceConfigBuilder::model_owners`]), where `share` is its share
//!   of recent inference requests, `work` its requests' work over the
//!   mean, `n` the number of backends and `owner_load`
//!   ([`BalanceConfigBuilder::owner_load`]) by default the bounded-load
//!   factor `c` (1.25). `k`
//!   grows at once and shrinks one owner at a time, only once the share is
//!   a quarter of an owner's load below the boundary, so it does not flap.
//!   Among the eligible owners (breaker admitting, not ejected by health,
//!   not removed) under the
//!   bounded-load cap `ceil(c × (total in-flight + 1) / n)` (Mirrokni,
//!   Thorup and Zadimoghaddam, 2016), those with the model **resident** come
//!   first — where it was served before those where it is still loading —
//!   chosen by P2C on the cost `(in-flight / ramp + 1) × latency EWMA /
//!   max(health, 0.05)` (health: the backend's [score](crate::health);
//!   ramp: its warm-up weight, 1 once warm; the latency EWMA of a backend
//!   with no answer in a health interval relaxes toward the median of the
//!   others', [`BalanceConfigBuilder::latency_decay`], so that one slow
//!   answer does not keep an idle backend out for good): the cheaper of
//!   the two sampled, costs within 10% of each other a tie broken at
//!   random, a backend at the health floor never over one above it, and
//!   a backend just readmitted by health tried first, as a half-open
//!   breaker is; else the first cold owner under the cap with no
//!   load in progress loads it (loads hold memory bandwidth and often a
//!   serving slot, and piled onto one backend they stall its warm traffic,
//!   so a backend busy loading is passed over for a new load while another
//!   owner or a free-slot spill can take it). When every owner is out the
//!   request **spills** along the ring: to a backend where the model is
//!   resident, else — while the owners' copy was sent there under 2 s ago
//!   and may still be loading — to one with a free model slot and no load
//!   in progress (nothing is evicted); otherwise it waits on its cheapest
//!   owner, loading or not: a cold load
//!   elsewhere costs more than a passing queue, and one that evicts a model
//!   in use starts a cascade of evictions. With no owner eligible at all,
//!   it goes where the model is resident, else where loading it evicts the
//!   model idle longest;
//! * **residency** is learned from routing — a model sent to a backend is
//!   resident there from then on, *loading* until a request for it
//!   succeeds there, then *served*, until `model_slots` other models were
//!   sent there since ([`BackendMeta::with_model_slots`](crate::backend::BackendMeta::with_model_slots), the server's LRU)
//!   — and declared, served, by metadata
//!   ([`BackendMeta::with_resident_models`](crate::backend::BackendMeta::with_resident_models)) or the handle
//!   ([`BalancerHandle::set_resident_models`]); a server's own list, from
//!   a probe of its model repository ([`BalancerHandle::spawn_probes`]) or
//!   a response header ([`ResidencyHeader`]), marks the listed models
//!   served and drops those it evicted, keeping loads in progress;
//! * **urgency**: `High` takes the cheapest resident owner under the cap
//!   (no sampling); `Critical` takes the cheapest resident owner even over
//!   the cap, and is sent to a resident backend past the owners before any
//!   cold one;
//! * **updates** go to the cheaper, by the same cost, of two eligible
//!   backends sampled uniformly (power of two choices; Mitzenmacher, 2001),
//!   with the RNG injectable ([`ModelBalancer::from_rng`]);
//! * **health**: every backend is scored each second from its outcomes
//!   and probes ([`crate::health`]); a failing backend or a latency
//!   outlier is ejected (at most 30% of them at once), a joining one warms
//!   up;
//! * **panic mode**: when fewer than `panic_threshold` (default 50%) of the
//!   backends are eligible (not removed, not ejected by health, breaker
//!   closed, or half-open with a probe permit left, or open with its time
//!   up, and not kept in only by the ejection cap: a backend health asks
//!   to eject that the cap holds in counts as unhealthy here, as in
//!   Envoy), requests are routed over all of them, breakers
//!   bypassed, rather than piled onto the few left (Envoy's panic
//!   threshold) — with every backend unhealthy, the traffic spreads over
//!   the fleet; P2C's choices then go by in-flight alone, ties at random
//!   (every health score at the floor, every estimate full of failure
//!   penalties: the cost is no guide). With panic mode off (`panic_threshold` 0), the backends
//!   the cap holds in take the traffic;
//! * with no backend admitting the request, the response future fails at
//!   once with [`NoHealthyBackend`] naming the model; an unreadable route
//!   fails with [`InvalidRoute`]. Every branch (resident owner, cold owner,
//!   spill, panic, update, none, invalid) is counted in [`BalanceStats`].
//!
//! Callers that are not `Service`s use [`ModelBalancer::pick`]: the same
//! decision and state, returning the backend's endpoint and a [`Guard`]
//! that takes the outcome back (dropped: cancelled).
//!
//! The balancer **sheds**, it does not reserve: routing depends on the
//! request, which `poll_ready` never sees, so `poll_ready` is always ready
//! and `call` picks a backend and calls a clone of its endpoint — at once
//! if the clone is ready (hyper-util's client always is), else from the
//! response future once it is, the clone and the request then waiting in
//! one heap cell. Endpoints are therefore `Clone`, as hyper-util's client
//! and tonic's `Channel` are. A `call` not preceded by that `poll_ready`
//! fails with [`NotReady`](crate::error::NotReady), routing and counting
//! nothing (the crate's [readiness contract](crate#readiness)).
//!
//! The estimates are fed by **samples** of each clone's requests. One
//! request in 4 (and a clone's first) counts in its model's share of
//! demand. Requests are timed (latency, health, the recency of resident
//! models) at a rate that follows the clone's traffic: every request while
//! a clone sends up to about 10,000 a second, measured over at least 1 ms,
//! then one in 2, 4, 8 or 16, keeping the timed ones about 100 µs apart (a
//! timed request costs about 150 ns more: two clock reads and the
//! records). A clone made per request (axum's, `clone().oneshot()`)
//! counts and times every request, as pick-API guards are always timed.
//! (A balancer shared by both kinds of callers therefore counts a
//! per-request clone's models at up to 4 times their share next to a
//! long-lived clone's.)
//! Every outcome reaches the breaker and every failure the error rate;
//! the latency estimates take timed requests only, successes and failures
//! alike, so that a sample does not inflate the share of failures.
//!
//! Backends come from any [`tower::discover::Discover`] yielding
//! [`Backend`](crate::backend::Backend)s, driven by a background task; each batch of changes is
//! published as a new snapshot (ring and backend table) swapped atomically,
//! and the pick path reads it without a lock. A request counts as in flight
//! from the pick until the end of its response *body* (or until the body is
//! dropped); its outcome, as the config's classifier reads it
//! ([`BalanceConfigBuilder::classifier`]; by default 5xx or an error fail,
//! 429 is an overload, other 4xx are the caller's), reaches the backend's
//! circuit breaker then. Over gRPC, where a failure is an HTTP 200 with a
//! `grpc-status`, set [`Classifier::grpc`](crate::classify::Classifier::grpc):
//! the status in a trailers-only head, else in the trailers, decides.
//!
//! **Any request and response**: the balancer routes any request that is
//! [`Routable`](crate::route::Routable) (`http::Request<B>`, or a type of
//! yours that gives its `RouteInfo`), and [`ModelBalancer::at_response`]
//! records each outcome when the response arrives, classified by a
//! classifier of yours, for endpoints whose responses have no streaming
//! body (`http::Response<Bytes>`, a non-HTTP reply). The requirements are
//! a table in [`ModelBalancer`]'s docs.
//!
//! # Overload
//!
//! Without admission (the default) the balancer never refuses for load:
//! past the fleet's capacity every request waits in a server's queue
//! behind every other, and latency grows until deadlines expire. With
//! [`BalanceConfigBuilder::admission`] each backend takes at most its
//! [`Limit`] of requests in flight — fixed, or adaptive (AIMD, after
//! Netflix's `concurrency-limits`) — and the balancer sheds the rest:
//!
//! * a backend at its limit is passed over as one over the bounded-load
//!   cap is, for an owner or a backend past the owners that **serves** the
//!   model and has room; a backend under its limit counts as under the cap
//!   (the cap follows the fleet's load, which shedding keeps low). A cold
//!   copy of a model the fleet holds is made only on an idle owner (no
//!   request in flight): in overload a model load holds a serving slot for
//!   as long as many warm requests take and evicts a model in use;
//! * with every candidate at its limit the request is **saturated**: it
//!   waits in the balancer's bounded queue as long as its urgency allows
//!   ([`AdmissionConfigBuilder::max_wait`]: `Normal` 0 — shed at once —,
//!   `High` 100 ms, `Critical` 1 s), retrying its pick when woken — each
//!   request that ends wakes the next eight waiters in turn, the most
//!   urgent first — or fails at once with
//!   [`Overloaded`](crate::error::Overloaded) carrying a retry-after. An
//!   arrival does not take room a request of its urgency or higher waits
//!   for, for the same model. A full queue sheds its youngest
//!   least urgent waiter for a more urgent arrival. `Critical` requests
//!   also have headroom above the limit
//!   ([`AdmissionConfigBuilder::critical_headroom`], a quarter): `Normal`
//!   is shed first, `Critical` last.
//!
//! The contract, as tower documents `LoadShed`: `poll_ready` is always
//! ready, and `call` never queues unboundedly — its future resolves at
//! once with `Overloaded` (within the `call`, nothing sent, counted in
//! [`BalanceStats`]'s `shed_*`), or after the request waited at most its
//! `max_wait`, or with the backend's answer. What is around the balancer:
//!
//! * tower's **`LoadShed` above** the balancer never sheds (the balancer is
//!   always ready); its errors are the balancer's `Overloaded`;
//! * a **`ConcurrencyLimit` above** caps the requests the balancer holds
//!   over the whole fleet, making callers wait in `poll_ready` without
//!   regard to model or urgency: prefer admission's per-backend limits;
//! * a **`ConcurrencyLimit` below**, on an endpoint, makes that endpoint
//!   not ready while full: a request picked there waits in the response
//!   future for its permit, counted in the backend's in flight (so
//!   admission, whose limit should not exceed it, sees it).
//!
//! ```
//! use std::time::Duration;
//! use tower::{discover::ServiceList, service_fn, ServiceExt};
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{AdmissionConfig, BalanceConfig, Limit, ModelBalancer};
//! use tower_model_balance::error::Overloaded;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let gpu = service_fn(|_req: http::Request<String>| async {
//!     tokio::time::sleep(Duration::from_secs(1)).await;
//!     Ok::<_, std::io::Error>(http::Response::new(String::from("ok")))
//! });
//! let backends = ServiceList::new([Backend::new(BackendId::new("gpu-0").unwrap(), gpu)]);
//! let admission = AdmissionConfig::builder(Limit::fixed(1)).build().unwrap();
//! let config = BalanceConfig::builder().admission(admission).build().unwrap();
//! let balancer = ModelBalancer::new(backends, config).unwrap();
//! let req = || http::Request::post("/infer").header("x-model-id", "llama").body(String::new()).unwrap();
//!
//! let running = tokio::spawn(balancer.clone().oneshot(req()));
//! tokio::task::yield_now().await;
//! let err = balancer.clone().oneshot(req()).await.unwrap_err();
//! let shed = err.downcast_ref::<Overloaded>().unwrap();
//! assert_eq!(shed.retry_after, Duration::from_secs(1));
//! assert_eq!(balancer.handle().stats().shed_normal, 1);
//! # running.await.unwrap().unwrap(); }
//! ```
//!
//! # Streams
//!
//! An answer whose head says `text/event-stream` (an OpenAI-compatible
//! `stream: true`) passes frame by frame; the request is in flight until
//! its body ends or is dropped (a caller that leaves frees the backend).
//! A call's latency stops at its body's first frame by default
//! ([`BalanceConfigBuilder::stop_point`]): for a stream the time to first
//! token is what the breaker's slow calls, health, the cost estimate and
//! an adaptive limit judge, never its length. Each backend's streams give
//! TTFT and TPOT ([`BackendStatus`]'s `ttft_*` and `tpot_mean_ms`, and
//! histograms in [`metrics`](crate::metrics)). A `200` stream carrying an
//! error event, or ending before `data: [DONE]`, is a failure. Hedging and
//! retrying on the first token is
//! [`hedge::FirstFrameLayer`](crate::hedge::FirstFrameLayer)'s; see
//! `docs/streaming.md`.
//!
//! # Prefix affinity
//!
//! For a fleet of LLM servers that all hold one model, the model ID says
//! nothing about where a request is cheap: its prompt's cached prefix
//! (KV cache) does. A request whose route carries a
//! [`PrefixKey`](crate::route::PrefixKey) — set by
//! [`ModelFromBodyBuilder::prefix_bytes`](crate::route::ModelFromBodyBuilder::prefix_bytes)
//! and [`session_header`](crate::route::ModelFromBodyBuilder::session_header),
//! or by any layer in [`RouteInfo::prefix`](crate::route::RouteInfo::prefix)
//! — is routed by the key's group where it would be by its model: the
//! group's owners are its ring walk, their number its demand (a hot system
//! prompt gets more owners, a cooling one gives them back), all under the
//! bounded-load cap. Among the owners that serve the model under the cap,
//! one whose record says it served the request's session comes first, then
//! one that served its group, then P2C on cost; a spilled request goes
//! where its session or group spilled before. The record is a guess, 4096
//! direct-mapped tags per backend (16 KiB, allocated at its first key),
//! written by the pick. Residency, breakers and the queue stay the model's.
//! With [`BalanceConfigBuilder::receipts`] on, each response carries a
//! [`RoutingReceipt`]: the branch, the owners, the predicted
//! [`PrefixHit`], the runner-up. See `docs/prefix.md`.
//!
//! ```
//! use tower_model_balance::route::{ModelFromBodyLayer, ModelId, PrefixKey, RouteInfo};
//!
//! // From an OpenAI body's prompt (its first 256 bytes) and a session header.
//! let layer = ModelFromBodyLayer::builder()
//!     .prefix_bytes(256)
//!     .session_header(http::HeaderName::from_static("x-session-id"))
//!     .build()
//!     .unwrap();
//! # drop(layer);
//! // Or from a layer of one's own.
//! let model = ModelId::new("llama-3-8b").unwrap();
//! let key = PrefixKey::from_prompt(&model, b"system\nYou are ACME's assistant.\n");
//! let mut route = RouteInfo::new(model);
//! route.prefix = Some(key.with_session(b"conv-42"));
//! assert!(route.prefix.is_some());
//! ```
//!
//! Ring changes are **staged**: when backends join or change weight, every
//! model they take is a cold load on its new owner, so their ring points
//! enter a share at a time ([`StagingConfig`]: by default at most 1% of the
//! ring's points per step, about one model in a hundred, steps 5 s apart),
//! a joining backend owning part of its models until the last step. A
//! change arriving meanwhile is published at once and re-targets the next
//! step. A removed backend is not picked again at once (nothing to stage:
//! its models must move), and the first backend set lands in one step. At
//! rest the ring is exactly the one the weights define, so gateways that
//! share backends and ring config agree on owners again — those that also
//! see the same models in demand and the same residency agree on the
//! planned owners too.
//!
//! A breaker covers a backend by default. A multi-model server can fail for
//! one model (an adapter that does not load, weights that do not fit) and
//! serve the rest well; with [`BreakerScope::BackendModel`] a breaker covers
//! one (backend, model) pair instead, so failures for one model eject the
//! backend for that model only. The pairs tracked are bounded
//! (`max_pairs`, least recently used evicted); checking a pair takes no
//! lock while every pair near it is closed, taking a permit takes a short
//! one. [`BalancerHandle::breaker_state`] reads a pair's state.
//!
//! [`RouteInfo`]: crate::route::RouteInfo
//! [`NoHealthyBackend`]: crate::error::NoHealthyBackend
//! [`InvalidRoute`]: crate::error::InvalidRoute

mod choose;
mod completion;
pub(crate) mod config;
pub(crate) mod error;
pub mod future;
mod handle;
mod mix;
mod queued;
mod receipt;
mod refused;
mod service;
mod state;
mod stats;
mod tasks;

pub use self::choose::decide::Picked;
pub use self::completion::body::ResponseBody;
pub use self::completion::guard::Guard;
pub use self::config::admission::{AdmissionConfig, AdmissionConfigBuilder, Limit};
pub use self::config::builder::BalanceConfigBuilder;
pub use self::config::fields::{BalanceConfig, BreakerScope, ResidencyHeader, StagingConfig};
pub use self::handle::BalancerHandle;
pub use self::receipt::{BlocksHeld, PrefixHit, RouteReason, RoutingReceipt};
pub use self::service::ModelBalancer;
pub use self::state::placement::PlacementStats;
pub use self::stats::{BackendStatus, BalanceStats};
