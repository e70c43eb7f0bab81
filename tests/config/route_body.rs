//! `ModelFromBody`: the model ID from an OpenAI-style JSON body or a KServe
//! v2 path, in front of an echo service and in front of the balancer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use tower::discover::ServiceList;
use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::error::{BoxError, InvalidReason, InvalidRoute, PayloadTooLarge};
use tower_model_balance::route::{ModelFromBodyLayer, ModelId, RequestKind, RouteInfo, Urgency};

/// A body in several chunks, to check they arrive whole and in order.
fn chunks(parts: &[&[u8]]) -> impl Body<Data = Bytes, Error = Infallible> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
        .iter()
        .map(|p| Ok(Frame::data(Bytes::copy_from_slice(p))))
        .collect();
    http_body_util::StreamBody::new(futures_util::stream::iter(frames))
}

/// A body that fails when read.
struct Poison;

impl Body for Poison {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::other("poisoned body was read"))))
    }
}

/// What the inner service saw.
#[derive(Debug)]
struct Seen {
    route: Option<RouteInfo>,
    /// The body, read whole by the layer.
    body: Bytes,
    headers: HeaderMap,
}

async fn run<B>(layer: ModelFromBodyLayer, req: http::Request<B>) -> Result<Seen, BoxError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let echo = service_fn(|req: http::Request<Full<Bytes>>| async move {
        let route = req.extensions().get::<RouteInfo>().cloned();
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, BoxError>(Seen {
            route,
            body,
            headers: parts.headers,
        })
    });
    layer.layer(echo).oneshot(req).await
}

fn post(path: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(path)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

fn model(seen: &Seen) -> &str {
    seen.route.as_ref().unwrap().model.as_str()
}

fn invalid(err: &BoxError) -> (&'static str, InvalidReason) {
    let err = err.downcast_ref::<InvalidRoute>().expect("InvalidRoute");
    (err.source, err.reason)
}

#[tokio::test]
async fn openai_body_with_extra_and_nested_fields() {
    let body = r#"{"messages":[{"role":"user","content":"{\"model\":\"no\"}"}],
        "tools":{"model":"nested"},"model":"llama-3-8b","temperature":0.2,"stream":true}"#;
    let req = http::Request::post("/v1/chat/completions")
        .header("x-urgency", "high")
        .header("x-request-kind", "update")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let seen = run(ModelFromBodyLayer::default(), req).await.unwrap();
    let mut expected = RouteInfo::new(ModelId::new("llama-3-8b").unwrap());
    expected.kind = RequestKind::Update;
    expected.urgency = Urgency::High;
    expected.payload_bytes = Some(body.len() as u64);
    assert_eq!(seen.route, Some(expected));
    assert_eq!(seen.body, body.as_bytes());
}

