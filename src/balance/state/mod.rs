//! What the balancer knows, shared by the request path and the background
//! tasks: the routing snapshot and the live state of each backend.
//!
//! Nothing here does IO or spawns; the request path reads it without a lock,
//! the [tasks](super::tasks) write it.
//!
//! | File | Holds |
//! |---|---|
//! | `shared.rs` | [`Shared`](shared::Shared): what every clone of one balancer shares — the snapshot, the config, demand, the counters; [`View`](shared::View), the same without the endpoint type |
//! | `table.rs` | the routing snapshot: ring and per-backend state, swapped atomically |
//! | `backend.rs` | one backend's live state: in flight, breaker, residency, latency, health |
//! | `fleet.rs` | what every backend of one balancer shares: settings from the config, gauges, pair breakers, placement |
//! | `traffic.rs` | request counts per backend and per branch |
//! | `in_flight.rs` | [`InFlight`](in_flight::InFlight): one picked request counted in flight, on its backend and in the fleet, until dropped |
//! | `cost.rs` | the cost of one more request, and the latency estimate |
//! | `assign.rs` | which backends own each model in demand: consistent hashing with bounded loads over the models' work |
//! | `assigned.rs` | those owners as the picks read them, and a pick's walk: the assigned owners, then the ring |
//! | `demand.rs` | each model's share of recent inference traffic, and its owner count |
//! | `residency.rs` | which models a backend holds, as far as the balancer knows |
//! | `health.rs` | a backend's health as the request path records and reads it |
//! | `placement.rs` | the book of on-demand model loads |
//! | `load_limits.rs` | the bounds on those loads: per backend at once, per model over time |
//! | `scoped.rs` | breakers per (backend, model) pair |
//! | `lru.rs` | a bounded least-recently-used map (for `scoped.rs`) |
//! | `clock.rs` | one pick's time, read only if a step needs it |
//! | `limit.rs` | each backend's admission limit, fixed or adaptive (AIMD) |
//! | `queue.rs` | the bounded queue of requests waiting for room, by urgency |
//! | `stream.rs` | each backend's streamed answers: time to first token, time per output token |
//! | `prefix.rs` | which prefix groups and sessions a backend served recently (approximate, bounded) |

pub(crate) mod assign;
pub(crate) mod assigned;
pub(crate) mod backend;
pub(crate) mod clock;
pub(crate) mod cost;
pub(crate) mod demand;
pub(crate) mod fleet;
pub(crate) mod health;
pub(crate) mod in_flight;
pub(crate) mod limit;
pub(crate) mod load_limits;
pub(crate) mod lru;
pub(crate) mod placement;
pub(crate) mod prefix;
pub(crate) mod queue;
pub(crate) mod residency;
pub(crate) mod scoped;
pub(crate) mod shared;
pub(crate) mod stream;
pub(crate) mod table;
pub(crate) mod traffic;
