//! The balancer's figures through the `metrics` facade: every documented
//! series, with the handle's values.

use crate::nodes;

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use tower::discover::ServiceList;
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};

use nodes::{worker, Behavior, Node};

use crate::slow_first;
use slow_first::{after_10ms, inference, slow_first};

/// (name, label value) → value, of one recording.
fn snapshot(recorder: &DebuggingRecorder) -> HashMap<(String, String), f64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value): (CompositeKey, _, _, DebugValue)| {
            let (kind, key) = key.into_parts();
            let label = key
                .labels()
                .map(|l| l.value().to_string())
                .collect::<Vec<_>>()
                .join(",");
            let value = match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(v)) => v as f64,
                (MetricKind::Gauge, DebugValue::Gauge(v)) => v.into_inner(),
                other => panic!("unexpected {other:?}"),
            };
            ((key.name().to_string(), label), value)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_series_carries_the_handles_figures() {
    let ok = Node::new("ok", Behavior::Serve(std::time::Duration::from_millis(5)));
    let bad = Node::new("bad", Behavior::Fail);
    let list = ServiceList::new(vec![ok.backend(), bad.backend()]);
    let balancer = ModelBalancer::new(list, BalanceConfig::default()).unwrap();
    let failed = worker(balancer.clone(), "index".into(), true, 40).await;
    let failed = failed + worker(balancer.clone(), "llama".into(), false, 10).await;

    let recorder = DebuggingRecorder::new();
    let handle = balancer.handle();
    metrics::with_local_recorder(&recorder, || tower_model_balance::metrics::record(&handle));
    let got = snapshot(&recorder);
    let get = |name: &str, label: &str| got[&(name.to_string(), label.to_string())];

    let stats = handle.stats();
    assert_eq!(
        get("model_balance_requests_total", "update"),
        stats.update as f64
    );
    assert_eq!(get("model_balance_requests_total", "update"), 40.0);
    let inference = stats.resident_owner + stats.cold_owner + stats.spill + stats.panic;
    assert_eq!(
        get("model_balance_requests_total", "resident_owner")
            + get("model_balance_requests_total", "cold_owner")
            + get("model_balance_requests_total", "spill")
            + get("model_balance_requests_total", "panic"),
        inference as f64
    );
    assert_eq!(get("model_balance_requests_total", "no_backend"), 0.0);
    let sent = get("model_balance_backend_requests_total", "ok")
        + get("model_balance_backend_requests_total", "bad");
    assert_eq!(sent, 50.0);
    assert_eq!(get("model_balance_backend_failures_total", "ok"), 0.0);
    assert_eq!(
        get("model_balance_backend_failures_total", "bad") as usize,
        failed
    );
    assert!(failed > 0);
    for status in handle.backends() {
        let id = status.id.as_str();
        assert_eq!(get("model_balance_backend_in_flight", id), 0.0);
        let state = get("model_balance_backend_breaker_state", id);
        let expected = match status.breaker {
            tower_model_balance::breaker::BreakerState::Closed => 0.0,
            tower_model_balance::breaker::BreakerState::HalfOpen => 1.0,
            _ => 2.0,
        };
        assert_eq!(state, expected, "{id}");
        assert_eq!(
            get("model_balance_backend_breaker_trips_total", id),
            status.breaker_trips as f64
        );
        let t = status.breaker_transitions;
        for (to, value) in [
            ("closed", t.to_closed),
            ("half_open", t.to_half_open),
            ("open", t.to_open),
        ] {
            assert_eq!(
                get(
                    "model_balance_backend_breaker_transitions_total",
                    &format!("{id},{to}")
                ),
                value as f64,
                "{id} to {to}"
            );
        }
        assert_eq!(get("model_balance_backend_health_score", id), status.health);
        assert_eq!(
            get("model_balance_backend_ejected", id),
            f64::from(u8::from(status.ejected))
        );
        assert_eq!(
            get("model_balance_backend_ejections_total", id),
            status.ejections as f64
        );
    }
    assert!(
        !got.keys()
            .any(|(name, _)| name == "model_balance_placement_total"),
        "no placement series while placement is off"
    );
    assert_eq!(get("model_balance_shed_total", "normal"), 0.0);
    assert!(
        !got.keys()
            .any(|(name, _)| name == "model_balance_backend_admission_limit"),
        "no admission limits while admission is off"
    );
}

