//! Inference: the model's owners by residency and cost under the
//! bounded-load cap, then a spill along the ring (see the
//! [balancer's docs](crate::balance) for the order).
//!
//! [`pick_inference`] reads top-down, one decision a step: the eligible
//! owners gathered, the backend holding the most of the prompt's cached
//! blocks (feature `kv-events`), else the warm choice by urgency, the fallbacks in turn
//! (a cold owner, a warm spill, a second copy, a cold spill for an
//! unseen model, a wait on an owner, a backend past the owners), the
//! admission fit, then the breaker's say. What the steps share — the
//! context, the ask, the rules and the cap — is an [`Inference`].

use std::cell::OnceCell;

use crate::balance::choose::ask::Ask;
use crate::balance::choose::cached;
use crate::balance::choose::ctx::{
    load_cap, Ctx, Pick, LOADING_GRACE_MS, LOADS_AT_ONCE, MAX_OWNERS, SPILL_SCAN,
};
use crate::balance::choose::rules::Rules;
use crate::balance::choose::scratch::Scratch;
use crate::balance::choose::spill::{spill_cold, spill_resident, Room};
use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::residency::Presence;
use crate::balance::state::traffic::Branch;
use crate::route::{PrefixKey, Urgency};

/// A backend chosen, with the branch it counts in; `None`: none yet.
type Choice = Option<(usize, Branch)>;

/// Inference: among the model's eligible owners, the resident ones under
/// the bounded-load cap by P2C on cost — those where the model was served
/// first, then those where it may still be loading (a request there would
/// wait for the load) — else the first cold owner under the cap with no
/// load in progress. With every owner out, spill along the ring: to a
/// backend under the cap with the model resident, else — while the owners'
/// copy may still be loading — with a free model slot and no load in
/// progress (nothing evicted); else, for a model without demand cold on
/// every owner while every owner is at the cap (a hash flood's IDs), a
/// backend under the cap where loading it evicts the least; else wait on
/// the cheapest owner (resident first). With no
/// owner eligible: a resident backend, else the one where loading evicts
/// the model idle longest. `High` urgency takes the cheapest resident owner
/// instead of sampling; `Critical` takes the cheapest resident owner even
/// over the cap, and goes to a resident backend past the owners before any
/// cold one. Under admission a choice at its limit, or without the model
/// while the fleet holds it (but on an idle owner), gives way to the
/// cheapest owner serving the model with room, else a backend past the
/// owners serving it with room, else to none (saturation).
pub(crate) fn pick_inference(
    ctx: &Ctx<'_>,
    ask: &Ask,
    rules: &Rules,
    random: &mut impl FnMut() -> u64,
    scratch: &mut Scratch,
) -> Option<Pick> {
    let p = Inference::new(ctx, ask, rules);
    let owners = p.owners(scratch);
    let warm = p.warm(&owners, random);
    let warm = cached::choice(ctx, &ask.cached, warm, |i| p.under(i)).or(warm);
    let prefetch = p.prefetch(&owners, warm);
    let choice = warm
        .or_else(|| p.cold_owner(&owners))
        .or_else(|| p.spill_warm())
        .or_else(|| p.second_copy(&owners))
        .or_else(|| p.unseen_spill(&owners))
        .or_else(|| p.wait_on_owner(&owners))
        .or_else(|| p.past_the_owners());
    let choice = p.fit(&owners, choice);
    if let Some(mut pick) = choice.and_then(|(i, branch)| ctx.admit(i, branch)) {
        pick.prefetch = prefetch;
        return Some(pick);
    }
    p.first_admitting()
}

/// What every step of one inference pick reads.
struct Inference<'p, 'a> {
    ctx: &'p Ctx<'a>,
    ask: &'p Ask,
    rules: &'p Rules,
    /// How many owners are walked: [`Ask::owners`], 1 to [`MAX_OWNERS`].
    k: usize,
    /// Whether admission is on.
    admission: bool,
    /// The bounded-load cap, computed on first need. It is at least 1
    /// (c ≥ 1): an idle backend is under it without summing the fleet's
    /// counters.
    cap: OnceCell<usize>,
}

/// The model's eligible owners in walk order, and those of them under the
/// cap with the model served, or still loading: the listed prefixes of
/// three lists of up to `k` in the clone's [`Scratch`].
struct Owners<'s> {
    eligible: &'s [usize],
    served_under: &'s [usize],
    loading_under: &'s [usize],
}

impl<'p, 'a> Inference<'p, 'a> {
    fn new(ctx: &'p Ctx<'a>, ask: &'p Ask, rules: &'p Rules) -> Self {
        Self {
            ctx,
            ask,
            rules,
            k: ask.owners.clamp(1, MAX_OWNERS),
            admission: ctx.table.under_admission(),
            cap: OnceCell::new(),
        }
    }

