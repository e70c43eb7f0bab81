//! Choosing a backend for one request from a table: panic mode, then a
//! hedge's [backup](super::backup), or (a retry's exclusion honoured)
//! [inference](super::inference) or [update](super::update), and the
//! model marked resident where it went.

use crate::balance::choose::ask::{Ask, Exclusion};
use crate::balance::choose::backup::pick_backup;
use crate::balance::choose::ctx::{in_panic, Ctx, Miss, Mode, Pick};
use crate::balance::choose::inference::pick_inference;
use crate::balance::choose::rules::Rules;
use crate::balance::choose::scratch::Scratch;
use crate::balance::choose::update::pick_update;
use crate::balance::state::clock::Now;
use crate::balance::state::residency::Warmth;
use crate::balance::state::table::Table;
use crate::route::RequestKind;

/// Why a pick found nothing: under admission, with some backend eligible
/// (every candidate was at its limit), saturation; else no backend.
#[cold]
fn saturated_or_none(ctx: &Ctx<'_>) -> Miss {
    let admission = ctx.table.under_admission();
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
        urgency: ask.urgency,
    };
    // An update ignores an exclusion.
    let exclude = match ask.kind {
        RequestKind::Update => Exclusion::None,
        _ => ask.exclude,
    };
    let mut picked = match exclude {
        // A hedge's backup: somewhere it can help, or nowhere.
        Exclusion::Backup(x) => pick_backup(&ctx, ask, x)?,
        Exclusion::Retry(_) | Exclusion::None => {
            if let Exclusion::Retry(x) = exclude {
                // A retry: anywhere but `x` while another is eligible.
                let elsewhere = (0..table.backends.len()).any(|i| i != x && ctx.eligible(i));
                ctx.exclude = elsewhere.then_some(x);
            }
            let picked = match ask.kind {
                RequestKind::Update => pick_update(&ctx, random),
                _ => pick_inference(&ctx, ask, rules, random, scratch),
            };
            picked.ok_or_else(|| saturated_or_none(&ctx))?
        }
    };
    if ask.kind != RequestKind::Update {
        let state = &table.backends[picked.index];
        // A clock already read renews the stamp for free.
        let refresh = ask.sampled || now.read().is_some();
        let now_ms = || ctx.now_ms();
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
