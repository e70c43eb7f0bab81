//! Open: the base duration, the exponential backoff of reopenings, and
//! jitter.

use super::*;

/// Opens `s` again from half-open at `now` (its open time being up), with
/// one failed probe; the instant it opened.
fn reopen(s: &mut CircuitState, now: Instant) -> Transition {
    let (probe, t) = s.try_acquire(now).expect("a probe");
    assert_eq!(t.map(|t| t.to), Some(BreakerState::HalfOpen));
    s.record(probe, Outcome::Failure, None, now)
        .expect("reopened")
}

#[test]
fn the_first_trip_opens_for_the_open_duration() {
    let t0 = Instant::now();
    let mut s = breaker(base().consecutive_failures(1).open_duration(secs(3)));
    trip(&mut s, t0);
    assert_eq!(s.open_until(), Some(t0 + secs(3)));
    assert_eq!(s.try_acquire(t0).unwrap_err().retry_after, secs(3));
    let almost = t0 + secs(3) - Duration::from_nanos(1);
    assert_eq!(s.state(almost), BreakerState::Open);
    assert!(s.try_acquire(almost).is_err());
    assert_eq!(s.state(t0 + secs(3)), BreakerState::HalfOpen);
    assert!(s.try_acquire(t0 + secs(3)).is_ok());
}

#[test]
fn each_reopening_doubles_the_wait_up_to_the_maximum_and_closing_resets_it() {
    let mut now = Instant::now();
    let p = base()
        .consecutive_failures(1)
        .half_open_permits(1)
        .open_duration(secs(1))
        .max_open_duration(secs(5));
    let mut s = breaker(p);
    trip(&mut s, now);
    assert_eq!(s.stats(now).reopened, 0);
    let mut waits = vec![s.open_until().unwrap() - now];
    for n in 1..=4 {
        now = s.open_until().unwrap();
        assert_eq!(reopen(&mut s, now).reason, Reason::ProbesFailed);
        assert_eq!(s.stats(now).reopened, n);
        waits.push(s.open_until().unwrap() - now);
    }
    assert_eq!(waits, [secs(1), secs(2), secs(4), secs(5), secs(5)]);
    // A successful round closes and resets the exponent.
    now = s.open_until().unwrap();
    let (probe, _) = s.try_acquire(now).unwrap();
    assert_eq!(
        s.record(probe, Outcome::Success, None, now).unwrap().to,
        BreakerState::Closed
    );
    assert_eq!(s.stats(now).reopened, 0);
    trip(&mut s, now);
    assert_eq!(s.open_until(), Some(now + secs(1)));
}

/// The open durations of `trips` trips of a breaker seeded with `seed`,
/// jitter on, ceiling 1 s.
fn jittered(seed: u64, trips: usize) -> Vec<Duration> {
    let p = base()
        .consecutive_failures(1)
        .open_duration(secs(1))
        .jitter(true);
    let mut s = CircuitState::with_seed(p.build().unwrap(), seed);
    let now = Instant::now();
    (0..trips)
        .map(|_| {
            trip(&mut s, now);
            let wait = s.open_until().unwrap() - now;
            s.set_mode(Mode::Normal, now);
            wait
        })
        .collect()
}

#[test]
fn jitter_draws_open_durations_between_half_the_ceiling_and_the_ceiling() {
    let waits = jittered(42, 500);
    assert!(
        waits.iter().all(|&w| w >= ms(500) && w <= secs(1)),
        "{waits:?}"
    );
    let distinct: std::collections::HashSet<_> = waits.iter().collect();
    assert!(distinct.len() > 450, "{} distinct of 500", distinct.len());
    let mean = waits.iter().sum::<Duration>() / 500;
    assert!(
        (ms(700)..=ms(800)).contains(&mean),
        "uniform in [0.5 s, 1 s]: {mean:?}"
    );
}

proptest! {
    /// Equal jitter: whatever the seed, the base, the ceiling and the
    /// reopenings, every open time drawn lies in [d / 2, d], `d` the
    /// backoff's ceiling at that reopening.
    #[test]
    fn every_drawn_open_time_lies_between_half_the_ceiling_and_the_ceiling(
        seed in any::<u64>(),
        base_ms in 1u64..=3_600_000,
        max_factor in 1u32..=64,
        reopenings in 0usize..8,
    ) {
        let open = ms(base_ms);
        let p = base()
            .consecutive_failures(1)
            .half_open_permits(1)
            .open_duration(open)
            .max_open_duration((open * max_factor).min(secs(24 * 3600)))
            .jitter(true)
            .build()
            .unwrap();
        let mut s = CircuitState::with_seed(p.clone(), seed);
        let mut now = Instant::now();
        trip(&mut s, now);
        for _ in 0..=reopenings {
            let d = p.open_ceiling(s.stats(now).reopened);
            let wait = s.open_until().unwrap() - now;
            prop_assert!(wait >= d / 2 && wait <= d, "{wait:?} outside [{:?}, {d:?}]", d / 2);
            now = s.open_until().unwrap();
            reopen(&mut s, now);
        }
    }
}

