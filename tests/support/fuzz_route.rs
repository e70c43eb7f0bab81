//! Route extraction's invariants on arbitrary input, shared by the fuzz
//! targets (`fuzz/fuzz_targets/route_*.rs`, which include this file with
//! `#[path]`) and the proptest cases of `tests/fuzz_inputs.rs`: one
//! definition of what must hold, checked by both.
//!
//! Each `*_from_bytes` turns raw bytes into one input shape (the fuzzers'
//! and proptest's arbitrary bytes go through it), and each `check_*` runs
//! the real code on that shape and panics — a finding — when an invariant
//! does not hold: never a panic inside the crate, every error typed and
//! naming its source, every accepted model ID valid and round-tripping,
//! the body the inner service gets equal to the bytes sent, a body over
//! the limit a `PayloadTooLarge` and never read past it.
//!
//! Nothing here needs a runtime: the bodies and the inner service are
//! always ready, so a future is polled to its end with a no-op waker.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Either, Full};
use tower_layer::Layer;
use tower_model_balance::error::{BoxError, InvalidReason, InvalidRoute, PayloadTooLarge};
use tower_model_balance::route::{ModelFromBodyLayer, ModelId, RequestKind, RouteInfo, Urgency};
use tower_service::Service;

/// The header names a record can pick: the four the route reads (one in
/// mixed case: names are case-insensitive) and one it must ignore.
pub const NAMES: [&str; 6] = [
    "x-model-id",
    "x-request-kind",
    "x-urgency",
    "content-length",
    "X-Model-Id",
    "x-model",
];

/// The words `x-request-kind` and `x-urgency` take.
pub const WORDS: [&str; 5] = ["inference", "update", "normal", "high", "critical"];

/// Header pairs from bytes: records split on `\n` (never valid in a header
/// value); a record's first byte picks a name from [`NAMES`] or, past
/// them, takes the name from the record itself up to a `:`; the rest is
/// the value. Names and values `http` refuses are left out, as a server
/// would never hand them over.
pub fn headers_from_bytes(data: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for record in data.split(|&b| b == b'\n') {
        let Some((&pick, rest)) = record.split_first() else {
            continue;
        };
        let (name, value) = match NAMES.get(usize::from(pick % 8)) {
            Some(name) => (
                HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                rest,
            ),
            None => {
                let cut = rest.iter().position(|&b| b == b':').unwrap_or(rest.len());
                let Ok(name) = HeaderName::from_bytes(&rest[..cut]) else {
                    continue;
                };
                (name, rest.get(cut + 1..).unwrap_or_default())
            }
        };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            map.append(name, value);
        }
    }
    map
}

/// What a request's headers must route to, worked out apart from the
/// crate's one-pass scan: each header's values looked up by name, the
/// checks in the documented order (model ID, kind, urgency, size).
pub fn expected_route(
    headers: &HeaderMap,
) -> Result<(String, RequestKind, Urgency, Option<u64>), (&'static str, InvalidReason)> {
    let one = |name: &'static str| -> Result<Option<&HeaderValue>, (&'static str, InvalidReason)> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        match values.next() {
            Some(_) => Err((name, InvalidReason::Duplicate)),
            None => Ok(first),
        }
    };
    let text = |name: &'static str, value: &HeaderValue| {
        std::str::from_utf8(value.as_bytes())
            .map(str::to_owned)
            .map_err(|_| (name, InvalidReason::NotText))
    };
    let model = match one("x-model-id")? {
        None => return Err(("x-model-id", InvalidReason::Missing)),
        Some(value) => text("x-model-id", value)?,
    };
    if let Some(reason) = model_id_fault(&model) {
        return Err(("x-model-id", reason));
    }
    let word = |name: &'static str, words: &[&str]| -> Result<Option<usize>, _> {
        let Some(value) = one(name)? else {
            return Ok(None);
        };
        let found = words
            .iter()
            .position(|w| value.as_bytes().eq_ignore_ascii_case(w.as_bytes()));
        match found {
            Some(i) => Ok(Some(i)),
            None => {
                text(name, value)?;
                Err((name, InvalidReason::Unrecognized))
            }
        }
    };
    let kind = match word("x-request-kind", &WORDS[..2])? {
        None | Some(0) => RequestKind::Inference,
        Some(_) => RequestKind::Update,
    };
    let urgency = match word("x-urgency", &WORDS[2..])? {
        None | Some(0) => Urgency::Normal,
        Some(1) => Urgency::High,
        Some(_) => Urgency::Critical,
    };
    let size = match one("content-length")? {
        None => None,
        Some(value) => Some(
            text("content-length", value)?
                .parse::<u64>()
                .map_err(|_| ("content-length", InvalidReason::Unrecognized))?,
        ),
    };
    Ok((model, kind, urgency, size))
}

