//! The table after the `balance` group: ns per request, warm shares and
//! the done-when ratios.

use crate::{Env, GROUP, MIN_WARM, SIZES};

/// Prints ns per request, the balancer rows' warm shares and the
/// done-when ratios of the warm rows (target in parentheses, then `ok` or
/// `MISS`) for the rows measured; then panics if a `model_balancer` row
/// was under [`MIN_WARM`].
pub fn report(env: &Env) {
    if env.samples.borrow().is_empty() {
        return;
    }
    let get = |kind: &str, n: usize| env.median(&format!("{kind}/{n}"));
    let warm = |kind: &str, n: usize| env.warm.borrow().get(&format!("{kind}/{n}")).copied();
    let ratio = |a: Option<f64>, b: Option<f64>, target: f64| match (a, b) {
        (Some(a), Some(b)) => {
            let verdict = if a / b <= target { "ok" } else { "MISS" };
            format!("{:.3} {verdict}", a / b)
        }
        _ => "-".to_owned(),
    };
    let line = |label: &str, cell: &dyn Fn(usize) -> String| {
        print!("  {label:<54}");
        SIZES.iter().for_each(|&n| print!("{:>12}", cell(n)));
        println!();
    };
    let dash = || "-".to_owned();
    println!("\n{GROUP}: ns per request, median of this run's samples");
    if let Some(ns) = env.median("direct") {
        println!("  {:<54}{ns:>12.1}", "direct");
    }
    line("N", &|n| n.to_string());
    for kind in [
        "model_balancer",
        "model_balancer_route",
        "model_balancer_prefix",
        "model_balancer_cold",
        "tower_p2c_buffer",
        "tower_p2c",
    ] {
        line(kind, &|n| {
            get(kind, n).map_or_else(dash, |ns| format!("{ns:.1}"))
        });
    }
    for kind in [
        "model_balancer",
        "model_balancer_route",
        "model_balancer_prefix",
        "model_balancer_cold",
    ] {
        let label = format!("{kind} warm share");
        line(&label, &|n| {
            warm(kind, n).map_or_else(dash, |share| format!("{:.1}%", 100.0 * share))
        });
    }
    for (baseline, target) in [("tower_p2c_buffer", 0.25), ("tower_p2c", 0.5)] {
        let label = format!("model_balancer ÷ {baseline} (≤ {target})");
        line(&label, &|n| {
            ratio(get("model_balancer", n), get(baseline, n), target)
        });
    }
    line(
        "model_balancer_prefix ÷ model_balancer_route (≤ 1.2)",
        &|n| {
            ratio(
                get("model_balancer_prefix", n),
                get("model_balancer_route", n),
                1.2,
            )
        },
    );
    line("model_balancer_prefix ÷ model_balancer", &|n| {
        get("model_balancer_prefix", n)
            .zip(get("model_balancer", n))
            .map_or_else(dash, |(a, b)| format!("{:.3}", a / b))
    });
    let small = SIZES[0];
    for (large, target) in [(1024, None), (10_000, Some(1.5))] {
        let (a, b) = (get("model_balancer", large), get("model_balancer", small));
        let cell = match target {
            Some(target) => ratio(a, b, target),
            None => a.zip(b).map_or_else(dash, |(a, b)| format!("{:.3}", a / b)),
        };
        let label = match target {
            Some(target) => format!("model_balancer/{large} ÷ model_balancer/{small} (≤ {target})"),
            None => format!("model_balancer/{large} ÷ model_balancer/{small}"),
        };
        println!("  {label:<54}{cell:>12}");
    }
    let cold: Vec<String> = [
        "model_balancer",
        "model_balancer_route",
        "model_balancer_prefix",
    ]
    .iter()
    .flat_map(|kind| SIZES.iter().map(move |&n| (kind, n)))
    .filter_map(|(kind, n)| {
        let share = warm(kind, n)?;
        (share < MIN_WARM).then(|| format!("{kind}/{n} ({:.1}%)", 100.0 * share))
    })
    .collect();
    assert!(
        cold.is_empty(),
        "warm share under {:.0}% in {}: those figures time the cold path, not a fleet \
         that holds its working set; the ratios above do not stand",
        100.0 * MIN_WARM,
        cold.join(", ")
    );
}
