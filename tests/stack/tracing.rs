//! Every routing decision is traced with structured fields: the
//! balancer's pick in a `pick` span (model, kind, urgency) with a `picked`
//! or `no healthy backend` event inside, and the hedge's sends, wins and
//! suppressions as events.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tower::{discover::ServiceList, service_fn, Layer, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::HedgeLayer;

use crate::slow_first;
use slow_first::{after_10ms, inference, slow_first};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

type Endpoint =
    tower::util::BoxCloneSyncService<http::Request<String>, http::Response<String>, BoxError>;

/// A span or event: its name (an event's message) and `field=value`s, and
/// for an event, the spans it happened in.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    fields: Vec<(String, String)>,
    within: Vec<String>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.name = value;
        } else {
            self.fields.push((field.name().to_string(), value));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.name = value.to_string();
        } else {
            self.fields
                .push((field.name().to_string(), value.to_string()));
        }
    }
}

/// Records every span and event, at every level.
#[derive(Default)]
struct Recorder {
    next: AtomicU64,
    spans: Mutex<Vec<Seen>>,
    events: Mutex<Vec<Seen>>,
    /// The spans entered on this (single) thread, innermost last.
    stack: Mutex<Vec<u64>>,
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut seen = Seen {
            name: span.metadata().name().to_string(),
            ..Seen::default()
        };
        span.record(&mut seen);
        self.spans.lock().unwrap().push(seen);
        Id::from_u64(self.next.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut seen = Seen::default();
        event.record(&mut seen);
        let spans = self.spans.lock().unwrap();
        seen.within = self
            .stack
            .lock()
            .unwrap()
            .iter()
            .map(|&id| spans[id as usize - 1].name.clone())
            .collect();
        drop(spans);
        self.events.lock().unwrap().push(seen);
    }

    fn enter(&self, span: &Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut stack = self.stack.lock().unwrap();
        if let Some(at) = stack.iter().rposition(|&id| id == span.into_u64()) {
            stack.remove(at);
        }
    }
}

/// Recomputes every callsite's interest, this thread's recorder included:
/// called just before the traced call. tracing-core registers a callsite
/// by computing its interest and then listing it, while `set_default`
/// adds its subscriber and then recomputes the callsites listed: another
/// test's thread registering `pick` for the first time across a
/// `set_default` stores "never" for the whole process, and this test
/// records nothing (seen once in CI: "a pick span").
fn rebuild_interest() {
    tracing::callsite::rebuild_interest_cache();
}

/// The first event with `message`.
fn event(recorder: &Recorder, message: &str) -> Option<Seen> {
    let events = recorder.events.lock().unwrap();
    events.iter().find(|e| e.name == message).cloned()
}

#[tokio::test(flavor = "current_thread")]
async fn a_pick_is_a_span_with_its_route_and_an_event_with_its_outcome() {
    let recorder = Arc::new(Recorder::default());
    let _default = tracing::subscriber::set_default(recorder.clone());

    let backend = Backend::new(
        BackendId::new("gpu-0").unwrap(),
        service_fn(|_req: http::Request<String>| async {
            Ok::<_, BoxError>(http::Response::new(String::new()))
        }),
    );
    let balancer = ModelBalancer::new(ServiceList::new([backend]), BalanceConfig::default())
        .expect("a balancer");
    let request = http::Request::post("/infer")
        .header("x-model-id", "llama-3-8b")
        .header("x-urgency", "high")
        .body(String::new())
        .unwrap();
    rebuild_interest();
    balancer.oneshot(request).await.expect("served");

    let span = recorder
        .spans
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.name == "pick")
        .cloned()
        .expect("a pick span");
    assert_eq!(span.field("model"), Some("llama-3-8b"));
    assert_eq!(span.field("kind"), Some("Inference"));
    assert_eq!(span.field("urgency"), Some("High"));
    let picked = event(&recorder, "picked").expect("a picked event");
    assert_eq!(picked.within, ["pick"], "inside the pick span");
    assert_eq!(picked.field("backend"), Some("gpu-0"));
    assert_eq!(picked.field("branch"), Some("ColdOwner"));
    assert_eq!(picked.field("owners"), Some("1"));
}

#[tokio::test(flavor = "current_thread")]
async fn no_backend_is_an_event_naming_the_model() {
    let recorder = Arc::new(Recorder::default());
    let _default = tracing::subscriber::set_default(recorder.clone());
    let none: Vec<Backend<Endpoint>> = Vec::new();
    let balancer =
        ModelBalancer::new(ServiceList::new(none), BalanceConfig::default()).expect("a balancer");
    let request = http::Request::post("/infer")
        .header("x-model-id", "llama-3-8b")
        .body(String::new())
        .unwrap();
    rebuild_interest();
    assert!(balancer.oneshot(request).await.is_err());
    let seen = event(&recorder, "no healthy backend").expect("an event");
    assert_eq!(seen.field("model"), Some("llama-3-8b"));
    assert_eq!(seen.within, ["pick"]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn hedge_decisions_are_events() {
    let recorder = Arc::new(Recorder::default());
    let _default = tracing::subscriber::set_default(recorder.clone());
    let policy = after_10ms()
        .budget_ratio(0.5)
        .budget_min_per_sec(0)
        .build()
        .unwrap();
    let overloaded = Arc::new(AtomicBool::new(true));
    let gate = {
        let overloaded = overloaded.clone();
        move || {
            if overloaded.load(Ordering::SeqCst) {
                1.0
            } else {
                0.0
            }
        }
    };
    let layer = HedgeLayer::with_load_gate(policy, gate);
    let send = || layer.layer(slow_first().0).oneshot(inference());
    rebuild_interest();
    send().await.unwrap();
    let load = event(&recorder, "hedge suppressed: fleet over its load threshold")
        .expect("a load suppression");
    assert_eq!(load.field("utilization"), Some("1.0"));
    overloaded.store(false, Ordering::SeqCst);
    send().await.unwrap();
    assert!(event(&recorder, "hedge sent").is_some());
    let won = event(&recorder, "hedge won").expect("a win");
    assert_eq!(won.field("after_ms"), Some("1"));
    send().await.unwrap();
    assert!(event(&recorder, "hedge suppressed: budget spent").is_some());
}
