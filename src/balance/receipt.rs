//! [`RoutingReceipt`]: why a request went where it went.

use std::fmt;

use http::HeaderValue;

use crate::backend::BackendId;
pub use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::traffic::Branch;

/// Why the balancer chose a backend: the branch of the pick that did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteReason {
    /// An owner of the request's model (or prefix group) with the model
    /// resident.
    ResidentOwner,
    /// An owner that loads the model for it.
    ColdOwner,
    /// Every owner was out (ineligible, over the bounded-load cap, at its
    /// admission limit): a backend further along the ring.
    Spill,
    /// Too few backends were eligible: routed over all of them, breakers
    /// bypassed.
    Panic,
    /// The backend whose prefix cache holds the most of the request's
    /// leading blocks, as its KV-cache events said (feature `kv-events`);
    /// [`RoutingReceipt::cached_blocks`] says how many.
    CachedBlocks,
    /// An update: the cheaper of two sampled backends.
    Update,
}

impl RouteReason {
    /// The reason in `snake_case`, as the receipt's header writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::ResidentOwner => "resident_owner",
            Self::ColdOwner => "cold_owner",
            Self::Spill => "spill",
            Self::Panic => "panic",
            Self::CachedBlocks => "cached_blocks",
            Self::Update => "update",
        }
    }

    pub(crate) fn of(branch: Branch) -> Self {
        match branch {
            Branch::ResidentOwner => Self::ResidentOwner,
            Branch::ColdOwner => Self::ColdOwner,
            Branch::Spill => Self::Spill,
            Branch::Panic => Self::Panic,
            Branch::CachedBlocks => Self::CachedBlocks,
            Branch::Update => Self::Update,
        }
    }
}

impl PrefixHit {
    /// The predicted hit in `snake_case`, as the receipt's header writes
    /// it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Group => "group",
            Self::Session => "session",
        }
    }
}

/// Why and where one request was routed, with
/// [`BalanceConfigBuilder::receipts`](crate::balance::BalanceConfigBuilder::receipts)
/// on: in the extensions of the response (an `http::Response` whose body
/// the balancer tracks), and from [`Guard::receipt`](crate::balance::Guard::receipt)
/// on the pick API.
///
/// For a request that missed the cache it hoped for, it says which branch
/// chose the backend, how many owners the request's model or prefix group
/// had then, what the backend's prefix record predicted, and which backend
/// came next.
///
/// ```
/// use tower_model_balance::balance::{PrefixHit, RouteReason, RoutingReceipt};
///
/// # fn show(receipt: &RoutingReceipt) {
/// if receipt.reason == RouteReason::Spill || receipt.prefix_hit == PrefixHit::None {
///     println!("{}", receipt); // backend=node-3; reason=spill; owners=2; prefix_hit=none; runner_up=node-5
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoutingReceipt {
    /// The backend chosen.
    pub backend: BackendId,
    /// The branch of the pick that chose it.
    pub reason: RouteReason,
    /// How many owners the request's model, or prefix group, had when it
    /// was routed (0 for an update).
    pub owners: usize,
    /// What the chosen backend's prefix record predicted for the request's
    /// prefix key ([`PrefixHit::None`] without one).
    pub prefix_hit: PrefixHit,
    /// The backend the pick ranked next: among the other eligible owners
    /// (for a request with one owner, and for a spill, the next eligible
    /// backend along the ring), one with the model served first, then the
    /// longest predicted prefix hit, then the lowest cost. `None` when no
    /// other backend is eligible, and for an update.
    pub runner_up: Option<BackendId>,
    /// For a request carrying [`PromptBlocks`](crate::kv::PromptBlocks)
    /// (feature `kv-events`): its full blocks, how many of the leading
    /// ones the chosen backend held as its KV-cache events said, and the
    /// backend holding the most of them after it, with its count. `None`
    /// without prompt blocks.
    pub cached_blocks: Option<BlocksHeld>,
}

/// A receipt's account of the request's cached blocks (see
/// [`RoutingReceipt::cached_blocks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlocksHeld {
    /// The prompt's full blocks.
    pub total: usize,
    /// Of them, the leading ones the chosen backend held.
    pub held: usize,
    /// The backend holding the most after the chosen one (eligible or
    /// not), with how many; `None` when no other backend held any.
    pub runner_up: Option<(BackendId, usize)>,
}

impl BlocksHeld {
    #[cfg_attr(not(feature = "kv-events"), allow(dead_code))]
    pub(crate) fn new(total: usize, held: usize, runner_up: Option<(BackendId, usize)>) -> Self {
        Self {
            total,
            held,
            runner_up,
        }
    }
}

impl RoutingReceipt {
    /// The receipt as one header value:
    /// `backend=ID; reason=R; owners=K; prefix_hit=H[; runner_up=ID][; blocks=HELD/TOTAL[; blocks_runner_up=ID:HELD]]`.
    /// Backend IDs are visible ASCII or escaped (see [`BackendId`]), so the
    /// value is always valid.
    pub fn header_value(&self) -> HeaderValue {
        let text = self.to_string();
        HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("unrepresentable"))
    }
}

impl fmt::Display for RoutingReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backend={}; reason={}; owners={}; prefix_hit={}",
            self.backend,
            self.reason.as_str(),
            self.owners,
            self.prefix_hit.as_str()
        )?;
        if let Some(b) = &self.runner_up {
            write!(f, "; runner_up={b}")?;
        }
        if let Some(c) = &self.cached_blocks {
            write!(f, "; blocks={}/{}", c.held, c.total)?;
            if let Some((b, held)) = &c.runner_up {
                write!(f, "; blocks_runner_up={b}:{held}")?;
            }
        }
        Ok(())
    }
}
