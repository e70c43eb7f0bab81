use super::*;

fn delays(
    build: impl FnOnce(super::super::HedgeConfigBuilder) -> super::super::HedgeConfigBuilder,
) -> (Delays, Instant) {
    let policy = build(HedgeConfig::builder()).build().unwrap();
    let now = Instant::now();
    (Delays::new(&policy, now), now)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn p95_per_model_after_the_minimum_of_samples() {
    let (d, now) = delays(|b| b.min_samples(20).median_factor(1_000.0));
    let fast = d.place(Some(11), now);
    let slow = d.place(Some(22), now);
    assert_ne!(fast, slow);
    assert!(matches!(fast, Place::Tracked(_)));
    for i in 0..19 {
        d.record(fast, ms(10 + i % 2), now);
    }
    assert_eq!(d.delay(fast, now), None, "19 samples are too few");
    // 100 samples: 94 at 10 ms, 6 at 200 ms: p95 is 200 ms.
    let later = now + ms(REFRESH_MS);
    for i in 0..81 {
        d.record(fast, ms(if i < 6 { 200 } else { 10 }), later);
    }
    let p95 = d.delay(fast, later).unwrap();
    assert!((ms(200)..=ms(230)).contains(&p95), "{p95:?}");
    // The other model has its own window.
    for _ in 0..20 {
        d.record(slow, ms(40), later);
    }
    let p95 = d.delay(slow, later).unwrap();
    assert!((ms(40)..=ms(50)).contains(&p95), "{p95:?}");
    // The same hash finds the same window; finding assigns none.
    assert_eq!(d.place(Some(11), now), fast);
    assert_eq!(d.find(11, now), Some(fast));
    assert_eq!(d.find(33, now), None);
    assert_eq!(d.find(33, now), None, "still not seen");
}

#[test]
fn a_slow_mode_over_five_percent_is_cut_at_a_multiple_of_the_median() {
    let (d, now) = delays(|b| b.min_samples(1));
    let p = d.place(Some(3), now);
    // 12% of the model's requests 10x slower: its p95 is slow.
    for i in 0..100 {
        d.record(p, ms(if i < 12 { 230 } else { 23 }), now);
    }
    let delay = d.delay(p, now).unwrap();
    assert!(
        (ms(46)..=ms(50)).contains(&delay),
        "2 x the median: {delay:?}"
    );
    let (d, now) = delays(|b| b.min_samples(1).median_factor(1_000.0));
    let p = d.place(Some(3), now);
    for i in 0..100 {
        d.record(p, ms(if i < 12 { 230 } else { 23 }), now);
    }
    assert!(d.delay(p, now).unwrap() > ms(230), "uncapped: the p95");
}

#[test]
fn floor_and_ceiling_clamp() {
    let (d, now) = delays(|b| b.min_samples(1).floor(ms(5)).ceiling(ms(50)));
    let a = d.place(Some(1), now);
    let b = d.place(Some(2), now);
    d.record(a, Duration::from_micros(100), now);
    d.record(b, Duration::from_secs(3), now);
    assert_eq!(d.delay(a, now), Some(ms(5)));
    assert_eq!(d.delay(b, now), Some(ms(50)));
}

#[test]
fn zero_minimum_starts_at_the_floor() {
    let (d, now) = delays(|b| b.min_samples(0).floor(ms(7)));
    assert_eq!(d.delay(d.place(None, now), now), Some(ms(7)));
}

#[test]
fn the_window_rotates_out_old_samples() {
    // 10 s window, halves of 5 s.
    let (d, now) = delays(|b| {
        b.min_samples(10)
            .window(Duration::from_secs(10))
            .median_factor(1_000.0)
    });
    let p = d.place(Some(5), now);
    for _ in 0..10 {
        d.record(p, ms(300), now);
    }
    assert!(d.delay(p, now).unwrap() > ms(250));
    // In the next half both halves count: new fast samples do not yet
    // pull the p95 down.
    let t1 = now + Duration::from_secs(5);
    for _ in 0..10 {
        d.record(p, ms(10), t1);
    }
    assert!(d.delay(p, t1).unwrap() > ms(250));
    // One more half: the 300 ms half is cleared.
    let t2 = now + Duration::from_secs(10);
    for _ in 0..10 {
        d.record(p, ms(10), t2);
    }
    let p95 = d.delay(p, t2).unwrap();
    assert!(p95 < ms(15), "{p95:?}");
    // Idle for a whole window: nothing left, below the minimum again.
    assert_eq!(d.delay(p, now + Duration::from_secs(30)), None);
}

#[test]
fn the_cached_delay_refreshes_at_most_every_period() {
    let (d, now) = delays(|b| b.min_samples(1));
    let p = d.place(Some(9), now);
    d.record(p, ms(20), now);
    let first = d.delay(p, now).unwrap();
    for _ in 0..100 {
        d.record(p, ms(400), now);
    }
    assert_eq!(d.delay(p, now), Some(first), "cached within the period");
    let later = now + ms(REFRESH_MS);
    assert!(d.delay(p, later).unwrap() > ms(300));
}

#[test]
fn an_idle_window_goes_to_the_next_model_that_needs_it() {
    // 10 s window, halves of 5 s; two windows, one set.
    let (d, now) = delays(|b| {
        b.max_models(2)
            .min_samples(1)
            .window(Duration::from_secs(10))
    });
    let a = d.place(Some(100), now);
    let b = d.place(Some(200), now);
    d.record(a, ms(40), now);
    assert_eq!(d.place(Some(300), now), Place::Shared, "both windows held");
    // Half a window on, `b` is used: `a` is not idle yet.
    let t1 = now + Duration::from_secs(5);
    assert_eq!(d.delay(b, t1), None);
    assert_eq!(d.place(Some(300), t1), Place::Shared);
    assert_eq!(d.find(300, t1), Some(Place::Shared));
    // A whole window after its last use, `a`'s window is idle: the
    // next new model takes it, empty.
    let t2 = now + Duration::from_secs(10);
    assert_eq!(d.find(300, t2), None, "a window is free for it");
    let c = d.place(Some(300), t2);
    assert_eq!(c, a, "a's window");
    assert_eq!(d.delay(c, t2), None, "a's samples are gone");
    d.record(c, ms(90), t2);
    let t3 = t2 + ms(REFRESH_MS);
    assert!(d.delay(c, t3).unwrap() > ms(80), "c's own sample");
    // `b` (used at t1) keeps its window; `a`, back, shares.
    assert_eq!(d.place(Some(200), t3), b);
    assert_eq!(d.place(Some(100), t3), Place::Shared);
    assert_eq!(d.tracked(), 2);
}

#[test]
fn two_choices_track_a_catalogue_of_five_eighths_of_the_bound_whole() {
    // 64 windows in 8 sets of 8. Measured over 1,000 random catalogues:
    // none of 40 models shares, 0.007 of 48 on average, 2.5 of 64.
    let now = Instant::now();
    for seed in 0..50 {
        let d = Delays::new(&HedgeConfig::default(), now);
        for i in 0..40 {
            let model = crate::route::ModelId::new(&format!("model-{seed}-{i}")).unwrap();
            let place = d.place(Some(model.hash64()), now);
            assert_ne!(place, Place::Shared, "catalogue {seed}, model {i}");
        }
        assert_eq!(d.tracked(), 40);
    }
}

#[test]
fn models_past_the_bound_share_one_window() {
    let (d, now) = delays(|b| b.max_models(2).min_samples(1));
    let a = d.place(Some(100), now);
    let b = d.place(Some(200), now);
    let c = d.place(Some(300), now);
    let e = d.place(Some(400), now);
    assert!(matches!(a, Place::Tracked(_)) && matches!(b, Place::Tracked(_)));
    assert_eq!((c, e), (Place::Shared, Place::Shared));
    d.record(c, ms(80), now);
    assert!(d.delay(e, now).unwrap() > ms(70), "shared by the rest");
    assert_eq!(d.delay(a, now), None);
    // Hash 0 is a valid model hash too.
    assert_eq!(d.place(Some(0), now), Place::Shared);
    assert_eq!(d.find(999, now), Some(Place::Shared), "no window left");
}

/// The sample that completes the minimum is counted at the next read,
/// not up to a refresh period later: the first request after warm-up
/// hedges (issue 40: the first slow request after 20 quick ones was not).
#[test]
fn the_minimum_reached_gives_a_delay_at_once() {
    let (d, now) = delays(|b| b.min_samples(20));
    let p = d.place(Some(5), now);
    for _ in 0..19 {
        d.record(p, ms(10), now);
        assert_eq!(d.delay(p, now), None);
    }
    d.record(p, ms(10), now);
    assert!(d.delay(p, now).is_some(), "the 20th sample, same instant");
}