#[tokio::test(start_paused = true)]
async fn the_shed_series_count_by_urgency() {
    use tower_model_balance::backend::{Backend, BackendId};
    use tower_model_balance::balance::{AdmissionConfig, Limit};
    use tower_model_balance::route::{ModelId, RouteInfo, Urgency};

    let backends = (0..2u32).map(|i| {
        let id = BackendId::new(&format!("gpu-{i}")).unwrap();
        Ok::<_, std::convert::Infallible>(tower::discover::Change::Insert(i, Backend::new(id, i)))
    });
    let admission = AdmissionConfig::builder(Limit::fixed(1))
        .critical_headroom(0.0)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::new(futures_util::stream::iter(backends), config).unwrap();
    let now = tokio::time::Instant::now();
    let route = |urgency| {
        let mut route = RouteInfo::new(ModelId::new("m").unwrap());
        route.urgency = urgency;
        route
    };
    let held = balancer.pick_at(&route(Urgency::Normal), now).unwrap();
    for _ in 0..3 {
        assert!(balancer.pick_at(&route(Urgency::Normal), now).is_err());
    }
    assert!(balancer.pick_at(&route(Urgency::Critical), now).is_err());
    drop(held);

    let recorder = DebuggingRecorder::new();
    let handle = balancer.handle();
    metrics::with_local_recorder(&recorder, || tower_model_balance::metrics::record(&handle));
    let got = snapshot(&recorder);
    let get = |name: &str, label: &str| got[&(name.to_string(), label.to_string())];
    assert_eq!(get("model_balance_shed_total", "normal"), 3.0);
    assert_eq!(get("model_balance_shed_total", "high"), 0.0);
    assert_eq!(get("model_balance_shed_total", "critical"), 1.0);
    assert_eq!(get("model_balance_queue_length", ""), 0.0);
    assert_eq!(get("model_balance_backend_admission_limit", "gpu-0"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn the_hedge_series_carry_the_hedge_layers_counters() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tower::{Layer, ServiceExt};
    use tower_model_balance::hedge::HedgeLayer;

    let policy = after_10ms()
        .budget_ratio(0.5)
        .budget_min_per_sec(0)
        .max_utilization(0.8)
        .build()
        .unwrap();
    let overloaded = Arc::new(AtomicBool::new(false));
    let gate = {
        let overloaded = overloaded.clone();
        move || {
            if overloaded.load(Ordering::SeqCst) {
                1.0
            } else {
                0.1
            }
        }
    };
    let layer = HedgeLayer::with_load_gate(policy, gate);
    let send = |layer: &HedgeLayer| layer.layer(slow_first().0).oneshot(inference());
    // Suppressed by load; sent and won (1 extra attempt in 2 requests is
    // within 50%); suppressed by the budget (2 in 3 would not be).
    overloaded.store(true, Ordering::SeqCst);
    send(&layer).await.unwrap();
    overloaded.store(false, Ordering::SeqCst);
    send(&layer).await.unwrap();
    send(&layer).await.unwrap();
    // An update: never hedged, counted as such.
    let mut update = inference();
    update
        .headers_mut()
        .insert("x-request-kind", "update".parse().unwrap());
    layer.layer(slow_first().0).oneshot(update).await.unwrap();
    // One marked to be sent once: never hedged, counted as such.
    let mut once = inference();
    once.extensions_mut()
        .insert(tower_model_balance::route::SendOnce);
    layer.layer(slow_first().0).oneshot(once).await.unwrap();

    let recorder = DebuggingRecorder::new();
    let handle = layer.handle();
    metrics::with_local_recorder(&recorder, || {
        tower_model_balance::metrics::record_hedge(&handle)
    });
    let got = snapshot(&recorder);
    let get = |name: &str, label: &str| got[&(name.to_string(), label.to_string())];
    assert_eq!(get("model_balance_hedge_requests_total", ""), 5.0);
    assert_eq!(get("model_balance_hedges_skipped_total", "update"), 1.0);
    assert_eq!(get("model_balance_hedges_skipped_total", "send_once"), 1.0);
    assert_eq!(get("model_balance_hedges_skipped_total", "warming_up"), 0.0);
    assert_eq!(get("model_balance_hedges_sent_total", ""), 1.0);
    assert_eq!(get("model_balance_hedges_won_total", ""), 1.0);
    assert_eq!(get("model_balance_hedges_suppressed_total", "load"), 1.0);
    assert_eq!(get("model_balance_hedges_suppressed_total", "budget"), 1.0);
    let stats = handle.stats();
    assert_eq!(
        (stats.requests, stats.hedges, stats.hedges_won),
        (5, 1, 1),
        "the figures come from the handle"
    );
}

/// Records the names the facade is given descriptions for.
#[derive(Default)]
struct Descriptions(std::sync::Mutex<Vec<(String, String)>>);

impl Descriptions {
    fn keep(&self, key: metrics::KeyName, help: metrics::SharedString) {
        let entry = (key.as_str().to_string(), help.to_string());
        self.0.lock().unwrap().push(entry);
    }
}

impl metrics::Recorder for Descriptions {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        help: metrics::SharedString,
    ) {
        self.keep(key, help);
    }
    fn describe_gauge(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        help: metrics::SharedString,
    ) {
        self.keep(key, help);
    }
    fn describe_histogram(
        &self,
        key: metrics::KeyName,
        _: Option<metrics::Unit>,
        help: metrics::SharedString,
    ) {
        self.keep(key, help);
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[test]
fn every_documented_series_is_described() {
    let recorder = Descriptions::default();
    metrics::with_local_recorder(&recorder, tower_model_balance::metrics::describe);
    let described = recorder.0.into_inner().unwrap();
    let documented: Vec<String> = include_str!("../../src/metrics.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect();
    assert_eq!(documented.len(), 24, "{documented:?}");
    for name in &documented {
        assert!(
            described
                .iter()
                .any(|(n, help)| n == name && !help.is_empty()),
            "{name} has no help text"
        );
    }
    assert_eq!(
        described.len(),
        documented.len(),
        "no series described twice or undocumented"
    );
}

#[tokio::test(start_paused = true)]
async fn pair_breakers_are_summed_per_backend_never_a_series_per_pair() {
    use tower_model_balance::balance::BreakerScope;
    use tower_model_balance::breaker::BreakerConfig;

    let ok = Node::new("ok", Behavior::Serve(std::time::Duration::from_millis(5)));
    let bad = Node::new("bad", Behavior::Fail);
    let list = ServiceList::new(vec![ok.backend(), bad.backend()]);
    let breaker = BreakerConfig::builder().consecutive_failures(1).build();
    let config = BalanceConfig::builder()
        .breaker(breaker.unwrap())
        .breaker_scope(BreakerScope::BackendModel { max_pairs: 100 })
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(list, config).unwrap();
    for model in ["llama", "mistral", "qwen", "phi"] {
        worker(balancer.clone(), model.into(), false, 10).await;
    }

    let recorder = DebuggingRecorder::new();
    let handle = balancer.handle();
    metrics::with_local_recorder(&recorder, || tower_model_balance::metrics::record(&handle));
    let got = snapshot(&recorder);
    let get = |name: &str, label: &str| got[&(name.to_string(), label.to_string())];
    let trips = "model_balance_backend_pair_breaker_trips_total";
    let open = "model_balance_backend_pair_breakers_open";
    let status = |id: &str| {
        let all = handle.backends();
        all.into_iter().find(|b| b.id.as_str() == id).unwrap()
    };
    let bad = status("bad");
    assert!(bad.pair_breaker_trips >= 1, "{bad:?}");
    assert_eq!(get(trips, "bad"), bad.pair_breaker_trips as f64);
    assert_eq!(get(open, "bad"), bad.pair_breakers_open as f64);
    assert_eq!(bad.pair_breakers_open as u64, bad.pair_breaker_trips);
    assert_eq!((get(trips, "ok"), get(open, "ok")), (0.0, 0.0));
    assert_eq!(
        handle.stats().pair_breaker_trips,
        bad.pair_breaker_trips,
        "the fleet's sum"
    );
    assert_eq!(
        bad.breaker_trips, 0,
        "the backend-level breaker takes no traffic"
    );
    for name in [trips, open] {
        let series = got.keys().filter(|(n, _)| n == name).count();
        assert_eq!(series, 2, "{name}: one per backend");
    }
}