#[test]
fn jitter_is_deterministic_for_a_seed() {
    assert_eq!(jittered(42, 50), jittered(42, 50));
    assert_ne!(jittered(42, 50), jittered(43, 50));
}

/// The first outputs of SplitMix64 from seed 0, as Vigna's reference
/// implementation gives them: the jitter is that generator.
#[test]
fn the_jitter_generator_is_splitmix64() {
    let mut s = CircuitState::with_seed(base().build().unwrap(), 0);
    let draws: Vec<u64> = (0..3).map(|_| s.next_random()).collect();
    assert_eq!(
        draws,
        [
            0xe220_a839_7b1d_cdaf,
            0x6e78_9e6a_a1b9_65f4,
            0x06c4_5d18_8009_454f
        ]
    );
}

#[test]
fn a_jittered_open_duration_is_half_the_ceiling_one_ns_and_the_draw_modulo_the_other_half() {
    let p = base()
        .consecutive_failures(1)
        .open_duration(secs(1))
        .jitter(true);
    let mut s = CircuitState::with_seed(p.build().unwrap(), 0);
    let now = Instant::now();
    trip(&mut s, now);
    // 500_000_000 + 1 + 0xe220_a839_7b1d_cdaf % 500_000_000.
    let wait = Duration::from_nanos(658_607_536);
    assert_eq!(s.open_until(), Some(now + wait));
}

#[test]
fn breakers_made_without_a_seed_draw_apart() {
    let (a, b) = (next_seed(), next_seed());
    assert_ne!(a, b);
    let p = base().jitter(true).build().unwrap();
    let (s, t) = (CircuitState::new(p.clone()), CircuitState::new(p));
    assert_ne!(s.rng, t.rng, "each breaker its own jitter");
}

#[test]
fn jitter_scales_with_the_backoff_ceiling() {
    let p = base()
        .consecutive_failures(1)
        .half_open_permits(1)
        .open_duration(secs(1))
        .max_open_duration(secs(8))
        .jitter(true);
    let mut s = CircuitState::with_seed(p.build().unwrap(), 9);
    let mut now = Instant::now();
    trip(&mut s, now);
    let mut longest_third = Duration::ZERO;
    for _ in 0..200 {
        now = s.open_until().unwrap();
        reopen(&mut s, now);
        let n = s.stats(now).reopened;
        let wait = s.open_until().unwrap() - now;
        let ceiling = secs(1) * 2u32.pow(n.min(3));
        assert!(
            wait >= ceiling / 2 && wait <= ceiling,
            "reopening {n}: {wait:?} outside [{:?}, {ceiling:?}]",
            ceiling / 2
        );
        if n >= 3 {
            longest_third = longest_third.max(wait);
        }
    }
    assert!(longest_third > secs(4), "draws reach past the base × 4");
}

/// A seed whose second draw is 0 for a 1 ms ceiling (found by search): the
/// shortest wait, half the ceiling and 1 ns.
const ZERO_SECOND_DRAW: u64 = 0xc391_0c8d_017e_356b;

#[test]
fn a_round_timing_out_on_a_zero_jitter_draw_still_reports_its_reopening() {
    let p = base()
        .consecutive_failures(1)
        .open_duration(ms(1))
        .max_open_duration(ms(1))
        .half_open_max_wait(secs(1))
        .jitter(true);
    let mut s = CircuitState::with_seed(p.build().unwrap(), ZERO_SECOND_DRAW);
    let t0 = Instant::now();
    trip(&mut s, t0);
    let at = s.open_until().unwrap();
    let (_probe, t) = s.try_acquire(at).unwrap();
    assert_eq!(t.map(|t| t.reason), Some(Reason::OpenElapsed));
    // The round times out; the reopening draws its open duration.
    let late = at + secs(1);
    let transition = match s.try_acquire(late) {
        Ok((_, t)) => t,
        Err(refused) => refused.transition,
    };
    let t = transition.expect("the reopening is reported");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            BreakerState::HalfOpen,
            BreakerState::Open,
            Reason::HalfOpenTimeout
        )
    );
}
