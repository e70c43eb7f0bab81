//! Choosing a backend for one request from a table (no IO, no allocation,
//! no lock but the breaker's on its non-closed paths — and, in the opt-in
//! per-model breaker scope, a short one to find the pair's breaker).

use super::clock::Now;
use super::residency::Presence;
use super::table::{Admission, BackendState, Table};
use crate::route::{RequestKind, Urgency};

/// The most owners a model can have.
const MAX_OWNERS: usize = super::BalanceConfigBuilder::MAX_OWNERS;
/// Owners whose lists fit in a [`Scratch`] without a heap buffer.
const INLINE_OWNERS: usize = 16;
/// How far past its owners a spilled request looks for a backend where its
/// model is resident, in distinct backends.
const SPILL_SCAN: usize = 16;
/// How long (ms) after a model was first sent to a backend it may still be
/// loading there (adapters load in 0.1–0.4 s, LLMs in seconds).
const LOADING_GRACE_MS: u64 = 2_000;
/// Loads a backend is given at once: a model load holds memory bandwidth
/// and, on many servers, a serving slot, so piling loads onto one backend
/// stalls the warm traffic it serves.
const LOADS_AT_ONCE: usize = 1;

/// Which branch a pick took; counted in [`BalanceStats`](super::BalanceStats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Branch {
    /// An inference request went to an owner with its model resident.
    ResidentOwner,
    /// An inference request went to an owner that must load its model.
    ColdOwner,
    /// Every owner was out; the request went further along the ring.
    Spill,
    /// Too few backends were eligible; the request was routed over all.
    Panic,
    /// An update went to the cheaper of two sampled backends.
    Update,
}

impl Branch {
    /// How many branches there are (`Update` is the last).
    pub(crate) const COUNT: usize = Branch::Update as usize + 1;
}

/// What is being routed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    /// The model ID's carried xxh3 hash.
    pub(crate) key: u64,
    /// How many owners the model has now (inference only).
    pub(crate) owners: usize,
    /// Whether the request is in the sample that renews its model's
    /// recency where it is resident already (see [`Residency::touch_with`]).
    ///
    /// [`Residency::touch_with`]: super::residency::Residency::touch_with
    pub(crate) sampled: bool,
    /// Whether the model has no recent demand (its demand bucket is
    /// empty): nothing to keep warm for it.
    pub(crate) unseen: bool,
    /// A backend not to pick: for a hedge's backup, the index of the
    /// backend its first attempt went to — the backup is refused
    /// ([`Miss::NoAlternative`]) unless another eligible backend has the
    /// model resident; when strict (a retry), honoured while any other
    /// backend is eligible. Inference only.
    pub(crate) exclude: Option<(usize, bool)>,
}

/// The knobs of a pick.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Bounded-load factor `c`.
    pub(crate) load_factor: f64,
    /// Panic mode when fewer than this share of backends are eligible.
    pub(crate) panic_threshold: f64,
    /// Placement on: a cold copy costs a load call, so a request waits on
    /// its owner's load rather than spill to another cold backend.
    pub(crate) placement: bool,
    /// Placement's [`WhenCold::PreferWarm`](crate::placement::WhenCold):
    /// with no owner serving the model under the cap, a backend past the
    /// owners that serves it comes before an owner that must load it.
    pub(crate) prefer_warm: bool,
}

/// A chosen backend with its breaker permit.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) index: usize,
    pub(crate) admission: Admission,
    pub(crate) branch: Branch,
    /// An inference request whose model was not yet served there: its
    /// success confirms the model in memory.
    pub(crate) confirms: bool,
    /// With `prefer_warm`, the owner passed over for a warm backend: the
    /// model should be loaded there.
    pub(crate) prefetch: Option<usize>,
}

/// Room for a pick's three owner lists, kept by each balancer clone and
/// reused, never cleared: a pick overwrites the part it reads, so no pick
/// zeroes it. Lists of up to [`INLINE_OWNERS`] owners each fit inline (a
/// clone whose models all have few owners — the default `owners` is 2 —
/// never allocates for them); longer ones go to a heap buffer that grows
/// to three times the most owners listed and is not shrunk, so a clone
/// allocates for it once per new high.
#[derive(Debug)]
pub(crate) struct Scratch {
    inline: [usize; 3 * INLINE_OWNERS],
    heap: Vec<usize>,
}

impl Default for Scratch {
    fn default() -> Self {
        Self {
            inline: [0; 3 * INLINE_OWNERS],
            heap: Vec::new(),
        }
    }
}

impl Scratch {
    /// `len` slots, holding whatever the last pick left there.
    #[inline]
    fn room(&mut self, len: usize) -> &mut [usize] {
        if len <= self.inline.len() {
            return &mut self.inline[..len];
        }
        if self.heap.len() < len {
            self.heap.resize(len, 0);
        }
        &mut self.heap[..len]
    }
}