/// Why `name` is not a valid model ID, by the documented rule (non-empty,
/// at most 256 bytes, no whitespace or control character), or `None`.
pub fn model_id_fault(name: &str) -> Option<InvalidReason> {
    if name.is_empty() {
        Some(InvalidReason::Empty)
    } else if name.len() > ModelId::MAX_LEN {
        Some(InvalidReason::TooLong(ModelId::MAX_LEN))
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(InvalidReason::ForbiddenCharacter)
    } else {
        None
    }
}

/// An accepted model ID is valid, round-trips through [`ModelId::new`] and
/// carries the xxh3 hash of its bytes.
pub fn check_model(model: &ModelId, expected: &str) {
    assert_eq!(model.as_str(), expected);
    assert!(!model.as_str().is_empty());
    assert_eq!(model_id_fault(model.as_str()), None, "{model:?}");
    let again = ModelId::new(model.as_str()).expect("an accepted model ID is valid");
    assert_eq!(&again, model);
    assert_eq!(model.to_string().parse::<ModelId>().as_ref(), Ok(model));
    assert_eq!(
        model.hash64(),
        xxhash_rust::xxh3::xxh3_64(model.as_str().as_bytes())
    );
}

/// Header route: [`RouteInfo::from_headers`] and `from_request` agree with
/// [`expected_route`]; through [`ModelFromBodyLayer`], a request with
/// `x-model-id` goes on untouched (body unread, no route inserted), one
/// without it fails on the same header the route names, or reads its body.
pub fn check_headers(headers: &HeaderMap) {
    let expected = expected_route(headers);
    let got = RouteInfo::from_headers(headers);
    match (&got, &expected) {
        (Ok(route), Ok((model, kind, urgency, size))) => {
            check_model(&route.model, model);
            assert_eq!((route.kind, route.urgency), (*kind, *urgency));
            assert_eq!(route.payload_bytes, *size);
        }
        (Err(err), Err((source, reason))) => {
            assert_eq!((err.source, err.reason), (*source, *reason), "{headers:?}");
            assert!(err.to_string().contains(err.source));
        }
        _ => panic!("{headers:?}: got {got:?}, expected {expected:?}"),
    }
    let mut req = http::Request::new(());
    *req.headers_mut() = headers.clone();
    assert_eq!(RouteInfo::from_request(&req), got);

    // Through the body layer, with a body that must not be read when a
    // header names the model.
    let body = r#"{"model":"from-body"}"#;
    let mut req = http::Request::post("/v1/completions")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("a valid request");
    *req.headers_mut() = headers.clone();
    let has_model = headers.contains_key("x-model-id");
    let result = run_layer(&layer(64 * 1024), req);
    match (result, has_model) {
        (Ok(seen), true) => {
            assert!(seen.route.is_none(), "no route inserted: {headers:?}");
            assert!(
                seen.unread,
                "the body is not read when a header names the model"
            );
            assert_eq!(&seen.headers, headers);
        }
        (Err(err), true) => panic!("a header route is passed on, not judged: {err}"),
        (Ok(seen), false) => {
            let route = seen.route.expect("a route from the body");
            check_model(&route.model, "from-body");
            // Kind and urgency are the headers'; a size is too if given.
            let (_, kind, urgency, size) = expected_traits(headers).expect("valid traits");
            assert_eq!((route.kind, route.urgency), (kind, urgency));
            assert_eq!(route.payload_bytes, size.or(Some(body.len() as u64)));
            assert_eq!(seen.buffered.as_deref(), Some(body.as_bytes()));
        }
        (Err(err), false) => {
            let err = err.downcast_ref::<InvalidRoute>().expect("an InvalidRoute");
            let traits = expected_traits(headers).expect_err("invalid traits");
            assert_eq!((err.source, err.reason), traits);
        }
    }
}

