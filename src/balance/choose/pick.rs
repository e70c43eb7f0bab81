//! Choosing a backend for one request from a table: panic mode, a
//! hedge's exclusion, then [inference](super::inference) or
//! [update](super::update), and the model marked resident where it went.

use crate::balance::choose::ctx::{in_panic, Ask, Ctx, Miss, Mode, Pick, Rules, Scratch};
use crate::balance::choose::inference::{pick_inference, resident_elsewhere};
use crate::balance::choose::update::pick_update;
use crate::balance::state::clock::Now;
use crate::balance::state::residency::Warmth;
use crate::balance::state::table::Table;
use crate::route::{RequestKind, Urgency};

/// Why a pick found nothing: under admission, with some backend eligible
/// (every candidate was at its limit), saturation; else no backend.
#[cold]
fn saturated_or_none(ctx: &Ctx<'_>) -> Miss {
    let admission = ctx.table.fleet.settings.admission.is_some();
    if admission && (0..ctx.table.backends.len()).any(|i| ctx.eligible(i)) {
        Miss::Saturated
    } else {
        Miss::NoBackend
    }
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
        critical: ask.urgency == Urgency::Critical,
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
    let picked = match ask.kind {
        RequestKind::Update => pick_update(&ctx, random),
        _ => pick_inference(&ctx, ask, rules, random, scratch),
    };
    let Some(mut picked) = picked else {
        return Err(saturated_or_none(&ctx));
    };
    if ask.kind != RequestKind::Update {
        let state = &table.backends[picked.index];
        // A clock already read renews the stamp for free.
        let refresh = ask.sampled || now.read().is_some();
        let now_ms = || table.fleet.millis(now.get());
        picked.warmth = match state.residency.touch_with(ask.key, refresh, now_ms) {
            true => Warmth::Warm,
            false => Warmth::Cold,
        };
        if let Some(key) = &ask.prefix {
            // Its prefill caches the prefix there.
            picked.hit = state.prefixes.note(key);
        }
    }
    Ok(picked)
}