#[tokio::test]
async fn bad_bodies_are_typed_errors() {
    let malformed = InvalidReason::MalformedJson { line: 1, column: 1 };
    let cases = [
        (r#"{"model":42}"#, InvalidReason::Unrecognized),
        (r#"{"model":{"id":"m"}}"#, InvalidReason::Unrecognized),
        (r#"{"prompt":"hi"}"#, InvalidReason::Missing),
        (r#"{"model":"llama 3"}"#, InvalidReason::ForbiddenCharacter),
        (r#"{"model":" m"}"#, InvalidReason::ForbiddenCharacter),
        ("model=", malformed),
        ("", InvalidReason::TruncatedJson),
        (r#"{"model":"m","n":["#, InvalidReason::TruncatedJson),
        ("[1,2]", InvalidReason::NotJson),
    ];
    for (body, reason) in cases {
        let err = run(ModelFromBodyLayer::default(), post("/v1/completions", body))
            .await
            .unwrap_err();
        assert_eq!(invalid(&err), ("body", reason), "{body}");
    }
}

#[tokio::test]
async fn limit_is_inclusive() {
    let body = r#"{"model":"m"}"#;
    let exact = ModelFromBodyLayer::builder()
        .limit(body.len())
        .build()
        .unwrap();
    let seen = run(exact, post("/", body)).await.unwrap();
    assert_eq!(model(&seen), "m");

    let under = ModelFromBodyLayer::builder()
        .limit(body.len() - 1)
        .build()
        .unwrap();
    let err = run(under, post("/", body)).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<PayloadTooLarge>(),
        Some(&PayloadTooLarge::new(body.len() - 1))
    );
}

#[tokio::test]
async fn chunked_body_arrives_whole_and_unchanged() {
    let parts: [&[u8]; 4] = [
        b"{\"mod",
        b"el\": \"gpt",
        b"-4o\", \"x\": \"\xc3",
        b"\xa9\"}",
    ];
    let all: Vec<u8> = parts.concat();
    let req = http::Request::post("/v1/completions")
        .body(chunks(&parts))
        .unwrap();
    let seen = run(ModelFromBodyLayer::default(), req).await.unwrap();
    assert_eq!(model(&seen), "gpt-4o");
    assert_eq!(seen.body, all);
    // No content-length: the size is the bytes read.
    assert_eq!(seen.route.unwrap().payload_bytes, Some(all.len() as u64));
}

#[tokio::test]
async fn header_or_extension_route_is_kept_and_the_body_not_parsed() {
    let req = http::Request::post("/v1/completions")
        .header("x-model-id", "from-header")
        .body(Full::new(Bytes::from("not json")))
        .unwrap();
    let seen = run(ModelFromBodyLayer::default(), req).await.unwrap();
    assert!(seen.route.is_none(), "untouched: no extension added");
    assert_eq!(seen.body, "not json");
    assert_eq!(seen.headers["x-model-id"], "from-header");

    let route = RouteInfo::new(ModelId::new("from-ext").unwrap());
    let req = http::Request::post("/v1/completions")
        .extension(route.clone())
        .body(Full::new(Bytes::from("not json")))
        .unwrap();
    let seen = run(ModelFromBodyLayer::default(), req).await.unwrap();
    assert_eq!(seen.route, Some(route));
    assert_eq!(seen.body, "not json");
}

#[tokio::test]
async fn a_body_routed_by_header_is_still_read_under_the_limit() {
    let layer = ModelFromBodyLayer::builder().limit(8).build().unwrap();
    let req = http::Request::post("/v1/completions")
        .header("x-model-id", "m")
        .body(Full::new(Bytes::from("123456789")))
        .unwrap();
    let err = run(layer, req).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<PayloadTooLarge>(),
        Some(&PayloadTooLarge::new(8))
    );
    // A client that breaks its body off fails here, before any backend.
    let req = http::Request::post("/v2/models/m/infer")
        .body(Poison)
        .unwrap();
    let err = run(ModelFromBodyLayer::default(), req).await.unwrap_err();
    assert_eq!(invalid(&err), ("body", InvalidReason::Unreadable));
}

fn stripping() -> ModelFromBodyLayer {
    ModelFromBodyLayer::builder()
        .strip_routing_headers(true)
        .build()
        .unwrap()
}

#[tokio::test]
async fn stripped_routing_headers_neither_route_nor_reach_the_inner_service() {
    let body = r#"{"model": "llama-3-8b"}"#;
    let evil = |path: &str, body: &str| {
        http::Request::post(path)
            .header("x-model-id", "evil")
            .header("x-request-kind", "update")
            .header("x-urgency", "critical")
            .header("x-other", "kept")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    };
    let seen = run(stripping(), evil("/v1/completions", body))
        .await
        .unwrap();
    let mut expected = RouteInfo::new(ModelId::new("llama-3-8b").unwrap());
    expected.payload_bytes = Some(body.len() as u64);
    assert_eq!(
        seen.route,
        Some(expected),
        "the body's model, inference, normal"
    );
    for name in ["x-model-id", "x-request-kind", "x-urgency"] {
        assert!(!seen.headers.contains_key(name), "{name} passed on");
    }
    assert_eq!(seen.headers["x-other"], "kept");
    assert_eq!(seen.body, body);

    // The path's model, not the header's.
    let seen = run(stripping(), evil("/v2/models/resnet/infer", "{}"))
        .await
        .unwrap();
    assert_eq!(seen.route.unwrap().model.as_str(), "resnet");
    assert!(!seen.headers.contains_key("x-model-id"));

    // No model in the body: the header does not stand in for it.
    let err = run(stripping(), evil("/v1/completions", "{}"))
        .await
        .unwrap_err();
    assert_eq!(invalid(&err), ("body", InvalidReason::Missing));

    // An invalid kind is not an error once ignored.
    let req = http::Request::post("/v1/completions")
        .header("x-request-kind", "write")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert!(run(stripping(), req).await.is_ok());

    // The server's own extension is still honoured.
    let route = RouteInfo::new(ModelId::new("from-ext").unwrap());
    let mut req = evil("/v1/completions", "not json");
    req.extensions_mut().insert(route.clone());
    let seen = run(stripping(), req).await.unwrap();
    assert_eq!(seen.route, Some(route));
    assert!(!seen.headers.contains_key("x-model-id"));

    // Off (the default): the header routes, as before.
    let seen = run(ModelFromBodyLayer::default(), evil("/v1/completions", body))
        .await
        .unwrap();
    assert!(seen.route.is_none());
    assert_eq!(seen.headers["x-model-id"], "evil");
}

#[tokio::test]
async fn a_body_that_cannot_be_read_is_the_clients_invalid_route() {
    let req = http::Request::post("/v1/completions").body(Poison).unwrap();
    let err = run(ModelFromBodyLayer::default(), req).await.unwrap_err();
    let err = err.downcast_ref::<InvalidRoute>().expect("typed");
    assert_eq!(
        (err.source, &err.reason),
        ("body", &InvalidReason::Unreadable)
    );
}

#[tokio::test]
async fn kserve_v2_paths_are_not_parsed() {
    for (path, name) in [
        ("/v2/models/resnet-50/infer", "resnet-50"),
        ("/v2/models/resnet-50/versions/3/infer", "resnet-50"),
        ("/v2/models/bert:lora-a/versions/v1.2/infer", "bert:lora-a"),
    ] {
        let req = http::Request::post(path)
            .header("content-length", "7")
            .header("x-urgency", "CRITICAL")
            .body(Full::new(Bytes::from("tensors")))
            .unwrap();
        let seen = run(ModelFromBodyLayer::default(), req).await.unwrap();
        let mut expected = RouteInfo::new(ModelId::new(name).unwrap());
        expected.urgency = Urgency::Critical;
        expected.payload_bytes = Some(7);
        assert_eq!(seen.route, Some(expected), "{path}");
        assert_eq!(seen.body, "tensors");
    }
    let req = http::Request::post("/v2/models//infer")
        .body(Poison)
        .unwrap();
    let err = run(ModelFromBodyLayer::default(), req).await.unwrap_err();
    assert_eq!(invalid(&err), ("path", InvalidReason::Empty));
    // Another KServe path (not `infer`) falls back to the body.
    let seen = run(
        ModelFromBodyLayer::default(),
        post("/v2/models/a/ready", r#"{"model":"b"}"#),
    )
    .await
    .unwrap();
    assert_eq!(model(&seen), "b");
}

#[tokio::test]
async fn invalid_route_headers_fail_before_the_body_is_read() {
    let req = http::Request::post("/v1/completions")
        .header("x-request-kind", "write")
        .body(Poison)
        .unwrap();
    let err = run(ModelFromBodyLayer::default(), req).await.unwrap_err();
    assert_eq!(
        invalid(&err),
        ("x-request-kind", InvalidReason::Unrecognized)
    );
}

#[tokio::test]
async fn balancer_routes_by_body_model() {
    let backends = ["gpu-0", "gpu-1", "gpu-2"].map(|name| {
        let endpoint = service_fn(move |req: http::Request<Full<Bytes>>| async move {
            let model = req
                .extensions()
                .get::<RouteInfo>()
                .unwrap()
                .model
                .to_string();
            let body = req.into_body().collect().await?.to_bytes();
            let reply = format!("{name} {model} {}", String::from_utf8_lossy(&body));
            Ok::<_, BoxError>(http::Response::new(reply))
        });
        Backend::new(BackendId::new(name).unwrap(), endpoint)
    });
    let balancer =
        ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default()).unwrap();
    let svc = ServiceBuilder::new()
        .layer(ModelFromBodyLayer::default())
        .service(balancer);

    let mut served_by = None;
    for i in 0..5 {
        let body = format!(r#"{{"model":"llama-3-8b","n":{i}}}"#);
        let resp = svc
            .clone()
            .oneshot(post("/v1/completions", &body))
            .await
            .unwrap();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(text.to_vec()).unwrap();
        let (backend, rest) = text.split_once(' ').unwrap();
        assert_eq!(rest, format!("llama-3-8b {body}"));
        // Light traffic: the model stays on one owner.
        assert_eq!(*served_by.get_or_insert(backend.to_owned()), backend);
    }
    let err = svc
        .oneshot(post("/v1/completions", "{}"))
        .await
        .unwrap_err();
    assert_eq!(invalid(&err), ("body", InvalidReason::Missing));
}

proptest! {
    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let layer = ModelFromBodyLayer::builder().limit(128).build().unwrap();
        let req = http::Request::post("/v1/completions").body(Full::new(Bytes::from(body.clone()))).unwrap();
        match rt.block_on(run(layer, req)) {
            Ok(seen) => {
                prop_assert!(seen.route.is_some());
                prop_assert_eq!(&seen.body[..], &body[..]);
            }
            Err(err) => prop_assert!(err.is::<InvalidRoute>() || err.is::<PayloadTooLarge>(), "{}", err),
        }
    }

    #[test]
    fn arbitrary_models_in_json(name in ".{0,40}") {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let body = serde_json::json!({ "prompt": [1, {"a": null}], "model": name }).to_string();
        let result = rt.block_on(run(ModelFromBodyLayer::default(), post("/", &body)));
        match (ModelId::new(&name), result) {
            (Ok(id), Ok(seen)) => prop_assert_eq!(seen.route.unwrap().model, id),
            (Err(want), Err(err)) => prop_assert_eq!(invalid(&err), ("body", want.reason)),
            (want, got) => prop_assert!(false, "{:?} vs {:?}", want, got),
        }
    }
}

#[tokio::test]
async fn a_kserve_v2_path_name_is_percent_decoded_and_validated() {
    let route = |path: &str| {
        let req = http::Request::post(path)
            .body(Full::new(Bytes::from("not json")))
            .unwrap();
        run(ModelFromBodyLayer::default(), req)
    };
    // The same model as `{"model": "模"}` or `{"model": "org/m"}`.
    for (path, name) in [
        ("/v2/models/%E6%A8%A1/infer", "模"),
        ("/v2/models/org%2Fm/infer", "org/m"),
        ("/v2/models/plain/infer", "plain"),
        ("/v2/models/%25/infer", "%"),
        ("/v2/models/a/versions/2/infer", "a"),
    ] {
        let seen = route(path).await.unwrap();
        assert_eq!(seen.route.unwrap().model.as_str(), name, "{path}");
    }
    for (path, reason) in [
        ("/v2/models/%FF%FE/infer", InvalidReason::NotText),
        ("/v2/models/a%01b/infer", InvalidReason::ForbiddenCharacter),
        ("/v2/models/a%20b/infer", InvalidReason::ForbiddenCharacter),
        // A `%` that escapes nothing is refused, not passed on as written
        // (`%` would then name the same model as `%25`).
        ("/v2/models/%zz/infer", InvalidReason::BadEscape),
        ("/v2/models/%/infer", InvalidReason::BadEscape),
        ("/v2/models/a%2/infer", InvalidReason::BadEscape),
        ("/v2/models/a%2g/infer", InvalidReason::BadEscape),
        // An inference path of the wrong shape is the path's error, not a
        // body to read.
        ("/v2/models/a/versions//infer", InvalidReason::Unrecognized),
        (
            "/v2/models/a/versions/1/2/infer",
            InvalidReason::Unrecognized,
        ),
        ("/v2/models/a/b/infer", InvalidReason::Unrecognized),
    ] {
        let err = route(path).await.unwrap_err();
        let err = err.downcast_ref::<InvalidRoute>().expect("typed");
        assert_eq!((err.source, &err.reason), ("path", &reason), "{path}");
    }
}
