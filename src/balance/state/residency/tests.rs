use super::*;

#[test]
fn learns_and_forgets_in_lru_order() {
    let r = Residency::new(3);
    assert!(!r.contains(1));
    assert_eq!(r.idle_ms(0), u64::MAX, "a free slot");
    for (t, key) in [1, 2, 3].into_iter().enumerate() {
        r.touch(key, t as u64);
    }
    assert!([1, 2, 3].iter().all(|&k| r.contains(k)));
    assert_eq!(r.idle_ms(10), 10, "model 1, last used at 0");
    r.touch(1, 10); // 1 is used again: 2 is now the least recent.
    r.touch(4, 11);
    assert!(r.contains(1) && r.contains(3) && r.contains(4));
    assert!(!r.contains(2), "the least recently used model was evicted");
    assert!(r.arrived_within(4, 12, 2), "sent at 11");
    assert!(!r.arrived_within(4, 13, 2));
    assert!(
        !r.arrived_within(1, 12, 10),
        "sent at 0; using it at 10 does not renew its arrival"
    );
    r.replace([7, 8, 9, 10], 20);
    assert!(r.contains(7) && r.contains(8) && r.contains(9));
    assert!(!r.contains(10) && !r.contains(1), "only `slots` are kept");
}

#[test]
fn a_servers_list_drops_evicted_models_and_keeps_loading_ones() {
    let r = Residency::new(3);
    for (t, key) in [1, 2, 3].into_iter().enumerate() {
        r.touch(key, t as u64);
    }
    r.confirm(1);
    r.confirm(2);
    // The server lists 1 (and 9, loaded by another gateway), not 2
    // (evicted) nor 3 (still loading, sent by us).
    r.sync([9, 1], 10);
    assert_eq!(r.presence(1, || 10), Presence::Served);
    assert_eq!(r.presence(9, || 10), Presence::Served);
    assert_eq!(
        r.presence(2, || 10),
        Presence::Absent,
        "evicted on the server"
    );
    assert_eq!(r.presence(3, || 10), Presence::Loading, "still loading");
    assert_eq!(r.idle_ms(10), 10, "1 kept its place: last used at 0");
}

#[test]
fn unsampled_touches_take_slots_but_leave_stamps() {
    let r = Residency::new(2);
    let read = std::cell::Cell::new(0);
    let clock = |ms| {
        read.set(read.get() + 1);
        ms
    };
    r.touch_with(1, false, || clock(5));
    assert_eq!(read.get(), 1, "taking a slot reads the clock");
    r.touch_with(1, false, || clock(50));
    assert_eq!(read.get(), 1, "a resident model unsampled: no read");
    assert_eq!(r.idle_ms(60), u64::MAX, "one slot still free");
    r.touch(2, 6);
    assert_eq!(r.idle_ms(60), 55, "model 1's stamp stayed at 5");
    r.touch_with(1, true, || clock(40));
    assert_eq!(read.get(), 2);
    assert_eq!(r.idle_ms(60), 54, "renewed: model 2 (6) is the oldest");
}

#[test]
fn a_model_is_loading_until_confirmed_and_declared_ones_are_served() {
    let r = Residency::new(3);
    assert_eq!(r.presence(1, || 10), Presence::Absent);
    assert!(!r.touch_with(1, false, || 100), "just sent: not served");
    r.touch(2, 100);
    assert_eq!(r.presence(1, || 10), Presence::Loading);
    assert_eq!(r.loading(|| 150, 2_000), 2);
    assert_eq!(
        r.presence(2, || 100 + LOADING_EXPIRY_MS - 2),
        Presence::Loading
    );
    assert_eq!(
        r.presence(2, || 100 + LOADING_EXPIRY_MS),
        Presence::Absent,
        "never confirmed: loading expired"
    );
    assert_eq!(r.loading(|| 2_100, 2_000), 0, "past the grace: not counted");
    r.confirm(1);
    assert_eq!(r.presence(1, || 10), Presence::Served);
    assert!(r.touch_with(1, false, || 0), "served already");
    assert_eq!(r.loading(|| 150, 2_000), 1);
    assert!(
        r.arrived_within(1, 150, 2_000),
        "the served bit is not time"
    );
    r.confirm(9); // not resident: nothing to confirm
    assert_eq!(r.presence(9, || 10), Presence::Absent);
    r.replace([7], 200);
    assert_eq!(r.presence(7, || 200), Presence::Served, "declared");
    let unread = || panic!("every model is served: no clock needed");
    assert_eq!(r.loading(unread, 2_000), 0);
}

#[test]
fn a_refusal_lasts_until_served_or_expired() {
    let r = Residency::new(2);
    r.touch(1, 0);
    r.confirm(1);
    assert!(!r.refused(1, || 0));
    r.refuse(1, 100);
    assert_eq!(r.presence(1, || 100), Presence::Absent, "a 404 is absence");
    assert!(r.refused(1, || 100 + REFUSED_MS - 2));
    assert!(!r.refused(1, || 100 + REFUSED_MS), "expired");
    assert!(!r.refused(2, || 100), "another model");
    r.refuse(2, 200);
    r.touch(2, 300);
    r.confirm(2);
    assert!(!r.refused(2, || 300), "served there since");
    for key in 10..10 + REFUSALS as u64 {
        r.refuse(key, 400);
    }
    assert!((10..10 + REFUSALS as u64).all(|k| r.refused(k, || 400)));
    assert!(!r.refused(1, || 400), "the oldest refusal made room");
}

#[test]
fn hash_zero_is_a_model_not_an_empty_slot() {
    let r = Residency::new(2);
    assert!(!r.contains(0));
    r.touch(0, 0);
    assert!(r.contains(0));
}

#[test]
fn slots_are_clamped() {
    let r = Residency::new(0);
    r.touch(1, 0);
    r.touch(2, 1);
    assert!(!r.contains(1) && r.contains(2), "at least one slot");
    r.set_slots(100);
    for key in 0..20 {
        r.touch(key + 10, 2 + key);
    }
    assert_eq!((10..30).filter(|&k| r.contains(k)).count(), MAX_SLOTS);
}