/// [`expected_route`] with the model ID header ignored (the layers that
/// find the model elsewhere read only kind, urgency and size).
fn expected_traits(
    headers: &HeaderMap,
) -> Result<(String, RequestKind, Urgency, Option<u64>), (&'static str, InvalidReason)> {
    let mut rest = headers.clone();
    rest.remove("x-model-id");
    rest.insert("x-model-id", HeaderValue::from_static("m"));
    expected_route(&rest)
}

/// A KServe v2 path case: the path, and the model name it was built
/// around as raw bytes (before percent-encoding), when it was built as one.
#[derive(Debug, Clone)]
pub struct PathCase {
    /// The request's path (and maybe query).
    pub path: String,
    /// The name the path carries, decoded, if built from a template.
    pub name: Option<Vec<u8>>,
}

/// A path from bytes: the first byte picks a shape — the plain and
/// versioned KServe v2 inference paths around a name made of the rest
/// (bytes a path cannot hold percent-encoded, `%` itself kept raw when the
/// second byte is odd so that stray and broken escapes occur), or the
/// rest as a path of its own.
pub fn path_from_bytes(data: &[u8]) -> PathCase {
    let (shape, rest) = data.split_first().map_or((0, data), |(&b, r)| (b, r));
    let raw_percent = rest.first().is_some_and(|b| b % 2 == 1);
    let (name, version) = match rest.iter().position(|&b| b == 0) {
        Some(cut) => (&rest[..cut], &rest[cut + 1..]),
        None => (rest, &b"1"[..]),
    };
    match shape % 4 {
        0 => PathCase {
            path: format!("/v2/models/{}/infer", encode(name, raw_percent)),
            name: (!raw_percent).then(|| name.to_vec()),
        },
        1 => PathCase {
            path: format!(
                "/v2/models/{}/versions/{}/infer",
                encode(name, raw_percent),
                encode(version, false)
            ),
            name: (!raw_percent && !version.is_empty()).then(|| name.to_vec()),
        },
        2 => PathCase {
            path: format!("/v2/models/{}", encode(rest, true)),
            name: None,
        },
        _ => PathCase {
            path: String::from_utf8_lossy(rest).into_owned(),
            name: None,
        },
    }
}

