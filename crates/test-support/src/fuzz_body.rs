//! The model ID from a KServe v2 path or a JSON body, through
//! `ModelFromBodyLayer`: invariants on arbitrary input, shared by the
//! `route_path` and `route_body` fuzz targets and `tests/config/fuzz_inputs.rs`
//! (with `fuzz_layer.rs`, which they include beside it).
//!
//! `path_from_bytes` and `body_from_bytes` turn raw bytes into a case;
//! `check_path` and `check_body` run the real layer and panic — a finding
//! — when an invariant does not hold: a templated path's name is found
//! and percent-decoded, its body passed on unparsed; a body over the limit is a
//! `PayloadTooLarge` and never read past it; within it the inner service
//! gets every byte unchanged and the model `serde_json` reads.

use bytes::Bytes;
use http::header::HeaderValue;
use http_body_util::Full;
use tower_model_balance::error::{InvalidReason, InvalidRoute, PayloadTooLarge};

use crate::fuzz_layer::{check_model, layer, model_id_fault, run_layer, Chunks};

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
/// validated with errors from `path`, the body passed on unparsed; any other
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
    // The path's first segment after `/v2/models/`, percent-decoded.
    let segment = uri
        .path()
        .strip_prefix("/v2/models/")
        .and_then(|rest| rest.split('/').next())
        .map(decode);
    match result {
        Ok(seen)
            if kserve
                && seen.route.as_ref().map(|r| r.model.as_str().as_bytes())
                    == segment.as_deref() =>
        {
            assert_eq!(seen.body, body.as_bytes(), "the body goes on unchanged");
            let route = seen.route.expect("a route from the path");
            let name = route.model.as_str().to_owned();
            check_model(&route.model, &name);
            if let Some(expected) = &case.name {
                assert_eq!(name.as_bytes(), &expected[..], "{case:?}");
            }
        }
        Ok(seen) => {
            let route = seen.route.expect("a route from the body");
            check_model(&route.model, "from-body");
            assert_eq!(seen.body, body.as_bytes());
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
            assert_eq!(&seen.body[..], &case.body[..], "body changed");
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
        // A syntax error or a cut body is what serde_json cannot read.
        (InvalidReason::MalformedJson { .. } | InvalidReason::TruncatedJson, parsed) => {
            assert!(parsed.is_err(), "{parsed:?}")
        }
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