/// Why a pick chose no backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No backend admits the request.
    NoBackend,
    /// A hedge's backup (a non-strict [`Ask::exclude`]) for a model no
    /// other eligible backend has resident: refused before any pick.
    NoAlternative,
}

/// Picks a backend, or says why none. Inference marks the model resident
/// on the chosen backend (it is loaded there to serve the request).
pub(crate) fn pick(
    table: &Table,
    ask: &Ask,
    rules: &Rules,
    now: &Now,
    random: &mut impl FnMut() -> u64,
    scratch: &mut Scratch,
) -> Result<Pick, Miss> {
    let mode = if in_panic(table, rules.panic_threshold, now) {
        Mode::Panic
    } else {
        Mode::Normal
    };
    let mut ctx = Ctx {
        table,
        mode,
        now,
        key: ask.key,
        exclude: None,
    };
    if let Some((x, strict)) = ask.exclude.filter(|_| ask.kind != RequestKind::Update) {
        let elsewhere = match strict {
            true => (0..table.backends.len()).any(|i| i != x && ctx.eligible(i)),
            false => resident_elsewhere(&ctx, ask, x),
        };
        if !elsewhere && !strict {
            return Err(Miss::NoAlternative);
        }
        ctx.exclude = elsewhere.then_some(x);
    }
    let mut picked = match ask.kind {
        RequestKind::Update => pick_update(&ctx, random),
        _ => pick_inference(&ctx, ask, rules, random, scratch),
    }
    .ok_or(Miss::NoBackend)?;
    if ask.kind != RequestKind::Update {
        let state = &table.backends[picked.index];
        // A clock already read renews the stamp for free.
        let refresh = ask.sampled || now.read().is_some();
        let now_ms = || table.fleet.millis(now.get());
        picked.confirms = !state.residency.touch_with(ask.key, refresh, now_ms);
    }
    Ok(picked)
}

/// The bounded-load cap: `ceil(c × (total in-flight + 1) / n)`, `n` the
/// backends the ring in force stands for ([`Table::in_ring`]): a backend
/// whose join is still staged holds part of its share of the ring, and
/// takes that part of the traffic — counted as a whole backend, it would
/// lower every other backend's cap while it warms up.
pub(crate) fn load_cap(table: &Table, c: f64) -> usize {
    let n = table.in_ring.max(1.0);
    (c * (table.fleet_load() + 1) as f64 / n).ceil() as usize
}

/// Envoy's panic threshold: fewer than `threshold × n` backends eligible
/// and healthy — a backend the ejection cap alone keeps in counts as
/// unhealthy, so that with every backend unhealthy the balancer panics
/// rather than pile the traffic onto those the cap kept.
/// Free while every breaker is closed and no backend ejected nor held,
/// and while too few are out to reach the threshold: a backend does not
/// count only when its breaker is not closed, health ejected or held it
/// or it was removed, so at least
/// `n − not_closed − ejected − held − removed` backends count
/// (the counts may overlap, which only lowers the bound). Otherwise a scan
/// of the table, which stops once the answer is known — without the
/// bound, a fleet of 1,000 with one breaker open would check every
/// backend on every pick.
pub(crate) fn in_panic(table: &Table, threshold: f64, now: &Now) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let fleet = &table.fleet;
    let out =
        fleet.not_closed.load(Relaxed) + fleet.ejected.load(Relaxed) + fleet.held.load(Relaxed);
    if threshold <= 0.0 || out == 0 {
        return false;
    }
    let n = table.backends.len();
    let needed = threshold * n as f64;
    let surely_eligible = n.saturating_sub(out + fleet.removed.load(Relaxed));
    if surely_eligible as f64 >= needed {
        return false;
    }
    let now = now.get();
    let mut eligible = 0usize;
    for (seen, b) in table.backends.iter().enumerate() {
        if b.counts_healthy(now) {
            eligible += 1;
            if eligible as f64 >= needed {
                return false;
            }
        } else if ((eligible + n - seen - 1) as f64) < needed {
            // Too few left to reach the threshold.
            return true;
        }
    }
    (eligible as f64) < needed
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Normal,
    /// Every backend not removed nor drained by hand is eligible, breakers
    /// bypassed.
    Panic,
}

struct Ctx<'a> {
    table: &'a Table,
    mode: Mode,
    now: &'a Now,
    /// The model's hash: keys its breakers in `BackendModel` scope.
    key: u64,
    /// A backend treated as not eligible (see [`Ask::exclude`]).
    exclude: Option<usize>,
}

