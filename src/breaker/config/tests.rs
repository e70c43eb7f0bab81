use super::*;

#[test]
fn every_field_out_of_range_is_named() {
    let b = BreakerConfig::builder;
    let ms = Duration::from_millis;
    let cases: Vec<(BreakerConfigBuilder, &str)> = vec![
        (b().window(0), "window"),
        (b().window(10_001), "window"),
        (b().time_window(ms(99), 1), "time_window"),
        (b().time_window(ms(1_000), 0), "time_window"),
        (b().time_window(ms(100), 101), "time_window"),
        (b().window(5).minimum_calls(6), "minimum_calls"),
        (b().minimum_calls(0), "minimum_calls"),
        (b().failure_rate_threshold(0.0), "failure_rate_threshold"),
        (
            b().failure_rate_threshold(f64::NAN),
            "failure_rate_threshold",
        ),
        (
            b().slow_call_rate_threshold(1.01),
            "slow_call_rate_threshold",
        ),
        (b().slow_call_duration(Duration::ZERO), "slow_call_duration"),
        (b().consecutive_failures(0), "consecutive_failures"),
        (b().half_open_permits(0), "half_open_permits"),
        (b().half_open_max_wait(Duration::ZERO), "half_open_max_wait"),
        (
            b().open_duration(Duration::from_secs(3601)),
            "open_duration",
        ),
        (
            b().open_duration(ms(10)).max_open_duration(ms(9)),
            "max_open_duration",
        ),
    ];
    for (builder, field) in cases {
        assert_eq!(builder.build().unwrap_err().field, field);
    }
    let time = b()
        .time_window(Duration::from_secs(10), 10)
        .minimum_calls(500);
    assert!(time.build().is_ok(), "a time window has no call-count cap");
    let finest = b().time_window(ms(100), 100);
    assert!(finest.build().is_ok(), "buckets of exactly 1 ms");
}

#[test]
fn every_field_reads_back() {
    let ms = Duration::from_millis;
    let p = BreakerConfig::builder()
        .time_window(ms(2_000), 4)
        .minimum_calls(7)
        .failure_rate_threshold(0.3)
        .slow_call_rate_threshold(0.6)
        .slow_call_duration(ms(250))
        .consecutive_failures(4)
        .half_open_permits(5)
        .half_open_max_wait(ms(900))
        .open_duration(ms(300))
        .max_open_duration(ms(4_000))
        .jitter(false)
        .build()
        .unwrap();
    let window = SlidingWindow::Time {
        duration: ms(2_000),
        buckets: 4,
    };
    assert_eq!(p.window(), window);
    assert_eq!(p.minimum_calls(), 7);
    assert_eq!(p.failure_rate_threshold(), 0.3);
    assert_eq!(p.slow_call_rate_threshold(), 0.6);
    assert_eq!(p.slow_call_duration(), ms(250));
    assert_eq!(p.consecutive_failures(), Some(4));
    assert_eq!(p.half_open_permits(), 5);
    assert_eq!(p.half_open_max_wait(), ms(900));
    assert_eq!(p.open_duration(), ms(300));
    assert_eq!(p.max_open_duration(), ms(4_000));
    assert!(!p.jitter());
    let d = BreakerConfig::default();
    assert_eq!(d.window(), SlidingWindow::Count { calls: 20 });
    assert_eq!(d.consecutive_failures(), None);
    assert!(d.jitter());
}

#[test]
fn the_open_ceiling_doubles_up_to_the_maximum() {
    let p = BreakerConfig::builder()
        .open_duration(Duration::from_secs(1))
        .max_open_duration(Duration::from_secs(10))
        .build()
        .unwrap();
    let secs: Vec<u64> = (0..6).map(|n| p.open_ceiling(n).as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
    assert_eq!(p.open_ceiling(u32::MAX), Duration::from_secs(10));
}

#[test]
fn minimum_calls_follows_a_small_count_window_unless_set() {
    let b = BreakerConfig::builder;
    let p = b().window(5).build().expect("window(5) alone builds");
    assert_eq!(p.minimum_calls(), 5);
    assert_eq!(b().window(20).build().unwrap().minimum_calls(), 10);
    assert_eq!(b().window(1).build().unwrap().minimum_calls(), 1);
    // Set before or after the window, an explicit minimum is kept as set.
    assert_eq!(
        b().window(5)
            .minimum_calls(3)
            .build()
            .unwrap()
            .minimum_calls(),
        3
    );
    assert_eq!(
        b().minimum_calls(3)
            .window(5)
            .build()
            .unwrap()
            .minimum_calls(),
        3
    );
    let time = b()
        .time_window(Duration::from_secs(10), 10)
        .build()
        .unwrap();
    assert_eq!(time.minimum_calls(), 10, "a time window keeps the default");
}

#[test]
fn an_explicit_minimum_calls_above_a_count_window_is_a_typed_error() {
    for builder in [
        BreakerConfig::builder().window(5).minimum_calls(6),
        BreakerConfig::builder().minimum_calls(10).window(5),
    ] {
        let err = builder.build().unwrap_err();
        assert_eq!(err.field, "minimum_calls");
        assert!(
            err.to_string().contains("at most the window's calls"),
            "{err}"
        );
    }
}
