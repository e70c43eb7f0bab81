//! How a backend is chosen for one request.
//!
//! | File | Does |
//! |---|---|
//! | `decide.rs` | one routing decision, shared by the `Service` path and the pick API, in named steps: the ask, the queue's say, the rules, the pick (or the [refusal](super::refused)), the start (`start.rs`) |
//! | `ask.rs` | what is being routed: the request's [`Ask`](ask::Ask) built once from its route — owners sized (and counted in demand), the [`Exclusion`](ask::Exclusion) of a hedge's backup or a retry |
//! | `cached.rs` | the backends holding the most of the prompt's leading blocks, from their KV-cache events (feature `kv-events`) |
//! | `rules.rs` | the knobs of a pick, read from the config: the bounded-load factor, the panic threshold, placement |
//! | `pick.rs` | the pick over one table (pure: no IO, no allocation): panic mode, a hedge's exclusion, inference or update |
//! | `ctx.rs` | what a pick works on and gives: the result ([`Pick`](ctx::Pick) or [`Miss`](ctx::Miss)), and the view of one table (eligibility, room, permits, residency, the bounded-load cap, the panic threshold) |
//! | `inference.rs` | inference: owners by residency and cost, then spill along the ring, one named step a decision |
//! | `p2c.rs` | P2C's choice: two sampled uniformly, the cheaper taken (trial, health floor, cost) |
//! | `spill.rs` | spills past the owners: a backend with the model resident, else one where loading it evicts the least |
//! | `start.rs` | the picked request starts: counted in flight ([`InFlight`](crate::balance::state::in_flight::InFlight)), the model prefetched, its [`Guard`](crate::balance::completion::guard::Guard) made |
//! | `backup.rs` | a hedge's backup: a backend serving the model, else (the first attempt warm) one whose models are unknown, else none |
//! | `update.rs` | updates: the cheaper of two random backends (P2C) |
//! | `scratch.rs` | room for a pick's owner lists, kept by each clone |
//! | `sampler.rs` | which requests feed the estimates |
//! | `receipt.rs` | a pick's routing receipt: reason, owners, predicted prefix hit, runner-up (receipts on) |

pub(crate) mod ask;
pub(crate) mod backup;
pub(crate) mod cached;
pub(crate) mod ctx;
pub(crate) mod decide;
pub(crate) mod inference;
pub(crate) mod p2c;
pub(crate) mod pick;
pub(crate) mod receipt;
pub(crate) mod rules;
pub(crate) mod sampler;
pub(crate) mod scratch;
pub(crate) mod spill;
pub(crate) mod start;
pub(crate) mod update;

#[cfg(test)]
mod tests;