    /// Whether backend `i` is under the bounded-load cap. Under admission
    /// a backend under its limit is under the cap too: the cap follows the
    /// fleet's load, which shedding keeps low while the popular models'
    /// owners are full, and a cap below the limit would send their traffic
    /// to cold copies (a model load holds a serving slot for as long as
    /// many warm requests take).
    #[inline]
    fn under(&self, i: usize) -> bool {
        let table = self.ctx.table;
        match table.backends[i].load() {
            0 => true,
            load => {
                load < *self
                    .cap
                    .get_or_init(|| load_cap(table, self.rules.load_factor))
                    || (self.admission && self.ctx.room(i))
            }
        }
    }

    /// The pick's time on the fleet's millisecond clock.
    #[inline]
    fn now_ms(&self) -> u64 {
        self.ctx.now_ms()
    }

    /// Whether backend `i` may start loading the model: fewer than
    /// [`LOADS_AT_ONCE`] loads in progress there, and it did not refuse
    /// the model lately.
    fn can_load(&self, i: usize) -> bool {
        let residency = &self.ctx.table.backends[i].residency;
        let now_ms = || self.now_ms();
        residency.loading(now_ms, LOADING_GRACE_MS) < LOADS_AT_ONCE
            && !residency.refused(self.ask.key, now_ms)
    }

