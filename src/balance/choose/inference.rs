//! Inference: the model's owners by residency and cost under the
//! bounded-load cap, then a spill along the ring (see the
//! [balancer's docs](crate::balance) for the order).

use crate::balance::choose::ctx::{
    load_cap, Ask, Ctx, Pick, Rules, Scratch, LOADING_GRACE_MS, LOADS_AT_ONCE, MAX_OWNERS,
    SPILL_SCAN,
};
use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::residency::Presence;
use crate::balance::state::traffic::Branch;
use crate::route::{PrefixKey, Urgency};

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
    let c = rules.load_factor;
    let table = ctx.table;
    let key = ask.key;
    // The cap is at least 1 (c ≥ 1): an idle backend is under it without
    // summing the fleet's counters.
    let cap = std::cell::OnceCell::new();
    let admission = table.fleet.settings.admission.is_some();
    // Under admission a backend under its limit is under the cap too: the
    // cap follows the fleet's load, which shedding keeps low while the
    // popular models' owners are full, and a cap below the limit would
    // send their traffic to cold copies (a model load holds a serving
    // slot for as long as many warm requests take).
    let under = |i: usize| match table.backends[i].load() {
        0 => true,
        load => load < *cap.get_or_init(|| load_cap(table, c)) || (admission && ctx.room(i)),
    };
    let k = ask.owners.clamp(1, MAX_OWNERS);

    // The eligible owners in walk order, and those of them with room under
    // the cap and the model served, or still loading: three lists of up to
    // `k` in the clone's scratch (only the listed prefix of each is read).
    let (all, rest) = scratch.room(3 * k).split_at_mut(k);
    let (served, loading) = rest.split_at_mut(k);
    let (mut all_len, mut served_len, mut loading_len) = (0, 0, 0);
    for i in table
        .ring
        .walk(ask.affinity())
        .take(k)
        .filter(|&i| ctx.eligible(i))
    {
        all[all_len] = i;
        all_len += 1;
        if !under(i) {
            continue;
        }
        match ctx.presence(i, key) {
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
    let eligible_owners = &all[..all_len];
    let (served_under, loading_under) = (&served[..served_len], &loading[..loading_len]);
    let resident_owners = || {
        eligible_owners
            .iter()
            .copied()
            .filter(|&i| ctx.resident(i, key))
    };
    let served_owners = || {
        eligible_owners
            .iter()
            .copied()
            .filter(|&i| ctx.presence(i, key) == Presence::Served)
    };

    // With a prefix key: among owners serving the model under the cap,
    // one that served its session, else its group, first.
    let by_record = |set: &[usize]| ask.prefix.and_then(|key| by_record(ctx, &key, set));
    let choice = match ask.urgency {
        Urgency::Critical => ctx
            .cheapest(served_owners())
            .or_else(|| ctx.cheapest(resident_owners()))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| spill_resident(ctx, ask, k, |_| true).map(|i| (i, Branch::Spill))),
        Urgency::High => by_record(served_under)
            .or_else(|| ctx.cheapest(served_under.iter().copied()))
            .or_else(|| ctx.cheapest(loading_under.iter().copied()))
            .map(|i| (i, Branch::ResidentOwner)),
        _ if rules.prefer_warm => by_record(served_under)
            .or_else(|| ctx.p2c(served_under, random))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| {
                let served = |i| under(i) && ctx.presence(i, key) == Presence::Served;
                spill_resident(ctx, ask, k, served).map(|i| (i, Branch::Spill))
            })
            .or_else(|| {
                ctx.p2c(loading_under, random)
                    .map(|i| (i, Branch::ResidentOwner))
            }),
        _ => by_record(served_under)
            .or_else(|| ctx.p2c(served_under, random))
            .or_else(|| ctx.p2c(loading_under, random))
            .map(|i| (i, Branch::ResidentOwner)),
    };
    // A warm backend past the owners took it: the first owner without the
    // model served loads it, for the requests to come.
    let prefetch = match choice {
        Some((_, Branch::Spill)) if rules.prefer_warm => eligible_owners
            .iter()
            .copied()
            .find(|&i| ctx.presence(i, key) != Presence::Served),
        _ => None,
    };
    let now_ms = || table.fleet.millis(ctx.now.get());
    let can_load = |i: usize| {
        let residency = &table.backends[i].residency;
        residency.loading(now_ms, LOADING_GRACE_MS) < LOADS_AT_ONCE
            && !residency.refused(key, now_ms)
    };
    // Under admission, where the choice may not take the request: an owner
    // serving the model with room, else a backend past the owners serving
    // it with room.
    let warm_with_room = || {
        ctx.cheapest(served_owners().filter(|&i| ctx.room(i)))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| {
                let warm = |i| ctx.room(i) && ctx.presence(i, key) == Presence::Served;
                spill_resident(ctx, ask, k, warm).map(|i| (i, Branch::Spill))
            })
    };
    let choice = choice
        .or_else(|| {
            eligible_owners
                .iter()
                .copied()
                .find(|&i| under(i) && can_load(i))
                .map(|i| (i, Branch::ColdOwner))
        })
        .or_else(|| spill_resident(ctx, ask, k, under).map(|i| (i, Branch::Spill)))
        .or_else(|| {
            // A second copy is worth a cold load only while the owners'
            // copy may itself still be loading: the spilled request waits
            // no longer than it would have there. Past that, the owner's
            // queue is the cheaper wait.
            let loading = eligible_owners.iter().any(|&i| {
                let residency = &table.backends[i].residency;
                residency.arrived_within(key, now_ms(), LOADING_GRACE_MS)
            });
            (loading && !rules.placement)
                .then(|| {
                    spill_cold(
                        ctx,
                        ask,
                        k,
                        |i| under(i) && can_load(i),
                        now_ms(),
                        Room::FreeSlot,
                    )
                })
                .flatten()
        })
        .or_else(|| {
            // A model without recent demand, cold on every owner, every
            // owner at the cap: nothing to keep warm, and loading it on a
            // backend under the cap costs what loading it on an owner would
            // and keeps the cap. IDs crafted to share one owner (a hash
            // flood) end here, one load each, spread out. A model in demand
            // waits on its owner instead (below): a second cold copy of it
            // would evict another backend's working set. With placement on
            // the repository's allow-list refuses crafted IDs already, and
            // a load off the owners is a copy nobody unloads: a model of
            // little demand waits on its owner too (against real MLServer
            // servers, this branch put a model on 3 servers with 1 owner).
            let cold = resident_owners().next().is_none();
            let full = !eligible_owners.iter().any(|&i| under(i));
            (ask.unseen && cold && full && !rules.placement && !eligible_owners.is_empty())
                .then(|| spill_cold(ctx, ask, k, under, now_ms(), Room::Evict))
                .flatten()
        })
        .or_else(|| {
            // No room anywhere without evicting a model in use: wait on an
            // owner, however loaded, rather than thrash another backend.
            ctx.cheapest(resident_owners())
                .map(|i| (i, Branch::ResidentOwner))
                .or_else(|| {
                    ctx.cheapest(eligible_owners.iter().copied())
                        .map(|i| (i, Branch::ColdOwner))
                })
        })
        // No owner is eligible: somewhere warm, else where loading the
        // model does the least harm.
        .or_else(|| spill_resident(ctx, ask, k, |_| true).map(|i| (i, Branch::Spill)))
        .or_else(|| spill_cold(ctx, ask, k, under, now_ms(), Room::Evict))
        .or_else(|| spill_cold(ctx, ask, k, |_| true, now_ms(), Room::Evict));
    // Under admission the choice must have room under its limit, and must
    // hold the model (served, or loading) unless no backend the request
    // could go to holds it. Else an owner or a backend past them that
    // serves the model and has room, else nothing (the request waits, or
    // is shed). A model load holds a serving slot for as long as many warm
    // requests take and evicts a model in use: a cold copy for want of room
    // sheds many more requests than the one it serves. In the fleet
    // example's `overload` scenario, cold copies on backends under half
    // their limit took goodput at 1.0 from 1 264 requests/s to 564, and
    // any cold copy the bounded-load cap asked for to 154 (every backend
    // busy loading, each load evicting a model the next request needed);
    // see docs/overload.md.
    let nowhere = || !resident_elsewhere(ctx, ask, usize::MAX);
    let choice = match choice {
        Some((i, _)) if admission && !fits(ctx, i, key, eligible_owners.contains(&i), nowhere) => {
            warm_with_room()
        }
        choice => choice,
    };
    let owner_branch = |i: usize| {
        if ctx.resident(i, key) {
            Branch::ResidentOwner
        } else {
            Branch::ColdOwner
        }
    };
    if let Some(mut pick) = choice.and_then(|(i, branch)| ctx.admit(i, branch)) {
        pick.prefetch = prefetch;
        return Some(pick);
    }
    // The choice's breaker refused (its half-open probes are out): the
    // first admitting backend along the walk.
    table
        .ring
        .walk(ask.affinity())
        .enumerate()
        .filter(|&(pos, i)| ctx.eligible(i) && (!admission || fits(ctx, i, key, pos < k, nowhere)))
        .find_map(|(pos, i)| {
            let branch = if pos < k {
                owner_branch(i)
            } else {
                Branch::Spill
            };
            ctx.admit(i, branch)
        })
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

