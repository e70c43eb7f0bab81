//! How a backend is chosen for one request.
//!
//! | File | Does |
//! |---|---|
//! | `decide.rs` | one routing decision, shared by the `Service` path and the pick API: reads the route, sizes the owners, picks, counts, hands back a [`Guard`](super::completion::guard::Guard) |
//! | `pick.rs` | the pick over one table (pure: no IO, no allocation): panic mode, a hedge's exclusion, inference or update |
//! | `ctx.rs` | what a pick works on: the ask, the rules, the result, and the view of one table (eligibility, cost, the bounded-load cap) |
//! | `inference.rs` | inference: owners by residency and cost, then spill along the ring, one named step a decision |
//! | `spill.rs` | spills past the owners: a backend with the model resident, else one where loading it evicts the least |
//! | `backup.rs` | a hedge's backup: a backend serving the model, else (the first attempt warm) one whose models are unknown, else none |
//! | `update.rs` | updates: the cheaper of two random backends (P2C) |
//! | `sampler.rs` | which requests feed the estimates |
//! | `receipt.rs` | a pick's routing receipt: reason, owners, predicted prefix hit, runner-up (receipts on) |

pub(crate) mod ask;
pub(crate) mod backup;
pub(crate) mod ctx;
pub(crate) mod decide;
pub(crate) mod inference;
pub(crate) mod p2c;
pub(crate) mod pick;
pub(crate) mod receipt;
pub(crate) mod sampler;
pub(crate) mod scratch;
pub(crate) mod spill;
pub(crate) mod update;

#[cfg(test)]
mod tests;