    /// Those of `set` with the model resident (served, or maybe loading).
    fn resident<'s>(&self, set: &'s [usize]) -> impl Iterator<Item = usize> + use<'s, 'p, 'a> {
        let (ctx, key) = (self.ctx, self.ask.key);
        set.iter().copied().filter(move |&i| ctx.resident(i, key))
    }

    /// Those of `set` where the model was served.
    fn served<'s>(&self, set: &'s [usize]) -> impl Iterator<Item = usize> + use<'s, 'p, 'a> {
        let (ctx, key) = (self.ctx, self.ask.key);
        set.iter()
            .copied()
            .filter(move |&i| ctx.presence(i, key) == Presence::Served)
    }

    /// The eligible owners, walked in order, listed in the clone's
    /// scratch (only the listed prefix of each list is read after).
    fn owners<'s>(&self, scratch: &'s mut Scratch) -> Owners<'s> {
        let (ctx, k) = (self.ctx, self.k);
        let (all, rest) = scratch.room(3 * k).split_at_mut(k);
        let (served, loading) = rest.split_at_mut(k);
        let (mut all_len, mut served_len, mut loading_len) = (0, 0, 0);
        for i in self
            .ask
            .walk(ctx.table)
            .take(k)
            .filter(|&i| ctx.eligible(i))
        {
            all[all_len] = i;
            all_len += 1;
            if !self.under(i) {
                continue;
            }
            match ctx.presence(i, self.ask.key) {
                Presence::Served => {
                    served[served_len] = i;
                    served_len += 1;
                }
                Presence::Loading => {
                    loading[loading_len] = i;
                    loading_len += 1;
                }
                Presence::Absent => {}
            }
        }
        Owners {
            eligible: &all[..all_len],
            served_under: &served[..served_len],
            loading_under: &loading[..loading_len],
        }
    }

    /// The warm choice, by urgency. `Critical`: the cheapest owner serving
    /// the model, else with it resident, over the cap or not, else a
    /// resident backend past the owners. `High`: the cheapest owner under
    /// the cap serving it, else loading it. Otherwise P2C among those,
    /// serving first — with `prefer_warm`, a backend past the owners
    /// serving it under the cap comes before one still loading it. With a
    /// prefix key, among owners serving the model under the cap, one that
    /// served its session, else its group, comes first.
    fn warm(&self, owners: &Owners<'_>, random: &mut impl FnMut() -> u64) -> Choice {
        let (ctx, ask, k, key) = (self.ctx, self.ask, self.k, self.ask.key);
        let (served_under, loading_under) = (owners.served_under, owners.loading_under);
        let recorded = |set: &[usize]| ask.prefix.and_then(|p| by_record(ctx, &p, set));
        match ask.urgency {
            Urgency::Critical => ctx
                .cheapest(self.served(owners.eligible))
                .or_else(|| ctx.cheapest(self.resident(owners.eligible)))
                .map(|i| (i, Branch::ResidentOwner))
                .or_else(|| spill_resident(ctx, ask, k, |_| true).map(|i| (i, Branch::Spill))),
            Urgency::High => recorded(served_under)
                .or_else(|| ctx.cheapest(served_under.iter().copied()))
                .or_else(|| ctx.cheapest(loading_under.iter().copied()))
                .map(|i| (i, Branch::ResidentOwner)),
            _ if self.rules.prefer_warm => recorded(served_under)
                .or_else(|| ctx.p2c(served_under, random))
                .map(|i| (i, Branch::ResidentOwner))
                .or_else(|| {
                    let served = |i| self.under(i) && ctx.presence(i, key) == Presence::Served;
                    spill_resident(ctx, ask, k, served).map(|i| (i, Branch::Spill))
                })
                .or_else(|| {
                    ctx.p2c(loading_under, random)
                        .map(|i| (i, Branch::ResidentOwner))
                }),
            _ => recorded(served_under)
                .or_else(|| ctx.p2c(served_under, random))
                .or_else(|| ctx.p2c(loading_under, random))
                .map(|i| (i, Branch::ResidentOwner)),
        }
    }

    /// A warm backend past the owners took it (`prefer_warm`): the first
    /// owner without the model served loads it, for the requests to come.
    fn prefetch(&self, owners: &Owners<'_>, warm: Choice) -> Option<usize> {
        match warm {
            Some((_, Branch::Spill)) if self.rules.prefer_warm => owners
                .eligible
                .iter()
                .copied()
                .find(|&i| self.ctx.presence(i, self.ask.key) != Presence::Served),
            _ => None,
        }
    }

    /// The first owner under the cap that may load the model.
    fn cold_owner(&self, owners: &Owners<'_>) -> Choice {
        owners
            .eligible
            .iter()
            .copied()
            .find(|&i| self.under(i) && self.can_load(i))
            .map(|i| (i, Branch::ColdOwner))
    }

    /// A backend past the owners under the cap with the model resident.
    fn spill_warm(&self) -> Choice {
        spill_resident(self.ctx, self.ask, self.k, |i| self.under(i)).map(|i| (i, Branch::Spill))
    }

    /// A second copy, on a backend past the owners under the cap with a
    /// free model slot and no load in progress. It is worth a cold load
    /// only while the owners' copy may itself still be loading: the
    /// spilled request waits no longer than it would have there. Past
    /// that, the owner's queue is the cheaper wait.
    fn second_copy(&self, owners: &Owners<'_>) -> Choice {
        let (ctx, ask, k) = (self.ctx, self.ask, self.k);
        let loading = owners.eligible.iter().any(|&i| {
            let residency = &ctx.table.backends[i].residency;
            residency.arrived_within(ask.key, self.now_ms(), LOADING_GRACE_MS)
        });
        if !loading || self.rules.placement {
            return None;
        }
        let ok = |i| self.under(i) && self.can_load(i);
        spill_cold(ctx, ask, k, ok, self.now_ms(), Room::FreeSlot)
    }

    /// A model without recent demand, cold on every owner, every owner at
    /// the cap: nothing to keep warm, and loading it on a backend under the
    /// cap costs what loading it on an owner would and keeps the cap. IDs
    /// crafted to share one owner (a hash flood) end here, one load each,
    /// spread out. A model in demand waits on its owner instead
    /// ([`Inference::wait_on_owner`]): a second cold copy of it would evict
    /// another backend's working set. With placement on the repository's
    /// allow-list refuses crafted IDs already, and a load off the owners
    /// is a copy nobody unloads: a model of little demand waits on its
    /// owner too (against real MLServer servers, this branch put a model
    /// on 3 servers with 1 owner).
    fn unseen_spill(&self, owners: &Owners<'_>) -> Choice {
        let (ctx, ask, k, eligible) = (self.ctx, self.ask, self.k, owners.eligible);
        let cold = self.resident(eligible).next().is_none();
        let full = !eligible.iter().any(|&i| self.under(i));
        if !(ask.unseen && cold && full && !self.rules.placement && !eligible.is_empty()) {
            return None;
        }
        spill_cold(ctx, ask, k, |i| self.under(i), self.now_ms(), Room::Evict)
    }

    /// No room anywhere without evicting a model in use: wait on an owner,
    /// however loaded, rather than thrash another backend — the cheapest
    /// with the model resident, else the cheapest.
    fn wait_on_owner(&self, owners: &Owners<'_>) -> Choice {
        let ctx = self.ctx;
        ctx.cheapest(self.resident(owners.eligible))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| {
                ctx.cheapest(owners.eligible.iter().copied())
                    .map(|i| (i, Branch::ColdOwner))
            })
    }

    /// No owner is eligible: somewhere past them warm, else where loading
    /// the model does the least harm (under the cap first).
    fn past_the_owners(&self) -> Choice {
        let (ctx, ask, k) = (self.ctx, self.ask, self.k);
        spill_resident(ctx, ask, k, |_| true)
            .map(|i| (i, Branch::Spill))
            .or_else(|| spill_cold(ctx, ask, k, |i| self.under(i), self.now_ms(), Room::Evict))
            .or_else(|| spill_cold(ctx, ask, k, |_| true, self.now_ms(), Room::Evict))
    }

    /// Under admission the choice must have room under its limit, and must
    /// hold the model (served, or loading) unless no backend the request
    /// could go to holds it ([`Inference::fits`]). Else an owner or a
    /// backend past them that serves the model and has room, else nothing
    /// (the request waits, or is shed). A model load holds a serving slot
    /// for as long as many warm requests take and evicts a model in use: a
    /// cold copy for want of room sheds many more requests than the one it
    /// serves. In the fleet example's `overload` scenario, cold copies on
    /// backends under half their limit took goodput at 1.0 from 1 264
    /// requests/s to 564, and any cold copy the bounded-load cap asked for
    /// to 154 (every backend busy loading, each load evicting a model the
    /// next request needed); see docs/overload.md.
    fn fit(&self, owners: &Owners<'_>, choice: Choice) -> Choice {
        match choice {
            Some((i, _)) if self.admission && !self.fits(i, owners.eligible.contains(&i)) => {
                self.warm_with_room(owners)
            }
            choice => choice,
        }
    }

    /// Under admission, where the choice may not take the request: an
    /// owner serving the model with room, else a backend past the owners
    /// serving it with room.
    fn warm_with_room(&self, owners: &Owners<'_>) -> Choice {
        let (ctx, key) = (self.ctx, self.ask.key);
        ctx.cheapest(self.served(owners.eligible).filter(|&i| ctx.room(i)))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| {
                let warm = |i| ctx.room(i) && ctx.presence(i, key) == Presence::Served;
                spill_resident(ctx, self.ask, self.k, warm).map(|i| (i, Branch::Spill))
            })
    }

    /// Under admission, whether backend `i` may take the request: room
    /// under its limit, and the model there (served, or loading) unless
    /// `i` is one of its owners (`owner`) with nothing in flight, or the
    /// model is nowhere else ([`Inference::nowhere`]). Under admission a
    /// model gets a new copy only on an idle owner — the demand that sized
    /// its owners asked for it there — or when the fleet holds none.
    fn fits(&self, i: usize, owner: bool) -> bool {
        let ctx = self.ctx;
        ctx.room(i)
            && (ctx.presence(i, self.ask.key) != Presence::Absent
                || (owner && ctx.state(i).load() == 0)
                || self.nowhere())
    }

    /// Whether no backend the request could go to holds the model: no
    /// eligible owner nor backend past them within [`SPILL_SCAN`] has it
    /// resident.
    fn nowhere(&self) -> bool {
        let (ctx, key) = (self.ctx, self.ask.key);
        !self
            .ask
            .walk(ctx.table)
            .take(self.k + SPILL_SCAN)
            .any(|i| ctx.eligible(i) && ctx.resident(i, key))
    }

    /// The choice's breaker refused (its half-open probes are out): the
    /// first admitting backend along the walk (under admission, one that
    /// [`fits`](Inference::fits)) — an owner counted resident or cold,
    /// past them a spill.
    fn first_admitting(&self) -> Option<Pick> {
        let (ctx, key, k) = (self.ctx, self.ask.key, self.k);
        let owner_branch = |i: usize| {
            if ctx.resident(i, key) {
                Branch::ResidentOwner
            } else {
                Branch::ColdOwner
            }
        };
        self.ask
            .walk(ctx.table)
            .enumerate()
            .filter(|&(pos, i)| ctx.eligible(i) && (!self.admission || self.fits(i, pos < k)))
            .find_map(|(pos, i)| {
                let branch = if pos < k {
                    owner_branch(i)
                } else {
                    Branch::Spill
                };
                ctx.admit(i, branch)
            })
    }
}

/// Among `set`, the backend whose prefix record predicts the longest hit
/// for `key` (its session before its group), the cheapest on ties; `None`
/// when none in `set` served either recently.
fn by_record(ctx: &Ctx<'_>, key: &PrefixKey, set: &[usize]) -> Option<usize> {
    if set.len() < 2 {
        // No choice to make (P2C takes the one).
        return None;
    }
    let mut best: Option<(usize, PrefixHit)> = None;
    for &i in set {
        let hit = ctx.state(i).prefixes.hit(key);
        let better = match best {
            _ if hit == PrefixHit::None => false,
            None => true,
            Some((b, h)) => hit > h || (hit == h && ctx.state(i).cost() < ctx.state(b).cost()),
        };
        if better {
            best = Some((i, hit));
        }
    }
    best.map(|(i, _)| i)
}