/// Percent-encodes every byte but unreserved ASCII (and `%` when
/// `raw_percent`).
pub fn encode(bytes: &[u8], raw_percent: bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (raw_percent && b == b'%') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-decodes `text` as a server does: `%` and two hex digits is a
/// byte, anything else stands for itself.
pub fn decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if let (b'%', Some(hi), Some(lo)) = (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// KServe v2 path: a templated name is found, percent-decoded and
/// validated with errors from `path`, the body left unread; any other
/// path reads the model from the body. Paths `http` refuses are skipped.
pub fn check_path(case: &PathCase) {
    let Ok(uri) = case.path.parse::<http::Uri>() else {
        assert!(
            case.name.is_none(),
            "a templated path is a valid URI: {case:?}"
        );
        return;
    };
    let body = r#"{"model":"from-body"}"#;
    let req = http::Request::post(uri.clone())
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("a valid request");
    let result = run_layer(&layer(1024), req);
    let kserve = uri.path().starts_with("/v2/models/") && uri.path().ends_with("/infer");
    match result {
        Ok(seen) if seen.unread => {
            assert!(kserve, "only a KServe v2 path skips the body: {case:?}");
            let route = seen.route.expect("a route from the path");
            let name = route.model.as_str().to_owned();
            check_model(&route.model, &name);
            if let Some(expected) = &case.name {
                assert_eq!(name.as_bytes(), &expected[..], "{case:?}");
            }
            // The name is one percent-decoded segment of the path.
            let segment = uri.path()["/v2/models/".len()..].split('/').next();
            assert_eq!(segment.map(decode).as_deref(), Some(name.as_bytes()));
        }
        Ok(seen) => {
            let route = seen.route.expect("a route from the body");
            check_model(&route.model, "from-body");
            assert_eq!(seen.buffered.as_deref(), Some(body.as_bytes()));
            assert!(
                case.name.is_none(),
                "a templated path is KServe v2: {case:?}"
            );
        }
        Err(err) => {
            let err = err.downcast_ref::<InvalidRoute>().expect("an InvalidRoute");
            assert_eq!(err.source, "path", "{case:?}");
            assert!(kserve, "{case:?}");
            if let Some(name) = &case.name {
                let reason = match std::str::from_utf8(name) {
                    Err(_) => Some(InvalidReason::NotText),
                    Ok(text) => model_id_fault(text),
                };
                assert_eq!(Some(err.reason), reason, "{case:?}");
            }
        }
    }
}

/// A JSON body case: the layer's limit, how the body arrives, and its bytes.
#[derive(Debug, Clone)]
pub struct BodyCase {
    /// The layer's body limit, 1 ..= 4096 bytes.
    pub limit: usize,
    /// Bytes per frame (0: one frame).
    pub chunk: usize,
    /// Whether the request carries a correct `content-length`.
    pub content_length: bool,
    /// A size hint the body claims, whatever its real size (a lying client).
    pub hint: Option<u64>,
    /// The body.
    pub body: Vec<u8>,
}

/// A body case from bytes: two bytes of limit, one of chunk size, one of
/// flags (bit 0: `content-length`; bit 1: claim a huge size; bit 2: claim
/// a size of 0), then the body.
pub fn body_from_bytes(data: &[u8]) -> BodyCase {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let flags = byte(3);
    let hint = match flags & 6 {
        2 => Some(u64::MAX / 2),
        4 => Some(0),
        _ => None,
    };
    BodyCase {
        limit: 1 + usize::from(u16::from_le_bytes([byte(0), byte(1)]) % 4096),
        chunk: usize::from(byte(2) % 64),
        content_length: flags & 1 == 1,
        hint,
        body: data.get(4..).unwrap_or_default().to_vec(),
    }
}

/// JSON body: a body over the limit is `PayloadTooLarge` with that limit;
/// within it, the inner service gets every byte unchanged and a route
/// whose model is the top-level `"model"` string (checked against
/// `serde_json`'s own reading where that succeeds), or the error is an
/// `InvalidRoute` from `body` with a reason that reading agrees with.
pub fn check_body(case: &BodyCase) {
    let body = Chunks::new(&case.body, case.chunk, case.hint);
    let mut req = http::Request::post("/v1/chat/completions")
        .body(body)
        .expect("a valid request");
    if case.content_length {
        let length = HeaderValue::from(case.body.len());
        req.headers_mut()
            .insert(http::header::CONTENT_LENGTH, length);
    }
    let result = run_layer(&layer(case.limit), req);
    let over = case.body.len() > case.limit;
    let err = match result {
        Ok(seen) => {
            assert!(!over, "a body over the limit is refused");
            assert!(!seen.unread);
            assert_eq!(
                seen.buffered.as_deref(),
                Some(&case.body[..]),
                "body changed"
            );
            let route = seen.route.expect("a route from the body");
            assert_eq!(route.payload_bytes, Some(case.body.len() as u64));
            let name = route.model.as_str().to_owned();
            check_model(&route.model, &name);
            if let Some(object) = json_object(&case.body) {
                let model = object.get("model").and_then(|m| m.as_str());
                assert_eq!(model, Some(name.as_str()), "serde_json reads another model");
            }
            return;
        }
        Err(err) => err,
    };
    if over {
        let too_large = err.downcast_ref::<PayloadTooLarge>();
        assert_eq!(too_large, Some(&PayloadTooLarge::new(case.limit)), "{err}");
        return;
    }
    assert!(!err.is::<PayloadTooLarge>(), "within the limit: {err}");
    let err = err.downcast_ref::<InvalidRoute>().expect("an InvalidRoute");
    assert_eq!(err.source, "body");
    let parsed = serde_json::from_slice::<serde_json::Value>(&case.body);
    match (err.reason, &parsed) {
        // What serde_json reads as JSON is JSON to the layer too.
        (InvalidReason::NotJson, Ok(value)) => assert!(!value.is_object(), "{value}"),
        (InvalidReason::NotJson, Err(_)) => {}
        (reason, Ok(serde_json::Value::Object(object))) => {
            let model = object.get("model");
            match reason {
                // Once only, so serde_json's reading is the layer's.
                InvalidReason::Missing => assert!(model.is_none_or(|m| m.is_null())),
                InvalidReason::Unrecognized => {
                    assert!(model.is_some_and(|m| !m.is_null() && !m.is_string()))
                }
                // serde_json keeps the last; nothing to compare.
                InvalidReason::Duplicate => {}
                fault => {
                    let name = model.and_then(|m| m.as_str()).expect("a model string");
                    assert_eq!(model_id_fault(name), Some(fault), "{name:?}");
                }
            }
        }
        (reason, Ok(value)) => panic!("{reason:?} for a non-object {value}"),
        // Deeper than serde_json's recursion limit, or a number out of
        // its range: the layer skims what serde_json refuses to build.
        (_, Err(_)) => {}
    }
}

/// The body as a JSON object, if `serde_json` reads it as one.
fn json_object(body: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_slice(body).ok()? {
        serde_json::Value::Object(object) => Some(object),
        _ => None,
    }
}

/// The layer under test, with `limit`.
pub fn layer(limit: usize) -> ModelFromBodyLayer {
    ModelFromBodyLayer::builder()
        .limit(limit)
        .build()
        .expect("a limit within range")
}

/// What the inner service was handed.
#[derive(Debug)]
pub struct Seen {
    /// The route the layer inserted, if any.
    pub route: Option<RouteInfo>,
    /// Whether the body was passed on unread (`Either::Left`).
    pub unread: bool,
    /// The buffered body (`Either::Right`), collected.
    pub buffered: Option<Bytes>,
    /// The request's headers.
    pub headers: HeaderMap,
}

/// Runs `req` through `layer` in front of [`Echo`].
pub fn run_layer<B>(layer: &ModelFromBodyLayer, req: http::Request<B>) -> Result<Seen, BoxError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut svc = layer.layer(Echo);
    let req = block_on(svc.call(req))?;
    let route = req.extensions().get::<RouteInfo>().cloned();
    let headers = req.headers().clone();
    let (unread, buffered) = match req.into_body() {
        Either::Left(_) => (true, None),
        Either::Right(full) => {
            let collected = block_on(full.collect()).unwrap_or_else(|e| match e {});
            (false, Some(collected.to_bytes()))
        }
    };
    Ok(Seen {
        route,
        unread,
        buffered,
        headers,
    })
}

/// The inner service: hands back the request it got.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

impl<R> Service<R> for Echo {
    type Response = R;
    type Error = Infallible;
    type Future = Ready<Result<R, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        ready(Ok(req))
    }
}

/// A body in frames of `chunk` bytes (one frame if 0), claiming `hint` as
/// its exact size if given.
pub struct Chunks {
    frames: VecDeque<Bytes>,
    hint: Option<u64>,
}

impl Chunks {
    /// `bytes` in frames of `chunk`.
    pub fn new(bytes: &[u8], chunk: usize, hint: Option<u64>) -> Self {
        let bytes = Bytes::copy_from_slice(bytes);
        let frames = match chunk {
            0 => VecDeque::from([bytes]),
            n => (0..bytes.len())
                .step_by(n)
                .map(|at| bytes.slice(at..bytes.len().min(at + n)))
                .collect(),
        };
        Self { frames, hint }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.frames.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// Polls `fut` to its end with a no-op waker: everything here is ready.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("a future over ready bodies did not finish");
}
