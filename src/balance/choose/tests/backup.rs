//! A hedge's backup: where it goes, and when it goes nowhere.

use super::*;

/// The ask of a backup (non-strict) or a retry (strict) of a request
/// whose first attempt went to `x`.
fn excluding(r: &RouteInfo, x: usize, strict: bool) -> Ask {
    Ask {
        exclude: match strict {
            true => Exclusion::Retry(x),
            false => Exclusion::Backup(x),
        },
        ..ask(r, 2)
    }
}

/// The backup's pick, or why none.
fn backup(t: &Table, ask: &Ask) -> Result<Pick, Miss> {
    pick(
        t,
        ask,
        &RULES,
        &Now::lazy(),
        &mut || 0,
        &mut Scratch::default(),
    )
}

/// Declares `models` the whole list of backend `index`'s models, as a
/// probe or a residency header would.
fn list(t: &Table, index: usize, models: &[&RouteInfo]) {
    let keys = models.iter().map(|r| r.model.hash64());
    t.backends[index].residency.sync(keys, 0);
}

/// With nothing known of the other backends' models (no probe, no
/// header, no declaration), a warm first attempt's backup goes to the
/// next owner along the ring: the recipe with no residency source hedges.
#[tokio::test(start_paused = true)]
async fn with_residency_unknown_a_warm_attempts_backup_goes_to_the_next_owner() {
    let t = table(4);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    let picked = backup(&t, &excluding(&r, order[0], false)).unwrap();
    assert_eq!(picked.index, order[1]);
    assert_eq!(picked.branch, Branch::ColdOwner);
}

/// Where the other backends' lists are known and none holds the model,
/// the backup is refused before anything is picked.
#[tokio::test(start_paused = true)]
async fn where_every_other_list_lacks_the_model_the_backup_is_refused() {
    let t = table(4);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    for &i in &order[1..] {
        list(&t, i, &[]);
    }
    let refused = backup(&t, &excluding(&r, order[0], false));
    assert!(matches!(refused, Err(Miss::NoAlternative)));
    assert!(t.backends.iter().all(|b| b.load() == 0), "nothing picked");
    // A retry goes elsewhere all the same.
    let retry = backup(&t, &excluding(&r, order[0], true)).unwrap();
    assert_ne!(retry.index, order[0]);
    drop(retry);
    // Listed with the model: the backup goes there, past the owners too.
    list(&t, order[3], &[&r]);
    let picked = backup(&t, &excluding(&r, order[0], false)).unwrap();
    assert_eq!((picked.index, picked.branch), (order[3], Branch::Spill));
}

/// A first attempt sent cold (its backend still loading the model) is
/// not raced by a backup that would load the model again: only a backend
/// serving it takes the backup.
#[tokio::test(start_paused = true)]
async fn a_cold_attempt_is_raced_only_where_the_model_is_served() {
    let t = table(4);
    let r = route("llama");
    let order = walk(&t, &r);
    start_loading(&t, order[0], &r);
    let refused = backup(&t, &excluding(&r, order[0], false));
    assert!(matches!(refused, Err(Miss::NoAlternative)), "{refused:?}");
    // Loading elsewhere is no better.
    start_loading(&t, order[1], &r);
    let refused = backup(&t, &excluding(&r, order[0], false));
    assert!(matches!(refused, Err(Miss::NoAlternative)), "{refused:?}");
    make_resident(&t, order[2], &r);
    let picked = backup(&t, &excluding(&r, order[0], false)).unwrap();
    assert_eq!(picked.index, order[2]);
    assert_eq!(picked.warmth, Warmth::Warm);
}

/// A backend serving the model comes before one whose models are
/// unknown, even one earlier along the ring; among owners serving it, the
/// cheaper.
#[tokio::test(start_paused = true)]
async fn a_backend_serving_the_model_comes_first() {
    let t = table(4);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    make_resident(&t, order[2], &r);
    let picked = backup(&t, &excluding(&r, order[0], false)).unwrap();
    assert_eq!(picked.index, order[2], "served, past the unknown owner");
    drop(picked);
    let three = Ask {
        owners: 3,
        ..excluding(&r, order[0], false)
    };
    make_resident(&t, order[1], &r);
    set_load(&t, order[1], 3);
    let picked = backup(&t, &three).unwrap();
    assert_eq!(picked.index, order[2], "the cheaper of two serving owners");
}

/// A backend that answered 404 for the model lately is no place for its
/// backup, listed or not.
#[tokio::test(start_paused = true)]
async fn a_backend_that_refused_the_model_takes_no_backup() {
    let t = table(2);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    let now = t.fleet.millis(Instant::now());
    t.backends[order[1]].residency.refuse(r.model.hash64(), now);
    let refused = backup(&t, &excluding(&r, order[0], false));
    assert!(matches!(refused, Err(Miss::NoAlternative)), "{refused:?}");
}
