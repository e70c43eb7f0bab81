//! Updates: the cheaper of two eligible backends sampled uniformly
//! (power of two choices).

use crate::balance::choose::ctx::{Ctx, Pick};
use crate::balance::choose::p2c::sample2;
use crate::balance::state::traffic::Branch;

/// Draws after the first pair to replace an ineligible sample.
const REDRAWS: usize = 4;

/// Power of two choices on cost (Mitzenmacher, 2001): two distinct
/// eligible backends sampled uniformly, the cheaper taken, costs within
/// a few percent a tie broken at random
/// ([`Ctx::choose2`]). A sampled
/// backend that is not eligible is replaced by another draw (up to
/// [`REDRAWS`] each), so that an eligible backend paired with an ejected
/// one is not taken for want of a rival; with no eligible pair found, the
/// cheapest eligible backend (a scan).
pub(crate) fn pick_update(ctx: &Ctx<'_>, random: &mut impl FnMut() -> u64) -> Option<Pick> {
    let n = ctx.table.backends.len();
    // Under admission a backend at its limit is not a candidate.
    let ok = |i: usize| ctx.eligible(i) && ctx.room(i);
    let scan = || ctx.cheapest((0..n).filter(|&i| ok(i)));
    let best = match n {
        0 => return None,
        1 => scan(),
        _ => {
            let [a, b] = sample2(n as u64, random);
            // An eligible index other than `not`, in at most REDRAWS draws.
            let mut redraw = |not: usize| {
                (0..REDRAWS)
                    .map(|_| (random() % n as u64) as usize)
                    .find(|&i| i != not && ok(i))
            };
            let a = if ok(a) { Some(a) } else { redraw(b) };
            let b = a.and_then(|a| if b != a && ok(b) { Some(b) } else { redraw(a) });
            match (a, b) {
                (Some(a), Some(b)) => Some(ctx.choose2(a, b, random)),
                _ => scan(),
            }
        }
    };
    if let Some(pick) = best.and_then(|i| ctx.admit(i, Branch::Update)) {
        return Some(pick);
    }
    (0..n)
        .filter(|&i| ok(i))
        .find_map(|i| ctx.admit(i, Branch::Update))
}