impl Ctx<'_> {
    fn state(&self, i: usize) -> &BackendState {
        &self.table.backends[i]
    }

    fn eligible(&self, i: usize) -> bool {
        if self.exclude == Some(i) {
            return false;
        }
        match self.mode {
            Mode::Normal => self.state(i).eligible_for(self.key, self.now),
            Mode::Panic => !self.state(i).is_removed() && !self.state(i).is_drained(),
        }
    }

    /// Takes a permit on backend `i`: the breaker in scope's (the
    /// backend's, or the (backend, model) pair's; it may refuse a half-open
    /// breaker whose probes are out), or a bypass in panic mode.
    #[inline(always)]
    fn admit(&self, i: usize, branch: Branch) -> Option<Pick> {
        let state = self.state(i);
        let (admission, branch) = match self.mode {
            Mode::Normal => (state.try_acquire(self.key, self.now)?, branch),
            Mode::Panic => (Admission::Bypass, Branch::Panic),
        };
        Some(Pick {
            index: i,
            admission,
            branch,
            confirms: false,
            prefetch: None,
        })
    }

    /// Whether the model is served, or may still be loading, on `i`.
    fn resident(&self, i: usize, key: u64) -> bool {
        self.presence(i, key) != Presence::Absent
    }

    fn presence(&self, i: usize, key: u64) -> Presence {
        let now_ms = || self.table.fleet.millis(self.now.get());
        self.state(i).residency.presence(key, now_ms)
    }

    /// The cheapest of `among` (all eligible), a backend whose breaker
    /// waits for its half-open probes first.
    fn cheapest(&self, among: impl Iterator<Item = usize>) -> Option<usize> {
        among
            .map(|i| (i, self.probing(i), self.state(i).cost()))
            .min_by(|a, b| b.1.cmp(&a.1).then(a.2.total_cmp(&b.2)))
            .map(|(i, _, _)| i)
    }

    /// Whether eligible backend `i`'s breaker is not closed (it admits
    /// calls, so its open duration is up or a half-open permit is left):
    /// the request is one of its few half-open probes. Its cost is no
    /// guide then — its latency estimate is full of the failure penalties
    /// that tripped it and nothing refreshes it while it is out — and
    /// left to P2C, the probes would wait for the rival to be the costlier
    /// (or over the cap), keeping a healed backend out past its open
    /// duration. The permits bound what a still failing backend gets.
    /// Backend scope only (in `BackendModel` scope a pair's breaker
    /// decides), never in panic mode (breakers bypassed).
    fn probing(&self, i: usize) -> bool {
        self.mode == Mode::Normal
            && self.table.fleet.scoped.is_none()
            && !self.state(i).breaker.admits_freely()
    }

    /// Power of two choices on cost over `set`.
    fn p2c(&self, set: &[usize], random: &mut impl FnMut() -> u64) -> Option<usize> {
        match set.len() {
            0 => None,
            1 => Some(set[0]),
            2 => self.cheapest(set.iter().copied()),
            n => {
                let [a, b] = sample2(n as u64, random);
                self.cheapest([set[a], set[b]].into_iter())
            }
        }
    }
}

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
/// cold one.
fn pick_inference(
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
    let under = |i: usize| match table.backends[i].load() {
        0 => true,
        load => load < *cap.get_or_init(|| load_cap(table, c)),
    };
    let k = ask.owners.clamp(1, MAX_OWNERS);

    // The eligible owners in walk order, and those of them with room under
    // the cap and the model served, or still loading: three lists of up to
    // `k` in the clone's scratch (only the listed prefix of each is read).
    let (all, rest) = scratch.room(3 * k).split_at_mut(k);
    let (served, loading) = rest.split_at_mut(k);
    let (mut all_len, mut served_len, mut loading_len) = (0, 0, 0);
    for i in table.ring.walk(key).take(k).filter(|&i| ctx.eligible(i)) {
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

    let choice = match ask.urgency {
        Urgency::Critical => ctx
            .cheapest(served_owners())
            .or_else(|| ctx.cheapest(resident_owners()))
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| spill_resident(ctx, ask, k, |_| true).map(|i| (i, Branch::Spill))),
        Urgency::High => ctx
            .cheapest(served_under.iter().copied())
            .or_else(|| ctx.cheapest(loading_under.iter().copied()))
            .map(|i| (i, Branch::ResidentOwner)),
        _ if rules.prefer_warm => ctx
            .p2c(served_under, random)
            .map(|i| (i, Branch::ResidentOwner))
            .or_else(|| {
                let served = |i| under(i) && ctx.presence(i, key) == Presence::Served;
                spill_resident(ctx, ask, k, served).map(|i| (i, Branch::Spill))
            })
            .or_else(|| {
                ctx.p2c(loading_under, random)
                    .map(|i| (i, Branch::ResidentOwner))
            }),
        _ => ctx
            .p2c(served_under, random)
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
                .then(|| spill_cold(ctx, ask, k, |i| under(i) && can_load(i), now_ms(), u64::MAX))
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
                .then(|| spill_cold(ctx, ask, k, under, now_ms(), 0))
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
        .or_else(|| spill_cold(ctx, ask, k, under, now_ms(), 0))
        .or_else(|| spill_cold(ctx, ask, k, |_| true, now_ms(), 0));
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
        .walk(key)
        .enumerate()
        .filter(|&(_, i)| ctx.eligible(i))
        .find_map(|(pos, i)| {
            let branch = if pos < k {
                owner_branch(i)
            } else {
                Branch::Spill
            };
            ctx.admit(i, branch)
        })
}

/// Whether a backend other than `x`, among the model's owners and the
/// [`SPILL_SCAN`] backends past them, is eligible with the model resident:
/// only then does a backup skip `x` (a cold load is slower than the wait it
/// would hedge).
fn resident_elsewhere(ctx: &Ctx<'_>, ask: &Ask, x: usize) -> bool {
    let k = ask.owners.clamp(1, MAX_OWNERS);
    ctx.table
        .ring
        .walk(ask.key)
        .take(k + SPILL_SCAN)
        .any(|i| i != x && ctx.eligible(i) && ctx.resident(i, ask.key))
}

/// The first eligible backend past the `k` owners, within [`SPILL_SCAN`],
/// that has the model resident and passes `ok`.
fn spill_resident(ctx: &Ctx<'_>, ask: &Ask, k: usize, ok: impl Fn(usize) -> bool) -> Option<usize> {
    ctx.table
        .ring
        .walk(ask.key)
        .skip(k)
        .take(SPILL_SCAN)
        .find(|&i| ctx.eligible(i) && ok(i) && ctx.resident(i, ask.key))
}

/// Among the first [`SPILL_SCAN`] eligible backends past the `k` owners
/// that pass `ok`, the one whose least recently used model has been idle
/// longest (a free slot first; the earlier on ties), if idle at least
/// `min_idle_ms`: where loading the model evicts the least in use.
fn spill_cold(
    ctx: &Ctx<'_>,
    ask: &Ask,
    k: usize,
    ok: impl Fn(usize) -> bool,
    now_ms: u64,
    min_idle_ms: u64,
) -> Option<(usize, Branch)> {
    let mut best: Option<(usize, u64)> = None;
    for i in ctx
        .table
        .ring
        .walk(ask.key)
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

/// Draws after the first pair to replace an ineligible sample.
const REDRAWS: usize = 4;

/// Power of two choices on cost (Mitzenmacher, 2001): two distinct
/// eligible backends sampled uniformly, the cheaper taken. A sampled
/// backend that is not eligible is replaced by another draw (up to
/// [`REDRAWS`] each), so that an eligible backend paired with an ejected
/// one is not taken for want of a rival; with no eligible pair found, the
/// cheapest eligible backend (a scan).
fn pick_update(ctx: &Ctx<'_>, random: &mut impl FnMut() -> u64) -> Option<Pick> {
    let n = ctx.table.backends.len();
    let scan = || ctx.cheapest((0..n).filter(|&i| ctx.eligible(i)));
    let best = match n {
        0 => return None,
        1 => scan(),
        _ => {
            let [a, b] = sample2(n as u64, random);
            // An eligible index other than `not`, in at most REDRAWS draws.
            let mut redraw = |not: usize| {
                (0..REDRAWS)
                    .map(|_| (random() % n as u64) as usize)
                    .find(|&i| i != not && ctx.eligible(i))
            };
            let a = if ctx.eligible(a) { Some(a) } else { redraw(b) };
            let b = a.and_then(|a| {
                if b != a && ctx.eligible(b) {
                    Some(b)
                } else {
                    redraw(a)
                }
            });
            match (a, b) {
                (Some(a), Some(b)) => ctx.cheapest([a, b].into_iter()),
                _ => scan(),
            }
        }
    };
    if let Some(pick) = best.and_then(|i| ctx.admit(i, Branch::Update)) {
        return Some(pick);
    }
    (0..n)
        .filter(|&i| ctx.eligible(i))
        .find_map(|i| ctx.admit(i, Branch::Update))
}

/// Two distinct indices in `0..n` (`n >= 2`), uniformly (Floyd's
/// combination algorithm for two).
pub(crate) fn sample2(n: u64, random: &mut impl FnMut() -> u64) -> [usize; 2] {
    let a = random() % (n - 1);
    let b = random() % n;
    let a = if a == b { n - 1 } else { a };
    [a as usize, b as usize]
}

#[cfg(test)]
mod tests;