/// Under admission, whether backend `i` may take an inference request for
/// the model with hash `key`: room under its limit, and the model there
/// (served, or loading) unless `i` is one of its owners (`owner`) with
/// nothing in flight, or the model is nowhere else (`nowhere`: no eligible
/// owner nor backend past them within [`SPILL_SCAN`] holds it). Under
/// admission a model gets a new copy only on an idle owner — the demand
/// that sized its owners asked for it there — or when the fleet holds
/// none.
fn fits(ctx: &Ctx<'_>, i: usize, key: u64, owner: bool, nowhere: impl FnOnce() -> bool) -> bool {
    ctx.room(i)
        && (ctx.presence(i, key) != Presence::Absent
            || (owner && ctx.state(i).load() == 0)
            || nowhere())
}

/// Whether a backend other than `x`, among the model's owners and the
/// [`SPILL_SCAN`] backends past them, is eligible with the model resident.
fn resident_elsewhere(ctx: &Ctx<'_>, ask: &Ask, x: usize) -> bool {
    let k = ask.owners.clamp(1, MAX_OWNERS);
    ctx.table
        .ring
        .walk(ask.affinity())
        .take(k + SPILL_SCAN)
        .any(|i| i != x && ctx.eligible(i) && ctx.resident(i, ask.key))
}

