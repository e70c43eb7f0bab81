use std::time::Duration;

use super::*;

#[test]
fn defaults_build_and_weights_are_normalized() {
    let p = HealthConfig::builder().build().unwrap();
    assert_eq!(p, HealthConfig::default());
    let p = HealthConfig::builder()
        .weights(2.0, 1.0, 1.0)
        .build()
        .unwrap();
    assert_eq!(p.weights(), [0.5, 0.25, 0.25]);
}

#[test]
fn every_field_out_of_range_is_named() {
    let b = HealthConfig::builder;
    let cases = [
        (b().weights(0.0, 0.0, 0.0), "weights"),
        (b().weights(f64::NAN, 1.0, 1.0), "weights"),
        (b().weights(-1.0, 1.0, 1.0), "weights"),
        (b().interval(Duration::ZERO), "interval"),
        (b().error_alpha(0.0), "error_alpha"),
        (b().latency_alpha(1.5), "latency_alpha"),
        (b().failure_penalty(Duration::ZERO), "failure_penalty"),
        (
            b().relax_half_life(Duration::from_millis(1)),
            "relax_half_life",
        ),
        (b().thresholds(0.3, 0.3), "thresholds"),
        (b().thresholds(-0.1, 0.3), "thresholds"),
        (b().thresholds(0.2, f64::NAN), "thresholds"),
        (b().thresholds(0.5, 1.0), "thresholds"),
        (b().weights(f64::MAX, f64::MAX, 1.0), "weights"),
        (b().queue_scale(0.0), "queue_scale"),
        (b().connections(0, 10), "connections"),
        (b().connections(10, 10), "connections"),
        (b().outlier_factor(Some(1.0)), "outlier_factor"),
        (b().outlier_ejection(Duration::ZERO), "outlier_ejection"),
        (b().max_ejected_share(1.5), "max_ejected_share"),
        (b().warm_up(Duration::from_secs(7200)), "warm_up"),
        (b().warm_up_min_weight(0.0), "warm_up_min_weight"),
    ];
    for (builder, field) in cases {
        assert_eq!(builder.build().unwrap_err().field, field);
    }
}

#[test]
fn at_least_one_backend_may_be_ejected_unless_the_share_is_zero() {
    let p = HealthConfig::default();
    assert_eq!(p.max_ejected(0), 0);
    assert_eq!(p.max_ejected(1), 1);
    assert_eq!(p.max_ejected(8), 2);
    assert_eq!(p.max_ejected(100), 30);
    let none = HealthConfig::builder()
        .max_ejected_share(0.0)
        .build()
        .unwrap();
    assert_eq!(none.max_ejected(8), 0);
}
