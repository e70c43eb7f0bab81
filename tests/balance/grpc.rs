//! The balancer's `Classifier::grpc()`: `grpc-status` in a
//! trailers-only head, else in the trailers at the end of the body, decides
//! what the backend's breaker and health record. Endpoints are closures
//! answering a scripted body; no sockets, no clock.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream;
use http::{HeaderMap, HeaderValue};
use http_body_util::{BodyExt, StreamBody};
use tower::discover::ServiceList;
use tower::{service_fn, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::classify::Classifier;

type Frame = Result<http_body::Frame<Bytes>, Infallible>;
type Body = StreamBody<stream::Iter<std::vec::IntoIter<Frame>>>;

/// How the one backend answers: a `grpc-status` in the head
/// (trailers-only, no body), or a message and then trailers with a
/// `grpc-status` (`None`: the body ends after the message, without them).
#[derive(Debug, Clone, Copy)]
enum Answer {
    Head(&'static str),
    Trailers(Option<&'static str>),
}

#[derive(Clone)]
struct Script(Arc<Mutex<Answer>>);

impl Script {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(Answer::Trailers(Some("0")))))
    }

    fn set(&self, answer: Answer) {
        *self.0.lock().unwrap() = answer;
    }

    fn answer(&self) -> http::Response<Body> {
        let answer = *self.0.lock().unwrap();
        let mut frames = Vec::new();
        let mut head = HeaderMap::new();
        match answer {
            Answer::Head(status) => {
                head.insert("grpc-status", HeaderValue::from_static(status));
            }
            Answer::Trailers(status) => {
                frames.push(Ok(http_body::Frame::data(Bytes::from_static(b"msg"))));
                if let Some(status) = status {
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static(status));
                    frames.push(Ok(http_body::Frame::trailers(trailers)));
                }
            }
        }
        let mut rsp = http::Response::new(StreamBody::new(stream::iter(frames)));
        *rsp.headers_mut() = head;
        rsp
    }
}

/// A balancer over one backend answering by `script`; breakers open after
/// 3 failures in a row.
fn balancer(
    script: &Script,
    classifier: Classifier,
) -> ModelBalancer<
    impl tower::Service<http::Request<()>, Response = http::Response<Body>, Error = Infallible> + Clone,
> {
    let script = script.clone();
    let endpoint = service_fn(move |_: http::Request<()>| {
        let rsp = script.answer();
        async move { Ok::<_, Infallible>(rsp) }
    });
    let backend = Backend::new(BackendId::new("g").unwrap(), endpoint);
    let config = BalanceConfig::builder()
        .breaker(
            BreakerConfig::builder()
                .consecutive_failures(3)
                .build()
                .unwrap(),
        )
        .classifier(classifier)
        .build()
        .unwrap();
    ModelBalancer::new(ServiceList::new([backend]), config).unwrap()
}

fn call() -> http::Request<()> {
    http::Request::post("/inference.GRPCInferenceService/ModelInfer")
        .header("x-model-id", "resnet")
        .body(())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_trailers_status_decides_at_the_end_of_the_body() {
    let script = Script::new();
    let balancer = balancer(&script, Classifier::grpc());
    let handle = balancer.handle();
    let failures = || handle.backends()[0].failures;

    // Each row: the trailers' status, and whether it fails the backend.
    for (status, fails) in [
        (Some("0"), false),
        (Some("14"), true),
        (Some("3"), false), // INVALID_ARGUMENT: the caller's
        (Some("13"), true),
        (None, true), // no status at all: the protocol broke
        (Some("not a code"), true),
    ] {
        script.set(Answer::Trailers(status));
        let before = failures();
        let rsp = balancer.clone().oneshot(call()).await.unwrap();
        assert_eq!(handle.in_flight(), 1, "{status:?}: the body is still open");
        assert_eq!(
            failures(),
            before,
            "{status:?}: nothing decided by the head"
        );
        let collected = rsp.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().is_some(), status.is_some());
        assert_eq!(handle.in_flight(), 0, "{status:?}");
        assert_eq!(failures(), before + u64::from(fails), "{status:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_trailers_only_unavailable_fails_at_once_and_opens_the_breaker() {
    let script = Script::new();
    let balancer = balancer(&script, Classifier::grpc());
    let handle = balancer.handle();
    script.set(Answer::Head("14"));
    for sent in 1..=3 {
        let rsp = balancer.clone().oneshot(call()).await.unwrap();
        assert_eq!(rsp.headers()["grpc-status"], "14");
        // Decided by the head: a failure whether the body is read or not.
        if sent % 2 == 0 {
            rsp.into_body().collect().await.unwrap();
        } else {
            drop(rsp);
        }
        assert_eq!(handle.backends()[0].failures, sent);
    }
    let status = &handle.backends()[0];
    assert_eq!(status.breaker, BreakerState::Open, "{status:?}");
    assert_eq!(status.breaker_trips, 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_before_its_status_counts_nothing() {
    let script = Script::new();
    let balancer = balancer(&script, Classifier::grpc());
    let handle = balancer.handle();
    script.set(Answer::Trailers(Some("14")));
    for _ in 0..5 {
        let rsp = balancer.clone().oneshot(call()).await.unwrap();
        drop(rsp);
    }
    let status = &handle.backends()[0];
    assert_eq!(handle.in_flight(), 0);
    assert_eq!(status.failures, 0, "{status:?}");
    assert_eq!(status.breaker, BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn http_status_classification_reads_no_grpc_status() {
    // The default: a 200 succeeds whatever its trailers say — why gRPC
    // backends need `Classifier::grpc()`.
    let script = Script::new();
    let balancer = balancer(&script, Classifier::http());
    let handle = balancer.handle();
    for answer in [Answer::Head("14"), Answer::Trailers(Some("14"))] {
        script.set(answer);
        for _ in 0..3 {
            let rsp = balancer.clone().oneshot(call()).await.unwrap();
            rsp.into_body().collect().await.unwrap();
        }
    }
    let status = &handle.backends()[0];
    assert_eq!(status.failures, 0, "{status:?}");
    assert_eq!(status.breaker, BreakerState::Closed);
}