/// The first eligible backend past the `k` owners, within [`SPILL_SCAN`],
/// that has the model resident and passes `ok` — with a prefix key, the
/// first of those whose record says it served the session, else the
/// group, else the first: a spilled conversation goes back where it
/// spilled to before.
fn spill_resident(ctx: &Ctx<'_>, ask: &Ask, k: usize, ok: impl Fn(usize) -> bool) -> Option<usize> {
    let mut found = ctx
        .table
        .ring
        .walk(ask.affinity())
        .skip(k)
        .take(SPILL_SCAN)
        .filter(|&i| ctx.eligible(i) && ok(i) && ctx.resident(i, ask.key));
    let first = found.next()?;
    let Some(key) = ask.prefix else {
        return Some(first);
    };
    let hit = |i: usize| ctx.state(i).prefixes.hit(&key);
    let mut best = (first, hit(first));
    while best.1 != PrefixHit::Session {
        let Some(i) = found.next() else { break };
        let h = hit(i);
        if h > best.1 {
            best = (i, h);
        }
    }
    Some(best.0)
}

/// What a cold spill may do to make room for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// Take a free model slot only: nothing is evicted.
    FreeSlot,
    /// Evict the model idle longest, if no slot is free.
    Evict,
}

/// Among the first [`SPILL_SCAN`] eligible backends past the `k` owners
/// that pass `ok`, the one whose least recently used model has been idle
/// longest (a free slot first; the earlier on ties), under `room`: where
/// loading the model evicts the least in use.
fn spill_cold(
    ctx: &Ctx<'_>,
    ask: &Ask,
    k: usize,
    ok: impl Fn(usize) -> bool,
    now_ms: u64,
    room: Room,
) -> Option<(usize, Branch)> {
    // A free slot's idle time is `u64::MAX`.
    let min_idle_ms = match room {
        Room::FreeSlot => u64::MAX,
        Room::Evict => 0,
    };
    let mut best: Option<(usize, u64)> = None;
    for i in ctx
        .table
        .ring
        .walk(ask.affinity())
        .skip(k)
        .filter(|&i| ctx.eligible(i) && ok(i))
        .take(SPILL_SCAN)
    {
        let idle = ctx.state(i).residency.idle_ms(now_ms);
        if idle >= min_idle_ms && best.is_none_or(|(_, b)| idle > b) {
            best = Some((i, idle));
        }
        if idle == u64::MAX {
            break;
        }
    }
    best.map(|(i, _)| (i, Branch::Spill))
}
