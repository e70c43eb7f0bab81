//! Route extraction from headers: its invariants on arbitrary input,
//! shared by the `route_headers` fuzz target and `tests/config/fuzz_inputs.rs`
//! (with `fuzz_layer.rs`, its harness).
//!
//! `headers_from_bytes` turns raw bytes into a header map (the fuzzer's
//! and proptest's arbitrary bytes go through it); `check_headers` runs the
//! real code on it and panics — a finding — when an invariant does not
//! hold: the route agrees with a reference reading of the headers, errors
//! name their header, an accepted model ID is valid and round-trips, and
//! `ModelFromBodyLayer` passes a header route on untouched.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::Full;
use tower_model_balance::error::{InvalidReason, InvalidRoute};
use tower_model_balance::route::{RequestKind, RouteInfo, Urgency};

use crate::fuzz_layer::{check_model, layer, model_id_fault, run_layer};

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

/// A route as the reference reading sees it (model ID, kind, urgency,
/// size), or the header and reason it refuses.
pub type Expected =
    Result<(String, RequestKind, Urgency, Option<u64>), (&'static str, InvalidReason)>;

/// What a request's headers must route to, worked out apart from the
/// crate's one-pass scan: each header's values looked up by name, the
/// checks in the documented order (model ID, kind, urgency, size).
pub fn expected_route(headers: &HeaderMap) -> Expected {
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

/// Header route: [`RouteInfo::from_headers`] and `from_request` agree with
/// [`expected_route`]; through [`ModelFromBodyLayer`], a request with
/// `x-model-id` goes on untouched (body not parsed, no route inserted), one
/// without it fails on the same header the route names, or reads its body.
///
/// [`ModelFromBodyLayer`]: tower_model_balance::route::ModelFromBodyLayer
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

    // Through the body layer, with a body that must not be parsed when a
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
            assert_eq!(seen.body, body.as_bytes(), "the body goes on unchanged");
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
            assert_eq!(seen.body, body.as_bytes());
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
fn expected_traits(headers: &HeaderMap) -> Expected {
    let mut rest = headers.clone();
    rest.remove("x-model-id");
    rest.insert("x-model-id", HeaderValue::from_static("m"));
    expected_route(&rest)
}
