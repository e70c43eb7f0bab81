//! A request that is not HTTP routed from a borrowed `&str`
//! (`Route::new(&self.model)`, no `RouteInfo` stored): the same owners as
//! an `http::Request` with that `x-model-id`, and an invalid name failed
//! with a typed `InvalidRoute`, never sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tower::discover::ServiceList;
use tower::{service_fn, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::error::{BoxError, InvalidReason, InvalidRoute};
use tower_model_balance::route::{ModelId, Routable, Route, Urgency};

/// A request of a home-grown protocol: its model is a plain `String`.
#[derive(Debug, Clone)]
struct Infer {
    model: String,
    urgent: bool,
}

impl Routable for Infer {
    fn route(&self) -> Result<Route<'_>, InvalidRoute> {
        let urgency = if self.urgent {
            Urgency::High
        } else {
            Urgency::Normal
        };
        Ok(Route::new(&self.model)?.with_urgency(urgency))
    }
}

const NAMES: [&str; 6] = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"];

fn classify(result: Result<&String, &std::io::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Failure,
    }
}

/// Backends answering their own name for requests of type `Req`,
/// counting the calls.
fn backends<Req: Send + 'static>(
    calls: &Arc<AtomicUsize>,
) -> Vec<Backend<impl Service<Req, Response = String, Error = std::io::Error, Future: Send> + Clone>>
{
    NAMES
        .iter()
        .map(|name| {
            let calls = calls.clone();
            let svc = service_fn(move |_: Req| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, std::io::Error>(name.to_string()) }
            });
            Backend::new(BackendId::new(name).expect("a valid ID"), svc)
        })
        .collect()
}

#[tokio::test]
async fn a_model_borrowed_as_str_goes_to_the_owners_its_header_goes_to() {
    let calls = Arc::default();
    // Two owners a model, so that the owner picked says something.
    let config = || {
        BalanceConfig::builder()
            .owners(2)
            .min_owners(2)
            .build()
            .expect("a valid config")
    };
    let by_str = ModelBalancer::new(ServiceList::new(backends::<Infer>(&calls)), config())
        .expect("inside a runtime")
        .at_response(classify);
    let by_header = ModelBalancer::new(
        ServiceList::new(backends::<http::Request<()>>(&calls)),
        config(),
    )
    .expect("inside a runtime")
    .at_response(classify);
    for i in 0..24 {
        let model = format!("model-{i}");
        let infer = Infer {
            model: model.clone(),
            urgent: i % 2 == 0,
        };
        let served = by_str.clone().oneshot(infer).await.expect("served");
        let req = http::Request::builder()
            .header("x-model-id", &model)
            .body(())
            .expect("a request");
        let via_header = by_header.clone().oneshot(req).await.expect("served");
        let id = ModelId::new(&model).expect("a valid ID");
        let owners = by_str.handle().owners(&id);
        assert_eq!(owners, by_header.handle().owners(&id), "{model}");
        assert_eq!(owners.len(), 2, "{model}: {owners:?}");
        assert!(
            owners.iter().any(|o| o.as_str() == served),
            "{model}: {served} of {owners:?}"
        );
        assert_eq!(served, via_header, "{model}");
    }
}

#[tokio::test]
async fn an_invalid_model_str_fails_the_request_with_a_typed_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let balancer = ModelBalancer::new(
        ServiceList::new(backends::<Infer>(&calls)),
        BalanceConfig::default(),
    )
    .expect("inside a runtime")
    .at_response(classify);
    let cases = [
        ("", InvalidReason::Empty),
        ("two words", InvalidReason::ForbiddenCharacter),
        ("tab\t", InvalidReason::ForbiddenCharacter),
    ];
    for (model, reason) in cases {
        let req = Infer {
            model: model.to_string(),
            urgent: false,
        };
        let err: BoxError = balancer.clone().oneshot(req).await.expect_err(model);
        let invalid = err.downcast_ref::<InvalidRoute>().expect("an InvalidRoute");
        assert_eq!(
            (invalid.source, invalid.reason),
            ("model", reason),
            "{model:?}"
        );
    }
    let long = Infer {
        model: "m".repeat(ModelId::MAX_LEN + 1),
        urgent: false,
    };
    let err = balancer.clone().oneshot(long).await.expect_err("too long");
    let invalid = err.downcast_ref::<InvalidRoute>().expect("an InvalidRoute");
    assert_eq!(invalid.reason, InvalidReason::TooLong(ModelId::MAX_LEN));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "sent nowhere");
    assert_eq!(balancer.handle().stats().invalid_route, 4, "each counted");
    // The balancer goes on serving.
    let ok = Infer {
        model: "resnet-50".into(),
        urgent: false,
    };
    balancer.oneshot(ok).await.expect("served");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
